// tec train plan.tecplan: train over a data set (or distil a teacher), with checkpoints and reports.
#include "Cli.h"

#include "api/Checkpoint.h"
#include "api/Compile.h"
#include "api/TensorFiles.h"
#include "api/Runtime.h"
#include "api/Trainer.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <random>

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &trainSubcommand() {
  static cl::SubCommand sub("train", "train: run the plan's training step over a data set");
  return sub;
}

cl::opt<std::string> trainPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(trainSubcommand()),
                               cl::cat(category()));

cl::list<std::string> trainInputs("input", cl::desc("a model input's samples, .npy with a leading sample dim"),
                                  cl::value_desc("name=file.npy"), cl::sub(trainSubcommand()), cl::cat(category()));

cl::list<std::string> trainTargets("target", cl::desc("an output's target samples, .npy with a leading sample dim"),
                                   cl::value_desc("output=file.npy"), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<int> trainSteps("steps", cl::desc("training steps (default: one epoch)"), cl::init(0), cl::sub(trainSubcommand()),
                        cl::cat(category()));

cl::opt<int> trainEpochs("epochs", cl::desc("passes over the data set"), cl::init(0), cl::sub(trainSubcommand()),
                         cl::cat(category()));

cl::opt<int> batchSize("batch-size", cl::desc("samples per step; must be the model's batch (fix it with --shape "
                                             "when compiling)"),
                        cl::init(0), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<std::string> trainVariant("variant", cl::desc("train with this variant (a target such as sm_75)"),
                                  cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<int> trainThreads("threads", cl::desc("CPU threads"), cl::init(0), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<bool> trainProfile("profile", cl::desc("print each plan step's mean time per training step"),
                           cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<std::string> checkpointDir("checkpoint-dir", cl::desc("write checkpoints here (atomically)"),
                                   cl::value_desc("DIR"), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<int> checkpointEvery("checkpoint-every", cl::desc("steps between checkpoints (0: only at the end)"),
                             cl::init(0), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<std::string> resumeDir("resume", cl::desc("continue from the latest checkpoint in DIR"), cl::value_desc("DIR"),
                               cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<bool> continueNonFinite("continue-on-nonfinite",
                                cl::desc("keep training after a step whose loss is NaN or infinite (by default "
                                         "training stops there; plans with loss scaling skip such steps anyway)"),
                                cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<std::string> teacherModel("teacher",
                                  cl::desc("distill: the targets are this ONNX model's outputs on seeded random inputs"),
                                  cl::value_desc("teacher.onnx"), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<uint64_t> trainSeed("seed", cl::desc("seed of the random inputs when distilling"), cl::init(0),
                            cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<bool> fp8Report("fp8-report", cl::desc("FP8 health per quantized tensor: amax history, scale, and the share "
                                              "of values that saturated or flushed to zero in the last step"),
                        cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<double> collectiveTimeout("collective-timeout",
                                  cl::desc("under mpirun: seconds a collective waits for every rank before this one "
                                           "stops with an error (a rank that hung or died; 0: forever)"),
                                  cl::value_desc("seconds"), cl::init(300.0), cl::sub(trainSubcommand()),
                                  cl::cat(category()));

cl::opt<std::string> trainReport("report", cl::desc("write loss per step, step times and memory as JSON"),
                                 cl::value_desc("file"), cl::sub(trainSubcommand()), cl::cat(category()));

/// A data set bound to one plan input: its samples and how many bytes one batch takes.
struct Samples {
  size_t input;
  tec::HostTensor data;
  int64_t batchBytes, batches;
  std::string file;
  int64_t sampleBytes;
};

namespace {

void printError(const std::string &message) { llvm::errs() << "error: " << message << "\n"; }

/// Binds one data set: `--input name=FILE` feeds input `name`, `--target out=FILE` (prefix "target:") feeds
/// `target:out`. Samples are batches of the plan's shape stacked along the first dim, as many in every set.
int bindData(const std::string &spec, const std::string &prefix, tec::Trainer &trainer, std::vector<Samples> &data) {
  const tec::Session &s = trainer.session();
  auto [name, file] = llvm::StringRef(spec).split('=');
  if (name.empty() || file.empty()) {
    llvm::errs() << "error: --" << (prefix.empty() ? "input" : "target") << " '" << spec << "': expected NAME=FILE\n";
    return kExitBadInput;
  }
  std::string inputName = prefix + name.str();
  auto it = std::find_if(s.inputs().begin(), s.inputs().end(), [&](const auto &i) { return i.name == inputName; });
  if (it == s.inputs().end()) {
    printError(spec + ": the training step has no input '" + inputName + "'");
    return kExitBadInput;
  }
  const size_t index = it - s.inputs().begin();
  if (!trainer.bindsInput(index)) {
    printError(spec + ": '" + inputName + "' is set by tec train from the --target flags");
    return kExitBadInput;
  }
  if (std::any_of(data.begin(), data.end(), [&](const Samples &d) { return d.input == index; })) {
    printError(spec + ": '" + inputName + "' is given twice");
    return kExitBadInput;
  }
  auto tensor = tec::readTensorFile(file.str());
  if (!tensor.ok()) {
    printError(tensor.error().message());
    return kExitBadInput;
  }
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
  data.push_back({index, std::move(*tensor), it->bytes, batches, file.str(), it->bytes / batchShape[0]});
  return 0;
}

/// Distillation's teacher: the ONNX model compiled here for the CPU (into a temporary folder that goes with
/// it), which labels seeded random inputs with its outputs.
class Teacher {
public:
  ~Teacher() {
    if (!folder.empty())
      llvm::sys::fs::remove_directories(folder);
  }
  /// Compiles `model` for the cpu, its dynamic dims bound to the student's input shapes, and checks that it
  /// has a counterpart of each student input and target; an exit code on failure.
  int open(const std::string &model, tec::Trainer &trainer) {
    llvm::SmallString<128> dir;
    llvm::sys::fs::createUniqueDirectory("tec-teacher", dir);
    folder = dir.str().str();
    std::string plan = folder + "/teacher.tecplan";
    tec::CompileOptions options;
    options.targets = {"cpu"};
    std::optional<tec::ApiError> error = tec::compileToPlanFile(model, options, plan);
    if (error) { // a teacher with dynamic dims (a symbolic batch): at the student's shapes
      for (size_t i = 0; i < trainer.session().inputs().size(); ++i) {
        const auto &in = trainer.session().inputs()[i];
        if (trainer.bindsInput(i) && !llvm::StringRef(in.name).starts_with(tec::kTargetPrefix))
          options.import.shapes[in.name] = llvm::SmallVector<int64_t>(in.shape.begin(), in.shape.end());
      }
      error = tec::compileToPlanFile(model, options, plan);
    }
    if (error)
      return reportApiError(*error);
    auto opened = tec::Session::open(plan);
    if (!opened.ok()) {
      printError(opened.error().message());
      return kExitInternal;
    }
    session = opened.take();
    const tec::Session &s = trainer.session();
    for (size_t i = 0; i < s.inputs().size(); ++i) {
      const auto &in = s.inputs()[i];
      if (!trainer.bindsInput(i))
        continue;
      bool isTarget = llvm::StringRef(in.name).starts_with(tec::kTargetPrefix);
      const auto &list = isTarget ? session->outputs() : session->inputs();
      std::string want = isTarget ? in.name.substr(tec::kTargetPrefix.size()) : in.name;
      auto it = std::find_if(list.begin(), list.end(), [&](const auto &t) { return t.name == want; });
      if (it == list.end() || it->shape != in.shape || it->dtype != in.dtype) {
        llvm::errs() << "error: --teacher " << model << ": the student's " << (isTarget ? "output" : "input") << " '"
                     << want << "' has no teacher counterpart of the same type and shape\n";
        return kExitBadInput;
      }
    }
    return 0;
  }
  /// The student's inputs for `step`, drawn from the seed and the step (so resuming replays them), and its
  /// targets, the teacher's outputs on them. Under mpirun each input of the step is drawn for the global
  /// batch (`ranks` local ones, in the order one process with the global batch draws them) and rank `rank`
  /// takes its slice: the ranks see what that one process would.
  int label(int64_t step, tec::Trainer &trainer, int rank, int ranks) {
    tec::Session &s = trainer.session();
    std::mt19937_64 rng(trainSeed * 1000003 + step);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < s.inputs().size(); ++i) {
      const auto &in = s.inputs()[i];
      if (llvm::StringRef(in.name).starts_with(tec::kTargetPrefix) || !trainer.bindsInput(i))
        continue;
      std::vector<float> values(in.bytes / 4 * ranks);
      for (auto &v : values)
        v = normal(rng);
      const float *local = values.data() + in.bytes / 4 * rank;
      auto t = std::find_if(session->inputs().begin(), session->inputs().end(),
                            [&](const auto &ti) { return ti.name == in.name; });
      (void)s.setInput(i, local, in.bytes);
      (void)session->setInput(t - session->inputs().begin(), local, in.bytes);
    }
    if (tec::Status st = session->run(); !st.ok()) {
      printError("the teacher: " + st.message());
      return kExitInternal;
    }
    for (size_t i = 0; i < s.inputs().size(); ++i) {
      const auto &in = s.inputs()[i];
      if (!llvm::StringRef(in.name).starts_with(tec::kTargetPrefix))
        continue;
      auto o = std::find_if(session->outputs().begin(), session->outputs().end(), [&](const auto &to) {
        return to.name == in.name.substr(tec::kTargetPrefix.size());
      });
      (void)s.setInput(i, session->outputData(o - session->outputs().begin()), in.bytes);
    }
    return 0;
  }

private:
  std::unique_ptr<tec::Session> session;
  std::string folder;
};

/// Every model input is given, and a target for each output trained on (those given: multi-output models);
/// the trainer is told which.
int checkCoverage(tec::Trainer &trainer, const std::vector<Samples> &data, bool distilling) {
  const tec::Session &s = trainer.session();
  std::vector<std::string> targeted, missing;
  for (const auto &d : data)
    if (llvm::StringRef(s.inputs()[d.input].name).starts_with(tec::kTargetPrefix))
      targeted.push_back(s.inputs()[d.input].name.substr(tec::kTargetPrefix.size()));
  for (size_t i = 0; i < s.inputs().size(); ++i) {
    const bool given = std::any_of(data.begin(), data.end(), [&](const Samples &d) { return d.input == i; });
    if (!given && trainer.bindsInput(i) && !llvm::StringRef(s.inputs()[i].name).starts_with(tec::kTargetPrefix))
      missing.push_back(s.inputs()[i].name);
  }
  if (distilling)
    return 0;
  if (!missing.empty() || targeted.empty()) {
    llvm::errs() << "error: the training step needs " << (missing.empty() ? "a target" : "inputs " + llvm::join(missing, ", "))
                 << " (it takes: ";
    for (size_t i = 0, shown = 0; i < s.inputs().size(); ++i)
      if (trainer.bindsInput(i))
        llvm::errs() << (shown++ ? ", " : "") << s.inputs()[i].name;
    llvm::errs() << "); give each input with --input and the outputs to train on with --target\n";
    return kExitBadInput;
  }
  if (tec::Status st = trainer.trainOn(targeted); !st.ok()) {
    printError(st.message());
    return kExitBadInput;
  }
  return 0;
}

/// What a run measured, step by step.
struct RunRecord {
  int64_t start = 0;     // the first step (after --resume)
  int64_t stoppedAt = 0; // the step whose non-finite loss stopped training, if one did
  std::vector<double> losses, stepMs, lossScales;
  std::vector<double> stepMillis; // --profile: per plan step, summed
  double seconds = 0;
};

/// Steps start..steps-1: feed each batch (or the teacher's labels), step, report, checkpoint.
int runSteps(tec::Trainer &trainer, const std::vector<Samples> &data, Teacher *teacher, int64_t batches,
             int64_t steps, RunRecord &run, const tec::ProcessGroup &group) {
  tec::Session &s = trainer.session();
  run.stepMillis.assign(s.variant().steps_size(), 0.0);
  auto begin = std::chrono::steady_clock::now();
  int64_t reportEvery = std::max<int64_t>(1, (steps - run.start) / 20);
  std::string lastCheckpoint; // DIR/step-N, once one is written
  for (int64_t step = run.start; step < steps; ++step) {
    // The order depends on the step alone: resuming replays it exactly. With several ranks a step's global
    // batch is `size` consecutive local batches, rank r taking the r-th (the samples one process with the
    // global batch would read, in the same order).
    int64_t batch = step % batches * group.size() + group.rank();
    if (teacher)
      if (int code = teacher->label(step, trainer, group.rank(), group.size()))
        return code;
    for (const auto &d : data)
      if (tec::Status st = s.setInput(d.input, d.data.bytes.data() + batch * d.batchBytes, d.batchBytes); !st.ok()) {
        printError(st.message());
        return kExitInternal;
      }
    auto t0 = std::chrono::steady_clock::now();
    auto loss = trainer.step(trainProfile ? &run.stepMillis : nullptr);
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
    run.stepMs.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    run.losses.push_back(*loss);
    const std::optional<float> scale = trainer.lossScale();
    if (scale)
      run.lossScales.push_back(*scale);
    // A non-finite loss without loss scaling (which skips the step) has most likely made the weights
    // non-finite too: stop before anything else is built on them or saved.
    if (!std::isfinite(*loss) && !scale && !continueNonFinite) {
      llvm::errs() << llvm::formatv("error: step {0}: the loss is {1}; training stops (the weights this step "
                                    "updated are likely not finite either{2}; --continue-on-nonfinite goes on)\n",
                                    step + 1, *loss,
                                    lastCheckpoint.empty() ? std::string() : "; the last checkpoint is " + lastCheckpoint);
      run.stoppedAt = step + 1;
      break;
    }
    int64_t done = step + 1 - run.start;
    if (done % reportEvery == 0 || step + 1 == steps) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      double rate = done / elapsed;
      llvm::outs() << llvm::formatv("  step {0,6}/{1}  loss {2,10:e3}  {3,7:f1} steps/s  ETA {4:f1} s\n", step + 1,
                                    steps, run.losses.back(), rate, (steps - step - 1) / rate);
    }
    // Every rank saves (a sharded optimizer state is gathered); rank 0 writes the group's checkpoint.
    bool checkpointNow = !checkpointDir.empty() &&
                         ((checkpointEvery > 0 && (step + 1) % checkpointEvery == 0) || step + 1 == steps);
    if (checkpointNow) {
      if (tec::Status st = trainer.save(checkpointDir); !st.ok()) {
        printError("checkpoint: " + st.message());
        return kExitBadInput;
      }
      lastCheckpoint = checkpointDir + "/step-" + std::to_string(trainer.steps());
      llvm::outs() << "  checkpoint " << lastCheckpoint << "\n";
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return 0;
}

void printFp8Health(const std::vector<tec::Fp8Health> &health) {
  llvm::outs() << "=== FP8 health (last step) ===\n"
               << llvm::formatv("{0,-34} {1,11} {2,11} {3,10} {4,10}\n", "tensor", "amax", "scale", "saturated",
                                "flushed");
  auto share = [](double x) { return std::isnan(x) ? std::string("-") : llvm::formatv("{0:f3}%", 100 * x).str(); };
  auto value = [](float x) { return std::isnan(x) ? std::string("-") : llvm::formatv("{0:e3}", x).str(); };
  for (const auto &e : health) {
    llvm::outs() << llvm::formatv("{0,-34} {1,11} {2,11} {3,10} {4,10}", e.tensor, value(e.amax), value(e.scale),
                                  share(e.saturated), share(e.flushed));
    if (e.blocks) // the spread of a block-scaled tensor's scales
      llvm::outs() << llvm::formatv("  {0} blocks, scale_inv {1:e2} .. {2:e2}", e.blocks, e.smallestScaleInv,
                                    e.largestScaleInv);
    llvm::outs() << "\n";
  }
  if (health.empty())
    llvm::outs() << "(the training step has no FP8 GEMMs: compile with --fp8=all --fp8-emulate, or for an FP8 GPU)\n";
}

/// --report: the losses, loss scales and step times, the memory and the FP8 health, as JSON (atomically).
int writeReport(const tec::Session &s, const RunRecord &run, const std::vector<tec::Fp8Health> &health) {
  std::string report;
  llvm::raw_string_ostream json(report);
  json << "{\"variant\": \"" << s.variant().target() << "\", \"first_step\": " << run.start << ", \"loss\": [";
  // JSON has no NaN or infinity: a non-finite loss is null.
  auto number = [](double v) { return std::isfinite(v) ? llvm::formatv("{0:e9}", v).str() : std::string("null"); };
  for (size_t i = 0; i < run.losses.size(); ++i)
    json << (i ? ", " : "") << number(run.losses[i]);
  json << "], \"loss_scale\": [";
  for (size_t i = 0; i < run.lossScales.size(); ++i)
    json << (i ? ", " : "") << number(run.lossScales[i]);
  json << "], \"step_ms\": [";
  for (size_t i = 0; i < run.stepMs.size(); ++i)
    json << (i ? ", " : "") << llvm::formatv("{0:f4}", run.stepMs[i]);
  const tec::MemoryReport mem = tec::memoryReport(s.variant());
  json << "], \"peak_memory_bytes\": " << s.variant().arena_bytes() << ", \"memory\": {\"arena\": " << mem.arena
       << ", \"peak_step\": " << mem.peakStep << ", \"live_at_peak\": " << mem.peakBytes
       << ", \"saved_activations\": " << mem.savedBytes << ", \"bytes_read\": " << mem.readBytes
       << ", \"bytes_written\": " << mem.writtenBytes;
  for (auto [kind, bytes] : mem.atPeak)
    json << ", \"" << tec::kindName(kind) << "\": " << bytes;
  json << "}, \"fp8\": [";
  for (size_t i = 0; i < health.size(); ++i) {
    const auto &e = health[i];
    json << (i ? ", " : "") << "{\"tensor\": \"" << e.tensor << "\", \"amax\": " << number(e.amax)
         << ", \"scale\": " << number(e.scale) << ", \"saturated\": " << number(e.saturated)
         << ", \"flushed\": " << number(e.flushed);
    if (e.blocks)
      json << ", \"blocks\": " << e.blocks << ", \"scale_inv_min\": " << number(e.smallestScaleInv)
           << ", \"scale_inv_max\": " << number(e.largestScaleInv);
    json << ", \"recent_amax\": [";
    for (size_t j = 0; j < e.recentAmax.size(); ++j)
      json << (j ? ", " : "") << llvm::formatv("{0:e6}", e.recentAmax[j]);
    json << "]}";
  }
  json << "]}\n";
  json.flush();
  if (tec::Status st = tec::writeFileAtomically(trainReport, report); !st.ok()) {
    printError(st.message());
    return kExitBadInput;
  }
  return 0;
}

/// Every rank must train the same plan the same way: a fingerprint of the plan file and the flags that shape
/// the run, compared with rank 0's. Every rank learns whether any differs (a rank that left alone would leave
/// the others waiting in the first collective), and each that differs says so; exit 2 on all of them.
int checkRanksAgree(tec::ProcessGroup &group, const tec::Session &s, int64_t batches) {
  if (group.size() == 1)
    return 0;
  // The file as mapped, hashed in place (a plan of GiBs of parameters is not copied for it).
  auto file = llvm::MemoryBuffer::getFile(trainPlan.getValue(), /*IsText=*/false, /*RequiresNullTerminator=*/false);
  const uint64_t plan = file ? llvm::xxh3_64bits(llvm::arrayRefFromStringRef((*file)->getBuffer())) : 0;
  const std::string flags = llvm::formatv("{0} {1} {2} {3} {4} {5} {6} {7}", s.variant().target(), trainSteps.getValue(),
                                          trainEpochs.getValue(), batches, resumeDir.getValue(), noFusion.getValue(),
                                          checkpointEvery.getValue(), trainInputs.size() + trainTargets.size())
                                .str();
  uint64_t mine[2] = {plan, llvm::xxh3_64bits(llvm::arrayRefFromStringRef(flags))};
  uint64_t first[2] = {mine[0], mine[1]};
  if (tec::Status st = group.broadcast(first, sizeof(first), 0); !st.ok()) {
    printError(st.message());
    return kExitInternal;
  }
  float differs = mine[0] != first[0] || mine[1] != first[1];
  if (tec::Status st = group.allReduce(&differs, 1, tec::CollectiveOp::Max); !st.ok()) {
    printError(st.message());
    return kExitInternal;
  }
  if (differs == 0)
    return 0;
  if (mine[0] != first[0])
    printError(llvm::formatv("rank {0}: {1} differs from rank 0's plan: every rank must train the same plan",
                             group.rank(), trainPlan.getValue()).str());
  else if (mine[1] != first[1])
    printError(llvm::formatv("rank {0}: its flags or data differ from rank 0's (variant, --steps, --epochs, "
                             "batches, --resume, --no-fusion, --checkpoint-every, inputs): {1}",
                             group.rank(), flags).str());
  else
    printError(llvm::formatv("rank {0}: another rank's plan or flags differ from rank 0's", group.rank()).str());
  return kExitBadInput;
}

/// After training on several ranks: the same state on every one, bit for bit (params, moments, FP8 scales,
/// the step), by a checksum compared with rank 0's; exit 1 naming the ranks that differ (a bug of tec's).
int checkRanksHoldTheSameState(tec::ProcessGroup &group, tec::Trainer &trainer) {
  if (group.size() == 1)
    return 0;
  auto mine = trainer.stateChecksum();
  if (!mine.ok()) {
    printError(mine.error().message());
    return kExitInternal;
  }
  uint64_t first = *mine;
  float differs = 0;
  tec::Status st = group.broadcast(&first, sizeof(first), 0);
  if (st.ok())
    differs = first != *mine, st = group.allReduce(&differs, 1, tec::CollectiveOp::Sum);
  if (!st.ok()) {
    printError(st.message());
    return kExitInternal;
  }
  if (first != *mine)
    printError(llvm::formatv("rank {0}: its training state differs from rank 0's after the last step", group.rank()).str());
  if (differs != 0)
    return kExitInternal;
  llvm::outs() << llvm::formatv("  the same state on all {0} ranks (checksum {1:x16})\n", group.size(), first);
  return 0;
}

} // namespace

int trainLoop() {
  tec::SessionOptions options;
  options.kind = "train";
  options.device = device;
  options.allowTf32 = allowTf32;
  options.strict = strict;
  options.fusion = !noFusion;
  options.threads = trainThreads;
  options.variant = trainVariant;
  options.fp8Stats = fp8Report || !trainReport.empty(); // the report carries FP8 health too
  auto joined = tec::ProcessGroup::get();
  if (!joined.ok()) {
    printError(joined.error().message());
    return kExitBadInput;
  }
  tec::ProcessGroup &group = **joined;
  group.setTimeout(collectiveTimeout);
  // Only rank 0 speaks, writes the report and checkpoints: the ranks hold the same weights (errors still
  // come from every rank, on stderr).
  if (group.rank() != 0) {
    trainReport.setValue("");
    if (int null = open("/dev/null", O_WRONLY); null >= 0)
      dup2(null, STDOUT_FILENO), close(null);
  }
  if (int code = refuseOverwrite("--report", trainReport, trainPlan))
    return code;
  auto opened = tec::Trainer::open(trainPlan, options);
  if (!opened.ok()) {
    printError(opened.error().message());
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
  std::unique_ptr<Teacher> teacher;
  if (!teacherModel.empty()) {
    teacher = std::make_unique<Teacher>();
    if (int code = teacher->open(teacherModel, trainer))
      return code;
  }
  std::vector<Samples> data;
  for (const auto &spec : trainInputs)
    if (int code = bindData(spec, "", trainer, data))
      return code;
  for (const auto &spec : trainTargets)
    if (int code = bindData(spec, tec::kTargetPrefix.str(), trainer, data))
      return code;
  if (teacher && !data.empty()) {
    printError("--teacher makes its own inputs and targets; drop --input/--target");
    return kExitBadInput;
  }
  if (int code = checkCoverage(trainer, data, teacher != nullptr))
    return code;
  int64_t batches = teacher ? 1 : data.front().batches;
  for (const auto &d : data)
    batches = std::min(batches, d.batches);
  if (group.size() > 1 && !teacher) {
    batches /= group.size(); // global batches: one local batch per rank each
    if (batches == 0) {
      printError(llvm::formatv("the data holds fewer samples than one global batch ({0} ranks x {1})", group.size(),
                               s.inputs()[data.front().input].shape[0])
                     .str());
      return kExitBadInput;
    }
  }
  if (int code = checkRanksAgree(group, s, batches))
    return code;
  if (teacher && trainSteps <= 0) {
    printError("--teacher needs --steps (the data is generated, there are no epochs)");
    return kExitBadInput;
  }
  int64_t steps = trainSteps > 0 ? trainSteps : batches * std::max(1, trainEpochs.getValue());
  RunRecord run;
  if (!resumeDir.empty()) {
    auto resumed = trainer.resume(resumeDir);
    if (!resumed.ok()) {
      printError(resumed.error().message());
      return kExitBadInput;
    }
    run.start = *resumed;
    llvm::outs() << "resumed from " << resumeDir << " at step " << run.start << "\n";
  }
  if (!checkpointDir.empty() && group.rank() == 0) // taken for the whole run, before its first step
    if (tec::Status st = trainer.holdCheckpointDir(checkpointDir); !st.ok()) {
      printError(st.message());
      return kExitBadInput;
    }
  llvm::outs() << "tec train: " << s.selectionReason() << "\n  ";
  if (teacher)
    llvm::outs() << "distilling " << teacherModel << " on seeded random inputs (seed " << trainSeed << "), ";
  else
    llvm::outs() << batches << " batches of " << s.inputs()[data.front().input].shape[0] * group.size() << ", ";
  llvm::outs() << steps << " steps";
  if (group.size() > 1) {
    // The samples of a rank's batch: the first input's leading dim (the data's, or the generated one's).
    int64_t samples = 0;
    for (size_t i = 0; i < s.inputs().size() && !samples; ++i)
      if (trainer.bindsInput(i) && !s.inputs()[i].shape.empty())
        samples = s.inputs()[i].shape[0];
    llvm::outs() << ", data parallel over " << group.size() << " ranks (" << samples << " samples each; "
                 << group.description() << ")";
  }
  if (trainer.accumulation() > 1)
    llvm::outs() << ", an optimizer update every " << trainer.accumulation() << " (gradient accumulation)";
  llvm::outs() << "\n";
  if (trainer.trainedOutputs().size() < trainer.outputs().size()) { // the outputs without a --target
    std::vector<std::string> ignored;
    for (const auto &o : trainer.outputs())
      if (!llvm::is_contained(trainer.trainedOutputs(), o))
        ignored.push_back(o);
    llvm::outs() << "  loss on " << llvm::join(trainer.trainedOutputs(), ", ") << "; ignoring " << llvm::join(ignored, ", ")
                 << " (no --target)\n";
  }
  if (int code = runSteps(trainer, data, teacher.get(), batches, steps, run, group))
    return code;
  if (int code = checkRanksHoldTheSameState(group, trainer))
    return code;
  double meanMs = 0;
  for (double v : run.stepMs)
    meanMs += v / std::max<size_t>(1, run.stepMs.size());
  llvm::outs() << llvm::formatv("=== Training summary ===\nsteps {0}, final loss {1:e4}, {2:f3} ms/step, "
                                "{3:f1} steps/s, arena {4}\n",
                                run.losses.size(), run.losses.empty() ? 0.0 : run.losses.back(), meanMs,
                                run.losses.size() / std::max(run.seconds, 1e-9), bytesString(s.variant().arena_bytes()));
  if (std::string perRank = tec::perRankLine(s.variant()); !perRank.empty())
    llvm::outs() << perRank << "\n";
  if (int64_t waiting = trainer.steps() % trainer.accumulation(); waiting > 0)
    llvm::outs() << "the last " << waiting << " steps' gradients wait for the next update (accumulated"
                 << (checkpointDir.empty() ? ", and lost with this run: no --checkpoint-dir" : ", in the checkpoint")
                 << ")\n";
  if (trainProfile)
    printProfile(s, run.stepMillis, run.stepMs.size(), "training step");
  // FP8 health: per quantized tensor its amax history (recent values), scale, and last step's shares.
  const std::vector<tec::Fp8Health> health = options.fp8Stats ? trainer.fp8Health() : std::vector<tec::Fp8Health>();
  if (fp8Report)
    printFp8Health(health);
  if (!trainReport.empty())
    if (int code = writeReport(s, run, health))
      return code;
  printNotes(s);
  return run.stoppedAt ? kExitBadInput : 0;
}

std::string trainFlagsError() {
  const double maxSteps = 2147483647.0;
  for (const std::string &e :
       {tec::optionRangeError("threads", trainThreads, 0, 4096), tec::optionRangeError("steps", trainSteps, 0, maxSteps),
        tec::optionRangeError("epochs", trainEpochs, 0, 1e6),
        tec::optionRangeError("batch-size", batchSize, batchSize.getNumOccurrences() ? 1 : 0, maxSteps),
        tec::optionRangeError("checkpoint-every", checkpointEvery, 0, maxSteps),
        tec::optionRangeError("collective-timeout", collectiveTimeout, 0, 1e7)})
    if (!e.empty())
      return e;
  return "";
}

} // namespace cli
