// Vector-Jacobian products of the tec ops (the Differentiable interface), built from tec ops.
#include "ir/TecBuilders.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;
using namespace tec;

namespace {

RankedTensorType typeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

Value scalar(OpBuilder &b, Location loc, Type element, double value) { return scalarConstant(b, loc, element, value); }

Value zerosLike(OpBuilder &b, Location loc, RankedTensorType type) {
  return b.create<ConstantOp>(loc, type,
                              DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), 0.0)));
}

template <typename Op> Value binary(OpBuilder &b, Location loc, Value x, Value y) {
  return broadcastBinary<Op>(b, loc, x, y);
}

Value reduceSum(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> axes, bool keepdims) {
  auto t = typeOf(x);
  return b.create<ReduceSumOp>(loc, RankedTensorType::get(shape::reduce(t.getShape(), axes, keepdims),
                                                          t.getElementType()),
                               x, axes, keepdims);
}

Value reshapeTo(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> dims) {
  if (typeOf(x).getShape() == dims)
    return x;
  return b.create<ReshapeOp>(loc, RankedTensorType::get(dims, typeOf(x).getElementType()), x);
}

/// The gradient of a broadcast: sums `grad` over the dims `target` was broadcast along.
Value unbroadcast(OpBuilder &b, Location loc, Value grad, RankedTensorType target) {
  auto g = typeOf(grad);
  if (g.getShape() == target.getShape())
    return grad;
  const int64_t lead = g.getRank() - target.getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < g.getRank(); ++d)
    if (d < lead || (target.getDimSize(d - lead) == 1 && g.getDimSize(d) != 1))
      axes.push_back(d);
  Value sum = axes.empty() ? grad : reduceSum(b, loc, grad, axes, /*keepdims=*/true);
  return reshapeTo(b, loc, sum, target.getShape());
}

/// Swaps the last two dims (matrix transpose of every batch).
Value transposeLast2(OpBuilder &b, Location loc, Value x) {
  auto t = typeOf(x);
  SmallVector<int64_t> perm, dims;
  for (int64_t d = 0; d < t.getRank(); ++d)
    perm.push_back(d);
  std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
  for (int64_t p : perm)
    dims.push_back(t.getDimSize(p));
  return b.create<TransposeOp>(loc, RankedTensorType::get(dims, t.getElementType()), x, perm);
}

Value matmul(OpBuilder &b, Location loc, Value x, Value y) {
  auto dims = shape::matmul(typeOf(x).getShape(), typeOf(y).getShape());
  return b.create<MatMulOp>(loc, RankedTensorType::get(*dims, typeOf(x).getElementType()), x, y);
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(unbroadcast(b, getLoc(), dys[0], getLhs().getType()));
  grads.push_back(unbroadcast(b, getLoc(), dys[0], getRhs().getType()));
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  Value negated = binary<MulOp>(b, getLoc(), dys[0], scalar(b, getLoc(), getType().getElementType(), -1.0));
  grads.push_back(unbroadcast(b, getLoc(), dys[0], getLhs().getType()));
  grads.push_back(unbroadcast(b, getLoc(), negated, getRhs().getType()));
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(unbroadcast(b, getLoc(), binary<MulOp>(b, getLoc(), dys[0], getRhs()), getLhs().getType()));
  grads.push_back(unbroadcast(b, getLoc(), binary<MulOp>(b, getLoc(), dys[0], getLhs()), getRhs().getType()));
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // d(a/b) = da / b - a db / b^2
  Location loc = getLoc();
  grads.push_back(unbroadcast(b, loc, binary<DivOp>(b, loc, dys[0], getRhs()), getLhs().getType()));
  Value quotient = binary<DivOp>(b, loc, getResult(), getRhs());
  Value db = binary<MulOp>(b, loc, binary<MulOp>(b, loc, dys[0], quotient),
                           scalar(b, loc, getType().getElementType(), -1.0));
  grads.push_back(unbroadcast(b, loc, db, getRhs().getType()));
  return success();
}

LogicalResult PowOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // d(x^c)/dx = c x^(c-1); with a constant c (the LayerNorm square, x^3 in tanh GELU) that is all, else
  // d(x^c)/dc = x^c ln x as torch's, 0 where x = 0 and c >= 0 (x^c is 1 or 0 there whatever c does).
  Location loc = getLoc();
  Type element = getType().getElementType();
  auto constant = getRhs().getDefiningOp<ConstantOp>();
  auto dense = constant ? llvm::dyn_cast<DenseFPElementsAttr>(constant.getValue()) : nullptr;
  if (dense && dense.isSplat()) {
    double c = dense.getSplatValue<APFloat>().convertToDouble();
    Value power = binary<PowOp>(b, loc, getLhs(), scalar(b, loc, element, c - 1.0));
    Value da = binary<MulOp>(b, loc, binary<MulOp>(b, loc, dys[0], power), scalar(b, loc, element, c));
    grads.push_back(unbroadcast(b, loc, da, getLhs().getType()));
    grads.push_back(Value());
    return success();
  }
  Value c = getRhs();
  Value power = binary<PowOp>(b, loc, getLhs(), binary<SubOp>(b, loc, c, scalar(b, loc, element, 1.0)));
  Value da = binary<MulOp>(b, loc, binary<MulOp>(b, loc, dys[0], power), c);
  grads.push_back(unbroadcast(b, loc, da, getLhs().getType()));
  auto type = getType();
  auto mask = RankedTensorType::get(type.getShape(), b.getI1Type());
  Value x = binary<AddOp>(b, loc, getLhs(), zerosLike(b, loc, type)); // x at the result's shape
  Value logX = b.create<LogOp>(loc, type, x);
  Value zero = zerosLike(b, loc, type);
  Value atZero = b.create<CompareOp>(loc, mask, x, zero, b.getStringAttr("eq"));
  Value db = b.create<WhereOp>(loc, type, atZero, zero, binary<MulOp>(b, loc, binary<MulOp>(b, loc, dys[0], getResult()), logX));
  grads.push_back(unbroadcast(b, loc, db, getRhs().getType()));
  return success();
}

/// Max and Min route dy to the operand they chose; a tie goes to lhs, so Clip (Max then Min with the
/// bounds on the right) passes dy at a bound as torch.clamp does.
static void selectGradients(OpBuilder &b, Location loc, Value lhs, Value rhs, Value result, StringRef predicate,
                            Value dy, SmallVectorImpl<Value> &grads) {
  auto type = typeOf(result);
  auto pickType = RankedTensorType::get(type.getShape(), b.getI1Type());
  Value pickLhs = b.create<CompareOp>(loc, pickType, lhs, rhs, b.getStringAttr(predicate));
  Value zeros = zerosLike(b, loc, type);
  grads.push_back(unbroadcast(b, loc, b.create<WhereOp>(loc, type, pickLhs, dy, zeros), typeOf(lhs)));
  grads.push_back(unbroadcast(b, loc, b.create<WhereOp>(loc, type, pickLhs, zeros, dy), typeOf(rhs)));
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  selectGradients(b, getLoc(), getLhs(), getRhs(), getResult(), "ge", dys[0], grads);
  return success();
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  selectGradients(b, getLoc(), getLhs(), getRhs(), getResult(), "le", dys[0], grads);
  return success();
}

LogicalResult ReluOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<ReluGradOp>(getLoc(), getType(), dys[0], getInput()));
  return success();
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<GeluGradOp>(getLoc(), getType(), dys[0], getInput(), getApproximateAttr()));
  return success();
}

LogicalResult TanhOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy * (1 - y^2)
  Location loc = getLoc();
  Type element = getType().getElementType();
  Value y2 = binary<MulOp>(b, loc, getResult(), getResult());
  Value slope = binary<SubOp>(b, loc, scalar(b, loc, element, 1.0), y2);
  grads.push_back(binary<MulOp>(b, loc, dys[0], slope));
  return success();
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy * y * (1 - y)
  Location loc = getLoc();
  Value oneMinus = binary<SubOp>(b, loc, scalar(b, loc, getType().getElementType(), 1.0), getResult());
  grads.push_back(binary<MulOp>(b, loc, binary<MulOp>(b, loc, dys[0], getResult()), oneMinus));
  return success();
}

LogicalResult ErfOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy * 2/sqrt(pi) * exp(-x^2)
  Location loc = getLoc();
  Type element = getType().getElementType();
  Value x2 = binary<MulOp>(b, loc, getInput(), getInput());
  Value negated = binary<MulOp>(b, loc, x2, scalar(b, loc, element, -1.0));
  Value e = b.create<ExpOp>(loc, getType(), negated);
  Value slope = binary<MulOp>(b, loc, e, scalar(b, loc, element, 2.0 / std::sqrt(M_PI)));
  grads.push_back(binary<MulOp>(b, loc, dys[0], slope));
  return success();
}

LogicalResult SqrtOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy * 0.5 / y
  Location loc = getLoc();
  Value half = binary<MulOp>(b, loc, dys[0], scalar(b, loc, getType().getElementType(), 0.5));
  grads.push_back(binary<DivOp>(b, loc, half, getResult()));
  return success();
}

LogicalResult AbsOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], b.create<SignOp>(getLoc(), getType(), getInput())));
  return success();
}

LogicalResult ExpOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], getResult()));
  return success();
}

LogicalResult NegOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<NegOp>(getLoc(), getType(), dys[0]));
  return success();
}

LogicalResult ReciprocalOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // -dy * y^2
  Location loc = getLoc();
  Value y2 = binary<MulOp>(b, loc, getResult(), getResult());
  grads.push_back(b.create<NegOp>(loc, getType(), binary<MulOp>(b, loc, dys[0], y2)));
  return success();
}

LogicalResult LogOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<DivOp>(b, getLoc(), dys[0], getInput()));
  return success();
}

LogicalResult SinOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], b.create<CosOp>(getLoc(), getType(), getInput())));
  return success();
}

LogicalResult CosOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // -dy * sin(x)
  Location loc = getLoc();
  Value sine = b.create<SinOp>(loc, getType(), getInput());
  grads.push_back(b.create<NegOp>(loc, getType(), binary<MulOp>(b, loc, dys[0], sine)));
  return success();
}

LogicalResult SoftplusOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy * sigmoid(x)
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], b.create<SigmoidOp>(getLoc(), getType(), getInput())));
  return success();
}

/// silu'(x) = s * (1 + x * (1 - s)) with s = sigmoid(x).
static Value siluSlope(OpBuilder &b, Location loc, Value x) {
  auto type = typeOf(x);
  Type element = type.getElementType();
  Value s = b.create<SigmoidOp>(loc, type, x);
  Value oneMinus = binary<SubOp>(b, loc, scalar(b, loc, element, 1.0), s);
  return binary<MulOp>(b, loc, s, binary<AddOp>(b, loc, scalar(b, loc, element, 1.0), binary<MulOp>(b, loc, x, oneMinus)));
}

LogicalResult SiluOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], siluSlope(b, getLoc(), getInput())));
  return success();
}

LogicalResult HardSwishOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // torch's: 0 below -3, (x / 3 + 1/2) on [-3, 3], 1 above: the gate plus x / 6 where the gate's ramp is.
  Location loc = getLoc();
  Value x = getInput();
  auto type = typeOf(x);
  Type element = type.getElementType();
  auto mask = RankedTensorType::get(type.getShape(), b.getI1Type());
  Value ramp = binary<AddOp>(b, loc, binary<MulOp>(b, loc, x, scalar(b, loc, element, 1.0 / 6)), scalar(b, loc, element, 0.5));
  Value gate = binary<MaxOp>(b, loc, binary<MinOp>(b, loc, ramp, scalar(b, loc, element, 1.0)), scalar(b, loc, element, 0.0));
  Value inside = b.create<CompareOp>(loc, mask, b.create<CompareOp>(loc, mask, ramp, zerosLike(b, loc, type), b.getStringAttr("ge")),
                                     b.create<CompareOp>(loc, mask, ramp, binary<AddOp>(b, loc, zerosLike(b, loc, type), scalar(b, loc, element, 1.0)),
                                                         b.getStringAttr("le")),
                                     b.getStringAttr("and"));
  Value slope = b.create<WhereOp>(loc, type, inside, binary<AddOp>(b, loc, gate, binary<MulOp>(b, loc, x, scalar(b, loc, element, 1.0 / 6))),
                                  gate);
  grads.push_back(binary<MulOp>(b, loc, dys[0], slope));
  return success();
}

LogicalResult SwigluOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // d gate = dy * up * silu'(gate), d up = dy * silu(gate)
  Location loc = getLoc();
  Value gate = getGate(), up = getUp();
  Value dGate = binary<MulOp>(b, loc, binary<MulOp>(b, loc, dys[0], up), siluSlope(b, loc, gate));
  grads.push_back(unbroadcast(b, loc, dGate, getGate().getType()));
  Value silu = b.create<SiluOp>(loc, getGate().getType(), gate);
  grads.push_back(unbroadcast(b, loc, binary<MulOp>(b, loc, dys[0], silu), getUp().getType()));
  return success();
}

// Piecewise constant: zero wherever the derivative exists, which is what PyTorch propagates.
LogicalResult FloorOp::buildGradients(OpBuilder &b, ValueRange, SmallVectorImpl<Value> &grads) {
  grads.push_back(zerosLike(b, getLoc(), getType()));
  return success();
}

LogicalResult CeilOp::buildGradients(OpBuilder &b, ValueRange, SmallVectorImpl<Value> &grads) {
  grads.push_back(zerosLike(b, getLoc(), getType()));
  return success();
}

LogicalResult RoundOp::buildGradients(OpBuilder &b, ValueRange, SmallVectorImpl<Value> &grads) {
  grads.push_back(zerosLike(b, getLoc(), getType()));
  return success();
}

/// 1 + sign * x^2, the polynomial under the inverse trigonometric and hyperbolic derivatives.
static Value onePlusSquare(OpBuilder &b, Location loc, Value x, double sign) {
  Type element = typeOf(x).getElementType();
  Value square = binary<MulOp>(b, loc, x, x);
  return binary<AddOp>(b, loc, scalar(b, loc, element, 1.0), binary<MulOp>(b, loc, square, scalar(b, loc, element, sign)));
}

/// dy / sqrt(root): the derivatives of asin, acos, asinh and acosh.
static Value overRoot(OpBuilder &b, Location loc, Value dy, Value root) {
  return binary<DivOp>(b, loc, dy, b.create<SqrtOp>(loc, typeOf(root), root));
}

LogicalResult TanOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy * (1 + tan(x)^2)
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], onePlusSquare(b, getLoc(), getResult(), 1.0)));
  return success();
}

LogicalResult AsinOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(overRoot(b, getLoc(), dys[0], onePlusSquare(b, getLoc(), getInput(), -1.0)));
  return success();
}

LogicalResult AcosOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  Value asinGrad = overRoot(b, getLoc(), dys[0], onePlusSquare(b, getLoc(), getInput(), -1.0));
  grads.push_back(b.create<NegOp>(getLoc(), getType(), asinGrad));
  return success();
}

LogicalResult AtanOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<DivOp>(b, getLoc(), dys[0], onePlusSquare(b, getLoc(), getInput(), 1.0)));
  return success();
}

LogicalResult SinhOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], b.create<CoshOp>(getLoc(), getType(), getInput())));
  return success();
}

LogicalResult CoshOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<MulOp>(b, getLoc(), dys[0], b.create<SinhOp>(getLoc(), getType(), getInput())));
  return success();
}

LogicalResult AsinhOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(overRoot(b, getLoc(), dys[0], onePlusSquare(b, getLoc(), getInput(), 1.0)));
  return success();
}

LogicalResult AcoshOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy / sqrt(x^2 - 1) = dy / sqrt(-(1 - x^2))
  Location loc = getLoc();
  Value root = b.create<NegOp>(loc, getType(), onePlusSquare(b, loc, getInput(), -1.0));
  grads.push_back(overRoot(b, loc, dys[0], root));
  return success();
}

LogicalResult AtanhOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(binary<DivOp>(b, getLoc(), dys[0], onePlusSquare(b, getLoc(), getInput(), -1.0)));
  return success();
}

LogicalResult SoftsignOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy / (1 + |x|)^2
  Location loc = getLoc();
  Value denominator = binary<AddOp>(b, loc, scalar(b, loc, getType().getElementType(), 1.0),
                                    b.create<AbsOp>(loc, getType(), getInput()));
  grads.push_back(binary<DivOp>(b, loc, dys[0], binary<MulOp>(b, loc, denominator, denominator)));
  return success();
}

LogicalResult WhereOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value zeros = zerosLike(b, loc, getType());
  Value dx = b.create<WhereOp>(loc, getType(), getCondition(), dys[0], zeros);
  Value dy = b.create<WhereOp>(loc, getType(), getCondition(), zeros, dys[0]);
  grads.push_back(Value());
  grads.push_back(unbroadcast(b, loc, dx, getX().getType()));
  grads.push_back(unbroadcast(b, loc, dy, getY().getType()));
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (!llvm::isa<FloatType>(getInput().getType().getElementType()) ||
      !llvm::isa<FloatType>(getType().getElementType())) {
    grads.push_back(Value()); // integer casts carry no gradient
    return success();
  }
  grads.push_back(b.create<CastOp>(getLoc(), getInput().getType(), dys[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization and reductions
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // y * (dy - sum(dy * y))
  Location loc = getLoc();
  Value dot = reduceSum(b, loc, binary<MulOp>(b, loc, dys[0], getResult()), {static_cast<int64_t>(getAxis())}, true);
  grads.push_back(binary<MulOp>(b, loc, getResult(), binary<SubOp>(b, loc, dys[0], dot)));
  return success();
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dy - exp(y) * sum(dy)
  Location loc = getLoc();
  Value total = reduceSum(b, loc, dys[0], {static_cast<int64_t>(getAxis())}, true);
  Value probabilities = b.create<ExpOp>(loc, getType(), getResult());
  grads.push_back(binary<SubOp>(b, loc, dys[0], binary<MulOp>(b, loc, probabilities, total)));
  return success();
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (dys[1])
    return emitOpError("expected no gradient into logsumexp");
  auto grad = b.create<AttentionGradOp>(getLoc(), TypeRange{getQuery().getType(), getKey().getType(), getValue().getType()},
                                        dys[0], getQuery(), getKey(), getValue(), getResult(), getLogsumexp(),
                                        getMask(), getScaleAttr(), getCausalAttr());
  llvm::append_range(grads, grad.getResults());
  if (getMask())
    grads.push_back(Value()); // tec-recognize-attention keeps masks that depend on params decomposed
  return success();
}

/// The normalized dims (axis..rank-1) and the leading ones of a LayerNorm or RMSNorm input.
static void splitDims(int64_t rank, int64_t axis, SmallVectorImpl<int64_t> &leading, SmallVectorImpl<int64_t> &normalized) {
  for (int64_t d = 0; d < rank; ++d)
    (d < axis ? leading : normalized).push_back(d);
}

static Value meanOver(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> axes) {
  auto t = typeOf(v);
  return b.create<ReduceMeanOp>(loc, RankedTensorType::get(shape::reduce(t.getShape(), axes, true), t.getElementType()),
                                v, axes, true);
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (dys[1] || dys[2])
    return emitOpError("expected no gradient into mean and inv_std_dev");
  if (!getResult().getType().getElementType().isF32())
    return emitOpError("expected f32 to differentiate, got ") << getResult().getType().getElementType();
  // xhat = (x - mean) * rstd; g = dy * gamma;
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dgamma = sum(dy * xhat); dbeta = sum(dy).
  Location loc = getLoc();
  SmallVector<int64_t> normalized, leading;
  splitDims(getInput().getType().getRank(), getAxis(), leading, normalized);
  Value dy = dys[0];
  Value xhat = binary<MulOp>(b, loc, binary<SubOp>(b, loc, getInput(), getMean()), getInvStdDev());
  Value g = binary<MulOp>(b, loc, dy, getScale());
  Value centered = binary<SubOp>(b, loc, g, meanOver(b, loc, g, normalized));
  Value projected = binary<MulOp>(b, loc, xhat, meanOver(b, loc, binary<MulOp>(b, loc, g, xhat), normalized));
  grads.push_back(binary<MulOp>(b, loc, getInvStdDev(), binary<SubOp>(b, loc, centered, projected)));
  Value dScale = binary<MulOp>(b, loc, dy, xhat);
  grads.push_back(leading.empty() ? dScale : reduceSum(b, loc, dScale, leading, false));
  if (getBias())
    grads.push_back(leading.empty() ? dy : reduceSum(b, loc, dy, leading, false));
  return success();
}

LogicalResult RmsNormOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (dys[1])
    return emitOpError("expected no gradient into inv_rms");
  if (!getResult().getType().getElementType().isF32())
    return emitOpError("expected f32 to differentiate, got ") << getResult().getType().getElementType();
  // xhat = x * rstd; g = dy * gamma; dx = rstd * (g - xhat * mean(g * xhat)); dgamma = sum(dy * xhat).
  Location loc = getLoc();
  SmallVector<int64_t> normalized, leading;
  splitDims(getInput().getType().getRank(), getAxis(), leading, normalized);
  Value dy = dys[0];
  Value xhat = binary<MulOp>(b, loc, getInput(), getInvRms());
  Value g = binary<MulOp>(b, loc, dy, getScale());
  Value projected = binary<MulOp>(b, loc, xhat, meanOver(b, loc, binary<MulOp>(b, loc, g, xhat), normalized));
  grads.push_back(binary<MulOp>(b, loc, getInvRms(), binary<SubOp>(b, loc, g, projected)));
  Value dScale = binary<MulOp>(b, loc, dy, xhat);
  grads.push_back(leading.empty() ? dScale : reduceSum(b, loc, dScale, leading, false));
  return success();
}

/// dx = dy broadcast back over the reduced axes (divided by their count for a mean).
static Value reductionGradient(OpBuilder &b, Location loc, Value dy, RankedTensorType input, ArrayRef<int64_t> axes,
                               bool mean) {
  Value kept = reshapeTo(b, loc, dy, shape::reduce(input.getShape(), axes, /*keepdims=*/true));
  Value expanded = b.create<ExpandOp>(loc, input, kept);
  if (!mean)
    return expanded;
  int64_t count = 1;
  for (int64_t a : axes)
    count *= input.getDimSize(a);
  return binary<MulOp>(b, loc, expanded, scalar(b, loc, input.getElementType(), 1.0 / count));
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(reductionGradient(b, getLoc(), dys[0], getInput().getType(), getAxes(), true));
  return success();
}

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(reductionGradient(b, getLoc(), dys[0], getInput().getType(), getAxes(), false));
  return success();
}

/// dx = dy where x is the reduced extreme, split evenly between ties (torch.amax's rule).
static Value extremeGradient(OpBuilder &b, Location loc, Value dy, Value x, Value result, ArrayRef<int64_t> axes) {
  auto input = typeOf(x);
  auto keptShape = shape::reduce(input.getShape(), axes, /*keepdims=*/true);
  Value extreme = b.create<ExpandOp>(loc, input, reshapeTo(b, loc, result, keptShape));
  Value hit = b.create<CompareOp>(loc, RankedTensorType::get(input.getShape(), b.getI1Type()), x, extreme,
                                  b.getStringAttr("eq"));
  Value ones = b.create<WhereOp>(loc, input, hit, scalar(b, loc, input.getElementType(), 1.0),
                                 scalar(b, loc, input.getElementType(), 0.0));
  Value ties = reduceSum(b, loc, ones, axes, /*keepdims=*/true);
  Value share = binary<DivOp>(b, loc, reshapeTo(b, loc, dy, keptShape), ties);
  return binary<MulOp>(b, loc, ones, share);
}

LogicalResult ReduceMaxOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(extremeGradient(b, getLoc(), dys[0], getInput(), getResult(), getAxes()));
  return success();
}

LogicalResult ReduceMinOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(extremeGradient(b, getLoc(), dys[0], getInput(), getResult(), getAxes()));
  return success();
}

//===----------------------------------------------------------------------===//
// GEMMs
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (getLhs().getType().getRank() < 2 || getRhs().getType().getRank() < 2)
    return emitOpError("expected operands of rank >= 2 to differentiate");
  // dA = dY B^T, dB = A^T dY, each summed over the batch dims it was broadcast along.
  Location loc = getLoc();
  grads.push_back(unbroadcast(b, loc, matmul(b, loc, dys[0], transposeLast2(b, loc, getRhs())), getLhs().getType()));
  grads.push_back(unbroadcast(b, loc, matmul(b, loc, transposeLast2(b, loc, getLhs()), dys[0]), getRhs().getType()));
  return success();
}

LogicalResult LinearOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dz = dys[0];
  if (getEpilogue() == "relu")
    dz = b.create<ReluGradOp>(loc, getType(), dz, getResult()); // y > 0 exactly where z > 0
  else if (getEpilogue() != "none")
    return emitOpError("expected epilogue none or relu to differentiate (the pre-activation is needed), got '")
           << getEpilogue() << "'";
  // As 2-D: X [M, K], dZ [M, N]; W^e = transpose_b ? W^T : W.
  auto x = getInput().getType(), w = getWeight().getType();
  const int64_t k = x.getShape().back(), n = getType().getShape().back(), m = x.getNumElements() / std::max<int64_t>(k, 1);
  Value x2 = reshapeTo(b, loc, getInput(), {m, k}), dz2 = reshapeTo(b, loc, dz, {m, n});
  // dX = dZ (W^e)^T: a linear layer over dZ with the opposite transpose.
  auto role = [&](Value gemm, StringRef name, int64_t gradOperand) {
    gemm.getDefiningOp()->setAttr(kGemmRoleAttrName, b.getStringAttr(name));
    gemm.getDefiningOp()->setAttr(kGradOperandAttrName, b.getI64IntegerAttr(gradOperand));
    return gemm;
  };
  Value dx = b.create<LinearOp>(loc, RankedTensorType::get({m, k}, x.getElementType()), dz2, getWeight(), Value(),
                                b.getStringAttr("none"), b.getBoolAttr(!getTransposeB()));
  grads.push_back(reshapeTo(b, loc, role(dx, "dgrad", 0), x.getShape()));
  // dW = dZ^T X ([N, K]) with transpose_b, else X^T dZ ([K, N]); a linear layer too, so that FP8
  // insertion sees all three GEMMs of the layer (fprop, dgrad, wgrad).
  auto wgrad = [&](Value a, Value w2, int64_t gradOperand) {
    auto ta = typeOf(a), tw = typeOf(w2);
    Value gemm = b.create<LinearOp>(loc, RankedTensorType::get({ta.getDimSize(0), tw.getDimSize(1)}, ta.getElementType()),
                                    a, w2, Value(), b.getStringAttr("none"), b.getBoolAttr(false));
    return role(gemm, "wgrad", gradOperand);
  };
  Value dw = getTransposeB() ? wgrad(transposeLast2(b, loc, dz2), x2, 0) : wgrad(transposeLast2(b, loc, x2), dz2, 1);
  grads.push_back(reshapeTo(b, loc, dw, w.getShape()));
  if (getBias())
    grads.push_back(reduceSum(b, loc, dz2, {0}, /*keepdims=*/false));
  return success();
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  SmallVector<int64_t> inverse(getPerm().size());
  for (auto [i, p] : llvm::enumerate(getPerm()))
    inverse[p] = i;
  grads.push_back(b.create<TransposeOp>(getLoc(), getInput().getType(), dys[0], inverse));
  return success();
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<ReshapeOp>(getLoc(), getInput().getType(), dys[0]));
  return success();
}

LogicalResult ExpandOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(unbroadcast(b, getLoc(), dys[0], getInput().getType()));
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // Each input's gradient is its part of dY: one split.
  SmallVector<Type> types;
  for (Value in : getInputs())
    types.push_back(in.getType());
  auto split = b.create<SplitOp>(getLoc(), types, dys[0], getAxis());
  for (Value part : split.getResults())
    grads.push_back(part);
  return success();
}

LogicalResult SplitOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // The pieces' gradients joined back; a piece nothing used contributes zeros.
  SmallVector<Value> parts;
  for (auto [result, dy] : llvm::zip(getResults(), dys))
    parts.push_back(dy ? dy : zerosLike(b, getLoc(), typeOf(result)));
  grads.push_back(b.create<ConcatOp>(getLoc(), getInput().getType(), parts, getAxis()));
  return success();
}

/// dY placed back along dim `d` of a tensor whose size there is `size`: its elements at `first`,
/// `first + stride`, ..., zeros between and around (a strided scatter into zeros). Built as an interleave
/// with zeros (dY as [.., n, 1, ..] beside zeros [.., n, stride - 1, ..], then [.., n * stride, ..]), cut to
/// what fits and padded before and after.
static Value scatterAlong(OpBuilder &b, Location loc, Value g, int64_t d, int64_t first, int64_t stride,
                          int64_t size) {
  auto t = typeOf(g);
  const int64_t n = t.getDimSize(d);
  auto zeros = [&](ArrayRef<int64_t> dims) {
    return zerosLike(b, loc, RankedTensorType::get(dims, t.getElementType()));
  };
  auto withDim = [&](ArrayRef<int64_t> dims, int64_t at, int64_t value) {
    SmallVector<int64_t> out(dims);
    out[at] = value;
    return out;
  };
  if (n == 0)
    return zeros(withDim(t.getShape(), d, size));
  if (stride > 1) {
    SmallVector<int64_t> split(t.getShape());
    split.insert(split.begin() + d + 1, 1);
    Value column = reshapeTo(b, loc, g, split);
    auto interleaved = withDim(split, d + 1, stride);
    g = b.create<ConcatOp>(loc, RankedTensorType::get(interleaved, t.getElementType()),
                           ValueRange{column, zeros(withDim(split, d + 1, stride - 1))}, d + 1);
    g = reshapeTo(b, loc, g, withDim(t.getShape(), d, n * stride));
  }
  const int64_t covered = std::min(typeOf(g).getDimSize(d), size - first); // the last zeros may not fit
  if (covered < typeOf(g).getDimSize(d)) {
    SmallVector<int64_t> starts(t.getRank(), 0), ends(typeOf(g).getShape()), steps(t.getRank(), 1);
    ends[d] = covered;
    g = b.create<SliceOp>(loc, RankedTensorType::get(withDim(t.getShape(), d, covered), t.getElementType()), g,
                          starts, ends, steps);
  }
  SmallVector<Value> parts;
  if (first > 0)
    parts.push_back(zeros(withDim(t.getShape(), d, first)));
  parts.push_back(g);
  if (size - first - covered > 0)
    parts.push_back(zeros(withDim(t.getShape(), d, size - first - covered)));
  if (parts.size() == 1)
    return g;
  return b.create<ConcatOp>(loc, RankedTensorType::get(withDim(t.getShape(), d, size), t.getElementType()), parts, d);
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // dY scattered back into zeros of the input's shape, one dim at a time; a negative step reads the input
  // backwards, so its dY is reversed first and lands from the last element it picked.
  auto input = getInput().getType();
  if (!llvm::isa<FloatType>(input.getElementType()))
    return emitOpError("expected float data to differentiate, got ") << input.getElementType();
  Location loc = getLoc();
  Value g = dys[0];
  for (int64_t d = 0; d < input.getRank(); ++d) {
    const int64_t n = typeOf(g).getDimSize(d), step = getSteps()[d];
    if (n == input.getDimSize(d) && step == 1)
      continue;
    int64_t first = getStarts()[d];
    if (step < 0 && n > 0) {
      SmallVector<int64_t> starts(input.getRank(), 0), ends(typeOf(g).getShape()), steps(input.getRank(), 1);
      starts[d] = n - 1;
      ends[d] = -1;
      steps[d] = -1;
      g = b.create<SliceOp>(loc, typeOf(g), g, starts, ends, steps);
      first += (n - 1) * step;
    }
    g = scatterAlong(b, loc, g, d, first, std::abs(step), input.getDimSize(d));
  }
  grads.push_back(g);
  return success();
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

/// Each input element adds to every output at or past it (not at it when exclusive), so its gradient
/// sums the output gradients over those positions: a cumsum running the other way.
LogicalResult CumSumOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<CumSumOp>(getLoc(), dys[0].getType(), dys[0], getAxis(), getExclusive(), !getReverse()));
  return success();
}

LogicalResult GatherOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (!llvm::isa<FloatType>(getType().getElementType()))
    return emitOpError("expected float data to differentiate, got ") << getType().getElementType();
  Value dy = dys[0];
  if (auto padding = getPaddingIndex()) { // positions that gathered the padding slice add nothing to it
    Location loc = getLoc();
    auto ids = typeOf(getIndices());
    auto idType = RankedTensorType::get({}, ids.getElementType());
    Value row = b.create<ConstantOp>(loc, idType, DenseElementsAttr::get(idType, b.getIntegerAttr(ids.getElementType(), *padding)));
    Value atRow = b.create<CompareOp>(loc, RankedTensorType::get(ids.getShape(), b.getI1Type()), getIndices(), row,
                                      b.getStringAttr("eq"));
    // The mask over the result: 1 for data's dims before and after the gathered axis.
    shape::Dims dims(getAxis(), 1);
    llvm::append_range(dims, ids.getShape());
    dims.append(getType().getRank() - dims.size(), 1);
    Value mask = b.create<ReshapeOp>(loc, RankedTensorType::get(dims, b.getI1Type()), atRow);
    dy = b.create<WhereOp>(loc, dy.getType(), mask, scalar(b, loc, getType().getElementType(), 0.0), dy);
  }
  grads.push_back(b.create<ScatterAddOp>(getLoc(), getData().getType(), dy, getIndices(), getAxis(),
                                         /*elements=*/false));
  grads.push_back(Value());
  return success();
}

LogicalResult GatherElementsOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (!llvm::isa<FloatType>(getType().getElementType()))
    return emitOpError("expected float data to differentiate, got ") << getType().getElementType();
  grads.push_back(b.create<ScatterAddOp>(getLoc(), getData().getType(), dys[0], getIndices(), getAxis(),
                                         /*elements=*/true));
  grads.push_back(Value());
  return success();
}

LogicalResult ScatterAddOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  Type type = getUpdates().getType();
  grads.push_back(getElements() ? b.create<GatherElementsOp>(getLoc(), type, dys[0], getIndices(), getAxis()).getResult()
                                : b.create<GatherOp>(getLoc(), type, dys[0], getIndices(), getAxis()).getResult());
  grads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Convolutions and pools
//===----------------------------------------------------------------------===//

LogicalResult ConvOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (getChannelsLast()) // only inference on the cpu target is laid out channels-last
    return emitOpError("expected an NCHW conv to differentiate, got channels_last");
  Location loc = getLoc();
  auto weight = getWeight().getType();
  grads.push_back(b.create<ConvInputGradOp>(loc, getInput().getType(), dys[0], getWeight(), getStrides(), getPads(),
                                            getDilations(), getGroup()));
  grads.push_back(b.create<ConvWeightGradOp>(loc, weight, dys[0], getInput(), weight.getShape().drop_front(2),
                                             getStrides(), getPads(), getDilations(), getGroup()));
  if (getBias())
    grads.push_back(reshapeTo(b, loc, reduceSum(b, loc, dys[0], {0, 2, 3}, false), getBias().getType().getShape()));
  return success();
}

LogicalResult ConvInputGradOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  // y = conv^T(x, W) is linear in x with the conv as its adjoint: dx = conv(dy, W). In W, <dy, conv^T(x, W)>
  // = <conv(dy, W), x>: the conv's weight gradient with dy as the input and x as the output's gradient.
  Location loc = getLoc();
  auto weight = getWeight().getType();
  grads.push_back(b.create<ConvOp>(loc, getDy().getType(), dys[0], getWeight(), Value(), getStrides(), getPads(),
                                   getDilations(), getGroup()));
  grads.push_back(b.create<ConvWeightGradOp>(loc, weight, getDy(), dys[0], weight.getShape().drop_front(2), getStrides(),
                                             getPads(), getDilations(), getGroup()));
  return success();
}

LogicalResult PoolOp::buildGradients(OpBuilder &b, ValueRange dys, SmallVectorImpl<Value> &grads) {
  if (getChannelsLast()) // only inference on the cpu target is laid out channels-last
    return emitOpError("expected an NCHW pool to differentiate, got channels_last");
  grads.push_back(b.create<PoolGradOp>(getLoc(), getInput().getType(), dys[0], getInput(), getKind(), getKernel(),
                                       getStrides(), getPads(), getDilations(), getCountIncludePad()));
  return success();
}
