// Compile-time evaluation of tec ops whose operands are constants (their `fold` hooks): the shape
// arithmetic, masks and constant subgraphs exporters write become constants, computed with the same
// per-element math the kernels run (support), so a folded value equals the one the plan would
// compute. Results past kMaxFoldedElements stay ops unless they are splats, so folding never bloats a plan.
#include "ir/TecFolding.h"

#include "support/Cast.h"
#include "support/Ops.h"
#include "support/Scan.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cstring>
#include <functional>

using namespace mlir;

namespace tec {

namespace {

namespace k = kernels;

std::optional<k::ElementType> elementTypeOf(Type t) {
  if (t.isF32())
    return k::ElementType::F32;
  if (t.isF16())
    return k::ElementType::F16;
  if (t.isBF16())
    return k::ElementType::BF16;
  if (t.isInteger(32))
    return k::ElementType::I32;
  if (t.isInteger(64))
    return k::ElementType::I64;
  if (t.isInteger(1))
    return k::ElementType::Bool;
  if (llvm::isa<Float8E4M3FNType>(t))
    return k::ElementType::F8E4M3;
  if (llvm::isa<Float8E5M2Type>(t))
    return k::ElementType::F8E5M2;
  return std::nullopt;
}

bool isFloatElement(k::ElementType t) {
  return t == k::ElementType::F32 || t == k::ElementType::F16 || t == k::ElementType::BF16;
}

/// A constant's elements as the kernels lay them out (bool: one byte each); a splat stores one.
struct Elements {
  RankedTensorType type;
  k::ElementType element;
  std::vector<char> bytes;
  bool splat = false;
  const void *data() const { return bytes.data(); }
};

/// Whether a non-splat result of `type` is small enough to compute, counted without overflow (dims whose
/// product passes int64 wrap getNumElements() to a negative count, which compared as small).
bool withinFoldLimit(ShapedType type) {
  auto count = shape::elementCount(type.getShape());
  return count && *count <= kMaxFoldedElements;
}

std::optional<Elements> read(Attribute attr) {
  auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  auto type = llvm::cast<RankedTensorType>(dense.getType());
  auto element = elementTypeOf(type.getElementType());
  if (!element)
    return std::nullopt;
  if (!dense.isSplat() && !withinFoldLimit(type))
    return std::nullopt;
  const int64_t stored = dense.isSplat() ? 1 : type.getNumElements();
  Elements e{type, *element, std::vector<char>(stored * k::elementBytes(*element)), dense.isSplat()};
  if (type.getElementType().isInteger(1)) {
    int64_t i = 0;
    for (bool v : dense.getValues<bool>()) {
      if (i == stored)
        break;
      e.bytes[i++] = v;
    }
  } else if (stored) {
    std::memcpy(e.bytes.data(), dense.getRawData().data(), e.bytes.size());
  }
  return e;
}

Attribute write(RankedTensorType type, const std::vector<char> &bytes, bool splat) {
  if (type.getElementType().isInteger(1)) {
    llvm::SmallVector<bool> bits(bytes.begin(), bytes.end());
    return splat ? DenseElementsAttr::get(type, bits.front()) : DenseElementsAttr::get(type, ArrayRef<bool>(bits));
  }
  return DenseElementsAttr::getFromRawBuffer(type, bytes); // one element's bytes make a splat
}

/// Per-dim element strides of `e` read at the coordinates of `out` (numpy broadcasting; 0 on a splat).
std::vector<int64_t> broadcastStrides(const Elements &e, ArrayRef<int64_t> out) {
  std::vector<int64_t> strides(out.size(), 0);
  if (e.splat)
    return strides;
  auto in = e.type.getShape();
  const int64_t lead = out.size() - in.size();
  int64_t stride = 1;
  for (int64_t d = in.size() - 1; d >= 0; --d) {
    strides[d + lead] = in[d] == 1 ? 0 : stride;
    // Only an empty operand's dims multiply past int64 (a read one is within the fold limit): nothing is read.
    if (llvm::MulOverflow(stride, in[d], stride))
      stride = 0;
  }
  return strides;
}

/// Calls f(i, offsets) for every linear index i of `out`, with each operand's element offset.
void forEachIndex(ArrayRef<int64_t> out, const std::vector<std::vector<int64_t>> &strides,
                  const std::function<void(int64_t, const std::vector<int64_t> &)> &f) {
  int64_t n = 1;
  for (int64_t d : out)
    n *= d;
  std::vector<int64_t> index(out.size(), 0), offsets(strides.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(i, offsets);
    for (int64_t d = out.size() - 1; d >= 0; --d) {
      ++index[d];
      for (size_t k = 0; k < strides.size(); ++k)
        offsets[k] += strides[k][d];
      if (index[d] < out[d])
        break;
      for (size_t k = 0; k < strides.size(); ++k)
        offsets[k] -= strides[k][d] * out[d];
      index[d] = 0;
    }
  }
}

/// Element `at` of each operand into element i of the result.
using ElementFn = std::function<void(const std::vector<Elements> &, const std::vector<int64_t> &at, void *out,
                                     k::ElementType outType, int64_t i)>;

/// Evaluates an elementwise (broadcasting) op over constant operands; null where one is not constant,
/// or the result is too large and not a splat.
Attribute evaluate(Type resultType, ArrayRef<Attribute> operands, const ElementFn &fn) {
  auto type = llvm::cast<RankedTensorType>(resultType);
  auto outType = elementTypeOf(type.getElementType());
  if (!outType)
    return {};
  std::vector<Elements> in;
  for (Attribute a : operands) {
    auto e = read(a);
    if (!e)
      return {};
    in.push_back(std::move(*e));
  }
  const bool splat = llvm::all_of(in, [](const Elements &e) { return e.splat; });
  if (!splat && !withinFoldLimit(type))
    return {};
  std::vector<char> bytes((splat ? 1 : type.getNumElements()) * k::elementBytes(*outType));
  if (splat) {
    fn(in, std::vector<int64_t>(in.size(), 0), bytes.data(), *outType, 0);
  } else {
    std::vector<std::vector<int64_t>> strides;
    for (const auto &e : in)
      strides.push_back(broadcastStrides(e, type.getShape()));
    forEachIndex(type.getShape(), strides,
                 [&](int64_t i, const std::vector<int64_t> &at) { fn(in, at, bytes.data(), *outType, i); });
  }
  return write(type, bytes, splat);
}

float loadFloat(const Elements &e, int64_t i) { return static_cast<float>(k::loadAsDouble(e.data(), e.element, i)); }

void storeInt(void *out, k::ElementType t, int64_t i, int64_t v) {
  if (t == k::ElementType::I32)
    static_cast<int32_t *>(out)[i] = static_cast<int32_t>(v);
  else
    static_cast<int64_t *>(out)[i] = v;
}

std::optional<k::UnaryKind> unaryKindOf(Operation *op) {
  return k::unaryKindNamed(op->getName().stripDialect());
}

std::optional<k::BinaryKind> binaryKindOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<k::BinaryKind>>(op)
      .Case([](AddOp) { return k::BinaryKind::Add; })
      .Case([](SubOp) { return k::BinaryKind::Sub; })
      .Case([](MulOp) { return k::BinaryKind::Mul; })
      .Case([](DivOp) { return k::BinaryKind::Div; })
      .Case([](PowOp) { return k::BinaryKind::Pow; })
      .Case([](MaxOp) { return k::BinaryKind::Max; })
      .Case([](MinOp) { return k::BinaryKind::Min; })
      .Case([](SwigluOp) { return k::BinaryKind::SwiGlu; })
      .Case([](ModOp op) { return op.getFmod() ? k::BinaryKind::FMod : k::BinaryKind::Mod; })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<k::CompareKind> compareKindOf(StringRef predicate) {
  return llvm::StringSwitch<std::optional<k::CompareKind>>(predicate)
      .Case("eq", k::CompareKind::Equal)
      .Case("ne", k::CompareKind::NotEqual)
      .Case("lt", k::CompareKind::Less)
      .Case("le", k::CompareKind::LessEqual)
      .Case("gt", k::CompareKind::Greater)
      .Case("ge", k::CompareKind::GreaterEqual)
      .Case("and", k::CompareKind::And)
      .Case("or", k::CompareKind::Or)
      .Case("xor", k::CompareKind::Xor)
      .Default(std::nullopt);
}

/// Copies elements of `in` into a result of `type`: result element i takes input element source(i).
Attribute gatherElements(const Elements &in, RankedTensorType type, const std::function<int64_t(int64_t)> &source) {
  if (!withinFoldLimit(type))
    return {};
  const size_t width = k::elementBytes(in.element);
  std::vector<char> bytes(type.getNumElements() * width);
  for (int64_t i = 0; i < type.getNumElements(); ++i)
    std::memcpy(bytes.data() + i * width, in.bytes.data() + source(i) * width, width);
  return write(type, bytes, false);
}

/// Row-major coordinates of linear index i in `shape`.
llvm::SmallVector<int64_t> coordinates(ArrayRef<int64_t> shape, int64_t i) {
  llvm::SmallVector<int64_t> c(shape.size());
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}

int64_t linearIndex(ArrayRef<int64_t> shape, ArrayRef<int64_t> c) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    i = i * shape[d] + c[d];
  return i;
}

/// The value of a data-movement op whose input is a splat: the same splat in the result's shape.
Attribute resizedSplat(Attribute input, Type resultType) {
  auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(input);
  if (!dense || !dense.isSplat())
    return {};
  return dense.resizeSplat(llvm::cast<ShapedType>(resultType));
}

} // namespace

OpFoldResult foldUnary(Operation *op, Attribute input) {
  auto kind = unaryKindOf(op);
  if (!kind)
    return {};
  return evaluate(op->getResult(0).getType(), {input},
                  [&](const std::vector<Elements> &in, const std::vector<int64_t> &at, void *out, k::ElementType t,
                      int64_t i) {
                    if (isFloatElement(t))
                      k::storeFromDouble(out, t, i, k::applyUnary(*kind, loadFloat(in[0], at[0])));
                    else
                      storeInt(out, t, i, k::applyIntUnary<int64_t>(*kind, k::loadInt(in[0].data(), in[0].element, at[0])));
                  });
}

OpFoldResult foldBinary(Operation *op, Attribute lhs, Attribute rhs) {
  auto kind = binaryKindOf(op);
  if (!kind || !lhs || !rhs)
    return {};
  return evaluate(op->getResult(0).getType(), {lhs, rhs},
                  [&](const std::vector<Elements> &in, const std::vector<int64_t> &at, void *out, k::ElementType t,
                      int64_t i) {
                    if (isFloatElement(t))
                      k::storeFromDouble(out, t, i,
                                         k::applyBinary(*kind, loadFloat(in[0], at[0]), loadFloat(in[1], at[1])));
                    else
                      storeInt(out, t, i,
                               k::applyIntBinary<int64_t>(*kind, k::loadInt(in[0].data(), in[0].element, at[0]),
                                                          k::loadInt(in[1].data(), in[1].element, at[1])));
                  });
}

OpFoldResult CompareOp::fold(FoldAdaptor adaptor) {
  auto kind = compareKindOf(getPredicate());
  if (!kind || !adaptor.getLhs() || !adaptor.getRhs())
    return {};
  return evaluate(getType(), {adaptor.getLhs(), adaptor.getRhs()},
                  [&](const std::vector<Elements> &in, const std::vector<int64_t> &at, void *out, k::ElementType,
                      int64_t i) {
                    bool r = isFloatElement(in[0].element)
                                 ? k::applyCompare(*kind, loadFloat(in[0], at[0]), loadFloat(in[1], at[1]))
                                 : k::applyCompare(*kind, k::loadInt(in[0].data(), in[0].element, at[0]),
                                                   k::loadInt(in[1].data(), in[1].element, at[1]));
                    static_cast<uint8_t *>(out)[i] = r;
                  });
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  if (!adaptor.getCondition() || !adaptor.getX() || !adaptor.getY())
    return {};
  return evaluate(getType(), {adaptor.getCondition(), adaptor.getX(), adaptor.getY()},
                  [&](const std::vector<Elements> &in, const std::vector<int64_t> &at, void *out, k::ElementType t,
                      int64_t i) {
                    const size_t width = k::elementBytes(t);
                    const int pick = in[0].bytes[at[0]] ? 1 : 2;
                    std::memcpy(static_cast<char *>(out) + i * width, in[pick].bytes.data() + at[pick] * width, width);
                  });
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (!adaptor.getInput())
    return {};
  return evaluate(getType(), {adaptor.getInput()},
                  [&](const std::vector<Elements> &in, const std::vector<int64_t> &at, void *out, k::ElementType t,
                      int64_t i) {
                    const size_t from = k::elementBytes(in[0].element), to = k::elementBytes(t);
                    k::castElement(in[0].bytes.data() + at[0] * from, in[0].element, static_cast<char *>(out) + i * to,
                                   t, 0);
                  });
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

OpFoldResult ExpandOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (Attribute splat = resizedSplat(adaptor.getInput(), getType()))
    return splat;
  return evaluate(getType(), {adaptor.getInput()},
                  [&](const std::vector<Elements> &in, const std::vector<int64_t> &at, void *out, k::ElementType t,
                      int64_t i) {
                    const size_t width = k::elementBytes(t);
                    std::memcpy(static_cast<char *>(out) + i * width, in[0].bytes.data() + at[0] * width, width);
                  });
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  if (llvm::all_of(llvm::enumerate(getPerm()), [](auto p) { return static_cast<int64_t>(p.index()) == p.value(); }))
    return getInput();
  if (Attribute splat = resizedSplat(adaptor.getInput(), getType()))
    return splat;
  auto in = read(adaptor.getInput());
  if (!in)
    return {};
  auto inShape = getInput().getType().getShape(), outShape = getType().getShape();
  auto perm = getPerm();
  return gatherElements(*in, getType(), [&](int64_t i) {
    auto c = coordinates(outShape, i);
    llvm::SmallVector<int64_t> src(inShape.size());
    for (size_t d = 0; d < perm.size(); ++d)
      src[perm[d]] = c[d];
    return linearIndex(inShape, src);
  });
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  // A forward slice of every element (with a positive step only start 0 and step 1 keep a dim's size); a
  // backward one of the same shape reverses.
  if (getInput().getType() == getType() && llvm::all_of(getSteps(), [](int64_t step) { return step > 0; }))
    return getInput();
  if (Attribute splat = resizedSplat(adaptor.getInput(), getType()))
    return splat;
  auto in = read(adaptor.getInput());
  if (!in)
    return {};
  auto inShape = getInput().getType().getShape(), outShape = getType().getShape();
  auto starts = getStarts(), steps = getSteps();
  return gatherElements(*in, getType(), [&](int64_t i) {
    auto c = coordinates(outShape, i);
    for (size_t d = 0; d < c.size(); ++d)
      c[d] = starts[d] + c[d] * steps[d];
    return linearIndex(inShape, c);
  });
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return getInputs()[0];
  std::vector<Elements> parts;
  for (Attribute a : adaptor.getInputs()) {
    auto e = read(a);
    if (!e)
      return {};
    parts.push_back(std::move(*e));
  }
  if (!withinFoldLimit(getType())) // before anything sized by the result
    return {};
  const int64_t axis = getAxis();
  auto outShape = getType().getShape();
  // Where each part starts along the axis (no table per position: an empty result can have an axis of 2^40).
  std::vector<int64_t> starts{0};
  for (const auto &part : parts)
    starts.push_back(starts.back() + part.type.getDimSize(axis));
  const size_t width = k::elementBytes(parts[0].element);
  std::vector<char> bytes(getType().getNumElements() * width);
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    auto c = coordinates(outShape, i);
    const size_t p = std::upper_bound(starts.begin(), starts.end(), c[axis]) - starts.begin() - 1;
    c[axis] -= starts[p];
    const int64_t src = parts[p].splat ? 0 : linearIndex(parts[p].type.getShape(), c);
    std::memcpy(bytes.data() + i * width, parts[p].bytes.data() + src * width, width);
  }
  return write(getType(), bytes, false);
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  auto data = read(adaptor.getData());
  auto indices = read(adaptor.getIndices());
  if (!data || !indices)
    return {};
  const int64_t axis = getAxis(), dim = getData().getType().getDimSize(axis);
  const int64_t numIndices = getIndices().getType().getNumElements();
  for (int64_t j = 0; j < (indices->splat ? 1 : numIndices); ++j) {
    int64_t id = k::loadInt(indices->data(), indices->element, j);
    if (id < -dim || id >= dim)
      return {}; // the run reports it, naming the step
  }
  if (data->splat)
    return resizedSplat(adaptor.getData(), getType());
  auto dataShape = getData().getType().getShape();
  const int64_t indexRank = getIndices().getType().getRank();
  return gatherElements(*data, getType(), [&](int64_t i) {
    auto c = coordinates(getType().getShape(), i);
    // Result coordinates: data dims before axis, the index's dims, data dims after axis.
    int64_t indexLinear = linearIndex(getIndices().getType().getShape(), ArrayRef(c).slice(axis, indexRank));
    int64_t id = k::loadInt(indices->data(), indices->element, indices->splat ? 0 : indexLinear);
    llvm::SmallVector<int64_t> src(c.begin(), c.begin() + axis);
    src.push_back(id < 0 ? id + dim : id);
    src.append(c.begin() + axis + indexRank, c.end());
    return linearIndex(dataShape, src);
  });
}


OpFoldResult CumSumOp::fold(FoldAdaptor adaptor) {
  auto in = read(adaptor.getInput());
  if (!in || !withinFoldLimit(getType()))
    return {};
  auto shape = getType().getShape();
  const int64_t axis = getAxis(), dim = shape[axis];
  const int64_t inner = *shape::elementCount(shape.drop_front(axis + 1));
  const int64_t lines = dim ? getType().getNumElements() / dim : 0;
  std::vector<char> bytes(getType().getNumElements() * k::elementBytes(in->element));
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t start = k::lineStart(line, dim, inner);
    auto at = [&](int64_t j) { return start + j * inner; };
    auto source = [&](int64_t j) { return in->splat ? 0 : at(j); };
    if (isFloatElement(in->element))
      k::cumSumLine<float>([&](int64_t j) { return loadFloat(*in, source(j)); },
                           [&](int64_t j, float v) { k::storeFromDouble(bytes.data(), in->element, at(j), v); }, dim,
                           getExclusive(), getReverse());
    else
      k::cumSumLine<int64_t>([&](int64_t j) { return k::loadInt(in->data(), in->element, source(j)); },
                             [&](int64_t j, int64_t v) { storeInt(bytes.data(), in->element, at(j), v); }, dim,
                             getExclusive(), getReverse());
  }
  return write(getType(), bytes, false);
}

namespace {

struct ScalarSplatOperand : RewritePattern {
  ScalarSplatOperand(StringRef opName, MLIRContext *context) : RewritePattern(opName, 1, context) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    auto shapeOf = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape(); };
    for (unsigned i = 0; i < 2; ++i) {
      Value operand = op->getOperand(i);
      auto constant = operand.getDefiningOp<ConstantOp>();
      auto splat = constant ? llvm::dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
      if (!splat || !splat.isSplat() || shapeOf(operand).empty() ||
          shapeOf(op->getOperand(1 - i)) != shapeOf(op->getResult(0)))
        continue;
      auto scalarType = RankedTensorType::get({}, splat.getElementType());
      Value scalar = rewriter.create<ConstantOp>(constant.getLoc(), scalarType,
                                                 DenseElementsAttr::get(scalarType, splat.getSplatValue<Attribute>()));
      rewriter.modifyOpInPlace(op, [&] { op->setOperand(i, scalar); });
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no full-size splat operand");
  }
};

RankedTensorType rankedType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// binary(expand(x), y) -> binary(x, y) where broadcasting x with y already gives the result's shape: the
/// op broadcasts, the expanded copy is never made.
struct BroadcastExpandedOperand : RewritePattern {
  BroadcastExpandedOperand(StringRef opName, MLIRContext *context) : RewritePattern(opName, 1, context) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    for (unsigned i = 0; i < 2; ++i) {
      auto expand = op->getOperand(i).getDefiningOp<ExpandOp>();
      if (!expand)
        continue;
      auto shape = shape::broadcast(rankedType(expand.getInput()).getShape(), rankedType(op->getOperand(1 - i)).getShape());
      if (!shape || ArrayRef<int64_t>(*shape) != rankedType(op->getResult(0)).getShape())
        continue;
      rewriter.modifyOpInPlace(op, [&] { op->setOperand(i, expand.getInput()); });
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no expanded operand the op could broadcast");
  }
};

/// binary(expand(x), s) -> expand(binary(x, s)) where s broadcasts into x: a gradient of a mean (an expanded
/// scalar times 1/N, times a loss scale) stays a scalar until the op that needs its full shape.
struct SinkExpand : RewritePattern {
  SinkExpand(StringRef opName, MLIRContext *context) : RewritePattern(opName, 1, context) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    for (unsigned i = 0; i < 2; ++i) {
      auto expand = op->getOperand(i).getDefiningOp<ExpandOp>();
      Value other = op->getOperand(1 - i);
      if (!expand || rankedType(op->getResult(0)).getShape() != expand.getType().getShape())
        continue;
      auto small = rankedType(expand.getInput());
      auto shape = shape::broadcast(small.getShape(), rankedType(other).getShape());
      if (!shape || ArrayRef<int64_t>(*shape) != small.getShape())
        continue;
      SmallVector<Value> operands{expand.getInput(), other};
      if (i == 1)
        std::swap(operands[0], operands[1]);
      auto resultType = small.clone(rankedType(op->getResult(0)).getElementType());
      Operation *narrow = rewriter.create(op->getLoc(), op->getName().getIdentifier(), operands, TypeRange{resultType},
                                          op->getAttrs());
      rewriter.replaceOpWithNewOp<ExpandOp>(op, op->getResult(0).getType(), narrow->getResult(0));
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no expanded operand beside a broadcast one");
  }
};

} // namespace

void addScalarSplatOperandPattern(RewritePatternSet &patterns, MLIRContext *context, StringRef opName) {
  patterns.add<ScalarSplatOperand, BroadcastExpandedOperand, SinkExpand>(opName, context);
}

} // namespace tec
