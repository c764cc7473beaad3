// ONNX ModelProto -> `func.func @forward` in the tec dialect.
#ifndef TEC_FRONTEND_IMPORTER_H
#define TEC_FRONTEND_IMPORTER_H

#include "frontend/ImportOptions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tec {

/// An initializer that became a `tec.param` argument. `bytes` points into the parsed model or a
/// memory-mapped external data file owned by the ImportedModel: no copy is made.
struct ParamData {
  std::string name;
  mlir::RankedTensorType type;
  llvm::ArrayRef<char> bytes;
};

struct ImportedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// `@forward`'s arguments are the graph inputs, then one per param, in this order.
  std::vector<std::string> inputNames;
  std::vector<ParamData> params;
  std::vector<std::string> outputNames;
  int64_t opset = 0;
  std::string producer;
  /// The ONNX model with the params' data left out (the rest kept): what `tec export` fills with trained
  /// weights to write an ONNX model back.
  std::string onnxWithoutParams;
  /// Initializers that are a transposed copy of a param (an exporter untying lm_head from the embedding),
  /// imported as that param's transpose: copy name -> param name. `tec export` writes them from the param.
  std::map<std::string, std::string> transposedCopies;
  /// One-element float initializers of a model not exported by PyTorch taken as constants (a hand-built
  /// graph's 1/sqrt(d) and the like: other producers name scalar factors as they please, where PyTorch's
  /// exporters name every parameter by its module path). The compile summary lists them; --trainable
  /// makes one a param.
  std::vector<std::string> scalarConstants;
  /// Params that several nodes of one kind read and whose elements are all equal (a fresh model's norm
  /// weights and biases, its layer scales) or that nodes of one kind in several modules read (deep-copied
  /// layers' weights): the dynamo exporter's optimizer merges equal initializers into one, so what PyTorch
  /// trains as separate params trains here as one, tied (an intended tie, ALBERT's shared layers, looks the
  /// same). The compile summary says so, and how to export them apart.
  /// (name, readers: "LayerNormalization x 12", "MatMul in 0.layers.0.linear1 and 1 other module")
  std::vector<std::pair<std::string, std::string>> mergedParams;
  /// Params the exporter had merged into another (ImportedModel::mergedParams), each an Identity of it in
  /// the file: name -> the initializer it was read from. `tec export` writes each as an initializer again.
  std::map<std::string, std::string> mergedCopies;
  /// float64 constants and casts taken as float32 (GraphImporter::narrowDoubles).
  int64_t narrowedDoubles = 0;
  /// Embedding tables' padding rows (PyTorch's padding_idx, found as the one all-zero row): the gathers
  /// pass them no gradient, so they stay untrained as in PyTorch. (param, row)
  std::vector<std::pair<std::string, int64_t>> paddingRows;
  /// Params of a TorchScript export named by the exporter whose values repeat as a table's read through an
  /// index: torch.onnx's constant folding computed them from a param in eval mode (Swin's relative position
  /// bias, `table[index]`), so the table is gone from the file and each of its copies trains apart here,
  /// where PyTorch trains the table with the copies' gradients summed. The summary says so and how to export
  /// the table (do_constant_folding=False). (name, "512 nonzero values, 98 distinct")
  std::vector<std::pair<std::string, std::string>> foldedTables;
  /// Params of a dynamo export that its optimizer computed through an op of its own from module tensors
  /// absent from the file (timm's and HF's ViT: cls_token expanded over a static batch, named `expand`):
  /// each copy trains apart here, where PyTorch trains the tensor with their gradients summed. The summary
  /// says so and how to export the tensor (optimize=False). (name, "expand of cls_token")
  std::vector<std::pair<std::string, std::string>> foldedOps;
  /// Convolution (and Gemm) weights and biases of a PyTorch export named as its exporter names what it
  /// computed: TorchScript's constant folding "onnx::Conv_12", the dynamo exporter's BatchNorm fusion
  /// "conv.weight" with "conv.weight_bias". They hold a BatchNormalization folded into the convolution
  /// before it (eval mode), or a weight_norm's g * v / |v|; the module's params are gone from the file, and
  /// training these is not training them: PyTorch's steps on a BatchNorm's scale or on g and v move the
  /// product otherwise. The summary says so and how to export the params (do_constant_folding=False,
  /// optimize=False).
  std::vector<std::string> computedConvParams;
  /// Owns the memory that `params` point into.
  std::shared_ptr<void> storage;
};

/// Reads, validates and imports an ONNX model file. External data is resolved next to it.
llvm::Expected<ImportedModel> importOnnxFile(mlir::MLIRContext &context, llvm::StringRef path,
                                             const ImportOptions &options = {});

/// The ONNX operator types the importer accepts (default domain, opsets 7-21).
std::vector<std::string> supportedOnnxOps();

/// Opsets of the default ONNX domain the importer accepts: from 7, where elementwise ops took numpy
/// broadcasting; the importers read each operator's older form (attributes that became inputs,
/// Softmax's 2-D coercion before 13). An older model imports when none of its operators changed since.
inline constexpr int64_t kMinOpset = 7, kMaxOpset = 21;

} // namespace tec

#endif // TEC_FRONTEND_IMPORTER_H
