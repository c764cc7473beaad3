// Elementwise operators: arithmetic, comparisons, logic, activations, casts, where, identity, dropout.
#include "frontend/GraphImporter.h"

namespace tec::importer {

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

Error GraphImporter::castLike(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(like, value(n, 1));
  return define(n, 0, create<CastOp>(n, RankedTensorType::get(typeOf(x).getShape(), typeOf(like).getElementType()), x));
}

} // namespace tec::importer
