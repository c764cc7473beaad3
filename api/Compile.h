// The compile flow behind `tec model.onnx` and `tec.compile`: import, run the pipeline (recording and optionally dumping
// each pass), generate the plan, as options in and a plan file or an error out; no MLIR type. CompileIR.h has the
// flow's IR (the CLI's --emit, the conformance tests).
#ifndef TEC_API_COMPILE_H
#define TEC_API_COMPILE_H

#include "frontend/ImportOptions.h"
#include "passes/PassOptions.h"
#include "runtime/PlanFile.h"

#include "llvm/Support/Error.h"

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tec {

struct CompileOptions {
  ImportOptions import;
  PipelineOptions pipeline;
  /// The plan's variants, best first (default: every target tec knows).
  std::vector<std::string> targets = {"cpu"};
  /// Also build a training step (`--train`), with `pipeline.train`'s loss and optimizer.
  bool train = false;
  /// Write the IR after the import and after each pass here (`--dump-passes`); empty: don't.
  std::string dumpDir;
  /// The largest constant the plan stores (`--max-fold-bytes`): a larger one (a ConstantOfShape, a folded
  /// splat) is refused naming its node, never materialized at any size.
  int64_t maxFoldBytes = int64_t(1) << 30;
};

/// No tensor of a model may exceed this (1 TiB): past it, compiling is refused naming the node.
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << 40;

/// What one GEMM layer runs in on each target, and why (the summary's per-layer table).
struct LayerPrecision {
  std::string layer;
  std::vector<std::pair<std::string, std::string>> perTarget; // (target, "fp8: ..." / "bf16: ...")
};

/// What went wrong, as the API's callers tell the user: a model that is not valid, what tec does not
/// support (unsupported operators are listed one `node 'NAME'  op TYPE` per line), a bad option or file, or a failure
/// inside tec. The messages are the CLI's.
enum class ErrorKind { BadModel, Unsupported, BadInput, Internal };
struct ApiError {
  ErrorKind kind;
  std::string message;
  /// Unsupported: (node name, operator) of each node the model cannot compile for, where known.
  std::vector<std::pair<std::string, std::string>> operators = {};
};

/// An option outside its range, as the CLI says it ("--lr nan: expected a value in [0, 3.4e+38]"); empty
/// when it holds.
std::string optionRangeError(const char *flag, double value, double lo, double hi);
std::string optionChoiceError(const char *flag, const std::string &value, std::initializer_list<const char *> allowed);
/// `--flag VALUE` as one of E's choices (ChoiceNames, passes/Passes.h) into `out`: "" when it names one, else the
/// error naming the flag ("--fp8 maybe: expected one of auto, all, none").
template <class E> std::string readChoiceOption(const char *flag, const std::string &value, E &out) {
  if (std::optional<E> choice = parseChoice<E>(value)) {
    out = *choice;
    return "";
  }
  std::string list;
  for (const auto &[name, choice] : ChoiceNames<E>::values)
    list += (list.empty() ? "" : ", ") + std::string(name);
  return "--" + std::string(flag) + " " + value + ": expected one of " + list;
}

/// The first option of `options` outside its range (FP8 recipe, loss, optimizer, schedule, passes), or empty.
std::string compileOptionError(const CompileOptions &options);

/// `--fp8-calibration FILE`: sets `recipe` to the per-layer recipes `tec calibrate --json FILE` chose (its
/// "fp8_recipe"); "" when done, else an error naming the file.
std::string readFp8Calibration(const std::string &path, std::string &recipe);

/// The error `compileModel` returned, as a value.
ApiError toApiError(llvm::Error error);

/// Compiles `modelPath` and writes the plan to `planPath` (atomically); nothing on success, and then the
/// compile summary (`tec model.onnx`'s) in `summary` if given.
std::optional<ApiError> compileToPlanFile(const std::string &modelPath, const CompileOptions &options,
                                          const std::string &planPath, std::string *summary = nullptr);

/// The same for a model held in memory (serialized ModelProto bytes); its messages call it `model.onnx`.
/// Tensors in external data files cannot be found from bytes: compile such a model from its path.
std::optional<ApiError> compileBytesToPlanFile(const std::string &modelBytes, const CompileOptions &options,
                                               const std::string &planPath, std::string *summary = nullptr);

/// `--target`: "all", "auto" (this machine's GPU, if any, and cpu) or a comma list; errors name the
/// unknown target.
llvm::Expected<std::vector<std::string>> resolveTargets(llvm::StringRef spec);

} // namespace tec

#endif
