// tec: compile an ONNX model into a plan (`tec model.onnx`), run a plan (`tec run`), look inside one
// (`tec inspect`).
#include "api/Checkpoint.h"
#include "api/Compile.h"
#include "api/Export.h"
#include "api/Trainer.h"
#include "api/TensorFiles.h"

#include "kernels/cpu/Blas.h"
#include "runtime/Doctor.h"
#include "runtime/MemoryReport.h"
#include "runtime/Session.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/util/json_util.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include <fcntl.h>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

/// Exit codes: bad input (model, plan, flags) is 2, a failure inside tec is 1.
constexpr int kExitBadInput = 2, kExitInternal = 1;

/// Refuses an output that is one of the command's inputs (by any path): writing it would destroy the
/// user's file. 0 or the exit code.
int refuseOverwrite(const std::string &flag, const std::string &output, const std::string &input) {
  if (output.empty() || !llvm::sys::fs::equivalent(output, input))
    return 0;
  llvm::errs() << "error: " << flag << " " << output << " is the input " << input << "; write it elsewhere\n";
  return kExitBadInput;
}


cl::OptionCategory category("tec options");

// tec model.onnx
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"), cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("where to write the plan (default: the model's path with .tecplan)"),
                                cl::value_desc("file"), cl::cat(category));
cl::list<std::string> shapes("shape", cl::desc("fix dynamic input dims, e.g. --shape x=64x1024, or symbolic dims by "
                                              "name, e.g. --shape batch=2,sequence=32 (repeatable, or a,b)"),
                             cl::value_desc("name=AxB"), cl::CommaSeparated, cl::cat(category));
cl::list<std::string> frozenInputs("freeze-input",
                                   cl::desc("fix a graph input's value at compile time (ONNX TensorProto .pb), "
                                            "e.g. a shape input; repeatable"),
                                   cl::value_desc("name=file.pb"), cl::CommaSeparated, cl::cat(category));
enum class Emit { Plan, Import, Tec, Cuda };
cl::opt<Emit> emit("emit", cl::desc("what to produce"), cl::init(Emit::Plan),
                   cl::values(clEnumValN(Emit::Plan, "plan", "write the plan and print the compile summary (default)"),
                              clEnumValN(Emit::Import, "import", "print the tec IR as imported, before any pass"),
                              clEnumValN(Emit::Tec, "tec", "print the tec IR after the pipeline"),
                              clEnumValN(Emit::Cuda, "cuda",
                                         "write the plan and, beside it (.cu), its GPU variant's launch sequence as a "
                                         "standalone CUDA host program")),
                   cl::cat(category));
cl::opt<std::string> dumpPasses("dump-passes", cl::desc("write the IR after each pass as DIR/NN-pass.mlir"),
                                cl::value_desc("DIR"), cl::cat(category));
cl::opt<bool> fastGelu("fast-gelu", cl::desc("let an erf GELU use cuBLASLt's tanh GELU epilogue"), cl::cat(category));
cl::opt<std::string> targets("target",
                            cl::desc("variants to build: all (default), auto (this machine), or a list such as "
                                     "sm_90,sm_80,cpu"),
                            cl::init("all"), cl::cat(category));
cl::opt<std::string> fp8Policy("fp8", cl::desc("which GEMMs run in FP8 where the target has it: auto | all | none"),
                               cl::init("auto"), cl::cat(category));
cl::opt<std::string> keepPrecision("keep-precision",
                                   cl::desc("regex of ONNX node names whose GEMMs stay out of FP8 (e.g. first|last)"),
                                   cl::value_desc("regex"), cl::cat(category));
cl::opt<std::string> fp8Format("fp8-format",
                               cl::desc("e4m3 | hybrid (E4M3 forward, E5M2 gradients; inference uses E4M3 either way)"),
                               cl::init("hybrid"), cl::cat(category));
cl::opt<int64_t> amaxHistory("amax-history", cl::desc("length of each FP8 amax history"), cl::init(1024),
                             cl::cat(category));
cl::opt<int64_t> fp8Margin("fp8-margin", cl::desc("delayed scaling margin: scale = (fp8_max / amax) / 2^margin"),
                           cl::init(0), cl::cat(category));
cl::opt<std::string> amaxAlgo("amax-algo", cl::desc("amax from the history: max | most_recent"), cl::init("max"),
                              cl::cat(category));
cl::opt<bool> fp8Emulate("fp8-emulate", cl::desc("keep FP8 GEMMs on the cpu target, emulated (to test numerics)"),
                         cl::cat(category));
cl::opt<bool> fp8Attention("fp8-attention",
                           cl::desc("attention in FP8 too where GEMMs run in FP8 (Transformer Engine's fp8_dpa)"),
                           cl::cat(category));
cl::opt<bool> train("train", cl::desc("also build a training step (loss, backward, optimizer)"), cl::cat(category));
cl::opt<std::string> lossName("loss", cl::desc("training loss: mse | l1 | cross-entropy (int64 class labels)"),
                              cl::init("mse"), cl::cat(category));
cl::opt<int64_t> ignoreIndex("ignore-index", cl::desc("cross-entropy: labels of this value count for nothing"),
                             cl::init(-100), cl::cat(category));
cl::opt<std::string> frozenParams("frozen", cl::desc("regex of initializer names kept fixed in training"),
                                  cl::value_desc("regex"), cl::cat(category));
cl::opt<std::string> trainableParams("trainable",
                                     cl::desc("regex of initializer names trained even where tec would freeze them "
                                              "(a value the exporter folded, a mask, a running statistic)"),
                                     cl::value_desc("regex"), cl::cat(category));
cl::opt<double> lossScaleInit("loss-scale", cl::desc("dynamic loss scaling from this scale (default: 65536 on FP16 "
                                                    "targets, off elsewhere)"),
                              cl::init(0.0), cl::cat(category));
cl::opt<int64_t> growthInterval("loss-scale-growth-interval", cl::desc("clean steps before the loss scale doubles"),
                                cl::init(2000), cl::cat(category));
cl::opt<double> clipNorm("clip-norm", cl::desc("clip gradients to this global norm (0: off)"), cl::init(0.0),
                         cl::cat(category));
cl::opt<std::string> optimizerName("optimizer", cl::desc("sgd | adamw"), cl::init("adamw"), cl::cat(category));
cl::opt<double> lr("lr", cl::desc("learning rate"), cl::init(1e-3), cl::cat(category));
cl::opt<std::string> lrSchedule("schedule", cl::desc("learning-rate schedule: constant | warmup | cosine"),
                                cl::init("constant"), cl::cat(category));
cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("linear warm-up steps"), cl::init(0), cl::cat(category));
cl::opt<int64_t> totalSteps("total-steps", cl::desc("steps of the cosine schedule"), cl::init(1000), cl::cat(category));
cl::opt<double> momentum("momentum", cl::desc("sgd momentum"), cl::init(0.0), cl::cat(category));
cl::opt<bool> nesterov("nesterov", cl::desc("sgd Nesterov momentum"), cl::cat(category));
cl::opt<double> beta1("beta1", cl::desc("adamw beta1"), cl::init(0.9), cl::cat(category));
cl::opt<double> beta2("beta2", cl::desc("adamw beta2"), cl::init(0.999), cl::cat(category));
cl::opt<double> adamEps("eps", cl::desc("adamw epsilon"), cl::init(1e-8), cl::cat(category));
cl::opt<double> weightDecay("weight-decay", cl::desc("weight decay (decoupled for adamw, L2 for sgd)"), cl::init(0.0),
                            cl::cat(category));
cl::list<std::string> disabledPasses("disable-pass", cl::desc("leave a pass out of the pipeline (repeatable)"),
                                     cl::value_desc("pass"), cl::CommaSeparated, cl::cat(category));

// tec run plan.tecplan
cl::SubCommand runCommand("run", "run a compiled plan and print a performance summary");
cl::opt<std::string> runPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(runCommand), cl::cat(category));
cl::list<std::string> runInputs("input", cl::desc("an input from a .npy or .pb file (repeatable; others are random)"),
                                cl::value_desc("name=file"), cl::sub(runCommand), cl::cat(category));
cl::opt<std::string> outputDir("output-dir", cl::desc("write each output as DIR/<name>.npy"), cl::value_desc("DIR"),
                               cl::sub(runCommand), cl::cat(category));
cl::opt<int> iterations("iterations", cl::desc("timed runs"), cl::init(10), cl::sub(runCommand), cl::cat(category));
cl::opt<int> warmup("warmup", cl::desc("untimed runs before timing"), cl::init(2), cl::sub(runCommand), cl::cat(category));
cl::opt<int> threads("threads", cl::desc("CPU threads (0: the libraries' default)"), cl::init(0), cl::sub(runCommand), cl::cat(category));

cl::opt<std::string> variantName("variant", cl::desc("run this variant (a target such as cpu)"), cl::sub(runCommand), cl::cat(category));
cl::opt<bool> profile("profile", cl::desc("print each step's mean time (like trtexec --dumpProfile)"),
                      cl::sub(runCommand), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("seed of the random inputs"), cl::init(0), cl::sub(runCommand), cl::cat(category));
cl::opt<std::string> jsonReport("json", cl::desc("also write the performance summary as JSON"), cl::value_desc("file"),
                                cl::sub(runCommand), cl::cat(category));

// tec calibrate plan.tecplan
cl::SubCommand calibrateCommand("calibrate", "fill the FP8 amax histories from sample inputs and freeze the scales");
cl::opt<std::string> calibratePlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required,
                                   cl::sub(calibrateCommand), cl::cat(category));
cl::list<std::string> calibrateInputs("input", cl::desc("a sample input from .npy or .pb (repeatable; others random)"),
                                      cl::value_desc("name=file"), cl::sub(calibrateCommand), cl::cat(category));
cl::opt<int> calibrateSteps("steps", cl::desc("runs over the samples (random inputs change every run)"), cl::init(8),
                            cl::sub(calibrateCommand), cl::cat(category));
cl::opt<uint64_t> calibrateSeed("seed", cl::desc("seed of the random inputs"), cl::init(0), cl::sub(calibrateCommand),
                                cl::cat(category));
cl::opt<std::string> calibrateOutput("o", cl::desc("the calibrated plan (default: overwrite the input, atomically)"),
                                     cl::value_desc("file"), cl::sub(calibrateCommand), cl::cat(category));

// tec train plan.tecplan
cl::SubCommand trainCommand("train", "train: run the plan's training step over a data set");
cl::opt<std::string> trainPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(trainCommand),
                               cl::cat(category));
cl::list<std::string> trainInputs("input", cl::desc("a model input's samples, .npy with a leading sample dim"),
                                  cl::value_desc("name=file.npy"), cl::sub(trainCommand), cl::cat(category));
cl::list<std::string> trainTargets("target", cl::desc("an output's target samples, .npy with a leading sample dim"),
                                   cl::value_desc("output=file.npy"), cl::sub(trainCommand), cl::cat(category));
cl::opt<int> trainSteps("steps", cl::desc("training steps (default: one epoch)"), cl::init(0), cl::sub(trainCommand),
                        cl::cat(category));
cl::opt<int> trainEpochs("epochs", cl::desc("passes over the data set"), cl::init(0), cl::sub(trainCommand),
                         cl::cat(category));
cl::opt<int> batchSize("batch-size", cl::desc("samples per step; must be the model's batch (fix it with --shape "
                                             "when compiling)"),
                        cl::init(0), cl::sub(trainCommand), cl::cat(category));
cl::opt<std::string> trainVariant("variant", cl::desc("train with this variant (a target such as sm_75)"),
                                  cl::sub(trainCommand), cl::cat(category));
cl::opt<int> trainThreads("threads", cl::desc("CPU threads"), cl::init(0), cl::sub(trainCommand), cl::cat(category));
cl::opt<bool> trainProfile("profile", cl::desc("print each plan step's mean time per training step"),
                           cl::sub(trainCommand), cl::cat(category));
cl::opt<std::string> checkpointDir("checkpoint-dir", cl::desc("write checkpoints here (atomically)"),
                                   cl::value_desc("DIR"), cl::sub(trainCommand), cl::cat(category));
cl::opt<int> checkpointEvery("checkpoint-every", cl::desc("steps between checkpoints (0: only at the end)"),
                             cl::init(0), cl::sub(trainCommand), cl::cat(category));
cl::opt<std::string> resumeDir("resume", cl::desc("continue from the latest checkpoint in DIR"), cl::value_desc("DIR"),
                               cl::sub(trainCommand), cl::cat(category));
cl::opt<std::string> teacherModel("teacher",
                                  cl::desc("distill: the targets are this ONNX model's outputs on seeded random inputs"),
                                  cl::value_desc("teacher.onnx"), cl::sub(trainCommand), cl::cat(category));
cl::opt<uint64_t> trainSeed("seed", cl::desc("seed of the random inputs when distilling"), cl::init(0),
                            cl::sub(trainCommand), cl::cat(category));
cl::opt<bool> fp8Report("fp8-report", cl::desc("FP8 health per quantized tensor: amax history, scale, and the share "
                                              "of values that saturated or flushed to zero in the last step"),
                        cl::sub(trainCommand), cl::cat(category));
cl::opt<std::string> trainReport("report", cl::desc("write loss per step, step times and memory as JSON"),
                                 cl::value_desc("file"), cl::sub(trainCommand), cl::cat(category));

// tec export plan.tecplan
// Shared by run and train.
cl::opt<std::string> device("device", cl::desc("auto, cpu or cuda (cuda: no fallback)"), cl::init("auto"),
                            cl::sub(runCommand), cl::sub(trainCommand), cl::cat(category));
cl::opt<bool> allowTf32("tf32", cl::desc("let FP32 GEMMs on the GPU use TF32 tensor cores (10-bit mantissa inputs)"),
                        cl::sub(runCommand), cl::sub(trainCommand), cl::cat(category));

cl::SubCommand exportCommand("export", "write an ONNX model with the plan's (or a checkpoint's trained) weights");
cl::opt<std::string> exportPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(exportCommand),
                                cl::cat(category));
cl::opt<std::string> exportCheckpoint("checkpoint", cl::desc("take trained params from DIR's latest checkpoint"),
                                      cl::value_desc("DIR"), cl::sub(exportCommand), cl::cat(category));
cl::opt<std::string> exportOutput("o", cl::desc("the ONNX file to write"), cl::value_desc("file"), cl::Required,
                                  cl::sub(exportCommand), cl::cat(category));

// tec doctor [plan.tecplan]
cl::SubCommand doctorCommand("doctor", "what this machine can run: GPU, CUDA libraries, FP8, and a plan's variant");
cl::opt<std::string> doctorPlan(cl::Positional, cl::desc("[model.tecplan]"), cl::sub(doctorCommand), cl::cat(category));

// tec inspect plan.tecplan
cl::SubCommand inspectCommand("inspect", "print a plan's variants, steps, buffers and memory");
cl::opt<std::string> inspectPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(inspectCommand), cl::cat(category));
cl::opt<bool> inspectJson("json", cl::desc("the plan's metadata as JSON"), cl::sub(inspectCommand), cl::cat(category));

std::string bytesString(double bytes) { return tec::formatBytes(bytes); }

std::string shapeString(llvm::ArrayRef<int64_t> dims) {
  std::string s;
  for (auto [i, d] : llvm::enumerate(dims))
    s += (i ? "x" : "") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

//===----------------------------------------------------------------------===//
// tec model.onnx
//===----------------------------------------------------------------------===//

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

std::string typeString(Type type) {
  auto t = llvm::cast<RankedTensorType>(type);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t.getElementType() << "[" << shapeString(t.getShape()) << "]";
  return s;
}

std::string opsString(const std::map<std::string, int> &counts, int &total) {
  std::string s;
  total = 0;
  for (const auto &[name, n] : counts) {
    s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
    total += n;
  }
  return s;
}

/// "peak at step N: X live: params A, saved activations B, ..." for tec inspect and the compile summary.
std::string memoryLine(const tec::MemoryReport &m) {
  std::string line = (m.savedBytes ? "saved for the backward pass " + bytesString(m.savedBytes) + "; " : std::string()) +
                     "peak at step " + std::to_string(m.peakStep) + ": " + bytesString(m.peakBytes) + " live";
  for (auto [i, entry] : llvm::enumerate(m.atPeak))
    line += std::string(i ? ", " : ": ") + tec::kindName(entry.first) + " " + bytesString(entry.second);
  return line;
}

/// Each plan step's mean time over `runs` (summed in `stepMillis`), as trtexec --dumpProfile.
void printProfile(const tec::plan::Variant &v, const std::vector<double> &stepMillis, size_t runs, const char *per) {
  double sum = 0;
  for (double ms : stepMillis)
    sum += ms;
  llvm::outs() << llvm::formatv("=== Profile (mean per {5}) ===\n{0,4}  {1,-14} {2,10} {3,7}  {4}\n", "step", "kernel",
                                "ms", "%", "source", per);
  for (int i = 0; i < v.steps_size(); ++i)
    llvm::outs() << llvm::formatv("{0,4}  {1,-14} {2,10:f4} {3,6:f1}%  {4}\n", i, v.steps(i).kernel(),
                                  stepMillis[i] / std::max<size_t>(runs, 1), sum ? 100 * stepMillis[i] / sum : 0,
                                  v.steps(i).source());
}

/// Which source nodes became which op, for every op built from more than one node.
void printFusions(func::FuncOp forward) {
  std::vector<std::string> lines;
  forward.walk([&](Operation *op) {
    auto nodes = tec::sourceNodes(op->getLoc());
    if (nodes.size() < 2)
      return;
    std::string what = op->getName().stripDialect().str();
    if (auto epilogue = op->getAttrOfType<StringAttr>("epilogue"); epilogue && epilogue.getValue() != "none")
      what += " (epilogue " + epilogue.getValue().str() + ")";
    if (auto causal = op->getAttrOfType<BoolAttr>("causal"); causal && causal.getValue())
      what += " (causal)";
    lines.push_back(what + " <- " + llvm::join(nodes, ", "));
  });
  llvm::outs() << "  fusions  " << lines.size() << (lines.empty() ? "\n" : ":\n");
  for (const auto &l : lines)
    llvm::outs() << "    " << l << "\n";
}

/// TensorRT's layer information in the terminal: each GEMM's precision per target, then the reasons.
void printPrecisions(const tec::CompiledModel &c) {
  if (c.layers.empty())
    return;
  auto &os = llvm::outs();
  size_t width = 5;
  for (const auto &l : c.layers)
    width = std::max(width, l.layer.size());
  os << "  precision per GEMM layer:\n    " << llvm::left_justify("layer", width);
  for (const auto &v : c.plan.variants())
    os << "  " << llvm::left_justify(v.target(), 6);
  os << "\n";
  for (const auto &l : c.layers) {
    os << "    " << llvm::left_justify(l.layer, width);
    for (const auto &v : c.plan.variants()) {
      auto it = std::find_if(l.perTarget.begin(), l.perTarget.end(), [&](const auto &p) { return p.first == v.target(); });
      std::string precision = it == l.perTarget.end() ? "-" : llvm::StringRef(it->second).split(':').first.str();
      os << "  " << llvm::left_justify(precision, 6);
    }
    os << "\n";
  }
  // Why, once per distinct reason of each layer.
  for (const auto &l : c.layers) {
    std::vector<std::pair<std::string, std::vector<std::string>>> reasons;
    for (const auto &[target, text] : l.perTarget) {
      auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto &r) { return r.first == text; });
      if (it == reasons.end())
        reasons.push_back({text, {target}});
      else
        it->second.push_back(target);
    }
    for (const auto &[text, targetsWithIt] : reasons)
      os << "    " << l.layer << " on " << llvm::join(targetsWithIt, ", ") << ": " << text << "\n";
  }
}

/// With --train: which params the step trains, and each frozen one with why (from the first train module).
void printTrainedParams(const tec::CompiledModel &c) {
  if (c.trainModules.empty())
    return;
  auto step = const_cast<mlir::OwningOpRef<mlir::ModuleOp> &>(c.trainModules.front())->lookupSymbol<func::FuncOp>(
      "train_step");
  if (!step)
    return;
  std::vector<std::string> trained, frozen;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto name = step.getArgAttrOfType<mlir::StringAttr>(i, tec::kParamAttrName);
    if (!name)
      continue;
    if (auto why = step.getArgAttrOfType<mlir::StringAttr>(i, tec::kFrozenAttrName))
      frozen.push_back(name.str() + " (" + why.str() + ")");
    else
      trained.push_back(name.str());
  }
  llvm::outs() << "  trained  " << trained.size() << " params" << (frozen.empty() ? "" : ", frozen " + std::to_string(frozen.size()) + ":") << "\n";
  for (const auto &f : frozen)
    llvm::outs() << "    " << f << "\n";
}

void printSummary(const tec::CompiledModel &c, const std::string &planPath) {
  auto &os = llvm::outs();
  const auto &model = c.model;
  auto forward = const_cast<tec::ImportedModel &>(model).module->lookupSymbol<func::FuncOp>("forward");
  os << "tec: compiled " << inputPath << "\n";
  os << "  model    opset " << model.opset << (model.producer.empty() ? "" : ", producer " + model.producer) << "\n";
  auto args = forward.getArgumentTypes();
  for (auto [i, name] : llvm::enumerate(model.inputNames))
    os << "  input    " << name << " " << typeString(args[i]) << "\n";
  auto results = forward.getResultTypes();
  for (auto [i, name] : llvm::enumerate(model.outputNames))
    os << "  output   " << name << " " << typeString(results[i]) << "\n";
  double bytes = 0;
  int64_t elements = 0;
  for (const auto &p : model.params) {
    bytes += p.bytes.size();
    elements += p.type.getNumElements();
  }
  os << "  params   " << model.params.size() << " tensors, " << elements << " values, " << bytesString(bytes) << "\n";
  int total;
  std::string ops = opsString(c.importedOps, total);
  os << "  imported " << total << " ops: " << ops << "\n";
  ops = opsString(c.compiledOps, total);
  os << "  compiled " << total << " ops: " << ops << "\n";
  os << "  pipeline " << llvm::join(c.passes, " -> ") << "\n";
  printFusions(forward);
  printTrainedParams(c);
  for (const auto &v : c.plan.variants()) {
    os << "  variant  " << v.target() << (v.kind() == "train" ? " train step" : "") << " (" << v.precision()
       << "): " << v.steps_size() << " steps, arena " << bytesString(v.arena_bytes());
    if (v.kind() == "train") // what the backward pass keeps, the first thing lower precision should shrink
      os << ", saved activations " << bytesString(tec::memoryReport(v).savedBytes);
    os << "\n";
  }
  printPrecisions(c);
  if (!planPath.empty())
    os << "  plan     " << planPath << " (data " << bytesString(c.data.size()) << ")\n";
  if (!c.dumpFiles.empty())
    os << "  dumps    " << c.dumpFiles.size() << " files in " << dumpPasses << "\n";
}

int reportCompileError(llvm::Error err) {
  int code = kExitInternal;
  llvm::handleAllErrors(
      std::move(err),
      [&](const tec::ImportError &e) {
        llvm::errs() << "error: " << e.getMessage() << "\n";
        code = kExitBadInput;
      },
      [&](const llvm::ErrorInfoBase &e) { llvm::errs() << "error: " << e.message() << "\n"; });
  return code;
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

/// The compile flags as the API's options (the model's inputs and the targets aside).
tec::CompileOptions compileOptionsFromFlags() {
  tec::CompileOptions options;
  options.pipeline.disabledPasses.insert(disabledPasses.begin(), disabledPasses.end());
  options.pipeline.fastGelu = fastGelu;
  options.pipeline.fp8 = fp8Policy;
  options.pipeline.keepPrecision = keepPrecision;
  options.pipeline.amaxHistory = amaxHistory;
  options.pipeline.fp8Format = fp8Format;
  options.pipeline.margin = fp8Margin;
  options.pipeline.amaxAlgo = amaxAlgo;
  options.pipeline.fp8Emulate = fp8Emulate;
  options.pipeline.fp8Attention = fp8Attention;
  options.train = train;
  options.pipeline.train = {lossName, optimizerName, lrSchedule, frozenParams, trainableParams, lr, momentum,
                            beta1,    beta2,         adamEps,    weightDecay,  clipNorm,   nesterov,
                            warmupSteps, totalSteps, lossScaleInit, growthInterval};
  options.pipeline.train.ignoreIndex = ignoreIndex;
  return options;
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
  printSummary(**compiled, planPath);
  if (emit == Emit::Cuda)
    return writeCudaProgram((*compiled)->plan, planPath);
  return 0;
}

//===----------------------------------------------------------------------===//
// tec run
//===----------------------------------------------------------------------===//

double percentile(std::vector<double> sorted, double p) {
  if (sorted.empty())
    return 0;
  double rank = p / 100.0 * (sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank)), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

/// Binds `--input name=file` inputs and fills the rest with seeded random data; 0 or an exit code.
int bindInputs(tec::Session &s, const std::vector<std::string> &specs, uint64_t randomSeed, bool quiet = false) {
  std::vector<bool> given(s.inputs().size());
  for (const std::string &spec : specs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    auto it = std::find_if(s.inputs().begin(), s.inputs().end(), [&](const auto &i) { return i.name == name; });
    if (it == s.inputs().end()) {
      llvm::errs() << "error: --input " << spec << ": the plan has no input '" << name << "'\n";
      return kExitBadInput;
    }
    auto tensor = tec::readTensorFile(file.str());
    if (!tensor.ok()) {
      llvm::errs() << "error: " << tensor.error().message() << "\n";
      return kExitBadInput;
    }
    if (tensor->dtype != it->dtype || tensor->shape != it->shape) {
      llvm::errs() << "error: --input " << spec << ": expected " << tec::dtypeName(it->dtype) << "["
                   << shapeString(it->shape) << "], got " << tec::dtypeName(tensor->dtype) << "["
                   << shapeString(tensor->shape) << "]\n";
      return kExitBadInput;
    }
    size_t index = it - s.inputs().begin();
    if (given[index]) {
      llvm::errs() << "error: --input " << spec << ": input '" << name << "' is given twice\n";
      return kExitBadInput;
    }
    if (tec::Status st = s.setInput(index, tensor->bytes.data(), tensor->bytes.size()); !st.ok()) {
      llvm::errs() << "error: " << st.message() << "\n";
      return kExitBadInput;
    }
    given[index] = true;
  }
  std::mt19937_64 rng(randomSeed);
  for (size_t i = 0; i < s.inputs().size(); ++i)
    if (!given[i]) {
      tec::fillRandom(s.inputData(i), s.inputs()[i], rng);
      if (!quiet)
        llvm::outs() << "  input " << s.inputs()[i].name << ": random (seed " << randomSeed << ")\n";
    }
  return 0;
}

/// What the backend ran instead of a faster path, and why (a fused epilogue cuBLASLt lacks, a CUDA graph
/// that could not be captured).
void printNotes(const tec::Session &s) {
  for (const std::string &line : s.notes())
    llvm::outs() << "  note: " << line << "\n";
}

int run() {
  tec::SessionOptions options;
  options.device = device;
  options.allowTf32 = allowTf32;
  options.variant = variantName;
  options.threads = threads;
  auto session = tec::Session::open(runPlan, options);
  if (!session.ok()) {
    llvm::errs() << "error: " << session.error().message() << "\n";
    return kExitBadInput;
  }
  auto &s = **session;
  if (int code = refuseOverwrite("--json", jsonReport, runPlan))
    return code;
  llvm::outs() << "tec run: " << s.selectionReason() << "\n";
  if (s.backendName() == "cpu" && tec::kernels::cpu::blas().loaded)
    llvm::outs() << "  blas: " << tec::kernels::cpu::blas().config << "\n";
  if (int code = bindInputs(s, runInputs, seed); code)
    return code;
  // Bad data found by a run (an index out of range) is the inputs' fault: name them, exit 2.
  auto runFailed = [&](const tec::Status &st) {
    llvm::errs() << "error: " << st.message();
    if (st.isBadData())
      llvm::errs() << " (in the inputs: "
                   << (runInputs.empty() ? "random, seed " + std::to_string(seed) : llvm::join(runInputs, ", ")) << ")";
    llvm::errs() << "\n";
    return st.isBadData() ? kExitBadInput : kExitInternal;
  };
  for (int i = 0; i < warmup; ++i)
    if (tec::Status st = s.run(); !st.ok())
      return runFailed(st);
  std::vector<double> ms, stepMillis(s.variant().steps_size());
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < std::max(1, iterations.getValue()); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (tec::Status st = s.run(profile ? &stepMillis : nullptr); !st.ok())
      return runFailed(st);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double v : ms)
    mean += v / ms.size();
  double median = percentile(sorted, 50), p90 = percentile(sorted, 90), p99 = percentile(sorted, 99);
  llvm::outs() << llvm::formatv("=== Performance summary ({0} iterations, {1} warm-up, variant {2}, backend {3}) ===\n",
                                ms.size(), warmup.getValue(), s.variant().target(), s.backendName());
  llvm::outs() << llvm::formatv("Throughput: {0:f2} qps\n", ms.size() / total);
  llvm::outs() << llvm::formatv(
      "Latency: min = {0:f4} ms, max = {1:f4} ms, mean = {2:f4} ms, median = {3:f4} ms, percentile(90%) = {4:f4} ms, "
      "percentile(99%) = {5:f4} ms\n",
      sorted.front(), sorted.back(), mean, median, p90, p99);
  printNotes(s);
  if (profile)
    printProfile(s.variant(), stepMillis, ms.size(), "run");
  if (!jsonReport.empty()) {
    const std::string json = llvm::formatv("{{\"variant\": \"{0}\", \"backend\": \"{1}\", \"iterations\": {2}, \"threads\": {3}, "
                          "\"throughput_qps\": {4}, \"latency_ms\": {{\"min\": {5}, \"max\": {6}, \"mean\": {7}, "
                          "\"median\": {8}, \"p90\": {9}, \"p99\": {10}}}\n",
                          s.variant().target(), s.backendName(), ms.size(), threads.getValue(), ms.size() / total,
                          sorted.front(), sorted.back(), mean, median, p90, p99).str();
    if (tec::Status st = tec::writeFileAtomically(jsonReport, json); !st.ok()) {
      llvm::errs() << "error: " << st.message() << "\n";
      return kExitBadInput;
    }
  }
  if (!outputDir.empty()) {
    if (auto ec = llvm::sys::fs::create_directories(outputDir)) {
      llvm::errs() << "error: cannot create " << outputDir << ": " << ec.message() << "\n";
      return kExitBadInput;
    }
    for (size_t i = 0; i < s.outputs().size(); ++i) {
      const auto &o = s.outputs()[i];
      llvm::SmallString<256> path(outputDir.getValue());
      llvm::sys::path::append(path, tec::fileNameFor(o.name) + ".npy");
      if (tec::Status st = tec::writeNpy(path.str().str(), o.dtype, o.shape, s.outputData(i), o.bytes); !st.ok()) {
        llvm::errs() << "error: " << st.message() << "\n";
        return kExitBadInput;
      }
      llvm::outs() << "  output " << o.name << " -> " << path << "\n";
    }
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// tec train
//===----------------------------------------------------------------------===//

/// A data set bound to one plan input: its samples and how many bytes one batch takes.
struct Samples {
  size_t input;
  tec::HostTensor data;
  int64_t batchBytes, batches;
  std::string file;
  int64_t sampleBytes;
};


int trainLoop() {
  tec::SessionOptions options;
  options.kind = "train";
  options.device = device;
  options.allowTf32 = allowTf32;
  options.threads = trainThreads;
  options.variant = trainVariant;
  options.fp8Stats = fp8Report || !trainReport.empty(); // the report carries FP8 health too
  if (int code = refuseOverwrite("--report", trainReport, trainPlan))
    return code;
  auto opened = tec::Trainer::open(trainPlan, options);
  if (!opened.ok()) {
    llvm::errs() << "error: " << opened.error().message() << "\n";
    return kExitBadInput;
  }
  tec::Trainer &trainer = **opened;
  tec::Session &s = trainer.session();
  if (batchSize > 0)
    for (const auto &in : s.inputs())
      if (in.shape.empty() || in.shape[0] != batchSize) {
        llvm::errs() << "error: --batch-size " << batchSize << ": the plan's training step takes '" << in.name
                     << "' as " << shapeString(in.shape) << "; recompile with --shape to change the batch\n";
        return kExitBadInput;
      }
  // Bind each data set: --input name=... feeds input `name`, --target out=... feeds `target:out`.
  std::vector<Samples> data;
  auto bindData = [&](const std::string &spec, const std::string &prefix) -> int {
    auto [name, file] = llvm::StringRef(spec).split('=');
    std::string inputName = prefix + name.str();
    auto it = std::find_if(s.inputs().begin(), s.inputs().end(), [&](const auto &i) { return i.name == inputName; });
    if (it == s.inputs().end()) {
      llvm::errs() << "error: " << spec << ": the training step has no input '" << inputName << "'\n";
      return kExitBadInput;
    }
    const size_t index = it - s.inputs().begin();
    if (std::any_of(data.begin(), data.end(), [&](const Samples &d) { return d.input == index; })) {
      llvm::errs() << "error: " << spec << ": '" << inputName << "' is given twice\n";
      return kExitBadInput;
    }
    auto tensor = tec::readTensorFile(file.str());
    if (!tensor.ok()) {
      llvm::errs() << "error: " << tensor.error().message() << "\n";
      return kExitBadInput;
    }
    // Samples are batches of the plan's shape stacked along the first dim.
    const auto &batchShape = it->shape;
    bool fits = tensor->dtype == it->dtype && !batchShape.empty() && tensor->shape.size() == batchShape.size() &&
                std::equal(batchShape.begin() + 1, batchShape.end(), tensor->shape.begin() + 1) &&
                tensor->shape[0] >= batchShape[0];
    if (!fits) {
      llvm::errs() << "error: " << spec << ": expected " << tec::dtypeName(it->dtype) << " samples shaped [N >= "
                   << batchShape[0] << ", " << shapeString(std::vector<int64_t>(batchShape.begin() + 1, batchShape.end()))
                   << "], got " << tec::dtypeName(tensor->dtype) << "[" << shapeString(tensor->shape) << "]\n";
      return kExitBadInput;
    }
    int64_t batches = tensor->shape[0] / batchShape[0];
    // Every data set holds the same samples: a shorter one would silently shorten the others.
    if (!data.empty() && data.front().data.shape[0] != tensor->shape[0]) {
      llvm::errs() << "error: " << spec << ": holds " << tensor->shape[0] << " samples, but " << data.front().file
                   << " holds " << data.front().data.shape[0] << "\n";
      return kExitBadInput;
    }
    data.push_back({static_cast<size_t>(it - s.inputs().begin()), std::move(*tensor), it->bytes, batches, file.str(),
                    it->bytes / batchShape[0]});
    return 0;
  };
  // Distillation: the teacher, compiled here for the CPU, turns seeded random inputs into targets.
  std::unique_ptr<tec::Session> teacher;
  mlir::MLIRContext teacherContext;
  std::string teacherDir;
  if (!teacherModel.empty()) {
    tec::CompileOptions options;
    auto compiled = tec::compileModel(teacherContext, teacherModel, options);
    if (!compiled)
      return reportCompileError(compiled.takeError());
    llvm::SmallString<128> dir;
    llvm::sys::fs::createUniqueDirectory("tec-teacher", dir);
    teacherDir = dir.str().str();
    std::string plan = teacherDir + "/teacher.tecplan";
    if (tec::Status st = tec::writePlanFile(plan, (*compiled)->plan, (*compiled)->data); !st.ok()) {
      llvm::errs() << "error: " << st.message() << "\n";
      return kExitInternal;
    }
    auto teacherSession = tec::Session::open(plan);
    if (!teacherSession.ok()) {
      llvm::errs() << "error: " << teacherSession.error().message() << "\n";
      return kExitInternal;
    }
    teacher = teacherSession.take();
    for (size_t i = 0; i < s.inputs().size(); ++i) {
      const auto &in = s.inputs()[i];
      bool isTarget = llvm::StringRef(in.name).starts_with("target:");
      const auto &list = isTarget ? teacher->outputs() : teacher->inputs();
      std::string want = isTarget ? in.name.substr(7) : in.name;
      auto it = std::find_if(list.begin(), list.end(), [&](const auto &t) { return t.name == want; });
      if (it == list.end() || it->shape != in.shape || it->dtype != in.dtype) {
        llvm::errs() << "error: --teacher " << teacherModel << ": the student's " << (isTarget ? "output" : "input")
                     << " '" << want << "' has no teacher counterpart of the same type and shape\n";
        return kExitBadInput;
      }
    }
  }
  for (const auto &spec : trainInputs)
    if (int code = bindData(spec, ""); code)
      return code;
  for (const auto &spec : trainTargets)
    if (int code = bindData(spec, "target:"); code)
      return code;
  if (teacher && !data.empty()) {
    llvm::errs() << "error: --teacher makes its own inputs and targets; drop --input/--target\n";
    return kExitBadInput;
  }
  if (!teacher && data.size() != s.inputs().size()) {
    llvm::errs() << "error: the training step takes " << s.inputs().size() << " inputs (";
    for (size_t i = 0; i < s.inputs().size(); ++i)
      llvm::errs() << (i ? ", " : "") << s.inputs()[i].name;
    llvm::errs() << "); give each with --input or --target\n";
    return kExitBadInput;
  }
  int64_t batches = teacher ? 1 : data.front().batches;
  for (const auto &d : data)
    batches = std::min(batches, d.batches);
  if (teacher && trainSteps <= 0) {
    llvm::errs() << "error: --teacher needs --steps (the data is generated, there are no epochs)\n";
    return kExitBadInput;
  }
  int64_t steps = trainSteps > 0 ? trainSteps : batches * std::max(1, trainEpochs.getValue());
  int64_t start = 0;
  if (!resumeDir.empty()) {
    auto resumed = trainer.resume(resumeDir);
    if (!resumed.ok()) {
      llvm::errs() << "error: " << resumed.error().message() << "\n";
      return kExitBadInput;
    }
    start = *resumed;
    llvm::outs() << "resumed from " << resumeDir << " at step " << start << "\n";
  }
  if (!checkpointDir.empty())
    if (auto ec = llvm::sys::fs::create_directories(checkpointDir)) {
      llvm::errs() << "error: " << checkpointDir << ": " << ec.message() << "\n";
      return kExitBadInput;
    }
  llvm::outs() << "tec train: " << s.selectionReason() << "\n  ";
  if (teacher)
    llvm::outs() << "distilling " << teacherModel << " on seeded random inputs (seed " << trainSeed << "), ";
  else
    llvm::outs() << batches << " batches of " << s.inputs()[data.front().input].shape[0] << ", ";
  llvm::outs() << steps << " steps\n";
  std::vector<double> losses, stepMs, lossScales;
  std::vector<double> stepMillis(s.variant().steps_size()); // --profile: per plan step, summed
  auto begin = std::chrono::steady_clock::now();
  int64_t reportEvery = std::max<int64_t>(1, (steps - start) / 20);
  for (int64_t step = start; step < steps; ++step) {
    int64_t batch = step % batches; // the order depends on the step alone: resuming replays it exactly
    if (teacher) {
      // Inputs drawn from the seed and the step (so resuming replays them), labelled by the teacher.
      std::mt19937_64 rng(trainSeed * 1000003 + step);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (size_t i = 0; i < s.inputs().size(); ++i) {
        const auto &in = s.inputs()[i];
        if (llvm::StringRef(in.name).starts_with("target:"))
          continue;
        std::vector<float> values(in.bytes / 4);
        for (auto &v : values)
          v = normal(rng);
        auto t = std::find_if(teacher->inputs().begin(), teacher->inputs().end(),
                              [&](const auto &ti) { return ti.name == in.name; });
        (void)s.setInput(i, values.data(), in.bytes);
        (void)teacher->setInput(t - teacher->inputs().begin(), values.data(), in.bytes);
      }
      if (tec::Status st = teacher->run(); !st.ok()) {
        llvm::errs() << "error: the teacher: " << st.message() << "\n";
        return kExitInternal;
      }
      for (size_t i = 0; i < s.inputs().size(); ++i) {
        const auto &in = s.inputs()[i];
        if (!llvm::StringRef(in.name).starts_with("target:"))
          continue;
        auto o = std::find_if(teacher->outputs().begin(), teacher->outputs().end(),
                              [&](const auto &to) { return to.name == in.name.substr(7); });
        (void)s.setInput(i, teacher->outputData(o - teacher->outputs().begin()), in.bytes);
      }
    }
    for (const auto &d : data)
      if (tec::Status st = s.setInput(d.input, d.data.bytes.data() + batch * d.batchBytes, d.batchBytes); !st.ok()) {
        llvm::errs() << "error: " << st.message() << "\n";
        return kExitInternal;
      }
    auto t0 = std::chrono::steady_clock::now();
    auto loss = trainer.step(trainProfile ? &stepMillis : nullptr);
    if (!loss.ok()) {
      const tec::Status &st = loss.error();
      llvm::errs() << "error: step " << step + 1 << ": " << st.message();
      if (st.isBadData()) { // name the samples the step read
        for (const auto &d : data)
          llvm::errs() << llvm::formatv("{0} samples {1}-{2} of {3}", &d == &data.front() ? " (in" : ",",
                                        batch * d.batchBytes / std::max<int64_t>(1, d.sampleBytes),
                                        (batch + 1) * d.batchBytes / std::max<int64_t>(1, d.sampleBytes) - 1, d.file);
        llvm::errs() << (data.empty() ? "" : ")");
      }
      llvm::errs() << "\n";
      return st.isBadData() ? kExitBadInput : kExitInternal;
    }
    stepMs.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    losses.push_back(*loss);
    if (auto scale = trainer.lossScale())
      lossScales.push_back(*scale);
    int64_t done = step + 1 - start;
    if (done % reportEvery == 0 || step + 1 == steps) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      double rate = done / elapsed;
      llvm::outs() << llvm::formatv("  step {0,6}/{1}  loss {2,10:e3}  {3,7:f1} steps/s  ETA {4:f1} s\n", step + 1,
                                    steps, losses.back(), rate, (steps - step - 1) / rate);
    }
    bool checkpointNow = !checkpointDir.empty() &&
                         ((checkpointEvery > 0 && (step + 1) % checkpointEvery == 0) || step + 1 == steps);
    if (checkpointNow)
      if (tec::Status st = trainer.save(checkpointDir); !st.ok()) {
        llvm::errs() << "error: checkpoint: " << st.message() << "\n";
        return kExitBadInput;
      }
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  double meanMs = 0;
  for (double v : stepMs)
    meanMs += v / std::max<size_t>(1, stepMs.size());
  int64_t memory = s.variant().arena_bytes();
  llvm::outs() << llvm::formatv("=== Training summary ===\nsteps {0}, final loss {1:e4}, {2:f3} ms/step, "
                                "{3:f1} steps/s, arena {4}\n",
                                steps - start, losses.empty() ? 0.0 : losses.back(), meanMs,
                                (steps - start) / std::max(total, 1e-9), bytesString(memory));
  if (trainProfile)
    printProfile(s.variant(), stepMillis, stepMs.size(), "training step");
  // FP8 health: per quantized tensor its amax history (recent values), scale, and last step's shares.
  const std::vector<tec::Fp8Health> health = options.fp8Stats ? trainer.fp8Health() : std::vector<tec::Fp8Health>();
  if (fp8Report) {
    llvm::outs() << "=== FP8 health (last step) ===\n"
                 << llvm::formatv("{0,-34} {1,11} {2,11} {3,10} {4,10}\n", "tensor", "amax", "scale", "saturated",
                                  "flushed");
    auto share = [](double x) { return std::isnan(x) ? std::string("-") : llvm::formatv("{0:f3}%", 100 * x).str(); };
    for (const auto &e : health)
      llvm::outs() << llvm::formatv("{0,-34} {1,11:e3} {2,11:e3} {3,10} {4,10}\n", e.tensor, e.amax, e.scale,
                                    share(e.saturated), share(e.flushed));
    if (health.empty())
      llvm::outs() << "(the training step has no FP8 GEMMs: compile with --fp8=all --fp8-emulate, or for an FP8 GPU)\n";
  }
  if (!trainReport.empty()) {
    std::string report;
    llvm::raw_string_ostream json(report);
    json << "{\"variant\": \"" << s.variant().target() << "\", \"first_step\": " << start << ", \"loss\": [";
    // JSON has no NaN or infinity: a non-finite loss is null.
    auto number = [](double v) { return std::isfinite(v) ? llvm::formatv("{0:e9}", v).str() : std::string("null"); };
    for (size_t i = 0; i < losses.size(); ++i)
      json << (i ? ", " : "") << number(losses[i]);
    json << "], \"loss_scale\": [";
    for (size_t i = 0; i < lossScales.size(); ++i)
      json << (i ? ", " : "") << number(lossScales[i]);
    json << "], \"step_ms\": [";
    for (size_t i = 0; i < stepMs.size(); ++i)
      json << (i ? ", " : "") << llvm::formatv("{0:f4}", stepMs[i]);
    const tec::MemoryReport mem = tec::memoryReport(s.variant());
    json << "], \"peak_memory_bytes\": " << memory << ", \"memory\": {\"arena\": " << mem.arena
         << ", \"peak_step\": " << mem.peakStep << ", \"live_at_peak\": " << mem.peakBytes
         << ", \"saved_activations\": " << mem.savedBytes << ", \"bytes_read\": " << mem.readBytes
         << ", \"bytes_written\": " << mem.writtenBytes;
    for (auto [kind, bytes] : mem.atPeak)
      json << ", \"" << tec::kindName(kind) << "\": " << bytes;
    json << "}, \"fp8\": [";
    for (size_t i = 0; i < health.size(); ++i) {
      const auto &e = health[i];
      json << (i ? ", " : "") << "{\"tensor\": \"" << e.tensor << "\", \"amax\": " << llvm::formatv("{0:e6}", e.amax)
           << ", \"scale\": " << llvm::formatv("{0:e6}", e.scale) << ", \"saturated\": " << number(e.saturated)
           << ", \"flushed\": " << number(e.flushed) << ", \"recent_amax\": [";
      for (size_t j = 0; j < e.recentAmax.size(); ++j)
        json << (j ? ", " : "") << llvm::formatv("{0:e6}", e.recentAmax[j]);
      json << "]}";
    }
    json << "]}\n";
    json.flush();
    if (tec::Status st = tec::writeFileAtomically(trainReport, report); !st.ok()) {
      llvm::errs() << "error: " << st.message() << "\n";
      return kExitBadInput;
    }
  }
  printNotes(s);
  if (!teacherDir.empty())
    llvm::sys::fs::remove_directories(teacherDir);
  return 0;
}

//===----------------------------------------------------------------------===//
// tec doctor
//===----------------------------------------------------------------------===//

int doctor() {
  auto report = tec::doctorReport(doctorPlan);
  if (!report.ok()) {
    llvm::errs() << "error: " << report.error().message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << *report;
  return 0;
}

//===----------------------------------------------------------------------===//
// tec export
//===----------------------------------------------------------------------===//

int exportModel() {
  if (int code = refuseOverwrite("-o", exportOutput, exportPlan))
    return code;
  auto exported = tec::exportOnnx(exportPlan, exportCheckpoint, exportOutput);
  if (!exported.ok()) {
    llvm::errs() << "error: " << exported.error().message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << "wrote " << exportOutput << " (" << exported->trained << " params from "
               << (exported->checkpointFolder.empty() ? std::string("no checkpoint") : exported->checkpointFolder)
               << ", the rest from the plan)\n";
  return 0;
}

//===----------------------------------------------------------------------===//
// tec calibrate
//===----------------------------------------------------------------------===//

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

int calibrate() {
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

//===----------------------------------------------------------------------===//
// tec inspect
//===----------------------------------------------------------------------===//

const char *roleName(tec::plan::Role r) {
  switch (r) {
  case tec::plan::INPUT: return "input";
  case tec::plan::OUTPUT: return "output";
  case tec::plan::PARAM: return "param";
  case tec::plan::CONSTANT: return "constant";
  case tec::plan::STATE: return "state";
  default: return "temp";
  }
}

int inspect() {
  auto file = tec::PlanFile::open(inspectPlan);
  if (!file.ok()) {
    llvm::errs() << "error: " << file.error().message() << "\n";
    return kExitBadInput;
  }
  const auto &plan = (*file)->plan();
  if (inspectJson) {
    std::string json;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(plan, &json, opts);
    llvm::outs() << json;
    return 0;
  }
  auto &os = llvm::outs();
  os << "plan " << inspectPlan << ": from " << plan.source_model() << ", format v" << tec::kPlanFormatVersion << ", data "
     << bytesString((*file)->dataSize()) << "\n";
  os << "inputs:  " << llvm::join(plan.input_names(), ", ") << "\n";
  os << "outputs: " << llvm::join(plan.output_names(), ", ") << "\n";
  for (const auto &v : plan.variants()) {
    int64_t params = 0, constants = 0;
    for (const auto &b : v.buffers()) {
      if (b.alias_of() >= 0)
        continue;
      if (b.role() == tec::plan::PARAM)
        params += b.bytes();
      else if (b.role() == tec::plan::CONSTANT)
        constants += b.bytes();
    }
    os << "\nvariant " << v.target() << " (" << v.precision() << "): " << v.steps_size() << " steps, "
       << v.buffers_size() << " buffers\n";
    os << "  memory: arena " << bytesString(v.arena_bytes()) << ", params " << bytesString(params) << ", constants "
       << bytesString(constants) << "\n";
    const tec::MemoryReport report = tec::memoryReport(v);
    os << "  " << memoryLine(report) << "\n";
    os << "  moved per run: " << bytesString(report.readBytes + report.writtenBytes) << " (read "
       << bytesString(report.readBytes) << ", written " << bytesString(report.writtenBytes) << ")\n";
    os << "  steps:\n";
    for (auto [i, st] : llvm::enumerate(v.steps())) {
      std::string ins, outs;
      for (int b : st.inputs())
        ins += (ins.empty() ? "" : ", ") + std::string("%") + std::to_string(b);
      for (int b : st.outputs())
        outs += (outs.empty() ? "" : ", ") + std::string("%") + std::to_string(b);
      os << llvm::formatv("    {0,3}  {1,-14} {2} -> {3}", i, st.kernel(), ins, outs);
      if (!st.source().empty())
        os << "   (" << st.source() << ")";
      os << "\n";
    }
    os << "  buffers:\n";
    for (auto [i, b] : llvm::enumerate(v.buffers())) {
      std::string type = std::string(tec::dtypeName(b.dtype())) + "[" +
                         shapeString(std::vector<int64_t>(b.shape().begin(), b.shape().end())) + "]";
      int64_t offset = b.alias_of() >= 0 ? v.buffers(b.alias_of()).offset() : b.offset();
      os << llvm::formatv("    %{0,-3} {1,-8} {2,-22} offset {3,10}  {4,10}", i, roleName(b.role()), type, offset,
                          bytesString(b.bytes()));
      if (b.alias_of() >= 0)
        os << "  view of %" << b.alias_of();
      if (b.has_init_fill())
        os << "  starts as " << llvm::format("%g", b.init_fill());
      if (b.host_f32())
        os << "  given as f32";
      os << "  " << b.name() << "\n";
    }
  }
  return 0;
}

} // namespace

/// Every option's range, checked before anything runs: a value outside it is a usage error naming the
/// flag. Empty when all hold.
std::string optionError() {
  if (std::string e = tec::compileOptionError(compileOptionsFromFlags()); !e.empty())
    return e;
  const double maxSteps = 2147483647.0;
  for (const std::string &e :
       {tec::optionRangeError("iterations", iterations, 1, 1e9), tec::optionRangeError("warmup", warmup, 0, 1e9),
        tec::optionRangeError("threads", threads, 0, 4096), tec::optionRangeError("threads", trainThreads, 0, 4096),
        tec::optionRangeError("steps", calibrateSteps, 1, 1e9), tec::optionRangeError("steps", trainSteps, 0, maxSteps),
        tec::optionRangeError("epochs", trainEpochs, 0, 1e6),
        tec::optionRangeError("batch-size", batchSize, batchSize.getNumOccurrences() ? 1 : 0, maxSteps),
        tec::optionRangeError("checkpoint-every", checkpointEvery, 0, maxSteps),
        tec::optionChoiceError("device", device, {"auto", "cpu", "cuda"})})
    if (!e.empty())
      return e;
  return "";
}

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(category);
  // A usage error is bad input the user can fix: exit 2, as for a bad file.
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "tec: compile an ONNX model for fast low-precision training and inference\n",
                                   &llvm::errs()))
    return kExitBadInput;
  if (std::string e = optionError(); !e.empty()) {
    llvm::errs() << "error: " << e << "\n";
    return kExitBadInput;
  }
  if (runCommand)
    return run();
  if (inspectCommand)
    return inspect();
  if (calibrateCommand)
    return calibrate();
  if (trainCommand)
    return trainLoop();
  if (exportCommand)
    return exportModel();
  if (doctorCommand)
    return doctor();
  return compile();
}
