#include "passes/Matchers.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tec {
#define GEN_PASS_DEF_TECFUSELINEAR
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// A bias can ride in the epilogue only when it is one value per output column: shape [N], or
/// [1, ..., 1, N] (reshaped to [N]), with the output's element type.
bool isEpilogueBias(Value bias, RankedTensorType out) {
  auto type = llvm::cast<RankedTensorType>(bias.getType());
  if (type.getElementType() != out.getElementType() || type.getRank() < 1 || type.getRank() > out.getRank())
    return false;
  return type.getShape().back() == out.getShape().back() && type.getNumElements() == out.getShape().back();
}

/// The cuBLASLt epilogue an activation becomes, or nullopt. An erf GELU stays exact ("gelu") unless the
/// user allows the tanh form cuBLASLt computes (`fast-gelu`).
std::optional<StringRef> epilogueFor(Operation *activation, bool fastGelu) {
  if (llvm::isa<ReluOp>(activation))
    return StringRef("relu");
  if (auto gelu = llvm::dyn_cast<GeluOp>(activation))
    return gelu.getApproximate() == "tanh" || fastGelu ? StringRef("gelu_tanh") : StringRef("gelu");
  return std::nullopt;
}

Location fused(PatternRewriter &rewriter, ArrayRef<Operation *> ops) {
  SmallVector<Location> locs;
  for (Operation *op : ops)
    locs.push_back(op->getLoc());
  return rewriter.getFusedLoc(locs);
}

/// Gemm with alpha = 1, no transposed A and a per-column C (or none) is a linear layer.
struct GemmToLinear : OpRewritePattern<GemmOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GemmOp gemm, PatternRewriter &rewriter) const override {
    if (gemm.getAlpha().convertToFloat() != 1.0f || gemm.getTransA())
      return rewriter.notifyMatchFailure(gemm, "alpha != 1 or transposed A");
    Value bias = gemm.getC();
    if (bias && (gemm.getBeta().convertToFloat() != 1.0f || !isEpilogueBias(bias, gemm.getType())))
      return rewriter.notifyMatchFailure(gemm, "C is not a per-column bias");
    if (bias && llvm::cast<RankedTensorType>(bias.getType()).getRank() != 1)
      bias = rewriter.create<ReshapeOp>(bias.getLoc(),
                                        RankedTensorType::get({gemm.getType().getShape().back()},
                                                              gemm.getType().getElementType()),
                                        bias);
    rewriter.replaceOpWithNewOp<LinearOp>(gemm, gemm.getType(), gemm.getA(), gemm.getB(), bias,
                                          rewriter.getStringAttr("none"), rewriter.getBoolAttr(gemm.getTransB()));
    return success();
  }
};

/// MatMul by a 2-D right operand (a weight, [K, N]) is a linear layer; batched MatMuls (attention)
/// stay as they are.
struct MatMulToLinear : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp mm, PatternRewriter &rewriter) const override {
    if (mm.getRhs().getType().getRank() != 2 || mm.getLhs().getType().getRank() < 2)
      return rewriter.notifyMatchFailure(mm, "not activations times a 2-D weight");
    rewriter.replaceOpWithNewOp<LinearOp>(mm, mm.getType(), mm.getLhs(), mm.getRhs(), Value(),
                                          rewriter.getStringAttr("none"), rewriter.getBoolAttr(false));
    return success();
  }
};

/// linear(x, transpose(W)) -> linear(x, W) with transpose_b flipped: a weight tied to another in the other
/// layout (an output layer tied to the embedding) is read in place instead of transposed on every run.
struct FoldWeightTranspose : OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LinearOp linear, PatternRewriter &rewriter) const override {
    auto transpose = linear.getWeight().getDefiningOp<TransposeOp>();
    if (!transpose || transpose.getPerm() != ArrayRef<int64_t>{1, 0})
      return rewriter.notifyMatchFailure(linear, "the weight is not a 2-D transpose");
    rewriter.modifyOpInPlace(linear, [&] {
      linear.getWeightMutable().assign(transpose.getInput());
      linear.setTransposeB(!linear.getTransposeB());
    });
    return success();
  }
};

/// linear(x, W) + bias -> linear(x, W, bias), the bias on either side of the add.
struct FuseBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    for (auto [product, bias] : {std::pair{add.getLhs(), add.getRhs()}, std::pair{add.getRhs(), add.getLhs()}}) {
      auto linear = product.getDefiningOp<LinearOp>();
      if (!linear || linear.getBias() || linear.getEpilogue() != "none" || !absorbable(product) ||
          add.getType() != linear.getType() || !isEpilogueBias(bias, add.getType()))
        continue;
      if (llvm::cast<RankedTensorType>(bias.getType()).getRank() != 1)
        bias = rewriter.create<ReshapeOp>(
            bias.getLoc(), RankedTensorType::get({add.getType().getShape().back()}, add.getType().getElementType()),
            bias);
      Location loc = fused(rewriter, {linear, add}); // before the replacement erases `add`
      rewriter.replaceOpWithNewOp<LinearOp>(add, linear.getType(), linear.getInput(), linear.getWeight(), bias,
                                            linear.getEpilogueAttr(), linear.getTransposeBAttr())
          ->setLoc(loc);
      return success();
    }
    return rewriter.notifyMatchFailure(add, "not linear + per-column bias");
  }
};

/// relu/gelu(linear(...)) -> linear(...) with the activation as its epilogue.
template <typename Activation> struct FuseActivation : OpRewritePattern<Activation> {
  FuseActivation(MLIRContext *context, bool fastGelu) : OpRewritePattern<Activation>(context), fastGelu(fastGelu) {}
  LogicalResult matchAndRewrite(Activation act, PatternRewriter &rewriter) const override {
    auto linear = act.getInput().template getDefiningOp<LinearOp>();
    auto epilogue = epilogueFor(act, fastGelu);
    if (!linear || linear.getEpilogue() != "none" || !absorbable(act.getInput()) || !epilogue)
      return rewriter.notifyMatchFailure(act, "not an activation of a single-use linear");
    Location loc = fused(rewriter, {linear, act}); // before the replacement erases `act`
    rewriter.replaceOpWithNewOp<LinearOp>(act, linear.getType(), linear.getInput(), linear.getWeight(),
                                          linear.getBias(), rewriter.getStringAttr(*epilogue),
                                          linear.getTransposeBAttr())
        ->setLoc(loc);
    return success();
  }
  bool fastGelu;
};

struct TecFuseLinear : tec::impl::TecFuseLinearBase<TecFuseLinear> {
  using TecFuseLinearBase::TecFuseLinearBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GemmToLinear, MatMulToLinear, FoldWeightTranspose, FuseBias>(&getContext());
    patterns.add<FuseActivation<ReluOp>>(&getContext(), fastGelu);
    if (fuseGelu)
      patterns.add<FuseActivation<GeluOp>>(&getContext(), fastGelu);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
