#include "passes/Passes.h"
#include "support/Targets.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"

namespace tec {
#define GEN_PASS_DEF_TECLOWERFORTARGET
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

Type elementTypeFor(GemmPrecision p, MLIRContext *ctx) {
  Builder b(ctx);
  switch (p) {
  case GemmPrecision::BF16: return b.getBF16Type();
  case GemmPrecision::F16: return b.getF16Type();
  default: return b.getF32Type();
  }
}

Value castTo(OpBuilder &b, Value v, Type element) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  if (!v || type.getElementType() == element)
    return v;
  return b.create<CastOp>(v.getLoc(), RankedTensorType::get(type.getShape(), element), v);
}

/// A GEMM in `element` precision computing what `op` computes: operands cast down, result cast back;
/// the GEMM is tagged with `precision`.
Value gemmIn(OpBuilder &b, Operation *op, Value x, Value w, Value bias, StringAttr epilogue, BoolAttr transposeB,
             Type element, const std::string &precision) {
  auto resultType = llvm::cast<RankedTensorType>(op->getResult(0).getType());
  Value cx = castTo(b, x, element), cw = castTo(b, w, element);
  Value cb = bias ? castTo(b, bias, element) : Value();
  auto linear = b.create<LinearOp>(op->getLoc(), RankedTensorType::get(resultType.getShape(), element), cx, cw, cb,
                                   epilogue, transposeB);
  linear->setAttr(kPrecisionAttrName, b.getStringAttr(precision));
  return castTo(b, linear.getResult(), resultType.getElementType());
}

/// `op` without the tensors nobody reads any more (the amaxes of FP8 state being dropped), erased when none
/// is left: every rank compiles the same plan, so every rank drops the same. True when it changed.
bool dropUnreadTensors(AllReduceOp op) {
  SmallVector<Value> inputs, read;
  for (auto [in, out] : llvm::zip(op.getInputs(), op.getResults()))
    if (!out.use_empty())
      inputs.push_back(in), read.push_back(out);
  if (read.size() == op.getNumResults())
    return false;
  if (!inputs.empty()) {
    OpBuilder b(op);
    auto smaller = b.create<AllReduceOp>(op.getLoc(), ValueRange(inputs).getTypes(), inputs, op.getReductionAttr());
    for (auto [old, now] : llvm::zip(read, smaller.getResults()))
      old.replaceAllUsesWith(now);
  }
  op.erase();
  return true;
}

struct TecLowerForTarget : tec::impl::TecLowerForTargetBase<TecLowerForTarget> {
  using TecLowerForTargetBase::TecLowerForTargetBase;

  /// Drops FP8 meta state no op uses any more: its update results and its arguments.
  void dropDeadFp8State(func::FuncOp f) {
    auto ret = llvm::cast<func::ReturnOp>(f.getBody().front().getTerminator());
    llvm::BitVector deadResults(f.getNumResults());
    SmallVector<Value> kept;
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      if (f.getResultAttr(i, kStateUpdateAttrName) && v.getDefiningOp<DelayedScalingOp>())
        deadResults.set(i);
      else
        kept.push_back(v);
    }
    OpBuilder(ret).create<func::ReturnOp>(ret.getLoc(), kept);
    ret.erase();
    (void)f.eraseResults(deadResults);
    // Erase what fed them, innermost last.
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<AllReduceOp> collectives;
      f.walk([&](AllReduceOp op) { collectives.push_back(op); });
      for (AllReduceOp op : collectives)
        changed |= dropUnreadTensors(op);
      f.walk([&](Operation *op) {
        if (llvm::isa<DelayedScalingOp, CurrentScalingOp, AmaxOp, QuantizeOp, QuantizeBlocksOp, DequantizeOp,
                      AttentionFp8Op, AttentionFp8GradOp>(op) &&
            op->use_empty()) {
          op->erase();
          changed = true;
        }
      });
    }
    llvm::BitVector deadArgs(f.getNumArguments());
    for (BlockArgument arg : f.getArguments())
      if (f.getArgAttr(arg.getArgNumber(), kStateAttrName) && arg.use_empty())
        deadArgs.set(arg.getArgNumber());
    (void)f.eraseArguments(deadArgs);
  }

  /// tec.attention_fp8 and its gradient where the target keeps no FP8: tec.attention and tec.attention_grad
  /// again, on what the quantizes read, for the readers of the dequantized results.
  LogicalResult lowerFp8Attention(func::FuncOp f) {
    auto source = [](Value v) -> Value {
      auto q = v.getDefiningOp<QuantizeOp>();
      return q && !q.getTransposeInput() ? q.getInput() : Value();
    };
    auto replaceDequantized = [](Value fp8, Value wide, OpBuilder &b) {
      for (Operation *user : llvm::make_early_inc_range(fp8.getUsers()))
        if (auto d = llvm::dyn_cast<DequantizeOp>(user))
          d.replaceAllUsesWith(castTo(b, wide, d.getType().getElementType()));
    };
    llvm::DenseMap<Operation *, AttentionOp> lowered;
    WalkResult walk = f.walk([&](Operation *op) {
      OpBuilder b(op);
      if (auto att = llvm::dyn_cast<AttentionFp8Op>(op)) {
        Value q = source(att.getQuery()), k = source(att.getKey()), v = source(att.getValue());
        if (!q || !k || !v) {
          att.emitOpError("expected operands quantized in this function to lower it for ") << target;
          return WalkResult::interrupt();
        }
        auto type = att.getResult().getType().clone(llvm::cast<RankedTensorType>(q.getType()).getElementType());
        auto wide = b.create<AttentionOp>(att.getLoc(), TypeRange{type, att.getLogsumexp().getType()}, q, k, v,
                                          att.getMask(), att.getScaleAttr(), att.getCausalAttr());
        replaceDequantized(att.getResult(), wide.getResult(), b);
        att.getLogsumexp().replaceAllUsesWith(wide.getLogsumexp());
        lowered[att] = wide;
      } else if (auto g = llvm::dyn_cast<AttentionFp8GradOp>(op)) {
        auto forward = lowered.find(g.getResult().getDefiningOp());
        Value dout = source(g.getGrad());
        if (forward == lowered.end() || !dout) {
          g.emitOpError("expected its forward attention and a gradient quantized in this function to lower it for ")
              << target;
          return WalkResult::interrupt();
        }
        AttentionOp wide = forward->second;
        Type element = wide.getResult().getType().getElementType();
        auto like = [&](Value v) { return llvm::cast<RankedTensorType>(v.getType()).clone(element); };
        auto grad = b.create<AttentionGradOp>(
            g.getLoc(), TypeRange{like(g.getQueryGrad()), like(g.getKeyGrad()), like(g.getValueGrad())},
            castTo(b, dout, element), wide.getQuery(), wide.getKey(), wide.getValue(), wide.getResult(),
            wide.getLogsumexp(), g.getMask(), g.getScaleAttr(), g.getCausalAttr());
        for (auto [fp8, now] : llvm::zip(g.getResults().take_front(3), grad.getResults()))
          replaceDequantized(fp8, now, b);
      }
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }

  void runOnOperation() override {
    const TargetCapability *cap = lookupTarget(target);
    if (!cap) {
      getOperation().emitError("unknown target '") << target << "' (" << knownTargets() << ")";
      return signalPassFailure();
    }
    const bool keepFp8 = cap->gemms == GemmPrecision::Fp8 || (cap->name == "cpu" && fp8Emulate);
    Type fallback = elementTypeFor(cap->fallback, &getContext());
    std::string fallbackName(precisionName(cap->fallback));
    Builder attrs(&getContext());
    for (auto f : getOperation().getOps<func::FuncOp>()) {
      SmallVector<Operation *> fp8Gemms;
      f.walk([&](Operation *op) {
        if (llvm::isa<Fp8GemmOp, Fp8BlockGemmOp>(op))
          fp8Gemms.push_back(op);
      });
      SmallVector<LinearOp> linears; // the GEMMs tec-insert-fp8 left in higher precision
      f.walk([&](LinearOp op) { linears.push_back(op); });
      for (Operation *op : fp8Gemms) {
        if (keepFp8) {
          std::string note = cap->name == "cpu" ? "emulated" : std::string(cap->note);
          auto formats = op->getAttrOfType<StringAttr>(kPrecisionAttrName); // tec-insert-fp8's, e.g. E5M2 x E4M3
          op->setAttr(kPrecisionAttrName,
                      attrs.getStringAttr("fp8: " + (formats ? formats.str() : std::string("E4M3 x E4M3, delayed scaling")) +
                                          (note.empty() ? "" : " (" + note + ")")));
          continue;
        }
        // Both GEMMs read (input, weight, scale_inv, scale_inv, bias?).
        Operation *xq = op->getOperand(0).getDefiningOp(), *wq = op->getOperand(1).getDefiningOp();
        if (!llvm::isa_and_nonnull<QuantizeOp, QuantizeBlocksOp>(xq) || !llvm::isa_and_nonnull<QuantizeOp, QuantizeBlocksOp>(wq)) {
          op->emitOpError("expected operands quantized in this function to lower it for ") << target;
          return signalPassFailure();
        }
        OpBuilder b(op);
        // What each quantize read, in the GEMM's layout again (a transposed read is a transpose).
        auto unquantized = [&](Operation *q) -> Value {
          Value input = q->getOperand(0);
          auto single = llvm::dyn_cast<QuantizeOp>(q);
          if (!(single ? single.getTransposeInput() : llvm::cast<QuantizeBlocksOp>(q).getTransposeInput()))
            return input;
          auto in = llvm::cast<RankedTensorType>(input.getType());
          return b.create<TransposeOp>(q->getLoc(), RankedTensorType::get({in.getDimSize(1), in.getDimSize(0)},
                                                                          in.getElementType()),
                                       input, ArrayRef<int64_t>{1, 0});
        };
        Value bias = op->getNumOperands() > 4 ? op->getOperand(4) : Value();
        Value y = gemmIn(b, op, unquantized(xq), unquantized(wq), bias, op->getAttrOfType<StringAttr>("epilogue"),
                         op->getAttrOfType<BoolAttr>("transpose_b"), fallback,
                         fallbackName + ": FP8 asked; " + std::string(cap->note));
        op->getResult(0).replaceAllUsesWith(y);
        op->erase();
      }
      // GEMMs that are not FP8 run in the target's tensor-core precision; the reason they are not FP8
      // (from tec-insert-fp8) stays in the tag.
      for (LinearOp op : linears) {
        auto why = op->getAttrOfType<StringAttr>(kPrecisionAttrName);
        std::string precision = fallbackName + ": " + (why ? why.str() : cap->note.empty() ? "the target's precision"
                                                                                           : std::string(cap->note));
        if (op.getType().getElementType() == fallback || !llvm::isa<Float32Type>(op.getType().getElementType())) {
          op->setAttr(kPrecisionAttrName, attrs.getStringAttr(precision));
          continue;
        }
        OpBuilder b(op);
        Value y = gemmIn(b, op, op.getInput(), op.getWeight(), op.getBias(), op.getEpilogueAttr(),
                         op.getTransposeBAttr(), fallback, precision);
        op.replaceAllUsesWith(y);
        op.erase();
      }
      if (!keepFp8) {
        if (failed(lowerFp8Attention(f)))
          return signalPassFailure();
        dropDeadFp8State(f);
      }
    }
  }
};

} // namespace
