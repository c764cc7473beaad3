#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tec {
#define GEN_PASS_DEF_TECFUSEQUANTIZE
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// Current scaling's scale comes from the amax of the very tensor it quantizes: the quantize waits for the
/// whole amax, so the two cannot be one pass.
bool scaledByItsOwnAmax(QuantizeOp quantize) { return static_cast<bool>(quantize.getScale().getDefiningOp<CurrentScalingOp>()); }

/// The amax and the single quantize that are `v`'s only readers (one scale, not made from that amax), or nulls.
std::pair<AmaxOp, QuantizeOp> onlyAmaxAndQuantize(Value v) {
  AmaxOp amax;
  QuantizeOp quantize;
  for (Operation *user : v.getUsers()) {
    if (auto a = llvm::dyn_cast<AmaxOp>(user); a && !amax)
      amax = a;
    else if (auto q = llvm::dyn_cast<QuantizeOp>(user); q && !quantize && !q.getTransposeInput() && q.getInput() == v)
      quantize = q;
    else
      return {};
  }
  if (!amax || !quantize || scaledByItsOwnAmax(quantize))
    return {};
  return {amax, quantize};
}

/// A tensor's transposed FP8 copy, quantized with the scale of its FP8 copy, is that copy transposed: the
/// same bits from 1 byte per element instead of 2, and the 16-bit tensor is read only once.
struct TransposeTheFp8Copy : OpRewritePattern<QuantizeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(QuantizeOp transposed, PatternRewriter &rewriter) const override {
    if (!transposed.getTransposeInput())
      return failure();
    for (Operation *user : transposed.getInput().getUsers()) {
      auto copy = llvm::dyn_cast<QuantizeOp>(user);
      if (!copy || copy.getTransposeInput() || copy.getScale() != transposed.getScale() ||
          copy.getType().getElementType() != transposed.getType().getElementType() ||
          !copy->isBeforeInBlock(transposed))
        continue;
      rewriter.replaceOpWithNewOp<TransposeOp>(transposed, transposed.getType(), copy.getResult(),
                                               ArrayRef<int64_t>{1, 0});
      return success();
    }
    return failure();
  }
};

/// gelu(x) read only by its amax and its quantize: one tec.cast_fp8, the GELU's output never stored.
struct FuseActivationQuantize : OpRewritePattern<GeluOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GeluOp gelu, PatternRewriter &rewriter) const override {
    auto [amax, quantize] = onlyAmaxAndQuantize(gelu.getResult());
    if (!amax)
      return failure();
    rewriter.setInsertionPoint(quantize);
    auto fused = rewriter.create<CastFp8Op>(
        rewriter.getFusedLoc({gelu.getLoc(), quantize.getLoc()}), TypeRange{quantize.getType(), amax.getType()},
        gelu.getInput(), quantize.getScale(), rewriter.getStringAttr(gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu"));
    rewriter.replaceOp(quantize, fused.getResult());
    rewriter.replaceOp(amax, fused.getAmax());
    rewriter.eraseOp(gelu);
    return success();
  }
};

/// LayerNorm whose output only its amax and its quantize read: one tec.layer_norm_fp8.
struct FuseLayerNormQuantize : OpRewritePattern<LayerNormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LayerNormOp ln, PatternRewriter &rewriter) const override {
    auto [amax, quantize] = onlyAmaxAndQuantize(ln.getResult());
    if (!amax)
      return failure();
    rewriter.setInsertionPoint(quantize);
    auto fused = rewriter.create<LayerNormFp8Op>(
        rewriter.getFusedLoc({ln.getLoc(), quantize.getLoc()}),
        TypeRange{quantize.getType(), amax.getType(), ln.getMean().getType(), ln.getInvStdDev().getType()},
        ln.getInput(), ln.getScale(), ln.getBias(), quantize.getScale(), ln.getAxisAttr(), ln.getEpsilonAttr());
    rewriter.replaceOp(quantize, fused.getResult());
    rewriter.replaceOp(amax, fused.getAmax());
    ln.getMean().replaceAllUsesWith(fused.getMean());
    ln.getInvStdDev().replaceAllUsesWith(fused.getInvStdDev());
    rewriter.eraseOp(ln);
    return success();
  }
};

/// dY read only by its amax, its quantize and a sum over all but its last dim (the bias gradient): one
/// tec.cast_fp8_dbias, placed where the first of them was.
struct FuseBiasGradQuantize : OpRewritePattern<ReduceSumOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReduceSumOp sum, PatternRewriter &rewriter) const override {
    Value dy = sum.getInput();
    const int64_t rank = llvm::cast<RankedTensorType>(dy.getType()).getRank();
    if (rank < 2 || sum.getKeepdims() || !sum.getType().getElementType().isF32() ||
        !llvm::equal(sum.getAxes(), llvm::seq<int64_t>(0, rank - 1)))
      return failure();
    AmaxOp amax;
    QuantizeOp quantize;
    for (Operation *user : dy.getUsers()) {
      if (auto a = llvm::dyn_cast<AmaxOp>(user); a && !amax)
        amax = a;
      else if (auto q = llvm::dyn_cast<QuantizeOp>(user); q && !quantize && !q.getTransposeInput())
        quantize = q;
      else if (user != sum)
        return failure();
    }
    if (!amax || !quantize || scaledByItsOwnAmax(quantize))
      return failure();
    Operation *first = sum;
    for (Operation *op : {amax.getOperation(), quantize.getOperation()})
      first = op->isBeforeInBlock(first) ? op : first;
    rewriter.setInsertionPoint(first);
    auto fused = rewriter.create<CastFp8BiasGradOp>(
        rewriter.getFusedLoc({quantize.getLoc(), sum.getLoc()}),
        TypeRange{quantize.getType(), amax.getType(), sum.getType()}, dy, quantize.getScale());
    rewriter.replaceOp(quantize, fused.getResult());
    rewriter.replaceOp(amax, fused.getAmax());
    rewriter.replaceOp(sum, fused.getBiasGrad());
    return success();
  }
};

struct TecFuseQuantize : tec::impl::TecFuseQuantizeBase<TecFuseQuantize> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<TransposeTheFp8Copy, FuseActivationQuantize, FuseLayerNormQuantize, FuseBiasGradQuantize>(
        &getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
