#include "passes/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tec {
#define GEN_PASS_DEF_TECCHANNELSLAST
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

constexpr int64_t kToChannelsLast[] = {0, 2, 3, 1}, kToChannelsFirst[] = {0, 3, 1, 2};

/// [N, spatial..., C] -> [N, C, spatial...] of rank `rank` (3: a 1-D conv's image once its unit H is gone).
SmallVector<int64_t> channelsFirstPerm(int64_t rank) {
  SmallVector<int64_t> perm{0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d)
    perm.push_back(d);
  return perm;
}

/// Convolutions worth laying out channels-last: f32 ones (the cpu target computes in f32) not yet converted.
bool prefersChannelsLast(ConvOp conv) {
  return !conv.getChannelsLast() && conv.getType().getElementType().isF32();
}

/// Ops that compute each element from the elements at the same position of their operands (broadcast
/// numpy-style), so a transpose of every operand is a transpose of the result. The unary ops say so by
/// their Elementwise trait; the broadcasting ones (which that trait's same-shape verifier would refuse) by name.
bool isElementwise(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() ||
         isa<CastOp, AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, ModOp, CompareOp, WhereOp>(op);
}

/// The transposes this pass moves: the one back to NCHW after each converted conv. Others (attention's
/// head splits, a linear's transposed operand) stay where earlier passes and the backend's folds want them.
bool isChannelsFirst(TransposeOp t) {
  return t && t.getType().getRank() >= 3 && t.getPerm() == ArrayRef<int64_t>(channelsFirstPerm(t.getType().getRank()));
}

SmallVector<int64_t> inverse(ArrayRef<int64_t> perm) {
  SmallVector<int64_t> inv(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inv[p] = static_cast<int64_t>(i);
  return inv;
}

/// `shape` laid out as a transpose by `perm` would read it: dim i is shape[perm[i]].
SmallVector<int64_t> permuted(ArrayRef<int64_t> shape, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> out;
  for (int64_t p : perm)
    out.push_back(shape[p]);
  return out;
}

/// Whether transposing `shape` by `perm` keeps every dim larger than 1 in order: the bytes do not move.
bool movesOnlyUnitDims(ArrayRef<int64_t> shape, ArrayRef<int64_t> perm) {
  int64_t last = -1;
  for (int64_t p : perm)
    if (shape[p] != 1) {
      if (p < last)
        return false;
      last = p;
    }
  return true;
}

RankedTensorType withShape(Type type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, llvm::cast<RankedTensorType>(type).getElementType());
}

/// tec.conv (NCHW) -> transpose to NHWC, tec.conv {channels_last}, transpose back; the patterns below
/// then move the transposes until those between two convolutions cancel.
struct ConvToChannelsLast : OpRewritePattern<ConvOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvOp conv, PatternRewriter &rewriter) const override {
    if (!prefersChannelsLast(conv))
      return rewriter.notifyMatchFailure(conv, "not an f32 NCHW conv");
    Location loc = conv.getLoc();
    auto inType = conv.getInput().getType(), outType = conv.getType();
    Value x = rewriter.create<TransposeOp>(loc, withShape(inType, permuted(inType.getShape(), kToChannelsLast)),
                                           conv.getInput(), kToChannelsLast);
    Value y = rewriter.create<ConvOp>(loc, withShape(outType, permuted(outType.getShape(), kToChannelsLast)), x,
                                      conv.getWeight(), conv.getBias(), conv.getStrides(), conv.getPads(),
                                      conv.getDilations(), conv.getGroup(), /*channels_last=*/true);
    rewriter.replaceOpWithNewOp<TransposeOp>(conv, outType, y, kToChannelsFirst);
    return success();
  }
};

/// A channels-last conv that is a GEMM: 1x1, unit strides, no padding, one group. Over NHWC it multiplies
/// each pixel's C channels by the [M, C] weight, which tec.linear does with the backend's GEMM machinery
/// (packed constant weights, a split over the pool's threads, fused activation and residual epilogues).
bool isPointwise(ConvOp conv) {
  auto w = conv.getWeight().getType();
  return conv.getChannelsLast() && conv.getGroup() == 1 && w.getDimSize(2) == 1 && w.getDimSize(3) == 1 &&
         llvm::all_of(conv.getStrides(), [](int64_t s) { return s == 1; }) &&
         llvm::all_of(conv.getPads(), [](int64_t p) { return p == 0; });
}

/// tec.conv {channels_last} 1x1 -> tec.linear {transpose_b} by the weight seen as [M, C].
struct PointwiseConvToLinear : OpRewritePattern<ConvOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvOp conv, PatternRewriter &rewriter) const override {
    if (!isPointwise(conv))
      return rewriter.notifyMatchFailure(conv, "not a pointwise channels-last conv");
    auto w = conv.getWeight().getType();
    Value weight = rewriter.create<ReshapeOp>(conv.getLoc(), withShape(w, {w.getDimSize(0), w.getDimSize(1)}),
                                              conv.getWeight());
    rewriter.replaceOpWithNewOp<LinearOp>(conv, conv.getType(), conv.getInput(), weight, conv.getBias(),
                                          rewriter.getStringAttr("none"), rewriter.getBoolAttr(true));
    return success();
  }
};

/// op(transpose(x, p), b...) -> transpose(op(x, transpose(b, p^-1)...), p) for elementwise ops, when every
/// other operand transposes for free: by the same permutation (they cancel), a constant (it folds) or a
/// tensor whose transpose only moves unit dims (a [1, C, 1, 1] gate: a reshape).
struct SinkTransposeThroughElementwise : RewritePattern {
  explicit SinkTransposeThroughElementwise(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!isElementwise(op) || op->getNumResults() != 1)
      return failure();
    auto resultType = llvm::cast<RankedTensorType>(op->getResult(0).getType());
    const int64_t rank = resultType.getRank();
    if (llvm::none_of(op->getOperands(), [&](Value v) {
          auto t = v.getDefiningOp<TransposeOp>();
          return isChannelsFirst(t) && t.getType().getRank() == rank;
        }))
      return failure();
    const SmallVector<int64_t> perm = channelsFirstPerm(rank);
    const SmallVector<int64_t> inv = inverse(perm);
    auto freeToTranspose = [&](Value v, ArrayRef<int64_t> shape) {
      if (auto t = v.getDefiningOp<TransposeOp>(); t && t.getPerm() == ArrayRef<int64_t>(perm))
        return true;
      return matchPattern(v, m_Constant()) || movesOnlyUnitDims(shape, inv);
    };
    SmallVector<SmallVector<int64_t>> shapes;
    for (Value v : op->getOperands()) {
      auto shape = llvm::cast<RankedTensorType>(v.getType()).getShape();
      SmallVector<int64_t> full(rank - shape.size(), 1); // numpy broadcasting aligns trailing dims
      full.append(shape.begin(), shape.end());
      if (!freeToTranspose(v, full))
        return rewriter.notifyMatchFailure(op, "an operand would need a transpose of its own");
      shapes.push_back(full);
    }
    Location loc = op->getLoc();
    SmallVector<Value> operands;
    for (auto [v, full] : llvm::zip(op->getOperands(), shapes)) {
      if (auto t = v.getDefiningOp<TransposeOp>(); t && t.getPerm() == ArrayRef<int64_t>(perm)) {
        operands.push_back(t.getInput()); // the two transposes cancel (made, a 3-D pair would match again)
        continue;
      }
      Value ranked = v;
      if (llvm::cast<RankedTensorType>(v.getType()).getRank() != rank)
        ranked = rewriter.create<ReshapeOp>(loc, withShape(v.getType(), full), v);
      operands.push_back(rewriter.create<TransposeOp>(loc, withShape(v.getType(), permuted(full, inv)), ranked, inv));
    }
    OperationState state(loc, op->getName(), operands,
                         TypeRange{withShape(resultType, permuted(resultType.getShape(), inv))}, op->getAttrs());
    Operation *sunk = rewriter.create(state);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, resultType, sunk->getResult(0), perm);
    return success();
  }
};

/// reduce(transpose(x, p), axes) -> reduce(x, p[axes]), transposed back where the kept dims change order.
template <typename Reduce> struct SinkTransposeThroughReduce : OpRewritePattern<Reduce> {
  using OpRewritePattern<Reduce>::OpRewritePattern;
  LogicalResult matchAndRewrite(Reduce op, PatternRewriter &rewriter) const override {
    auto t = op.getInput().template getDefiningOp<TransposeOp>();
    if (!isChannelsFirst(t))
      return rewriter.notifyMatchFailure(op, "input is not a transpose to NCHW");
    ArrayRef<int64_t> perm = t.getPerm();
    SmallVector<int64_t> axes;
    for (int64_t a : op.getAxes())
      axes.push_back(perm[a]);
    llvm::sort(axes);
    auto xShape = t.getInput().getType().getShape();
    SmallVector<int64_t> reducedShape, kept; // kept: x's dims the result keeps, in x's order
    for (int64_t d = 0; d < static_cast<int64_t>(xShape.size()); ++d) {
      const bool reduced = llvm::is_contained(axes, d);
      if (!reduced)
        kept.push_back(d);
      if (!reduced || op.getKeepdims())
        reducedShape.push_back(reduced ? 1 : xShape[d]);
    }
    SmallVector<int64_t> back; // the result's dim j is the new reduction's dim back[j]
    if (op.getKeepdims())
      back.assign(perm.begin(), perm.end());
    else
      for (int64_t i = 0; i < static_cast<int64_t>(perm.size()); ++i)
        if (!llvm::is_contained(op.getAxes(), i))
          back.push_back(llvm::find(kept, perm[i]) - kept.begin());
    Value reduced = rewriter.create<Reduce>(op.getLoc(), withShape(op.getType(), reducedShape), t.getInput(), axes,
                                            op.getKeepdims());
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), reduced, back);
    return success();
  }
};

/// pool(transpose(x, to NCHW)) -> transpose(pool {channels_last}(x), to NCHW): a ResNet's max pool between
/// its stem and first block reads the image where the convs left it.
struct SinkTransposeThroughPool : OpRewritePattern<PoolOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PoolOp op, PatternRewriter &rewriter) const override {
    auto t = op.getInput().getDefiningOp<TransposeOp>();
    if (op.getChannelsLast() || !isChannelsFirst(t) || t.getType().getRank() != 4)
      return rewriter.notifyMatchFailure(op, "input is not an NCHW image transposed from NHWC");
    auto type = op.getType();
    Value pooled = rewriter.create<PoolOp>(op.getLoc(), withShape(type, permuted(type.getShape(), kToChannelsLast)),
                                           t.getInput(), op.getKind(), op.getKernel(), op.getStrides(), op.getPads(),
                                           op.getDilations(), op.getCountIncludePad(), /*channels_last=*/true);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, type, pooled, kToChannelsFirst);
    return success();
  }
};

/// concat(transpose(a, p), transpose(b, p)..., axis) -> transpose(concat(a, b..., p[axis]), p).
struct SinkTransposeThroughConcat : OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConcatOp op, PatternRewriter &rewriter) const override {
    SmallVector<Value> inputs;
    ArrayRef<int64_t> perm;
    for (Value v : op.getInputs()) {
      auto t = v.getDefiningOp<TransposeOp>();
      if (!isChannelsFirst(t))
        return rewriter.notifyMatchFailure(op, "an input is not a transpose to NCHW");
      perm = t.getPerm();
      inputs.push_back(t.getInput());
    }
    if (perm.empty())
      return failure();
    auto type = op.getType();
    Value joined = rewriter.create<ConcatOp>(op.getLoc(), withShape(type, permuted(type.getShape(), inverse(perm))),
                                             inputs, perm[op.getAxis()]);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, type, joined, perm);
    return success();
  }
};

/// reshape(transpose(x, to NCHW)) where the reshape only drops or adds unit dims (a 1-D conv's image: the
/// importer's H = 1 goes before the activation and comes back before the next conv) ->
/// transpose(reshape(x), to channels-first of the reshape's rank), when both move the same dims alike.
struct SinkTransposeThroughUnitReshape : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op, PatternRewriter &rewriter) const override {
    auto t = op.getInput().getDefiningOp<TransposeOp>();
    const int64_t rank = op.getType().getRank();
    if (!isChannelsFirst(t) || rank < 3)
      return rewriter.notifyMatchFailure(op, "input is not a transpose to channels-first");
    const SmallVector<int64_t> q = channelsFirstPerm(rank), inv = inverse(q);
    const SmallVector<int64_t> reshaped = permuted(op.getType().getShape(), inv); // [N, spatial..., C]
    // Each side as the order in which the result's non-unit dims come from the source's non-unit dims.
    auto order = [](ArrayRef<int64_t> sourceShape, ArrayRef<int64_t> resultShape, ArrayRef<int64_t> perm) {
      SmallVector<int64_t> rank(sourceShape.size(), -1), out;
      for (int64_t d = 0, r = 0; d < static_cast<int64_t>(sourceShape.size()); ++d)
        if (sourceShape[d] != 1)
          rank[d] = r++;
      for (auto [i, p] : llvm::enumerate(perm))
        if (resultShape[i] != 1)
          out.push_back(rank[p]);
      return out;
    };
    auto nonUnit = [](ArrayRef<int64_t> shape) {
      SmallVector<int64_t> out;
      for (int64_t d : shape)
        if (d != 1)
          out.push_back(d);
      return out;
    };
    auto xShape = t.getInput().getType().getShape();
    if (nonUnit(xShape) != nonUnit(reshaped) ||
        order(xShape, t.getType().getShape(), t.getPerm()) != order(reshaped, op.getType().getShape(), q))
      return rewriter.notifyMatchFailure(op, "the reshape moves dims the transpose does not");
    Value inner = rewriter.create<ReshapeOp>(op.getLoc(), withShape(op.getType(), reshaped), t.getInput());
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), inner, q);
    return success();
  }
};

/// transpose(transpose(x, p), q) with p∘q the identity -> x, whatever else reads the inner transpose.
struct CancelTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<TransposeOp>();
    if (!inner)
      return failure();
    for (auto [i, q] : llvm::enumerate(op.getPerm()))
      if (inner.getPerm()[q] != static_cast<int64_t>(i))
        return rewriter.notifyMatchFailure(op, "the permutations do not cancel");
    rewriter.replaceOp(op, inner.getInput());
    return success();
  }
};

/// A transpose that moves only unit dims is a reshape: no bytes move.
struct UnitTransposeToReshape : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    const int64_t rank = op.getType().getRank();
    if ((!isChannelsFirst(op) && (rank < 3 || op.getPerm() != ArrayRef<int64_t>(inverse(channelsFirstPerm(rank))))) ||
        !movesOnlyUnitDims(op.getInput().getType().getShape(), op.getPerm()))
      return rewriter.notifyMatchFailure(op, "not a channel transpose that moves only unit dims");
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), op.getInput());
    return success();
  }
};

struct TecChannelsLast : tec::impl::TecChannelsLastBase<TecChannelsLast> {
  void runOnOperation() override {
    // Without a conv to convert nothing here is the pass's: a transformer's transposes stay as they are.
    if (!getOperation().walk([](ConvOp conv) { return prefersChannelsLast(conv) ? WalkResult::interrupt() : WalkResult::advance(); }).wasInterrupted())
      return;
    RewritePatternSet patterns(&getContext());
    patterns.add<ConvToChannelsLast, PointwiseConvToLinear, SinkTransposeThroughElementwise, SinkTransposeThroughReduce<ReduceMeanOp>,
                 SinkTransposeThroughReduce<ReduceSumOp>, SinkTransposeThroughReduce<ReduceMaxOp>,
                 SinkTransposeThroughReduce<ReduceMinOp>, SinkTransposeThroughConcat, SinkTransposeThroughPool, SinkTransposeThroughUnitReshape, CancelTransposes,
                 UnitTransposeToReshape>(&getContext());
    populateShapeChainPatterns(patterns); // the reshapes a [1, C, 1, 1] gate goes through become one
    // Every rewrite keeps the function correct; a bound turns a pattern cycle into a warning, never a hang.
    GreedyRewriteConfig config;
    int64_t ops = 0;
    getOperation().walk([&](Operation *) { ++ops; });
    config.maxNumRewrites = 64 * ops;
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns), config)))
      getOperation().emitWarning("tec-channels-last stopped after ")
          << config.maxNumRewrites << " rewrites without settling: some transposes may remain";
  }
};

} // namespace
