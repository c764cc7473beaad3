#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tec {
#define GEN_PASS_DEF_TECNARROWACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

RankedTensorType withElement(Type t, Type element) {
  auto ranked = llvm::cast<RankedTensorType>(t);
  return RankedTensorType::get(ranked.getShape(), element);
}

bool isFloatTensor(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && llvm::isa<FloatType>(t.getElementType());
}

/// `v` is `narrow` widened to f32: the value it was is `narrow`'s 16-bit input.
CastOp wideningCast(Value v, Type narrow) {
  auto cast = v.getDefiningOp<CastOp>();
  if (!cast || cast.getInput().getType().getElementType() != narrow || !cast.getType().getElementType().isF32())
    return nullptr;
  return cast;
}

/// The ops computed as well from 16-bit operands as from their f32 widening: the kernels read 16-bit
/// values, compute in f32 and round only what they write. Their float operands and results share one
/// type, except the f32 statistics some keep (keepsF32). Every unary op is one (its Elementwise trait).
bool narrowable(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() ||
         llvm::isa<AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp, SwigluOp, ReluGradOp, GeluGradOp, WhereOp, TransposeOp, ReshapeOp, ExpandOp, ConcatOp, SplitOp, SliceOp, GatherOp, SoftmaxOp,
                   LayerNormOp, RmsNormOp, AttentionOp, AttentionGradOp, ReduceSumOp, ReduceMeanOp, QuantizeOp,
                   AmaxOp>(op);
}

/// Results that stay f32 (normalization statistics, attention's logsumexp, a reduction: a loss or a bias
/// gradient summed in f32 inside the kernel; an amax), and operands that must (attention_grad's
/// logsumexp, a quantize's scale). Results of other types (FP8) keep theirs.
bool keepsF32Result(Operation *op, unsigned i) {
  return (llvm::isa<LayerNormOp, RmsNormOp, AttentionOp>(op) && i > 0) ||
         llvm::isa<ReduceSumOp, ReduceMeanOp, AmaxOp>(op);
}
bool keepsF32Operand(Operation *op, unsigned i) {
  return (llvm::isa<AttentionGradOp>(op) && i == 5) || (llvm::isa<QuantizeOp>(op) && i == 1);
}
bool narrowsResult(Operation *op, unsigned i) {
  auto t = llvm::dyn_cast<RankedTensorType>(op->getResult(i).getType());
  return t && t.getElementType().isF32() && !keepsF32Result(op, i);
}

/// A function input the step's caller provides, not a param or state: narrowed when all its uses are.
bool isPlainInput(Value v) {
  auto arg = llvm::dyn_cast<BlockArgument>(v);
  auto f = arg ? llvm::dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()) : nullptr;
  return f && !f.getArgAttr(arg.getArgNumber(), kParamAttrName) && !f.getArgAttr(arg.getArgNumber(), kStateAttrName);
}

/// Training state (a loss scale, the step count): its readers compute in f32. A loss scale of 2^17 is past
/// FP16's range, and the weight gradients it unscales reach the optimizer in f32.
bool isState(Value v) {
  auto arg = llvm::dyn_cast<BlockArgument>(v);
  auto f = arg ? llvm::dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()) : nullptr;
  return f && f.getArgAttr(arg.getArgNumber(), kStateAttrName);
}

/// FP16's range ends at 65504: ops that leave it on ordinary inputs compute from and write f32 there, as
/// autocast does: exp, reciprocal, softplus, and a square (an MSE loss's (y - t)^2 past |y - t| = 256).
/// BF16 has f32's range.
bool overflowsF16(Operation *op) {
  auto mul = llvm::dyn_cast<MulOp>(op);
  return llvm::isa<ExpOp, ReciprocalOp, SoftplusOp>(op) || (mul && mul.getLhs() == mul.getRhs());
}

/// Few enough elements that a 16-bit copy costs nothing worth counting (a LayerNorm's scale, a bias).
bool isSmall(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getNumElements() <= (1 << 16); }

/// `v` in the 16-bit type, where that costs no new full-size tensor: a widening cast's input, a constant
/// converted, a cast of a function input (which then becomes a 16-bit input) or of a small tensor; else null.
Value narrowed(PatternRewriter &rewriter, Value v, Type narrow) {
  if (auto cast = wideningCast(v, narrow))
    return cast.getInput();
  if (auto constant = v.getDefiningOp<ConstantOp>())
    if (auto dense = llvm::dyn_cast<DenseFPElementsAttr>(constant.getValue())) {
      const auto &semantics = llvm::cast<FloatType>(narrow).getFloatSemantics();
      auto converted = dense.mapValues(narrow, [&](const APFloat &x) {
        APFloat y = x;
        bool lost;
        y.convert(semantics, APFloat::rmNearestTiesToEven, &lost);
        return y.bitcastToAPInt();
      });
      return rewriter.create<ConstantOp>(constant.getLoc(), converted.getType(), converted);
    }
  if (isPlainInput(v) || isSmall(v))
    return rewriter.create<CastOp>(v.getLoc(), withElement(v.getType(), narrow), v);
  return nullptr;
}

/// op(widen(a), widen(b), ...) -> widen(op(a, b, ...)): the op reads and writes 16-bit tensors, and the
/// widening moves on to its readers, until an op that must stay f32 (a GEMM's bias, the optimizer, an
/// output). At least one operand must already be narrow, so f32 computations stay f32.
struct SinkWideningCasts : RewritePattern {
  SinkWideningCasts(MLIRContext *ctx, Type narrow) : RewritePattern(MatchAnyOpTypeTag(), 1, ctx), narrow(narrow) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!narrowable(op) || op->getNumRegions() || (narrow.isF16() && overflowsF16(op)))
      return failure();
    bool anyNarrow = false;
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      if (!isFloatTensor(v) || keepsF32Operand(op, i))
        continue;
      if (!llvm::cast<RankedTensorType>(v.getType()).getElementType().isF32() || isState(v))
        return failure();
      anyNarrow |= static_cast<bool>(wideningCast(v, narrow));
      if (!wideningCast(v, narrow) && !v.getDefiningOp<ConstantOp>() && !isPlainInput(v) && !isSmall(v))
        return failure();
    }
    if (!anyNarrow)
      return failure();
    SmallVector<Value> operands;
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      operands.push_back(isFloatTensor(v) && !keepsF32Operand(op, i) ? narrowed(rewriter, v, narrow) : v);
    SmallVector<Type> types;
    for (auto [i, r] : llvm::enumerate(op->getResults()))
      types.push_back(narrowsResult(op, i) ? withElement(r.getType(), narrow) : r.getType());
    Operation *narrowOp = rewriter.create(op->getLoc(), op->getName().getIdentifier(), operands, types, op->getAttrs());
    SmallVector<Value> replacements;
    for (auto [old, now] : llvm::zip(op->getResults(), narrowOp->getResults()))
      replacements.push_back(old.getType() == now.getType()
                                 ? Value(now)
                                 : rewriter.create<CastOp>(op->getLoc(), old.getType(), now).getResult());
    rewriter.replaceOp(op, replacements);
    return success();
  }
  Type narrow;
};

/// An FP8 GEMM writing f32 for what computes on in 16 bits writes 16 bits (cuBLASLt's FP8 GEMMs take a
/// bias of their output's type): its readers then narrow too. Weight gradients keep f32 for the optimizer,
/// and a model output its f32.
struct NarrowFp8GemmOutput : OpRewritePattern<Fp8GemmOp> {
  NarrowFp8GemmOutput(MLIRContext *ctx, Type narrow) : OpRewritePattern(ctx), narrow(narrow) {}
  LogicalResult matchAndRewrite(Fp8GemmOp gemm, PatternRewriter &rewriter) const override {
    auto role = gemm->getAttrOfType<StringAttr>(kGemmRoleAttrName);
    const bool onlyReturned = llvm::all_of(gemm->getUsers(), [](Operation *u) { return llvm::isa<func::ReturnOp>(u); });
    if (!gemm.getType().getElementType().isF32() || (role && role.getValue() == "wgrad") || onlyReturned ||
        (gemm.getBias() && !isSmall(gemm.getBias())))
      return failure();
    Value bias = gemm.getBias() ? narrowed(rewriter, gemm.getBias(), narrow) : Value();
    auto narrowGemm = rewriter.create<Fp8GemmOp>(gemm.getLoc(), withElement(gemm.getType(), narrow), gemm.getInput(),
                                                 gemm.getWeight(), gemm.getInputScaleInv(), gemm.getWeightScaleInv(),
                                                 bias, gemm.getEpilogueAttr(), gemm.getTransposeBAttr());
    narrowGemm->setAttrs(gemm->getAttrs());
    rewriter.replaceOpWithNewOp<CastOp>(gemm, gemm.getType(), narrowGemm.getResult());
    return success();
  }
  Type narrow;
};

/// narrow(widen(x)) -> x: the round trip is exact.
struct FoldRoundTrip : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp cast, PatternRewriter &rewriter) const override {
    auto inner = cast.getInput().getDefiningOp<CastOp>();
    if (!inner || inner.getInput().getType() != cast.getType() || !llvm::isa<FloatType>(cast.getType().getElementType()) ||
        !inner.getType().getElementType().isF32())
      return failure();
    rewriter.replaceOp(cast, inner.getInput());
    return success();
  }
};

/// narrow(move(x)) -> move(narrow(x)) for data movement read only by the narrowing (a wgrad GEMM's
/// transposed operand): the copy moves half the bytes, and narrow(x) is usually there already.
struct HoistNarrowingCast : OpRewritePattern<CastOp> {
  HoistNarrowingCast(MLIRContext *ctx, Type narrow) : OpRewritePattern(ctx), narrow(narrow) {}
  LogicalResult matchAndRewrite(CastOp cast, PatternRewriter &rewriter) const override {
    Operation *move = cast.getInput().getDefiningOp();
    if (cast.getType().getElementType() != narrow || !move || !llvm::isa<TransposeOp, ReshapeOp, ExpandOp, SliceOp>(move) ||
        !cast.getInput().hasOneUse() ||
        !llvm::cast<RankedTensorType>(move->getOperand(0).getType()).getElementType().isF32())
      return failure();
    Value source = rewriter.create<CastOp>(cast.getLoc(), withElement(move->getOperand(0).getType(), narrow),
                                           move->getOperand(0));
    Operation *moved = rewriter.create(move->getLoc(), move->getName().getIdentifier(), ValueRange{source},
                                       TypeRange{cast.getType()}, move->getAttrs());
    rewriter.replaceOp(cast, moved->getResults());
    return success();
  }
  Type narrow;
};

/// widen(linear(a, b)) without a bias -> linear(a, b) writing f32: a weight gradient leaves the GEMM in
/// f32 for the optimizer, not rounded to 16 bits first (cuBLASLt's 16-bit inputs, f32 output).
struct WidenGemmOutput : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp cast, PatternRewriter &rewriter) const override {
    auto linear = cast.getInput().getDefiningOp<LinearOp>();
    if (!linear || linear.getBias() || linear.getEpilogue() != "none" || !cast.getInput().hasOneUse() ||
        !cast.getType().getElementType().isF32())
      return failure();
    auto wide = rewriter.create<LinearOp>(linear.getLoc(), cast.getType(), linear.getInput(), linear.getWeight(),
                                          Value(), linear.getEpilogueAttr(), linear.getTransposeBAttr());
    wide->setAttrs(linear->getAttrs());
    rewriter.replaceOp(cast, wide.getResult());
    return success();
  }
};

struct TecNarrowActivations : tec::impl::TecNarrowActivationsBase<TecNarrowActivations> {
  using TecNarrowActivationsBase::TecNarrowActivationsBase;
  void runOnOperation() override {
    func::FuncOp f = getOperation();
    Type narrow = precision == "f16" ? Type(Float16Type::get(&getContext())) : Type(BFloat16Type::get(&getContext()));
    RewritePatternSet patterns(&getContext());
    patterns.add<FoldRoundTrip, WidenGemmOutput>(&getContext());
    patterns.add<SinkWideningCasts, HoistNarrowingCast, NarrowFp8GemmOutput>(&getContext(), narrow);
    if (failed(applyPatternsAndFoldGreedily(f, std::move(patterns))))
      return signalPassFailure();
    // An input read only through narrowing casts is taken narrow: the session rounds what the caller
    // gives as it writes it (tec.host_f32).
    SmallVector<Type> argTypes(f.getArgumentTypes());
    for (BlockArgument arg : f.getArguments()) {
      if (!isPlainInput(arg) || arg.use_empty() || !llvm::cast<RankedTensorType>(arg.getType()).getElementType().isF32())
        continue;
      // Readers that take it narrow: its narrowing casts, and FP8 quantizes and amaxes, which read any
      // float type (quantizing the bf16 rounding of x, as Transformer Engine does from bf16 inputs).
      auto narrowing = [&](Operation *u) {
        auto cast = llvm::dyn_cast<CastOp>(u);
        return (cast && cast.getType().getElementType() == narrow) || llvm::isa<QuantizeOp, AmaxOp>(u);
      };
      if (!llvm::all_of(arg.getUsers(), narrowing))
        continue;
      arg.setType(withElement(arg.getType(), narrow));
      for (Operation *u : llvm::make_early_inc_range(arg.getUsers()))
        if (llvm::isa<CastOp>(u)) {
          u->getResult(0).replaceAllUsesWith(arg);
          u->erase();
        }
      argTypes[arg.getArgNumber()] = arg.getType();
      f.setArgAttr(arg.getArgNumber(), kHostF32AttrName, UnitAttr::get(&getContext()));
    }
    f.setType(FunctionType::get(&getContext(), argTypes, f.getResultTypes()));
  }
};

} // namespace
