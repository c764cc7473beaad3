// The passes' options as plain structs, without MLIR: what the API, the CLI and the Python package set (the
// choices tec-insert-fp8 and tec-build-train-step take, their options as Passes.td declares them, the
// pipeline's). Passes.h has the passes themselves.
#ifndef TEC_PASSES_PASSOPTIONS_H
#define TEC_PASSES_PASSOPTIONS_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class Pass;
} // namespace mlir

namespace tec {

/// --fp8: FP8 GEMMs where the cost model says they pay (auto), wherever eligible (all), or nowhere (none).
enum class Fp8Mode { Auto, All, None };
/// --fp8-format: hybrid (E4M3 forward, E5M2 gradients: Transformer Engine's HYBRID), E4M3 everywhere, or
/// each recipe's own default as Transformer Engine 2.x has it (hybrid for delayed and current scaling, E4M3
/// for block scaling and MXFP8).
enum class Fp8FormatPolicy { Default, Hybrid, E4M3 };
/// --fp8-recipe: Transformer Engine 2.x's FP8 recipes (DelayedScaling, Float8CurrentScaling,
/// Float8BlockScaling, MXFP8BlockScaling).
enum class Fp8Recipe { Delayed, Current, Block, Mxfp8 };
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
  static constexpr std::pair<const char *, Fp8FormatPolicy> values[] = {
      {"default", Fp8FormatPolicy::Default}, {"hybrid", Fp8FormatPolicy::Hybrid}, {"e4m3", Fp8FormatPolicy::E4M3}};
};
template <> struct ChoiceNames<Fp8Recipe> {
  static constexpr std::pair<const char *, Fp8Recipe> values[] = {
      {"delayed", Fp8Recipe::Delayed}, {"current", Fp8Recipe::Current}, {"block", Fp8Recipe::Block}, {"mxfp8", Fp8Recipe::Mxfp8}};
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

/// Whether `target` runs `recipe` itself (rather than falling back to another: tec-insert-fp8's recipeBlocker).
bool fp8RecipeRunsOn(Fp8Recipe recipe, llvm::StringRef target);

/// `--fp8-recipe SPEC`'s error ("--fp8-recipe ...: ..."), or "" when SPEC is RECIPE[;REGEX=RECIPE...].
std::string fp8RecipeError(llvm::StringRef spec);

// The two passes whose options the API sets: their options structs (and create functions) alone.
#define GEN_PASS_DECL_TECINSERTFP8
#define GEN_PASS_DECL_TECBUILDTRAINSTEP
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

} // namespace tec

#endif
