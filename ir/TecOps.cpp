#include "ir/TecOps.h"
#include "ir/TecFolding.h"
#include "support/Sharding.h"
#include "support/Window.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

#include <limits>
#include <sstream>

using namespace mlir;
using namespace tec;

//===----------------------------------------------------------------------===//
// Shape rules
//===----------------------------------------------------------------------===//

std::optional<shape::Dims> shape::broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<shape::Dims> shape::matmul(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (a.empty() || b.empty())
    return std::nullopt;
  Dims lhs(a), rhs(b);
  if (lhs.size() == 1)
    lhs.insert(lhs.begin(), 1);
  if (rhs.size() == 1)
    rhs.push_back(1);
  if (lhs.back() != rhs[rhs.size() - 2])
    return std::nullopt;
  auto batch = broadcast(ArrayRef(lhs).drop_back(2), ArrayRef(rhs).drop_back(2));
  if (!batch)
    return std::nullopt;
  Dims out = *batch;
  if (a.size() > 1)
    out.push_back(lhs[lhs.size() - 2]);
  if (b.size() > 1)
    out.push_back(rhs.back());
  return out;
}

shape::Dims shape::reduce(ArrayRef<int64_t> in, ArrayRef<int64_t> axes, bool keepdims) {
  Dims out;
  for (auto [i, d] : llvm::enumerate(in)) {
    bool reduced = llvm::is_contained(axes, static_cast<int64_t>(i));
    if (!reduced)
      out.push_back(d);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

shape::Dims shape::blockScales(ArrayRef<int64_t> dims, ArrayRef<int64_t> block) {
  int64_t rows = 1, cols = dims.empty() ? 1 : dims.back();
  for (int64_t d : dims.drop_back())
    rows *= d;
  return {(rows + block[0] - 1) / block[0], (cols + block[1] - 1) / block[1]};
}

int64_t shape::sliceLength(int64_t start, int64_t end, int64_t step) {
  // (distance - 1) / |step| + 1 in unsigned arithmetic: the usual (distance + |step| - 1) / |step| overflows for
  // a step near INT64_MAX, and -step for INT64_MIN.
  const int64_t distance = step > 0 ? end - start : start - end;
  if (distance <= 0)
    return 0;
  const uint64_t magnitude = step > 0 ? uint64_t(step) : 0 - uint64_t(step);
  return int64_t(uint64_t(distance - 1) / magnitude + 1);
}

std::optional<int64_t> shape::elementCount(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxDim || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  }
  return n;
}

std::string shape::str(ArrayRef<int64_t> dims) {
  if (dims.empty())
    return "scalar";
  std::string s;
  for (auto [i, d] : llvm::enumerate(dims))
    s += (i ? "x" : "") + std::to_string(d);
  return s;
}

std::vector<std::string> tec::sourceNodes(Location loc) {
  std::vector<std::string> names;
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    names.push_back(name.getName().str());
  else if (auto fused = llvm::dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations())
      for (auto &n : sourceNodes(l))
        names.push_back(n);
  return names;
}

bool tec::isKnownEpilogue(StringRef epilogue) {
  return llvm::is_contained({"none", "relu", "gelu", "gelu_tanh"}, epilogue);
}

//===----------------------------------------------------------------------===//
// Verifier helpers shared by op classes
//===----------------------------------------------------------------------===//

static RankedTensorType rankedType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// All operands share the result's element type and broadcast to the result's shape.
static LogicalResult verifyBroadcastResult(Operation *op, ValueRange operands) {
  auto result = rankedType(op->getResult(0));
  shape::Dims dims;
  std::string shapes;
  for (auto [i, v] : llvm::enumerate(operands)) {
    auto type = rankedType(v);
    shapes += (i ? " and " : "") + shape::str(type.getShape());
    auto next = shape::broadcast(dims, type.getShape());
    if (!next)
      return op->emitOpError("operand shapes do not broadcast: ") << shapes;
    dims = *next;
  }
  if (ArrayRef<int64_t>(dims) != result.getShape())
    return op->emitOpError("expected result shape ")
           << shape::str(dims) << " (broadcast of " << shapes << "), got " << shape::str(result.getShape());
  return success();
}

static LogicalResult verifyBinaryElementTypes(Operation *op) {
  Type expected = rankedType(op->getResult(0)).getElementType();
  for (Value v : op->getOperands())
    if (rankedType(v).getElementType() != expected)
      return op->emitOpError("expected operand element type ")
             << expected << " (the result's), got " << rankedType(v).getElementType();
  return success();
}

static LogicalResult verifyElementwiseBinary(Operation *op) {
  if (failed(verifyBinaryElementTypes(op)))
    return failure();
  return verifyBroadcastResult(op, op->getOperands());
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError("expected axis in [0, ") << rank << "), got " << axis;
  return success();
}

static LogicalResult verifyReduction(Operation *op, RankedTensorType input, ArrayRef<int64_t> axes,
                                     bool keepdims, RankedTensorType result) {
  for (auto [i, a] : llvm::enumerate(axes)) {
    if (a < 0 || a >= input.getRank())
      return op->emitOpError("expected axes in [0, ") << input.getRank() << "), got " << a;
    if (i > 0 && axes[i - 1] >= a)
      return op->emitOpError("expected sorted unique axes");
  }
  // A 16-bit float input may be reduced into f32 (a loss, a bias gradient: the kernel sums in f32 anyway).
  const bool widens = result.getElementType().isF32() && llvm::isa<FloatType>(input.getElementType()) &&
                      input.getElementType().getIntOrFloatBitWidth() == 16;
  if (input.getElementType() != result.getElementType() && !widens)
    return op->emitOpError("expected result element type ") << input.getElementType() << ", got "
                                                          << result.getElementType();
  auto expected = shape::reduce(input.getShape(), axes, keepdims);
  if (ArrayRef<int64_t>(expected) != result.getShape())
    return op->emitOpError("expected result shape ")
           << shape::str(expected) << ", got " << shape::str(result.getShape());
  return success();
}

static LogicalResult verifySameElementType(Operation *op, Value a, StringRef what) {
  Type expected = rankedType(op->getResult(0)).getElementType();
  if (rankedType(a).getElementType() != expected)
    return op->emitOpError("expected ") << what << " element type " << expected << ", got "
                                        << rankedType(a).getElementType();
  return success();
}

static LogicalResult verifyEpilogue(Operation *op, StringRef epilogue) {
  if (!isKnownEpilogue(epilogue))
    return op->emitOpError("expected epilogue none, relu, gelu or gelu_tanh, got '") << epilogue << "'";
  return success();
}

/// Shared by tec.linear and tec.fp8_gemm: input [..., K] x weight (KxN, or NxK with transpose_b)
/// + bias [N] -> result [..., N].
static LogicalResult verifyLinearShapes(Operation *op, Value input, Value weight, Value bias,
                                        bool transposeB) {
  auto in = rankedType(input), w = rankedType(weight), out = rankedType(op->getResult(0));
  if (in.getRank() < 1)
    return op->emitOpError("expected input of rank >= 1, got rank 0");
  if (w.getRank() != 2)
    return op->emitOpError("expected 2-D weight, got rank ") << w.getRank();
  int64_t k = transposeB ? w.getDimSize(1) : w.getDimSize(0);
  int64_t n = transposeB ? w.getDimSize(0) : w.getDimSize(1);
  if (in.getShape().back() != k)
    return op->emitOpError("expected input inner dim ")
           << k << " to match weight " << shape::str(w.getShape()) << (transposeB ? " (transposed)" : "")
           << ", got " << in.getShape().back();
  shape::Dims expected(in.getShape().drop_back());
  expected.push_back(n);
  if (ArrayRef<int64_t>(expected) != out.getShape())
    return op->emitOpError("expected result shape ")
           << shape::str(expected) << ", got " << shape::str(out.getShape());
  if (bias) {
    auto b = rankedType(bias);
    if (b.getShape() != ArrayRef<int64_t>{n})
      return op->emitOpError("expected bias shape ") << n << ", got " << shape::str(b.getShape());
  }
  return success();
}

/// 240 rather than 2.400000e+02 in messages.
static std::string shortFloat(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

static bool isFp8(Type t) { return llvm::isa<Float8E4M3FNType, Float8E5M2Type>(t); }

//===----------------------------------------------------------------------===//
// Op verifiers and folders
//===----------------------------------------------------------------------===//

#include "ir/TecInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "ir/TecOps.cpp.inc"

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("expected approximate 'none' or 'tanh', got '") << getApproximate() << "'";
  return success();
}

LogicalResult OneHotOp::verify() {
  auto labels = getLabels().getType(), result = getType();
  shape::Dims expected(labels.getShape());
  expected.push_back(result.getShape().empty() ? 0 : result.getShape().back());
  if (result.getRank() != labels.getRank() + 1 || ArrayRef<int64_t>(expected) != result.getShape())
    return emitOpError("expected result shape ") << shape::str(labels.getShape()) << "xDEPTH, got "
                                                 << shape::str(result.getShape());
  return success();
}

LogicalResult OptimizerUpdateOp::verify() {
  size_t expected;
  if (getOptimizer() == "adamw")
    expected = 2;
  else if (getOptimizer() == "sgd")
    expected = getMomentum().convertToFloat() != 0.0f ? 1 : 0;
  else
    return emitOpError("expected optimizer sgd or adamw, got '") << getOptimizer() << "'";
  if (getMoments().size() != expected)
    return emitOpError("expected ") << expected << " moments for " << getOptimizer() << ", got "
                                    << getMoments().size();
  if (getNewMoments().size() != expected)
    return emitOpError("expected ") << expected << " new moments, got " << getNewMoments().size();
  Type type = getParam().getType();
  if (getGrad().getType() != type || getNewParam().getType() != type)
    return emitOpError("expected the gradient and the new param of the param's type ") << type;
  for (TypeRange types : {TypeRange(getMoments()), TypeRange(getNewMoments())})
    for (Type t : types)
      if (t != type)
        return emitOpError("expected every moment of the param's type ") << type << ", got " << t;
  return success();
}

LogicalResult AllReduceOp::verify() {
  StringRef reduction = getReduction();
  if (reduction != "sum" && reduction != "max" && reduction != "mean")
    return emitOpError("expected reduction sum, max or mean, got '") << reduction << "'";
  if (getInputs().size() != getResults().size())
    return emitOpError("expected one result per input, got ") << getResults().size() << " for "
                                                              << getInputs().size();
  for (auto [i, types] : llvm::enumerate(llvm::zip(getInputs().getTypes(), getResults().getTypes())))
    if (std::get<0>(types) != std::get<1>(types))
      return emitOpError("expected result ") << i << " of its input's type " << std::get<0>(types) << ", got "
                                             << std::get<1>(types);
  return success();
}

/// Checks that each `shards[i]` is a 1-D shard of `wholes[i]` over `ranks` ranks (ops/Training.td).
static LogicalResult verifySharding(Operation *op, int64_t ranks, TypeRange wholes, TypeRange shards) {
  if (ranks < 1)
    return op->emitOpError("expected ranks >= 1, got ") << ranks;
  if (wholes.size() != shards.size())
    return op->emitOpError("expected one result per input, got ") << op->getNumResults() << " for "
                                                                  << op->getNumOperands();
  for (auto [i, types] : llvm::enumerate(llvm::zip(wholes, shards))) {
    auto whole = llvm::cast<RankedTensorType>(std::get<0>(types));
    auto shard = llvm::cast<RankedTensorType>(std::get<1>(types));
    const int64_t expected = shardElements(whole.getNumElements(), ranks);
    if (shard.getRank() != 1 || shard.getDimSize(0) != expected)
      return op->emitOpError("expected tensor ") << i << "'s shard over " << ranks << " ranks of " << whole
                                                 << " to be tensor<" << expected << "xf32>, got " << shard;
  }
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  return verifySharding(*this, getRanks(), getInputs().getTypes(), getResults().getTypes());
}

LogicalResult AllGatherOp::verify() {
  return verifySharding(*this, getRanks(), getResults().getTypes(), getInputs().getTypes());
}

LogicalResult ShardOp::verify() {
  return verifySharding(*this, getRanks(), TypeRange{getInput().getType()}, TypeRange{getResult().getType()});
}

LogicalResult LrScheduleOp::verify() {
  StringRef schedule = getSchedule();
  if (schedule != "constant" && schedule != "warmup" && schedule != "cosine")
    return emitOpError("expected schedule constant, warmup or cosine, got '") << schedule << "'";
  if (getWarmupSteps() < 0)
    return emitOpError("expected non-negative warmup_steps, got ") << getWarmupSteps();
  if (schedule == "cosine" && getTotalSteps() <= getWarmupSteps())
    return emitOpError("expected total_steps > warmup_steps for cosine, got ")
           << getTotalSteps() << " <= " << getWarmupSteps();
  return success();
}

LogicalResult GeluGradOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("expected approximate 'none' or 'tanh', got '") << getApproximate() << "'";
  return success();
}

LogicalResult ModOp::verify() {
  if (failed(verifyElementwiseBinary(*this)))
    return failure();
  if (!getFmod() && !getType().getElementType().isInteger())
    return emitOpError("expected fmod = true for a float remainder, got fmod = false on ") << getType().getElementType();
  return success();
}

LogicalResult CompareOp::verify() {
  static const llvm::StringSet<> numeric = {"eq", "ne", "lt", "le", "gt", "ge"}, logical = {"and", "or", "xor"};
  StringRef p = getPredicate();
  Type lhs = getLhs().getType().getElementType(), rhs = getRhs().getType().getElementType();
  if (!numeric.contains(p) && !logical.contains(p))
    return emitOpError("expected predicate eq, ne, lt, le, gt, ge, and, or or xor, got '") << p << "'";
  if (lhs != rhs)
    return emitOpError("expected operands of one element type, got ") << lhs << " and " << rhs;
  if (logical.contains(p) && !lhs.isInteger(1))
    return emitOpError("expected bool operands for '") << p << "', got " << lhs;
  if (llvm::isa<Float8E4M3FNType, Float8E5M2Type>(lhs))
    return emitOpError("expected f32, f16, bf16, i32, i64 or i1 operands, got ") << lhs;
  return verifyBroadcastResult(*this, getOperands());
}

LogicalResult WhereOp::verify() {
  if (getX().getType().getElementType() != getY().getType().getElementType() ||
      getX().getType().getElementType() != getType().getElementType())
    return emitOpError("expected x, y and result to share an element type, got ")
           << getX().getType().getElementType() << ", " << getY().getType().getElementType() << " and "
           << getType().getElementType();
  return verifyBroadcastResult(*this, getOperands());
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

/// LayerNorm and RMSNorm: the result keeps the input's type, each statistic has the input's shape with
/// the normalized dims set to 1, scale (and bias) have the normalized shape, epsilon is positive.
static LogicalResult verifyNormalization(Operation *op, RankedTensorType in, Type result, int64_t axis,
                                         ValueRange stats, ValueRange affine, float epsilon) {
  if (failed(verifyAxis(op, axis, in.getRank())))
    return failure();
  if (in != result)
    return op->emitOpError("expected result type ") << in << ", got " << result;
  shape::Dims statsShape(in.getShape().take_front(axis));
  statsShape.resize(in.getRank(), 1);
  for (Value stat : stats)
    if (rankedType(stat).getShape() != ArrayRef<int64_t>(statsShape))
      return op->emitOpError("expected statistics shape ")
             << shape::str(statsShape) << ", got " << shape::str(rankedType(stat).getShape());
  auto normalized = in.getShape().drop_front(axis);
  for (Value v : affine) {
    if (!v)
      continue;
    if (failed(verifySameElementType(op, v, "scale/bias")))
      return failure();
    if (rankedType(v).getShape() != normalized)
      return op->emitOpError("expected scale/bias shape ")
             << shape::str(normalized) << ", got " << shape::str(rankedType(v).getShape());
  }
  if (epsilon <= 0)
    return op->emitOpError("expected positive epsilon, got ") << shortFloat(epsilon);
  return success();
}

LogicalResult LayerNormOp::verify() {
  return verifyNormalization(*this, getInput().getType(), getResult().getType(), getAxis(),
                             {getMean(), getInvStdDev()}, {getScale(), getBias()}, getEpsilon().convertToFloat());
}

LogicalResult RmsNormOp::verify() {
  return verifyNormalization(*this, getInput().getType(), getResult().getType(), getAxis(), {getInvRms()},
                             {getScale()}, getEpsilon().convertToFloat());
}

/// tec.attention's and tec.attention_grad's operands: [B, H, Tq, D] queries, [B, Hk, Tk, D] keys and
/// [B, Hk, Tk, Dv] values of one float type, H a multiple of Hk, a mask broadcasting to [B, H, Tq, Tk];
/// `output` [B, H, Tq, Dv] and `logsumexp` [B, H, Tq].
static LogicalResult verifyAttention(Operation *op, RankedTensorType q, RankedTensorType k, RankedTensorType v,
                                     Value mask, RankedTensorType output, RankedTensorType logsumexp) {
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return op->emitOpError("expected 4-D query, key and value [B, H, T, D], got ranks ")
           << q.getRank() << ", " << k.getRank() << " and " << v.getRank();
  if (k.getElementType() != q.getElementType() || v.getElementType() != q.getElementType() ||
      output.getElementType() != q.getElementType())
    return op->emitOpError("expected query, key, value and result of one element type");
  auto qs = q.getShape(), ks = k.getShape(), vs = v.getShape();
  if (ks[0] != qs[0] || vs[0] != qs[0] || vs[1] != ks[1] || ks[3] != qs[3] || vs[2] != ks[2])
    return op->emitOpError("expected key [") << qs[0] << ", Hk, Tk, " << qs[3] << "] and value [" << qs[0]
                                             << ", Hk, Tk, Dv] for query " << shape::str(qs) << ", got "
                                             << shape::str(ks) << " and " << shape::str(vs);
  if (ks[1] <= 0 || qs[1] % ks[1] != 0)
    return op->emitOpError("expected the query heads (") << qs[1] << ") to be a multiple of the key heads ("
                                                         << ks[1] << ")";
  const int64_t expected[] = {qs[0], qs[1], qs[2], vs[3]};
  if (output.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError("expected result shape ") << shape::str(expected) << ", got "
                                                      << shape::str(output.getShape());
  if (logsumexp.getShape() != ArrayRef<int64_t>(expected).drop_back())
    return op->emitOpError("expected logsumexp shape ") << shape::str(ArrayRef<int64_t>(expected).drop_back())
                                                         << ", got " << shape::str(logsumexp.getShape());
  if (!mask)
    return success();
  auto m = llvm::cast<RankedTensorType>(mask.getType());
  // FP8 attention's additive mask is a float tensor of its own type (the codes are not values).
  const bool fp8 = llvm::isa<Float8E4M3FNType, Float8E5M2Type>(q.getElementType());
  if (!m.getElementType().isInteger(1) && m.getElementType() != q.getElementType() &&
      !(fp8 && llvm::isa<FloatType>(m.getElementType())))
    return op->emitOpError("expected a boolean mask or one of the query's element type, got ") << m.getElementType();
  const int64_t scores[] = {qs[0], qs[1], qs[2], ks[2]};
  bool fits = m.getRank() == 4;
  for (int64_t d = 0; fits && d < 4; ++d)
    fits = m.getDimSize(d) == 1 || m.getDimSize(d) == scores[d];
  if (!fits)
    return op->emitOpError("expected a 4-D mask broadcasting to the scores ")
           << shape::str(scores) << ", got " << shape::str(m.getShape());
  return success();
}

LogicalResult AttentionOp::verify() {
  return verifyAttention(*this, getQuery().getType(), getKey().getType(), getValue().getType(), getMask(),
                         getResult().getType(), getLogsumexp().getType());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttention(*this, getQuery().getType(), getKey().getType(), getValue().getType(), getMask(),
                             getResult().getType(), getLogsumexp().getType())))
    return failure();
  if (getGrad().getType() != getResult().getType())
    return emitOpError("expected grad of the result's type ") << getResult().getType() << ", got " << getGrad().getType();
  if (getQueryGrad().getType() != getQuery().getType() || getKeyGrad().getType() != getKey().getType() ||
      getValueGrad().getType() != getValue().getType())
    return emitOpError("expected gradients of the query's, key's and value's types");
  return success();
}

LogicalResult AttentionFp8Op::verify() {
  return verifyAttention(*this, getQuery().getType(), getKey().getType(), getValue().getType(), getMask(),
                         getResult().getType(), getLogsumexp().getType());
}

LogicalResult AttentionFp8GradOp::verify() {
  if (failed(verifyAttention(*this, getQuery().getType(), getKey().getType(), getValue().getType(), getMask(),
                             getResult().getType(), getLogsumexp().getType())))
    return failure();
  if (getGrad().getType().getShape() != getResult().getType().getShape())
    return emitOpError("expected grad of the result's shape ") << shape::str(getResult().getType().getShape())
                                                               << ", got " << shape::str(getGrad().getType().getShape());
  auto format = getQueryGrad().getType().getElementType();
  if (getQueryGrad().getType().getShape() != getQuery().getType().getShape() ||
      getKeyGrad().getType().getShape() != getKey().getType().getShape() ||
      getValueGrad().getType().getShape() != getValue().getType().getShape() ||
      getKeyGrad().getType().getElementType() != format || getValueGrad().getType().getElementType() != format)
    return emitOpError("expected gradients of the query's, key's and value's shapes, in one FP8 format");
  return success();
}

LogicalResult MatMulOp::verify() {
  if (failed(verifyBinaryElementTypes(*this)))
    return failure();
  auto a = getLhs().getType().getShape(), b = getRhs().getType().getShape();
  auto expected = shape::matmul(a, b);
  if (!expected)
    return emitOpError("incompatible matmul operands ") << shape::str(a) << " and " << shape::str(b);
  if (ArrayRef<int64_t>(*expected) != getType().getShape())
    return emitOpError("expected result shape ")
           << shape::str(*expected) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult GemmOp::verify() {
  if (failed(verifyBinaryElementTypes(*this)))
    return failure();
  auto a = getA().getType(), b = getB().getType();
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOpError("expected 2-D A and B, got ") << shape::str(a.getShape()) << " and "
                                                    << shape::str(b.getShape());
  int64_t m = a.getDimSize(getTransA() ? 1 : 0), ka = a.getDimSize(getTransA() ? 0 : 1);
  int64_t kb = b.getDimSize(getTransB() ? 1 : 0), n = b.getDimSize(getTransB() ? 0 : 1);
  if (ka != kb)
    return emitOpError("expected matching inner dims, got ") << ka << " and " << kb;
  if (getType().getShape() != ArrayRef<int64_t>{m, n})
    return emitOpError("expected result shape ") << m << "x" << n << ", got "
                                                 << shape::str(getType().getShape());
  if (getC()) {
    auto c = getC().getType().getShape();
    auto b2 = shape::broadcast(c, {m, n});
    if (c.size() > 2 || !b2 || ArrayRef<int64_t>(*b2) != ArrayRef<int64_t>{m, n})
      return emitOpError("expected C to broadcast to ") << m << "x" << n << ", got " << shape::str(c);
  }
  return success();
}

LogicalResult LinearOp::verify() {
  // 16-bit operands may give an f32 result without a bias (a weight gradient for the optimizer).
  auto element = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getElementType(); };
  const bool widens = !getBias() && getType().getElementType().isF32() && element(getInput()) == element(getWeight()) &&
                      llvm::isa<FloatType>(element(getInput())) && element(getInput()).getIntOrFloatBitWidth() == 16;
  if ((!widens && failed(verifyBinaryElementTypes(*this))) || failed(verifyEpilogue(*this, getEpilogue())))
    return failure();
  return verifyLinearShapes(*this, getInput(), getWeight(), getBias(), getTransposeB());
}

LogicalResult TransposeOp::verify() {
  auto in = getInput().getType();
  ArrayRef<int64_t> perm = getPerm();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOpError("expected perm of length ") << in.getRank() << ", got " << perm.size();
  llvm::SmallVector<bool> seen(perm.size());
  shape::Dims expected;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOpError("expected a permutation of [0, ") << in.getRank() << "), got "
                                                           << "[" << shape::str(perm) << "]";
    seen[p] = true;
    expected.push_back(in.getDimSize(p));
  }
  if (failed(verifySameElementType(*this, getInput(), "input")))
    return failure();
  if (ArrayRef<int64_t>(expected) != getType().getShape())
    return emitOpError("expected result shape ")
           << shape::str(expected) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult ReshapeOp::verify() {
  if (failed(verifySameElementType(*this, getInput(), "input")))
    return failure();
  auto in = getInput().getType().getNumElements(), out = getType().getNumElements();
  if (in != out)
    return emitOpError("expected result with ") << in << " elements, got " << out;
  return success();
}

LogicalResult ExpandOp::verify() {
  if (failed(verifySameElementType(*this, getInput(), "input")))
    return failure();
  auto in = getInput().getType().getShape(), out = getType().getShape();
  auto b = shape::broadcast(in, out);
  if (!b || ArrayRef<int64_t>(*b) != out)
    return emitOpError("expected input ") << shape::str(in) << " to broadcast to " << shape::str(out);
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("expected at least one input");
  auto out = getType();
  if (failed(verifyAxis(*this, getAxis(), out.getRank())))
    return failure();
  int64_t total = 0;
  for (Value v : getInputs()) {
    auto t = rankedType(v);
    if (failed(verifySameElementType(*this, v, "input")))
      return failure();
    if (t.getRank() != out.getRank())
      return emitOpError("expected inputs of rank ") << out.getRank() << ", got " << t.getRank();
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != getAxis() && t.getDimSize(d) != out.getDimSize(d))
        return emitOpError("expected dim ") << d << " of every input to be " << out.getDimSize(d)
                                            << ", got " << t.getDimSize(d);
    total += t.getDimSize(getAxis());
  }
  if (total != out.getDimSize(getAxis()))
    return emitOpError("expected result dim ") << getAxis() << " to be " << total << ", got "
                                               << out.getDimSize(getAxis());
  return success();
}

LogicalResult SplitOp::verify() {
  auto in = getInput().getType();
  if (failed(verifyAxis(*this, getAxis(), in.getRank())))
    return failure();
  if (getOutputs().empty())
    return emitOpError("expected at least one result");
  int64_t total = 0;
  for (Value v : getOutputs()) {
    auto t = rankedType(v);
    if (t.getElementType() != in.getElementType() || t.getRank() != in.getRank())
      return emitOpError("expected results of element type ")
             << in.getElementType() << " and rank " << in.getRank() << ", got " << t;
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != getAxis() && t.getDimSize(d) != in.getDimSize(d))
        return emitOpError("expected result dim ") << d << " to be " << in.getDimSize(d) << ", got "
                                                   << t.getDimSize(d);
    total += t.getDimSize(getAxis());
  }
  if (total != in.getDimSize(getAxis()))
    return emitOpError("expected result sizes along axis ")
           << getAxis() << " to add up to " << in.getDimSize(getAxis()) << ", got " << total;
  return success();
}

LogicalResult SliceOp::verify() {
  auto in = getInput().getType();
  if (failed(verifySameElementType(*this, getInput(), "input")))
    return failure();
  ArrayRef<int64_t> starts = getStarts(), ends = getEnds(), steps = getSteps();
  if (static_cast<int64_t>(starts.size()) != in.getRank() || ends.size() != starts.size() ||
      steps.size() != starts.size())
    return emitOpError("expected starts, ends and steps of length ") << in.getRank();
  shape::Dims expected;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (steps[d] == 0)
      return emitOpError("expected nonzero step in dim ") << d;
    int64_t lo = steps[d] > 0 ? 0 : -1, hi = steps[d] > 0 ? in.getDimSize(d) : in.getDimSize(d) - 1;
    if (starts[d] < lo || starts[d] > hi || ends[d] < lo || ends[d] > hi + (steps[d] > 0 ? 0 : 1))
      return emitOpError("expected start and end of dim ") << d << " within its size "
                                                            << in.getDimSize(d);
    expected.push_back(shape::sliceLength(starts[d], ends[d], steps[d]));
  }
  if (ArrayRef<int64_t>(expected) != getType().getShape())
    return emitOpError("expected result shape ")
           << shape::str(expected) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult GatherOp::verify() {
  auto data = getData().getType();
  if (failed(verifyAxis(*this, getAxis(), data.getRank())) ||
      failed(verifySameElementType(*this, getData(), "data")))
    return failure();
  shape::Dims expected(data.getShape().take_front(getAxis()));
  llvm::append_range(expected, getIndices().getType().getShape());
  llvm::append_range(expected, data.getShape().drop_front(getAxis() + 1));
  if (ArrayRef<int64_t>(expected) != getType().getShape())
    return emitOpError("expected result shape ")
           << shape::str(expected) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult ArgReduceOp::verify() {
  if (getKind() != "max" && getKind() != "min")
    return emitOpError("expected kind max or min, got '") << getKind() << "'";
  auto in = getInput().getType();
  if (failed(verifyAxis(*this, getAxis(), in.getRank())))
    return failure();
  auto expected = shape::reduce(in.getShape(), {static_cast<int64_t>(getAxis())}, getKeepdims());
  if (ArrayRef<int64_t>(expected) != getType().getShape())
    return emitOpError("expected result shape ") << shape::str(expected) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult CumSumOp::verify() { return verifyAxis(*this, getAxis(), getInput().getType().getRank()); }

LogicalResult GatherElementsOp::verify() {
  auto data = getData().getType(), indices = getIndices().getType();
  if (failed(verifyAxis(*this, getAxis(), data.getRank())) ||
      failed(verifySameElementType(*this, getData(), "data")))
    return failure();
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (indices.getRank() != data.getRank() || (d != getAxis() && indices.getDimSize(d) != data.getDimSize(d)))
      return emitOpError("expected indices of the data's shape off axis ")
             << getAxis() << " (" << shape::str(data.getShape()) << "), got " << shape::str(indices.getShape());
  if (getType().getShape() != indices.getShape())
    return emitOpError("expected result shape ")
           << shape::str(indices.getShape()) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult ScatterAddOp::verify() {
  auto result = getType(), indices = getIndices().getType();
  if (failed(verifyAxis(*this, getAxis(), result.getRank())) ||
      failed(verifySameElementType(*this, getUpdates(), "updates")))
    return failure();
  shape::Dims expected(indices.getShape());
  if (!getElements()) {
    expected.assign(result.getShape().begin(), result.getShape().begin() + getAxis());
    llvm::append_range(expected, indices.getShape());
    llvm::append_range(expected, result.getShape().drop_front(getAxis() + 1));
  } else {
    for (int64_t d = 0; d < result.getRank(); ++d)
      if (indices.getRank() != result.getRank() || (d != getAxis() && indices.getDimSize(d) != result.getDimSize(d)))
        return emitOpError("expected indices of the result's shape off axis ")
               << getAxis() << " (" << shape::str(result.getShape()) << "), got " << shape::str(indices.getShape());
  }
  if (ArrayRef<int64_t>(expected) != getUpdates().getType().getShape())
    return emitOpError("expected updates of shape ")
           << shape::str(expected) << ", got " << shape::str(getUpdates().getType().getShape());
  return success();
}

/// A window op's input [N, C, H, W] and attributes against its output [N, outChannels, OH, OW]; pools
/// may round the output up (ceil_mode).
static LogicalResult verifyWindow(Operation *op, RankedTensorType input, int64_t outChannels, ArrayRef<int64_t> kernel,
                                  ArrayRef<int64_t> strides, ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations,
                                  RankedTensorType output, bool allowCeil) {
  if (input.getRank() != 4)
    return op->emitOpError("expected a 4-D NCHW input, got rank ") << input.getRank();
  if (kernel.size() != 2 || strides.size() != 2 || pads.size() != 4 || dilations.size() != 2)
    return op->emitOpError("expected 2 kernel dims, 2 strides, 4 pads and 2 dilations, got ")
           << kernel.size() << ", " << strides.size() << ", " << pads.size() << " and " << dilations.size();
  if (llvm::any_of(kernel, [](int64_t v) { return v < 1; }) || llvm::any_of(strides, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(dilations, [](int64_t v) { return v < 1; }) || llvm::any_of(pads, [](int64_t v) { return v < 0; }))
    return op->emitOpError("expected positive kernel dims, strides and dilations and non-negative pads");
  auto shapeFor = [&](bool ceil) {
    return shape::Dims{input.getDimSize(0), outChannels,
                       kernels::windowOutput(input.getDimSize(2), kernel[0], strides[0], pads[0], pads[2], dilations[0], ceil),
                       kernels::windowOutput(input.getDimSize(3), kernel[1], strides[1], pads[1], pads[3], dilations[1], ceil)};
  };
  auto floor = shapeFor(false), ceil = shapeFor(true);
  if (output.getShape() != ArrayRef<int64_t>(floor) && !(allowCeil && output.getShape() == ArrayRef<int64_t>(ceil)))
    return op->emitOpError("expected output shape ") << shape::str(floor) << ", got " << shape::str(output.getShape());
  return success();
}

/// tec.conv's weight [M, C / group, kH, kW] against the input's channels.
static LogicalResult verifyConvWeight(Operation *op, RankedTensorType input, RankedTensorType weight, int64_t group) {
  if (weight.getRank() != 4 || input.getRank() != 4)
    return op->emitOpError("expected 4-D input and weight, got ranks ") << input.getRank() << " and " << weight.getRank();
  if (group < 1 || input.getDimSize(1) % group || weight.getDimSize(0) % group ||
      weight.getDimSize(1) * group != input.getDimSize(1))
    return op->emitOpError("expected weight dim 1 = input channels / group (")
           << input.getDimSize(1) << " / " << group << ") and output channels divisible by the group, got weight "
           << shape::str(weight.getShape());
  return success();
}

/// A channels-last [N, H, W, C] type seen as the NCHW one the window checks read.
static RankedTensorType asNchw(RankedTensorType t) {
  if (t.getRank() != 4)
    return t;
  return RankedTensorType::get({t.getDimSize(0), t.getDimSize(3), t.getDimSize(1), t.getDimSize(2)}, t.getElementType());
}

LogicalResult ConvOp::verify() {
  auto in = getInput().getType(), w = getWeight().getType(), out = getType();
  if (getChannelsLast())
    in = asNchw(in), out = asNchw(out);
  if (failed(verifyConvWeight(*this, in, w, getGroup())))
    return failure();
  if (getBias() && getBias().getType().getShape() != ArrayRef<int64_t>{w.getDimSize(0)})
    return emitOpError("expected bias [") << w.getDimSize(0) << "], got " << shape::str(getBias().getType().getShape());
  return verifyWindow(*this, in, w.getDimSize(0), w.getShape().drop_front(2), getStrides(), getPads(), getDilations(),
                      out, false);
}

LogicalResult ConvInputGradOp::verify() {
  auto in = getType(), w = getWeight().getType();
  if (failed(verifyConvWeight(*this, in, w, getGroup())))
    return failure();
  return verifyWindow(*this, in, w.getDimSize(0), w.getShape().drop_front(2), getStrides(), getPads(), getDilations(),
                      getDy().getType(), false);
}

LogicalResult ConvWeightGradOp::verify() {
  auto in = getInput().getType(), w = getType();
  if (failed(verifyConvWeight(*this, in, w, getGroup())))
    return failure();
  if (getKernel() != w.getShape().drop_front(2))
    return emitOpError("expected kernel ") << shape::str(w.getShape().drop_front(2)) << ", got " << shape::str(getKernel());
  return verifyWindow(*this, in, w.getDimSize(0), getKernel(), getStrides(), getPads(), getDilations(),
                      getDy().getType(), false);
}

LogicalResult PoolOp::verify() {
  if (getKind() != "max" && getKind() != "avg")
    return emitOpError("expected kind max or avg, got '") << getKind() << "'";
  auto in = getInput().getType(), out = getType();
  if (getChannelsLast())
    in = asNchw(in), out = asNchw(out);
  return verifyWindow(*this, in, in.getRank() == 4 ? in.getDimSize(1) : 0, getKernel(), getStrides(), getPads(),
                      getDilations(), out, true);
}

LogicalResult PoolGradOp::verify() {
  if (getKind() != "max" && getKind() != "avg")
    return emitOpError("expected kind max or avg, got '") << getKind() << "'";
  auto in = getInput().getType();
  if (getType() != in)
    return emitOpError("expected the input's type, got ") << getType();
  return verifyWindow(*this, in, in.getRank() == 4 ? in.getDimSize(1) : 0, getKernel(), getStrides(), getPads(),
                      getDilations(), getDy().getType(), true);
}

LogicalResult QuantizeOp::verify() {
  Type out = getType().getElementType();
  if (!isFp8(out))
    return emitOpError("expected f8E4M3FN or f8E5M2 result, got ") << out;
  shape::Dims expected(getInput().getType().getShape());
  if (getTransposeInput() && expected.size() != 2)
    return emitOpError("expected a 2-D input to read transposed, got rank ") << expected.size();
  if (getTransposeInput())
    std::swap(expected[0], expected[1]);
  if (ArrayRef<int64_t>(expected) != getType().getShape())
    return emitOpError("expected result shape ") << shape::str(expected) << ", got " << shape::str(getType().getShape());
  return success();
}

LogicalResult CastFp8Op::verify() {
  if (getActivation() != "none" && getActivation() != "gelu" && getActivation() != "gelu_tanh")
    return emitOpError("expected activation none, gelu or gelu_tanh, got '") << getActivation() << "'";
  if (getInput().getType().getShape() != getResult().getType().getShape())
    return emitOpError("expected result shape ") << shape::str(getInput().getType().getShape()) << ", got "
                                                 << shape::str(getResult().getType().getShape());
  return success();
}

LogicalResult CastFp8BiasGradOp::verify() {
  auto in = getInput().getType();
  if (in.getRank() < 2 || in.getShape() != getResult().getType().getShape())
    return emitOpError("expected a result of the input's shape (rank 2 or more), got ") << getResult().getType();
  if (getBiasGrad().getType().getShape() != in.getShape().take_back())
    return emitOpError("expected bias_grad shape ") << in.getDimSize(in.getRank() - 1) << ", got "
                                                    << shape::str(getBiasGrad().getType().getShape());
  return success();
}

LogicalResult LayerNormFp8Op::verify() {
  if (getInput().getType().getShape() != getResult().getType().getShape())
    return emitOpError("expected result shape ") << shape::str(getInput().getType().getShape()) << ", got "
                                                 << shape::str(getResult().getType().getShape());
  auto in = getInput().getType();
  if (failed(verifyNormalization(*this, in, in, getAxis(), {getMean(), getInvStdDev()}, {}, getEpsilon().convertToFloat())))
    return failure();
  for (Value v : {getWeight(), getBias()})
    if (v && (rankedType(v).getElementType() != in.getElementType() ||
              rankedType(v).getShape() != in.getShape().drop_front(getAxis())))
      return emitOpError("expected weight and bias of the input's element type and normalized shape ")
             << shape::str(in.getShape().drop_front(getAxis())) << ", got " << rankedType(v);
  return success();
}

LogicalResult DequantizeOp::verify() {
  Type in = getInput().getType().getElementType(), out = getType().getElementType();
  if (!isFp8(in))
    return emitOpError("expected f8E4M3FN or f8E5M2 input, got ") << in;
  if (!llvm::isa<Float32Type, Float16Type, BFloat16Type>(out))
    return emitOpError("expected f32, f16 or bf16 result, got ") << out;
  if (getInput().getType().getShape() != getType().getShape())
    return emitOpError("expected result shape ") << shape::str(getInput().getType().getShape())
                                                 << ", got " << shape::str(getType().getShape());
  return success();
}

/// Shared by tec.fp8_gemm and tec.fp8_block_gemm: the epilogue, the operands' formats, bias and shapes.
static LogicalResult verifyFp8Gemm(Operation *op, StringRef epilogue, Value input, Value weight, Value bias,
                                   bool transposeB) {
  if (failed(verifyEpilogue(op, epilogue)))
    return failure();
  if (llvm::isa<Float8E5M2Type>(rankedType(input).getElementType()) &&
      llvm::isa<Float8E5M2Type>(rankedType(weight).getElementType()))
    return op->emitOpError("expected at most one f8E5M2 operand, got two (cuBLASLt has no E5M2 x E5M2 GEMM)");
  if (bias && failed(verifySameElementType(op, bias, "bias")))
    return failure();
  return verifyLinearShapes(op, input, weight, bias, transposeB);
}

LogicalResult Fp8GemmOp::verify() {
  return verifyFp8Gemm(*this, getEpilogue(), getInput(), getWeight(), getBias(), getTransposeB());
}

LogicalResult CurrentScalingOp::verify() {
  float fp8Max = getFp8Max().convertToFloat();
  if (fp8Max != 448.0f && fp8Max != 57344.0f)
    return emitOpError("expected fp8_max 448 (E4M3) or 57344 (E5M2), got ") << shortFloat(fp8Max);
  if (!(getAmaxEpsilon().convertToFloat() >= 0.0f))
    return emitOpError("expected non-negative amax_epsilon, got ") << shortFloat(getAmaxEpsilon().convertToFloat());
  return success();
}

/// A block shape: two positive extents.
static LogicalResult verifyBlock(Operation *op, ArrayRef<int64_t> block, StringRef what) {
  if (block.size() != 2 || block[0] < 1 || block[1] < 1)
    return op->emitOpError("expected ") << what << " of two positive extents, got [" << shape::str(block) << "]";
  return success();
}

/// A block-scaled operand's scale_inv has one value per block of it.
static LogicalResult verifyBlockScales(Operation *op, Value tensor, Value scaleInv, ArrayRef<int64_t> block,
                                       StringRef what) {
  shape::Dims expected = shape::blockScales(rankedType(tensor).getShape(), block);
  if (ArrayRef<int64_t>(expected) != rankedType(scaleInv).getShape())
    return op->emitOpError("expected ") << what << " shape " << shape::str(expected) << " (blocks of "
                                        << shape::str(block) << "), got " << shape::str(rankedType(scaleInv).getShape());
  return success();
}

LogicalResult QuantizeBlocksOp::verify() {
  if (failed(verifyBlock(*this, getBlock(), "block")))
    return failure();
  if (getScaleType() != "f32" && getScaleType() != "pow2" && getScaleType() != "e8m0")
    return emitOpError("expected scale_type f32, pow2 or e8m0, got '") << getScaleType() << "'";
  if (!(getAmaxEpsilon().convertToFloat() >= 0.0f))
    return emitOpError("expected non-negative amax_epsilon, got ") << shortFloat(getAmaxEpsilon().convertToFloat());
  shape::Dims expected(getInput().getType().getShape());
  if (getTransposeInput() && expected.size() != 2)
    return emitOpError("expected a 2-D input to read transposed, got rank ") << expected.size();
  if (getTransposeInput())
    std::swap(expected[0], expected[1]);
  if (ArrayRef<int64_t>(expected) != getResult().getType().getShape())
    return emitOpError("expected result shape ") << shape::str(expected) << ", got "
                                                 << shape::str(getResult().getType().getShape());
  return verifyBlockScales(*this, getResult(), getScaleInv(), getBlock(), "scale_inv");
}

LogicalResult Fp8BlockGemmOp::verify() {
  if (failed(verifyFp8Gemm(*this, getEpilogue(), getInput(), getWeight(), getBias(), getTransposeB())) ||
      failed(verifyBlock(*this, getInputBlock(), "input_block")) ||
      failed(verifyBlock(*this, getWeightBlock(), "weight_block")) ||
      failed(verifyBlockScales(*this, getInput(), getInputScaleInv(), getInputBlock(), "input_scale_inv")) ||
      failed(verifyBlockScales(*this, getWeight(), getWeightScaleInv(), getWeightBlock(), "weight_scale_inv")))
    return failure();
  // Block-scaled tensor cores scale both operands' products by K-runs of one length.
  const int64_t weightAlongK = getTransposeB() ? getWeightBlock()[1] : getWeightBlock()[0];
  if (getInputBlock()[1] != weightAlongK)
    return emitOpError("expected blocks of one extent along K, got ") << getInputBlock()[1] << " (input) and "
                                                                        << weightAlongK << " (weight)";
  return success();
}

LogicalResult DelayedScalingOp::verify() {
  if (getHistory().getType().getRank() != 1 || getHistory().getType().getDimSize(0) < 1)
    return emitOpError("expected a non-empty 1-D amax history, got ") << getHistory().getType();
  if (getNewHistory().getType() != getHistory().getType())
    return emitOpError("expected new history of type ") << getHistory().getType() << ", got "
                                                        << getNewHistory().getType();
  float fp8Max = getFp8Max().convertToFloat();
  if (fp8Max != 448.0f && fp8Max != 57344.0f)
    return emitOpError("expected fp8_max 448 (E4M3) or 57344 (E5M2), got ") << shortFloat(fp8Max);
  if (getAlgo() != "max" && getAlgo() != "most_recent")
    return emitOpError("expected algo 'max' or 'most_recent', got '") << getAlgo() << "'";
  if (getMargin() < 0)
    return emitOpError("expected non-negative margin, got ") << getMargin();
  return success();
}
