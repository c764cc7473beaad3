// tec model.onnx: compile a model into a plan and print the compile summary (or the IR, --emit).
#include "Cli.h"

#include "api/CompileIR.h"
#include "api/Inspect.h"
#include "api/Runtime.h"
#include "api/Summary.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace cli {

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"), cl::cat(category()));

cl::opt<std::string> outputPath("o", cl::desc("where to write the plan (default: the model's path with .tecplan)"),
                                cl::value_desc("file"), cl::cat(category()));

cl::list<std::string> shapes("shape", cl::desc("fix dynamic input dims, e.g. --shape x=64x1024, or symbolic dims by "
                                              "name, e.g. --shape batch=2,sequence=32 (repeatable, or a,b)"),
                             cl::value_desc("name=AxB"), cl::CommaSeparated, cl::sub(cl::SubCommand::getTopLevel()),
                             cl::sub(calibrateSubcommand()), cl::cat(category()));

cl::list<std::string> frozenInputs("freeze-input",
                                   cl::desc("fix a graph input's value at compile time (ONNX TensorProto .pb), "
                                            "e.g. a shape input; repeatable"),
                                   cl::value_desc("name=file.pb"), cl::CommaSeparated, cl::cat(category()));

enum class Emit { Plan, Import, Tec, Cuda };

cl::opt<Emit> emit("emit", cl::desc("what to produce"), cl::init(Emit::Plan),
                   cl::values(clEnumValN(Emit::Plan, "plan", "write the plan and print the compile summary (default)"),
                              clEnumValN(Emit::Import, "import", "print the tec IR as imported, before any pass"),
                              clEnumValN(Emit::Tec, "tec", "print the tec IR after the pipeline"),
                              clEnumValN(Emit::Cuda, "cuda",
                                         "write the plan and, beside it (.cu), its GPU variant's launch sequence as a "
                                         "standalone CUDA host program")),
                   cl::cat(category()));

cl::opt<std::string> dumpPasses("dump-passes", cl::desc("write the IR after each pass as DIR/NN-pass.mlir, and the "
                                                         "backend's schedule of the plan as DIR/schedule-TARGET.txt"),
                                cl::value_desc("DIR"), cl::cat(category()));

cl::opt<bool> fastGelu("fast-gelu", cl::desc("let an erf GELU use cuBLASLt's tanh GELU epilogue"), cl::cat(category()));

cl::opt<std::string> targets("target",
                            cl::desc("variants to build: all (default), auto (this machine), or a list such as "
                                     "sm_90,sm_80,cpu"),
                            cl::init("all"), cl::cat(category()));

cl::opt<std::string> fp8Policy("fp8", cl::desc("which GEMMs run in FP8 where the target has it: auto | all | none"),
                               cl::init("auto"), cl::cat(category()));

cl::opt<std::string> keepPrecision("keep-precision",
                                   cl::desc("regex of ONNX node names whose GEMMs stay out of FP8 (e.g. first|last)"),
                                   cl::value_desc("regex"), cl::cat(category()));

cl::opt<std::string> fp8Format("fp8-format",
                               cl::desc("default | e4m3 | hybrid (E4M3 forward, E5M2 gradients; inference uses E4M3 "
                                        "either way); default: hybrid for delayed and current, e4m3 for block and mxfp8"),
                               cl::init("default"), cl::cat(category()));

cl::opt<std::string> fp8Recipe("fp8-recipe",
                               cl::desc("Transformer Engine's FP8 recipes: auto (the target's best) | delayed | current | block | mxfp8, then per "
                                        "layer REGEX=RECIPE (ONNX node names), ';'-separated: 'block;lm_head=delayed'"),
                               cl::value_desc("recipe[;regex=recipe...]"), cl::init("delayed"), cl::cat(category()));

cl::opt<std::string> fp8Calibration("fp8-calibration",
                                    cl::desc("the per-layer FP8 recipes `tec calibrate --json FILE` chose (in place of "
                                             "--fp8-recipe)"),
                                    cl::value_desc("file"), cl::cat(category()));

cl::opt<std::string> fp8BlockScales("fp8-block-scales",
                                    cl::desc("the block recipe's scales: pow2 (Transformer Engine's default) | f32"),
                                    cl::init("pow2"), cl::cat(category()));

cl::opt<int64_t> amaxHistory("amax-history", cl::desc("length of each FP8 amax history"), cl::init(1024),
                             cl::cat(category()));

cl::opt<int64_t> fp8Margin("fp8-margin", cl::desc("delayed scaling margin: scale = (fp8_max / amax) / 2^margin"),
                           cl::init(0), cl::cat(category()));

cl::opt<std::string> amaxAlgo("amax-algo", cl::desc("amax from the history: max | most_recent"), cl::init("max"),
                              cl::cat(category()));

cl::opt<bool> fp8Emulate("fp8-emulate", cl::desc("keep FP8 GEMMs on the cpu target, emulated (to test numerics)"),
                         cl::cat(category()));

cl::opt<bool> fp8Attention("fp8-attention",
                           cl::desc("attention in FP8 too where GEMMs run in FP8 (Transformer Engine's fp8_dpa)"),
                           cl::cat(category()));

cl::opt<bool> train("train", cl::desc("also build a training step (loss, backward, optimizer)"), cl::cat(category()));

cl::opt<std::string> lossName("loss", cl::desc("training loss: mse | l1 | cross-entropy (int64 class labels)"),
                              cl::init("mse"), cl::cat(category()));

cl::opt<int64_t> ignoreIndex("ignore-index", cl::desc("cross-entropy: labels of this value count for nothing"),
                             cl::init(-100), cl::cat(category()));

cl::opt<std::string> frozenParams("frozen", cl::desc("regex of initializer names kept fixed in training"),
                                  cl::value_desc("regex"), cl::cat(category()));

cl::opt<std::string> trainableParams("trainable",
                                     cl::desc("regex of initializer names trained even where tec would freeze them "
                                              "(a value the exporter folded, a mask, a running statistic)"),
                                     cl::value_desc("regex"), cl::cat(category()));

cl::opt<double> lossScaleInit("loss-scale", cl::desc("dynamic loss scaling from this scale (default: 65536 on FP16 "
                                                    "targets, off elsewhere)"),
                              cl::init(0.0), cl::cat(category()));

cl::opt<int64_t> growthInterval("loss-scale-growth-interval", cl::desc("clean steps before the loss scale doubles"),
                                cl::init(2000), cl::cat(category()));

cl::opt<int64_t> accumulateSteps("accumulate",
                                 cl::desc("gradient accumulation: each optimizer update applies the mean gradient of "
                                          "this many training steps (micro-batches); the schedule counts updates"),
                                 cl::init(1), cl::cat(category()));

cl::opt<double> bucketMb("bucket-mb",
                         cl::desc("data parallelism: MiB of gradients one all_reduce sums over the ranks (buckets in "
                                  "the order the backward produces them)"),
                         cl::init(25.0), cl::cat(category()));

cl::opt<int64_t> shardOptimizer("shard-optimizer",
                                cl::desc("ZeRO stage 1 for N ranks: each rank holds and updates 1/N of the optimizer "
                                         "state, gradients reduce-scattered and params all-gathered (the plan then "
                                         "trains on exactly N ranks)"),
                                cl::value_desc("N"), cl::init(0), cl::cat(category()));

cl::opt<int64_t> maxFoldBytes("max-fold-bytes",
                              cl::desc("the largest constant the plan stores (a Constant node, a folded Range); a "
                                       "larger one is refused naming its node (a splat stores one element)"),
                              cl::init(int64_t(1) << 30), cl::cat(category()));

cl::opt<double> clipNorm("clip-norm", cl::desc("clip gradients to this global norm (0: off)"), cl::init(0.0),
                         cl::cat(category()));

cl::opt<std::string> optimizerName("optimizer", cl::desc("sgd | adamw"), cl::init("adamw"), cl::cat(category()));

cl::opt<double> lr("lr", cl::desc("learning rate"), cl::init(1e-3), cl::cat(category()));

cl::opt<std::string> lrSchedule("schedule", cl::desc("learning-rate schedule: constant | warmup | cosine"),
                                cl::init("constant"), cl::cat(category()));

cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("linear warm-up steps"), cl::init(0), cl::cat(category()));

cl::opt<int64_t> totalSteps("total-steps", cl::desc("steps of the cosine schedule"), cl::init(1000), cl::cat(category()));

cl::opt<double> momentum("momentum", cl::desc("sgd momentum"), cl::init(0.0), cl::cat(category()));

cl::opt<bool> nesterov("nesterov", cl::desc("sgd Nesterov momentum"), cl::cat(category()));

cl::opt<double> beta1("beta1", cl::desc("adamw beta1"), cl::init(0.9), cl::cat(category()));

cl::opt<double> beta2("beta2", cl::desc("adamw beta2"), cl::init(0.999), cl::cat(category()));

cl::opt<double> adamEps("eps", cl::desc("adamw epsilon"), cl::init(1e-8), cl::cat(category()));

cl::opt<double> weightDecay("weight-decay",
                            cl::desc("weight decay (decoupled for adamw, L2 for sgd); 0 unless given "
                                     "(torch.optim.AdamW's default is 0.01)"),
                            cl::init(0.0),
                            cl::cat(category()));

cl::list<std::string> disabledPasses("disable-pass", cl::desc("leave a pass out of the pipeline (repeatable)"),
                                     cl::value_desc("pass"), cl::CommaSeparated, cl::cat(category()));

llvm::Error parseInputOptions(tec::ImportOptions &options) {
  for (const std::string &spec : shapes) {
    auto [name, dims] = llvm::StringRef(spec).split('=');
    if (name.empty() || dims.empty())
      return llvm::createStringError("--shape '" + spec + "': expected name=AxB (e.g. x=64x1024)");
    llvm::SmallVector<llvm::StringRef> parts;
    dims.split(parts, 'x');
    llvm::SmallVector<int64_t> values;
    for (llvm::StringRef p : parts) {
      int64_t v;
      if (p.getAsInteger(10, v) || v < 0)
        return llvm::createStringError("--shape '" + spec + "': '" + p.str() + "' is not a non-negative integer");
      values.push_back(v);
    }
    options.shapes[name] = values;
  }
  for (const std::string &spec : frozenInputs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    if (name.empty() || file.empty())
      return llvm::createStringError("--freeze-input '" + spec + "': expected name=file.pb");
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false);
    if (!buffer)
      return llvm::createStringError("--freeze-input '" + spec + "': cannot read " + file.str() + ": " +
                                     buffer.getError().message());
    options.frozenInputs[name] = (*buffer)->getBuffer().str();
  }
  return llvm::Error::success();
}

/// --emit=cuda: for the inference step and (with --train) the training step, the plan's first GPU
/// variant (else its first one) as PLAN.cu and PLAN.train.cu.
int writeCudaProgram(const tec::plan::Plan &plan, const std::string &planPath) {
  for (const std::string kind : {"", "train"}) {
    int chosen = -1;
    for (int i = 0; i < plan.variants_size(); ++i)
      if (plan.variants(i).kind() == kind &&
          (chosen < 0 || (!llvm::StringRef(plan.variants(chosen).target()).starts_with("sm_") &&
                          llvm::StringRef(plan.variants(i).target()).starts_with("sm_"))))
        chosen = i;
    if (chosen < 0)
      continue;
    llvm::SmallString<256> cuPath(planPath);
    llvm::sys::path::replace_extension(cuPath, kind.empty() ? "cu" : "train.cu");
    auto source = tec::cudaProgramSource(plan.variants(chosen), llvm::sys::path::filename(planPath).str());
    if (!source.ok()) {
      llvm::errs() << "error: --emit=cuda: " << source.error().message() << "\n";
      return kExitBadInput;
    }
    if (tec::Status st = tec::writeFileAtomically(cuPath.str().str(), *source); !st.ok()) {
      llvm::errs() << "error: " << st.message() << "\n";
      return kExitBadInput;
    }
    llvm::outs() << "wrote " << cuPath << ": variant " << plan.variants(chosen).target()
                 << (kind.empty() ? "" : " train step") << " as a CUDA host program\n";
  }
  return 0;
}

/// The FP8 flags as tec-insert-fp8's options: "" when each choice flag names a choice, else its error.
std::string readFp8Flags(tec::TecInsertFp8Options &fp8) {
  fp8.keepPrecision = keepPrecision;
  fp8.amaxHistory = amaxHistory;
  fp8.margin = fp8Margin;
  fp8.attention = fp8Attention;
  fp8.recipe = fp8Recipe;
  fp8.blockScales = fp8BlockScales;
  if (!fp8Calibration.empty())
    if (std::string e = tec::readFp8Calibration(fp8Calibration, fp8.recipe); !e.empty())
      return e;
  for (const std::string &e : {tec::readChoiceOption("fp8", fp8Policy, fp8.mode),
                               tec::readChoiceOption("fp8-format", fp8Format, fp8.format),
                               tec::readChoiceOption("amax-algo", amaxAlgo, fp8.algo)})
    if (!e.empty())
      return e;
  return "";
}

/// --loss, --optimizer and --schedule as tec-build-train-step's options: "" when each names a choice.
std::string readTrainChoices(tec::TrainOptions &t) {
  for (const std::string &e : {tec::readChoiceOption("loss", lossName, t.loss),
                               tec::readChoiceOption("optimizer", optimizerName, t.optimizer),
                               tec::readChoiceOption("schedule", lrSchedule, t.schedule)})
    if (!e.empty())
      return e;
  return "";
}

/// The compile flags as the API's options (the model's inputs and the targets aside).
tec::CompileOptions compileOptionsFromFlags() {
  tec::CompileOptions options;
  options.pipeline.disabledPasses.insert(disabledPasses.begin(), disabledPasses.end());
  options.pipeline.fastGelu = fastGelu;
  readFp8Flags(options.pipeline.fp8); // its errors: compileFlagsError, checked before anything compiles
  options.pipeline.fp8Emulate = fp8Emulate;
  options.train = train;
  tec::TrainOptions &t = options.pipeline.train;
  readTrainChoices(t); // its errors, as readFp8Flags'
  t.ignoreIndex = ignoreIndex;
  t.learningRate = lr;
  t.warmupSteps = warmupSteps;
  t.totalSteps = totalSteps;
  t.momentum = momentum;
  t.nesterov = nesterov;
  t.beta1 = beta1;
  t.beta2 = beta2;
  t.eps = adamEps;
  t.weightDecay = weightDecay;
  t.clipNorm = clipNorm;
  t.frozen = frozenParams;
  t.trainable = trainableParams;
  t.lossScale = lossScaleInit;
  t.growthInterval = growthInterval;
  t.accumulate = accumulateSteps;
  t.bucketMb = bucketMb;
  t.shardOptimizer = shardOptimizer;
  options.maxFoldBytes = maxFoldBytes;
  return options;
}

/// --dump-passes ends with what no IR dump shows: the schedule this machine's backend makes of the plan at
/// load (its folds, as `tec inspect --schedule` prints them), as DIR/schedule-TARGET.txt.
void dumpSchedule(const std::string &planPath) {
  auto session = tec::Session::open(planPath, tec::SessionOptions{});
  if (!session.ok()) {
    llvm::outs() << "  schedule not written: " << session.error().message() << "\n";
    return;
  }
  const std::string path = dumpPasses + "/schedule-" + (*session)->variant().target() + ".txt";
  if (tec::Status st = tec::writeFileAtomically(path, tec::describeSchedule(**session)); !st.ok())
    llvm::outs() << "  schedule not written: " << st.message() << "\n";
  else
    llvm::outs() << "  schedule " << path << " (the " << (*session)->backendName() << " backend's, at load)\n";
}

int compile() {
  if (inputPath.empty()) {
    llvm::errs() << "error: no model given (usage: tec model.onnx, tec run plan.tecplan, tec inspect plan.tecplan)\n";
    return kExitBadInput;
  }
  tec::CompileOptions options = compileOptionsFromFlags();
  if (auto err = parseInputOptions(options.import)) {
    llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
    return kExitBadInput;
  }
  auto resolved = tec::resolveTargets(targets);
  if (!resolved) {
    llvm::errs() << "error: " << llvm::toString(resolved.takeError()) << "\n";
    return kExitBadInput;
  }
  options.targets = *resolved;
  options.dumpDir = dumpPasses;
  MLIRContext context;
  context.printOpOnDiagnostic(false);
  if (emit == Emit::Import) {
    auto model = tec::importOnnxFile(context, inputPath, options.import);
    if (!model)
      return reportCompileError(model.takeError());
    model->module->print(llvm::outs(), tec::irPrintingFlags());
    llvm::outs() << "\n";
    return 0;
  }
  if (int code = refuseOverwrite("-o", outputPath, inputPath))
    return code;
  auto compiled = tec::compileModel(context, inputPath, options);
  if (!compiled)
    return reportCompileError(compiled.takeError());
  if (emit == Emit::Tec) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    (*compiled)->model.module->print(os, tec::irPrintingFlags());
    os << "\n";
    os.flush();
    llvm::outs() << ir;
    if (!outputPath.empty())
      if (tec::Status st = tec::writeFileAtomically(outputPath, ir); !st.ok()) {
        llvm::errs() << "error: " << st.message() << "\n";
        return kExitBadInput;
      }
    return 0;
  }
  std::string planPath = outputPath;
  if (planPath.empty()) {
    llvm::SmallString<256> p(inputPath.getValue());
    llvm::sys::path::replace_extension(p, "tecplan");
    planPath = p.str().str();
  }
  if (tec::Status s = tec::writePlanFile(planPath, (*compiled)->plan, (*compiled)->data); !s.ok()) {
    llvm::errs() << "error: " << s.message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << tec::compileSummary(**compiled, inputPath, planPath, dumpPasses);
  if (!dumpPasses.empty())
    dumpSchedule(planPath);
  if (emit == Emit::Cuda)
    return writeCudaProgram((*compiled)->plan, planPath);
  return 0;
}

std::string compileFlagsError() {
  tec::CompileOptions options = compileOptionsFromFlags();
  for (const std::string &e : {readFp8Flags(options.pipeline.fp8), readTrainChoices(options.pipeline.train)})
    if (!e.empty())
      return e;
  return tec::compileOptionError(options);
}

} // namespace cli
