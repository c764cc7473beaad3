// tec calibrate plan.tecplan: fill the FP8 amax histories from sample inputs and freeze the scales.
// tec calibrate model.onnx: measure each GEMM layer's FP8 error under each recipe, and choose per layer.
#include "Cli.h"

#include "api/Compile.h"
#include "api/TensorFiles.h"
#include "support/Targets.h"

#include "api/CompileIR.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Regex.h"

#include <cmath>
#include <map>
#include <random>

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &calibrateSubcommand() {
  static cl::SubCommand sub("calibrate", "fill the FP8 amax histories from sample inputs and freeze the scales");
  return sub;
}

cl::opt<std::string> calibratePlan(cl::Positional, cl::desc("<model.tecplan | model.onnx>"), cl::Required,
                                   cl::sub(calibrateSubcommand()), cl::cat(category()));

cl::opt<std::string> calibrateTarget("target", cl::desc("with a model: the target whose FP8 recipes are compared"),
                                     cl::init("sm_90"), cl::sub(calibrateSubcommand()), cl::cat(category()));

cl::opt<std::string> calibrateJson("json", cl::desc("with a model: also write each layer's errors and choice as JSON"),
                                   cl::value_desc("file"), cl::sub(calibrateSubcommand()), cl::cat(category()));

cl::list<std::string> calibrateInputs("input", cl::desc("a sample input from .npy or .pb (repeatable; others random)"),
                                      cl::value_desc("name=file"), cl::sub(calibrateSubcommand()), cl::cat(category()));

cl::opt<int> calibrateSteps("steps", cl::desc("runs over the samples (random inputs change every run)"), cl::init(8),
                            cl::sub(calibrateSubcommand()), cl::cat(category()));

cl::opt<uint64_t> calibrateSeed("seed", cl::desc("seed of the random inputs"), cl::init(0), cl::sub(calibrateSubcommand()),
                                cl::cat(category()));

cl::opt<std::string> calibrateOutput("o", cl::desc("the calibrated plan (default: overwrite the input, atomically)"),
                                     cl::value_desc("file"), cl::sub(calibrateSubcommand()), cl::cat(category()));

/// Removes the steps that update state (the "state update" copies) and then every step whose results
/// nothing reads any more: the variant's state is frozen at its initial value.
void freezeState(tec::plan::Variant &v) {
  std::vector<bool> keep(v.steps_size(), true);
  for (int i = 0; i < v.steps_size(); ++i)
    keep[i] = v.steps(i).source() != "state update";
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<bool> read(v.buffers_size(), false);
    auto root = [&](int b) { return v.buffers(b).alias_of() >= 0 ? v.buffers(b).alias_of() : b; };
    for (int b : v.outputs())
      read[root(b)] = true;
    for (int i = 0; i < v.steps_size(); ++i)
      if (keep[i])
        for (int b : v.steps(i).inputs())
          read[root(b)] = true;
    for (int i = 0; i < v.steps_size(); ++i)
      if (keep[i] && std::none_of(v.steps(i).outputs().begin(), v.steps(i).outputs().end(),
                                  [&](int b) { return read[root(b)]; })) {
        keep[i] = false;
        changed = true;
      }
  }
  google::protobuf::RepeatedPtrField<tec::plan::Step> steps;
  for (int i = 0; i < v.steps_size(); ++i)
    if (keep[i])
      *steps.Add() = v.steps(i);
  v.mutable_steps()->Swap(&steps);
}

namespace {

/// The recipes by their cost on a GPU, cheapest first: a per-tensor scale from the history (delayed), from
/// this step's amax (current: one more pass over the tensor), a scale per block (block scaling, MXFP8).
constexpr tec::Fp8Recipe kRecipesByCost[] = {tec::Fp8Recipe::Delayed, tec::Fp8Recipe::Current, tec::Fp8Recipe::Block,
                                             tec::Fp8Recipe::Mxfp8};

/// A recipe whose error is within this factor of a layer's most accurate one is as good: the cheapest such
/// is chosen.
constexpr double kAsGoodAs = 1.25;

/// The cheapest recipe of a layer as good as its most accurate (errors by recipe, each measured).
tec::Fp8Recipe chooseRecipe(const std::map<tec::Fp8Recipe, double> &errors) {
  double best = INFINITY;
  for (const auto &[recipe, error] : errors)
    best = std::min(best, error);
  for (tec::Fp8Recipe recipe : kRecipesByCost)
    if (auto it = errors.find(recipe); it != errors.end() && it->second <= kAsGoodAs * best)
      return recipe;
  return errors.begin()->first;
}

/// The model's f32 outputs on the samples, compiled with `options` into `plan` and run --steps times (delayed
/// scaling's history filled by the runs before the last); nullopt with the exit code once the error is said.
std::optional<std::vector<float>> outputsUnder(const tec::CompileOptions &options, const std::string &plan, int &code) {
  if (std::optional<tec::ApiError> error = tec::compileToPlanFile(calibratePlan, options, plan)) {
    code = reportApiError(*error);
    return std::nullopt;
  }
  auto session = tec::Session::open(plan);
  if (!session.ok()) {
    llvm::errs() << "error: " << session.error().message() << "\n";
    code = kExitInternal;
    return std::nullopt;
  }
  for (int step = 0; step < std::max(1, calibrateSteps.getValue()); ++step) {
    if ((code = bindInputs(**session, calibrateInputs, calibrateSeed + step, /*quiet=*/true)))
      return std::nullopt;
    if (tec::Status st = (*session)->run(); !st.ok()) {
      llvm::errs() << "error: " << calibratePlan << ": " << st.message() << "\n";
      code = kExitInternal;
      return std::nullopt;
    }
  }
  std::vector<float> values;
  for (size_t i = 0; i < (*session)->outputs().size(); ++i) {
    const auto &out = (*session)->outputs()[i];
    if (out.dtype != tec::plan::F32)
      continue;
    const float *data = static_cast<const float *>((*session)->outputData(i));
    values.insert(values.end(), data, data + out.bytes / sizeof(float));
  }
  return values;
}

/// ||y - reference|| / ||reference||.
double relativeError(const std::vector<float> &y, const std::vector<float> &reference) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < y.size() && i < reference.size(); ++i) {
    diff += (double(y[i]) - reference[i]) * (double(y[i]) - reference[i]);
    norm += double(reference[i]) * reference[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

/// `tec calibrate model.onnx`: each FP8-eligible GEMM layer alone in FP8 (emulated on the cpu, bit for bit
/// the GPU's quantization), under each recipe `--target` runs, its error at the model's outputs against
/// FP32 on the samples; per layer the cheapest recipe within kAsGoodAs of the most accurate, printed as the
/// --fp8-recipe to compile with.
int calibrateRecipes() {
  tec::CompileOptions fp32;
  if (auto err = parseInputOptions(fp32.import)) {
    llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
    return kExitBadInput;
  }
  auto known = tec::resolveTargets(calibrateTarget);
  if (!known) {
    llvm::errs() << "error: " << llvm::toString(known.takeError()) << "\n";
    return kExitBadInput;
  }
  const tec::TargetCapability *target = known->size() == 1 ? tec::lookupTarget(known->front()) : nullptr;
  if (!target || (target->name != "cpu" && target->gemms != tec::GemmPrecision::Fp8)) {
    llvm::errs() << "error: --target " << calibrateTarget << ": expected one target with FP8 GEMMs (sm_89 and later, "
                 << "or cpu for every recipe)" << (target ? ": " + std::string(target->note) : std::string()) << "\n";
    return kExitBadInput;
  }
  fp32.pipeline.fp8.mode = tec::Fp8Mode::None;
  tec::CompileOptions fp8 = fp32;
  fp8.pipeline.fp8.mode = tec::Fp8Mode::All;
  fp8.pipeline.fp8Emulate = true;
  // The layers that run in FP8: the per-layer table of a compile with every eligible GEMM in FP8.
  mlir::MLIRContext context;
  context.printOpOnDiagnostic(false);
  auto compiled = tec::compileModel(context, calibratePlan, fp8);
  if (!compiled)
    return reportCompileError(compiled.takeError());
  std::vector<std::string> layers, firstNodes;
  for (const auto &l : (*compiled)->layers)
    if (!l.layer.empty() && !l.perTarget.empty() && llvm::StringRef(l.perTarget.front().second).starts_with("fp8")) {
      layers.push_back(l.layer);
      firstNodes.push_back(llvm::StringRef(l.layer).split('+').first.str());
    }
  if (layers.empty()) {
    llvm::errs() << "error: " << calibratePlan << ": no GEMM can run in FP8 (K and N must be multiples of 16)\n";
    return kExitBadInput;
  }
  llvm::SmallString<128> folder;
  llvm::sys::fs::createUniqueDirectory("tec-calibrate", folder);
  auto cleanup = llvm::make_scope_exit([&] { llvm::sys::fs::remove_directories(folder); });
  const std::string plan = (folder + "/calibrate.tecplan").str();
  int code = 0;
  auto reference = outputsUnder(fp32, plan, code);
  if (!reference)
    return code;
  std::vector<std::map<tec::Fp8Recipe, double>> errors(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<std::string> others;
    for (size_t j = 0; j < layers.size(); ++j)
      if (j != i)
        others.push_back(llvm::Regex::escape(firstNodes[j]));
    for (tec::Fp8Recipe recipe : kRecipesByCost) {
      if (!tec::fp8RecipeRunsOn(recipe, calibrateTarget))
        continue;
      tec::CompileOptions alone = fp8;
      alone.pipeline.fp8.recipe = tec::choiceName(recipe);
      alone.pipeline.fp8.keepPrecision = others.empty() ? "" : "^(" + llvm::join(others, "|") + ")$";
      auto y = outputsUnder(alone, plan, code);
      if (!y)
        return code;
      errors[i][recipe] = relativeError(*y, *reference);
    }
  }
  // The choice per layer, the most common one as the default.
  std::vector<tec::Fp8Recipe> chosen;
  std::map<tec::Fp8Recipe, int> votes;
  for (const auto &e : errors)
    ++votes[chosen.emplace_back(chooseRecipe(e))];
  const tec::Fp8Recipe common =
      std::max_element(votes.begin(), votes.end(), [](auto &a, auto &b) { return a.second < b.second; })->first;
  std::string spec = tec::choiceName(common);
  for (size_t i = 0; i < layers.size(); ++i)
    if (chosen[i] != common)
      spec += ";^" + llvm::Regex::escape(firstNodes[i]) + "$=" + tec::choiceName(chosen[i]);
  llvm::outs() << "FP8 error at the outputs against FP32, each layer alone in FP8 (" << calibrateSteps
               << " runs on the samples; recipes " << calibrateTarget << " runs):\n"
               << llvm::formatv("  {0,-44}", "layer");
  for (tec::Fp8Recipe recipe : kRecipesByCost)
    if (tec::fp8RecipeRunsOn(recipe, calibrateTarget))
      llvm::outs() << llvm::formatv("{0,11}", tec::choiceName(recipe));
  llvm::outs() << "   chosen\n";
  for (size_t i = 0; i < layers.size(); ++i) {
    llvm::outs() << llvm::formatv("  {0,-44}", layers[i]);
    for (const auto &[recipe, error] : errors[i])
      llvm::outs() << llvm::formatv("{0,11:e2}", error);
    llvm::outs() << "   " << tec::choiceName(chosen[i]) << "\n";
  }
  llvm::outs() << llvm::formatv("the cheapest recipe within {0:f2}x of each layer's most accurate; compile with:\n", kAsGoodAs)
               << "  --fp8-recipe '" << spec << "'\n";
  if (!calibrateJson.empty())
    llvm::outs() << "  (or --fp8-calibration " << calibrateJson << ")\n";
  if (!calibrateJson.empty()) {
    // `--fp8-calibration FILE` reads "fp8_recipe" back; a non-finite error is null.
    llvm::json::Array layerErrors;
    for (size_t i = 0; i < layers.size(); ++i) {
      llvm::json::Object byRecipe;
      for (const auto &[recipe, error] : errors[i])
        byRecipe[tec::choiceName(recipe)] = std::isfinite(error) ? llvm::json::Value(error) : llvm::json::Value(nullptr);
      layerErrors.push_back(llvm::json::Object{
          {"layer", layers[i]}, {"chosen", tec::choiceName(chosen[i])}, {"errors", std::move(byRecipe)}});
    }
    const std::string json = llvm::formatv("{0}\n", llvm::json::Value(llvm::json::Object{
                                                         {"target", calibrateTarget},
                                                         {"fp8_recipe", spec},
                                                         {"layers", std::move(layerErrors)}}))
                                 .str();
    if (tec::Status st = tec::writeFileAtomically(calibrateJson, json); !st.ok()) {
      llvm::errs() << "error: " << st.message() << "\n";
      return kExitBadInput;
    }
  }
  return 0;
}

} // namespace

int calibrate() {
  if (llvm::StringRef(calibratePlan).ends_with(".onnx"))
    return calibrateRecipes();
  auto file = tec::PlanFile::open(calibratePlan);
  if (!file.ok()) {
    llvm::errs() << "error: " << file.error().message() << "\n";
    return kExitBadInput;
  }
  tec::plan::Plan plan = (*file)->plan();
  std::vector<char> data((*file)->data(), (*file)->data() + (*file)->dataSize());
  int calibrated = 0;
  for (int vi = 0; vi < plan.variants_size(); ++vi) {
    auto &v = *plan.mutable_variants(vi);
    std::vector<int> states;
    for (int b = 0; b < v.buffers_size(); ++b)
      if (v.buffers(b).role() == tec::plan::STATE)
        states.push_back(b);
    if (states.empty())
      continue;
    tec::SessionOptions options;
    options.variant = v.target();
    options.kind = v.kind().empty() ? "inference" : v.kind(); // a train variant shares its target
    auto session = tec::Session::open(calibratePlan, options);
    if (!session.ok()) {
      llvm::errs() << "error: " << session.error().message() << "\n";
      return kExitBadInput;
    }
    // The state read back below is indexed by this variant's buffers: the session must run this one.
    if ((*session)->variant().buffers_size() != v.buffers_size() || (*session)->variant().kind() != v.kind()) {
      llvm::errs() << "error: " << calibratePlan << ": variant " << v.target() << " (" << options.kind
                   << ") is not the one the session opened\n";
      return kExitInternal;
    }
    for (int step = 0; step < std::max(1, calibrateSteps.getValue()); ++step) {
      if (int code = bindInputs(**session, calibrateInputs, calibrateSeed + step, /*quiet=*/true); code)
        return code;
      if (tec::Status st = (*session)->run(); !st.ok()) {
        llvm::errs() << "error: " << st.message() << "\n";
        return kExitInternal;
      }
    }
    llvm::outs() << "variant " << v.target() << ": " << calibrateSteps << " calibration runs\n";
    // A tensor that never showed a finite, nonzero amax would freeze its initial scale without a word.
    for (int b : states) {
      llvm::StringRef name(v.buffers(b).name());
      if (!name.ends_with("/amax_history"))
        continue;
      auto history = (*session)->bufferValues<float>(b);
      if (std::none_of(history.begin(), history.end(), [](float a) { return std::isfinite(a) && a > 0; })) {
        llvm::errs() << "error: " << calibratePlan << ": '" << name.drop_back(13) << "' saw no finite, nonzero value in "
                     << calibrateSteps << " runs (are the samples all NaN, Inf or zero?); nothing was written\n";
        return kExitBadInput;
      }
    }
    for (int b : states) {
      auto &buffer = *v.mutable_buffers(b);
      if (buffer.has_init_fill()) { // calibrated values are stored: a fill no longer describes them
        buffer.clear_init_fill();
        const size_t at = (data.size() + 63) / 64 * 64;
        data.resize(at + buffer.bytes());
        buffer.set_init_offset(static_cast<int64_t>(at));
      }
      if (tec::Status st = (*session)->readBuffer(b, data.data() + buffer.init_offset()); !st.ok()) {
        llvm::errs() << "error: " << st.message() << "\n";
        return kExitInternal;
      }
      llvm::StringRef name(buffer.name());
      float value;
      std::memcpy(&value, data.data() + buffer.init_offset(), sizeof(value));
      if (name.ends_with("/scale"))
        llvm::outs() << llvm::formatv("  {0,-40} {1}\n", name.drop_back(6), value);
    }
    freezeState(v);
    ++calibrated;
  }
  if (!calibrated) {
    llvm::errs() << "error: " << calibratePlan << ": no variant has FP8 state to calibrate (compile with FP8 on an "
                 << "FP8 target, e.g. --target sm_90 --fp8=all)\n";
    return kExitBadInput;
  }
  tec::PlanDataBuilder builder;
  builder.add(data.data(), data.size());
  std::string out = calibrateOutput.empty() ? calibratePlan.getValue() : calibrateOutput.getValue();
  file = tec::Result<std::unique_ptr<tec::PlanFile>>(tec::Status::error("closed")); // unmap before replacing
  if (tec::Status st = tec::writePlanFile(out, plan, builder); !st.ok()) {
    llvm::errs() << "error: " << st.message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << "wrote " << out << ": " << calibrated << " variant(s) with frozen FP8 scales (scale per tensor above)\n";
  return 0;
}

std::string calibrateFlagsError() { return tec::optionRangeError("steps", calibrateSteps, 1, 1e9); }

} // namespace cli
