#include "passes/Matchers.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/SetVector.h"

namespace tec {
#define GEN_PASS_DEF_TECRECOGNIZEATTENTION
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// A fill at or below this hides a key as -inf does: e^(fill - max) is 0 in f32 against any row maximum
/// above fill + 104 (HF's finfo(float32).min, masked_fill(-1e9), BERT's -10000). Only a row whose every
/// key is hidden differs: NaN, as PyTorch's scaled_dot_product_attention gives it, not a uniform average.
constexpr double kHiddenFill = -1e4;

/// What the scores of a decomposed attention are made of.
struct Scores {
  Value query, keyTransposed; // the matmul's operands, scale factors peeled off
  double scale = 1.0;
  SmallVector<Value> additive; // float masks added to the scores
  Value keep;                  // a boolean mask (Where(keep, scores, -inf))
  SmallVector<Operation *> ops;
};

/// The scores chain below a softmax: Mul/Div by constants, Adds of masks, a Where with a hiding fill, down
/// to Q·K^T; each link read only by the next. `scores` is the chain's type, which every link keeps.
bool matchScores(Value v, RankedTensorType scores, Scores &s) {
  if (v.getType() != scores || !absorbable(v))
    return false;
  Operation *op = v.getDefiningOp();
  if (auto mm = llvm::dyn_cast_or_null<MatMulOp>(op)) {
    s.ops.push_back(mm);
    s.query = mm.getLhs();
    s.keyTransposed = mm.getRhs();
    // Exporters of scaled_dot_product_attention scale Q and K^T by sqrt(scale) each.
    for (Value *operand : {&s.query, &s.keyTransposed})
      if (auto mul = operand->getDefiningOp<MulOp>(); mul && absorbable(*operand))
        for (auto [x, c] : {std::pair{mul.getLhs(), mul.getRhs()}, std::pair{mul.getRhs(), mul.getLhs()}})
          if (auto factor = splatConstant(c); factor && x.getType() == operand->getType()) {
            s.scale *= *factor;
            s.ops.push_back(mul);
            *operand = x;
            break;
          }
    return true;
  }
  if (auto mul = llvm::dyn_cast_or_null<MulOp>(op))
    for (auto [x, c] : {std::pair{mul.getLhs(), mul.getRhs()}, std::pair{mul.getRhs(), mul.getLhs()}})
      if (auto factor = splatConstant(c)) {
        s.scale *= *factor;
        s.ops.push_back(mul);
        return matchScores(x, scores, s);
      }
  if (auto div = llvm::dyn_cast_or_null<DivOp>(op))
    if (auto divisor = splatConstant(div.getRhs()); divisor && *divisor != 0) {
      s.scale /= *divisor;
      s.ops.push_back(div);
      return matchScores(div.getLhs(), scores, s);
    }
  if (auto add = llvm::dyn_cast_or_null<AddOp>(op))
    for (auto [x, mask] : {std::pair{add.getLhs(), add.getRhs()}, std::pair{add.getRhs(), add.getLhs()}}) {
      Scores tried = s;
      tried.ops.push_back(add);
      tried.additive.push_back(mask);
      if (matchScores(x, scores, tried)) {
        s = std::move(tried);
        return true;
      }
    }
  if (auto where = llvm::dyn_cast_or_null<WhereOp>(op)) {
    auto fill = splatConstant(where.getY());
    if (s.keep || !fill || *fill > kHiddenFill)
      return false;
    s.keep = where.getCondition();
    s.ops.push_back(where);
    return matchScores(where.getX(), scores, s);
  }
  return false;
}

/// True when `v` is computed from a trainable parameter: such a mask (a learned position bias) needs its
/// gradient, which tec.attention does not give, so the attention stays decomposed.
bool dependsOnTrainedParam(Value v, func::FuncOp f) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (auto arg = llvm::dyn_cast<BlockArgument>(x)) {
      if (f.getArgAttr(arg.getArgNumber(), kParamAttrName) && !f.getArgAttr(arg.getArgNumber(), kFrozenAttrName))
        return true;
      continue;
    }
    if (Operation *op = x.getDefiningOp(); op && seen.insert(op).second)
      llvm::append_range(work, op->getOperands());
  }
  return false;
}

/// The causal rule as a constant mask: every [queries, keys] slice is lower-triangular (key j kept for
/// query i iff j <= i), as a boolean or as 0 kept / a hiding fill.
bool isCausalConstant(Value mask, int64_t queries, int64_t keys) {
  auto constant = mask.getDefiningOp<ConstantOp>();
  auto type = llvm::cast<RankedTensorType>(mask.getType());
  if (!constant || type.getRank() < 2 || type.getDimSize(type.getRank() - 2) != queries ||
      type.getDimSize(type.getRank() - 1) != keys)
    return false;
  auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || dense.isSplat())
    return false;
  auto keptAt = [&](int64_t index) { return index % keys <= index / keys % queries; };
  if (type.getElementType().isInteger(1)) {
    for (auto [i, keep] : llvm::enumerate(dense.getValues<bool>()))
      if (keep != keptAt(i))
        return false;
    return true;
  }
  if (!llvm::isa<FloatType>(type.getElementType()))
    return false;
  for (auto [i, value] : llvm::enumerate(dense.getValues<APFloat>())) {
    const double x = value.convertToDouble();
    if (keptAt(i) ? x != 0.0 : x > kHiddenFill)
      return false;
  }
  return true;
}

/// `v` [lead..., T, D] (rank >= 2) as [B, H, T, D]: H the last lead dim, B the product of the others.
shape::Dims asFourDims(ArrayRef<int64_t> dims) {
  const int64_t rank = dims.size();
  int64_t batch = 1;
  for (int64_t d = 0; d + 3 < rank; ++d)
    batch *= dims[d];
  return {batch, rank >= 3 ? dims[rank - 3] : 1, dims[rank - 2], dims[rank - 1]};
}

Value reshapeTo(PatternRewriter &rewriter, Location loc, Value v, ArrayRef<int64_t> dims) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  if (type.getShape() == dims)
    return v;
  return rewriter.create<ReshapeOp>(loc, RankedTensorType::get(dims, type.getElementType()), v);
}

/// K from K^T: the transpose that made K^T composed with the swap of the last two dims (nothing at all
/// when they cancel), or a transpose added.
Value untransposed(PatternRewriter &rewriter, Location loc, Value keyTransposed) {
  auto type = llvm::cast<RankedTensorType>(keyTransposed.getType());
  const int64_t rank = type.getRank();
  SmallVector<int64_t> swap = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(swap[rank - 2], swap[rank - 1]);
  shape::Dims dims(type.getShape());
  std::swap(dims[rank - 2], dims[rank - 1]);
  auto keyType = RankedTensorType::get(dims, type.getElementType());
  auto transpose = keyTransposed.getDefiningOp<TransposeOp>();
  if (!transpose || !absorbable(keyTransposed))
    return rewriter.create<TransposeOp>(loc, keyType, keyTransposed, swap);
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    perm.push_back(transpose.getPerm()[swap[d]]);
  if (llvm::equal(perm, llvm::seq<int64_t>(0, rank)))
    return transpose.getInput();
  return rewriter.create<TransposeOp>(loc, keyType, transpose.getInput(), perm);
}

/// K and V repeated per query head (grouped-query attention) by the same factor: the heads they repeat.
std::optional<std::pair<RepeatedHeads, RepeatedHeads>> sharedKvHeads(Value keyTransposed, Value value) {
  auto transpose = keyTransposed.getDefiningOp<TransposeOp>();
  if (!transpose || !absorbable(keyTransposed) || !swapsLastTwo(transpose.getPerm()))
    return std::nullopt;
  auto k = matchRepeatedHeads(transpose.getInput()), v = matchRepeatedHeads(value);
  if (!k || !v || k->groups != v->groups || k->repeats != v->repeats)
    return std::nullopt;
  return std::pair{*k, *v};
}

/// The [..., G, 1, T, D] heads a repeat copies, as [B, G, T, D].
Value repeatedAsFourDims(PatternRewriter &rewriter, Location loc, const RepeatedHeads &r) {
  auto dims = llvm::cast<RankedTensorType>(r.reshape->getResult(0).getType()).getShape();
  shape::Dims heads(dims);
  heads[dims.size() - 3] = r.groups;
  return reshapeTo(rewriter, loc, r.source, asFourDims(heads));
}

/// A mask broadcasting to the scores [lead..., Tq, Tk], as a 4-D one broadcasting to [B, H, Tq, Tk]; the
/// leading dims that [B, H] merges are expanded first where they are neither all 1 nor all full.
Value maskAsFourDims(PatternRewriter &rewriter, Location loc, Value mask, ArrayRef<int64_t> scores) {
  auto type = llvm::cast<RankedTensorType>(mask.getType());
  shape::Dims dims(scores.size() - type.getRank(), 1);
  llvm::append_range(dims, type.getShape());
  const int64_t merged = static_cast<int64_t>(scores.size()) - 3;
  bool allOne = true, allFull = true;
  for (int64_t d = 0; d < merged; ++d) {
    allOne &= dims[d] == 1;
    allFull &= dims[d] == scores[d];
  }
  mask = reshapeTo(rewriter, loc, mask, dims);
  if (!allOne && !allFull) {
    for (int64_t d = 0; d < merged; ++d)
      dims[d] = scores[d];
    mask = rewriter.create<ExpandOp>(loc, RankedTensorType::get(dims, type.getElementType()), mask);
  }
  return reshapeTo(rewriter, loc, mask, asFourDims(dims));
}

/// The dynamo exporter's guard on the probabilities, Where(IsNaN(p), 0, p) (IsNaN as p != p): a row with
/// every key hidden gives 0 instead of NaN. The guarded probabilities' softmax, with the guard's ops.
SoftmaxOp unguarded(Value probs, SmallVectorImpl<Operation *> &ops) {
  auto where = probs.getDefiningOp<WhereOp>();
  auto compare = where ? where.getCondition().getDefiningOp<CompareOp>() : nullptr;
  auto zero = where ? splatConstant(where.getX()) : std::nullopt;
  if (!compare || !zero || *zero != 0.0 || !absorbable(probs) || !absorbable(where.getCondition()))
    return nullptr;
  Value p = where.getY();
  if (compare.getPredicate() != "ne" || compare.getLhs() != p || compare.getRhs() != p ||
      !llvm::all_of(p.getUsers(), [&](Operation *u) { return u == compare || u == where; }))
    return nullptr;
  ops.append({where, compare});
  return p.getDefiningOp<SoftmaxOp>();
}

/// Softmax(scale * Q·K^T + masks) · V, with the scores' scale, additive masks and a hiding Where in any
/// order, becomes tec.attention; a causal constant mask becomes `causal`.
struct RecognizeAttention : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp pv, PatternRewriter &rewriter) const override {
    Scores s;
    s.ops = {pv};
    auto softmax = pv.getLhs().getDefiningOp<SoftmaxOp>();
    const bool guarded = !softmax && (softmax = unguarded(pv.getLhs(), s.ops));
    auto scoresType = softmax ? softmax.getType() : nullptr;
    if (!softmax || (!guarded && !absorbable(pv.getLhs())) || scoresType.getRank() < 2 ||
        softmax.getAxis() != scoresType.getRank() - 1)
      return rewriter.notifyMatchFailure(pv, "not a product of a softmax over the last dim");
    s.ops.push_back(softmax);
    if (!matchScores(softmax.getInput(), scoresType, s))
      return rewriter.notifyMatchFailure(pv, "the softmax's input is not scaled, masked Q·K^T");
    auto q = llvm::cast<RankedTensorType>(s.query.getType()), kt = llvm::cast<RankedTensorType>(s.keyTransposed.getType());
    auto v = pv.getRhs().getType(), o = pv.getType();
    const int64_t rank = scoresType.getRank();
    auto lead = [&](RankedTensorType t) { return t.getShape().drop_back(2); };
    if (q.getRank() != rank || kt.getRank() != rank || v.getRank() != rank || lead(q) != lead(scoresType) ||
        lead(kt) != lead(scoresType) || lead(v) != lead(scoresType))
      return rewriter.notifyMatchFailure(pv, "Q, K^T and V do not share their leading dims");
    if (!llvm::all_of(scoresType.getShape(), [](int64_t d) { return d > 0; }) || v.getDimSize(rank - 1) <= 0 ||
        q.getDimSize(rank - 1) <= 0)
      return rewriter.notifyMatchFailure(pv, "an empty dim");
    auto f = pv->getParentOfType<func::FuncOp>();
    const int64_t queries = scoresType.getDimSize(rank - 2), keys = scoresType.getDimSize(rank - 1);
    bool causal = false;
    SmallVector<Value> additive;
    for (Value m : s.additive) {
      if (dependsOnTrainedParam(m, f))
        return rewriter.notifyMatchFailure(pv, "a mask computed from a trained parameter needs its gradient");
      if (!causal && isCausalConstant(m, queries, keys))
        causal = true;
      else
        additive.push_back(m);
    }
    Value keep = s.keep;
    if (keep && isCausalConstant(keep, queries, keys)) {
      keep = nullptr;
      causal = true;
    }
    if (additive.size() + (keep ? 1 : 0) > 1)
      return rewriter.notifyMatchFailure(pv, "more than one mask besides the causal one");

    auto shared = sharedKvHeads(s.keyTransposed, pv.getRhs());
    SmallVector<Location> locs;
    for (Operation *op : s.ops)
      locs.push_back(op->getLoc());
    if (shared)
      locs.append({shared->first.expand.getLoc(), shared->first.reshape.getLoc(), shared->second.expand.getLoc(),
                   shared->second.reshape.getLoc()});
    Location fused = rewriter.getFusedLoc(locs), loc = pv.getLoc(); // the layout ops are not fusions
    Value query = reshapeTo(rewriter, loc, s.query, asFourDims(q.getShape()));
    shape::Dims keyDims(lead(kt));
    keyDims.append({keys, kt.getDimSize(rank - 2)});
    Value key = shared ? repeatedAsFourDims(rewriter, loc, shared->first)
                       : reshapeTo(rewriter, loc, untransposed(rewriter, loc, s.keyTransposed), asFourDims(keyDims));
    Value value = shared ? repeatedAsFourDims(rewriter, loc, shared->second)
                         : reshapeTo(rewriter, loc, pv.getRhs(), asFourDims(v.getShape()));
    Value mask = !additive.empty() ? additive.front() : keep;
    if (mask)
      mask = maskAsFourDims(rewriter, loc, mask, scoresType.getShape());
    shape::Dims out = asFourDims(o.getShape());
    auto attention = rewriter.create<AttentionOp>(
        fused, TypeRange{RankedTensorType::get(out, o.getElementType()),
                       RankedTensorType::get(ArrayRef<int64_t>(out).drop_back(), rewriter.getF32Type())},
        query, key, value, mask, rewriter.getF32FloatAttr(static_cast<float>(s.scale)), rewriter.getBoolAttr(causal));
    Value result = attention.getResult();
    if (guarded) { // the guard on the output instead: a hidden row's NaNs become 0
      auto where = pv.getLhs().getDefiningOp<WhereOp>();
      auto isNaN = rewriter.create<CompareOp>(loc, RankedTensorType::get(out, rewriter.getI1Type()), result, result,
                                              rewriter.getStringAttr("ne"));
      result = rewriter.create<WhereOp>(loc, result.getType(), isNaN, where.getX(), result);
    }
    rewriter.replaceOp(pv, reshapeTo(rewriter, loc, result, o.getShape()));
    return success();
  }
};

struct TecRecognizeAttention : tec::impl::TecRecognizeAttentionBase<TecRecognizeAttention> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<RecognizeAttention>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
