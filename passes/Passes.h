// tec's passes and the pipelines built from them.
#ifndef TEC_PASSES_PASSES_H
#define TEC_PASSES_PASSES_H

#include "ir/TecOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tec {

/// --fp8: FP8 GEMMs where the cost model says they pay (auto), wherever eligible (all), or nowhere (none).
enum class Fp8Mode { Auto, All, None };
/// --fp8-format: hybrid (E4M3 forward, E5M2 gradients: Transformer Engine's HYBRID) or E4M3 everywhere.
enum class Fp8FormatPolicy { Hybrid, E4M3 };
/// --amax-algo: each scale from its history's largest amax, or from the most recent one.
enum class AmaxAlgo { Max, MostRecent };
/// --loss: the training step's loss on each trained output.
enum class Loss { Mse, L1, CrossEntropy };
/// --optimizer.
enum class Optimizer { Sgd, AdamW };
/// --schedule: the learning rate over the steps.
enum class LrSchedule { Constant, Warmup, Cosine };

/// Each choice's name as the CLI, the Python package and the IR spell it (tec-opt's, in Passes.td, alike).
template <class E> struct ChoiceNames;
template <> struct ChoiceNames<Fp8Mode> {
  static constexpr std::pair<const char *, Fp8Mode> values[] = {
      {"auto", Fp8Mode::Auto}, {"all", Fp8Mode::All}, {"none", Fp8Mode::None}};
};
template <> struct ChoiceNames<Fp8FormatPolicy> {
  static constexpr std::pair<const char *, Fp8FormatPolicy> values[] = {{"hybrid", Fp8FormatPolicy::Hybrid},
                                                                        {"e4m3", Fp8FormatPolicy::E4M3}};
};
template <> struct ChoiceNames<AmaxAlgo> {
  static constexpr std::pair<const char *, AmaxAlgo> values[] = {{"max", AmaxAlgo::Max},
                                                                 {"most_recent", AmaxAlgo::MostRecent}};
};
template <> struct ChoiceNames<Loss> {
  static constexpr std::pair<const char *, Loss> values[] = {
      {"mse", Loss::Mse}, {"l1", Loss::L1}, {"cross-entropy", Loss::CrossEntropy}};
};
template <> struct ChoiceNames<Optimizer> {
  static constexpr std::pair<const char *, Optimizer> values[] = {{"sgd", Optimizer::Sgd}, {"adamw", Optimizer::AdamW}};
};
template <> struct ChoiceNames<LrSchedule> {
  static constexpr std::pair<const char *, LrSchedule> values[] = {
      {"constant", LrSchedule::Constant}, {"warmup", LrSchedule::Warmup}, {"cosine", LrSchedule::Cosine}};
};
template <class E> const char *choiceName(E value) {
  for (const auto &[name, v] : ChoiceNames<E>::values)
    if (v == value)
      return name;
  return "?";
}
template <class E> std::optional<E> parseChoice(llvm::StringRef name) {
  for (const auto &[n, v] : ChoiceNames<E>::values)
    if (name == n)
      return v;
  return std::nullopt;
}

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// The training step's loss, optimizer and schedule (`tec model.onnx --train ...`): tec-build-train-step's
/// options as Passes.td declares them (names, defaults, descriptions), set by name and handed to the pass
/// whole, never copied field by field.
using TrainOptions = TecBuildTrainStepOptions;

/// The passes the pipelines run that `--disable-pass` may leave out.
const std::vector<std::string> &pipelinePassNames();

/// What the user chose on the command line that shapes the pipeline.
struct PipelineOptions {
  /// Pass arguments (e.g. "tec-simplify-shapes") to leave out, as `--disable-pass` asks: any of
  /// pipelinePassNames().
  std::set<std::string> disabledPasses;
  /// Let an erf GELU use cuBLASLt's tanh GELU epilogue (`--fast-gelu`).
  bool fastGelu = false;
  /// FP8 policy (`--fp8`, `--keep-precision`), delayed scaling (`--amax-history`, `--fp8-margin`,
  /// `--amax-algo`), formats (`--fp8-format`) and attention (`--fp8-attention`): tec-insert-fp8's options.
  TecInsertFp8Options fp8;
  /// On the cpu target, keep FP8 GEMMs, emulated (`--fp8-emulate`).
  bool fp8Emulate = false;
  /// Building a training step: GELU stays out of GEMM epilogues (its gradient needs the input).
  bool training = false;
  TrainOptions train;
};

/// Removes @forward's results tagged `tec.running_stat` (the next running statistics of training-mode
/// BatchNormalization: inference keeps its statistics), returning each removed value, still in the body
/// until dead code is removed, with the index of the param argument it is the next value of.
llvm::SmallVector<std::pair<mlir::Value, unsigned>> dropRunningStatistics(mlir::func::FuncOp forward);

/// Adds `name`: `forward`'s arguments plus one cotangent per result, returning its results and the
/// gradients of the arguments selected by `wrt` (params | inputs | all), each tagged `tec.grad_of`.
/// Fails, with a diagnostic on the op, when an active op has no gradient.
mlir::FailureOr<mlir::func::FuncOp> buildVjp(mlir::func::FuncOp forward, llvm::StringRef wrt, llvm::StringRef name);

/// tec-simplify-shapes' patterns: a chain of reshapes, or of transposes, becomes one op.
void populateShapeChainPatterns(mlir::RewritePatternSet &patterns);

/// The target-independent inference pipeline, spelled out in one place.
void buildInferencePipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// The training pipeline for one target: the forward part of the inference pipeline, @train_step, then
/// the target's FP8 insertion and lowering (on cpu, FP8 only with --fp8-emulate).
void buildTrainingPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, llvm::StringRef target);

/// What runs per target after it, on a copy of the module: FP8 insertion and lowering.
void buildTargetPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, llvm::StringRef target);

/// Registers every tec pass and the named pipelines with MLIR's registry (for tec-opt).
void registerTecPassesAndPipelines();

} // namespace tec

#endif // TEC_PASSES_PASSES_H
