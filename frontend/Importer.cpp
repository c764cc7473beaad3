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

using namespace mlir;
using llvm::Error;
using llvm::Expected;

char tec::ImportError::ID = 0;

namespace tec {
namespace {

Error makeError(ImportErrorKind kind, const llvm::Twine &message) {
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
std::optional<std::string> exporterConstant(llvm::StringRef name, RankedTensorType type, ArrayRef<char> bytes) {
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

llvm::StringMap<TorchOrigin> torchOrigins(const onnx::GraphProto &graph) {
  constexpr int kMetadataProps = 4;
  llvm::StringMap<TorchOrigin> origins;
  for (const auto &vi : graph.value_info()) {
    const auto &unknown = vi.GetReflection()->GetUnknownFields(vi);
    for (int i = 0; i < unknown.field_count(); ++i) {
      const auto &field = unknown.field(i);
      onnx::StringStringEntryProto entry;
      if (field.number() != kMetadataProps || field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED ||
          !entry.ParseFromString(field.length_delimited()))
        continue;
      if (entry.key() == "pkg.torch.export.graph_signature.InputSpec.kind") {
        origins[vi.name()].kind = entry.value();
      } else if (entry.key() == "pkg.onnxscript.optimizer.folded_from") { // a Python list: "['a', 'b']"
        llvm::SmallVector<llvm::StringRef> parts;
        llvm::StringRef(entry.value()).trim("[]").split(parts, ',', -1, false);
        for (auto part : parts)
          origins[vi.name()].foldedFrom.push_back(part.trim().trim("'\"").str());
      }
    }
  }
  return origins;
}

/// A name an exporter made up for a value it computed, as opposed to a module's parameter path
/// ("fc.bias", "logit_scale"): TorchScript's "onnx::Mul_12" and "/attn/Constant_output_0", bare numbers
/// (older TorchScript), onnxscript's "val_12".
bool isExporterName(llvm::StringRef name) {
  static const llvm::Regex made("(::|(^|/)[A-Z][A-Za-z]*_output_[0-9]+$|^[0-9]+$|^_?val_[0-9]+$)");
  return made.match(name);
}

/// Whether a name in the dynamo exporter's folded_from list is an FX node of an op that computes new values
/// from its inputs (arange, gather, expand, cos, ...): a tensor folded through one is no parameter laid out
/// anew. Layout ops (cat, transpose, view, zeros for padding) and parameter names are not.
bool isComputingFxNode(llvm::StringRef name) {
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
};

InitializerRole initializerRole(const onnx::TensorProto &init, Type elt, const llvm::StringMap<TorchOrigin> &origins,
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
      if (!isExporterName(f))
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
    if (!sources.empty() && llvm::none_of(sources, isComputingFxNode))
      return {};
    if (!sources.empty())
      return {false, false, "a value the exporter computed from " + llvm::join(sources, ", ")};
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

std::string joinSorted(const llvm::StringSet<> &names) {
  std::vector<std::string> sorted;
  for (const auto &n : names)
    sorted.push_back(n.getKey().str());
  llvm::sort(sorted);
  return llvm::join(sorted, ", ");
}

Type elementTypeFor(MLIRContext &ctx, int32_t onnxType) {
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

std::string onnxTypeName(int32_t onnxType) {
  if (onnxType == 17)
    return "FLOAT8E4M3FN";
  if (onnxType == 19)
    return "FLOAT8E5M2";
  if (onnx::TensorProto::DataType_IsValid(onnxType))
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnxType));
  return "type " + std::to_string(onnxType);
}

/// Bytes per element as ONNX stores raw data (bool: one byte).
int64_t storageBytes(Type t) { return t.isInteger(1) ? 1 : (t.getIntOrFloatBitWidth() + 7) / 8; }

std::string nodeLabel(const onnx::NodeProto &node, size_t index) {
  std::string name = node.name().empty() ? "#" + std::to_string(index) : node.name();
  return "node '" + name + "' (" + node.op_type() + ")";
}

const onnx::AttributeProto *findAttr(const onnx::NodeProto &node, llvm::StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t intAttr(const onnx::NodeProto &node, llvm::StringRef name, int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->i() : dflt;
}

float floatAttr(const onnx::NodeProto &node, llvm::StringRef name, float dflt) {
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

Error GraphImporter::checkOpsetAndOps() {
  for (const auto &imp : storage.model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  out.opset = opset;
  if (opset != 0 && opset > kMaxOpset)
    return unsupported("opset " + llvm::Twine(opset) + " is outside the supported range " +
                       llvm::Twine(kMinOpset) + "-" + llvm::Twine(kMaxOpset) +
                       " (convert the model with onnx.version_converter)");
  // An older opset is read as opset 7 when none of its operators changed in between.
  if (opset != 0 && opset < kMinOpset) {
    for (const auto &[i, node] : llvm::enumerate(graph.node())) {
      const auto *old = onnx::OpSchemaRegistry::Schema(node.op_type(), opset, "");
      const auto *current = onnx::OpSchemaRegistry::Schema(node.op_type(), kMinOpset, "");
      if (!old || !current || old->SinceVersion() != current->SinceVersion())
        return unsupported("opset " + llvm::Twine(opset) + " is outside the supported range " +
                           llvm::Twine(kMinOpset) + "-" + llvm::Twine(kMaxOpset) + " and its " + node.op_type() +
                           " differs from opset " + llvm::Twine(kMinOpset) +
                           "'s (convert the model with onnx.version_converter)");
    }
  }
  std::string list;
  ImportError::Operators operators;
  for (const auto &[i, node] : llvm::enumerate(graph.node())) {
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (defaultDomain && importers().contains(node.op_type()))
      continue;
    std::string name = node.name().empty() ? "#" + std::to_string(i) : node.name();
    std::string op = (defaultDomain ? "" : node.domain() + ".") + node.op_type();
    list += "\n  node '" + name + "'  op " + op;
    operators.emplace_back(escapeControl(name), escapeControl(op));
  }
  if (!operators.empty())
    return llvm::make_error<ImportError>(
        ImportErrorKind::Unsupported,
        escapeControl(path + ": " + std::to_string(operators.size()) + " unsupported operator" +
                      (operators.size() == 1 ? "" : "s") + " (opset " + std::to_string(opset) + "):" + list),
        std::move(operators));
  if (opset == 0)
    return invalid("model imports no opset of the default ONNX domain");
  return Error::success();
}

Expected<RankedTensorType> GraphImporter::tensorType(const onnx::TensorProto &t, const std::string &what) {
  Type elt = elementTypeFor(ctx, t.data_type());
  if (!elt)
    return unsupported(what + " has element type " + onnxTypeName(t.data_type()) +
                       " (supported: FLOAT, FLOAT16, BFLOAT16, INT32, INT64, BOOL, FLOAT8E4M3FN, FLOAT8E5M2)");
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (!shape::elementCount(dims))
    return invalid(what + " has dims [" + shape::str(dims) + "] whose element count is negative or overflows int64");
  if (storageBytes(elt) * *shape::elementCount(dims) / storageBytes(elt) != *shape::elementCount(dims))
    return invalid(what + " has dims [" + shape::str(dims) + "] whose byte size overflows int64");
  return RankedTensorType::get(dims, elt);
}

/// Resolves an external-data location inside the model's folder; a path that leaves it is refused.
static Expected<std::string> resolveExternal(llvm::StringRef modelPath, llvm::StringRef location,
                                             const std::string &what) {
  auto fail = [&](const llvm::Twine &why) {
    return makeError(ImportErrorKind::Invalid, modelPath + ": " + what + ": " + why);
  };
  if (location.empty())
    return fail("external data has no location");
  if (llvm::sys::path::is_absolute(location))
    return fail("external data location '" + location + "' is absolute; it must be relative to the model's folder");
  llvm::SmallString<256> dir(modelPath);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  llvm::SmallString<256> realDir, realFile, joined(dir);
  llvm::sys::path::append(joined, location);
  if (llvm::sys::fs::real_path(dir, realDir))
    return fail("cannot resolve the model's folder");
  if (llvm::sys::fs::real_path(joined, realFile))
    return fail("external data file '" + joined + "' does not exist");
  llvm::StringRef file(realFile);
  if (!file.starts_with(realDir) || file.size() <= realDir.size() ||
      !llvm::sys::path::is_separator(file[realDir.size()]))
    return fail("external data location '" + location + "' leaves the model's folder (refused)");
  return realFile.str().str();
}

Expected<ArrayRef<char>> GraphImporter::tensorBytes(const onnx::TensorProto &t, const std::string &what) {
  auto type = tensorType(t, what);
  if (!type)
    return type.takeError();
  int64_t expected = type->getNumElements() * storageBytes(type->getElementType());
  auto wrongSize = [&](int64_t got) {
    return invalid(what + " holds " + llvm::Twine(got) + " bytes of data, expected " + llvm::Twine(expected) +
                   " for " + shape::str(type->getShape()) + " " + onnxTypeName(t.data_type()));
  };
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if ((kv.key() == "offset" || kv.key() == "length") &&
               llvm::StringRef(kv.value()).getAsInteger(10, kv.key() == "offset" ? offset : length))
        return invalid(what + ": external data " + kv.key() + " '" + kv.value() + "' is not an integer");
    }
    auto file = resolveExternal(path, location, what);
    if (!file)
      return file.takeError();
    uint64_t fileSize = 0;
    if (!llvm::sys::fs::is_regular_file(*file) || llvm::sys::fs::file_size(*file, fileSize))
      return invalid(what + ": cannot read external data file '" + *file + "' (not a regular file)");
    if (offset < 0 || static_cast<uint64_t>(offset) > fileSize)
      return invalid(what + ": external data offset " + llvm::Twine(offset) + " is past the end of '" + *file + "'");
    int64_t available = static_cast<int64_t>(fileSize) - offset;
    if (length < 0)
      length = available;
    if (length > available)
      return invalid(what + ": external data needs " + llvm::Twine(length) + " bytes at offset " +
                     llvm::Twine(offset) + " but '" + *file + "' has " + llvm::Twine(available));
    if (length != expected)
      return wrongSize(length);
    if (expected == 0)
      return ArrayRef<char>();
    auto buffer = llvm::MemoryBuffer::getFileSlice(*file, length, offset);
    if (!buffer)
      return invalid(what + ": cannot map external data file '" + *file + "': " + buffer.getError().message());
    storage.mapped.push_back(std::move(*buffer));
    return ArrayRef<char>(storage.mapped.back()->getBufferStart(), length);
  }
  const int typedFields = (t.float_data_size() > 0) + (t.int32_data_size() > 0) + (t.int64_data_size() > 0) +
                          (t.double_data_size() > 0) + (t.uint64_data_size() > 0) + (t.string_data_size() > 0);
  if (typedFields + t.has_raw_data() > 1)
    return invalid(what + " holds its data in more than one field (raw_data and typed data)");
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != expected)
      return wrongSize(t.raw_data().size());
    return ArrayRef<char>(t.raw_data().data(), t.raw_data().size());
  }
  // Typed fields: float and the integer types are already laid out as raw data; the narrow types are
  // stored one per int32 and need packing.
  int64_t n = type->getNumElements();
  Type elt = type->getElementType();
  if (elt.isF32()) {
    if (t.float_data_size() != n)
      return wrongSize(int64_t(t.float_data_size()) * 4);
    return ArrayRef<char>(reinterpret_cast<const char *>(t.float_data().data()), expected);
  }
  if (elt.isInteger(64)) {
    if (t.int64_data_size() != n)
      return wrongSize(int64_t(t.int64_data_size()) * 8);
    return ArrayRef<char>(reinterpret_cast<const char *>(t.int64_data().data()), expected);
  }
  if (t.int32_data_size() != n)
    return wrongSize(int64_t(t.int32_data_size()) * storageBytes(elt));
  if (elt.isInteger(32))
    return ArrayRef<char>(reinterpret_cast<const char *>(t.int32_data().data()), expected);
  auto &packed = storage.owned.emplace_back(expected);
  int64_t width = storageBytes(elt);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(t.int32_data(i));
    std::memcpy(packed.data() + i * width, &v, width); // little-endian: the low bytes
  }
  return ArrayRef<char>(packed.data(), packed.size());
}

Error GraphImporter::checkTensorProto(const onnx::TensorProto &t, const std::string &what) {
  return tensorBytes(t, what).takeError();
}

Expected<RankedTensorType> GraphImporter::inputType(const onnx::ValueInfoProto &vi) {
  std::string what = "graph input '" + vi.name() + "'";
  if (!vi.type().has_tensor_type())
    return unsupported(what + " is not a tensor");
  const auto &tt = vi.type().tensor_type();
  Type elt = elementTypeFor(ctx, tt.elem_type());
  if (!elt)
    return unsupported(what + " has element type " + onnxTypeName(tt.elem_type()));
  auto given = options.shapes.find(vi.name());
  if (!tt.has_shape() && given == options.shapes.end())
    return invalid(what + " has no shape; pass --shape " + vi.name() + "=AxB");
  std::vector<int64_t> dims;
  std::string dynamic;
  for (const auto &[i, d] : llvm::enumerate(tt.shape().dim())) {
    if (d.has_dim_value())
      dims.push_back(d.dim_value());
    else if (auto bound = dimParams.find(d.dim_param()); d.has_dim_param() && bound != dimParams.end())
      dims.push_back(bound->second);
    else {
      dims.push_back(ShapedType::kDynamic);
      dynamic += (dynamic.empty() ? "" : ", ") + std::to_string(i) +
                 (d.has_dim_param() ? " ('" + d.dim_param() + "')" : std::string());
    }
  }
  if (given != options.shapes.end()) {
    ArrayRef<int64_t> fixed = given->second;
    if (tt.has_shape() && fixed.size() != dims.size())
      return invalid("--shape " + vi.name() + "=" + shape::str(fixed) + " has rank " + llvm::Twine(fixed.size()) +
                     ", but the model's input has rank " + llvm::Twine(dims.size()));
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] != ShapedType::kDynamic && dims[i] != fixed[i])
        return invalid("--shape " + vi.name() + "=" + shape::str(fixed) + " disagrees with the model's static dim " +
                       llvm::Twine(i) + " = " + llvm::Twine(dims[i]));
    dims.assign(fixed.begin(), fixed.end());
  } else if (!dynamic.empty()) {
    return invalid(what + " has dynamic dims " + dynamic + "; fix them with --shape " + vi.name() + "=AxB");
  }
  if (!shape::elementCount(dims))
    return invalid(what + " has dims [" + shape::str(dims) + "] whose element count is negative or overflows int64");
  return RankedTensorType::get(dims, elt);
}

Error GraphImporter::freezeInput(llvm::StringRef name, const std::string &serialized) {
  auto input = llvm::find_if(graph.input(), [&](const auto &vi) { return vi.name() == name; });
  if (input == graph.input().end())
    return invalid("--freeze-input names '" + name + "', which is not a graph input");
  std::string what = "frozen input '" + name.str() + "'";
  auto &t = ownedTensors.emplace_back();
  if (!t.ParseFromString(serialized))
    return invalid(what + ": the value is not a serialized ONNX TensorProto");
  if (auto err = checkTensorProto(t, what))
    return err;
  auto given = *tensorType(t, what);
  const auto &declared = input->type().tensor_type();
  bool matches = elementTypeFor(ctx, declared.elem_type()) == given.getElementType() &&
                 (!declared.has_shape() || declared.shape().dim_size() == given.getRank());
  for (int d = 0; matches && declared.has_shape() && d < declared.shape().dim_size(); ++d)
    matches = !declared.shape().dim(d).has_dim_value() || declared.shape().dim(d).dim_value() == given.getDimSize(d);
  if (!matches)
    return invalid(what + ": the value (" + onnxTypeName(t.data_type()) + " " + shape::str(given.getShape()) +
                   ") does not match the input's declared type");
  constants[name] = &t;
  return Error::success();
}

Error GraphImporter::checkDefinitionsAndOrder(std::vector<int> &order) {
  llvm::StringMap<int> producer;
  for (const auto &[i, node] : llvm::enumerate(graph.node()))
    for (const auto &o : node.output())
      if (!o.empty()) {
        if (producer.contains(o) || initializers.contains(o))
          return invalid(nodeLabel(node, i) + ": output '" + o + "' is defined twice");
        producer[o] = i;
      }
  llvm::StringSet<> graphInputs;
  for (const auto &vi : graph.input())
    graphInputs.insert(vi.name());
  // Kahn's algorithm, stable in the file's order; nodes left over sit on a cycle.
  std::vector<int> pending(graph.node_size(), 0);
  std::vector<std::vector<int>> consumers(graph.node_size());
  for (const auto &[i, node] : llvm::enumerate(graph.node())) {
    for (const auto &in : node.input()) {
      if (in.empty())
        continue;
      usedNames.insert(in);
      auto p = producer.find(in);
      if (p != producer.end()) {
        ++pending[i];
        consumers[p->second].push_back(i);
      } else if (!graphInputs.contains(in) && !initializers.contains(in)) {
        return invalid(nodeLabel(node, i) + ": input '" + in +
                       "' is not defined by any node, initializer or graph input");
      }
    }
  }
  for (const auto &o : graph.output()) {
    usedNames.insert(o.name());
    if (!producer.contains(o.name()) && !graphInputs.contains(o.name()) && !initializers.contains(o.name()))
      return invalid("graph output '" + o.name() + "' is not defined by any node, initializer or graph input");
  }
  std::vector<int> ready;
  for (int i = graph.node_size() - 1; i >= 0; --i)
    if (!pending[i])
      ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<int> next;
    for (int c : consumers[i])
      if (--pending[c] == 0)
        next.push_back(c);
    llvm::sort(next, std::greater<int>());
    ready.insert(ready.end(), next.begin(), next.end());
    llvm::sort(ready, std::greater<int>());
  }
  if (order.size() != static_cast<size_t>(graph.node_size())) {
    std::string cycle;
    for (const auto &[i, node] : llvm::enumerate(graph.node()))
      if (pending[i])
        cycle += (cycle.empty() ? "" : ", ") + nodeLabel(node, i);
    return invalid("the graph has a cycle through " + cycle);
  }
  return Error::success();
}

Error GraphImporter::checkWindowAttributes(const onnx::NodeProto &node) {
  static const llvm::StringSet<> windowed = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                                             "AveragePool", "LpPool", "MaxUnpool", "DeformConv"};
  if (!node.domain().empty() || !windowed.contains(node.op_type()))
    return Error::success();
  for (const auto &a : node.attribute()) {
    const bool list = a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape";
    if (list && llvm::any_of(a.ints(), [](int64_t v) { return v < 1; }))
      return nodeInvalid(node, a.name() + " must be positive, got [" +
                                   llvm::join(llvm::map_range(a.ints(), [](int64_t v) { return std::to_string(v); }),
                                              ", ") +
                                   "]");
    if (a.name() == "group" && a.i() < 1)
      return nodeInvalid(node, "group must be positive, got " + llvm::Twine(a.i()));
  }
  return Error::success();
}

Error GraphImporter::runOnnxShapeInference() {
  // ONNX 1.12 knows opsets up to 17; for newer opsets its older schemas would infer wrong shapes, so
  // tec's own shape rules (which always run) stand alone there.
  if (opset > 17)
    return Error::success();
  try {
    onnx::ShapeInferenceOptions opts{/*check_type=*/true, /*error_mode=*/1, /*enable_data_propagation=*/false};
    onnx::shape_inference::InferShapes(storage.model, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception &e) {
    return invalid("ONNX shape inference failed: " + llvm::Twine(e.what()));
  }
  for (const auto &vi : storage.model.graph().value_info())
    onnxInferred[vi.name()] = &vi.type();
  for (const auto &vi : storage.model.graph().output())
    onnxInferred[vi.name()] = &vi.type();
  return Error::success();
}

Error GraphImporter::crossCheck(const onnx::NodeProto &node, unsigned i, RankedTensorType type) {
  auto it = onnxInferred.find(node.output(i));
  if (it == onnxInferred.end() || !it->second->has_tensor_type() || !it->second->tensor_type().has_shape())
    return Error::success();
  std::vector<int64_t> dims;
  for (const auto &d : it->second->tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return Error::success();
    dims.push_back(d.dim_value());
  }
  if (ArrayRef<int64_t>(dims) != type.getShape())
    return nodeInvalid(node, "output '" + node.output(i) + "' has shape " + shape::str(type.getShape()) +
                                 " by tec's rules but " + shape::str(dims) + " by ONNX shape inference");
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

Expected<Value> GraphImporter::value(const onnx::NodeProto &node, int i) {
  if (!hasInput(node, i))
    return nodeInvalid(node, "missing required input #" + llvm::Twine(i));
  const std::string &name = node.input(i);
  if (auto it = values.find(name); it != values.end())
    return it->second;
  if (auto it = constants.find(name); it != constants.end()) {
    if (scalarConstants.contains(name))
      out.scalarConstants.push_back(name);
    auto bytes = tensorBytes(*it->second, "tensor '" + name + "'");
    if (!bytes)
      return bytes.takeError();
    auto type = *tensorType(*it->second, name);
    DenseElementsAttr attr;
    if (type.getElementType().isInteger(1)) {
      llvm::SmallVector<bool> bits(bytes->begin(), bytes->end());
      attr = DenseElementsAttr::get(type, ArrayRef<bool>(bits));
    } else {
      attr = DenseElementsAttr::getFromRawBuffer(type, *bytes);
    }
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(body);
    Value v = builder.create<ConstantOp>(NameLoc::get(builder.getStringAttr(name)), type, attr);
    return values[name] = v;
  }
  if (initializers.contains(name))
    return param(name);
  return nodeInvalid(node, "input '" + name + "' is not defined");
}

Expected<Value> GraphImporter::param(const std::string &name) {
  if (auto it = values.find(name); it != values.end())
    return it->second;
  // A transposed copy of another initializer (an exporter untying lm_head from the embedding) is that
  // one's transpose: one param, whose gradient sums both uses, as in the model that was exported.
  if (auto tied = transposedCopies.find(name); tied != transposedCopies.end()) {
    auto sourceOrErr = param(tied->second);
    if (!sourceOrErr)
      return sourceOrErr.takeError();
    Value source = *sourceOrErr;
    out.transposedCopies[name] = tied->second;
    auto t = typeOf(source);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(body);
    Value transposed = builder.create<TransposeOp>(NameLoc::get(builder.getStringAttr(name)),
                                                   RankedTensorType::get({t.getDimSize(1), t.getDimSize(0)},
                                                                         t.getElementType()),
                                                   source, ArrayRef<int64_t>{1, 0});
    return values[name] = transposed;
  }
  const onnx::TensorProto &init = *initializers.lookup(name);
  std::string what = "initializer '" + name + "'";
  auto bytes = tensorBytes(init, what);
  if (!bytes)
    return bytes.takeError();
  auto type = *tensorType(init, what);
  Value arg = body->addArgument(type, NameLoc::get(builder.getStringAttr(name)));
  out.params.push_back({name, type, *bytes});
  if (auto why = exporterConstant(name, type, *bytes))
    frozenParams.try_emplace(name, *why);
  return values[name] = arg;
}

void GraphImporter::findTransposedCopies() {
  // 2-D float initializers by shape; a [n, m] one equal to the transpose of an [m, n] one is its copy.
  std::map<std::pair<int64_t, int64_t>, std::vector<const onnx::TensorProto *>> byShape;
  for (const auto &init : graph.initializer())
    if (init.dims_size() == 2 && init.data_type() == onnx::TensorProto::FLOAT && !constants.contains(init.name()))
      byShape[{init.dims(0), init.dims(1)}].push_back(&init);
  auto floats = [&](const onnx::TensorProto &t) -> std::optional<ArrayRef<char>> {
    auto bytes = tensorBytes(t, t.name());
    if (!bytes) {
      llvm::consumeError(bytes.takeError()); // reported when the initializer is used
      return std::nullopt;
    }
    return *bytes;
  };
  for (const auto &[shape, copies] : byShape) {
    if (shape.first == shape.second || shape.first > shape.second)
      continue; // square ones would need a value check each way; each pair is visited once
    auto sources = byShape.find({shape.second, shape.first});
    if (sources == byShape.end())
      continue;
    for (const auto *copy : copies)
      for (const auto *source : sources->second) {
        auto a = floats(*source), b = floats(*copy);
        if (!a || !b || a->size() != b->size())
          continue;
        const int64_t rows = shape.second, cols = shape.first; // source is [rows, cols]
        bool transposed = true;
        for (int64_t r = 0; r < rows && transposed; ++r)
          for (int64_t c = 0; c < cols && transposed; ++c)
            transposed = std::memcmp(a->data() + (r * cols + c) * 4, b->data() + (c * rows + r) * 4, 4) == 0;
        if (!transposed)
          continue;
        // The param keeps the model's name (a state-dict path has dots; an exporter's copy does not).
        bool copyIsModel = llvm::StringRef(copy->name()).contains('.') && !llvm::StringRef(source->name()).contains('.');
        if (copyIsModel)
          transposedCopies[source->name()] = copy->name();
        else
          transposedCopies[copy->name()] = source->name();
        break;
      }
  }
}

Expected<std::vector<int64_t>> GraphImporter::constInts(const onnx::NodeProto &node, int i) {
  if (!hasInput(node, i))
    return nodeInvalid(node, "missing required input #" + llvm::Twine(i));
  const std::string &name = node.input(i);
  const onnx::TensorProto *t = nullptr;
  if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  else if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  if (auto it = values.find(name); !t && it != values.end())
    if (auto folded = it->second.getDefiningOp<ConstantOp>()) // computed from shapes and constants
      if (auto ints = llvm::dyn_cast<DenseIntElementsAttr>(folded.getValue());
          ints && (ints.getElementType().isInteger(64) || ints.getElementType().isInteger(32)))
      {
        std::vector<int64_t> result;
        for (const APInt &v : ints.getValues<APInt>())
          result.push_back(v.getSExtValue());
        return result;
      }
  if (!t)
    return nodeUnsupported(node, "input '" + name + "' must be a constant or an initializer (it decides a shape)");
  if (t->data_type() != onnx::TensorProto::INT64 && t->data_type() != onnx::TensorProto::INT32)
    return nodeInvalid(node, "input '" + name + "' must be INT64, got " + onnxTypeName(t->data_type()));
  auto bytes = tensorBytes(*t, "tensor '" + name + "'");
  if (!bytes)
    return bytes.takeError();
  // Element by element: an empty tensor has no storage to copy from.
  const bool wide = t->data_type() == onnx::TensorProto::INT64;
  std::vector<int64_t> result(bytes->size() / (wide ? 8 : 4));
  for (size_t i = 0; i < result.size(); ++i) {
    if (wide) {
      std::memcpy(&result[i], bytes->data() + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, bytes->data() + 4 * i, 4);
      result[i] = v;
    }
  }
  return result;
}

Expected<std::vector<float>> GraphImporter::constFloats(const onnx::NodeProto &node, int i) {
  const std::string &name = node.input(i);
  const onnx::TensorProto *t = nullptr;
  if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  else if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  std::vector<float> result;
  if (auto it = values.find(name); !t && it != values.end())
    if (auto folded = it->second.getDefiningOp<ConstantOp>())
      if (auto floats = llvm::dyn_cast<DenseFPElementsAttr>(folded.getValue())) {
        for (const APFloat &v : floats.getValues<APFloat>())
          result.push_back(v.convertToFloat());
        return result;
      }
  if (!t)
    return nodeUnsupported(node, "input '" + name + "' must be a constant or an initializer (it decides a shape)");
  if (t->data_type() != onnx::TensorProto::FLOAT)
    return nodeInvalid(node, "input '" + name + "' must be FLOAT, got " + onnxTypeName(t->data_type()));
  auto bytes = tensorBytes(*t, "tensor '" + name + "'");
  if (!bytes)
    return bytes.takeError();
  result.resize(bytes->size() / 4);
  if (!result.empty())
    std::memcpy(result.data(), bytes->data(), bytes->size());
  return result;
}

Error GraphImporter::define(const onnx::NodeProto &node, unsigned i, Value v) {
  if (static_cast<int>(i) >= node.output_size() || node.output(i).empty())
    return Error::success();
  if (auto err = crossCheck(node, i, typeOf(v)))
    return err;
  values[node.output(i)] = v;
  return Error::success();
}

Expected<RankedTensorType> GraphImporter::checkedType(const onnx::NodeProto &n, ArrayRef<int64_t> dims, Type elt) {
  if (!shape::elementCount(dims))
    return nodeInvalid(n, "result dims [" + shape::str(dims) + "] have a negative dim, one past 2^40 or an "
                              "overflowing element count");
  return RankedTensorType::get(dims, elt);
}

Expected<int64_t> GraphImporter::normalizeAxis(const onnx::NodeProto &n, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return nodeInvalid(n, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

//===----------------------------------------------------------------------===//
// Operators
//===----------------------------------------------------------------------===//

#define TRY_ASSIGN(var, expr)                                                                                \
  auto var##OrErr = (expr);                                                                                  \
  if (!var##OrErr)                                                                                           \
    return var##OrErr.takeError();                                                                           \
  auto var = *var##OrErr;

static bool isFloat(Type t) { return llvm::isa<Float32Type, Float16Type, BFloat16Type>(t); }

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

Error GraphImporter::checkBinaryOperands(const onnx::NodeProto &n, Value a, Value b, bool allowBool) {
  Type elt = typeOf(a).getElementType();
  if (elt != typeOf(b).getElementType())
    return nodeUnsupported(n, "operands of different element types are not supported");
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64) && !(allowBool && elt.isInteger(1)))
    return nodeUnsupported(n, "element type is not supported");
  if (!shape::broadcast(typeOf(a).getShape(), typeOf(b).getShape()))
    return nodeInvalid(n, "operand shapes " + shape::str(typeOf(a).getShape()) + " and " +
                              shape::str(typeOf(b).getShape()) + " do not broadcast");
  return Error::success();
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

Error GraphImporter::mean(const onnx::NodeProto &n) {
  TRY_ASSIGN(sum, chain<AddOp>(n));
  if (!isFloat(typeOf(sum).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  return define(n, 0, broadcast<DivOp>(n, sum, scalar(n, typeOf(sum).getElementType(), n.input_size())));
}

Error GraphImporter::mod(const onnx::NodeProto &n) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  if (auto err = checkBinaryOperands(n, a, b))
    return err;
  bool fmod = intAttr(n, "fmod", 0) != 0;
  if (!fmod && isFloat(typeOf(a).getElementType()))
    return nodeInvalid(n, "a float Mod needs fmod = 1");
  auto dims = *shape::broadcast(typeOf(a).getShape(), typeOf(b).getShape());
  return define(n, 0, create<ModOp>(n, RankedTensorType::get(dims, typeOf(a).getElementType()), a, b, fmod));
}

Error GraphImporter::clip(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  // The bounds: inputs from opset 11 (each optional), attributes before.
  auto bound = [&](int i, const char *attr) -> Expected<Value> {
    if (opset < 11) {
      const auto *a = findAttr(n, attr);
      return a ? scalar(n, elt, a->f()) : Value();
    }
    if (!hasInput(n, i))
      return Value();
    TRY_ASSIGN(v, value(n, i));
    if (typeOf(v).getRank() != 0 && typeOf(v).getNumElements() != 1)
      return nodeInvalid(n, "'" + n.input(i) + "' must be a scalar");
    if (auto err = checkBinaryOperands(n, x, v))
      return std::move(err);
    return v;
  };
  TRY_ASSIGN(low, bound(1, "min"));
  TRY_ASSIGN(high, bound(2, "max"));
  Value y = x;
  if (low)
    y = broadcast<MaxOp>(n, y, low);
  if (high)
    y = broadcast<MinOp>(n, y, high);
  return define(n, 0, y);
}

Error GraphImporter::compare(const onnx::NodeProto &n, StringRef predicate) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  bool logical = predicate == "and" || predicate == "or" || predicate == "xor";
  if (logical && !typeOf(a).getElementType().isInteger(1))
    return nodeInvalid(n, "expected BOOL operands");
  if (auto err = checkBinaryOperands(n, a, b, /*allowBool=*/logical || predicate == "eq"))
    return err;
  return define(n, 0, compareValues(n, a, b, predicate));
}

Error GraphImporter::logicalNot(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  if (!typeOf(x).getElementType().isInteger(1))
    return nodeInvalid(n, "expected a BOOL operand");
  auto falseType = RankedTensorType::get({}, builder.getI1Type());
  Value no = create<ConstantOp>(n, falseType, DenseElementsAttr::get(falseType, false));
  return define(n, 0, compareValues(n, x, no, "eq"));
}

Error GraphImporter::isNaN(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  return define(n, 0, compareValues(n, x, x, "ne")); // only NaN differs from itself
}

Error GraphImporter::isInf(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  Value positive = compareValues(n, x, scalar(n, elt, INFINITY), "eq");
  Value negative = compareValues(n, x, scalar(n, elt, -INFINITY), "eq");
  bool wantPositive = intAttr(n, "detect_positive", 1) != 0, wantNegative = intAttr(n, "detect_negative", 1) != 0;
  if (wantPositive && wantNegative)
    return define(n, 0, compareValues(n, positive, negative, "or"));
  if (wantPositive || wantNegative)
    return define(n, 0, wantPositive ? positive : negative);
  auto type = RankedTensorType::get(typeOf(x).getShape(), builder.getI1Type());
  return define(n, 0, create<ConstantOp>(n, type, DenseElementsAttr::get(type, false)));
}

Error GraphImporter::leakyRelu(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  Value positive = compareValues(n, x, scalar(n, elt, 0.0), "ge");
  Value scaled = broadcast<MulOp>(n, x, scalar(n, elt, floatAttr(n, "alpha", 0.01f)));
  return define(n, 0, create<WhereOp>(n, x.getType(), positive, x, scaled));
}

/// max(0, min(1, alpha * x + beta)): HardSigmoid, and HardSwish's gate with alpha 1/6, beta 1/2.
static Value hardSigmoidOf(OpBuilder &b, Location loc, Value x, float alpha, float beta) {
  Type elt = llvm::cast<RankedTensorType>(x.getType()).getElementType();
  Value affine = broadcastBinary<AddOp>(b, loc, broadcastBinary<MulOp>(b, loc, x, scalarConstant(b, loc, elt, alpha)),
                                        scalarConstant(b, loc, elt, beta));
  Value upper = broadcastBinary<MinOp>(b, loc, affine, scalarConstant(b, loc, elt, 1.0));
  return broadcastBinary<MaxOp>(b, loc, upper, scalarConstant(b, loc, elt, 0.0));
}

Error GraphImporter::hardSigmoid(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  return define(n, 0, hardSigmoidOf(builder, loc(n), x, floatAttr(n, "alpha", 0.2f), floatAttr(n, "beta", 0.5f)));
}

Error GraphImporter::hardSwish(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  return define(n, 0, create<HardSwishOp>(n, x.getType(), x));
}

Error GraphImporter::gelu(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  const auto *a = findAttr(n, "approximate");
  std::string approximate = a ? a->s() : "none";
  if (approximate != "none" && approximate != "tanh")
    return nodeInvalid(n, "approximate must be 'none' or 'tanh', got '" + approximate + "'");
  return define(n, 0, create<GeluOp>(n, x.getType(), x, builder.getStringAttr(approximate)));
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

Error GraphImporter::layerNorm(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(scale, value(n, 1));
  Value bias;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(b, value(n, 2));
    bias = b;
  }
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (intAttr(n, "stash_type", 1) != onnx::TensorProto::FLOAT)
    return nodeUnsupported(n, "stash_type other than FLOAT is not supported");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", -1), typeOf(x).getRank()));
  auto normalized = typeOf(x).getShape().drop_front(axis);
  for (Value v : {scale, bias})
    if (v && (typeOf(v).getShape() != normalized || typeOf(v).getElementType() != typeOf(x).getElementType()))
      return nodeUnsupported(n, "scale/bias must have the normalized shape " + shape::str(normalized) +
                                    " and the input's element type (got " + shape::str(typeOf(v).getShape()) + ")");
  shape::Dims statsShape(typeOf(x).getShape().take_front(axis));
  statsShape.resize(typeOf(x).getRank(), 1);
  auto statsType = RankedTensorType::get(statsShape, builder.getF32Type());
  auto op = builder.create<LayerNormOp>(loc(n), TypeRange{x.getType(), statsType, statsType}, x, scale, bias,
                                        builder.getI64IntegerAttr(axis),
                                        builder.getF32FloatAttr(floatAttr(n, "epsilon", 1e-5f)));
  for (auto [i, r] : llvm::enumerate(op->getResults()))
    if (auto err = define(n, i, r))
      return err;
  return Error::success();
}

Error GraphImporter::checkChannelsFirst(const onnx::NodeProto &n, RankedTensorType x) {
  if (!isFloat(x.getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (x.getRank() < 3)
    return nodeInvalid(n, "the input must be [N, C, d1, ...], got rank " + llvm::Twine(x.getRank()));
  return Error::success();
}

Error GraphImporter::instanceNorm(const onnx::NodeProto &n) {
  // Each (sample, channel) normalized over its spatial dims: a LayerNorm from axis 2 (a unit gain over the
  // normalized dims), then the per-channel scale and bias. GroupNorm exports as this over [N, groups, -1].
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(scale, value(n, 1));
  TRY_ASSIGN(bias, value(n, 2));
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  if (auto err = checkChannelsFirst(n, xt))
    return err;
  const int64_t channels = xt.getDimSize(1);
  for (Value v : {scale, bias})
    if (typeOf(v).getShape() != ArrayRef<int64_t>{channels} || typeOf(v).getElementType() != elt)
      return nodeInvalid(n, "scale and bias must be [" + llvm::Twine(channels) + "] of the input's type");
  auto normalizedType = RankedTensorType::get(xt.getShape().drop_front(2), elt);
  Value ones = create<ConstantOp>(n, normalizedType, DenseElementsAttr::get(normalizedType, builder.getFloatAttr(elt, 1.0)));
  shape::Dims statsShape{xt.getDimSize(0), channels};
  statsShape.resize(xt.getRank(), 1);
  auto statsType = RankedTensorType::get(statsShape, builder.getF32Type());
  auto normalized = builder.create<LayerNormOp>(loc(n), TypeRange{xt, statsType, statsType}, x, ones, Value(),
                                                builder.getI64IntegerAttr(2),
                                                builder.getF32FloatAttr(floatAttr(n, "epsilon", 1e-5f)));
  shape::Dims perChannel(xt.getRank() - 1, 1);
  perChannel[0] = channels;
  auto perChannelType = RankedTensorType::get(perChannel, elt);
  Value y = broadcast<MulOp>(n, normalized->getResult(0), create<ReshapeOp>(n, perChannelType, scale));
  return define(n, 0, broadcast<AddOp>(n, y, create<ReshapeOp>(n, perChannelType, bias)));
}

Expected<Value> GraphImporter::rnnActivation(const onnx::NodeProto &n, llvm::StringRef name, float alpha, float beta,
                                             Value x) {
  Type elt = typeOf(x).getElementType();
  auto affine = [&](float a, float b) { return broadcast<AddOp>(n, broadcast<MulOp>(n, x, scalar(n, elt, a)), scalar(n, elt, b)); };
  const std::string lower = name.lower();
  if (lower == "sigmoid")
    return create<SigmoidOp>(n, x.getType(), x);
  if (lower == "tanh")
    return create<TanhOp>(n, x.getType(), x);
  if (lower == "relu")
    return create<ReluOp>(n, x.getType(), x);
  if (lower == "affine")
    return affine(alpha, beta);
  if (lower == "hardsigmoid") // clip(alpha x + beta, 0, 1), ONNX's defaults 0.2 and 0.5
    return broadcast<MinOp>(n, broadcast<MaxOp>(n, affine(alpha, beta), scalar(n, elt, 0.0)), scalar(n, elt, 1.0));
  if (lower == "leakyrelu")
    return broadcast<MaxOp>(n, x, broadcast<MulOp>(n, x, scalar(n, elt, alpha)));
  if (lower == "scaledtanh")
    return broadcast<MulOp>(n, create<TanhOp>(n, x.getType(), broadcast<MulOp>(n, x, scalar(n, elt, beta))),
                            scalar(n, elt, alpha));
  return nodeUnsupported(n, "activation '" + name + "' is not supported (Sigmoid, Tanh, Relu, Affine, HardSigmoid, "
                                                    "LeakyRelu, ScaledTanh)");
}

Error GraphImporter::recurrent(const onnx::NodeProto &n) {
  const std::string op = n.op_type();
  const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  TRY_ASSIGN(xIn, value(n, 0));
  TRY_ASSIGN(w, value(n, 1));
  TRY_ASSIGN(r, value(n, 2));
  Type elt = typeOf(xIn).getElementType();
  if (!isFloat(elt) || typeOf(w).getElementType() != elt || typeOf(r).getElementType() != elt)
    return nodeUnsupported(n, "element type is not supported (float input and weights of one type)");
  const bool batchFirst = intAttr(n, "layout", 0) != 0;
  const std::string direction = findAttr(n, "direction") ? findAttr(n, "direction")->s() : "forward";
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return nodeInvalid(n, "direction must be forward, reverse or bidirectional, got '" + direction + "'");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (typeOf(xIn).getRank() != 3 || typeOf(w).getRank() != 3 || typeOf(r).getRank() != 3)
    return nodeInvalid(n, "X, W and R must be rank 3");
  Value x = xIn; // [T, B, I]
  if (batchFirst)
    x = create<TransposeOp>(n, RankedTensorType::get({typeOf(xIn).getDimSize(1), typeOf(xIn).getDimSize(0),
                                                      typeOf(xIn).getDimSize(2)}, elt),
                            xIn, ArrayRef<int64_t>{1, 0, 2});
  const int64_t steps = typeOf(x).getDimSize(0), batch = typeOf(x).getDimSize(1), inputSize = typeOf(x).getDimSize(2);
  const int64_t hidden = typeOf(r).getDimSize(2);
  if (intAttr(n, "hidden_size", hidden) != hidden)
    return nodeInvalid(n, "hidden_size " + llvm::Twine(intAttr(n, "hidden_size", hidden)) + " disagrees with R " +
                              shape::str(typeOf(r).getShape()));
  if (typeOf(w).getShape() != ArrayRef<int64_t>{dirs, gates * hidden, inputSize} ||
      typeOf(r).getShape() != ArrayRef<int64_t>{dirs, gates * hidden, hidden})
    return nodeInvalid(n, "W " + shape::str(typeOf(w).getShape()) + " and R " + shape::str(typeOf(r).getShape()) +
                              " do not fit " + llvm::Twine(dirs) + " direction(s), hidden size " + llvm::Twine(hidden) +
                              " and input size " + llvm::Twine(inputSize));
  if (steps < 1)
    return nodeUnsupported(n, "an empty sequence is not supported");
  auto optional = [&](int i, ArrayRef<int64_t> dims, const char *what) -> Expected<Value> {
    if (!hasInput(n, i))
      return Value();
    TRY_ASSIGN(v, value(n, i));
    if (typeOf(v).getShape() != dims || typeOf(v).getElementType() != elt)
      return nodeInvalid(n, llvm::Twine(what) + " must be " + shape::str(dims) + " of the input's type, got " +
                                shape::str(typeOf(v).getShape()));
    return v;
  };
  TRY_ASSIGN(bias, optional(3, {dirs, 2 * gates * hidden}, "B"));
  auto stateDims = batchFirst ? shape::Dims{batch, dirs, hidden} : shape::Dims{dirs, batch, hidden};
  TRY_ASSIGN(initialH, optional(5, stateDims, "initial_h"));
  TRY_ASSIGN(initialC, optional(6, op == "LSTM" ? ArrayRef<int64_t>(stateDims) : ArrayRef<int64_t>{}, "initial_c"));
  TRY_ASSIGN(peepholes, optional(7, {dirs, 3 * hidden}, "P"));
  Value lengths;
  if (hasInput(n, 4)) {
    TRY_ASSIGN(l, value(n, 4));
    if (typeOf(l).getShape() != ArrayRef<int64_t>{batch} ||
        !(typeOf(l).getElementType().isInteger(32) || typeOf(l).getElementType().isInteger(64)))
      return nodeInvalid(n, "sequence_lens must be [" + llvm::Twine(batch) + "] int32");
    lengths = create<ReshapeOp>(n, RankedTensorType::get({batch, 1}, typeOf(l).getElementType()), l);
  }
  const bool linearBeforeReset = intAttr(n, "linear_before_reset", 0) != 0;
  const bool inputForget = intAttr(n, "input_forget", 0) != 0;
  const float clip = floatAttr(n, "clip", 0.0f);
  if (findAttr(n, "clip") && !(clip > 0.0f))
    return nodeInvalid(n, "clip must be positive");
  // Activations: per direction f, g (GRU, LSTM) and h (LSTM); alphas and betas in order for those taking them.
  std::vector<std::string> activations;
  if (const auto *a = findAttr(n, "activations"))
    activations.assign(a->strings().begin(), a->strings().end());
  const int64_t perDirection = op == "LSTM" ? 3 : op == "GRU" ? 2 : 1;
  if (activations.empty()) { // ONNX's defaults: f = Sigmoid, g = h = Tanh (an RNN's one: Tanh)
    const std::vector<std::string> defaults = op == "RNN" ? std::vector<std::string>{"Tanh"}
                                              : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < dirs; ++d)
      activations.insert(activations.end(), defaults.begin(), defaults.end());
  }
  if (static_cast<int64_t>(activations.size()) != perDirection * dirs)
    return nodeInvalid(n, "expected " + llvm::Twine(perDirection * dirs) + " activations, got " +
                              llvm::Twine(activations.size()));
  std::vector<float> alphas, betas;
  if (const auto *a = findAttr(n, "activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const auto *a = findAttr(n, "activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  size_t nextAlpha = 0, nextBeta = 0;
  std::vector<std::pair<float, float>> params;
  for (const auto &name : activations) {
    const std::string lower = llvm::StringRef(name).lower();
    const bool takesAlpha = lower == "affine" || lower == "hardsigmoid" || lower == "leakyrelu" || lower == "scaledtanh";
    const bool takesBeta = lower == "affine" || lower == "hardsigmoid" || lower == "scaledtanh";
    float alpha = lower == "hardsigmoid" ? 0.2f : lower == "leakyrelu" ? 0.01f : 1.0f;
    float beta = lower == "hardsigmoid" ? 0.5f : lower == "affine" ? 0.0f : 1.0f;
    if (takesAlpha && nextAlpha < alphas.size())
      alpha = alphas[nextAlpha++];
    if (takesBeta && nextBeta < betas.size())
      beta = betas[nextBeta++];
    params.push_back({alpha, beta});
  }

  auto tensor = [&](ArrayRef<int64_t> dims) { return RankedTensorType::get(dims, elt); };
  auto slice = [&](Value v, int64_t axis, int64_t begin, int64_t end) {
    auto t = typeOf(v);
    SmallVector<int64_t> starts(t.getRank(), 0), ends(t.getShape()), stepsOne(t.getRank(), 1), dims(t.getShape());
    starts[axis] = begin, ends[axis] = end, dims[axis] = end - begin;
    return create<SliceOp>(n, tensor(dims), v, starts, ends, stepsOne);
  };
  auto reshape = [&](Value v, ArrayRef<int64_t> dims) { return create<ReshapeOp>(n, tensor(dims), v); };
  auto add = [&](Value a, Value b) { return broadcast<AddOp>(n, a, b); };
  auto mul = [&](Value a, Value b) { return broadcast<MulOp>(n, a, b); };
  llvm::DenseMap<Value, Value> transposed; // each weight transposed once, not once per step
  auto matmulT = [&](Value a, Value weight) { // a [rows, k] times weight [cols, k] transposed
    auto wt = typeOf(weight);
    Value &t = transposed[weight];
    if (!t)
      t = create<TransposeOp>(n, tensor({wt.getDimSize(1), wt.getDimSize(0)}), weight, ArrayRef<int64_t>{1, 0});
    return create<MatMulOp>(n, tensor({typeOf(a).getDimSize(0), wt.getDimSize(0)}), a, t);
  };
  auto clipped = [&](Value v) {
    if (clip <= 0.0f)
      return v;
    return broadcast<MinOp>(n, broadcast<MaxOp>(n, v, scalar(n, elt, -clip)), scalar(n, elt, clip));
  };
  auto stateOf = [&](Value all, int64_t d) -> Value { // [B, H] of direction d, or zeros
    if (!all)
      return create<ConstantOp>(n, tensor({batch, hidden}), DenseElementsAttr::get(tensor({batch, hidden}), builder.getFloatAttr(elt, 0.0)));
    Value s = slice(all, batchFirst ? 1 : 0, d, d + 1);
    return reshape(s, {batch, hidden});
  };

  std::vector<std::vector<Value>> outputs(dirs); // per direction, per time step: [B, H]
  std::vector<Value> lastH(dirs), lastC(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    Value wd = reshape(slice(w, 0, d, d + 1), {gates * hidden, inputSize});
    Value rd = reshape(slice(r, 0, d, d + 1), {gates * hidden, hidden});
    Value wb, rb;
    if (bias) {
      Value bd = reshape(slice(bias, 0, d, d + 1), {2 * gates * hidden});
      wb = slice(bd, 0, 0, gates * hidden), rb = slice(bd, 0, gates * hidden, 2 * gates * hidden);
    }
    // Every step's input projection at once: [T * B, I] x W^T (+ Wb, and Rb where it adds outside a gate).
    Value xw = matmulT(reshape(x, {steps * batch, inputSize}), wd);
    if (wb)
      xw = add(xw, wb);
    if (rb && op != "GRU")
      xw = add(xw, rb);
    if (rb && op == "GRU") // z and r take Rb outside; h takes it inside its reset (or its R GEMM)
      xw = add(xw, create<ConcatOp>(n, tensor({gates * hidden}),
                                    ValueRange{slice(rb, 0, 0, 2 * hidden),
                                               create<ConstantOp>(n, tensor({hidden}), DenseElementsAttr::get(tensor({hidden}), builder.getFloatAttr(elt, 0.0)))},
                                    0));
    xw = reshape(xw, {steps, batch, gates * hidden});
    Value rbh = rb && op == "GRU" ? slice(rb, 0, 2 * hidden, 3 * hidden) : Value();
    Value pi, po, pf;
    if (peepholes) {
      Value pd = reshape(slice(peepholes, 0, d, d + 1), {3 * hidden});
      pi = slice(pd, 0, 0, hidden), po = slice(pd, 0, hidden, 2 * hidden), pf = slice(pd, 0, 2 * hidden, 3 * hidden);
    }
    auto act = [&](int64_t k, Value v) {
      return rnnActivation(n, activations[d * perDirection + k], params[d * perDirection + k].first,
                           params[d * perDirection + k].second, v);
    };
    Value h = stateOf(initialH, d), c = op == "LSTM" ? stateOf(initialC, d) : Value();
    // GRU: R's z and r rows multiply the state, its h rows the state or the reset state.
    Value rzr = op == "GRU" ? slice(rd, 0, 0, 2 * hidden) : Value(), rh = op == "GRU" ? slice(rd, 0, 2 * hidden, 3 * hidden) : Value();
    outputs[d].resize(steps);
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = reverse ? steps - 1 - i : i;
      Value xt = reshape(slice(xw, 0, t, t + 1), {batch, gates * hidden});
      auto xGate = [&](int64_t k) { return slice(xt, 1, k * hidden, (k + 1) * hidden); };
      Value hNew, cNew;
      if (op == "RNN") {
        TRY_ASSIGN(a, act(0, clipped(add(xt, matmulT(h, rd)))));
        hNew = a;
      } else if (op == "LSTM") {
        Value hr = matmulT(h, rd);
        auto pre = [&](int64_t k) { return add(xGate(k), slice(hr, 1, k * hidden, (k + 1) * hidden)); };
        Value iPre = pre(0), oPre = pre(1), fPre = pre(2), cPre = pre(3); // ONNX's gate order: i, o, f, c
        if (pi)
          iPre = add(iPre, mul(pi, c)), fPre = add(fPre, mul(pf, c));
        TRY_ASSIGN(ig, act(0, clipped(iPre)));
        Value fg;
        if (inputForget) {
          fg = broadcast<SubOp>(n, scalar(n, elt, 1.0), ig);
        } else {
          TRY_ASSIGN(f, act(0, clipped(fPre)));
          fg = f;
        }
        TRY_ASSIGN(cg, act(1, clipped(cPre)));
        cNew = add(mul(fg, c), mul(ig, cg));
        if (po)
          oPre = add(oPre, mul(po, cNew));
        TRY_ASSIGN(og, act(0, clipped(oPre)));
        TRY_ASSIGN(hc, act(2, cNew));
        hNew = mul(og, hc);
      } else { // GRU, gates z, r, h
        Value hr = matmulT(h, rzr);
        TRY_ASSIGN(z, act(0, clipped(add(xGate(0), slice(hr, 1, 0, hidden)))));
        TRY_ASSIGN(rg, act(0, clipped(add(xGate(1), slice(hr, 1, hidden, 2 * hidden)))));
        Value candidate;
        if (linearBeforeReset) {
          Value hrh = matmulT(h, rh);
          if (rbh)
            hrh = add(hrh, rbh);
          candidate = add(xGate(2), mul(rg, hrh));
        } else {
          candidate = add(xGate(2), matmulT(mul(rg, h), rh));
          if (rbh)
            candidate = add(candidate, rbh);
        }
        TRY_ASSIGN(hh, act(1, clipped(candidate)));
        // (1 - z) * hh + z * h
        hNew = add(mul(broadcast<SubOp>(n, scalar(n, elt, 1.0), z), hh), mul(z, h));
      }
      if (lengths) { // past a sequence's end its state holds and its output is zero
        Type lt = typeOf(lengths).getElementType();
        Value live = compareValues(n, create<ConstantOp>(n, RankedTensorType::get({}, lt),
                                                         DenseElementsAttr::get(RankedTensorType::get({}, lt),
                                                                                builder.getIntegerAttr(lt, t))),
                                   lengths, "lt"); // [B, 1]
        auto whereLive = [&](Value a, Value b) {
          return create<WhereOp>(n, tensor({batch, hidden}), live, a, b);
        };
        outputs[d][t] = whereLive(hNew, stateOf(Value(), d));
        hNew = whereLive(hNew, h);
        if (cNew)
          cNew = whereLive(cNew, c);
      } else {
        outputs[d][t] = hNew;
      }
      h = hNew, c = cNew;
    }
    lastH[d] = h, lastC[d] = c;
  }
  // Y [T, dirs, B, H] (layout 1: [B, T, dirs, H]); Y_h, Y_c [dirs, B, H] (layout 1: [B, dirs, H]).
  if (outputUsed(n, 0)) {
    SmallVector<Value> perStep;
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t d = 0; d < dirs; ++d)
        perStep.push_back(reshape(outputs[d][t], {1, 1, batch, hidden}));
    Value y = create<ConcatOp>(n, tensor({steps * dirs, 1, batch, hidden}), perStep, 0);
    y = reshape(y, {steps, dirs, batch, hidden});
    if (batchFirst)
      y = create<TransposeOp>(n, tensor({batch, steps, dirs, hidden}), y, ArrayRef<int64_t>{2, 0, 1, 3});
    if (auto err = define(n, 0, y))
      return err;
  }
  auto stacked = [&](const std::vector<Value> &states) {
    SmallVector<Value> parts;
    for (Value s : states)
      parts.push_back(reshape(s, {1, batch, hidden}));
    Value all = create<ConcatOp>(n, tensor({dirs, batch, hidden}), parts, 0);
    return batchFirst ? create<TransposeOp>(n, tensor({batch, dirs, hidden}), all, ArrayRef<int64_t>{1, 0, 2}) : all;
  };
  if (outputUsed(n, 1))
    if (auto err = define(n, 1, stacked(lastH)))
      return err;
  if (op == "LSTM" && outputUsed(n, 2))
    if (auto err = define(n, 2, stacked(lastC)))
      return err;
  return Error::success();
}

Expected<GraphImporter::ReduceSpec> GraphImporter::reduceSpec(const onnx::NodeProto &n, RankedTensorType in,
                                                               bool axesIsInput) {
  ReduceSpec spec;
  spec.keepdims = intAttr(n, "keepdims", 1) != 0;
  if (axesIsInput && hasInput(n, 1)) {
    TRY_ASSIGN(a, constInts(n, 1));
    spec.axes = a;
  } else if (const auto *a = findAttr(n, "axes")) {
    spec.axes.assign(a->ints().begin(), a->ints().end());
  }
  if (spec.axes.empty()) {
    if (intAttr(n, "noop_with_empty_axes", 0)) {
      spec.noop = true;
      return spec;
    }
    for (int64_t i = 0; i < in.getRank(); ++i)
      spec.axes.push_back(i);
  }
  for (auto &a : spec.axes) {
    TRY_ASSIGN(norm, normalizeAxis(n, a, in.getRank()));
    a = norm;
  }
  llvm::sort(spec.axes);
  if (std::adjacent_find(spec.axes.begin(), spec.axes.end()) != spec.axes.end())
    return nodeInvalid(n, "axes repeat a dimension");
  return spec;
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

/// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp as elementwise ops around a
/// sum (LogSumExp shifted by the max, so large values do not overflow); they train through those.
Error GraphImporter::compositeReduction(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  TRY_ASSIGN(spec, reduceSpec(n, typeOf(x), opset >= 18));
  const std::string &op = n.op_type();
  auto sum = [&](Value v) { return spec.noop ? v : reduceWith<ReduceSumOp>(n, v, spec); };
  if (op == "ReduceL1")
    return define(n, 0, sum(create<AbsOp>(n, x.getType(), x)));
  if (op == "ReduceSumSquare" || op == "ReduceL2") {
    Value squares = sum(broadcast<MulOp>(n, x, x));
    return define(n, 0, op == "ReduceL2" ? create<SqrtOp>(n, squares.getType(), squares) : squares);
  }
  if (op == "ReduceLogSum") {
    Value total = sum(x);
    return define(n, 0, create<LogOp>(n, total.getType(), total));
  }
  if (spec.noop) // LogSumExp of one value
    return define(n, 0, x);
  ReduceSpec kept = spec;
  kept.keepdims = true;
  Value max = reduceWith<ReduceMaxOp>(n, x, kept);
  Value shifted = broadcast<SubOp>(n, x, max);
  Value total = sum(create<ExpOp>(n, shifted.getType(), shifted));
  Value logTotal = create<LogOp>(n, total.getType(), total);
  return define(n, 0, broadcast<AddOp>(n, logTotal, create<ReshapeOp>(n, logTotal.getType(), max)));
}

Error GraphImporter::matmul(const onnx::NodeProto &n) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  if (!isFloat(typeOf(a).getElementType()) || typeOf(a).getElementType() != typeOf(b).getElementType())
    return nodeUnsupported(n, "operands must share a float element type (f32, f16, bf16)");
  auto dims = shape::matmul(typeOf(a).getShape(), typeOf(b).getShape());
  if (!dims)
    return nodeInvalid(n, "operand shapes " + shape::str(typeOf(a).getShape()) + " and " +
                              shape::str(typeOf(b).getShape()) + " are incompatible for MatMul");
  TRY_ASSIGN(type, checkedType(n, *dims, typeOf(a).getElementType()));
  return define(n, 0, create<MatMulOp>(n, type, a, b));
}

Error GraphImporter::gemm(const onnx::NodeProto &n) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  Value c;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(cv, value(n, 2));
    c = cv;
  }
  Type elt = typeOf(a).getElementType();
  if (!isFloat(elt) || elt != typeOf(b).getElementType() || (c && typeOf(c).getElementType() != elt))
    return nodeUnsupported(n, "operands must share a float element type (f32, f16, bf16)");
  if (typeOf(a).getRank() != 2 || typeOf(b).getRank() != 2)
    return nodeInvalid(n, "A and B must be 2-D, got " + shape::str(typeOf(a).getShape()) + " and " +
                              shape::str(typeOf(b).getShape()));
  bool transA = intAttr(n, "transA", 0), transB = intAttr(n, "transB", 0);
  int64_t m = typeOf(a).getDimSize(transA), ka = typeOf(a).getDimSize(!transA);
  int64_t kb = typeOf(b).getDimSize(transB), nn = typeOf(b).getDimSize(!transB);
  if (ka != kb)
    return nodeInvalid(n, "inner dims differ: " + llvm::Twine(ka) + " and " + llvm::Twine(kb));
  if (c) {
    auto bc = shape::broadcast(typeOf(c).getShape(), {m, nn});
    if (!bc || ArrayRef<int64_t>(*bc) != ArrayRef<int64_t>{m, nn})
      return nodeInvalid(n, "C of shape " + shape::str(typeOf(c).getShape()) + " does not broadcast to " +
                                llvm::Twine(m) + "x" + llvm::Twine(nn));
  }
  auto type = RankedTensorType::get({m, nn}, elt);
  return define(n, 0,
                create<GemmOp>(n, type, a, b, c, builder.getF32FloatAttr(floatAttr(n, "alpha", 1.0f)),
                               builder.getF32FloatAttr(floatAttr(n, "beta", 1.0f)), builder.getBoolAttr(transA),
                               builder.getBoolAttr(transB)));
}

Error GraphImporter::transpose(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  llvm::SmallVector<int64_t> perm;
  if (const auto *a = findAttr(n, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  else
    for (int64_t i = in.getRank() - 1; i >= 0; --i)
      perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return nodeInvalid(n, "perm has " + llvm::Twine(perm.size()) + " entries for rank " + llvm::Twine(in.getRank()));
  shape::Dims dims;
  llvm::SmallVector<bool> seen(perm.size());
  for (int64_t &p : perm) {
    if (p < 0)
      p += in.getRank();
    if (p < 0 || p >= in.getRank() || seen[p])
      return nodeInvalid(n, "perm is not a permutation");
    seen[p] = true;
    dims.push_back(in.getDimSize(p));
  }
  return define(n, 0, create<TransposeOp>(n, RankedTensorType::get(dims, in.getElementType()), x, perm));
}

Error GraphImporter::reshapeTo(const onnx::NodeProto &n, Value input, ArrayRef<int64_t> dims) {
  TRY_ASSIGN(type, checkedType(n, dims, typeOf(input).getElementType()));
  if (type.getNumElements() != typeOf(input).getNumElements())
    return nodeInvalid(n, "cannot reshape " + shape::str(typeOf(input).getShape()) + " (" +
                              llvm::Twine(typeOf(input).getNumElements()) + " elements) to " + shape::str(dims));
  return define(n, 0, create<ReshapeOp>(n, type, input));
}

Error GraphImporter::reshape(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(target, constInts(n, 1));
  if (const auto *t = constants.lookup(n.input(1)); t && t->dims_size() != 1)
    return nodeInvalid(n, "the shape input must be 1-D, got rank " + llvm::Twine(t->dims_size()));
  auto in = typeOf(x);
  bool allowZero = intAttr(n, "allowzero", 0);
  shape::Dims dims;
  int inferred = -1;
  int64_t known = 1;
  for (auto [i, d] : llvm::enumerate(target)) {
    if (d == 0 && !allowZero) {
      if (static_cast<int64_t>(i) >= in.getRank())
        return nodeInvalid(n, "shape entry " + llvm::Twine(i) + " is 0 (copy) but the input has rank " +
                                  llvm::Twine(in.getRank()));
      d = in.getDimSize(i);
    }
    if (d == -1) {
      if (inferred >= 0)
        return nodeInvalid(n, "shape has more than one -1");
      inferred = i;
    } else if (d < 0) {
      return nodeInvalid(n, "shape entry " + llvm::Twine(i) + " is " + llvm::Twine(d));
    } else if (llvm::MulOverflow(known, d, known)) {
      return nodeInvalid(n, "shape's element count overflows int64");
    }
    dims.push_back(d);
  }
  if (inferred >= 0) {
    if (known == 0 || in.getNumElements() % known)
      return nodeInvalid(n, "cannot infer the -1 dim: " + llvm::Twine(in.getNumElements()) +
                                " elements do not divide by " + llvm::Twine(known));
    dims[inferred] = in.getNumElements() / known;
  }
  return reshapeTo(n, x, dims);
}

Error GraphImporter::flatten(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  int64_t axis = intAttr(n, "axis", 1);
  if (axis < -in.getRank() || axis > in.getRank())
    return nodeInvalid(n, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(in.getRank()));
  if (axis < 0)
    axis += in.getRank();
  int64_t outer = *shape::elementCount(in.getShape().take_front(axis));
  return reshapeTo(n, x, {outer, outer ? in.getNumElements() / outer : 0});
}

Expected<std::vector<int64_t>> GraphImporter::axesInputOrAttr(const onnx::NodeProto &n) {
  if (opset >= 13)
    return hasInput(n, 1) ? constInts(n, 1) : std::vector<int64_t>{};
  const auto *a = findAttr(n, "axes");
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}

Error GraphImporter::squeeze(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  TRY_ASSIGN(axes, axesInputOrAttr(n));
  for (auto &a : axes) {
    TRY_ASSIGN(norm, normalizeAxis(n, a, in.getRank()));
    a = norm;
    if (in.getDimSize(a) != 1)
      return nodeInvalid(n, "cannot squeeze dim " + llvm::Twine(a) + " of size " + llvm::Twine(in.getDimSize(a)));
  }
  shape::Dims dims;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    bool drop = axes.empty() ? in.getDimSize(i) == 1 : llvm::is_contained(axes, i);
    if (!drop)
      dims.push_back(in.getDimSize(i));
  }
  return reshapeTo(n, x, dims);
}

Error GraphImporter::unsqueeze(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(axes, axesInputOrAttr(n));
  auto in = typeOf(x);
  int64_t rank = in.getRank() + axes.size();
  for (auto &a : axes) {
    TRY_ASSIGN(norm, normalizeAxis(n, a, rank));
    a = norm;
  }
  llvm::sort(axes);
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return nodeInvalid(n, "axes repeat a dimension");
  shape::Dims dims;
  for (int64_t i = 0, src = 0; i < rank; ++i)
    dims.push_back(llvm::is_contained(axes, i) ? 1 : in.getDimSize(src++));
  return reshapeTo(n, x, dims);
}

Error GraphImporter::concat(const onnx::NodeProto &n) {
  if (!findAttr(n, "axis"))
    return nodeInvalid(n, "missing required attribute 'axis'");
  llvm::SmallVector<Value> inputs;
  for (int i = 0; i < n.input_size(); ++i) {
    TRY_ASSIGN(v, value(n, i));
    inputs.push_back(v);
  }
  if (inputs.empty())
    return nodeInvalid(n, "needs at least one input");
  auto first = typeOf(inputs[0]);
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), first.getRank()));
  shape::Dims dims(first.getShape());
  dims[axis] = 0;
  for (Value v : inputs) {
    auto t = typeOf(v);
    if (t.getElementType() != first.getElementType() || t.getRank() != first.getRank())
      return nodeInvalid(n, "inputs differ in element type or rank");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && t.getDimSize(d) != first.getDimSize(d))
        return nodeInvalid(n, "inputs " + shape::str(first.getShape()) + " and " + shape::str(t.getShape()) +
                                  " differ off the concat axis");
    dims[axis] += t.getDimSize(axis);
  }
  return define(n, 0, create<ConcatOp>(n, RankedTensorType::get(dims, first.getElementType()), inputs, axis));
}

Error GraphImporter::split(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), in.getRank()));
  int64_t dim = in.getDimSize(axis), parts = n.output_size();
  std::vector<int64_t> sizes;
  if (hasInput(n, 1)) {
    TRY_ASSIGN(s, constInts(n, 1));
    sizes = s;
  } else if (const auto *a = findAttr(n, "split")) {
    sizes.assign(a->ints().begin(), a->ints().end());
  } else {
    // Opset 18's num_outputs: ceil-sized chunks, the last one smaller; before, equal parts.
    int64_t num = intAttr(n, "num_outputs", parts);
    if (num != parts || num <= 0)
      return nodeInvalid(n, "num_outputs " + llvm::Twine(num) + " differs from the " + llvm::Twine(parts) + " outputs");
    int64_t chunk = opset >= 18 ? (dim + num - 1) / num : dim / num;
    if (opset < 18 && dim % num)
      return nodeInvalid(n, "dim " + llvm::Twine(dim) + " does not split into " + llvm::Twine(num) + " equal parts");
    for (int64_t i = 0; i < num; ++i)
      sizes.push_back(std::min(chunk, dim - i * chunk));
  }
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (static_cast<int64_t>(sizes.size()) != parts || total != dim || llvm::any_of(sizes, [](int64_t s) { return s < 0; }))
    return nodeInvalid(n, "split sizes do not add up to dim " + llvm::Twine(dim) + " over " + llvm::Twine(parts) + " outputs");
  llvm::SmallVector<Type> types;
  for (int64_t s : sizes) {
    shape::Dims dims(in.getShape());
    dims[axis] = s;
    types.push_back(RankedTensorType::get(dims, in.getElementType()));
  }
  auto op = builder.create<SplitOp>(loc(n), types, x, axis);
  for (auto [i, r] : llvm::enumerate(op.getResults()))
    if (auto err = define(n, i, r))
      return err;
  return Error::success();
}

Error GraphImporter::slice(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  // Before opset 10, starts, ends and axes are attributes and there are no steps.
  auto ints = [&](int i, const char *attr) -> Expected<std::vector<int64_t>> {
    if (opset >= 10)
      return constInts(n, i);
    const auto *a = findAttr(n, attr);
    if (!a)
      return nodeInvalid(n, "missing required attribute '" + llvm::Twine(attr) + "'");
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  };
  TRY_ASSIGN(starts, ints(1, "starts"));
  TRY_ASSIGN(ends, ints(2, "ends"));
  auto in = typeOf(x);
  int64_t rank = in.getRank();
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (opset < 10 && findAttr(n, "axes")) {
    TRY_ASSIGN(a, ints(3, "axes"));
    axes = a;
  } else if (opset >= 10 && hasInput(n, 3)) {
    TRY_ASSIGN(a, constInts(n, 3));
    axes = a;
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  }
  if (opset >= 10 && hasInput(n, 4)) {
    TRY_ASSIGN(s, constInts(n, 4));
    steps = s;
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return nodeInvalid(n, "starts, ends, axes and steps differ in length");
  llvm::SmallVector<int64_t> s(rank, 0), e(in.getShape()), st(rank, 1);
  llvm::SmallVector<bool> seen(rank);
  for (size_t i = 0; i < axes.size(); ++i) {
    TRY_ASSIGN(axis, normalizeAxis(n, axes[i], rank));
    if (seen[axis])
      return nodeInvalid(n, "axes repeat dim " + llvm::Twine(axis));
    seen[axis] = true;
    int64_t dim = in.getDimSize(axis), step = steps[i];
    if (step == 0)
      return nodeInvalid(n, "step is 0 on axis " + llvm::Twine(axis));
    // ONNX's rules: negative indices count from the end, then clamp ([0, dim] forward, [-1, dim-1] backward).
    auto clampIndex = [&](int64_t v) {
      if (v < 0)
        v = v < std::numeric_limits<int64_t>::min() + dim ? -1 : v + dim;
      return step > 0 ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1);
    };
    s[axis] = clampIndex(starts[i]);
    e[axis] = clampIndex(ends[i]);
    if (step > 0)
      s[axis] = std::min(s[axis], dim);
    else
      s[axis] = std::max<int64_t>(std::min(s[axis], dim - 1), dim ? 0 : -1);
    st[axis] = step;
  }
  shape::Dims dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.push_back(shape::sliceLength(s[d], e[d], st[d]));
  return define(n, 0, create<SliceOp>(n, RankedTensorType::get(dims, in.getElementType()), x, s, e, st));
}

Error GraphImporter::gather(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  auto d = typeOf(data);
  Type idx = typeOf(indices).getElementType();
  if (!idx.isInteger(32) && !idx.isInteger(64))
    return nodeInvalid(n, "indices must be INT32 or INT64");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), d.getRank()));
  // Constant indices (a table lookup with fixed positions) are checked now, not when the plan runs.
  if (const auto *t = constants.lookup(n.input(1))) {
    TRY_ASSIGN(ids, constInts(n, 1));
    const int64_t dim = d.getDimSize(axis);
    for (int64_t id : ids)
      if (id < -dim || id >= dim)
        return nodeInvalid(n, "index " + llvm::Twine(id) + " in '" + t->name() + "' is outside [-" + llvm::Twine(dim) +
                                  ", " + llvm::Twine(dim) + ") along axis " + llvm::Twine(axis));
  }
  shape::Dims dims(d.getShape().take_front(axis));
  llvm::append_range(dims, typeOf(indices).getShape());
  llvm::append_range(dims, d.getShape().drop_front(axis + 1));
  TRY_ASSIGN(type, checkedType(n, dims, d.getElementType()));
  return define(n, 0, create<GatherOp>(n, type, data, indices, axis));
}

Error GraphImporter::cast(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  const auto *to = findAttr(n, "to");
  if (!to)
    return nodeInvalid(n, "missing required attribute 'to'");
  Type elt = elementTypeFor(ctx, to->i());
  if (!elt)
    return nodeUnsupported(n, "cast to " + onnxTypeName(to->i()) + " is not supported");
  return define(n, 0, create<CastOp>(n, RankedTensorType::get(typeOf(x).getShape(), elt), x));
}

Error GraphImporter::identity(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  return define(n, 0, x);
}

Error GraphImporter::dropout(const onnx::NodeProto &n) {
  // Dropout is the identity (and its mask all true) only when training_mode is absent or false.
  if (hasInput(n, 2)) {
    const onnx::TensorProto *mode = constants.lookup(n.input(2));
    if (!mode)
      return nodeUnsupported(n, "training_mode must be a constant");
    TRY_ASSIGN(bytes, tensorBytes(*mode, "tensor '" + n.input(2) + "'"));
    if (llvm::any_of(bytes, [](char c) { return c != 0; }))
      return nodeUnsupported(n, "training-mode Dropout is not supported (inference only)");
  }
  TRY_ASSIGN(x, value(n, 0));
  if (outputUsed(n, 1)) {
    auto maskType = RankedTensorType::get(typeOf(x).getShape(), builder.getI1Type());
    auto mask = create<ConstantOp>(n, maskType, DenseElementsAttr::get(maskType, true));
    if (auto err = define(n, 1, mask))
      return err;
  }
  return define(n, 0, x);
}

Error GraphImporter::constant(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1)
    return nodeInvalid(n, "needs exactly one value attribute");
  const auto &a = n.attribute(0);
  const onnx::TensorProto *t = nullptr;
  if (a.name() == "value") {
    t = &a.t();
  } else if (a.name() == "value_float" || a.name() == "value_floats") {
    auto &owned = ownedTensors.emplace_back();
    owned.set_data_type(onnx::TensorProto::FLOAT);
    if (a.name() == "value_float")
      owned.add_float_data(a.f());
    else {
      owned.add_dims(a.floats_size());
      owned.mutable_float_data()->CopyFrom(a.floats());
    }
    t = &owned;
  } else if (a.name() == "value_int" || a.name() == "value_ints") {
    auto &owned = ownedTensors.emplace_back();
    owned.set_data_type(onnx::TensorProto::INT64);
    if (a.name() == "value_int")
      owned.add_int64_data(a.i());
    else {
      owned.add_dims(a.ints_size());
      owned.mutable_int64_data()->CopyFrom(a.ints());
    }
    t = &owned;
  } else {
    return nodeUnsupported(n, "Constant with attribute '" + a.name() + "' is not supported");
  }
  if (auto err = checkTensorProto(*t, label(n) + " value"))
    return err;
  constants[n.output(0)] = t;
  return Error::success();
}

Error GraphImporter::where(const onnx::NodeProto &n) {
  TRY_ASSIGN(c, value(n, 0));
  TRY_ASSIGN(x, value(n, 1));
  TRY_ASSIGN(y, value(n, 2));
  if (!typeOf(c).getElementType().isInteger(1))
    return nodeInvalid(n, "condition must be BOOL");
  if (typeOf(x).getElementType() != typeOf(y).getElementType())
    return nodeInvalid(n, "X and Y differ in element type");
  auto xy = shape::broadcast(typeOf(x).getShape(), typeOf(y).getShape());
  auto dims = xy ? shape::broadcast(typeOf(c).getShape(), *xy) : std::nullopt;
  if (!dims)
    return nodeInvalid(n, "condition, X and Y shapes do not broadcast");
  TRY_ASSIGN(type, checkedType(n, *dims, typeOf(x).getElementType()));
  return define(n, 0, create<WhereOp>(n, type, c, x, y));
}

Error GraphImporter::expand(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(target, constInts(n, 1));
  auto dims = shape::broadcast(typeOf(x).getShape(), target);
  if (!dims)
    return nodeInvalid(n, "input " + shape::str(typeOf(x).getShape()) + " does not broadcast to " + shape::str(target));
  TRY_ASSIGN(type, checkedType(n, *dims, typeOf(x).getElementType()));
  return define(n, 0, create<ExpandOp>(n, type, x));
}

Error GraphImporter::gatherElements(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  auto d = typeOf(data), i = typeOf(indices);
  if (!i.getElementType().isInteger(32) && !i.getElementType().isInteger(64))
    return nodeInvalid(n, "indices must be INT32 or INT64");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), d.getRank()));
  if (i.getRank() != d.getRank())
    return nodeInvalid(n, "indices have rank " + llvm::Twine(i.getRank()) + ", data " + llvm::Twine(d.getRank()));
  for (int64_t k = 0; k < d.getRank(); ++k)
    if (k != axis && i.getDimSize(k) != d.getDimSize(k))
      return nodeUnsupported(n, "indices " + shape::str(i.getShape()) + " smaller than the data " +
                                    shape::str(d.getShape()) + " off the axis are not supported");
  return define(n, 0, create<GatherElementsOp>(n, RankedTensorType::get(i.getShape(), d.getElementType()), data,
                                               indices, axis));
}

/// GatherND (batch_dims 0) as a Gather over the data's leading index dims flattened into one: the tuple
/// [i1..ik] becomes the row i1*s1 + ... + ik*sk (negative entries counted from their dim's end). It folds
/// where its inputs are constants and trains through the Gather's gradient.
/// The flat row of `data` (its first k dims as one) each index tuple of GatherND/ScatterND names:
/// indices [..., k] -> [...], negative components counted from their dim's end.
Expected<GraphImporter::NdRows> GraphImporter::ndRows(const onnx::NodeProto &n, RankedTensorType d, Value indices) {
  auto it = typeOf(indices);
  if (intAttr(n, "batch_dims", 0) != 0)
    return nodeUnsupported(n, "batch_dims other than 0 is not supported");
  if (!it.getElementType().isInteger(64) && !it.getElementType().isInteger(32))
    return nodeInvalid(n, "indices must be INT64");
  const int64_t k = it.getRank() ? it.getDimSize(it.getRank() - 1) : -1;
  if (it.getRank() < 1 || k < 1 || k > d.getRank())
    return nodeInvalid(n, "the indices' last dim (" + llvm::Twine(k) + ") must be in [1, " + llvm::Twine(d.getRank()) +
                              "]");
  Type index = it.getElementType();
  shape::Dims tupleShape(it.getShape().drop_back());
  auto componentType = RankedTensorType::get(tupleShape, index);
  NdRows r;
  r.k = k;
  for (int64_t j = k - 1, stride = 1; j >= 0; stride *= d.getDimSize(j), --j) {
    llvm::SmallVector<int64_t> starts(it.getRank(), 0), ends(it.getShape()), steps(it.getRank(), 1);
    starts.back() = j, ends.back() = j + 1;
    shape::Dims sliceDims(tupleShape);
    sliceDims.push_back(1);
    Value component = create<ReshapeOp>(
        n, componentType, create<SliceOp>(n, RankedTensorType::get(sliceDims, index), indices, starts, ends, steps));
    Value negative = compareValues(n, component, indexScalar(n, index, 0), "lt");
    component = create<WhereOp>(n, componentType, negative,
                                broadcast<AddOp>(n, component, indexScalar(n, index, d.getDimSize(j))), component);
    Value scaled = broadcast<MulOp>(n, component, indexScalar(n, index, stride));
    r.row = r.row ? broadcast<AddOp>(n, r.row, scaled) : scaled;
    r.count *= d.getDimSize(j);
  }
  shape::Dims flatDims{r.count};
  llvm::append_range(flatDims, d.getShape().drop_front(k));
  r.flatType = RankedTensorType::get(flatDims, d.getElementType());
  return r;
}

Error GraphImporter::gatherND(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  auto d = typeOf(data);
  TRY_ASSIGN(rows, ndRows(n, d, indices));
  Value flat = create<ReshapeOp>(n, rows.flatType, data);
  shape::Dims resultDims(typeOf(indices).getShape().drop_back());
  llvm::append_range(resultDims, d.getShape().drop_front(rows.k));
  TRY_ASSIGN(type, checkedType(n, resultDims, d.getElementType()));
  return define(n, 0, create<GatherOp>(n, type, flat, rows.row, 0));
}

/// ScatterND as the transpose of GatherND: the updates summed into their rows (scatter_add, deterministic),
/// and, without a reduction, those rows taken from the sums instead of the data. Duplicate indices,
/// undefined in ONNX without a reduction, add up.
Error GraphImporter::scatterND(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  TRY_ASSIGN(updates, value(n, 2));
  auto d = typeOf(data);
  if (!isFloat(d.getElementType()))
    return nodeUnsupported(n, "ScatterND of non-float data is not supported");
  const std::string reduction = findAttr(n, "reduction") ? findAttr(n, "reduction")->s() : "none";
  if (reduction != "none" && reduction != "add")
    return nodeUnsupported(n, "reduction '" + reduction + "' is not supported (none and add are)");
  TRY_ASSIGN(rows, ndRows(n, d, indices));
  shape::Dims updateDims(typeOf(indices).getShape().drop_back());
  llvm::append_range(updateDims, d.getShape().drop_front(rows.k));
  if (typeOf(updates).getShape() != ArrayRef<int64_t>(updateDims) || typeOf(updates).getElementType() != d.getElementType())
    return nodeInvalid(n, "updates " + shape::str(typeOf(updates).getShape()) + " must be " + shape::str(updateDims) +
                              " of the data's type");
  Value flat = create<ReshapeOp>(n, rows.flatType, data);
  Value sums = create<ScatterAddOp>(n, rows.flatType, updates, rows.row, 0, /*elements=*/false);
  Value result;
  if (reduction == "add") {
    result = create<AddOp>(n, rows.flatType, flat, sums);
  } else {
    Value ones = create<ExpandOp>(n, typeOf(updates), scalar(n, d.getElementType(), 1.0));
    Value hits = create<ScatterAddOp>(n, rows.flatType, ones, rows.row, 0, /*elements=*/false);
    Value written = compareValues(n, hits, scalar(n, d.getElementType(), 0.0), "gt");
    result = create<WhereOp>(n, rows.flatType, written, sums, flat);
  }
  return define(n, 0, create<ReshapeOp>(n, d, result));
}

/// Tile as a broadcast: x [d0, d1...] seen as [1, d0, 1, d1...], expanded to [r0, d0, r1, d1...] and
/// flattened pairwise; it folds on constants and trains through the expand.
Error GraphImporter::tile(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(repeats, constInts(n, 1));
  auto t = typeOf(x);
  if (static_cast<int64_t>(repeats.size()) != t.getRank() || llvm::any_of(repeats, [](int64_t r) { return r < 0; }))
    return nodeInvalid(n, "repeats must hold one non-negative count per dim (" + llvm::Twine(t.getRank()) + ")");
  shape::Dims split, expanded, tiled;
  for (int64_t d = 0; d < t.getRank(); ++d) {
    split.append({1, t.getDimSize(d)});
    expanded.append({repeats[d], t.getDimSize(d)});
  }
  TRY_ASSIGN(expandedType, checkedType(n, expanded, t.getElementType()));
  for (int64_t d = 0; d < t.getRank(); ++d) { // each dim on its own too: a 0 elsewhere hides an overflow
    int64_t dim = 0;
    if (llvm::MulOverflow(repeats[d], t.getDimSize(d), dim))
      return nodeInvalid(n, "repeats [" + shape::str(repeats) + "] overflow dim " + llvm::Twine(d));
    tiled.push_back(dim);
  }
  Value y = create<ReshapeOp>(n, RankedTensorType::get(split, t.getElementType()), x);
  y = create<ExpandOp>(n, expandedType, y);
  return define(n, 0, create<ReshapeOp>(n, RankedTensorType::get(tiled, t.getElementType()), y));
}

Expected<Value> GraphImporter::cropAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before,
                                         int64_t after) {
  if (before >= 0 && after >= 0)
    return y;
  auto t = typeOf(y);
  const int64_t rank = t.getRank(), dim = t.getDimSize(axis);
  llvm::SmallVector<int64_t> starts(rank, 0), ends(t.getShape()), steps(rank, 1);
  starts[axis] = std::max<int64_t>(-before, 0);
  ends[axis] = dim - std::max<int64_t>(-after, 0);
  if (ends[axis] < starts[axis])
    return nodeInvalid(n, "pads crop more than dim " + llvm::Twine(axis) + " holds");
  shape::Dims dims(t.getShape());
  dims[axis] = ends[axis] - starts[axis];
  return create<SliceOp>(n, RankedTensorType::get(dims, t.getElementType()), y, starts, ends, steps);
}

Expected<Value> GraphImporter::fillAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before,
                                         int64_t after, Value fill) {
  auto t = typeOf(y);
  Type elt = t.getElementType();
  shape::Dims dims(t.getShape());
  dims[axis] += before + after;
  TRY_ASSIGN(padded, checkedType(n, dims, elt));
  SmallVector<Value> parts;
  for (int64_t count : {before, int64_t(-1), after}) {
    if (count == 0)
      continue;
    if (count < 0) {
      parts.push_back(y);
      continue;
    }
    shape::Dims fillDims(t.getShape());
    fillDims[axis] = count;
    parts.push_back(create<ExpandOp>(n, RankedTensorType::get(fillDims, elt), fill));
  }
  return parts.size() == 1 ? y : create<ConcatOp>(n, padded, parts, axis);
}

Expected<Value> GraphImporter::padAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before, int64_t after,
                                        Value fill) {
  TRY_ASSIGN(cropped, cropAxis(n, y, axis, before, after));
  return fillAxis(n, cropped, axis, std::max<int64_t>(before, 0), std::max<int64_t>(after, 0), fill);
}

/// Pad per axis: negative pads crop (a slice); constant mode joins fills around x, edge, reflect and wrap
/// gather x's rows with a constant index vector (so each trains through its op's gradient).
Error GraphImporter::pad(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto t = typeOf(x);
  const int64_t rank = t.getRank();
  std::vector<int64_t> pads, axes;
  if (opset < 11) {
    if (const auto *a = findAttr(n, "pads"))
      pads.assign(a->ints().begin(), a->ints().end());
  } else {
    TRY_ASSIGN(p, constInts(n, 1));
    pads = p;
  }
  if (opset >= 18 && hasInput(n, 3)) {
    TRY_ASSIGN(a, constInts(n, 3));
    axes = a;
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size())
    return nodeInvalid(n, "pads has " + llvm::Twine(pads.size()) + " values for " + llvm::Twine(axes.size()) + " axes");
  const std::string mode = findAttr(n, "mode") ? findAttr(n, "mode")->s() : "constant";
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    return nodeInvalid(n, "mode must be constant, edge, reflect or wrap, got '" + mode + "'");
  Type elt = t.getElementType();
  Value fill; // constant mode's value, a 0-D constant
  if (mode == "constant") {
    if (opset < 11) {
      fill = scalar(n, elt, floatAttr(n, "value", 0.0f));
    } else if (hasInput(n, 2)) { // any tensor of one element: the fill need not be known at compile time
      TRY_ASSIGN(v, value(n, 2));
      if (typeOf(v).getNumElements() != 1 || typeOf(v).getElementType() != elt)
        return nodeInvalid(n, "constant_value must be one element of the data's type");
      fill = create<ReshapeOp>(n, RankedTensorType::get({}, elt), v);
    } else {
      auto scalarType = RankedTensorType::get({}, elt);
      fill = create<ConstantOp>(n, scalarType, DenseElementsAttr::get(scalarType, builder.getZeroAttr(elt)));
    }
  }
  Value y = x;
  for (size_t k = 0; k < axes.size(); ++k) {
    TRY_ASSIGN(axis, normalizeAxis(n, axes[k], rank));
    int64_t before = pads[k], after = pads[k + axes.size()];
    // No pad beyond a dim's limit: within it, dims plus pads stay in int64.
    for (int64_t pad : {before, after})
      if (pad < -shape::kMaxDim || pad > shape::kMaxDim)
        return nodeInvalid(n, "pad " + llvm::Twine(pad) + " of axis " + llvm::Twine(axis) + " is past 2^40");
    TRY_ASSIGN(cropped, cropAxis(n, y, axis, before, after));
    y = cropped, before = std::max<int64_t>(before, 0), after = std::max<int64_t>(after, 0);
    if (before == 0 && after == 0)
      continue;
    if (mode == "constant") {
      TRY_ASSIGN(padded, fillAxis(n, y, axis, before, after, fill));
      y = padded;
      continue;
    }
    auto current = typeOf(y);
    const int64_t size = current.getDimSize(axis);
    shape::Dims dims(current.getShape());
    dims[axis] = size + before + after;
    TRY_ASSIGN(padded, checkedType(n, dims, elt));
    if (size == 0 || (mode == "reflect" && size < 2 && before + after > 0))
      return nodeInvalid(n, "cannot " + mode + "-pad a dim of size " + llvm::Twine(size));
    llvm::SmallVector<int64_t> rows;
    for (int64_t i = -before; i < size + after; ++i) {
      int64_t r = i;
      if (mode == "edge")
        r = std::clamp<int64_t>(i, 0, size - 1);
      else if (mode == "wrap")
        r = ((i % size) + size) % size;
      else { // reflect without repeating the edge: period 2 * (size - 1)
        const int64_t period = 2 * (size - 1);
        r = ((i % period) + period) % period;
        r = r < size ? r : period - r;
      }
      rows.push_back(r);
    }
    y = create<GatherOp>(n, padded, y, int64Constant(n, {static_cast<int64_t>(rows.size())}, rows), axis);
  }
  return define(n, 0, y);
}

/// OneHot as a comparison of the indices (negative ones counted from depth) with 0..depth-1 along the new
/// axis, selecting the on and off values.
Error GraphImporter::oneHot(const onnx::NodeProto &n) {
  TRY_ASSIGN(indices, value(n, 0));
  TRY_ASSIGN(depthAttr, constElements(n, 1));
  TRY_ASSIGN(values, value(n, 2));
  auto it = typeOf(indices), vt = typeOf(values);
  if (depthAttr.getNumElements() != 1 || vt.getNumElements() != 2 || vt.getRank() != 1)
    return nodeInvalid(n, "depth must be one value and values [off, on]");
  Attribute d = *depthAttr.value_begin<Attribute>();
  const int64_t depth = llvm::isa<FloatAttr>(d) ? static_cast<int64_t>(llvm::cast<FloatAttr>(d).getValueAsDouble())
                                                : llvm::cast<IntegerAttr>(d).getInt();
  if (depth < 1)
    return nodeInvalid(n, "depth must be positive, got " + llvm::Twine(depth));
  Type index = it.getElementType();
  if (!index.isInteger(32) && !index.isInteger(64)) {
    if (!isFloat(index))
      return nodeUnsupported(n, "indices of this element type are not supported");
    index = builder.getI64Type();
    indices = create<CastOp>(n, RankedTensorType::get(it.getShape(), index), indices);
  }
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", -1), it.getRank() + 1));
  Value negative = compareValues(n, indices, indexScalar(n, index, 0), "lt");
  auto indexType = RankedTensorType::get(it.getShape(), index);
  Value normalized = create<WhereOp>(n, indexType, negative, broadcast<AddOp>(n, indices, indexScalar(n, index, depth)), indices);
  shape::Dims expandedDims(it.getShape());
  expandedDims.insert(expandedDims.begin() + axis, 1);
  Value column = create<ReshapeOp>(n, RankedTensorType::get(expandedDims, index), normalized);
  shape::Dims iotaDims(it.getRank() + 1, 1);
  iotaDims[axis] = depth;
  llvm::SmallVector<Attribute> iota;
  for (int64_t i = 0; i < depth; ++i)
    iota.push_back(builder.getIntegerAttr(index, i));
  auto iotaType = RankedTensorType::get(iotaDims, index);
  Value classes = create<ConstantOp>(n, iotaType, DenseElementsAttr::get(iotaType, iota));
  Value hot = compareValues(n, column, classes, "eq");
  auto scalarType = RankedTensorType::get({}, vt.getElementType());
  auto pick = [&](int64_t i) {
    Value one = create<SliceOp>(n, RankedTensorType::get({1}, vt.getElementType()), values, ArrayRef<int64_t>{i},
                                ArrayRef<int64_t>{i + 1}, ArrayRef<int64_t>{1});
    return create<ReshapeOp>(n, scalarType, one);
  };
  auto resultType = RankedTensorType::get(typeOf(hot).getShape(), vt.getElementType());
  return define(n, 0, create<WhereOp>(n, resultType, hot, pick(1), pick(0)));
}

Error GraphImporter::argReduce(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto t = typeOf(x);
  Type elt = t.getElementType();
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  if (t.getRank() == 0)
    return nodeInvalid(n, "the input must have at least one dim");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), t.getRank()));
  if (t.getDimSize(axis) == 0)
    return nodeInvalid(n, "axis " + llvm::Twine(axis) + " is empty: no index to return");
  const bool keepdims = intAttr(n, "keepdims", 1) != 0;
  auto type = RankedTensorType::get(shape::reduce(t.getShape(), {axis}, keepdims), builder.getI64Type());
  return define(n, 0, create<ArgReduceOp>(n, type, x, builder.getStringAttr(n.op_type() == "ArgMax" ? "max" : "min"),
                                          axis, keepdims, intAttr(n, "select_last_index", 0) != 0));
}

Error GraphImporter::cumSum(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(axes, constInts(n, 1));
  auto t = typeOf(x);
  Type elt = t.getElementType();
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  if (axes.size() != 1)
    return nodeInvalid(n, "axis must be one value, got " + llvm::Twine(axes.size()));
  TRY_ASSIGN(axis, normalizeAxis(n, axes[0], t.getRank()));
  return define(n, 0, create<CumSumOp>(n, t, x, axis, intAttr(n, "exclusive", 0) != 0, intAttr(n, "reverse", 0) != 0));
}

GraphImporter::Labeled GraphImporter::permuted(const onnx::NodeProto &n, const Labeled &x, ArrayRef<int> order) {
  if (ArrayRef<int>(x.labels) == order)
    return x;
  auto t = typeOf(x.value);
  llvm::SmallVector<int64_t> perm;
  shape::Dims dims;
  for (int label : order) {
    perm.push_back(llvm::find(x.labels, label) - x.labels.begin());
    dims.push_back(t.getDimSize(perm.back()));
  }
  return {create<TransposeOp>(n, RankedTensorType::get(dims, t.getElementType()), x.value, perm),
          std::vector<int>(order.begin(), order.end())};
}

GraphImporter::Labeled GraphImporter::summedOut(const onnx::NodeProto &n, const Labeled &x,
                                                llvm::function_ref<bool(int)> keep) {
  ReduceSpec spec;
  spec.keepdims = false;
  Labeled r{x.value, {}};
  for (auto [d, label] : llvm::enumerate(x.labels))
    if (keep(label))
      r.labels.push_back(label);
    else
      spec.axes.push_back(d);
  if (!spec.axes.empty())
    r.value = reduceWith<ReduceSumOp>(n, x.value, spec);
  return r;
}

GraphImporter::Labeled GraphImporter::contract(const onnx::NodeProto &n, Labeled a, Labeled b,
                                               llvm::function_ref<bool(int)> keep) {
  auto in = [](const Labeled &x, int label) { return llvm::is_contained(x.labels, label); };
  // A label only one side has and nothing later needs is summed there first.
  a = summedOut(n, a, [&](int l) { return keep(l) || in(b, l); });
  b = summedOut(n, b, [&](int l) { return keep(l) || in(a, l); });
  std::vector<int> batch, left, right, summed;
  for (int l : a.labels)
    (in(b, l) ? (keep(l) ? batch : summed) : left).push_back(l);
  for (int l : b.labels)
    if (!in(a, l))
      right.push_back(l);
  auto dimsOf = [&](ArrayRef<int> labels) {
    shape::Dims dims;
    for (int l : labels) {
      const Labeled &x = in(a, l) ? a : b;
      dims.push_back(typeOf(x.value).getDimSize(llvm::find(x.labels, l) - x.labels.begin()));
    }
    return dims;
  };
  auto sizeOf = [&](ArrayRef<int> labels) { return *shape::elementCount(dimsOf(labels)); };
  Type elt = typeOf(a.value).getElementType();
  const int64_t batchSize = sizeOf(batch), rows = sizeOf(left), cols = sizeOf(right);
  auto matrix = [&](const Labeled &x, ArrayRef<int> rows, ArrayRef<int> columns) {
    std::vector<int> order(batch);
    llvm::append_range(order, rows);
    llvm::append_range(order, columns);
    shape::Dims dims;
    if (!batch.empty())
      dims.push_back(batchSize);
    dims.append({sizeOf(rows), sizeOf(columns)});
    return create<ReshapeOp>(n, RankedTensorType::get(dims, elt), permuted(n, x, order).value);
  };
  shape::Dims productDims;
  if (!batch.empty())
    productDims.push_back(batchSize);
  productDims.append({rows, cols});
  Value product = create<MatMulOp>(n, RankedTensorType::get(productDims, elt), matrix(a, left, summed),
                                   matrix(b, summed, right));
  Labeled r{Value(), batch};
  llvm::append_range(r.labels, left);
  llvm::append_range(r.labels, right);
  r.value = create<ReshapeOp>(n, RankedTensorType::get(dimsOf(r.labels), elt), product);
  return r;
}

/// Einsum without diagonals: each operand's labels only it has and the output lacks are summed, then the
/// operands are contracted left to right as batched matmuls (batch, free and summed labels grouped by
/// transposes and reshapes) and the result permuted to the output's order. It trains through those ops.
Error GraphImporter::einsum(const onnx::NodeProto &n) {
  std::string equation;
  for (char c : findAttr(n, "equation") ? findAttr(n, "equation")->s() : std::string())
    if (c != ' ')
      equation.push_back(c);
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  llvm::SmallVector<StringRef> terms;
  StringRef(lhs).split(terms, ',');
  if (static_cast<int>(terms.size()) != n.input_size())
    return nodeInvalid(n, "equation '" + equation + "' names " + llvm::Twine(terms.size()) + " operands, the node has " +
                              llvm::Twine(n.input_size()));
  constexpr int kEllipsis = 256; // ellipsis dims are labels 256, 257, ... counted from the right
  auto labelName = [&](int l) {
    return l >= kEllipsis ? "...(" + std::to_string(l - kEllipsis) + " from the right)" : std::string(1, char(l));
  };
  auto parse = [&](StringRef term, int64_t rank) -> Expected<std::vector<int>> {
    std::vector<int> labels;
    const size_t dots = term.find("...");
    const int64_t letters = static_cast<int64_t>(term.size()) - (dots == StringRef::npos ? 0 : 3);
    if (dots == StringRef::npos ? letters != rank : letters > rank)
      return nodeInvalid(n, "term '" + term + "' does not fit an operand of rank " + llvm::Twine(rank));
    for (size_t i = 0; i < term.size(); ++i) {
      if (i == dots) {
        for (int64_t e = rank - letters - 1; e >= 0; --e)
          labels.push_back(kEllipsis + e);
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
        labels.push_back(term[i]);
      } else {
        return nodeInvalid(n, "unexpected '" + llvm::Twine(term[i]) + "' in equation '" + equation + "'");
      }
    }
    return labels;
  };
  std::vector<Labeled> operands;
  std::map<int, int64_t> sizes, uses;
  int ellipsisDims = 0;
  for (auto [i, term] : llvm::enumerate(terms)) {
    TRY_ASSIGN(x, value(n, i));
    auto t = typeOf(x);
    if (!isFloat(t.getElementType()))
      return nodeUnsupported(n, "element type is not supported");
    TRY_ASSIGN(labels, parse(term, t.getRank()));
    for (auto [d, l] : llvm::enumerate(labels)) {
      if (llvm::count(labels, l) > 1)
        return nodeUnsupported(n, "a label repeated within one operand (a diagonal) is not supported");
      auto [it, fresh] = sizes.insert({l, t.getDimSize(d)});
      // Ellipsis dims broadcast as numpy's do (1 against n); a letter names one size.
      const bool broadcasts = l >= kEllipsis && (it->second == 1 || t.getDimSize(d) == 1);
      if (!fresh && it->second != t.getDimSize(d) && !broadcasts)
        return nodeInvalid(n, "label '" + labelName(l) + "' has sizes " + llvm::Twine(it->second) + " and " +
                                  llvm::Twine(t.getDimSize(d)));
      it->second = std::max(it->second, t.getDimSize(d));
      ++uses[l];
      if (l >= kEllipsis)
        ellipsisDims = std::max(ellipsisDims, l - kEllipsis + 1);
    }
    operands.push_back({x, labels});
  }
  for (Labeled &x : operands) { // size-1 ellipsis dims expanded to the size the others have
    auto t = typeOf(x.value);
    shape::Dims dims(t.getShape());
    for (auto [d, l] : llvm::enumerate(x.labels))
      dims[d] = sizes[l];
    if (ArrayRef<int64_t>(dims) != t.getShape())
      x.value = create<ExpandOp>(n, RankedTensorType::get(dims, t.getElementType()), x.value);
  }
  std::vector<int> output;
  if (arrow == std::string::npos) { // implicit: the ellipsis, then the letters used once, alphabetically
    for (int e = ellipsisDims - 1; e >= 0; --e)
      output.push_back(kEllipsis + e);
    for (auto [l, count] : uses)
      if (l < kEllipsis && count == 1)
        output.push_back(l);
  } else {
    StringRef term = StringRef(equation).drop_front(arrow + 2);
    const bool dots = term.contains("...");
    if (ellipsisDims > 0 && !dots)
      return nodeInvalid(n, "the operands have an ellipsis that the output '" + term + "' lacks");
    TRY_ASSIGN(labels, parse(term, static_cast<int64_t>(term.size()) - (dots ? 3 - ellipsisDims : 0)));
    for (int l : labels)
      if (!sizes.count(l) || llvm::count(labels, l) > 1)
        return nodeInvalid(n, "output label '" + labelName(l) + "' " +
                                  (sizes.count(l) ? "appears twice" : "names no operand dim"));
    output = labels;
  }
  auto inOutput = [&](int l) { return llvm::is_contained(output, l); };
  Labeled acc = operands[0];
  for (size_t i = 1; i < operands.size(); ++i) {
    auto neededLater = [&](int l) {
      return inOutput(l) || llvm::any_of(ArrayRef(operands).drop_front(i + 1),
                                         [&](const Labeled &x) { return llvm::is_contained(x.labels, l); });
    };
    acc = contract(n, acc, operands[i], neededLater);
  }
  acc = summedOut(n, acc, inOutput);
  return define(n, 0, permuted(n, acc, output).value);
}

Expected<Value> GraphImporter::negativeLogLikelihood(const onnx::NodeProto &n, Value logProb, Value labels,
                                                     Value weight) {
  auto x = typeOf(logProb), t = typeOf(labels);
  Type elt = x.getElementType(), index = t.getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (!index.isInteger(32) && !index.isInteger(64))
    return nodeInvalid(n, "labels must be INT32 or INT64");
  shape::Dims expected(x.getShape());
  if (x.getRank() < 2 || (expected.erase(expected.begin() + 1), ArrayRef<int64_t>(expected) != t.getShape()))
    return nodeInvalid(n, "labels " + shape::str(t.getShape()) + " do not match scores " + shape::str(x.getShape()) +
                              " (expected [N, C, d...] and [N, d...])");
  if (weight && (typeOf(weight).getShape() != ArrayRef<int64_t>{x.getDimSize(1)} || typeOf(weight).getElementType() != elt))
    return nodeInvalid(n, "weight must be [" + llvm::Twine(x.getDimSize(1)) + "] of the scores' type");
  const std::string reduction = findAttr(n, "reduction") ? findAttr(n, "reduction")->s() : "mean";
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return nodeInvalid(n, "reduction must be 'mean', 'sum' or 'none', got '" + reduction + "'");
  // Ignored labels pick class 0 (always valid) and count as weight 0.
  Value valid, safe = labels;
  if (const auto *ignore = findAttr(n, "ignore_index")) {
    valid = compareValues(n, labels, indexScalar(n, index, ignore->i()), "ne");
    safe = create<WhereOp>(n, t, valid, labels, indexScalar(n, index, 0));
  }
  shape::Dims pickDims(t.getShape());
  pickDims.insert(pickDims.begin() + 1, 1);
  Value picks = create<ReshapeOp>(n, RankedTensorType::get(pickDims, index), safe);
  Value picked = create<GatherElementsOp>(n, RankedTensorType::get(pickDims, elt), logProb, picks, 1);
  auto lossType = RankedTensorType::get(t.getShape(), elt);
  Value loss = create<NegOp>(n, lossType, create<ReshapeOp>(n, lossType, picked));
  Value weights; // per label; null when every one counts 1
  if (weight)
    weights = create<GatherOp>(n, lossType, weight, safe, 0);
  if (valid) {
    Value one = scalar(n, elt, 1.0), zero = scalar(n, elt, 0.0);
    weights = create<WhereOp>(n, lossType, valid, weights ? weights : one, zero);
  }
  if (weights)
    loss = broadcast<MulOp>(n, loss, weights);
  if (reduction == "none")
    return loss;
  llvm::SmallVector<int64_t> all(t.getRank());
  std::iota(all.begin(), all.end(), 0);
  auto scalarType = RankedTensorType::get({}, elt);
  if (reduction == "mean" && !weights)
    return create<ReduceMeanOp>(n, scalarType, loss, all, false);
  Value total = create<ReduceSumOp>(n, scalarType, loss, all, false);
  if (reduction == "sum")
    return total;
  return broadcast<DivOp>(n, total, create<ReduceSumOp>(n, scalarType, weights, all, false));
}

Error GraphImporter::nllLoss(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(labels, value(n, 1));
  Value weight;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(w, value(n, 2));
    weight = w;
  }
  TRY_ASSIGN(loss, negativeLogLikelihood(n, x, labels, weight));
  return define(n, 0, loss);
}

Error GraphImporter::softmaxCrossEntropy(const onnx::NodeProto &n) {
  TRY_ASSIGN(scores, value(n, 0));
  TRY_ASSIGN(labels, value(n, 1));
  Value weight;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(w, value(n, 2));
    weight = w;
  }
  if (typeOf(scores).getRank() < 2)
    return nodeInvalid(n, "scores must be [N, C, d...], got " + shape::str(typeOf(scores).getShape()));
  if (!isFloat(typeOf(scores).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  Value logProb = create<LogSoftmaxOp>(n, scores.getType(), scores, 1);
  TRY_ASSIGN(loss, negativeLogLikelihood(n, logProb, labels, weight));
  if (auto err = define(n, 0, loss))
    return err;
  return define(n, 1, logProb);
}

Expected<llvm::SmallVector<int64_t>> GraphImporter::intsAttr(const onnx::NodeProto &n, const char *name,
                                                             int64_t count, int64_t dflt) {
  const auto *a = findAttr(n, name);
  if (!a)
    return llvm::SmallVector<int64_t>(count, dflt);
  if (a->ints_size() != count)
    return nodeInvalid(n, "'" + llvm::Twine(name) + "' has " + llvm::Twine(a->ints_size()) + " values, expected " +
                              llvm::Twine(count));
  return llvm::SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

Expected<GraphImporter::Window2d> GraphImporter::windowAttrs(const onnx::NodeProto &n, RankedTensorType x,
                                                              ArrayRef<int64_t> kernel, bool ceilMode) {
  const int64_t spatial = x.getRank() - 2;
  TRY_ASSIGN(strides, intsAttr(n, "strides", spatial, 1));
  TRY_ASSIGN(dilations, intsAttr(n, "dilations", spatial, 1));
  TRY_ASSIGN(pads, intsAttr(n, "pads", 2 * spatial, 0));
  if (llvm::any_of(strides, [](int64_t v) { return v < 1; }) || llvm::any_of(dilations, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(pads, [](int64_t v) { return v < 0; }))
    return nodeInvalid(n, "strides and dilations must be positive and pads non-negative");
  const std::string autoPad = findAttr(n, "auto_pad") ? findAttr(n, "auto_pad")->s() : "NOTSET";
  if (autoPad == "VALID") {
    pads.assign(2 * spatial, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    // Output = ceil(input / stride); the padding that takes splits, the odd cell at the end (UPPER) or start.
    for (int64_t d = 0; d < spatial; ++d) {
      const int64_t in = x.getDimSize(2 + d), out = (in + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>((out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - in, 0);
      pads[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[spatial + d] = total - pads[d];
    }
  } else if (autoPad != "NOTSET") {
    return nodeInvalid(n, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + autoPad + "'");
  }
  Window2d w;
  if (spatial == 1) { // a 1-D window is a 2-D one of height 1
    w.kernel = {1, kernel[0]}, w.strides = {1, strides[0]}, w.dilations = {1, dilations[0]};
    w.pads = {0, pads[0], 0, pads[1]};
  } else {
    const int64_t h = spatial - 2; // the planar dims are the last two
    if (spatial == 3)
      w.depth = {kernel[0], strides[0], pads[0], pads[3], dilations[0]};
    w.kernel = {kernel[h], kernel[h + 1]}, w.strides = {strides[h], strides[h + 1]};
    w.dilations = {dilations[h], dilations[h + 1]};
    w.pads = {pads[h], pads[h + 1], pads[spatial + h], pads[spatial + h + 1]};
  }
  for (int64_t d = 0; d < spatial; ++d) {
    const WindowAxis axis{kernel[d], strides[d], pads[d], pads[spatial + d], dilations[d]};
    if (axis.output(x.getDimSize(2 + d), ceilMode) < 1)
      return nodeInvalid(n, "the window (kernel " + llvm::Twine(kernel[d]) + ", dilation " + llvm::Twine(dilations[d]) +
                                ") does not fit the padded input of " + llvm::Twine(x.getDimSize(2 + d)));
  }
  return w;
}

Value GraphImporter::as2d(const onnx::NodeProto &n, Value x) {
  auto t = typeOf(x);
  if (t.getRank() == 4)
    return x;
  return create<ReshapeOp>(n, RankedTensorType::get({t.getDimSize(0), t.getDimSize(1), 1, t.getDimSize(2)},
                                                    t.getElementType()),
                           x);
}

Expected<SmallVector<Value>> GraphImporter::depthSlices(const onnx::NodeProto &n, Value x, const WindowAxis &depth,
                                                        int64_t outDepth, Value fill) {
  auto t = typeOf(x);
  Type elt = t.getElementType();
  const int64_t batch = t.getDimSize(0), channels = t.getDimSize(1), inDepth = t.getDimSize(2);
  const int64_t height = t.getDimSize(3), width = t.getDimSize(4);
  Value depthMajor = create<TransposeOp>(n, RankedTensorType::get({batch, inDepth, channels, height, width}, elt), x,
                                         ArrayRef<int64_t>{0, 2, 1, 3, 4});
  // The cells the windows read, from -padBegin: more than the input and its pads in ceil mode, fewer when
  // the last rows are past every window.
  const int64_t read = (outDepth - 1) * depth.stride + (depth.kernel - 1) * depth.dilation + 1;
  TRY_ASSIGN(padded, padAxis(n, depthMajor, 1, depth.padBegin, read - depth.padBegin - inDepth, fill));
  auto sliceType = RankedTensorType::get({batch, outDepth, channels, height, width}, elt);
  auto foldedType = RankedTensorType::get({batch * outDepth, channels, height, width}, elt);
  SmallVector<Value> slices;
  for (int64_t k = 0; k < depth.kernel; ++k) {
    const int64_t start = k * depth.dilation;
    Value slice = create<SliceOp>(n, sliceType, padded, ArrayRef<int64_t>{0, start, 0, 0, 0},
                                  ArrayRef<int64_t>{batch, start + (outDepth - 1) * depth.stride + 1, channels, height,
                                                    width},
                                  ArrayRef<int64_t>{1, depth.stride, 1, 1, 1});
    slices.push_back(create<ReshapeOp>(n, foldedType, slice));
  }
  return slices;
}

Value GraphImporter::fromDepthSlices(const onnx::NodeProto &n, Value y, int64_t batch) {
  auto t = typeOf(y);
  Type elt = t.getElementType();
  const int64_t outDepth = t.getDimSize(0) / batch, channels = t.getDimSize(1);
  const int64_t height = t.getDimSize(2), width = t.getDimSize(3);
  Value unfolded =
      create<ReshapeOp>(n, RankedTensorType::get({batch, outDepth, channels, height, width}, elt), y);
  return create<TransposeOp>(n, RankedTensorType::get({batch, channels, outDepth, height, width}, elt), unfolded,
                             ArrayRef<int64_t>{0, 2, 1, 3, 4});
}

Value GraphImporter::depthConstant(const onnx::NodeProto &n, Type elt, ArrayRef<double> values) {
  auto type = RankedTensorType::get({1, 1, static_cast<int64_t>(values.size()), 1, 1}, elt);
  SmallVector<Attribute> attrs;
  for (double v : values)
    attrs.push_back(builder.getFloatAttr(elt, v));
  return create<ConstantOp>(n, type, DenseElementsAttr::get(type, attrs));
}

Value GraphImporter::weightAtDepth(const onnx::NodeProto &n, Value w, int64_t k) {
  auto t = typeOf(w);
  llvm::SmallVector<int64_t> starts(5, 0), ends(t.getShape()), steps(5, 1);
  starts[2] = k, ends[2] = k + 1;
  shape::Dims dims(t.getShape());
  dims[2] = 1;
  Value slice = create<SliceOp>(n, RankedTensorType::get(dims, t.getElementType()), w, starts, ends, steps);
  return create<ReshapeOp>(
      n, RankedTensorType::get({dims[0], dims[1], dims[3], dims[4]}, t.getElementType()), slice);
}

shape::Dims GraphImporter::planarOutput(RankedTensorType in, int64_t channels, const Window2d &win, bool ceilMode) {
  return {in.getDimSize(0), channels,
          kernels::windowOutput(in.getDimSize(2), win.kernel[0], win.strides[0], win.pads[0], win.pads[2],
                                win.dilations[0], ceilMode),
          kernels::windowOutput(in.getDimSize(3), win.kernel[1], win.strides[1], win.pads[1], win.pads[3],
                                win.dilations[1], ceilMode)};
}

Error GraphImporter::conv(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(w, value(n, 1));
  auto xt = typeOf(x), wt = typeOf(w);
  if (xt.getRank() < 3 || xt.getRank() > 5)
    return nodeUnsupported(n, "only 1-D, 2-D and 3-D convolutions are supported, got a rank-" +
                                  llvm::Twine(xt.getRank()) + " input");
  Type elt = xt.getElementType();
  if (!isFloat(elt) || wt.getElementType() != elt)
    return nodeUnsupported(n, "element type is not supported (float input and weight of one type)");
  const int64_t group = intAttr(n, "group", 1);
  if (wt.getRank() != xt.getRank() || group < 1 || xt.getDimSize(1) % group || wt.getDimSize(0) % group ||
      wt.getDimSize(1) * group != xt.getDimSize(1))
    return nodeInvalid(n, "weight " + shape::str(wt.getShape()) + " does not fit input " + shape::str(xt.getShape()) +
                              " with group " + llvm::Twine(group));
  auto kernel = wt.getShape().drop_front(2);
  if (const auto *k = findAttr(n, "kernel_shape"); k && !llvm::equal(k->ints(), kernel))
    return nodeInvalid(n, "kernel_shape disagrees with the weight " + shape::str(wt.getShape()));
  TRY_ASSIGN(win, windowAttrs(n, xt, kernel, false));
  Value bias;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(b, value(n, 2));
    if (typeOf(b).getShape() != ArrayRef<int64_t>{wt.getDimSize(0)} || typeOf(b).getElementType() != elt)
      return nodeInvalid(n, "bias must be [" + llvm::Twine(wt.getDimSize(0)) + "] of the input's type");
    bias = b;
  }
  auto planarConv = [&](Value x2, Value w2, Value b) -> Value {
    auto dims = planarOutput(typeOf(x2), wt.getDimSize(0), win, false);
    return create<ConvOp>(n, RankedTensorType::get(dims, elt), x2, w2, b, win.strides, win.pads, win.dilations, group);
  };
  if (xt.getRank() == 5) { // the sum over kernel depths of 2-D convs on depth slices
    TRY_ASSIGN(slices, depthSlices(n, x, win.depth, win.depth.output(xt.getDimSize(2), false), scalar(n, elt, 0)));
    Value sum;
    for (int64_t k = 0; k < win.depth.kernel; ++k) {
      Value y = planarConv(slices[k], weightAtDepth(n, w, k), k == 0 ? bias : Value());
      sum = sum ? create<AddOp>(n, y.getType(), sum, y) : y;
    }
    return define(n, 0, fromDepthSlices(n, sum, xt.getDimSize(0)));
  }
  Value y = planarConv(as2d(n, x), as2d(n, w), bias);
  if (xt.getRank() == 3) {
    auto dims = typeOf(y).getShape();
    y = create<ReshapeOp>(n, RankedTensorType::get({dims[0], dims[1], dims[3]}, elt), y);
  }
  return define(n, 0, y);
}

Error GraphImporter::convTranspose(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(w, value(n, 1));
  auto xt = typeOf(x), wt = typeOf(w);
  if (xt.getRank() < 3 || xt.getRank() > 5)
    return nodeUnsupported(n, "only 1-D, 2-D and 3-D transposed convolutions are supported, got a rank-" +
                                  llvm::Twine(xt.getRank()) + " input");
  if (!isFloat(xt.getElementType()) || wt.getElementType() != xt.getElementType())
    return nodeUnsupported(n, "element type is not supported (float input and weight of one type)");
  const int64_t group = intAttr(n, "group", 1), spatial = xt.getRank() - 2;
  if (wt.getRank() != xt.getRank() || group < 1 || wt.getDimSize(0) != xt.getDimSize(1) || xt.getDimSize(1) % group)
    return nodeInvalid(n, "weight " + shape::str(wt.getShape()) + " does not fit input " + shape::str(xt.getShape()) +
                              " with group " + llvm::Twine(group) + " (expected [C, M / group, kernel...])");
  auto kernel = wt.getShape().drop_front(2);
  if (const auto *k = findAttr(n, "kernel_shape"); k && !llvm::equal(k->ints(), kernel))
    return nodeInvalid(n, "kernel_shape disagrees with the weight " + shape::str(wt.getShape()));
  TRY_ASSIGN(strides, intsAttr(n, "strides", spatial, 1));
  TRY_ASSIGN(dilations, intsAttr(n, "dilations", spatial, 1));
  TRY_ASSIGN(pads, intsAttr(n, "pads", 2 * spatial, 0));
  TRY_ASSIGN(outputPadding, intsAttr(n, "output_padding", spatial, 0));
  const auto *outputShapeAttr = findAttr(n, "output_shape");
  llvm::SmallVector<int64_t> outputShape;
  if (outputShapeAttr) { // the spatial dims, or (as some exporters write) the whole shape
    outputShape.assign(outputShapeAttr->ints().begin(), outputShapeAttr->ints().end());
    if (static_cast<int64_t>(outputShape.size()) == spatial + 2)
      outputShape.erase(outputShape.begin(), outputShape.begin() + 2);
    if (static_cast<int64_t>(outputShape.size()) != spatial)
      return nodeInvalid(n, "output_shape must have one size per spatial dim");
  }
  constexpr int64_t kMaxWindowAttribute = int64_t(1) << 20; // keeps the output size's arithmetic far from overflow
  auto outside = [&](ArrayRef<int64_t> values, int64_t low) {
    return llvm::any_of(values, [&](int64_t v) { return v < low || v > kMaxWindowAttribute; });
  };
  if (outside(strides, 1) || outside(dilations, 1) || outside(pads, 0) || outside(outputPadding, 0) ||
      outside(kernel, 1) || outside(outputShape, 1))
    return nodeInvalid(n, "strides, dilations and kernel must be in [1, 2^20], pads and output_padding in [0, 2^20], "
                          "output_shape in [1, 2^20]");
  const std::string autoPad = findAttr(n, "auto_pad") ? findAttr(n, "auto_pad")->s() : "NOTSET";
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return nodeInvalid(n, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + autoPad + "'");
  llvm::SmallVector<int64_t> outDims;
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t in = xt.getDimSize(2 + d), s = strides[d];
    const int64_t natural = s * (in - 1) + outputPadding[d] + (kernel[d] - 1) * dilations[d] + 1;
    int64_t &begin = pads[d], &end = pads[spatial + d];
    if (autoPad == "VALID") {
      begin = end = 0;
    } else if (outputShapeAttr || autoPad != "NOTSET") {
      // ONNX's rule: the padding that gives the output shape (in * stride for SAME), split with the odd cell
      // at the end for SAME_UPPER and at the start otherwise (Python's floor division, as the reference).
      const int64_t total = natural - (outputShapeAttr ? outputShape[d] : in * s);
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      begin = autoPad == "SAME_UPPER" ? half : total - half;
      end = total - begin;
    }
    // Padding below zero at the end is more output (output_padding); at the start it would shift the output.
    if (begin < 0)
      return nodeUnsupported(n, "an output_shape that needs negative padding at the start is not supported");
    if (end < 0) {
      outputPadding[d] -= end;
      end = 0;
    }
    if (outputPadding[d] >= s)
      return nodeUnsupported(n, "output padding " + llvm::Twine(outputPadding[d]) + " of at least the stride " +
                                    llvm::Twine(s) + " is not supported");
    const int64_t out = s * (in - 1) + outputPadding[d] + (kernel[d] - 1) * dilations[d] + 1 - begin - end;
    if (out < 1)
      return nodeInvalid(n, "the padding leaves no output along spatial dim " + llvm::Twine(d));
    outDims.push_back(out);
  }
  const int64_t outChannels = wt.getDimSize(1) * group;
  Value bias;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(b, value(n, 2));
    if (typeOf(b).getShape() != ArrayRef<int64_t>{outChannels} || typeOf(b).getElementType() != xt.getElementType())
      return nodeInvalid(n, "bias must be [" + llvm::Twine(outChannels) + "] of the input's type");
    bias = b;
  }
  Type elt = xt.getElementType();
  const int64_t batch = xt.getDimSize(0);
  Value y;
  if (spatial == 1) {
    y = create<ConvInputGradOp>(n, RankedTensorType::get({batch, outChannels, 1, outDims[0]}, elt), as2d(n, x),
                                as2d(n, w), ArrayRef<int64_t>{1, strides[0]}, ArrayRef<int64_t>{0, pads[0], 0, pads[1]},
                                ArrayRef<int64_t>{1, dilations[0]}, group);
    y = create<ReshapeOp>(n, RankedTensorType::get({batch, outChannels, outDims[0]}, elt), y);
  } else if (spatial == 2) {
    y = create<ConvInputGradOp>(n, RankedTensorType::get({batch, outChannels, outDims[0], outDims[1]}, elt), x, w,
                                strides, pads, dilations, group);
  } else {
    TRY_ASSIGN(volume, convTranspose3d(n, x, w, group, strides, pads, dilations, outDims));
    y = volume;
  }
  if (bias) {
    shape::Dims biasDims(xt.getRank(), 1);
    biasDims[1] = outChannels;
    y = broadcast<AddOp>(n, y, create<ReshapeOp>(n, RankedTensorType::get(biasDims, elt), bias));
  }
  return define(n, 0, y);
}

/// Per kernel depth k, the 2-D transposed conv of every input depth slice with the weight's slice at k lands
/// at output depth id * stride + k * dilation - padBegin: spread to stride-spaced rows (zeros between), shifted
/// by k * dilation - padBegin and cut to the output's depth, then summed over k.
Expected<Value> GraphImporter::convTranspose3d(const onnx::NodeProto &n, Value x, Value w, int64_t group,
                                                ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                                                ArrayRef<int64_t> dilations, ArrayRef<int64_t> outDims) {
  auto xt = typeOf(x), wt = typeOf(w);
  Type elt = xt.getElementType();
  const int64_t batch = xt.getDimSize(0), inDepth = xt.getDimSize(2), outChannels = wt.getDimSize(1) * group;
  const int64_t stride = strides[0], row = outChannels * outDims[1] * outDims[2];
  Value zero = scalar(n, elt, 0), sum;
  TRY_ASSIGN(slices, depthSlices(n, x, WindowAxis{}, inDepth, zero)); // every input depth, one slice
  for (int64_t k = 0; k < wt.getDimSize(2); ++k) {
    Value y = create<ConvInputGradOp>(
        n, RankedTensorType::get({batch * inDepth, outChannels, outDims[1], outDims[2]}, elt), slices[0],
        weightAtDepth(n, w, k), ArrayRef<int64_t>{strides[1], strides[2]},
        ArrayRef<int64_t>{pads[1], pads[2], pads[4], pads[5]}, ArrayRef<int64_t>{dilations[1], dilations[2]}, group);
    y = create<ReshapeOp>(n, RankedTensorType::get({batch, inDepth, 1, row}, elt), y);
    TRY_ASSIGN(spread, fillAxis(n, y, 2, 0, stride - 1, zero));
    y = create<ReshapeOp>(n, RankedTensorType::get({batch, inDepth * stride, row}, elt), spread);
    const int64_t shift = k * dilations[0] - pads[0];
    TRY_ASSIGN(placed, padAxis(n, y, 1, shift, outDims[0] - inDepth * stride - shift, zero));
    sum = sum ? create<AddOp>(n, placed.getType(), sum, placed) : placed;
  }
  auto folded = RankedTensorType::get({batch * outDims[0], outChannels, outDims[1], outDims[2]}, elt);
  return fromDepthSlices(n, create<ReshapeOp>(n, folded, sum), batch);
}

namespace {

/// One resized axis: output element o reads input elements index[k][o] with weight[k][o], k over the taps.
struct ResizeTaps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<float>> weight;
};

/// ONNX Resize's coordinate transformation: output coordinate -> input coordinate, in float as ONNX Runtime
/// computes it (so that nearest picks the same elements at exact halves).
float resizeSource(llvm::StringRef mode, float x, float scale, int64_t in, int64_t out) {
  if (mode == "asymmetric")
    return x / scale;
  if (mode == "align_corners")
    return out == 1 ? 0.0f : x * static_cast<float>(in - 1) / static_cast<float>(out - 1);
  if (mode == "tf_half_pixel_for_nn")
    return (x + 0.5f) / scale;
  if (mode == "pytorch_half_pixel")
    return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
  if (mode == "half_pixel_symmetric") {
    const float adjustment = static_cast<float>(out) / (scale * static_cast<float>(in));
    const float center = static_cast<float>(in) / 2.0f;
    return center * (1.0f - adjustment) + (x + 0.5f) / scale - 0.5f;
  }
  return (x + 0.5f) / scale - 0.5f; // half_pixel
}

int64_t nearestIndex(llvm::StringRef mode, float x) {
  if (mode == "floor")
    return static_cast<int64_t>(std::floor(x));
  if (mode == "ceil")
    return static_cast<int64_t>(std::ceil(x));
  const float below = std::floor(x);
  if (x == below + 0.5f) // a tie
    return static_cast<int64_t>(mode == "round_prefer_ceil" ? below + 1.0f : below);
  return static_cast<int64_t>(std::round(x));
}

/// Keys's cubic convolution weights of the taps at floor(x) - 1 .. floor(x) + 2, for x's fraction `r`.
std::array<float, 4> cubicWeights(float r, float a) {
  auto near = [&](float t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };              // |t| <= 1
  auto far = [&](float t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };          // 1 < |t| < 2
  return {far(r + 1), near(r), near(1 - r), far(2 - r)};
}

ResizeTaps resizeTaps(llvm::StringRef mode, llvm::StringRef transform, llvm::StringRef nearestMode, float cubicA,
                      bool excludeOutside, float scale, int64_t in, int64_t out) {
  const int64_t taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  ResizeTaps t{std::vector<std::vector<int64_t>>(taps, std::vector<int64_t>(out)),
               std::vector<std::vector<float>>(taps, std::vector<float>(out))};
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    float x = resizeSource(transform, static_cast<float>(o), scale, in, out);
    if (mode == "nearest") {
      t.index[0][o] = clamp(nearestIndex(nearestMode, x));
      t.weight[0][o] = 1.0f;
      continue;
    }
    if (mode == "linear") { // the source clamped to the input, as ONNX Runtime's bilinear
      x = std::clamp(x, 0.0f, static_cast<float>(in - 1));
      const int64_t lo = static_cast<int64_t>(std::floor(x)), hi = clamp(lo + 1);
      const float r = x - static_cast<float>(lo);
      t.index[0][o] = lo, t.index[1][o] = hi;
      t.weight[0][o] = 1.0f - r, t.weight[1][o] = r;
      continue;
    }
    const float below = std::floor(x);
    const auto w = cubicWeights(x - below, cubicA);
    float sum = 0.0f;
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = static_cast<int64_t>(below) - 1 + k;
      const bool outside = i < 0 || i >= in;
      t.index[k][o] = clamp(i);
      t.weight[k][o] = excludeOutside && outside ? 0.0f : w[k];
      sum += t.weight[k][o];
    }
    if (excludeOutside)
      for (int64_t k = 0; k < 4; ++k)
        t.weight[k][o] /= sum;
  }
  return t;
}

} // namespace

Error GraphImporter::resize(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  const int64_t rank = xt.getRank();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (opset < 11)
    return nodeUnsupported(n, "Resize before opset 11 is not supported (convert the model to opset 11 or later)");
  auto str = [&](const char *name, const char *dflt) {
    const auto *a = findAttr(n, name);
    return a ? a->s() : std::string(dflt);
  };
  const std::string mode = str("mode", "nearest"), transform = str("coordinate_transformation_mode", "half_pixel"),
                    nearestMode = str("nearest_mode", "round_prefer_floor"),
                    aspect = str("keep_aspect_ratio_policy", "stretch");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return nodeInvalid(n, "mode must be nearest, linear or cubic, got '" + mode + "'");
  static const llvm::StringSet<> transforms{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                            "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (!transforms.contains(transform))
    return nodeInvalid(n, "unknown coordinate_transformation_mode '" + transform + "'");
  if (transform == "tf_crop_and_resize")
    return nodeUnsupported(n, "coordinate_transformation_mode tf_crop_and_resize is not supported");
  if (nearestMode != "round_prefer_floor" && nearestMode != "round_prefer_ceil" && nearestMode != "floor" &&
      nearestMode != "ceil")
    return nodeInvalid(n, "unknown nearest_mode '" + nearestMode + "'");
  if (intAttr(n, "antialias", 0) != 0 && mode != "nearest")
    return nodeUnsupported(n, "antialias is not supported");
  if (aspect != "stretch" && aspect != "not_larger" && aspect != "not_smaller")
    return nodeInvalid(n, "unknown keep_aspect_ratio_policy '" + aspect + "'");
  std::vector<int64_t> axes;
  if (const auto *a = findAttr(n, "axes"))
    for (int64_t axis : a->ints()) {
      TRY_ASSIGN(d, normalizeAxis(n, axis, rank));
      if (llvm::is_contained(axes, d))
        return nodeInvalid(n, "axes names dim " + llvm::Twine(d) + " twice");
      axes.push_back(d);
    }
  else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  // The output size and the scale of each axis: from sizes (scale = out / in) or scales (out = floor(in * s)).
  constexpr int64_t kMaxResizedLength = int64_t(1) << 24;
  std::vector<int64_t> outSize(xt.getShape());
  std::vector<float> scale(rank, 1.0f);
  const bool bySizes = hasInput(n, 3);
  if (bySizes) {
    TRY_ASSIGN(sizes, constInts(n, 3));
    if (sizes.size() != axes.size())
      return nodeInvalid(n, "sizes has " + llvm::Twine(sizes.size()) + " values for " + llvm::Twine(axes.size()) + " axes");
    float fit = aspect == "not_larger" ? INFINITY : 0.0f;
    for (size_t k = 0; k < axes.size(); ++k) {
      if (sizes[k] < 1)
        return nodeInvalid(n, "sizes must be positive");
      const float s = static_cast<float>(sizes[k]) / static_cast<float>(xt.getDimSize(axes[k]));
      fit = aspect == "not_larger" ? std::min(fit, s) : std::max(fit, s);
      outSize[axes[k]] = sizes[k], scale[axes[k]] = s;
    }
    if (aspect != "stretch")
      for (int64_t d : axes) {
        scale[d] = fit;
        const double length = std::round(double(fit) * static_cast<double>(xt.getDimSize(d)));
        outSize[d] = length > static_cast<double>(kMaxResizedLength) ? kMaxResizedLength + 1 : static_cast<int64_t>(length);
      }
  } else if (hasInput(n, 2)) {
    TRY_ASSIGN(scales, constFloats(n, 2));
    if (scales.size() != axes.size())
      return nodeInvalid(n, "scales has " + llvm::Twine(scales.size()) + " values for " + llvm::Twine(axes.size()) +
                                " axes");
    for (size_t k = 0; k < axes.size(); ++k) {
      if (!(scales[k] > 0.0f) || !std::isfinite(scales[k]))
        return nodeInvalid(n, "scales must be positive and finite");
      scale[axes[k]] = scales[k];
      const double length = std::floor(static_cast<double>(xt.getDimSize(axes[k])) * scales[k]);
      outSize[axes[k]] = length > static_cast<double>(kMaxResizedLength) ? kMaxResizedLength + 1
                                                                           : static_cast<int64_t>(length);
      if (outSize[axes[k]] < 1)
        return nodeInvalid(n, "scales leave no output along dim " + llvm::Twine(axes[k]));
    }
  } else {
    return nodeInvalid(n, "expected scales or sizes");
  }
  // The taps are tables of the output's length per axis, built now: bounded like any compile-time tensor.
  for (int64_t d : axes)
    if (xt.getDimSize(d) < 1 || outSize[d] > kMaxResizedLength)
      return nodeUnsupported(n, "resizing dim " + llvm::Twine(d) + " from " + llvm::Twine(xt.getDimSize(d)) + " to " +
                                    llvm::Twine(outSize[d]) + " is not supported (1 to " +
                                    llvm::Twine(kMaxResizedLength) + " elements)");
  TRY_ASSIGN(checked, checkedType(n, outSize, elt));
  (void)checked;
  const float cubicA = floatAttr(n, "cubic_coeff_a", -0.75f);
  const bool excludeOutside = intAttr(n, "exclude_outside", 0) != 0;
  Value y = x;
  for (int64_t d : axes) {
    const int64_t in = xt.getDimSize(d), out = outSize[d];
    if (in == out && scale[d] == 1.0f)
      continue; // every transformation maps an unscaled axis onto itself
    auto taps = resizeTaps(mode, transform, nearestMode, cubicA, excludeOutside, scale[d], in, out);
    auto current = typeOf(y);
    SmallVector<int64_t> dims(current.getShape()), weightDims(rank, 1);
    dims[d] = out, weightDims[d] = out;
    auto resultType = RankedTensorType::get(dims, elt);
    Value sum;
    for (size_t k = 0; k < taps.index.size(); ++k) {
      Value picked = create<GatherOp>(n, resultType, y, int64Constant(n, {out}, taps.index[k]), d);
      if (mode != "nearest") {
        auto f32Weights = RankedTensorType::get(weightDims, builder.getF32Type());
        Value weight = create<ConstantOp>(n, f32Weights, DenseElementsAttr::get(f32Weights, ArrayRef<float>(taps.weight[k])));
        if (!elt.isF32())
          weight = create<CastOp>(n, RankedTensorType::get(weightDims, elt), weight);
        picked = broadcast<MulOp>(n, picked, weight);
      }
      sum = sum ? create<AddOp>(n, resultType, sum, picked) : picked;
    }
    y = sum;
  }
  return define(n, 0, y);
}

Error GraphImporter::pool(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  if (xt.getRank() < 3 || xt.getRank() > 5)
    return nodeUnsupported(n, "only 1-D, 2-D and 3-D pools are supported, got a rank-" + llvm::Twine(xt.getRank()) +
                                  " input");
  Type elt = xt.getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (outputUsed(n, 1))
    return nodeUnsupported(n, "MaxPool's Indices output is not supported");
  const auto *k = findAttr(n, "kernel_shape");
  if (!k || k->ints_size() != xt.getRank() - 2)
    return nodeInvalid(n, "kernel_shape must have one size per spatial dim");
  llvm::SmallVector<int64_t> kernel(k->ints().begin(), k->ints().end());
  const bool ceilMode = intAttr(n, "ceil_mode", 0) != 0, max = n.op_type() == "MaxPool";
  const bool countIncludePad = !max && intAttr(n, "count_include_pad", 0) != 0;
  TRY_ASSIGN(win, windowAttrs(n, xt, kernel, ceilMode));
  auto planarPool = [&](Value x2) -> Value {
    auto dims = planarOutput(typeOf(x2), typeOf(x2).getDimSize(1), win, ceilMode);
    return create<PoolOp>(n, RankedTensorType::get(dims, elt), x2, builder.getStringAttr(max ? "max" : "avg"),
                          win.kernel, win.strides, win.pads, win.dilations, countIncludePad);
  };
  if (xt.getRank() == 5) {
    TRY_ASSIGN(y, pool3d(n, x, win, ceilMode, max, countIncludePad, planarPool));
    return define(n, 0, y);
  }
  Value y = planarPool(as2d(n, x));
  if (xt.getRank() == 3) {
    auto dims = typeOf(y).getShape();
    y = create<ReshapeOp>(n, RankedTensorType::get({dims[0], dims[1], dims[3]}, elt), y);
  }
  return define(n, 0, y);
}

/// The max over kernel depths of 2-D max pools on depth slices (-inf outside the input, so that padding never
/// wins); for the mean, the sum of 2-D means (each divided by its window's planar cells) divided by the depth
/// cells each output's window counts.
Expected<Value> GraphImporter::pool3d(const onnx::NodeProto &n, Value x, const Window2d &win, bool ceilMode, bool max,
                                      bool countIncludePad, llvm::function_ref<Value(Value)> planarPool) {
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  const WindowAxis &depth = win.depth;
  const int64_t inDepth = xt.getDimSize(2), outDepth = depth.output(inDepth, ceilMode);
  TRY_ASSIGN(slices, depthSlices(n, x, depth, outDepth, scalar(n, elt, max ? -INFINITY : 0.0)));
  Value combined;
  for (Value slice : slices) {
    Value y = planarPool(slice);
    if (!combined)
      combined = y;
    else if (max)
      combined = create<MaxOp>(n, y.getType(), combined, y);
    else
      combined = create<AddOp>(n, y.getType(), combined, y);
  }
  Value y = fromDepthSlices(n, combined, xt.getDimSize(0));
  if (max)
    return y;
  llvm::SmallVector<double> cells;
  for (int64_t od = 0; od < outDepth; ++od) {
    int64_t count = 0;
    for (int64_t k = 0; k < depth.kernel; ++k) {
      const int64_t id = od * depth.stride - depth.padBegin + k * depth.dilation;
      count += countIncludePad ? id >= -depth.padBegin && id < inDepth + depth.padEnd : id >= 0 && id < inDepth;
    }
    cells.push_back(static_cast<double>(count));
  }
  return broadcast<DivOp>(n, y, depthConstant(n, elt, cells));
}

Error GraphImporter::globalPool(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  if (xt.getRank() < 3 || !isFloat(xt.getElementType()))
    return nodeUnsupported(n, "expected a float [N, C, spatial...] input, got " + shape::str(xt.getShape()));
  ReduceSpec spec;
  for (int64_t d = 2; d < xt.getRank(); ++d)
    spec.axes.push_back(d);
  return define(n, 0, n.op_type() == "GlobalMaxPool" ? reduceWith<ReduceMaxOp>(n, x, spec)
                                                     : reduceWith<ReduceMeanOp>(n, x, spec));
}

/// Inference BatchNormalization: (x - mean) * scale / sqrt(var + epsilon) + bias per channel. The running
/// statistics are params training leaves alone (tec.frozen).
/// BatchNormalization. In training mode (opset 14+) the statistics are the batch's own (population variance,
/// as ONNX defines it) and outputs 1 and 2 are the running statistics moved towards them by 1 - momentum.
Error GraphImporter::batchNorm(const onnx::NodeProto &n) {
  const bool training = opset >= 14 && intAttr(n, "training_mode", 0) != 0;
  if (opset < 9 && intAttr(n, "spatial", 1) == 0)
    return nodeUnsupported(n, "BatchNormalization with spatial = 0 is not supported");
  if (!training)
    for (int i = 1; i < n.output_size(); ++i)
      if (outputUsed(n, i))
        return nodeUnsupported(n, "the statistics outputs of BatchNormalization before opset 14 are not supported");
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  if (xt.getRank() < 2 || !isFloat(elt))
    return nodeUnsupported(n, "expected a float [N, C, ...] input, got " + shape::str(xt.getShape()));
  // Per-channel operands as [C, 1, ...] so they broadcast over the spatial dims.
  shape::Dims channelShape(xt.getRank() - 1, 1);
  channelShape[0] = xt.getDimSize(1);
  auto channelType = RankedTensorType::get(channelShape, elt);
  llvm::SmallVector<Value, 4> perChannel, raw;
  for (int i = 1; i <= 4; ++i) {
    TRY_ASSIGN(v, value(n, i));
    raw.push_back(v);
    if (typeOf(v).getShape() != ArrayRef<int64_t>{xt.getDimSize(1)} || typeOf(v).getElementType() != elt)
      return nodeInvalid(n, "input '" + n.input(i) + "' must be [" + llvm::Twine(xt.getDimSize(1)) + "] of the input's type");
    if (i >= 3 && initializers.contains(n.input(i)))
      frozenParams[n.input(i)] = "a BatchNormalization running statistic";
    perChannel.push_back(create<ReshapeOp>(n, channelType, v));
  }
  Value scale = perChannel[0], bias = perChannel[1], mean = perChannel[2], var = perChannel[3];
  if (training) {
    ReduceSpec overAllButChannels;
    for (int64_t d = 0; d < xt.getRank(); ++d)
      if (d != 1)
        overAllButChannels.axes.push_back(d);
    overAllButChannels.keepdims = false;
    auto batchStatistic = [&](Value v) {
      return create<ReshapeOp>(n, channelType, reduceWith<ReduceMeanOp>(n, v, overAllButChannels));
    };
    Value batchMean = batchStatistic(x);
    Value centered = broadcast<SubOp>(n, x, batchMean);
    Value batchVar = batchStatistic(create<MulOp>(n, xt, centered, centered));
    const float momentum = floatAttr(n, "momentum", 0.9f);
    auto channelVector = RankedTensorType::get({xt.getDimSize(1)}, elt);
    for (auto [output, current] : {std::pair{1, batchMean}, std::pair{2, batchVar}}) {
      Value running = raw[output + 1];
      Value moved = create<ReshapeOp>(
          n, channelVector,
          broadcast<AddOp>(n, broadcast<MulOp>(n, perChannel[output + 1], scalar(n, elt, momentum)),
                           broadcast<MulOp>(n, current, scalar(n, elt, 1.0 - momentum))));
      if (auto err = define(n, output, moved))
        return err;
      // A running statistic that is an initializer moves in training, as the framework's buffer does.
      if (auto arg = llvm::dyn_cast<BlockArgument>(running); arg && initializers.contains(n.input(output + 2)))
        if (!runningStats.insert({arg, moved}).second)
          return nodeUnsupported(n, "running statistic '" + n.input(output + 2) +
                                        "' is updated by more than one training-mode BatchNormalization");
    }
    mean = batchMean;
    var = batchVar;
  }
  Value stddev = create<SqrtOp>(n, var.getType(), broadcast<AddOp>(n, var, scalar(n, elt, floatAttr(n, "epsilon", 1e-5f))));
  Value normalized = broadcast<DivOp>(n, broadcast<SubOp>(n, x, mean), stddev);
  return define(n, 0, broadcast<AddOp>(n, broadcast<MulOp>(n, normalized, scale), bias));
}

/// LRN: y = x * (bias + alpha * mean of x² over `size` neighbouring channels)^-beta, the channel window
/// an average pool (padding counted, so it is the sum / size) over x² seen as [N, 1, C, spatial].
Error GraphImporter::lrn(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto t = typeOf(x);
  Type elt = t.getElementType();
  if (auto err = checkChannelsFirst(n, t))
    return err;
  const int64_t size = intAttr(n, "size", 0);
  if (size < 1)
    return nodeInvalid(n, "size must be positive, got " + llvm::Twine(size));
  const int64_t spatial = *shape::elementCount(t.getShape().drop_front(2));
  auto channelsType = RankedTensorType::get({t.getDimSize(0), 1, t.getDimSize(1), spatial}, elt);
  Value squares = create<ReshapeOp>(n, channelsType, create<MulOp>(n, t, x, x));
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Value mean = create<PoolOp>(n, channelsType, squares, builder.getStringAttr("avg"), ArrayRef<int64_t>{size, 1},
                              ArrayRef<int64_t>{1, 1}, ArrayRef<int64_t>{before, 0, after, 0}, ArrayRef<int64_t>{1, 1},
                              true);
  Value scaled = broadcast<MulOp>(n, create<ReshapeOp>(n, t, mean), scalar(n, elt, floatAttr(n, "alpha", 1e-4f)));
  Value base = broadcast<AddOp>(n, scaled, scalar(n, elt, floatAttr(n, "bias", 1.0f)));
  Value factor = broadcast<PowOp>(n, base, scalar(n, elt, -floatAttr(n, "beta", 0.75f)));
  return define(n, 0, create<MulOp>(n, t, x, factor));
}

// Shapes are static after import, so the shape operators are constants.
Error GraphImporter::shapeOf(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto dims = typeOf(x).getShape();
  const int64_t rank = dims.size();
  // Opset 15's start and end: negative counts from the back, then clamped to [0, rank].
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clamp(intAttr(n, "start", 0)), end = clamp(intAttr(n, "end", rank));
  auto kept = dims.slice(start, std::max<int64_t>(end - start, 0));
  return define(n, 0, int64Constant(n, {static_cast<int64_t>(kept.size())}, kept));
}

Error GraphImporter::sizeOf(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  return define(n, 0, int64Constant(n, {}, {typeOf(x).getNumElements()}));
}

Expected<DenseElementsAttr> GraphImporter::constElements(const onnx::NodeProto &n, int i) {
  TRY_ASSIGN(v, value(n, i));
  if (auto constant = v.getDefiningOp<ConstantOp>())
    if (auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue()))
      return dense;
  return nodeUnsupported(n, "input '" + n.input(i) + "' must be a constant or an initializer (it decides a shape)");
}

Error GraphImporter::constantOfShape(const onnx::NodeProto &n) {
  TRY_ASSIGN(dims, constInts(n, 0));
  Type elt = builder.getF32Type();
  Attribute element = builder.getF32FloatAttr(0.0f);
  if (const auto *a = findAttr(n, "value")) {
    if (auto err = checkTensorProto(a->t(), label(n) + " value"))
      return err;
    TRY_ASSIGN(valueType, tensorType(a->t(), label(n) + " value"));
    if (valueType.getNumElements() != 1)
      return nodeInvalid(n, "value must hold one element, got " + llvm::Twine(valueType.getNumElements()));
    TRY_ASSIGN(bytes, tensorBytes(a->t(), label(n) + " value"));
    elt = valueType.getElementType();
    auto one = elt.isInteger(1) ? DenseElementsAttr::get(RankedTensorType::get({1}, elt), bytes[0] != 0)
                                : DenseElementsAttr::getFromRawBuffer(RankedTensorType::get({1}, elt), bytes);
    element = *one.value_begin<Attribute>();
  }
  TRY_ASSIGN(type, checkedType(n, dims, elt));
  if (llvm::any_of(dims, [](int64_t d) { return d < 0; }))
    return nodeInvalid(n, "dims [" + shape::str(dims) + "] must not be negative");
  return define(n, 0, create<ConstantOp>(n, type, DenseElementsAttr::get(type, element)));
}

Error GraphImporter::range(const onnx::NodeProto &n) {
  TRY_ASSIGN(start, constElements(n, 0));
  TRY_ASSIGN(limit, constElements(n, 1));
  TRY_ASSIGN(delta, constElements(n, 2));
  Type elt = start.getElementType();
  for (auto a : {start, limit, delta})
    if (a.getNumElements() != 1 || a.getElementType() != elt)
      return nodeInvalid(n, "start, limit and delta must be scalars of one element type");
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  // Folded into a constant here: bounded like any folded constant, and integers counted exactly (through
  // doubles, values near 2^63 round past int64's range).
  constexpr int64_t kMaxRangeElements = int64_t(1) << 24;
  auto tooLarge = [&](const std::string &count) {
    return nodeInvalid(n, "range of " + count + " elements is too large (at most " +
                              llvm::Twine(kMaxRangeElements) + " are folded)");
  };
  // Values, not an Attribute each: the context keeps every attribute it made (2^24 took 30 s and 2 GiB).
  auto constant = [&](auto values) {
    auto type = RankedTensorType::get({static_cast<int64_t>(values.size())}, elt);
    return define(n, 0, create<ConstantOp>(n, type, DenseElementsAttr::get(type, values)));
  };
  if (isFloat(elt)) {
    auto scalarOf = [](DenseElementsAttr a) { return llvm::cast<FloatAttr>(*a.value_begin<Attribute>()).getValueAsDouble(); };
    const double s = scalarOf(start), l = scalarOf(limit), d = scalarOf(delta);
    if (d == 0)
      return nodeInvalid(n, "delta is 0");
    const double count = std::max(std::ceil((l - s) / d), 0.0);
    if (!(count <= kMaxRangeElements))
      return tooLarge(std::to_string(count));
    auto valuesAs = [&](auto zero) { // C++'s narrowing conversion rounds to nearest even, as APFloat would
      std::vector<decltype(zero)> values(static_cast<size_t>(count));
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<decltype(zero)>(s + static_cast<double>(i) * d);
      return values;
    };
    if (elt.isF32())
      return constant(ArrayRef<float>(valuesAs(0.0f)));
    llvm::SmallVector<APFloat> values; // 16-bit floats
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      bool lost;
      values.emplace_back(s + i * d);
      values.back().convert(llvm::cast<FloatType>(elt).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    }
    return constant(ArrayRef<APFloat>(values));
  }
  auto scalarOf = [](DenseElementsAttr a) { return llvm::cast<IntegerAttr>(*a.value_begin<Attribute>()).getInt(); };
  const int64_t s = scalarOf(start), l = scalarOf(limit), d = scalarOf(delta);
  if (d == 0)
    return nodeInvalid(n, "delta is 0");
  const __int128 span = static_cast<__int128>(l) - s;
  const __int128 count = (span > 0) != (d > 0) || span == 0 ? 0 : (span + d - (d > 0 ? 1 : -1)) / d;
  if (count > kMaxRangeElements)
    return tooLarge("more than " + std::to_string(kMaxRangeElements));
  auto valuesAs = [&](auto zero) { // each lies between start and limit, so fits the element type
    std::vector<decltype(zero)> values(static_cast<size_t>(count));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<decltype(zero)>(s + static_cast<__int128>(i) * d);
    return values;
  };
  if (elt.isInteger(32))
    return constant(ArrayRef<int32_t>(valuesAs(int32_t(0))));
  return constant(ArrayRef<int64_t>(valuesAs(int64_t(0))));
}

Error GraphImporter::castLike(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(like, value(n, 1));
  return define(n, 0, create<CastOp>(n, RankedTensorType::get(typeOf(x).getShape(), typeOf(like).getElementType()), x));
}

/// Trilu keeps x where (column - row) is >= k (upper) or <= k (lower): a Where over a mask compared from
/// two index vectors, which broadcasts over the batch and folds to a constant only when small.
Error GraphImporter::trilu(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto type = typeOf(x);
  if (type.getRank() < 2)
    return nodeInvalid(n, "input must have at least 2 dims, got " + llvm::Twine(type.getRank()));
  int64_t k = 0;
  if (hasInput(n, 1)) {
    TRY_ASSIGN(ks, constInts(n, 1));
    if (ks.size() != 1)
      return nodeInvalid(n, "k must be a scalar");
    k = ks[0];
  }
  const int64_t rows = type.getDimSize(type.getRank() - 2), cols = type.getDimSize(type.getRank() - 1);
  auto iota = [&](int64_t count) {
    llvm::SmallVector<int64_t> v(count);
    std::iota(v.begin(), v.end(), 0);
    return v;
  };
  Value rowIndex = int64Constant(n, {rows, 1}, iota(rows)), colIndex = int64Constant(n, {1, cols}, iota(cols));
  Value offset = broadcast<SubOp>(n, colIndex, rowIndex);
  bool upper = intAttr(n, "upper", 1) != 0;
  Value keep = compareValues(n, offset, int64Constant(n, {}, {k}), upper ? "ge" : "le");
  auto zeroType = RankedTensorType::get({}, type.getElementType());
  Value zero = create<ConstantOp>(n, zeroType, DenseElementsAttr::get(zeroType, builder.getZeroAttr(type.getElementType())));
  return define(n, 0, create<WhereOp>(n, type, keep, x, zero));
}

const llvm::StringMap<GraphImporter::ImportFn> &GraphImporter::importers() {
  using G = GraphImporter;
  static const llvm::StringMap<ImportFn> table = {
      {"Add", &G::binary<AddOp>},
      {"Sub", &G::binary<SubOp>},
      {"Mul", &G::binary<MulOp>},
      {"Div", &G::binary<DivOp>},
      {"Pow", &G::binary<PowOp>},
      {"Max", &G::variadic<MaxOp>},
      {"Min", &G::variadic<MinOp>},
      {"Sum", &G::variadic<AddOp>},
      {"Mean", &G::mean},
      {"Mod", &G::mod},
      {"Clip", &G::clip},
      {"Equal", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "eq"); }},
      {"Less", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "lt"); }},
      {"LessOrEqual", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "le"); }},
      {"Greater", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "gt"); }},
      {"GreaterOrEqual", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "ge"); }},
      {"And", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "and"); }},
      {"Or", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "or"); }},
      {"Xor", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "xor"); }},
      {"Not", &G::logicalNot},
      {"IsNaN", &G::isNaN},
      {"IsInf", &G::isInf},
      {"Exp", &G::unary<ExpOp>},
      {"Abs", &G::unary<AbsOp>},
      {"ConvTranspose", &G::convTranspose},
      {"Resize", &G::resize},
      {"InstanceNormalization", &G::instanceNorm},
      {"LSTM", &G::recurrent},
      {"GRU", &G::recurrent},
      {"RNN", &G::recurrent},
      {"Sign", &G::unary<SignOp>},
      {"LeakyRelu", &G::leakyRelu},
      {"HardSigmoid", &G::hardSigmoid},
      {"HardSwish", &G::hardSwish},
      {"Relu", &G::unary<ReluOp>},
      {"Tanh", &G::unary<TanhOp>},
      {"Sigmoid", &G::unary<SigmoidOp>},
      {"Erf", &G::unary<ErfOp>},
      {"Sqrt", &G::unary<SqrtOp>},
      {"Neg", &G::unary<NegOp>},
      {"Reciprocal", &G::unary<ReciprocalOp>},
      {"Log", &G::unary<LogOp>},
      {"Sin", &G::unary<SinOp>},
      {"Cos", &G::unary<CosOp>},
      {"Softplus", &G::unary<SoftplusOp>},
      {"Floor", &G::unary<FloorOp>},
      {"Ceil", &G::unary<CeilOp>},
      {"Gelu", &G::gelu},
      {"Softmax", &G::softmaxLike<SoftmaxOp>},
      {"LogSoftmax", &G::softmaxLike<LogSoftmaxOp>},
      {"LayerNormalization", &G::layerNorm},
      {"ReduceMean", &G::reduction<ReduceMeanOp>},
      {"ReduceSum", &G::reduction<ReduceSumOp>},
      {"ReduceMax", &G::reduction<ReduceMaxOp>},
      {"ReduceMin", &G::reduction<ReduceMinOp>},
      {"ReduceProd", &G::reduction<ReduceProdOp>},
      {"ReduceL1", &G::compositeReduction},
      {"ReduceL2", &G::compositeReduction},
      {"ReduceSumSquare", &G::compositeReduction},
      {"ReduceLogSum", &G::compositeReduction},
      {"ReduceLogSumExp", &G::compositeReduction},
      {"MatMul", &G::matmul},
      {"Gemm", &G::gemm},
      {"Transpose", &G::transpose},
      {"Reshape", &G::reshape},
      {"Flatten", &G::flatten},
      {"Squeeze", &G::squeeze},
      {"Unsqueeze", &G::unsqueeze},
      {"Concat", &G::concat},
      {"Split", &G::split},
      {"Slice", &G::slice},
      {"Gather", &G::gather},
      {"Cast", &G::cast},
      {"Identity", &G::identity},
      {"Dropout", &G::dropout},
      {"Constant", &G::constant},
      {"Where", &G::where},
      {"Expand", &G::expand},
      {"Shape", &G::shapeOf},
      {"Conv", &G::conv},
      {"MaxPool", &G::pool},
      {"AveragePool", &G::pool},
      {"GlobalAveragePool", &G::globalPool},
      {"GlobalMaxPool", &G::globalPool},
      {"BatchNormalization", &G::batchNorm},
      {"LRN", &G::lrn},
      {"GatherElements", &G::gatherElements},
      {"GatherND", &G::gatherND},
      {"ScatterND", &G::scatterND},
      {"Tile", &G::tile},
      {"ArgMax", &G::argReduce},
      {"ArgMin", &G::argReduce},
      {"CumSum", &G::cumSum},
      {"Einsum", &G::einsum},
      {"Pad", &G::pad},
      {"OneHot", &G::oneHot},
      {"NegativeLogLikelihoodLoss", &G::nllLoss},
      {"SoftmaxCrossEntropyLoss", &G::softmaxCrossEntropy},
      {"Size", &G::sizeOf},
      {"ConstantOfShape", &G::constantOfShape},
      {"Range", &G::range},
      {"CastLike", &G::castLike},
      {"Trilu", &G::trilu},
  };
  return table;
}

/// ONNX 1.12's schemas know opsets up to 17.
constexpr int64_t kLastSchemaOpset = 17;

Error GraphImporter::checkNodeSchema(const onnx::NodeProto &node) {
  llvm::StringSet<> seen;
  for (const auto &a : node.attribute())
    if (!seen.insert(a.name()).second)
      return nodeInvalid(node, "attribute '" + a.name() + "' appears more than once");
  for (const char *flag : {"transA", "transB", "allowzero", "keepdims", "noop_with_empty_axes"})
    if (const auto *a = findAttr(node, flag); a && a->type() == onnx::AttributeProto::INT && a->i() != 0 && a->i() != 1)
      return nodeInvalid(node, "attribute '" + llvm::Twine(flag) + "' must be 0 or 1, got " + llvm::Twine(a->i()));
  // Float attributes are factors and epsilons: a NaN or an infinity makes every output NaN silently. Only
  // bounds and fill values may be infinite (Clip's min and max, Pad's value); Constant holds any value.
  const bool boundsMayBeInfinite = node.op_type() == "Clip" || node.op_type() == "Pad";
  for (const auto &a : node.attribute()) {
    if (node.op_type() == "Constant" || (a.type() != onnx::AttributeProto::FLOAT && a.type() != onnx::AttributeProto::FLOATS))
      continue;
    std::vector<float> values(a.floats().begin(), a.floats().end());
    if (a.type() == onnx::AttributeProto::FLOAT)
      values = {a.f()};
    for (float v : values)
      if (std::isnan(v) || (std::isinf(v) && !boundsMayBeInfinite))
        return nodeInvalid(node, "attribute '" + a.name() + "' must be finite, got " + (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
  }
  const auto *schema = onnx::OpSchemaRegistry::Schema(node.op_type(), std::min(opset, kLastSchemaOpset), "");
  if (!schema)
    return Error::success(); // newer than ONNX 1.12 (Gelu): the operator's importer checks what it reads
  if (opset <= kLastSchemaOpset) {
    try {
      schema->Verify(node);
    } catch (const std::exception &e) {
      std::string what = e.what();
      return nodeInvalid(node, what.substr(0, what.find('\n')));
    }
    return Error::success();
  }
  // A newer opset may add inputs and attributes (those of opsets 18-21 for the operators tec imports are
  // listed here), never change the type of an attribute it keeps.
  static const llvm::StringSet<> addedAfter17 = {"num_outputs", "noop_with_empty_axes", "saturate", "antialias",
                                                 "keep_aspect_ratio_policy", "reduction", "block_size"};
  if (node.input_size() < schema->min_input())
    return nodeInvalid(node, "expected at least " + llvm::Twine(schema->min_input()) + " inputs, got " +
                                 llvm::Twine(node.input_size()));
  // Inputs opsets 18-21 added to operators ONNX 1.12 knows: Pad's and the reductions' axes.
  static const llvm::StringMap<int> inputsAddedAfter17 = {
      {"Pad", 1},          {"ReduceMean", 1},      {"ReduceMax", 1},       {"ReduceMin", 1},
      {"ReduceProd", 1},   {"ReduceL1", 1},        {"ReduceL2", 1},        {"ReduceLogSum", 1},
      {"ReduceLogSumExp", 1}, {"ReduceSumSquare", 1}};
  const int maxInputs = schema->max_input() + inputsAddedAfter17.lookup(node.op_type());
  if (schema->max_input() < std::numeric_limits<int>::max() && node.input_size() > maxInputs)
    return nodeInvalid(node, "expected at most " + llvm::Twine(maxInputs) + " inputs, got " +
                                 llvm::Twine(node.input_size()));
  // A required input left empty ("" is ONNX's spelling of an omitted optional one).
  const auto &formals = schema->inputs();
  for (int i = 0; i < node.input_size() && i < static_cast<int>(formals.size()); ++i)
    if (node.input(i).empty() && formals[i].GetOption() == onnx::OpSchema::Single)
      return nodeInvalid(node, "input " + llvm::Twine(i) + " ('" + formals[i].GetName() + "') is required, but its name is empty");
  if (node.output_size() > schema->max_output())
    return nodeInvalid(node, "expected at most " + llvm::Twine(schema->max_output()) + " outputs, got " +
                                 llvm::Twine(node.output_size()));
  for (const auto &a : node.attribute()) {
    auto known = schema->attributes().find(a.name());
    if (known == schema->attributes().end() && !addedAfter17.contains(a.name()))
      return nodeInvalid(node, "unknown attribute '" + a.name() + "'");
    if (known != schema->attributes().end() && a.type() != known->second.type)
      return nodeInvalid(node, "attribute '" + a.name() + "' must be " +
                                   onnx::AttributeProto::AttributeType_Name(known->second.type) + ", got " +
                                   onnx::AttributeProto::AttributeType_Name(a.type()));
  }
  return Error::success();
}

Error GraphImporter::importNode(const onnx::NodeProto &node) {
  for (const auto &a : node.attribute())
    if (a.has_g() || a.graphs_size())
      return nodeUnsupported(node, "subgraph attributes are not supported");
  return importers().lookup(node.op_type())(*this, node);
}

Error GraphImporter::run() {
  if (auto err = checkOpsetAndOps())
    return err;
  if (graph.output_size() == 0)
    return invalid("the graph has no outputs");
  llvm::StringSet<> inputNames;
  for (const auto &vi : graph.input())
    if (!inputNames.insert(vi.name()).second)
      return invalid("graph input '" + vi.name() + "' is listed twice");
  const auto origins = torchOrigins(graph);
  const bool signedByTorch = llvm::any_of(origins, [](const auto &o) { return !o.getValue().kind.empty(); });
  const bool fromPyTorch = storage.model.producer_name() == "pytorch";
  std::optional<llvm::Regex> trainable;
  if (!options.trainable.empty() && llvm::Regex(options.trainable).isValid())
    trainable.emplace(options.trainable); // an invalid one is the training pipeline's to report
  for (const auto &init : graph.initializer()) {
    if (init.name().empty())
      return invalid("an initializer has no name");
    if (initializers.contains(init.name()))
      return invalid("initializer '" + init.name() + "' is defined twice");
    if (auto err = checkTensorProto(init, "initializer '" + init.name() + "'"))
      return err;
    initializers[init.name()] = &init;
    auto role = initializerRole(init, elementTypeFor(ctx, init.data_type()), origins, signedByTorch, fromPyTorch,
                                trainable);
    if (role.constant)
      constants[init.name()] = &init;
    if (role.scalarConstant)
      scalarConstants.insert(init.name());
    else if (role.frozen)
      frozenParams[init.name()] = *role.frozen;
  }
  findTransposedCopies();
  // A --shape name that is no graph input binds a symbolic dim (dim_param) of that name.
  llvm::StringSet<> symbolicDims;
  for (const auto &vi : graph.input())
    for (const auto &d : vi.type().tensor_type().shape().dim())
      if (d.has_dim_param())
        symbolicDims.insert(d.dim_param());
  for (const auto &[name, dims] : options.shapes) {
    if (llvm::any_of(graph.input(), [&](const auto &vi) { return vi.name() == name; }))
      continue;
    if (!symbolicDims.contains(name))
      return invalid("--shape names '" + name.str() + "', which is neither a graph input nor a symbolic dim" +
                     (symbolicDims.empty() ? std::string() : " (symbolic dims: " + joinSorted(symbolicDims) + ")"));
    if (dims.size() != 1)
      return invalid("--shape " + name.str() + "=" + shape::str(dims) + ": a symbolic dim takes one size");
    dimParams[name] = dims[0];
  }
  for (const auto &[name, serialized] : options.frozenInputs)
    if (auto err = freezeInput(name, serialized))
      return err;
  std::vector<int> order;
  if (auto err = checkDefinitionsAndOrder(order))
    return err;
  // ONNX requires topological order and its shape inference walks the file's order: sort the nodes
  // (moving pointers only, so messages keep naming nodes by their original position).
  auto *nodes = storage.model.mutable_graph()->mutable_node();
  std::vector<onnx::NodeProto *> sorted;
  for (int i : order)
    sorted.push_back(nodes->Mutable(i));
  std::copy(sorted.begin(), sorted.end(), nodes->pointer_begin());
  for (const auto &node : graph.node()) {
    if (auto err = checkNodeSchema(node))
      return err;
    if (auto err = checkWindowAttributes(node))
      return err;
  }
  if (auto err = runOnnxShapeInference())
    return err;

  auto module = ModuleOp::create(FileLineColLoc::get(&ctx, path, 0, 0));
  out.module = module;
  builder.setInsertionPointToEnd(module.getBody());
  auto func = builder.create<func::FuncOp>(FileLineColLoc::get(&ctx, path, 0, 0), "forward",
                                           builder.getFunctionType({}, {}));
  body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);

  for (const auto &vi : graph.input()) {
    if (initializers.contains(vi.name()) || constants.contains(vi.name()))
      continue; // IR version < 4 lists initializers as inputs too; frozen inputs are constants.
    auto type = inputType(vi);
    if (!type)
      return type.takeError();
    values[vi.name()] = body->addArgument(*type, NameLoc::get(builder.getStringAttr(vi.name())));
    out.inputNames.push_back(vi.name());
  }
  // Every node tec cannot import (an operator's form or element type it lacks) is reported at once, as
  // unsupported operators are: nodes that read what one of them would have made are skipped, not reported.
  std::vector<std::string> unsupportedNodes;
  ImportError::Operators unsupportedOperators;
  llvm::StringSet<> skipped;
  for (const auto &node : graph.node()) {
    if (llvm::any_of(node.input(), [&](const std::string &in) { return skipped.contains(in); })) {
      skipped.insert(node.output().begin(), node.output().end());
      continue;
    }
    std::string message;
    Error err = llvm::handleErrors(importNode(node), [&](std::unique_ptr<ImportError> e) -> Error {
      if (e->getKind() != ImportErrorKind::Unsupported)
        return Error(std::move(e));
      message = e->getMessage();
      return Error::success();
    });
    if (err)
      return err;
    if (message.empty())
      continue;
    const std::string prefix = escapeControl(path + ": ");
    unsupportedNodes.push_back(llvm::StringRef(message).starts_with(prefix) ? message.substr(prefix.size()) : message);
    const size_t index = nodeIndex.lookup(&node);
    unsupportedOperators.emplace_back(escapeControl(node.name().empty() ? "#" + std::to_string(index) : node.name()),
                                      escapeControl(node.op_type()));
    skipped.insert(node.output().begin(), node.output().end());
  }
  if (!unsupportedNodes.empty())
    return llvm::make_error<ImportError>(
        ImportErrorKind::Unsupported,
        escapeControl(path + ": " +
                      (unsupportedNodes.size() == 1 ? unsupportedNodes.front()
                                                    : std::to_string(unsupportedNodes.size()) +
                                                          " nodes tec cannot import:\n  " +
                                                          llvm::join(unsupportedNodes, "\n  "))),
        std::move(unsupportedOperators));

  llvm::SmallVector<Value> results;
  for (const auto &o : graph.output()) {
    onnx::NodeProto outputUse;
    outputUse.set_op_type("graph output");
    outputUse.add_input(o.name());
    auto v = value(outputUse, 0);
    if (!v)
      return v.takeError();
    const auto &declared = o.type().tensor_type();
    auto type = typeOf(*v);
    if (declared.elem_type() && elementTypeFor(ctx, declared.elem_type()) != type.getElementType())
      return invalid("graph output '" + o.name() + "' is declared " + onnxTypeName(declared.elem_type()) +
                     " but computed as another element type");
    if (declared.has_shape()) {
      bool mismatch = declared.shape().dim_size() != type.getRank();
      for (int d = 0; !mismatch && d < declared.shape().dim_size(); ++d)
        mismatch = declared.shape().dim(d).has_dim_value() && declared.shape().dim(d).dim_value() != type.getDimSize(d);
      if (mismatch)
        return invalid("graph output '" + o.name() + "' is declared with another shape than the computed " +
                       shape::str(type.getShape()));
    }
    results.push_back(*v);
    out.outputNames.push_back(o.name());
  }
  const size_t firstRunningStat = results.size();
  for (auto [arg, next] : runningStats)
    results.push_back(next);
  builder.create<func::ReturnOp>(FileLineColLoc::get(&ctx, path, 0, 0), results);
  func.setFunctionType(builder.getFunctionType(body->getArgumentTypes(), TypeRange(ValueRange(results))));
  for (auto [i, update] : llvm::enumerate(runningStats))
    func.setResultAttr(firstRunningStat + i, kRunningStatAttrName,
                       builder.getI64IntegerAttr(update.first.getArgNumber()));
  size_t firstParam = out.inputNames.size();
  for (auto [i, p] : llvm::enumerate(out.params)) {
    func.setArgAttr(firstParam + i, kParamAttrName, builder.getStringAttr(p.name));
    if (auto why = frozenParams.find(p.name); why != frozenParams.end())
      func.setArgAttr(firstParam + i, kFrozenAttrName, builder.getStringAttr(why->second));
  }

  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      diagnostics += "\n  " + d.str();
      return success();
    });
    if (failed(verify(module)))
      return invalid("the imported IR does not verify:" + diagnostics);
  }
  return Error::success();
}

} // namespace

std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &e : GraphImporter::importers())
    ops.push_back(e.getKey().str());
  llvm::sort(ops);
  return ops;
}

Expected<ImportedModel> importOnnxFile(MLIRContext &context, llvm::StringRef path, const ImportOptions &options) {
  context.loadDialect<TecDialect, func::FuncDialect>();
  // Only a regular file: a FIFO or a device would block or never end.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) && !llvm::sys::fs::is_regular_file(status))
    return makeError(ImportErrorKind::Invalid, path + ": not a regular file");
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!file)
    return makeError(ImportErrorKind::Invalid, path + ": cannot read: " + file.getError().message());
  auto storage = std::make_shared<Storage>();
  llvm::StringRef bytes = (*file)->getBuffer();
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return makeError(ImportErrorKind::Unsupported,
                     path + ": larger than 2 GiB; store the weights as external data (onnx.save(..., save_as_external_data=True))");
  if (!storage->model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return makeError(ImportErrorKind::Invalid,
                     path + ": not a valid ONNX model (the protobuf does not parse; is the file truncated?)");
  if (!storage->model.has_graph() || storage->model.ir_version() <= 0)
    return makeError(ImportErrorKind::Invalid, path + ": not an ONNX model (no graph or IR version)");
  ImportedModel result;
  result.producer = storage->model.producer_name();
  GraphImporter importer(context, path, *storage, options, result);
  if (auto err = importer.run())
    return std::move(err);
  onnx::ModelProto skeleton = storage->model;
  llvm::StringSet<> paramNames;
  for (const auto &p : result.params)
    paramNames.insert(p.name);
  for (auto &init : *skeleton.mutable_graph()->mutable_initializer())
    if (paramNames.contains(init.name()) || result.transposedCopies.count(init.name())) {
      init.clear_raw_data();
      init.clear_float_data();
      init.clear_external_data();
      init.clear_data_location();
    }
  skeleton.mutable_graph()->clear_value_info(); // shape inference's additions
  result.onnxWithoutParams = skeleton.SerializeAsString();
  result.storage = std::move(storage);
  return std::move(result);
}

} // namespace tec
