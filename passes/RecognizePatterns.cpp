#include "passes/Matchers.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tec {
#define GEN_PASS_DEF_TECRECOGNIZEPATTERNS
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// The factors of a product: single-use tec.mul chains are flattened, so x * 0.5 * (1 + erf(...)) in
/// any association and operand order gives the same three factors.
void collectFactors(Value v, SmallVectorImpl<Value> &factors, SmallVectorImpl<Operation *> &muls, bool root) {
  auto mul = v.getDefiningOp<MulOp>();
  if (mul && (root || absorbable(v))) {
    muls.push_back(mul);
    collectFactors(mul.getLhs(), factors, muls, false);
    collectFactors(mul.getRhs(), factors, muls, false);
    return;
  }
  factors.push_back(v);
}

/// `v` is 1 + f(...) with `f` the defining op of the other operand, in either order.
template <typename Inner> Inner onePlus(Value v, Operation *&add) {
  auto a = v.getDefiningOp<AddOp>();
  if (!a || !absorbable(v))
    return nullptr;
  add = a;
  for (auto [one, other] : {std::pair{a.getLhs(), a.getRhs()}, std::pair{a.getRhs(), a.getLhs()}})
    if (isConstant(one, 1.0))
      if (auto inner = other.template getDefiningOp<Inner>(); inner && absorbable(other))
        return inner;
  return nullptr;
}

/// `v` is x / sqrt(2) or x * (1/sqrt(2)), operands in either order for the product.
bool isScaledBySqrtHalf(Value v, Value x, SmallVectorImpl<Operation *> &matched) {
  if (!absorbable(v))
    return false;
  if (auto div = v.getDefiningOp<DivOp>(); div && div.getLhs() == x && isConstant(div.getRhs(), std::sqrt(2.0))) {
    matched.push_back(div);
    return true;
  }
  if (auto mul = v.getDefiningOp<MulOp>())
    for (auto [a, b] : {std::pair{mul.getLhs(), mul.getRhs()}, std::pair{mul.getRhs(), mul.getLhs()}})
      if (a == x && isConstant(b, std::sqrt(0.5))) {
        matched.push_back(mul);
        return true;
      }
  return false;
}

/// `v` is x^3: pow(x, 3), x * (x * x) or (x * x) * x.
bool isCube(Value v, Value x, SmallVectorImpl<Operation *> &matched) {
  if (!absorbable(v))
    return false;
  if (auto pow = v.getDefiningOp<PowOp>(); pow && pow.getLhs() == x && isConstant(pow.getRhs(), 3.0)) {
    matched.push_back(pow);
    return true;
  }
  auto mul = v.getDefiningOp<MulOp>();
  if (!mul)
    return false;
  for (auto [a, b] : {std::pair{mul.getLhs(), mul.getRhs()}, std::pair{mul.getRhs(), mul.getLhs()}})
    if (auto sq = b.getDefiningOp<MulOp>(); a == x && sq && absorbable(b) && sq.getLhs() == x && sq.getRhs() == x) {
      matched.append({mul, sq});
      return true;
    }
  return false;
}

/// `v` is sqrt(2/pi) * (x + 0.044715 * x^3), products and sums in any operand order.
bool isTanhArgument(Value v, Value x, SmallVectorImpl<Operation *> &matched) {
  auto outer = v.getDefiningOp<MulOp>();
  if (!outer || !absorbable(v))
    return false;
  for (auto [c, inner] : {std::pair{outer.getLhs(), outer.getRhs()}, std::pair{outer.getRhs(), outer.getLhs()}}) {
    auto sum = inner.getDefiningOp<AddOp>();
    if (!isConstant(c, std::sqrt(2.0 / M_PI)) || !sum || !absorbable(inner))
      continue;
    for (auto [lin, cubic] : {std::pair{sum.getLhs(), sum.getRhs()}, std::pair{sum.getRhs(), sum.getLhs()}}) {
      auto scaled = cubic.getDefiningOp<MulOp>();
      if (lin != x || !scaled || !absorbable(cubic))
        continue;
      for (auto [k, cube] :
           {std::pair{scaled.getLhs(), scaled.getRhs()}, std::pair{scaled.getRhs(), scaled.getLhs()}}) {
        SmallVector<Operation *> cubeOps;
        if (isConstant(k, 0.044715) && isCube(cube, x, cubeOps)) {
          matched.append({outer, sum, scaled});
          matched.append(cubeOps);
          return true;
        }
      }
    }
  }
  return false;
}

/// `v` is the same argument factored as BLOOM and Falcon's gelu write it: sqrt(2/pi) * x * (1 + 0.044715 * x * x),
/// factors in any association and order.
bool isFactoredTanhArgument(Value v, Value x, SmallVectorImpl<Operation *> &matched) {
  if (!v.getDefiningOp<MulOp>() || !absorbable(v))
    return false;
  SmallVector<Value> factors;
  SmallVector<Operation *> muls;
  collectFactors(v, factors, muls, /*root=*/true);
  if (factors.size() != 3 || llvm::count(factors, x) != 1)
    return false;
  auto c = llvm::find_if(factors, [](Value f) { return isConstant(f, std::sqrt(2.0 / M_PI)); });
  auto sum = llvm::find_if(factors, [&](Value f) { return f != x && !isConstant(f, std::sqrt(2.0 / M_PI)); });
  if (c == factors.end() || sum == factors.end())
    return false;
  auto add = sum->getDefiningOp<AddOp>();
  if (!add || !absorbable(*sum))
    return false;
  for (auto [one, rest] : {std::pair{add.getLhs(), add.getRhs()}, std::pair{add.getRhs(), add.getLhs()}}) {
    if (!isConstant(one, 1.0) || !rest.getDefiningOp<MulOp>() || !absorbable(rest))
      continue;
    SmallVector<Value> inner;
    SmallVector<Operation *> innerMuls;
    collectFactors(rest, inner, innerMuls, /*root=*/true);
    if (inner.size() == 3 && llvm::count(inner, x) == 2 &&
        llvm::any_of(inner, [](Value f) { return isConstant(f, 0.044715); })) {
      matched.append(muls);
      matched.push_back(add);
      matched.append(innerMuls);
      return true;
    }
  }
  return false;
}

/// GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt(2))) or, for the tanh approximation,
/// x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) or its factored form, in any association and
/// operand order.
struct RecognizeGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rewriter) const override {
    SmallVector<Value> factors;
    SmallVector<Operation *> matched;
    collectFactors(root, factors, matched, /*root=*/true);
    if (factors.size() != 3)
      return rewriter.notifyMatchFailure(root, "not a product of three factors");
    auto half = llvm::find_if(factors, [](Value f) { return isConstant(f, 0.5); });
    if (half == factors.end())
      return rewriter.notifyMatchFailure(root, "no 0.5 factor");
    factors.erase(half);
    for (auto [x, rest] : {std::pair{factors[0], factors[1]}, std::pair{factors[1], factors[0]}}) {
      if (x.getType() != root.getType())
        continue;
      SmallVector<Operation *> ops(matched);
      Operation *add = nullptr;
      if (auto erf = onePlus<ErfOp>(rest, add); erf && isScaledBySqrtHalf(erf.getInput(), x, ops)) {
        ops.append({add, erf});
        return replace(root, x, "none", ops, rewriter);
      }
      if (auto tanh = onePlus<TanhOp>(rest, add);
          tanh && (isTanhArgument(tanh.getInput(), x, ops) || isFactoredTanhArgument(tanh.getInput(), x, ops))) {
        ops.append({add, tanh});
        return replace(root, x, "tanh", ops, rewriter);
      }
    }
    return rewriter.notifyMatchFailure(root, "not the erf or tanh GELU formula");
  }

  static LogicalResult replace(MulOp root, Value x, StringRef approximate, ArrayRef<Operation *> ops,
                               PatternRewriter &rewriter) {
    SmallVector<Location> locs;
    for (Operation *op : ops)
      locs.push_back(op->getLoc());
    rewriter.replaceOpWithNewOp<GeluOp>(root, root.getType(), x, rewriter.getStringAttr(approximate))
        ->setLoc(rewriter.getFusedLoc(locs));
    return success();
  }
};

/// SiLU (Llama's MLP, SwiGLU's gate) as exporters write it: x * sigmoid(x), in either operand order.
struct RecognizeSilu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rewriter) const override {
    for (auto [x, gate] : {std::pair{root.getLhs(), root.getRhs()}, std::pair{root.getRhs(), root.getLhs()}}) {
      auto sigmoid = gate.getDefiningOp<SigmoidOp>();
      if (!sigmoid || sigmoid.getInput() != x || x.getType() != root.getType() || !absorbable(gate))
        continue;
      Location loc = rewriter.getFusedLoc({sigmoid.getLoc(), root.getLoc()});
      rewriter.replaceOpWithNewOp<SiluOp>(root, root.getType(), x)->setLoc(loc);
      return success();
    }
    return rewriter.notifyMatchFailure(root, "not x * sigmoid(x)");
  }
};

/// SwiGLU's gating (Llama's MLP): silu(gate) * up, in either operand order, without broadcasting.
struct RecognizeSwiglu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rewriter) const override {
    for (auto [gated, up] : {std::pair{root.getLhs(), root.getRhs()}, std::pair{root.getRhs(), root.getLhs()}}) {
      auto silu = gated.getDefiningOp<SiluOp>();
      if (!silu || !absorbable(gated) || gated.getType() != root.getType() || up.getType() != root.getType())
        continue;
      Location loc = rewriter.getFusedLoc({silu.getLoc(), root.getLoc()});
      rewriter.replaceOpWithNewOp<SwigluOp>(root, root.getType(), silu.getInput(), up)->setLoc(loc);
      return success();
    }
    return rewriter.notifyMatchFailure(root, "not silu(gate) * up");
  }
};

/// `v` is x^2: Pow(x, 2) or x * x; the op is appended to `ops`.
bool isSquareOf(Value v, Value x, SmallVectorImpl<Operation *> &ops) {
  Operation *square = v.getDefiningOp();
  bool squares = (llvm::isa_and_nonnull<PowOp>(square) && square->getOperand(0) == x &&
                  isConstant(square->getOperand(1), 2.0)) ||
                 (llvm::isa_and_nonnull<MulOp>(square) && square->getOperand(0) == x && square->getOperand(1) == x);
  if (!squares || !absorbable(v))
    return false;
  ops.push_back(square);
  return true;
}

/// The dims reduced by a mean over the trailing dims from `axis` with kept dims, or nullopt.
std::optional<int64_t> trailingMeanAxis(ReduceMeanOp mean) {
  auto axes = mean.getAxes();
  int64_t rank = mean.getInput().getType().getRank();
  if (!mean.getKeepdims() || axes.empty() || axes.back() != rank - 1)
    return std::nullopt;
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1)
      return std::nullopt;
  return axes.front();
}

/// LayerNorm as exporters write it: (x - mean) / sqrt(mean((x - mean)^2) + eps) * gamma + beta, over
/// trailing dims, with the square as Pow(d, 2) or d * d and products and sums in any operand order.
struct RecognizeLayerNorm : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp root, PatternRewriter &rewriter) const override {
    for (auto [scaled, beta] : {std::pair{root.getLhs(), root.getRhs()}, std::pair{root.getRhs(), root.getLhs()}}) {
      auto mulGamma = scaled.getDefiningOp<MulOp>();
      if (!mulGamma || !absorbable(scaled))
        continue;
      for (auto [norm, gamma] :
           {std::pair{mulGamma.getLhs(), mulGamma.getRhs()}, std::pair{mulGamma.getRhs(), mulGamma.getLhs()}}) {
        SmallVector<Operation *> ops{root, mulGamma};
        if (auto n = matchNormalized(norm, ops); n && fits(*n, gamma, beta, root))
          return replace(root, *n, gamma, beta, ops, rewriter);
      }
    }
    return rewriter.notifyMatchFailure(root, "not (x - mean) / sqrt(var + eps) * gamma + beta");
  }

  struct Normalized {
    Value x;
    float epsilon;
    int64_t axis;
  };

  /// On a match, what is normalized and how; `ops` collects the matched ops.
  static std::optional<Normalized> matchNormalized(Value norm, SmallVectorImpl<Operation *> &ops) {
    auto div = norm.getDefiningOp<DivOp>();
    if (!div || !absorbable(norm))
      return std::nullopt;
    auto centered = div.getLhs().getDefiningOp<SubOp>();
    auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
    if (!centered || !sqrt || !absorbable(div.getRhs()))
      return std::nullopt;
    auto mean = centered.getRhs().getDefiningOp<ReduceMeanOp>();
    Value x = centered.getLhs();
    if (!mean || mean.getInput() != x)
      return std::nullopt;
    auto axis = trailingMeanAxis(mean);
    auto addEps = sqrt.getInput().getDefiningOp<AddOp>();
    if (!axis || !addEps || !absorbable(sqrt.getInput()))
      return std::nullopt;
    for (auto [varValue, epsValue] :
         {std::pair{addEps.getLhs(), addEps.getRhs()}, std::pair{addEps.getRhs(), addEps.getLhs()}}) {
      auto var = varValue.getDefiningOp<ReduceMeanOp>();
      auto eps = splatConstant(epsValue);
      if (!var || !eps || *eps <= 0 || var.getAxes() != mean.getAxes() || !var.getKeepdims() || !absorbable(varValue))
        continue;
      SmallVector<Operation *> square;
      if (!isSquareOf(var.getInput(), centered, square))
        continue;
      // `centered` feeds the square and the division, and nothing else.
      if (!llvm::all_of(centered->getUsers(), [&](Operation *u) { return u == square.front() || u == div; }))
        continue;
      ops.append({div, centered, sqrt, addEps, var, square.front(), mean});
      return Normalized{x, static_cast<float>(*eps), *axis};
    }
    return std::nullopt;
  }

  /// gamma and beta have the normalized shape and x's type; the result keeps x's type.
  static bool fits(const Normalized &n, Value gamma, Value beta, AddOp root) {
    auto type = llvm::cast<RankedTensorType>(n.x.getType());
    auto normalized = type.getShape().drop_front(n.axis);
    auto ok = [&](Value v) {
      auto t = llvm::cast<RankedTensorType>(v.getType());
      return t.getShape() == normalized && t.getElementType() == type.getElementType();
    };
    return root.getType() == type && ok(gamma) && ok(beta) && !llvm::isa<IntegerType>(type.getElementType());
  }

  static LogicalResult replace(AddOp root, const Normalized &n, Value gamma, Value beta, ArrayRef<Operation *> ops,
                               PatternRewriter &rewriter) {
    auto type = llvm::cast<RankedTensorType>(n.x.getType());
    shape::Dims statsShape(type.getShape().take_front(n.axis));
    statsShape.resize(type.getRank(), 1);
    auto stats = RankedTensorType::get(statsShape, rewriter.getF32Type());
    SmallVector<Location> locs;
    for (Operation *op : ops)
      locs.push_back(op->getLoc());
    auto ln = rewriter.create<LayerNormOp>(rewriter.getFusedLoc(locs), TypeRange{type, stats, stats}, n.x, gamma,
                                           beta, rewriter.getI64IntegerAttr(n.axis), rewriter.getF32FloatAttr(n.epsilon));
    rewriter.replaceOp(root, ln.getResult());
    return success();
  }
};

/// RMSNorm as exporters write it (Llama's `x * rsqrt(mean(x^2) + eps) * w`): the scale on either side,
/// the square as Pow(x, 2) or x * x, the inverse root as Reciprocal(Sqrt(v)), 1 / Sqrt(v), Pow(v, -0.5)
/// or a division of x by Sqrt(v); the mean over trailing dims with kept dims.
struct RecognizeRmsNorm : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rewriter) const override {
    for (auto [norm, scale] : {std::pair{root.getLhs(), root.getRhs()}, std::pair{root.getRhs(), root.getLhs()}}) {
      SmallVector<Operation *> ops{root};
      if (auto n = matchNormalized(norm, ops); n && fits(*n, scale, root))
        return replace(root, *n, scale, ops, rewriter);
    }
    return rewriter.notifyMatchFailure(root, "not x * rsqrt(mean(x^2) + eps) * scale");
  }

  struct Normalized {
    Value x;
    float epsilon;
    int64_t axis;
  };

  /// x * rsqrt(v) in either order, or x / sqrt(v), with v = mean(x^2) + eps.
  static std::optional<Normalized> matchNormalized(Value norm, SmallVectorImpl<Operation *> &ops) {
    if (!absorbable(norm))
      return std::nullopt;
    if (auto div = norm.getDefiningOp<DivOp>()) {
      auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
      if (!sqrt || !absorbable(div.getRhs()))
        return std::nullopt;
      ops.append({div, sqrt});
      return matchMeanSquare(sqrt.getInput(), div.getLhs(), ops);
    }
    auto mul = norm.getDefiningOp<MulOp>();
    if (!mul)
      return std::nullopt;
    for (auto [x, inverse] : {std::pair{mul.getLhs(), mul.getRhs()}, std::pair{mul.getRhs(), mul.getLhs()}}) {
      SmallVector<Operation *> tried{mul};
      if (auto v = inverseSqrtOf(inverse, tried))
        if (auto n = matchMeanSquare(*v, x, tried)) {
          ops.append(tried);
          return n;
        }
    }
    return std::nullopt;
  }

  /// The v of `inverse` = 1 / sqrt(v) as Reciprocal(Sqrt(v)), Div(1, Sqrt(v)) or Pow(v, -0.5).
  static std::optional<Value> inverseSqrtOf(Value inverse, SmallVectorImpl<Operation *> &ops) {
    if (!absorbable(inverse))
      return std::nullopt;
    Operation *op = inverse.getDefiningOp();
    if (auto pow = llvm::dyn_cast_or_null<PowOp>(op); pow && isConstant(pow.getRhs(), -0.5)) {
      ops.push_back(pow);
      return pow.getLhs();
    }
    Value root;
    if (auto reciprocal = llvm::dyn_cast_or_null<ReciprocalOp>(op))
      root = reciprocal.getInput();
    else if (auto div = llvm::dyn_cast_or_null<DivOp>(op); div && isConstant(div.getLhs(), 1.0))
      root = div.getRhs();
    auto sqrt = root ? root.getDefiningOp<SqrtOp>() : nullptr;
    if (!sqrt || !absorbable(root))
      return std::nullopt;
    ops.append({op, sqrt});
    return sqrt.getInput();
  }

  /// v = mean(x^2) + eps over trailing dims, the sum in either order.
  static std::optional<Normalized> matchMeanSquare(Value v, Value x, SmallVectorImpl<Operation *> &ops) {
    auto addEps = v.getDefiningOp<AddOp>();
    if (!addEps || !absorbable(v))
      return std::nullopt;
    for (auto [meanValue, epsValue] :
         {std::pair{addEps.getLhs(), addEps.getRhs()}, std::pair{addEps.getRhs(), addEps.getLhs()}}) {
      auto mean = meanValue.getDefiningOp<ReduceMeanOp>();
      auto eps = splatConstant(epsValue);
      auto axis = mean ? trailingMeanAxis(mean) : std::nullopt;
      SmallVector<Operation *> square;
      if (!axis || !eps || *eps <= 0 || !absorbable(meanValue) || !isSquareOf(mean.getInput(), x, square))
        continue;
      ops.append({addEps, mean, square.front()});
      return Normalized{x, static_cast<float>(*eps), *axis};
    }
    return std::nullopt;
  }

  /// The scale has the normalized shape and x's type; the result keeps x's type.
  static bool fits(const Normalized &n, Value scale, MulOp root) {
    auto type = llvm::cast<RankedTensorType>(n.x.getType());
    auto s = llvm::cast<RankedTensorType>(scale.getType());
    return root.getType() == type && s.getShape() == type.getShape().drop_front(n.axis) &&
           s.getElementType() == type.getElementType() && !llvm::isa<IntegerType>(type.getElementType());
  }

  static LogicalResult replace(MulOp root, const Normalized &n, Value scale, ArrayRef<Operation *> ops,
                               PatternRewriter &rewriter) {
    auto type = llvm::cast<RankedTensorType>(n.x.getType());
    shape::Dims statsShape(type.getShape().take_front(n.axis));
    statsShape.resize(type.getRank(), 1);
    SmallVector<Location> locs;
    for (Operation *op : ops)
      locs.push_back(op->getLoc());
    auto rms = rewriter.create<RmsNormOp>(rewriter.getFusedLoc(locs),
                                          TypeRange{type, RankedTensorType::get(statsShape, rewriter.getF32Type())},
                                          n.x, scale, rewriter.getI64IntegerAttr(n.axis),
                                          rewriter.getF32FloatAttr(n.epsilon));
    rewriter.replaceOp(root, rms.getResult());
    return success();
  }
};

/// Grouped-query attention repeats each K/V head for the query heads that share it (HF's repeat_kv:
/// Unsqueeze, Expand to [..., G, r, A, B], Reshape to [..., G*r, A, B]). x [..., G*r, M, K] times that
/// repeat of u is x seen as [..., G, r*M, K] times u itself, so the r copies of every K and V head are
/// never made and each group's query heads share one larger GEMM. A transpose of the last two dims between
/// the repeat and the matmul (K^T) moves onto u.
struct ShareRepeatedHeads : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp mm, PatternRewriter &rewriter) const override {
    Value rhs = mm.getRhs();
    auto transpose = rhs.getDefiningOp<TransposeOp>();
    if (transpose && (!swapsLastTwo(transpose.getPerm()) || !absorbable(rhs)))
      return rewriter.notifyMatchFailure(mm, "a transpose other than K^T");
    if (transpose)
      rhs = transpose.getInput();
    auto repeat = matchRepeatedHeads(rhs);
    if (!repeat)
      return rewriter.notifyMatchFailure(mm, "the right operand is not a repeat of heads");
    Value u = repeat->source;
    auto ut = llvm::cast<RankedTensorType>(u.getType()), rt = llvm::cast<RankedTensorType>(rhs.getType());
    auto xt = llvm::cast<RankedTensorType>(mm.getLhs().getType()), ot = llvm::cast<RankedTensorType>(mm.getType());
    const int64_t rank = rt.getRank(), g = rank - 3; // u: [prefix, G, 1, A, B]; the repeat: [prefix, G*r, A, B]
    const int64_t groups = repeat->groups, repeats = repeat->repeats;
    if (xt.getRank() != rank || ot.getRank() != rank || xt.getShape().take_front(g + 1) != rt.getShape().take_front(g + 1))
      return rewriter.notifyMatchFailure(mm, "the other operand's heads do not line up with the repeat");
    ExpandOp expand = repeat->expand;
    ReshapeOp reshape = repeat->reshape;
    SmallVector<Location> locs{expand.getLoc(), reshape.getLoc(), mm.getLoc()};
    if (transpose)
      locs.push_back(transpose.getLoc());
    Location loc = rewriter.getFusedLoc(locs);
    shape::Dims heads(ut.getShape());
    heads.erase(heads.begin() + g + 1);
    Value shared = rewriter.create<ReshapeOp>(loc, RankedTensorType::get(heads, ut.getElementType()), u);
    if (transpose) {
      std::swap(heads[rank - 2], heads[rank - 1]);
      shared = rewriter.create<TransposeOp>(loc, RankedTensorType::get(heads, ut.getElementType()), shared,
                                            transpose.getPerm());
    }
    shape::Dims grouped(xt.getShape().take_front(g)), product(xt.getShape().take_front(g));
    grouped.append({groups, repeats * xt.getDimSize(g + 1), xt.getDimSize(g + 2)});
    product.append({groups, repeats * xt.getDimSize(g + 1), ot.getDimSize(g + 2)});
    Value x = rewriter.create<ReshapeOp>(loc, RankedTensorType::get(grouped, xt.getElementType()), mm.getLhs());
    Value y = rewriter.create<MatMulOp>(loc, RankedTensorType::get(product, ot.getElementType()), x, shared);
    rewriter.replaceOpWithNewOp<ReshapeOp>(mm, ot, y)->setLoc(loc);
    return success();
  }
};

struct TecRecognizePatterns : tec::impl::TecRecognizePatternsBase<TecRecognizePatterns> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<RecognizeGelu, RecognizeLayerNorm, RecognizeRmsNorm, RecognizeSilu, RecognizeSwiglu,
                 ShareRepeatedHeads>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
