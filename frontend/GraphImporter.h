// The ONNX importer's class, private to the frontend (onnx-mlir's layout): Importer.cpp has the graph
// (checks, values, the importer table, run), TensorData.cpp the initializers and constants, ops/ one file
// per operator family.
#ifndef TEC_FRONTEND_GRAPHIMPORTER_H
#define TEC_FRONTEND_GRAPHIMPORTER_H

#include "frontend/Importer.h"

#include "ir/TecBuilders.h"
#include "ir/TecOps.h"
#include "support/Window.h"
#include "support/Status.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <onnx/onnx_pb.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <array>
#include <cctype>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <numeric>


namespace tec::importer {

using namespace mlir;
using llvm::Error;
using llvm::Expected;


inline Error makeError(ImportErrorKind kind, const llvm::Twine &message) {
  return llvm::make_error<ImportError>(kind, escapeControl(message.str())); // names from the model
}

/// Everything the imported IR's params point into.
struct Storage {
  onnx::ModelProto model;
  std::vector<std::unique_ptr<llvm::MemoryBuffer>> mapped;
  std::deque<std::vector<char>> owned;
};

/// ONNX TensorProto data types tec represents; nullptr for the rest.
/// Why a float initializer is a constant the exporter computed rather than a weight, if it is: a value
/// named after the node that made it (torch.onnx's constant folding: "/attn/Where_output_0"), or an
/// additive mask (every element 0 or at most -1e4, as causal masks are; all zeros only for an
/// exporter-named tensor of rank 3 or more, e.g. dynamo's [B, 1, T, T] "val_83"). A mask spans the keys of
/// the scores it is added to: a tensor whose last dim is 1 (GroupNorm's zero-initialized bias as TorchScript
/// writes it, [C, 1, 1] "onnx::Add_20") would move a row's scores alike, which softmax ignores, so it is
/// never taken for one. Training leaves these alone.
inline std::optional<std::string> exporterConstant(llvm::StringRef name, RankedTensorType type, ArrayRef<char> bytes) {
  static const llvm::Regex folded("(^|/)[A-Z][A-Za-z]*_output_[0-9]+$");
  if (folded.match(name))
    return std::string("a value the exporter folded");
  if (!type.getElementType().isF32() || bytes.size() != static_cast<size_t>(type.getNumElements()) * 4 ||
      type.getRank() == 0 || type.getShape().back() < 2)
    return std::nullopt;
  bool masked = false;
  for (size_t i = 0; i < bytes.size(); i += 4) {
    float v;
    std::memcpy(&v, bytes.data() + i, 4);
    if (v != 0.0f && !(v <= -1e4f))
      return std::nullopt;
    masked |= v != 0.0f;
  }
  // All zeros: a mask only when the exporter named it (a model's weights carry their module path).
  if (!masked && (name.contains('.') || type.getRank() < 3))
    return std::nullopt;
  return std::string("an additive mask");
}

/// What the dynamo exporter records of an initializer in its value_info's metadata: torch.export's graph
/// signature kind (PARAMETER, BUFFER, CONSTANT_TENSOR) and, for a tensor its optimizer folded, the values it
/// was folded from. ONNX 1.12's schema has no ValueInfoProto.metadata_props (field 4, ONNX 1.16), so the
/// entries arrive as unknown fields and are parsed here.
struct TorchOrigin {
  std::string kind;
  std::vector<std::string> foldedFrom;
};

/// The metadata_props entries of `message` (ValueInfoProto's field 4, NodeProto's field 9 since ONNX 1.16),
/// which ONNX 1.12's schema keeps as unknown fields.
inline std::vector<onnx::StringStringEntryProto> metadataProps(const google::protobuf::Message &message, int field) {
  std::vector<onnx::StringStringEntryProto> entries;
  const auto &unknown = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    onnx::StringStringEntryProto entry;
    if (unknown.field(i).number() == field &&
        unknown.field(i).type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
        entry.ParseFromString(unknown.field(i).length_delimited()))
      entries.push_back(std::move(entry));
  }
  return entries;
}

/// The strings of a Python list's repr, as the exporters write lists into metadata: "['a', 'b']" -> a, b.
inline llvm::SmallVector<llvm::StringRef> pythonStrings(llvm::StringRef list) {
  llvm::SmallVector<llvm::StringRef> strings;
  auto quote = [](char c) { return c == '\'' || c == '"'; };
  while (true) {
    list = list.drop_until(quote);
    if (list.empty())
      return strings;
    list = list.drop_front();
    strings.push_back(list.take_until(quote));
    list = list.drop_until(quote).drop_front();
  }
}

inline llvm::StringMap<TorchOrigin> torchOrigins(const onnx::GraphProto &graph) {
  constexpr int kValueInfoMetadataProps = 4;
  llvm::StringMap<TorchOrigin> origins;
  for (const auto &vi : graph.value_info()) {
    for (const auto &entry : metadataProps(vi, kValueInfoMetadataProps)) {
      if (entry.key() == "pkg.torch.export.graph_signature.InputSpec.kind") {
        origins[vi.name()].kind = entry.value();
      } else if (entry.key() == "pkg.onnxscript.optimizer.folded_from") {
        for (llvm::StringRef name : pythonStrings(entry.value()))
          origins[vi.name()].foldedFrom.push_back(name.str());
      }
    }
  }
  return origins;
}

/// A name an exporter made up for a value it computed, as opposed to a module's parameter path
/// ("fc.bias", "logit_scale"): TorchScript's "onnx::Mul_12" and "/attn/Constant_output_0", bare numbers
/// (older TorchScript), onnxscript's "val_12".
inline bool isExporterName(llvm::StringRef name) {
  static const llvm::Regex made("(::|(^|/)[A-Z][A-Za-z]*_output_[0-9]+$|^[0-9]+$|^_?val_[0-9]+$)");
  return made.match(name);
}

/// Whether a name in the dynamo exporter's folded_from list is an FX node of an op that computes new values
/// from its inputs (arange, gather, expand, cos, ...): a tensor folded through one is no parameter laid out
/// anew. Layout ops (cat, transpose, view, zeros for padding) and parameter names are not.
inline bool isComputingFxNode(llvm::StringRef name) {
  static const llvm::Regex numbered("^(.*)_[0-9]+$");
  llvm::SmallVector<llvm::StringRef, 2> match;
  llvm::StringRef base = numbered.match(name, &match) ? match[1] : name;
  static const llvm::StringSet<> computing{
      "arange",      "expand",     "gather",      "index",      "index_select", "embedding", "cos",      "sin",
      "mul",         "add",        "sub",         "div",        "pow",          "exp",       "log",      "sqrt",
      "rsqrt",       "neg",        "le",          "lt",         "ge",           "gt",        "eq",       "ne",
      "bitwise_and", "bitwise_or", "bitwise_not", "where",      "new_ones",     "ones_like", "zeros_like",
      "full_like",   "cumsum",     "mean",        "sum",        "masked_fill",  "triu",      "tril",     "repeat",
      "tile",        "matmul",     "mm",          "bmm",        "linear",       "softmax",   "scalar_tensor"};
  return computing.contains(base);
}

/// Whether a name in a folded_from list is an FX node that reads a shape or picks from a tuple (`getitem`,
/// `sym_size_int_3`): no module tensor (timm ViT's attention scale, head_dim ** -0.5, is folded from one).
inline bool isShapeFxNode(llvm::StringRef name) {
  static const llvm::Regex shape("^(getitem|sym_size_int|sym_numel|sym_stride_int|size)(_[0-9]+)?$");
  return shape.match(name);
}

/// How an initializer enters the IR: as a constant (shapes, axes, indices, masks and scalar factors such
/// as 1/sqrt(d), which passes fold and patterns match), or as a param, trained unless `frozen` says why not.
/// Element count alone decides nothing about a float: a one-element parameter (a Linear(8, 1)'s bias,
/// CLIP's logit_scale) trains like any other. What tells a scalar parameter from a scalar factor is what
/// the exporter says (torch.export's signature), how it names values (PyTorch names parameters by module
/// path and made-up values "onnx::Mul_12", "val_3"), or the user (`--trainable`). Of other producers a
/// one-element initializer is a constant, listed as such (`scalarConstant`) so the summary can say so.
struct InitializerRole {
  bool constant = false, scalarConstant = false;
  std::optional<std::string> frozen;
  /// A param the exporter computed from module tensors through an op of its own (ImportedModel::foldedOps).
  std::optional<std::string> foldedOp;
};

inline InitializerRole initializerRole(const onnx::TensorProto &init, Type elt, const llvm::StringMap<TorchOrigin> &origins,
                                bool signedByTorch, bool fromPyTorch, const std::optional<llvm::Regex> &trainable) {
  if (elt.isInteger(1) || elt.isInteger(32) || elt.isInteger(64))
    return {true};
  const bool oneElement = llvm::all_of(init.dims(), [](int64_t d) { return d == 1; });
  if (oneElement && trainable && trainable->match(init.name()))
    return {};
  auto origin = origins.find(init.name());
  if (signedByTorch) {
    // torch.export says what each input of the program was: PARAMETERs train, buffers and constants do
    // not. Of what the exporter's optimizer made, a tensor folded from parameters through layout ops only
    // (a transposed weight; an LSTM's directions packed into one W) is those parameters laid out anew: a
    // param as they were. One folded through ops that compute (positions gathered from an embedding, masks,
    // rotary tables) or from made-up values only (GroupNorm's unit gains), or named like one, is fixed. A
    // tensor with no record and a module's name (BatchNormalization folded into a convolution) is a weight.
    const TorchOrigin none;
    const TorchOrigin &o = origin == origins.end() ? none : origin->second;
    if (o.kind == "PARAMETER")
      return {};
    std::vector<std::string> sources;
    for (const auto &f : o.foldedFrom)
      if (!isExporterName(f) && !isShapeFxNode(f))
        sources.push_back(f);
    // A scalar folded from a parameter (exp(logit_scale)) is no parameter, but the parameter is gone from
    // the export: fixed, and listed with why, never silently.
    if (oneElement && !sources.empty())
      return {false, false,
              "the exporter folded " + llvm::join(sources, ", ") +
                  " into this value, so the parameter itself is not in the model (export with optimize=False to "
                  "train it)"};
    if (oneElement)
      return {true};
    if (!o.kind.empty())
      return {false, false, "a " + llvm::StringRef(o.kind).lower() + " in torch.export's signature, not a parameter"};
    if (!sources.empty() && llvm::none_of(sources, isComputingFxNode)) {
      // The tensor's own name may be the FX node that made it: `expand` folded from ViT's cls_token is the
      // token copied over a static batch. It trains in the tensors' place, listed (the summary's `folded`).
      InitializerRole role;
      if (isComputingFxNode(init.name()))
        role.foldedOp = init.name() + " of " + llvm::join(sources, ", ");
      return role;
    }
    if (!sources.empty()) {
      // Module tensors (dotted paths; FX nodes have none) folded away: buffers (a causal mask, position ids)
      // or parameters (a BERT export's position and token type tables, looked up at fixed positions), which
      // PyTorch trains and which are gone from the file.
      std::vector<std::string> moduleTensors;
      llvm::copy_if(sources, std::back_inserter(moduleTensors), [](llvm::StringRef f) { return f.contains('.'); });
      std::string why = "a value the exporter computed from " + llvm::join(sources, ", ");
      if (!moduleTensors.empty())
        why += " (where " + std::string(moduleTensors.size() > 1 ? "one of " : "") + llvm::join(moduleTensors, ", ") +
               " is a parameter, PyTorch trains it and tec cannot: it is not in the model; export with "
               "optimize=False or with dynamic shapes to keep it)";
      return {false, false, why};
    }
    if (!o.foldedFrom.empty() || isExporterName(init.name()))
      return {false, false, std::string("a value the exporter computed")};
    return {};
  }
  if (!oneElement)
    return {};
  if (isExporterName(init.name()))
    return {true};
  if (fromPyTorch)
    return {};
  return {true, true};
}

inline std::string joinSorted(const llvm::StringSet<> &names) {
  std::vector<std::string> sorted;
  for (const auto &n : names)
    sorted.push_back(n.getKey().str());
  llvm::sort(sorted);
  return llvm::join(sorted, ", ");
}

inline Type elementTypeFor(MLIRContext &ctx, int32_t onnxType) {
  Builder b(&ctx);
  switch (onnxType) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case onnx::TensorProto::INT32: return b.getI32Type();
  case onnx::TensorProto::INT64: return b.getI64Type();
  case onnx::TensorProto::BOOL: return b.getI1Type();
  case 17: return b.getFloat8E4M3FNType(); // FLOAT8E4M3FN (ONNX 1.14+; the field is an int32)
  case 19: return b.getFloat8E5M2Type();   // FLOAT8E5M2
  default: return nullptr;
  }
}

inline std::string onnxTypeName(int32_t onnxType) {
  if (onnxType == 17)
    return "FLOAT8E4M3FN";
  if (onnxType == 19)
    return "FLOAT8E5M2";
  if (onnx::TensorProto::DataType_IsValid(onnxType))
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnxType));
  return "type " + std::to_string(onnxType);
}

/// Bytes per element as ONNX stores raw data (bool: one byte).
inline int64_t storageBytes(Type t) { return t.isInteger(1) ? 1 : (t.getIntOrFloatBitWidth() + 7) / 8; }

inline std::string nodeLabel(const onnx::NodeProto &node, size_t index) {
  std::string name = node.name().empty() ? "#" + std::to_string(index) : node.name();
  return "node '" + name + "' (" + node.op_type() + ")";
}

inline const onnx::AttributeProto *findAttr(const onnx::NodeProto &node, llvm::StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

inline int64_t intAttr(const onnx::NodeProto &node, llvm::StringRef name, int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->i() : dflt;
}

inline float floatAttr(const onnx::NodeProto &node, llvm::StringRef name, float dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->f() : dflt;
}

class GraphImporter {
public:
  GraphImporter(MLIRContext &ctx, llvm::StringRef path, Storage &storage, const ImportOptions &options,
                ImportedModel &out)
      : ctx(ctx), path(path.str()), storage(storage), graph(storage.model.graph()), options(options),
        out(out), builder(&ctx) {
    for (const auto &[i, node] : llvm::enumerate(graph.node()))
      nodeIndex[&node] = i;
  }

  Error run();

private:
  using ImportFn = std::function<Error(GraphImporter &, const onnx::NodeProto &)>;
  static const llvm::StringMap<ImportFn> &importers();
  friend std::vector<std::string> tec::supportedOnnxOps();

  // Errors that name the file and the node or tensor.
  Error invalid(const llvm::Twine &what) { return makeError(ImportErrorKind::Invalid, path + ": " + what); }
  Error unsupported(const llvm::Twine &what) {
    return makeError(ImportErrorKind::Unsupported, path + ": " + what);
  }
  Error nodeInvalid(const onnx::NodeProto &n, const llvm::Twine &what) { return invalid(label(n) + ": " + what); }
  Error nodeUnsupported(const onnx::NodeProto &n, const llvm::Twine &what) {
    return unsupported(label(n) + ": " + what);
  }
  std::string label(const onnx::NodeProto &n) { return nodeLabel(n, nodeIndex.lookup(&n)); }

  Error checkOpsetAndOps();
  Error checkTensorProto(const onnx::TensorProto &t, const std::string &what);
  Expected<ArrayRef<char>> tensorBytes(const onnx::TensorProto &t, const std::string &what);
  Expected<RankedTensorType> tensorType(const onnx::TensorProto &t, const std::string &what);
  Expected<RankedTensorType> inputType(const onnx::ValueInfoProto &vi);
  Error checkDefinitionsAndOrder(std::vector<int> &order);
  Error freezeInput(llvm::StringRef name, const std::string &serialized);
  Error runOnnxShapeInference();
  /// A convolution's or pool's strides, dilations, kernel shape and group are positive: ONNX's own shape
  /// inference divides by them (a stride of 0 is a division by zero inside libonnx).
  Error checkWindowAttributes(const onnx::NodeProto &node);
  Error importNode(const onnx::NodeProto &node);
  /// The node against its operator's ONNX schema: input and output counts, attribute types, unknown,
  /// duplicate and missing required attributes (ONNX's own Verify up to opset 17; after it, what a
  /// newer opset keeps of the last schema ONNX 1.12 knows).
  Error checkNodeSchema(const onnx::NodeProto &node);
  Error crossCheck(const onnx::NodeProto &node, unsigned i, RankedTensorType type);

  // Values.
  Expected<Value> value(const onnx::NodeProto &node, int i);
  /// An initializer as a param argument (or the transpose of the one it copies).
  /// tec has no float64 kernels: the model's float64 constants (an exporter's Python floats, BERT's
  /// attention scale computed in double then cast to float), casts to float64 and value infos are taken as
  /// float32, counted in out.narrowedDoubles. Graph inputs and outputs of float64 stay refused.
  void narrowDoubles();
  /// The one all-zero row of a table `name` (a 2-D float param of a PyTorch export): nn.Embedding zeroes its
  /// padding_idx row and never trains it, and the export drops padding_idx, so that is how it is known;
  /// none where no row or several are zero. Recorded in out.paddingRows.
  std::optional<int64_t> paddingRow(const std::string &name);
  /// out.mergedParams: params of equal elements that several nodes of one kind read (in a dynamo export).
  void findMergedParams();
  /// out.foldedTables: trained params of a TorchScript export with exporter-made names whose values repeat.
  void findFoldedTables();
  /// out.computedConvParams: a PyTorch export's convolution weights and biases named as its exporter names
  /// what it computed.
  void findComputedConvParams();
  /// PyTorch's TorchScript exporter merges equal initializers of an eval-mode model (a fresh model's norm
  /// weights and biases, its layer scales) into one, read through an Identity named for each param it
  /// replaced: each such Identity of a param is a param of its own, with that data, as in PyTorch, where
  /// it is named by a module path, its elements are all equal, or a deep copy of the module reading its
  /// source reads it (a reused module's or a shared weight's folded transposes stay one; see deepCopies).
  void findMergedCopies(bool fromPyTorch);
  Expected<Value> param(const std::string &name);
  /// Initializers that are transposes of others (torch.onnx's untied copies of tied weights).
  void findTransposedCopies();
  bool hasInput(const onnx::NodeProto &node, int i) { return node.input_size() > i && !node.input(i).empty(); }
  Expected<std::vector<int64_t>> constInts(const onnx::NodeProto &node, int i);
  /// A float input known at compile time (Resize's scales), read where it lies: a Constant node, an
  /// initializer (left out of the params), or a value folded from constants.
  Expected<std::vector<float>> constFloats(const onnx::NodeProto &node, int i);
  Error define(const onnx::NodeProto &node, unsigned i, Value v);
  bool outputUsed(const onnx::NodeProto &node, int i) {
    return node.output_size() > i && !node.output(i).empty() && usedNames.contains(node.output(i));
  }
  Location loc(const onnx::NodeProto &node) {
    return NameLoc::get(builder.getStringAttr(node.name().empty() ? node.op_type() : node.name()),
                        FileLineColLoc::get(&ctx, path, 0, 0));
  }
  RankedTensorType typeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }
  Expected<RankedTensorType> checkedType(const onnx::NodeProto &n, ArrayRef<int64_t> dims, Type elt);
  Expected<int64_t> normalizeAxis(const onnx::NodeProto &n, int64_t axis, int64_t rank);

  template <typename Op, typename... Args>
  /// Creates the op, or its value when its operands are constants (the ops' fold hooks): shape
  /// arithmetic becomes constants that later shape-deciding inputs read.
  Value create(const onnx::NodeProto &node, Type type, Args &&...args) {
    return builder.createOrFold<Op>(loc(node), type, std::forward<Args>(args)...);
  }
  /// An elementwise op of `a` and `b` with their broadcast shape (checked by the caller).
  template <typename Op> Value broadcast(const onnx::NodeProto &node, Value a, Value b) {
    auto dims = *shape::broadcast(typeOf(a).getShape(), typeOf(b).getShape());
    return create<Op>(node, RankedTensorType::get(dims, typeOf(a).getElementType()), a, b);
  }
  Value compareValues(const onnx::NodeProto &node, Value a, Value b, StringRef predicate) {
    auto dims = *shape::broadcast(typeOf(a).getShape(), typeOf(b).getShape());
    return create<CompareOp>(node, RankedTensorType::get(dims, builder.getI1Type()), a, b,
                             builder.getStringAttr(predicate));
  }
  Value scalar(const onnx::NodeProto &node, Type element, double v) {
    return scalarConstant(builder, loc(node), element, v);
  }
  /// A 0-D integer constant of `index` type (i32 or i64, the type of the indices it meets).
  Value indexScalar(const onnx::NodeProto &node, Type index, int64_t v) {
    auto type = RankedTensorType::get({}, index);
    return create<ConstantOp>(node, type, DenseElementsAttr::get(type, builder.getIntegerAttr(index, v)));
  }
  /// Both operands numeric of one element type, with shapes that broadcast.
  Error checkBinaryOperands(const onnx::NodeProto &n, Value a, Value b, bool allowBool = false);

  // Per-operator importers.
  template <typename Op> Error binary(const onnx::NodeProto &n);
  template <typename Op> Error unary(const onnx::NodeProto &n);
  template <typename Op> Error softmaxLike(const onnx::NodeProto &n);
  struct ReduceSpec {
    std::vector<int64_t> axes;
    bool keepdims = true, noop = false;
  };
  /// A reduction's axes (input or attribute), keepdims and noop_with_empty_axes.
  Expected<ReduceSpec> reduceSpec(const onnx::NodeProto &n, RankedTensorType in, bool axesIsInput);
  template <typename Op> Value reduceWith(const onnx::NodeProto &n, Value x, const ReduceSpec &spec);
  template <typename Op> Error reduction(const onnx::NodeProto &n);
  Error compositeReduction(const onnx::NodeProto &n);
  Error gelu(const onnx::NodeProto &n);
  template <typename Op> Expected<Value> chain(const onnx::NodeProto &n);
  template <typename Op> Error variadic(const onnx::NodeProto &n);
  Error mean(const onnx::NodeProto &n);
  Error mod(const onnx::NodeProto &n);
  Error clip(const onnx::NodeProto &n);
  Error compare(const onnx::NodeProto &n, StringRef predicate);
  Error logicalNot(const onnx::NodeProto &n);
  Error isNaN(const onnx::NodeProto &n);
  Error isInf(const onnx::NodeProto &n);
  Error leakyRelu(const onnx::NodeProto &n);
  Error hardSigmoid(const onnx::NodeProto &n);
  Error hardSwish(const onnx::NodeProto &n);
  Error layerNorm(const onnx::NodeProto &n);
  Error matmul(const onnx::NodeProto &n);
  Error gemm(const onnx::NodeProto &n);
  Error transpose(const onnx::NodeProto &n);
  Error reshape(const onnx::NodeProto &n);
  Error flatten(const onnx::NodeProto &n);
  /// Squeeze's and Unsqueeze's axes: the second input from opset 13, an attribute before.
  Expected<std::vector<int64_t>> axesInputOrAttr(const onnx::NodeProto &n);
  Error squeeze(const onnx::NodeProto &n);
  Error unsqueeze(const onnx::NodeProto &n);
  Error reshapeTo(const onnx::NodeProto &n, Value input, ArrayRef<int64_t> dims);
  Error concat(const onnx::NodeProto &n);
  Error split(const onnx::NodeProto &n);
  Error slice(const onnx::NodeProto &n);
  Error gather(const onnx::NodeProto &n);
  Error cast(const onnx::NodeProto &n);
  Error identity(const onnx::NodeProto &n);
  Error dropout(const onnx::NodeProto &n);
  Error constant(const onnx::NodeProto &n);
  Error where(const onnx::NodeProto &n);
  Error expand(const onnx::NodeProto &n);
  Error shapeOf(const onnx::NodeProto &n);
  /// One spatial dim of a window.
  struct WindowAxis {
    int64_t kernel = 1, stride = 1, padBegin = 0, padEnd = 0, dilation = 1;
    int64_t output(int64_t in, bool ceilMode) const {
      return kernels::windowOutput(in, kernel, stride, padBegin, padEnd, dilation, ceilMode);
    }
  };
  /// A Conv's or pool's spatial attributes as tec's 2-D window ([top, left, bottom, right] pads); a 3-D
  /// window's first dim is `depth`, over which it runs as 2-D windows on depth slices (depthSlices).
  struct Window2d {
    llvm::SmallVector<int64_t> kernel, strides, pads, dilations;
    WindowAxis depth;
  };
  /// An INTS attribute of `count` values (a window's strides, pads), `dflt` each where the node has none.
  Expected<llvm::SmallVector<int64_t>> intsAttr(const onnx::NodeProto &n, const char *name, int64_t count,
                                                int64_t dflt);
  Expected<Window2d> windowAttrs(const onnx::NodeProto &n, RankedTensorType x, ArrayRef<int64_t> kernel,
                                 bool ceilMode);
  /// x as NCHW: a 1-D input [N, C, L] as [N, C, 1, L].
  Value as2d(const onnx::NodeProto &n, Value x);
  /// A 3-D window op as 2-D ones: x [N, C, D, H, W] as one [N * outDepth, C, H, W] tensor per kernel depth k,
  /// output depth od reading input depth od * stride - padBegin + k * dilation (`fill`, a 0-D value, outside).
  /// The 2-D op runs on each, the results combine per output (a sum for Conv, a max for MaxPool).
  Expected<SmallVector<Value>> depthSlices(const onnx::NodeProto &n, Value x, const WindowAxis &depth,
                                           int64_t outDepth, Value fill);
  /// A 2-D op's result on depth slices, [N * OD, M, H, W], as [N, M, OD, H, W].
  Value fromDepthSlices(const onnx::NodeProto &n, Value y, int64_t batch);
  /// One value per output depth of a 3-D op's result: `values` as a [1, 1, OD, 1, 1] constant.
  Value depthConstant(const onnx::NodeProto &n, Type elt, ArrayRef<double> values);
  /// A 3-D conv weight [M, C, KD, KH, KW]'s 2-D kernel at depth k, [M, C, KH, KW].
  Value weightAtDepth(const onnx::NodeProto &n, Value w, int64_t k);
  /// The result dims of a 2-D window over NCHW `in` with `channels` outputs.
  shape::Dims planarOutput(RankedTensorType in, int64_t channels, const Window2d &win, bool ceilMode);
  Error conv(const onnx::NodeProto &n);
  /// ConvTranspose as tec.conv_input_grad (the conv's adjoint) plus the bias.
  Error convTranspose(const onnx::NodeProto &n);
  Expected<Value> convTranspose3d(const onnx::NodeProto &n, Value x, Value w, int64_t group, ArrayRef<int64_t> strides,
                                  ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations, ArrayRef<int64_t> outDims);
  /// A float [N, C, d1, ...] input, as per-channel normalizations take.
  Error checkChannelsFirst(const onnx::NodeProto &n, RankedTensorType x);
  Error instanceNorm(const onnx::NodeProto &n);
  /// RNN, GRU and LSTM unrolled over the (static) sequence: the input projections of every step as one GEMM,
  /// then per step the recurrent GEMM and the gates as elementwise ops, so the backward pass through time
  /// is the ops' own gradients. Sequence lengths mask each step (the state holds, the output is zero).
  Error recurrent(const onnx::NodeProto &n);
  /// One of ONNX's RNN activation functions by name (with its alpha and beta where it takes them).
  Expected<Value> rnnActivation(const onnx::NodeProto &n, llvm::StringRef name, float alpha, float beta, Value x);
  /// Resize (opset 11+): per resized axis, each output element a weighted sum of input elements picked by
  /// constant indices (nearest: 1, linear: 2, cubic: 4 taps), so gathers and products that train.
  Error resize(const onnx::NodeProto &n);
  Error pool(const onnx::NodeProto &n);
  Expected<Value> pool3d(const onnx::NodeProto &n, Value x, const Window2d &win, bool ceilMode, bool max,
                         bool countIncludePad, llvm::function_ref<Value(Value)> planarPool);
  Error globalPool(const onnx::NodeProto &n);
  Error batchNorm(const onnx::NodeProto &n);
  Error lrn(const onnx::NodeProto &n);
  Error gatherElements(const onnx::NodeProto &n);
  Error gatherND(const onnx::NodeProto &n);
  Error scatterND(const onnx::NodeProto &n);
  /// GatherND's and ScatterND's view of the data: [count, rest...] (flatType) rows, each index tuple's row.
  struct NdRows {
    Value row;
    int64_t k = 0, count = 1;
    RankedTensorType flatType;
  };
  Expected<NdRows> ndRows(const onnx::NodeProto &n, RankedTensorType data, Value indices);
  Error tile(const onnx::NodeProto &n);
  Error argReduce(const onnx::NodeProto &n);
  Error cumSum(const onnx::NodeProto &n);
  Error einsum(const onnx::NodeProto &n);
  /// An Einsum operand: its value and one label per dim (a letter, or an ellipsis dim's number past 'z').
  struct Labeled {
    Value value;
    std::vector<int> labels;
  };
  /// The operand with its dims permuted to `order` (labels it has); no op when they are in order.
  Labeled permuted(const onnx::NodeProto &n, const Labeled &x, ArrayRef<int> order);
  /// Sums the dims of x whose labels `keep` rejects.
  Labeled summedOut(const onnx::NodeProto &n, const Labeled &x, llvm::function_ref<bool(int)> keep);
  /// Two operands contracted into one holding the labels in `keep` (batch, a's free, b's free) as a
  /// batched matmul.
  Labeled contract(const onnx::NodeProto &n, Labeled a, Labeled b, llvm::function_ref<bool(int)> keep);
  Error pad(const onnx::NodeProto &n);
  /// y without -before leading and -after trailing cells along `axis` where those are negative.
  Expected<Value> cropAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before, int64_t after);
  /// y with `before` and `after` (non-negative) cells of `fill`, a 0-D value, added along `axis`.
  Expected<Value> fillAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before, int64_t after, Value fill);
  /// ONNX Pad's constant mode along one axis: negative counts crop.
  Expected<Value> padAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before, int64_t after, Value fill);
  Error oneHot(const onnx::NodeProto &n);
  Error nllLoss(const onnx::NodeProto &n);
  Error softmaxCrossEntropy(const onnx::NodeProto &n);
  /// NegativeLogLikelihoodLoss of log-probabilities [N, C, d...] and labels [N, d...] (the shared half of
  /// SoftmaxCrossEntropyLoss): picked with gather_elements, so it trains.
  Expected<Value> negativeLogLikelihood(const onnx::NodeProto &n, Value logProb, Value labels, Value weight);
  Error sizeOf(const onnx::NodeProto &n);
  Error constantOfShape(const onnx::NodeProto &n);
  Error range(const onnx::NodeProto &n);
  Error castLike(const onnx::NodeProto &n);
  Error trilu(const onnx::NodeProto &n);
  /// A constant input's elements (an integer initializer, a Constant, or a value folded from them).
  Expected<DenseElementsAttr> constElements(const onnx::NodeProto &n, int i);
  Value int64Constant(const onnx::NodeProto &n, ArrayRef<int64_t> dims, ArrayRef<int64_t> values) {
    auto type = RankedTensorType::get(dims, builder.getI64Type());
    return create<ConstantOp>(n, type, DenseElementsAttr::get(type, values));
  }

  MLIRContext &ctx;
  std::string path;
  Storage &storage;
  const onnx::GraphProto &graph;
  const ImportOptions &options;
  ImportedModel &out;
  OpBuilder builder;
  Block *body = nullptr;
  int64_t opset = 0;

  llvm::DenseMap<const onnx::NodeProto *, size_t> nodeIndex;
  llvm::StringMap<Value> values;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  /// Constant node outputs and integer initializers: materialized as tec.constant on first use.
  llvm::StringMap<const onnx::TensorProto *> constants;
  /// Constant node tensors built from value_float(s)/value_int(s) attributes.
  std::deque<onnx::TensorProto> ownedTensors;
  llvm::StringSet<> usedNames;
  llvm::StringMap<const onnx::TypeProto *> onnxInferred;
  /// Symbolic dims bound by --shape (e.g. batch=2).
  llvm::StringMap<int64_t> dimParams;
  /// A transposed copy's name -> the initializer it copies.
  llvm::StringMap<std::string> transposedCopies;
  /// An Identity's output -> the param initializer it reads (findMergedCopies).
  llvm::StringMap<std::string> mergedCopies;
  /// An initializer, or a merged copy of one, which is a param of its own (a running statistic the
  /// TorchScript exporter merged with another layer's equal one is that layer's buffer all the same).
  bool isInitializer(llvm::StringRef name) const { return initializers.contains(name) || mergedCopies.contains(name); }
  /// One-element initializers taken as constants for the summary (ImportedModel::scalarConstants).
  llvm::StringSet<> scalarConstants;
  /// Params that training must leave alone, and why (tec.frozen).
  llvm::StringMap<std::string> frozenParams;
  /// Next values of running statistics (training-mode BatchNormalization), by the param they update.
  llvm::MapVector<BlockArgument, Value> runningStats;
};

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//


/// Unwraps an Expected into `var`, or returns its error from the enclosing importer.
#define TRY_ASSIGN(var, expr)                                                                                \
  auto var##OrErr = (expr);                                                                                  \
  if (!var##OrErr)                                                                                           \
    return var##OrErr.takeError();                                                                           \
  auto var = *var##OrErr;


inline bool isFloat(Type t) { return llvm::isa<Float32Type, Float16Type, BFloat16Type>(t); }

template <typename Op> Error GraphImporter::binary(const onnx::NodeProto &n) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  Type elt = typeOf(a).getElementType();
  if (std::is_same_v<Op, PowOp> && isFloat(elt) && elt != typeOf(b).getElementType() &&
      (isFloat(typeOf(b).getElementType()) || typeOf(b).getElementType().isInteger(32) ||
       typeOf(b).getElementType().isInteger(64)))
    b = create<CastOp>(n, RankedTensorType::get(typeOf(b).getShape(), elt), b); // ONNX: Y is T1^T2 in T1
  if (elt != typeOf(b).getElementType())
    return nodeUnsupported(n, "operands of different element types are not supported");
  bool numeric = isFloat(elt) || (!std::is_same_v<Op, PowOp> && (elt.isInteger(32) || elt.isInteger(64)));
  if (!numeric)
    return nodeUnsupported(n, "element type is not supported");
  auto dims = shape::broadcast(typeOf(a).getShape(), typeOf(b).getShape());
  if (!dims)
    return nodeInvalid(n, "operand shapes " + shape::str(typeOf(a).getShape()) + " and " +
                              shape::str(typeOf(b).getShape()) + " do not broadcast");
  TRY_ASSIGN(type, checkedType(n, *dims, elt));
  return define(n, 0, create<Op>(n, type, a, b));
}

template <typename Op> Error GraphImporter::unary(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  constexpr bool takesIntegers = std::is_same_v<Op, AbsOp> || std::is_same_v<Op, NegOp> || std::is_same_v<Op, SignOp>;
  if (takesIntegers && (elt.isInteger(32) || elt.isInteger(64)))
    return define(n, 0, create<Op>(n, x.getType(), x));
  if (!isFloat(elt))
    return nodeUnsupported(n, std::string("element type is not supported (f32, f16, bf16") +
                                  (takesIntegers ? ", int32, int64 only)" : " only)"));
  return define(n, 0, create<Op>(n, x.getType(), x));
}

/// Max, Min and Sum of any number of inputs: a chain of binary ops.
template <typename Op> Expected<Value> GraphImporter::chain(const onnx::NodeProto &n) {
  TRY_ASSIGN(result, value(n, 0));
  for (int i = 1; i < n.input_size(); ++i) {
    TRY_ASSIGN(next, value(n, i));
    if (auto err = checkBinaryOperands(n, result, next))
      return std::move(err);
    result = broadcast<Op>(n, result, next);
  }
  return result;
}

template <typename Op> Error GraphImporter::variadic(const onnx::NodeProto &n) {
  TRY_ASSIGN(result, chain<Op>(n));
  return define(n, 0, result);
}

template <typename Op> Error GraphImporter::softmaxLike(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  auto in = typeOf(x);
  if (opset >= 13) {
    TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", -1), in.getRank()));
    return define(n, 0, create<Op>(n, x.getType(), x, axis));
  }
  // Before opset 13 the input is coerced to 2-D at `axis` (default 1) and normalized over the second dim.
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 1), std::max<int64_t>(in.getRank(), 1)));
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < in.getRank(); ++d)
    (d < axis ? rows : cols) *= in.getDimSize(d);
  auto flat = create<ReshapeOp>(n, RankedTensorType::get({rows, cols}, in.getElementType()), x);
  auto normalized = create<Op>(n, flat.getType(), flat, 1);
  return define(n, 0, create<ReshapeOp>(n, in, normalized));
}

template <typename Op> Value GraphImporter::reduceWith(const onnx::NodeProto &n, Value x, const ReduceSpec &spec) {
  auto in = typeOf(x);
  auto type = RankedTensorType::get(shape::reduce(in.getShape(), spec.axes, spec.keepdims), in.getElementType());
  return create<Op>(n, type, x, spec.axes, spec.keepdims);
}

template <typename Op> Error GraphImporter::reduction(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  // ReduceSum takes axes as an input from opset 13, the others from opset 18; before, an attribute.
  TRY_ASSIGN(spec, reduceSpec(n, typeOf(x), opset >= (std::is_same_v<Op, ReduceSumOp> ? 13 : 18)));
  return define(n, 0, spec.noop ? x : reduceWith<Op>(n, x, spec));
}

} // namespace tec::importer

#endif
