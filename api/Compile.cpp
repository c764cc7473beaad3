#include "api/CompileIR.h"
#include "api/Trainer.h"
#include "api/Summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "codegen/Codegen.h"
#include "ir/TecOps.h"
#include "support/Targets.h"
#include "runtime/Device.h"

#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

using namespace mlir;

namespace tec {

OpPrintingFlags irPrintingFlags() { return OpPrintingFlags().elideLargeElementsAttrs(16); }

llvm::Expected<std::vector<std::string>> resolveTargets(llvm::StringRef spec) {
  std::vector<std::string> targets;
  if (spec == "all" || spec.empty()) {
    for (const auto &t : allTargets())
      targets.push_back(std::string(t.name));
    return targets;
  }
  if (spec == "auto") {
    CudaProbe cuda = probeCuda();
    if (cuda.usable) {
      // The best table entry this GPU can run: same major, minor at most its own.
      for (const auto &t : allTargets()) {
        if (t.sm && t.sm / 10 == cuda.major && t.sm % 10 <= cuda.minor) {
          targets.push_back(std::string(t.name));
          break;
        }
      }
    }
    targets.push_back("cpu");
    return targets;
  }
  llvm::SmallVector<llvm::StringRef> parts;
  spec.split(parts, ',', -1, /*KeepEmpty=*/true);
  for (llvm::StringRef p : parts) {
    if (p.trim().empty())
      return llvm::createStringError("--target " + spec.str() + ": an empty target in the list");
    if (!lookupTarget(p)) {
      return llvm::createStringError("--target: unknown target '" + p.str() + "' (known: " + knownTargets() +
                                     ", or all, auto)");
    }
    if (std::find(targets.begin(), targets.end(), p.str()) == targets.end())
      targets.push_back(p.str());
  }
  // Best first, as the runtime tries them.
  std::vector<std::string> ordered;
  for (const auto &t : allTargets())
    if (std::find(targets.begin(), targets.end(), std::string(t.name)) != targets.end())
      ordered.push_back(std::string(t.name));
  return ordered;
}

namespace {

/// Records the passes that ran and, given a folder, writes the module after each one as NN-pass.mlir.
class PassRecorder : public PassInstrumentation {
public:
  PassRecorder(std::string dir, ModuleOp module, CompiledModel &out, int &index, std::string prefix = "")
      : dir(std::move(dir)), prefix(std::move(prefix)), module(module), out(out), index(index) {}
  void write(llvm::StringRef name) {
    if (dir.empty())
      return;
    llvm::SmallString<256> file(dir);
    llvm::sys::path::append(file, llvm::formatv("{0:02}-{1}{2}.mlir", index++, prefix, name).str());
    std::string text;
    llvm::raw_string_ostream os(text);
    module.print(os, irPrintingFlags());
    os.flush();
    if (Status s = writeFileAtomically(file.str().str(), text); !s.ok()) {
      error = s.message();
      return;
    }
    out.dumpFiles.push_back(file.str().str());
  }
  void runAfterPass(Pass *pass, Operation *) override {
    if (pass->getArgument().empty()) // the adaptors that nest passes on functions
      return;
    if (prefix.empty())
      out.passes.push_back(pass->getArgument().str());
    write(pass->getArgument());
  }
  std::string error;

private:
  std::string dir, prefix;
  ModuleOp module;
  CompiledModel &out;
  int &index;
};

/// What an attention (two GEMMs: Q.K^T and P.V) of a lowered module runs in, and why not FP8.
std::string attentionPrecision(Operation *op, const TargetCapability &cap) {
  if (llvm::isa<AttentionFp8Op>(op))
    return "fp8: E4M3 Q, K, V, probabilities and output, delayed scaling" +
           std::string(cap.name == "cpu" ? " (emulated)" : "");
  Type element = llvm::cast<RankedTensorType>(op->getOperand(0).getType()).getElementType();
  std::string type = element.isBF16() ? "bf16" : element.isF16() ? "fp16" : "fp32";
  auto why = op->getAttrOfType<StringAttr>(kPrecisionAttrName); // tec-insert-fp8's reason
  if (why)
    return type + ": " + why.str();
  if (cap.gemms == GemmPrecision::Fp8)
    return type + ": FP8 attention is opt-in (--fp8-attention), as Transformer Engine's fp8_dpa";
  return type + ": " + (cap.note.empty() ? std::string("the target's precision") : std::string(cap.note));
}

/// Adds what each GEMM and attention of a lowered module runs in to the per-layer table.
void recordPrecisions(ModuleOp module, llvm::StringRef target, std::vector<LayerPrecision> &layers) {
  const TargetCapability *cap = lookupTarget(target);
  module.walk([&](Operation *op) {
    const bool attention = llvm::isa<AttentionOp, AttentionFp8Op>(op) && op->getParentOfType<func::FuncOp>() &&
                           op->getParentOfType<func::FuncOp>().getName() == "forward";
    auto precision = op->getAttrOfType<StringAttr>(kPrecisionAttrName);
    if (attention)
      precision = StringAttr::get(op->getContext(), attentionPrecision(op, *cap));
    if (!precision || (!attention && !llvm::isa<LinearOp, Fp8GemmOp, Fp8BlockGemmOp>(op)))
      return;
    std::string layer = llvm::join(sourceNodes(op->getLoc()), "+");
    auto it = std::find_if(layers.begin(), layers.end(), [&](const auto &l) { return l.layer == layer; });
    if (it == layers.end())
      it = layers.insert(layers.end(), LayerPrecision{layer, {}});
    it->perTarget.push_back({target.str(), precision.str()});
  });
}

std::map<std::string, int> countOps(ModuleOp module) {
  std::map<std::string, int> counts;
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "tec")
      ++counts[op->getName().stripDialect().str()];
  });
  return counts;
}

} // namespace

namespace {

/// The bytes of a tensor of `type`, or -1 past `limit` (products of huge dims never overflow).
int64_t boundedBytes(RankedTensorType type, int64_t limit) {
  if (!type.hasStaticShape())
    return 0;
  const int64_t bits = std::max<int64_t>(8, type.getElementTypeBitWidth());
  int64_t bytes = bits / 8;
  for (int64_t d : type.getShape()) {
    if (d != 0 && bytes > limit / d)
      return -1;
    bytes *= d;
  }
  return bytes;
}

} // namespace

/// A constant the plan stores element for element; a splat stores one element however large it is.
bool isStoredWhole(Operation *op) {
  auto constant = llvm::dyn_cast<ConstantOp>(op);
  auto dense = constant ? llvm::dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
  return constant && !(dense && dense.isSplat());
}

llvm::Error checkTensorSizes(ModuleOp module, const std::string &path, int64_t maxConstantBytes) {
  std::optional<std::string> problem;
  module.walk([&](Operation *op) {
    for (Value result : op->getResults()) {
      auto type = llvm::dyn_cast<RankedTensorType>(result.getType());
      if (!type)
        continue;
      std::string shape;
      llvm::raw_string_ostream(shape) << type;
      const std::string node = "node '" + llvm::join(sourceNodes(op->getLoc()), "+") + "'";
      if (boundedBytes(type, kMaxTensorBytes) < 0)
        problem = node + ": its result " + shape + " would need more than 1 TiB; no machine tec runs on holds it";
      else if (isStoredWhole(op) && boundedBytes(type, maxConstantBytes) < 0)
        problem = node + ": a constant " + shape + " larger than --max-fold-bytes (" + std::to_string(maxConstantBytes) +
                  ") to store in the plan";
      if (problem)
        return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (problem)
    return llvm::make_error<ImportError>(ImportErrorKind::Invalid, path + ": " + *problem);
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<CompiledModel>> compileModel(MLIRContext &context, const std::string &path,
                                                            const CompileOptions &options) {
  auto compiled = std::make_unique<CompiledModel>();
  ImportOptions import = options.import;
  if (options.train)
    import.trainable = options.pipeline.train.trainable;
  auto model = importOnnxFile(context, path, import);
  if (!model)
    return model.takeError();
  compiled->model = std::move(*model);
  ModuleOp module = *compiled->model.module;
  if (auto err = checkTensorSizes(module, path, options.maxFoldBytes))
    return err;
  compiled->importedOps = countOps(module);
  // The training step starts from the imported model: its pipeline differs (GELU stays unfused).
  OwningOpRef<ModuleOp> trainModule = options.train ? OwningOpRef<ModuleOp>(module.clone()) : nullptr;
  if (auto forward = module.lookupSymbol<func::FuncOp>("forward"))
    dropRunningStatistics(forward); // inference reads the running statistics, never moves them

  if (!options.dumpDir.empty()) { // a usage error (exit 2), found before any work
    auto ec = llvm::sys::fs::create_directories(options.dumpDir);
    if (!ec && !llvm::sys::fs::is_directory(options.dumpDir))
      ec = std::make_error_code(std::errc::not_a_directory);
    if (ec)
      return llvm::make_error<ImportError>(ImportErrorKind::Invalid,
                                           "--dump-passes " + options.dumpDir + ": cannot create the folder: " +
                                               ec.message());
  }
  PassManager pm(&context);
  buildInferencePipeline(pm, options.pipeline);
  int dumpIndex = 0;
  auto recorder = std::make_unique<PassRecorder>(options.dumpDir, module, *compiled, dumpIndex);
  PassRecorder &dumps = *recorder;
  dumps.write("import");
  pm.addInstrumentation(std::move(recorder));
  if (failed(pm.run(module)))
    return llvm::createStringError(path + ": the compile pipeline failed (see the diagnostics above)");
  if (!dumps.error.empty())
    return llvm::createStringError(dumps.error);
  if (auto err = checkTensorSizes(module, path, options.maxFoldBytes)) // what the passes made
    return err;
  compiled->compiledOps = countOps(module);

  // Params go into the data section once, shared by every variant.
  CodegenInputs inputs;
  for (const auto &name : compiled->model.inputNames) {
    inputs.argNames.push_back(name);
    inputs.argDataOffsets.push_back(-1);
  }
  for (const auto &param : compiled->model.params) {
    inputs.argNames.push_back(param.name);
    inputs.argDataOffsets.push_back(compiled->data.add(param.bytes.data(), param.bytes.size()));
  }
  auto &plan = compiled->plan;
  // One variant per target, each from its own copy of the module: FP8 insertion and lowering differ.
  for (const std::string &target : options.targets) {
    OwningOpRef<ModuleOp> copy = module.clone();
    PassManager targetPm(&context);
    buildTargetPipeline(targetPm, options.pipeline, target);
    auto targetRecorder = std::make_unique<PassRecorder>(options.dumpDir, *copy, *compiled, dumpIndex, target + "-");
    PassRecorder &targetDumps = *targetRecorder;
    targetPm.addInstrumentation(std::move(targetRecorder));
    if (failed(targetPm.run(*copy)))
      return llvm::createStringError(path + ": the " + target + " pipeline failed (see the diagnostics above)");
    if (!targetDumps.error.empty())
      return llvm::createStringError(targetDumps.error);
    recordPrecisions(*copy, target, compiled->layers);
    bool fp8 = false;
    copy->walk([&](Operation *op) { fp8 |= llvm::isa<Fp8GemmOp, Fp8BlockGemmOp>(op); });
    inputs.target = target;
    inputs.precision = fp8 ? "fp8" : std::string(precisionName(lookupTarget(target)->fallback));
    auto variant = buildVariant(copy->lookupSymbol<func::FuncOp>("forward"), inputs, compiled->data);
    if (!variant)
      return llvm::createStringError(path + ": " + target + ": " + llvm::toString(variant.takeError()));
    *plan.add_variants() = std::move(*variant);
  }
  // With --train, one training-step variant per target, each from its own copy of the imported model.
  for (const std::string &target : trainModule ? options.targets : std::vector<std::string>{}) {
    OwningOpRef<ModuleOp> copy = trainModule->clone();
    PassManager trainPm(&context);
    buildTrainingPipeline(trainPm, options.pipeline, target);
    auto trainRecorder = std::make_unique<PassRecorder>(options.dumpDir, *copy, *compiled, dumpIndex,
                                                        target + "-train-");
    trainPm.addInstrumentation(std::move(trainRecorder));
    // A model with an operator tec cannot differentiate is the user's to change: an unsupported-model
    // error (exit 2) naming the node, not an internal failure.
    std::string noGradient;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
      std::string text = d.str();
      if (text.find("has no gradient") == std::string::npos)
        return failure(); // the default handler prints it
      noGradient = text;
      return success();
    });
    if (failed(trainPm.run(*copy))) {
      if (!noGradient.empty())
        return llvm::make_error<ImportError>(ImportErrorKind::Unsupported, path + ": " + noGradient);
      return llvm::createStringError(path + ": the " + target + " training pipeline failed (see the diagnostics above)");
    }
    auto step = copy->lookupSymbol<func::FuncOp>("train_step");
    CodegenInputs trainInputs = inputs;
    std::vector<std::string> trainInputNames = compiled->model.inputNames;
    std::vector<std::string> targetInputs;
    for (const auto &name : compiled->model.outputNames)
      targetInputs.push_back(kTargetPrefix.str() + name);
    if (compiled->model.outputNames.size() > 1) // each output's loss weight (see Trainer::trainOn)
      for (const auto &name : compiled->model.outputNames)
        targetInputs.push_back(kLossWeightPrefix.str() + name);
    for (const auto &name : targetInputs) {
      trainInputs.argNames.push_back(name);
      trainInputs.argDataOffsets.push_back(-1);
      trainInputNames.push_back(name);
    }
    bool fp8 = false;
    step.walk([&](Operation *op) { fp8 |= llvm::isa<Fp8GemmOp, Fp8BlockGemmOp>(op); });
    trainInputs.target = target;
    trainInputs.precision = fp8 ? "fp8" : std::string(precisionName(lookupTarget(target)->fallback));
    auto variant = buildVariant(step, trainInputs, compiled->data);
    if (!variant)
      return llvm::createStringError(path + ": " + target + " train_step: " + llvm::toString(variant.takeError()));
    variant->set_kind("train");
    variant->set_accumulate(static_cast<int32_t>(options.pipeline.train.accumulate));
    for (const auto &name : trainInputNames)
      variant->add_input_names(name);
    variant->add_output_names("loss");
    if (variant->outputs_size() > 1)
      variant->add_output_names("loss_scale");
    *plan.add_variants() = std::move(*variant);
    compiled->trainModules.push_back(std::move(copy));
  }
  for (const auto &name : compiled->model.inputNames)
    plan.add_input_names(name);
  for (const auto &name : compiled->model.outputNames)
    plan.add_output_names(name);
  plan.set_source_model(llvm::sys::path::filename(path).str());
  plan.set_producer("tec");
  plan.set_onnx_model(compiled->model.onnxWithoutParams);
  plan.mutable_transposed_copies()->insert(compiled->model.transposedCopies.begin(),
                                           compiled->model.transposedCopies.end());
  return compiled;
}

ApiError toApiError(llvm::Error error) {
  ApiError result{ErrorKind::Internal, ""};
  llvm::handleAllErrors(
      std::move(error),
      [&](const ImportError &e) {
        result = {e.getKind() == ImportErrorKind::Unsupported ? ErrorKind::Unsupported : ErrorKind::BadModel,
                  e.getMessage(), e.getOperators()};
      },
      [&](const llvm::ErrorInfoBase &e) { result.message = e.message(); });
  return result;
}

std::optional<ApiError> compileToPlanFile(const std::string &modelPath, const CompileOptions &options,
                                          const std::string &planPath, std::string *summary) {
  if (std::string e = compileOptionError(options); !e.empty())
    return ApiError{ErrorKind::BadInput, e};
  MLIRContext context;
  context.printOpOnDiagnostic(false);
  auto compiled = compileModel(context, modelPath, options);
  if (!compiled)
    return toApiError(compiled.takeError());
  if (Status s = writePlanFile(planPath, (*compiled)->plan, (*compiled)->data); !s.ok())
    return ApiError{ErrorKind::BadInput, s.message()};
  if (summary)
    *summary = compileSummary(**compiled, modelPath, planPath, options.dumpDir);
  return std::nullopt;
}

std::optional<ApiError> compileBytesToPlanFile(const std::string &modelBytes, const CompileOptions &options,
                                               const std::string &planPath, std::string *summary) {
  llvm::SmallString<128> folder;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("tec-model", folder))
    return ApiError{ErrorKind::Internal, "cannot create a temporary folder: " + ec.message()};
  const std::string path = (folder + "/model.onnx").str();
  std::optional<ApiError> result;
  if (Status s = writeFileAtomically(path, modelBytes); !s.ok())
    result = ApiError{ErrorKind::Internal, s.message()};
  else
    result = compileToPlanFile(path, options, planPath, summary);
  llvm::sys::fs::remove_directories(folder);
  return result;
}

std::string optionRangeError(const char *flag, double value, double lo, double hi) {
  if (std::isfinite(value) && value >= lo && value <= hi)
    return "";
  auto num = [](double x) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.10g", x);
    return std::string(text);
  };
  return "--" + std::string(flag) + " " + num(value) + ": expected a value in [" + num(lo) + ", " + num(hi) + "]";
}

std::string optionChoiceError(const char *flag, const std::string &value, std::initializer_list<const char *> allowed) {
  for (const char *a : allowed)
    if (value == a)
      return "";
  std::string list;
  for (const char *a : allowed)
    list += (list.empty() ? "" : ", ") + std::string(a);
  return "--" + std::string(flag) + " " + value + ": expected one of " + list;
}

/// `--flag REGEX`'s error when REGEX is not a valid regular expression, else "".
std::string optionRegexError(const char *flag, const std::string &pattern) {
  std::string why;
  if (pattern.empty() || llvm::Regex(pattern).isValid(why))
    return "";
  return "--" + std::string(flag) + " '" + pattern + "': not a valid regular expression (" + why + ")";
}

std::string readFp8Calibration(const std::string &path, std::string &recipe) {
  const std::string flag = "--fp8-calibration " + path + ": ";
  auto text = llvm::MemoryBuffer::getFile(path);
  if (!text)
    return flag + "cannot read it (" + text.getError().message() + ")";
  llvm::Expected<llvm::json::Value> json = llvm::json::parse((*text)->getBuffer());
  if (!json)
    return flag + "not JSON (" + llvm::toString(json.takeError()) + ")";
  const llvm::json::Object *object = json->getAsObject();
  std::optional<llvm::StringRef> chosen = object ? object->getString("fp8_recipe") : std::nullopt;
  if (!chosen)
    return flag + "no \"fp8_recipe\" in it (expected what `tec calibrate --json` writes)";
  recipe = chosen->str();
  return "";
}

std::string compileOptionError(const CompileOptions &options) {
  const PipelineOptions &p = options.pipeline;
  const TrainOptions &t = p.train;
  const double maxSteps = 2147483647.0;
  if (std::string e = optionRangeError("max-fold-bytes", static_cast<double>(options.maxFoldBytes), 1,
                                       static_cast<double>(kMaxTensorBytes));
      !e.empty())
    return e;
  for (const std::string &e :
       {optionRangeError("amax-history", p.fp8.amaxHistory, 1, 4096), optionRangeError("fp8-margin", p.fp8.margin, 0, 64),
        optionRangeError("loss-scale", t.lossScale, 0, 3.4e38),
        optionRangeError("loss-scale-growth-interval", t.growthInterval, 1, maxSteps),
        optionRangeError("clip-norm", t.clipNorm, 0, 3.4e38), optionRangeError("lr", t.learningRate, 0, 3.4e38),
        optionRangeError("warmup-steps", t.warmupSteps, 0, maxSteps),
        optionRangeError("total-steps", t.totalSteps, 1, maxSteps), optionRangeError("accumulate", t.accumulate, 1, 65536),
        optionRangeError("bucket-mb", t.bucketMb, 0, 1e6), optionRangeError("shard-optimizer", t.shardOptimizer, 0, 65536),
        optionRangeError("momentum", t.momentum, 0, 0.999999), optionRangeError("beta1", t.beta1, 0, 0.999999),
        optionRangeError("beta2", t.beta2, 0, 0.999999), optionRangeError("eps", t.eps, 1e-30, 1),
        optionRangeError("weight-decay", t.weightDecay, 0, 1e6),
        optionRegexError("keep-precision", p.fp8.keepPrecision), optionRegexError("frozen", t.frozen),
        optionRegexError("trainable", t.trainable), fp8RecipeError(p.fp8.recipe),
        optionChoiceError("fp8-block-scales", p.fp8.blockScales, {"pow2", "f32"})})
    if (!e.empty())
      return e;
  for (const std::string &pass : p.disabledPasses) {
    const auto &known = pipelinePassNames();
    if (std::find(known.begin(), known.end(), pass) == known.end())
      return "--disable-pass " + pass + ": no such pass in the pipeline (" + llvm::join(known, ", ") + ")";
  }
  return "";
}

} // namespace tec
