#include "ir/TecBuilders.h"
#include "passes/Passes.h"
#include "support/Sharding.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <numeric>

namespace tec {
#define GEN_PASS_DEF_TECBUILDTRAINSTEP
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

Value scalar(OpBuilder &b, Location loc, double value) { return scalarConstant(b, loc, b.getF32Type(), value); }

template <typename Op> Value binary(OpBuilder &b, Location loc, Value x, Value y) {
  return broadcastBinary<Op>(b, loc, x, y);
}

struct TecBuildTrainStep : tec::impl::TecBuildTrainStepBase<TecBuildTrainStep> {
  using TecBuildTrainStepBase::TecBuildTrainStepBase;

  /// The type of the target compared with an output: the output's own, or class indices (i64, the
  /// output's shape without its last dim) for cross-entropy.
  Type targetType(Type output) {
    auto type = llvm::cast<RankedTensorType>(output);
    if (loss != Loss::CrossEntropy)
      return type;
    return RankedTensorType::get(type.getShape().drop_back(), IntegerType::get(&getContext(), 64));
  }

  /// One output's loss against its target, a 0-D f32: mse mean((y-t)^2), l1 mean(|y-t|), cross-entropy
  /// -mean of log_softmax(y)[label] over the labels that are not `ignoreIndex` (torch's CrossEntropyLoss:
  /// a language model's [B, T, V] logits against [B, T] labels with padding at -100).
  Value lossTerm(OpBuilder &b, Location loc, Value prediction, Value target) {
    auto type = llvm::cast<RankedTensorType>(prediction.getType());
    auto scalarType = RankedTensorType::get({}, b.getF32Type());
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      axes.push_back(d);
    if (loss == Loss::CrossEntropy) {
      int64_t axis = type.getRank() - 1;
      auto labels = llvm::cast<RankedTensorType>(target.getType());
      auto splat = [&](int64_t v) {
        return b.create<ConstantOp>(loc, labels, DenseElementsAttr::get(labels, b.getI64IntegerAttr(v)));
      };
      auto countedType = RankedTensorType::get(labels.getShape(), b.getI1Type());
      Value counted = b.create<CompareOp>(loc, countedType, target, splat(ignoreIndex), "ne");
      Value safe = b.create<WhereOp>(loc, labels, counted, target, splat(0)); // an ignored label picks class 0
      SmallVector<int64_t> column(labels.getShape());
      column.push_back(1);
      auto weightType = RankedTensorType::get(labels.getShape(), b.getF32Type());
      Value weight = b.create<CastOp>(loc, weightType, counted);
      Value logp = b.create<LogSoftmaxOp>(loc, type, prediction, axis);
      Value onehot = b.create<OneHotOp>(loc, type, safe);
      Value picks = binary<MulOp>(b, loc, b.create<MulOp>(loc, type, onehot, logp),
                                  b.create<ReshapeOp>(loc, RankedTensorType::get(column, b.getF32Type()), weight));
      Value picked = b.create<ReduceSumOp>(loc, scalarType, picks, axes, false);
      SmallVector<int64_t> labelAxes(axes.begin(), axes.end() - 1);
      Value count = b.create<ReduceSumOp>(loc, scalarType, weight, labelAxes, false);
      Value mean = binary<DivOp>(b, loc, picked, binary<MaxOp>(b, loc, count, scalar(b, loc, 1.0)));
      return binary<MulOp>(b, loc, mean, scalar(b, loc, -1.0));
    }
    Value diff = b.create<SubOp>(loc, type, prediction, target);
    Value pointwise = loss == Loss::L1 ? b.create<AbsOp>(loc, type, diff).getResult()
                                   : b.create<MulOp>(loc, type, diff, diff).getResult();
    return b.create<ReduceMeanOp>(loc, scalarType, pointwise, axes, false);
  }

  /// `@__loss`: forward's arguments plus one target per result, returning the loss (a 0-D f32). With more
  /// than one result, each term is scaled by a 0-D weight argument after the targets: the trainer sets 1
  /// for the outputs the user gives targets for and 0 for the others, so one plan trains on any of them.
  FailureOr<func::FuncOp> buildLoss(func::FuncOp forward) {
    OpBuilder b(forward);
    b.setInsertionPointAfter(forward);
    SmallVector<Type> argTypes(forward.getArgumentTypes());
    for (Type t : forward.getResultTypes())
      argTypes.push_back(targetType(t));
    auto scalarType = RankedTensorType::get({}, b.getF32Type());
    const bool weighted = forward.getNumResults() > 1;
    if (weighted)
      argTypes.append(forward.getNumResults(), scalarType);
    auto fn = b.create<func::FuncOp>(forward.getLoc(), "__loss", b.getFunctionType(argTypes, {scalarType}));
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      if (auto attrs = forward.getArgAttrDict(i))
        fn.setArgAttrs(i, attrs);
    Block *body = fn.addEntryBlock();
    IRMapping map;
    for (auto [from, to] : llvm::zip(forward.getArguments(), body->getArguments()))
      map.map(from, to);
    b.setInsertionPointToEnd(body);
    for (Operation &op : forward.getBody().front().without_terminator())
      b.clone(op, map);
    auto ret = llvm::cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    Value total;
    for (auto [i, y] : llvm::enumerate(ret.getOperands())) {
      Value prediction = map.lookup(y), target = body->getArgument(forward.getNumArguments() + i);
      auto type = llvm::cast<RankedTensorType>(prediction.getType());
      if (!type.getElementType().isF32() || (loss == Loss::CrossEntropy && type.getRank() < 1)) {
        fn.erase();
        return forward.emitError("expected f32 outputs (with a class dim for cross-entropy) to train on, got ")
               << type, failure();
      }
      Value term = lossTerm(b, fn.getLoc(), prediction, target);
      if (weighted)
        term = b.create<MulOp>(fn.getLoc(), scalarType, term,
                               body->getArgument(forward.getNumArguments() + forward.getNumResults() + i));
      total = total ? b.create<AddOp>(fn.getLoc(), scalarType, total, term).getResult() : term;
    }
    b.create<func::ReturnOp>(fn.getLoc(), total);
    return fn;
  }

  /// A state argument of train_step, every element starting at `init`.
  Value addState(func::FuncOp f, Block *body, RankedTensorType type, const std::string &name, float init = 0.0f,
                 StringRef kind = "training") {
    Value arg = body->addArgument(type, f.getLoc());
    f.setType(FunctionType::get(f.getContext(), body->getArgumentTypes(), f.getResultTypes()));
    Builder b(f.getContext());
    f.setArgAttr(body->getNumArguments() - 1, kStateAttrName, b.getStringAttr(name));
    f.setArgAttr(body->getNumArguments() - 1, kStateKindAttrName, b.getStringAttr(kind));
    f.setArgAttr(body->getNumArguments() - 1, kStateInitAttrName, b.getF32FloatAttr(init));
    return arg;
  }

  /// Why a param is not trained, or nothing when it is: --frozen first, then --trainable, then what the
  /// importer found (`tec.frozen`: a running statistic, a mask, a value the exporter folded).
  std::optional<std::string> frozenReason(StringRef name, StringAttr importerReason) {
    if (!frozen.empty() && llvm::Regex(frozen).match(name))
      return std::string("--frozen");
    if (!trainable.empty() && llvm::Regex(trainable).match(name))
      return std::nullopt;
    if (importerReason)
      return importerReason.str();
    return std::nullopt;
  }

  /// A state argument holding this rank's shard of a tensor of `whole`'s type (optimizer sharding).
  Value addShardState(func::FuncOp f, Block *body, RankedTensorType whole, const std::string &name) {
    auto type = RankedTensorType::get({shardElements(whole.getNumElements(), shardOptimizer)}, whole.getElementType());
    Value arg = addState(f, body, type, name, 0.0f, "optimizer");
    Builder b(f.getContext());
    f.setArgAttr(body->getNumArguments() - 1, kStateShardOfAttrName, b.getDenseI64ArrayAttr(whole.getShape()));
    f.setArgAttr(body->getNumArguments() - 1, kStateShardRanksAttrName, b.getI64IntegerAttr(shardOptimizer));
    return arg;
  }

  /// The gradients' indices in buckets of about `bucketMb` MiB, in the order the backward produces them.
  SmallVector<SmallVector<unsigned>> gradientBuckets(ArrayRef<Value> grads) {
    SmallVector<unsigned> order(grads.size());
    std::iota(order.begin(), order.end(), 0u);
    auto producedBefore = [&](unsigned x, unsigned y) {
      Operation *a = grads[x].getDefiningOp(), *c = grads[y].getDefiningOp();
      if (!a || !c)
        return a == nullptr && c != nullptr; // arguments first
      return a != c && a->isBeforeInBlock(c);
    };
    std::stable_sort(order.begin(), order.end(), producedBefore);
    const double bucketBytes = std::max(bucketMb.getValue(), 0.0) * 1024.0 * 1024.0;
    SmallVector<SmallVector<unsigned>> buckets(1);
    double bytes = 0;
    for (unsigned i : order) {
      if (bytes >= bucketBytes && !buckets.back().empty()) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().push_back(i);
      bytes += static_cast<double>(llvm::cast<RankedTensorType>(grads[i].getType()).getNumElements()) * 4.0;
    }
    if (buckets.back().empty())
      buckets.pop_back();
    return buckets;
  }

  /// Replaces each gradient by its sum over the ranks (tec.all_reduce; each rank's is its share of the global
  /// batch's, the backward having been seeded with 1 / world_size), or by this rank's shard of that sum
  /// (tec.reduce_scatter, with optimizer sharding), a collective per bucket right after its last gradient so
  /// that a backend may send it while the rest of the backward runs.
  void sumOverRanks(OpBuilder &b, Location loc, Block *body, SmallVector<Value> &grads,
                    ArrayRef<SmallVector<unsigned>> buckets) {
    OpBuilder::InsertionGuard guard(b);
    for (ArrayRef<unsigned> bucket : buckets) {
      SmallVector<Value> inputs;
      SmallVector<Type> types;
      Operation *last = nullptr;
      for (unsigned i : bucket) {
        inputs.push_back(grads[i]);
        auto type = llvm::cast<RankedTensorType>(grads[i].getType());
        types.push_back(shardOptimizer > 0 ? RankedTensorType::get({shardElements(type.getNumElements(), shardOptimizer)},
                                                                   type.getElementType())
                                           : type);
        if (Operation *def = grads[i].getDefiningOp(); def && def->getBlock() == body &&
                                                        (!last || last->isBeforeInBlock(def)))
          last = def;
      }
      if (last)
        b.setInsertionPointAfter(last);
      else
        b.setInsertionPointToStart(body);
      Operation *reduced = shardOptimizer > 0
                               ? b.create<ReduceScatterOp>(loc, types, inputs, b.getI64IntegerAttr(shardOptimizer))
                               : b.create<AllReduceOp>(loc, types, inputs, b.getStringAttr("sum")).getOperation();
      for (auto [i, result] : llvm::zip(bucket, reduced->getResults()))
        grads[i] = result;
    }
  }

  /// With optimizer sharding a rank sees its shards only: a sum over them is summed over the ranks too.
  Value overAllShards(OpBuilder &b, Location loc, Value partial) {
    if (shardOptimizer == 0)
      return partial;
    return b.create<AllReduceOp>(loc, TypeRange{partial.getType()}, ValueRange{partial}, b.getStringAttr("sum"))
        .getResult(0);
  }

  static bool isZeroConstant(Value v) {
    auto constant = v.getDefiningOp<ConstantOp>();
    auto dense = constant ? llvm::dyn_cast<DenseFPElementsAttr>(constant.getValue()) : nullptr;
    return dense && dense.isSplat() && dense.getSplatValue<APFloat>().isZero();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("no @forward to train");
      return signalPassFailure();
    }
    if (!frozen.empty() && !llvm::Regex(frozen).isValid()) {
      module.emitError("--frozen is not a valid regex: '") << frozen << "'";
      return signalPassFailure();
    }
    if (!trainable.empty() && !llvm::Regex(trainable).isValid()) {
      module.emitError("--trainable is not a valid regex: '") << trainable << "'";
      return signalPassFailure();
    }
    // Running statistics are no model output to train on: the step writes them back after the forward.
    auto runningStats = dropRunningStatistics(forward);
    for (auto [next, arg] : runningStats)
      if (arg >= forward.getNumArguments()) {
        forward.emitError("a running statistic names argument ") << arg << " of " << forward.getNumArguments();
        return signalPassFailure();
      }
    auto lossFn = buildLoss(forward);
    if (failed(lossFn))
      return signalPassFailure();
    // Frozen params take no gradient: in the loss function they are plain arguments, marked with why.
    OpBuilder attrs(module.getContext());
    auto freeze = [&](unsigned i, StringRef why) {
      lossFn->removeArgAttr(i, kParamAttrName);
      lossFn->setArgAttr(i, kFrozenAttrName, attrs.getStringAttr(why));
    };
    for (unsigned i = 0; i < lossFn->getNumArguments(); ++i)
      if (auto name = lossFn->getArgAttrOfType<StringAttr>(i, kParamAttrName)) {
        if (auto why = frozenReason(name.getValue(), lossFn->getArgAttrOfType<StringAttr>(i, kFrozenAttrName)))
          freeze(i, *why);
        else
          lossFn->removeArgAttr(i, kFrozenAttrName); // --trainable overrides the importer
      }
    for (auto [next, arg] : runningStats) // updated from the batch, never by the optimizer
      freeze(arg, "a BatchNormalization running statistic");
    auto vjp = buildVjp(*lossFn, "params", "__loss_vjp");
    if (failed(vjp)) {
      lossFn->erase();
      return signalPassFailure();
    }
    // A param no gradient reaches (it only feeds comparisons, masks or integer math) is not trained:
    // weight decay alone would move it.
    SmallVector<unsigned> unreached;
    for (unsigned r = 1; r < vjp->getNumResults(); ++r)
      if (isZeroConstant(vjp->getBody().front().getTerminator()->getOperand(r)))
        unreached.push_back(vjp->getResultAttrOfType<IntegerAttr>(r, kGradOfAttrName).getInt());
    if (!unreached.empty()) {
      vjp->erase();
      for (unsigned i : unreached)
        freeze(i, "no gradient reaches it from the loss");
      vjp = buildVjp(*lossFn, "params", "__loss_vjp");
      if (failed(vjp)) {
        lossFn->erase();
        return signalPassFailure();
      }
    }

    // train_step(inputs, params, targets, optimizer state..., step) -> (loss, next state...)
    OpBuilder b(*vjp);
    b.setInsertionPointAfter(*vjp);
    unsigned nArgs = lossFn->getNumArguments();
    SmallVector<Type> argTypes(lossFn->getArgumentTypes());
    auto step = b.create<func::FuncOp>(forward.getLoc(), "train_step", b.getFunctionType(argTypes, {}));
    for (unsigned i = 0; i < nArgs; ++i)
      if (auto attrs = i < forward.getNumArguments() ? forward.getArgAttrDict(i) : lossFn->getArgAttrDict(i))
        step.setArgAttrs(i, attrs); // frozen params keep their tec.param: they are params, only not trained
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      if (auto why = lossFn->getArgAttrOfType<StringAttr>(i, kFrozenAttrName); why && step.getArgAttr(i, kParamAttrName))
        step.setArgAttr(i, kFrozenAttrName, why); // reported by the compile summary
      else
        step.removeArgAttr(i, kFrozenAttrName);
    }
    Block *body = step.addEntryBlock();
    b.setInsertionPointToEnd(body);
    Location loc = forward.getLoc();
    IRMapping map;
    for (unsigned i = 0; i < nArgs; ++i)
      map.map(vjp->getArgument(i), body->getArgument(i));
    // Dynamic loss scaling (FP16): the backward pass starts from the loss scale instead of 1, and the
    // gradients are divided by it again before the update.
    auto scalarType = RankedTensorType::get({}, b.getF32Type());
    Value lossScaleState, cleanSteps;
    if (lossScale > 0.0) {
      lossScaleState = addState(step, body, scalarType, "loss_scale", static_cast<float>(lossScale));
      cleanSteps = addState(step, body, scalarType, "loss_scale/clean_steps");
    }
    // d loss / d loss, over the ranks: each rank's loss is its share's mean, and a share is 1 / world_size
    // of the global batch.
    Value ranks = b.create<WorldSizeOp>(loc, scalarType);
    map.map(vjp->getArgument(nArgs), binary<DivOp>(b, loc, lossScaleState ? lossScaleState : scalar(b, loc, 1.0), ranks));
    for (Operation &op : vjp->getBody().front().without_terminator())
      b.clone(op, map);
    auto vjpReturn = llvm::cast<func::ReturnOp>(vjp->getBody().front().getTerminator());

    Value stepCount = addState(step, body, scalarType, "step");
    // The base rate is state, not a constant: the trainer may set it between steps (Trainer::setLearningRate).
    Value baseRate = addState(step, body, scalarType, "lr", static_cast<float>(learningRate));
    Value lr = b.create<LrScheduleOp>(loc, stepCount.getType(), stepCount, baseRate, b.getStringAttr(choiceName(schedule.getValue())),
                                      b.getI64IntegerAttr(warmupSteps), b.getI64IntegerAttr(totalSteps));
    Value nextStep = binary<AddOp>(b, loc, stepCount, scalar(b, loc, 1.0));
    SmallVector<Value> results{map.lookup(vjpReturn.getOperand(0))};
    SmallVector<int64_t> updates{-1};
    if (lossScaleState) { // reported: the scale this step ran with
      results.push_back(lossScaleState);
      updates.push_back(-1);
    }
    // With loss scaling, a step whose gradients overflowed keeps every state as it was.
    Value finite;
    auto record = [&](Value next, Value state) {
      results.push_back(next);
      updates.push_back(llvm::cast<BlockArgument>(state).getArgNumber());
    };
    auto update = [&](Value next, Value state) {
      record(finite ? b.create<WhereOp>(loc, next.getType(), finite, next, state) : next, state);
    };
    SmallVector<Value> grads;
    for (unsigned r = 1; r < vjpReturn.getNumOperands(); ++r) {
      Value g = map.lookup(vjpReturn.getOperand(r));
      if (lossScaleState)
        g = binary<DivOp>(b, loc, g, lossScaleState);
      grads.push_back(g);
    }
    const auto buckets = gradientBuckets(grads);
    sumOverRanks(b, loc, body, grads, buckets);
    { // the loss the ranks report: the global batch's, reduced where it is computed (its position is where
      // codegen separates the forward's activations saved for the backward from the rest)
      OpBuilder::InsertionGuard guard(b);
      if (Operation *def = results[0].getDefiningOp())
        b.setInsertionPointAfter(def);
      results[0] = b.create<AllReduceOp>(loc, TypeRange{results[0].getType()}, ValueRange{results[0]},
                                         b.getStringAttr("mean"))
                       .getResult(0);
    }
    auto boolType = RankedTensorType::get({}, b.getI1Type());
    // Gradient accumulation: this call's gradients join the sums; the last call of a window updates with
    // their mean (`apply`) and clears them.
    Value apply;
    if (accumulate > 1) {
      Value micro = addState(step, body, scalarType, "accumulate/micro");
      Value counted = binary<AddOp>(b, loc, micro, scalar(b, loc, 1.0));
      apply = b.create<CompareOp>(loc, boolType, counted, scalar(b, loc, static_cast<double>(accumulate)), "ge");
      record(b.create<WhereOp>(loc, scalarType, apply, scalar(b, loc, 0.0), counted), micro);
      for (unsigned r = 1; r < vjpReturn.getNumOperands(); ++r) {
        unsigned argIndex = vjp->getResultAttrOfType<IntegerAttr>(r, kGradOfAttrName).getInt();
        std::string name = step.getArgAttrOfType<StringAttr>(argIndex, kParamAttrName).str();
        Value &g = grads[r - 1];
        auto type = llvm::cast<RankedTensorType>(g.getType());
        auto whole = llvm::cast<RankedTensorType>(body->getArgument(argIndex).getType());
        Value sum = shardOptimizer > 0 ? addShardState(step, body, whole, name + "/grad_sum")
                                       : addState(step, body, type, name + "/grad_sum", 0.0f, "optimizer");
        Value total = b.create<AddOp>(loc, type, sum, g);
        record(b.create<WhereOp>(loc, type, apply, scalar(b, loc, 0.0), total), sum);
        g = binary<DivOp>(b, loc, total, scalar(b, loc, static_cast<double>(accumulate)));
      }
    }
    if (lossScaleState) {
      finite = b.create<AllFiniteOp>(loc, boolType, grads);
      if (shardOptimizer > 0) { // finite on every rank's shards: no rank saw a non-finite value
        Value flagged = binary<SubOp>(b, loc, scalar(b, loc, 1.0), b.create<CastOp>(loc, scalarType, finite));
        Value anywhere = b.create<AllReduceOp>(loc, TypeRange{scalarType}, ValueRange{flagged}, b.getStringAttr("max"))
                             .getResult(0);
        finite = b.create<CompareOp>(loc, boolType, anywhere, scalar(b, loc, 0.0), "eq");
      }
      auto next = b.create<LossScaleUpdateOp>(loc, TypeRange{scalarType, scalarType}, lossScaleState, cleanSteps,
                                              finite, b.getI64IntegerAttr(growthInterval), b.getF32FloatAttr(2.0f),
                                              b.getF32FloatAttr(0.5f));
      auto applied = [&](Value next, Value state) { // the scale moves once a window, on its update
        return apply ? b.create<WhereOp>(loc, scalarType, apply, next, state).getResult() : next;
      };
      record(applied(next.getNewScale(), lossScaleState), lossScaleState);
      record(applied(next.getNewCleanSteps(), cleanSteps), cleanSteps);
    }
    // From here `finite` gates every update: the optimizer's, the step counter's.
    if (apply)
      finite = finite ? b.create<CompareOp>(loc, boolType, finite, apply, "and").getResult() : apply;
    // Gradient clipping by global norm: every gradient times min(1, max_norm / (norm + 1e-6)).
    Value clip;
    if (clipNorm > 0.0) {
      Value sumSquares;
      for (Value g : grads) {
        auto type = llvm::cast<RankedTensorType>(g.getType());
        SmallVector<int64_t> axes;
        for (int64_t d = 0; d < type.getRank(); ++d)
          axes.push_back(d);
        Value sq = b.create<ReduceSumOp>(loc, stepCount.getType(), b.create<MulOp>(loc, type, g, g), axes, false);
        sumSquares = sumSquares ? binary<AddOp>(b, loc, sumSquares, sq) : sq;
      }
      Value norm = b.create<SqrtOp>(loc, stepCount.getType(), overAllShards(b, loc, sumSquares));
      clip = b.create<ClipCoefficientOp>(loc, stepCount.getType(), norm, b.getF32FloatAttr(clipNorm));
    }
    // One fused op per parameter: clipping, weight decay, moments and the step (with loss scaling,
    // skipped as a whole on a non-finite gradient), and the new values written in place by codegen. With
    // optimizer sharding each rank updates its shard, and the params are gathered bucket by bucket.
    SmallVector<Value> updated(grads.size());
    for (unsigned r = 1; r < vjpReturn.getNumOperands(); ++r) {
      unsigned argIndex = vjp->getResultAttrOfType<IntegerAttr>(r, kGradOfAttrName).getInt();
      Value p = body->getArgument(argIndex), g = grads[r - 1];
      auto whole = llvm::cast<RankedTensorType>(p.getType());
      std::string name = step.getArgAttrOfType<StringAttr>(argIndex, kParamAttrName).str();
      auto type = llvm::cast<RankedTensorType>(g.getType());
      if (shardOptimizer > 0)
        p = b.create<ShardOp>(loc, type, p, b.getI64IntegerAttr(shardOptimizer));
      auto moment = [&](const std::string &suffix) {
        return shardOptimizer > 0 ? addShardState(step, body, whole, name + suffix)
                                  : addState(step, body, type, name + suffix, 0.0f, "optimizer");
      };
      SmallVector<Value> moments;
      if (optimizer == Optimizer::AdamW)
        moments = {moment("/adam_m"), moment("/adam_v")};
      else if (momentum != 0.0)
        moments = {moment("/momentum")};
      SmallVector<Type> types(1 + moments.size(), type);
      auto fused = b.create<OptimizerUpdateOp>(
          loc, types, p, g, moments, lr, stepCount, clip, finite, b.getStringAttr(choiceName(optimizer.getValue())),
          b.getF32FloatAttr(beta1), b.getF32FloatAttr(beta2), b.getF32FloatAttr(eps), b.getF32FloatAttr(weightDecay),
          b.getF32FloatAttr(momentum), b.getBoolAttr(nesterov));
      for (auto [next, moment] : llvm::zip(fused.getNewMoments(), moments))
        record(next, moment);
      updated[r - 1] = fused.getNewParam();
    }
    auto paramOf = [&](unsigned i) {
      return body->getArgument(vjp->getResultAttrOfType<IntegerAttr>(i + 1, kGradOfAttrName).getInt());
    };
    if (shardOptimizer > 0)
      for (ArrayRef<unsigned> bucket : buckets) {
        SmallVector<Value> shards;
        SmallVector<Type> wholes;
        for (unsigned i : bucket) {
          shards.push_back(updated[i]);
          wholes.push_back(paramOf(i).getType());
        }
        auto gathered = b.create<AllGatherOp>(loc, wholes, shards, b.getI64IntegerAttr(shardOptimizer));
        for (auto [i, result] : llvm::zip(bucket, gathered.getResults()))
          updated[i] = result;
      }
    for (auto [i, next] : llvm::enumerate(updated))
      record(next, paramOf(i));
    if (!runningStats.empty()) { // the forward again: CSE merges it with the vjp's copy
      IRMapping forwardMap;
      for (auto [from, to] : llvm::zip(forward.getArguments(), body->getArguments()))
        forwardMap.map(from, to);
      for (Operation &op : forward.getBody().front().without_terminator())
        b.clone(op, forwardMap);
      for (auto [next, arg] : runningStats)
        record(forwardMap.lookup(next), body->getArgument(arg));
    }
    update(nextStep, stepCount);
    b.create<func::ReturnOp>(loc, results);
    step.setType(b.getFunctionType(body->getArgumentTypes(), TypeRange(ValueRange(results))));
    step.setResultAttr(0, kLossAttrName, b.getUnitAttr());
    for (auto [i, arg] : llvm::enumerate(updates))
      if (arg >= 0)
        step.setResultAttr(i, kStateUpdateAttrName, b.getI64IntegerAttr(arg));
    // Targets (and their loss weights) are named after the outputs they are compared with.
    for (unsigned i = forward.getNumArguments(); i < nArgs; ++i) {
      unsigned k = i - forward.getNumArguments();
      if (k < forward.getNumResults())
        step.setArgAttr(i, kTargetAttrName, b.getI64IntegerAttr(k));
      else
        step.setArgAttr(i, kLossWeightAttrName, b.getI64IntegerAttr(k - forward.getNumResults()));
    }
    vjp->erase();
    lossFn->erase();
  }
};

} // namespace

llvm::SmallVector<std::pair<Value, unsigned>> tec::dropRunningStatistics(func::FuncOp forward) {
  llvm::SmallVector<std::pair<Value, unsigned>> removed;
  llvm::BitVector tagged(forward.getNumResults());
  auto ret = llvm::cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  for (unsigned r = 0; r < forward.getNumResults(); ++r)
    if (auto arg = forward.getResultAttrOfType<IntegerAttr>(r, kRunningStatAttrName)) {
      tagged.set(r);
      removed.push_back({ret.getOperand(r), static_cast<unsigned>(arg.getInt())});
    }
  if (removed.empty())
    return removed;
  ret->eraseOperands(tagged);
  forward.eraseResults(tagged);
  return removed;
}
