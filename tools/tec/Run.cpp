// tec run plan.tecplan: run a plan, print a performance summary (trtexec-style), write the outputs.
#include "Cli.h"

#include "api/Checkpoint.h"
#include "api/Compile.h"
#include "api/TensorFiles.h"

#include "llvm/Support/Path.h"

#include <chrono>
#include <cmath>

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &runSubcommand() {
  static cl::SubCommand sub("run", "run a compiled plan and print a performance summary");
  return sub;
}

cl::opt<std::string> runPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(runSubcommand()), cl::cat(category()));

cl::list<std::string> runInputs("input", cl::desc("an input from a .npy or .pb file (repeatable; others are random)"),
                                cl::value_desc("name=file"), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<std::string> outputDir("output-dir", cl::desc("write each output as DIR/<name>.npy"), cl::value_desc("DIR"),
                               cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<int> iterations("iterations", cl::desc("timed runs"), cl::init(10), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<int> warmup("warmup", cl::desc("untimed runs before timing"), cl::init(2), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<int> threads("threads", cl::desc("CPU threads (0: the libraries' default)"), cl::init(0), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<std::string> variantName("variant", cl::desc("run this variant (a target such as cpu)"), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<bool> profile("profile", cl::desc("print each step's mean time (like trtexec --dumpProfile)"),
                      cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<std::string> runCheckpoint("checkpoint",
                                   cl::desc("run with the trained weights of DIR's latest checkpoint (tec train "
                                            "--checkpoint-dir), not the plan's own"),
                                   cl::value_desc("DIR"), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<uint64_t> seed("seed", cl::desc("seed of the random inputs"), cl::init(0), cl::sub(runSubcommand()), cl::cat(category()));

cl::opt<std::string> jsonReport("json", cl::desc("also write the performance summary as JSON"), cl::value_desc("file"),
                                cl::sub(runSubcommand()), cl::cat(category()));

double percentile(std::vector<double> sorted, double p) {
  if (sorted.empty())
    return 0;
  double rank = p / 100.0 * (sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank)), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

/// Where the weights come from, said so that a plan's initial weights are never taken for trained ones.
std::string weightsLine(const tec::plan::Plan &plan, const std::string &checkpointFolder) {
  if (!checkpointFolder.empty())
    return "trained, from " + checkpointFolder;
  for (const auto &v : plan.variants())
    if (v.kind() == "train")
      return "as compiled, untrained (the plan trains: --checkpoint DIR runs a checkpoint's weights)";
  return "as compiled";
}

int run() {
  tec::SessionOptions options;
  options.device = device;
  options.allowTf32 = allowTf32;
  options.strict = strict;
  options.fusion = !noFusion;
  options.variant = variantName;
  options.threads = threads;
  std::string checkpointFolder;
  if (!runCheckpoint.empty())
    options.params = tec::checkpointParams(runCheckpoint, &checkpointFolder);
  auto session = tec::Session::open(runPlan, options);
  if (!session.ok()) {
    llvm::errs() << "error: " << session.error().message() << "\n";
    return kExitBadInput;
  }
  auto &s = **session;
  if (int code = refuseOverwrite("--json", jsonReport, runPlan))
    return code;
  llvm::outs() << "tec run: " << s.selectionReason() << "\n";
  llvm::outs() << "  weights: " << weightsLine(s.plan(), checkpointFolder) << "\n";
  if (const std::string blas = tec::cpuBlasConfig(); s.backendName() == "cpu" && !blas.empty())
    llvm::outs() << "  blas: " << blas << "\n";
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
    printProfile(s, stepMillis, ms.size(), "run");
  if (!jsonReport.empty()) {
    const std::string json = llvm::formatv("{{\"variant\": \"{0}\", \"backend\": \"{1}\", \"iterations\": {2}, \"threads\": {3}, "
                          "\"throughput_qps\": {4:f2}, \"latency_ms\": {{\"min\": {5:f6}, \"max\": {6:f6}, \"mean\": {7:f6}, "
                          "\"median\": {8:f6}, \"p90\": {9:f6}, \"p99\": {10:f6}}}\n",
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

std::string runFlagsError() {
  for (const std::string &e : {tec::optionRangeError("iterations", iterations, 1, 1e9),
                               tec::optionRangeError("warmup", warmup, 0, 1e9),
                               tec::optionRangeError("threads", threads, 0, 4096)})
    if (!e.empty())
      return e;
  return "";
}

} // namespace cli
