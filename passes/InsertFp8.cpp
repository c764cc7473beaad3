#include "passes/Passes.h"
#include "support/Targets.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Regex.h"

#include <map>

namespace tec {
#define GEN_PASS_DEF_TECINSERTFP8
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// How a GEMM operand is quantized: its recipe and, under block scaling and MXFP8, its blocks ({0, 0} for a
/// per-tensor scale).
struct OperandScaling {
  Fp8Recipe recipe;
  std::array<int64_t, 2> block{0, 0};
};

/// A quantized copy's key: the GEMM operand's type, whether it reads the tensor transposed (its layout and
/// view) and its blocks. The type alone is not enough: a square operand (a [16, 16] gradient of batch 16
/// and 16 outputs) is read as it lies by one GEMM and transposed by another, under the same type; an
/// activation is cut into 1x128 blocks for its forward GEMM and 128x1 for its wgrad GEMM.
using CopyKey = std::tuple<const void *, bool, int64_t, int64_t>;
CopyKey copyKey(Type type, bool transposed, const OperandScaling &scaling) {
  return {type.getAsOpaquePointer(), transposed, scaling.block[0], scaling.block[1]};
}

/// The recipes, as `recipe` spells them: a default, then `regex=recipe` per layer (the first regex that
/// matches one of a GEMM's ONNX node names wins). No value: `auto`, the target's best.
struct RecipePolicy {
  std::optional<Fp8Recipe> byDefault = Fp8Recipe::Delayed;
  std::vector<std::pair<std::string, std::optional<Fp8Recipe>>> perLayer;
};
FailureOr<RecipePolicy> parseRecipes(StringRef spec, std::string &error) {
  RecipePolicy policy;
  SmallVector<StringRef> parts;
  spec.split(parts, ';');
  for (auto [i, part] : llvm::enumerate(parts)) {
    auto [pattern, name] = i == 0 ? std::make_pair(StringRef(), part.trim()) : part.rsplit('=');
    const bool automatic = name.trim() == "auto";
    std::optional<Fp8Recipe> recipe = parseChoice<Fp8Recipe>(name.trim());
    if ((!recipe && !automatic) || (i > 0 && (pattern.empty() || !part.contains('=')))) {
      error = "expected RECIPE[;REGEX=RECIPE...] with recipes auto, delayed, current, block or mxfp8, got '" +
              part.str() + "'";
      return failure();
    }
    if (i == 0) {
      policy.byDefault = recipe;
      continue;
    }
    if (std::string why; !llvm::Regex(pattern).isValid(why)) {
      error = "'" + pattern.str() + "' is not a valid regex: " + why;
      return failure();
    }
    policy.perLayer.emplace_back(pattern.str(), recipe);
  }
  return policy;
}

/// `auto`: the recipe each target is built for, the most accurate it has (the demo's transformer student,
/// README): MXFP8 on Blackwell's block-scaled tensor cores, DeepSeek-V3's block scaling on Hopper, current
/// scaling on Ada (no state, no stale amax after an outlier), block scaling in the cpu's emulation.
Fp8Recipe bestRecipe(const TargetCapability &target) {
  if (target.name == "cpu")
    return Fp8Recipe::Block;
  return target.sm >= 100 ? Fp8Recipe::Mxfp8 : target.sm >= 90 ? Fp8Recipe::Block : Fp8Recipe::Current;
}

Fp8Recipe recipeAsked(const RecipePolicy &policy, Location loc, const TargetCapability &target) {
  for (const auto &[pattern, recipe] : policy.perLayer) {
    llvm::Regex regex(pattern);
    for (const auto &name : sourceNodes(loc))
      if (regex.match(name))
        return recipe.value_or(bestRecipe(target));
  }
  return policy.byDefault.value_or(bestRecipe(target));
}

/// Why `target` cannot run `recipe`, or "". The cpu emulates every recipe; a GPU with FP8 runs delayed and
/// current scaling. As in Transformer Engine, block scaling needs Hopper (sm_90) and MXFP8 Blackwell
/// (sm_100), whose tensor cores they are made for; tec's CUDA backend runs both on its own block-scaled GEMM.
/// A target without FP8 loses it in tec-lower-for-target, whatever the recipe.
std::string recipeBlocker(Fp8Recipe recipe, const TargetCapability &target) {
  if (target.name == "cpu" || target.gemms != GemmPrecision::Fp8 || recipe == Fp8Recipe::Delayed ||
      recipe == Fp8Recipe::Current)
    return "";
  if (recipe == Fp8Recipe::Mxfp8 && target.sm < 100)
    return "needs sm_100 (Blackwell)";
  if (recipe == Fp8Recipe::Block && target.sm < 90)
    return "needs sm_90 (Hopper)";
  return "";
}

/// The recipe a GEMM runs: the one asked for, or the first of the chain after it (mxfp8, block, current)
/// that the target runs; with why each one before it could not.
std::pair<Fp8Recipe, std::string> recipeOn(Fp8Recipe asked, const TargetCapability &target) {
  std::string why;
  Fp8Recipe recipe = asked;
  for (std::string blocker; !(blocker = recipeBlocker(recipe, target)).empty();) {
    why += (why.empty() ? "" : "; ") + std::string(choiceName(recipe)) + ": " + blocker;
    recipe = recipe == Fp8Recipe::Mxfp8 ? Fp8Recipe::Block : Fp8Recipe::Current;
  }
  return {recipe, why};
}

bool isBlockRecipe(Fp8Recipe r) { return r == Fp8Recipe::Block || r == Fp8Recipe::Mxfp8; }

/// An operand's blocks under a block recipe: runs along K (the operand's last dim, or its first for a
/// weight read as [K, N]), 128 long under block scaling, 32 under MXFP8; a weight under block scaling in
/// 128x128 tiles (TE's 2-D weight scaling: its transpose has the same scales).
OperandScaling operandScaling(Fp8Recipe recipe, bool kIsLast, bool isWeight) {
  if (!isBlockRecipe(recipe))
    return {recipe};
  const int64_t length = recipe == Fp8Recipe::Block ? 128 : 32;
  if (recipe == Fp8Recipe::Block && isWeight)
    return {recipe, {length, length}};
  return {recipe, kIsLast ? std::array<int64_t, 2>{1, length} : std::array<int64_t, 2>{length, 1}};
}

/// How the summary names a GEMM's recipe: "block scaling 1x128 x 128x128, pow2 scales".
std::string recipeText(const OperandScaling &x, const OperandScaling &w, StringRef blockScales) {
  auto blocks = [&] {
    return std::to_string(x.block[0]) + "x" + std::to_string(x.block[1]) + " x " + std::to_string(w.block[0]) + "x" +
           std::to_string(w.block[1]);
  };
  switch (x.recipe) {
  case Fp8Recipe::Delayed:
    return "delayed scaling";
  case Fp8Recipe::Current:
    return "current scaling";
  case Fp8Recipe::Block:
    return "block scaling " + blocks() + ", " + blockScales.str() + " scales";
  case Fp8Recipe::Mxfp8:
    return "MXFP8 " + blocks() + ", E8M0 scales";
  }
  return "";
}

/// A GEMM operand in FP8: the codes, their scale_inv (one, or one per block) and how they were made.
struct QuantizedOperand {
  Value fp8, scaleInv;
  OperandScaling scaling;
};


/// Below this many multiply-adds, quantizing both operands costs more memory traffic than FP8 saves
/// (a recurring Transformer Engine finding for small layers); `--fp8=auto` keeps such GEMMs in higher
/// precision. 2^22 MACs is e.g. 64x256x256; to be replaced by thresholds measured in bench/gpu.
constexpr int64_t kMinFp8MultiplyAdds = int64_t(1) << 22;

struct Fp8Policy {
  Fp8Mode mode;
  StringRef keepPattern; // --keep-precision: node-name regex
};

/// Why a GEMM stays in higher precision, or "" when it may run in FP8. Hopper's FP8 GEMMs are TN-only
/// with 16-byte-aligned leading dimensions: K and N must be multiples of 16. Then the user's policy:
/// --fp8=none, --keep-precision, and under --fp8=auto the size threshold above.
std::string fp8Blocker(LinearOp op, const Fp8Policy &policy) {
  if (policy.mode == Fp8Mode::None)
    return "--fp8=none";
  auto w = op.getWeight().getType();
  int64_t k = op.getTransposeB() ? w.getDimSize(1) : w.getDimSize(0);
  int64_t n = op.getTransposeB() ? w.getDimSize(0) : w.getDimSize(1);
  int64_t m = op.getType().getNumElements() / std::max<int64_t>(n, 1);
  if (k % 16 || n % 16)
    return "K=" + std::to_string(k) + ", N=" + std::to_string(n) + ": FP8 GEMMs need multiples of 16";
  if (!policy.keepPattern.empty()) {
    llvm::Regex keep(policy.keepPattern);
    for (const auto &name : sourceNodes(op.getLoc()))
      if (keep.match(name))
        return "kept by --keep-precision (" + name + ")";
  }
  if (policy.mode == Fp8Mode::Auto && m * n * k < kMinFp8MultiplyAdds)
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
           " is too small for FP8 to pay (--fp8=all forces it)";
  return "";
}

/// Why an attention stays in higher precision, or "" when it may run in FP8: asked for (`attention`), then
/// the policy, and under `fp8=auto` the size threshold of GEMMs over its two products.
std::string fp8AttentionBlocker(AttentionOp op, const Fp8Policy &policy) {
  if (policy.mode == Fp8Mode::None)
    return "--fp8=none";
  if (!policy.keepPattern.empty()) {
    llvm::Regex keep(policy.keepPattern);
    for (const auto &name : sourceNodes(op.getLoc()))
      if (keep.match(name))
        return "kept by --keep-precision (" + name + ")";
  }
  auto q = op.getQuery().getType(), k = op.getKey().getType(), v = op.getValue().getType();
  const int64_t macs = q.getNumElements() / q.getDimSize(3) * k.getDimSize(2) * (q.getDimSize(3) + v.getDimSize(3));
  if (policy.mode == Fp8Mode::Auto && macs < kMinFp8MultiplyAdds)
    return std::to_string(macs) + " multiply-adds are too few for FP8 to pay (--fp8=all forces it)";
  return "";
}

} // namespace

bool tec::fp8RecipeRunsOn(Fp8Recipe recipe, StringRef target) {
  const TargetCapability *cap = lookupTarget(target.str());
  return cap && recipeBlocker(recipe, *cap).empty();
}

std::string tec::fp8RecipeError(StringRef spec) {
  std::string error;
  return failed(parseRecipes(spec, error)) ? "--fp8-recipe '" + spec.str() + "': " + error : "";
}

namespace {

struct TecInsertFp8 : tec::impl::TecInsertFp8Base<TecInsertFp8> {
  using TecInsertFp8Base::TecInsertFp8Base;

  /// Appends one state argument; returns it.
  Value addState(func::FuncOp f, RankedTensorType type, const std::string &name, float init) {
    Block &body = f.getBody().front();
    Value arg = body.addArgument(type, f.getLoc());
    unsigned index = body.getNumArguments() - 1;
    f.setType(FunctionType::get(f.getContext(), body.getArgumentTypes(), f.getResultTypes()));
    Builder b(f.getContext());
    f.setArgAttr(index, kStateAttrName, b.getStringAttr(name));
    f.setArgAttr(index, kStateInitAttrName, b.getF32FloatAttr(init));
    f.setArgAttr(index, kStateKindAttrName, b.getStringAttr("fp8"));
    return arg;
  }

  /// One FP8 tensor's delayed-scaling state: its amax history, scale and scale_inv (E4M3, or E5M2 for a
  /// gradient under HYBRID).
  struct Scaling {
    Value history, scale, scaleInv;
    float fp8Max;
  };
  Scaling addScaling(func::FuncOp f, const std::string &name, bool e5m2) {
    auto f32 = Float32Type::get(f.getContext());
    auto scalar = RankedTensorType::get({}, f32);
    Value history = addState(f, RankedTensorType::get({amaxHistory}, f32), name + "/amax_history", 0.0f);
    Value scale = addState(f, scalar, name + "/scale", 1.0f);
    Value scaleInv = addState(f, scalar, name + "/scale_inv", 1.0f);
    return {history, scale, scaleInv, e5m2 ? 57344.0f : 448.0f};
  }

  /// Quantizes `v` with the current scale: returns (quantized, scale_inv), and queues the delayed-scaling
  /// update, which is built at the end of the function: every read of this step's scale and scale_inv
  /// comes before it.
  struct PendingUpdate {
    Scaling scaling;
    Value amax;
  };
  std::pair<Value, Value> quantize(func::FuncOp f, OpBuilder &b, Value v, const std::string &name, bool e5m2,
                                   SmallVectorImpl<PendingUpdate> &updates) {
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    Scaling scaling = addScaling(f, name, e5m2);
    Location loc = v.getLoc();
    auto type = llvm::cast<RankedTensorType>(v.getType());
    // A 2-D transpose (a backward GEMM's TN operand) is read transposed by the quantize: no transposed
    // copy in between, and the amax of a transpose is its source's.
    Value source = v;
    auto transpose = v.getDefiningOp<TransposeOp>();
    const bool transposed = transpose && transpose.getPerm() == ArrayRef<int64_t>{1, 0};
    if (transposed)
      source = transpose.getInput();
    Value amax = b.create<AmaxOp>(loc, scalar, source);
    Type fp8 = e5m2 ? Type(b.getFloat8E5M2Type()) : Type(b.getFloat8E4M3FNType());
    Value q = b.create<QuantizeOp>(loc, RankedTensorType::get(type.getShape(), fp8), source, scaling.scale,
                                   b.getBoolAttr(transposed));
    updates.push_back({scaling, amax});
    return {q, scaling.scaleInv};
  }

  /// A quantized copy of `source` (read transposed where `transposed`) in `type`'s shape under `scaling`:
  /// (FP8, scale_inv). Per-tensor recipes quantize with the tensor's `scale` (and share its `scaleInv`);
  /// block recipes make each block's scale from the block.
  std::pair<Value, Value> quantizeCopy(OpBuilder &b, Location loc, Value source, RankedTensorType type, bool transposed,
                                       bool e5m2, const OperandScaling &scaling, Value scale, Value scaleInv) {
    auto result = type.clone(e5m2 ? Type(b.getFloat8E5M2Type()) : Type(b.getFloat8E4M3FNType()));
    if (!isBlockRecipe(scaling.recipe))
      return {b.create<QuantizeOp>(loc, result, source, scale, b.getBoolAttr(transposed)), scaleInv};
    auto scales = RankedTensorType::get(shape::blockScales(type.getShape(), scaling.block), b.getF32Type());
    auto op = b.create<QuantizeBlocksOp>(loc, TypeRange{result, scales}, source, b.getDenseI64ArrayAttr(scaling.block),
                                         b.getStringAttr(scaling.recipe == Fp8Recipe::Mxfp8 ? "e8m0" : blockScales.getValue()),
                                         b.getF32FloatAttr(0.0f), b.getBoolAttr(transposed));
    return {op.getResult(), op.getScaleInv()};
  }

  /// A matrix's transpose: the source of a transpose, or a new one (which a quantize reads in place).
  static Value transposed(OpBuilder &b, Value matrix) {
    if (auto t = matrix.getDefiningOp<TransposeOp>(); t && t.getPerm() == ArrayRef<int64_t>{1, 0})
      return t.getInput();
    auto type = llvm::cast<RankedTensorType>(matrix.getType());
    auto result = RankedTensorType::get({type.getDimSize(1), type.getDimSize(0)}, type.getElementType());
    return b.create<TransposeOp>(matrix.getLoc(), result, matrix, ArrayRef<int64_t>{1, 0});
  }

  /// Current scaling's scale of `source`: its amax this step, then TE's scale from it.
  std::pair<Value, Value> currentScale(OpBuilder &b, Location loc, Value source, bool e5m2) {
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    Value amax = b.create<AmaxOp>(loc, scalar, source);
    auto op = b.create<CurrentScalingOp>(loc, TypeRange{scalar, scalar}, amax, b.getF32FloatAttr(e5m2 ? 57344.0f : 448.0f),
                                         b.getBoolAttr(false), b.getF32FloatAttr(0.0f));
    return {op.getScale(), op.getScaleInv()};
  }

  /// Attention in FP8: each tec.attention becomes tec.attention_fp8 on Q, K and V quantized as GEMM operands
  /// are, with the probabilities and the output scaled; then each gradient of one becomes
  /// tec.attention_fp8_grad on the forward's FP8 tensors. Readers get the dequantized output and gradients.
  template <typename QuantizeOnce, typename Unique>
  void insertFp8Attention(func::FuncOp f, const Fp8Policy &policy, QuantizeOnce &quantizeOnce, Unique &unique,
                          SmallVectorImpl<PendingUpdate> &updates) {
    struct Forward {
      AttentionFp8Op op;
      Value queryScaleInv, keyScaleInv, valueScaleInv;
      Scaling probs, result;
      std::string name;
    };
    llvm::DenseMap<Value, Forward> forwards; // by the dequantized result the gradient reads
    SmallVector<AttentionOp> attentions;
    f.walk([&](AttentionOp op) { attentions.push_back(op); });
    Builder attrs(f.getContext());
    auto scalar = RankedTensorType::get({}, attrs.getF32Type());
    Type e4m3 = attrs.getFloat8E4M3FNType(), grads = format != Fp8FormatPolicy::E4M3 ? Type(attrs.getFloat8E5M2Type()) : e4m3;
    for (auto [i, att] : llvm::enumerate(attentions)) {
      if (std::string why = fp8AttentionBlocker(att, policy); !why.empty()) {
        att->setAttr(kPrecisionAttrName, attrs.getStringAttr(why));
        continue;
      }
      std::vector<std::string> names = sourceNodes(att.getLoc());
      std::string name = names.empty() ? "attention" + std::to_string(i) : names.front();
      OpBuilder b(att);
      auto [q, qsi, qs] = quantizeOnce(b, att.getQuery(), name + "/query", false, Fp8Recipe::Delayed, true);
      auto [k, ksi, ks] = quantizeOnce(b, att.getKey(), name + "/key", false, Fp8Recipe::Delayed, true);
      auto [v, vsi, vs] = quantizeOnce(b, att.getValue(), name + "/value", false, Fp8Recipe::Delayed, true);
      Scaling probs = addScaling(f, unique(name + "/probs"), false), result = addScaling(f, unique(name + "/result"), false);
      auto type = att.getResult().getType();
      auto op = b.create<AttentionFp8Op>(att.getLoc(), TypeRange{type.clone(e4m3), att.getLogsumexp().getType(), scalar, scalar},
                                         q, k, v, qsi, ksi, vsi, probs.scale, probs.scaleInv, result.scale, att.getMask(),
                                         att.getScaleAttr(), att.getCausalAttr());
      updates.push_back({probs, op.getProbsAmax()});
      updates.push_back({result, op.getResultAmax()});
      Value out = b.create<DequantizeOp>(att.getLoc(), type, op.getResult(), result.scaleInv);
      att.getResult().replaceAllUsesWith(out);
      att.getLogsumexp().replaceAllUsesWith(op.getLogsumexp());
      att.erase();
      forwards[out] = {op, qsi, ksi, vsi, probs, result, name};
    }
    SmallVector<AttentionGradOp> gradients;
    f.walk([&](AttentionGradOp op) { gradients.push_back(op); });
    for (AttentionGradOp g : gradients) {
      auto it = forwards.find(g.getResult());
      if (it == forwards.end())
        continue;
      Forward &fwd = it->second;
      OpBuilder b(g);
      auto [dout, dsi, ds] = quantizeOnce(b, g.getGrad(), fwd.name + "/grad/output", grads != e4m3, Fp8Recipe::Delayed, true);
      auto scaling = [&](const char *what) { return addScaling(f, unique(fwd.name + "/grad/" + what), grads != e4m3); };
      Scaling dprobs = scaling("dprobs"), dq = scaling("query"), dk = scaling("key"), dv = scaling("value");
      auto op = b.create<AttentionFp8GradOp>(
          g.getLoc(),
          TypeRange{g.getQueryGrad().getType().clone(grads), g.getKeyGrad().getType().clone(grads),
                    g.getValueGrad().getType().clone(grads), scalar, scalar, scalar, scalar},
          dout, fwd.op.getQuery(), fwd.op.getKey(), fwd.op.getValue(), fwd.op.getResult(), g.getLogsumexp(),
          fwd.queryScaleInv, fwd.keyScaleInv, fwd.valueScaleInv, fwd.result.scaleInv, dsi, fwd.probs.scale,
          fwd.probs.scaleInv, dprobs.scale, dprobs.scaleInv, dq.scale, dk.scale, dv.scale, g.getMask(),
          g.getScaleAttr(), g.getCausalAttr());
      updates.push_back({dq, op.getQueryGradAmax()});
      updates.push_back({dk, op.getKeyGradAmax()});
      updates.push_back({dv, op.getValueGradAmax()});
      updates.push_back({dprobs, op.getDprobsAmax()});
      for (auto [old, now, s] : llvm::zip(g.getResults(), op.getResults().take_front(3), std::array<Scaling, 3>{dq, dk, dv}))
        old.replaceAllUsesWith(b.create<DequantizeOp>(g.getLoc(), old.getType(), now, s.scaleInv));
      g.erase();
    }
  }

  void runOnOperation() override {
    if (!keepPrecision.empty() && !llvm::Regex(keepPrecision).isValid()) {
      getOperation().emitError("--keep-precision is not a valid regex: '") << keepPrecision << "'";
      return signalPassFailure();
    }
    Fp8Policy policy{mode, keepPrecision};
    std::string error;
    FailureOr<RecipePolicy> recipes = parseRecipes(recipe, error);
    const TargetCapability *cap = lookupTarget(target);
    if (failed(recipes) || !cap || (blockScales != "pow2" && blockScales != "f32")) {
      getOperation().emitError(failed(recipes) ? "--fp8-recipe: " + error
                               : !cap         ? "unknown target '" + target + "' (" + knownTargets() + ")"
                                              : "--fp8-block-scales: expected pow2 or f32, got '" + blockScales + "'");
      return signalPassFailure();
    }
    Builder attrs(&getContext());
    for (auto f : getOperation().getOps<func::FuncOp>()) {
      SmallVector<LinearOp> linears;
      f.walk([&](LinearOp op) { linears.push_back(op); });
      SmallVector<PendingUpdate> updates;
      llvm::StringSet<> usedNames;
      // A tensor two GEMMs read in one format is quantized once, with one scale (Transformer Engine's
      // recipe), in each layout they read it in: a wgrad GEMM's transposed activation is quantized with
      // the forward's scale, right after the forward's copy, so the FP8 copies are what the backward keeps
      // and the high-precision activation dies in the forward. Weights are quantized per GEMM: a shared
      // copy would live across the step, and quantizing a weight again costs little.
      // Under a block recipe each copy has its own scales, made from the high-precision tensor.
      struct Quantized {
        Value scale, scaleInv; // a per-tensor recipe's, shared by the copies
        Operation *first = nullptr;
        std::map<CopyKey, std::pair<Value, Value>> copies;
      };
      // By the tensor, its format and its recipe.
      llvm::DenseMap<std::pair<Value, int>, Quantized> quantized;
      auto unique = [&](const std::string &base) {
        std::string name = base;
        for (int k = 2; !usedNames.insert(name).second; ++k)
          name = base + "#" + std::to_string(k);
        return name;
      };
      // kIsLast: the operand's K is its last dim (its blocks run along it), else its first.
      auto quantizeOnce = [&](OpBuilder &b, Value v, const std::string &name, bool e5m2, Fp8Recipe recipe,
                              bool kIsLast) -> QuantizedOperand {
        auto transpose = v.getDefiningOp<TransposeOp>();
        const bool transposed = transpose && transpose.getPerm() == ArrayRef<int64_t>{1, 0};
        Value source = transposed ? transpose.getInput() : v;
        // The same bytes seen through reshapes (a GEMM's 3-D input and its 2-D view) are one tensor.
        Value root = source;
        while (auto reshape = root.getDefiningOp<ReshapeOp>())
          root = reshape.getInput();
        auto arg = llvm::dyn_cast<BlockArgument>(root);
        const bool isParam =
            arg && (f.getArgAttr(arg.getArgNumber(), kParamAttrName) || f.getArgAttr(arg.getArgNumber(), kStateAttrName));
        // An inference plan's weights are constants: weights all the same to the recipe.
        const bool isWeight = isParam || (root.getDefiningOp() && root.getDefiningOp()->hasTrait<OpTrait::ConstantLike>());
        const OperandScaling scaling = operandScaling(recipe, kIsLast, isWeight);
        auto type = llvm::cast<RankedTensorType>(v.getType());
        // Named for the operand (the FP8 copy's buffer, its health entry), as delayed scaling's state is.
        Location loc = NameLoc::get(b.getStringAttr(name), v.getLoc());
        auto first = [&]() -> std::pair<Value, Value> {
          if (recipe == Fp8Recipe::Delayed)
            return quantize(f, b, v, unique(name), e5m2, updates);
          auto [scale, scaleInv] = recipe == Fp8Recipe::Current ? currentScale(b, loc, source, e5m2)
                                                               : std::pair<Value, Value>{};
          return quantizeCopy(b, loc, source, type, transposed, e5m2, scaling, scale, scaleInv);
        };
        if (isParam) {
          auto [q, scaleInv] = first();
          return {q, scaleInv, scaling};
        }
        Quantized &entry = quantized[{root, (e5m2 ? 8 : 0) + static_cast<int>(recipe)}];
        if (!entry.first) {
          auto [q, scaleInv] = first();
          entry.first = q.getDefiningOp();
          if (!isBlockRecipe(recipe))
            entry.scale = entry.first->getOperand(1), entry.scaleInv = scaleInv;
          entry.copies[copyKey(type, transposed, scaling)] = {q, scaleInv};
          return {q, scaleInv, scaling};
        }
        auto &copy = entry.copies[copyKey(type, transposed, scaling)];
        if (!copy.first) { // another layout, view or blocks: quantized right after the first copy
          OpBuilder after(entry.first->getBlock(), std::next(entry.first->getIterator()));
          Value view = source;
          if (root != source)
            view = after.create<ReshapeOp>(source.getLoc(), source.getType(), root);
          copy = quantizeCopy(after, loc, view, type, transposed, e5m2, scaling, entry.scale, entry.scaleInv);
        }
        return {copy.first, copy.second, scaling};
      };
      for (auto [i, linear] : llvm::enumerate(linears)) {
        if (std::string why = fp8Blocker(linear, policy); !why.empty()) {
          linear->setAttr(kPrecisionAttrName, attrs.getStringAttr(why));
          continue;
        }
        std::vector<std::string> names = sourceNodes(linear.getLoc());
        std::string layer = names.empty() ? "gemm" + std::to_string(i) : names.front();
        auto [recipe, fallbackWhy] = recipeOn(recipeAsked(*recipes, linear.getLoc(), *cap), *cap);
        // Backward GEMMs (from autodiff) quantize their gradient operand to E5M2 under HYBRID, which delayed
        // and current scaling default to (block scaling and MXFP8 to E4M3, as in TE).
        auto role = linear->getAttrOfType<StringAttr>(kGemmRoleAttrName);
        auto gradOperand = linear->getAttrOfType<IntegerAttr>(kGradOperandAttrName);
        bool hybrid = format == Fp8FormatPolicy::Hybrid || (format == Fp8FormatPolicy::Default && !isBlockRecipe(recipe));
        auto operandName = [&](int operand) {
          if (!role)
            return layer + (operand == 0 ? "/input" : "/weight");
          bool isGrad = gradOperand && gradOperand.getInt() == operand;
          return layer + "/" + role.str() + "/" + (isGrad ? "grad" : role.getValue() == "dgrad" ? "weight" : "activation");
        };
        auto isE5m2 = [&](int operand) { return hybrid && gradOperand && gradOperand.getInt() == operand; };
        OpBuilder b(linear);
        QuantizedOperand x = quantizeOnce(b, linear.getInput(), operandName(0), isE5m2(0), recipe, true);
        // Block recipes read both operands K-major, the only layout cuBLASLt's block scale modes take: a
        // weight operand stored [K, N] (a dgrad's weight, a wgrad's gradient) is quantized from its
        // transpose, which the quantize reads in place.
        const bool transposeB = linear.getTransposeB() || isBlockRecipe(recipe);
        Value weight = transposeB == linear.getTransposeB() ? linear.getWeight() : transposed(b, linear.getWeight());
        QuantizedOperand w = quantizeOnce(b, weight, operandName(1), isE5m2(1), recipe, transposeB);
        if (Operation *made = weight.getDefiningOp<TransposeOp>(); made && made->use_empty())
          made->erase();
        Operation *gemm =
            isBlockRecipe(recipe)
                ? b.create<Fp8BlockGemmOp>(linear.getLoc(), linear.getType(), x.fp8, w.fp8, x.scaleInv, w.scaleInv,
                                           linear.getBias(), linear.getEpilogueAttr(), b.getBoolAttr(transposeB),
                                           b.getDenseI64ArrayAttr(x.scaling.block), b.getDenseI64ArrayAttr(w.scaling.block))
                      .getOperation()
                : b.create<Fp8GemmOp>(linear.getLoc(), linear.getType(), x.fp8, w.fp8, x.scaleInv, w.scaleInv,
                                      linear.getBias(), linear.getEpilogueAttr(), linear.getTransposeBAttr())
                      .getOperation();
        std::string formats = std::string(isE5m2(0) ? "E5M2" : "E4M3") + " x " + (isE5m2(1) ? "E5M2" : "E4M3");
        gemm->setAttr(kPrecisionAttrName,
                      attrs.getStringAttr(formats + ", " + recipeText(x.scaling, w.scaling, blockScales) +
                                          (fallbackWhy.empty() ? "" : " (" + fallbackWhy + ")")));
        if (role)
          gemm->setAttr(kGemmRoleAttrName, role);
        linear.replaceAllUsesWith(gemm->getResult(0));
        linear.erase();
      }
      if (attention)
        insertFp8Attention(f, policy, quantizeOnce, unique, updates);
      if (updates.empty())
        continue;
      // The next FP8 meta state leaves the function as results, each tagged with its argument.
      auto ret = llvm::cast<func::ReturnOp>(f.getBody().front().getTerminator());
      OpBuilder b(ret);
      SmallVector<Value> results(ret.getOperands());
      SmallVector<unsigned> stateArgs;
      // Data parallelism: every rank updates its scales from the same amaxes, each the max over the ranks,
      // all of a step's in one reduction (as Transformer Engine's fp8_group): the ranks keep the same scales.
      SmallVector<Value> amaxes;
      for (const PendingUpdate &u : updates)
        amaxes.push_back(u.amax);
      if (f.getName() == "train_step")
        amaxes = b.create<AllReduceOp>(ret.getLoc(), ValueRange(amaxes).getTypes(), amaxes, b.getStringAttr("max"))
                     .getResults();
      for (auto [u, amax] : llvm::zip(updates, amaxes)) {
        const Scaling &s = u.scaling;
        auto scalar = s.scale.getType();
        auto next = b.create<DelayedScalingOp>(u.amax.getLoc(), TypeRange{s.history.getType(), scalar, scalar},
                                               s.history, s.scale, amax, b.getF32FloatAttr(s.fp8Max),
                                               b.getI64IntegerAttr(margin), b.getStringAttr(choiceName(algo.getValue())));
        for (auto [i, state] : llvm::enumerate(std::array<Value, 3>{s.history, s.scale, s.scaleInv})) {
          results.push_back(next.getResult(i));
          stateArgs.push_back(llvm::cast<BlockArgument>(state).getArgNumber());
        }
      }
      b.create<func::ReturnOp>(ret.getLoc(), results);
      ret.erase();
      unsigned first = f.getNumResults();
      f.setType(FunctionType::get(&getContext(), f.getArgumentTypes(), TypeRange(ValueRange(results))));
      for (auto [i, arg] : llvm::enumerate(stateArgs))
        f.setResultAttr(first + i, kStateUpdateAttrName, attrs.getI64IntegerAttr(arg));
    }
  }
};

} // namespace
