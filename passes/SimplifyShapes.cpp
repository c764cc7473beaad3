#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tec {
#define GEN_PASS_DEF_TECSIMPLIFYSHAPES
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// reshape(reshape(x)) -> reshape(x): only the final shape matters.
struct CollapseReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ReshapeOp>();
    if (!inner || !inner->hasOneUse())
      return rewriter.notifyMatchFailure(op, "input is not a single-use reshape");
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), inner.getInput());
    return success();
  }
};

/// transpose(transpose(x, p), q) -> transpose(x, p∘q); the canonicalizer drops an identity result.
struct ComposeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<TransposeOp>();
    if (!inner || !inner->hasOneUse())
      return rewriter.notifyMatchFailure(op, "input is not a single-use transpose");
    llvm::SmallVector<int64_t> perm;
    for (int64_t p : op.getPerm())
      perm.push_back(inner.getPerm()[p]);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), inner.getInput(), perm);
    return success();
  }
};

struct TecSimplifyShapes : tec::impl::TecSimplifyShapesBase<TecSimplifyShapes> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateShapeChainPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void tec::populateShapeChainPatterns(RewritePatternSet &patterns) {
  patterns.add<CollapseReshapes, ComposeTransposes>(patterns.getContext());
}
