// What the subcommands share: exit codes, the option category, printing shapes, bytes and profiles,
// binding inputs from files.
#include "Cli.h"

#include "api/Compile.h"
#include "api/TensorFiles.h"

#include <random>

namespace cl = llvm::cl;

namespace cli {

int refuseOverwrite(const std::string &flag, const std::string &output, const std::string &input) {
  if (output.empty() || !llvm::sys::fs::equivalent(output, input))
    return 0;
  llvm::errs() << "error: " << flag << " " << output << " is the input " << input << "; write it elsewhere\n";
  return kExitBadInput;
}

cl::OptionCategory &category() {
  static cl::OptionCategory options("tec options");
  return options;
}

cl::opt<std::string> device("device", cl::desc("auto, cpu or cuda (cuda: no fallback)"), cl::init("auto"),
                            cl::sub(runSubcommand()), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<bool> allowTf32("tf32", cl::desc("let FP32 GEMMs on the GPU use TF32 tensor cores (10-bit mantissa inputs)"),
                        cl::sub(runSubcommand()), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<bool> strict("strict", cl::desc("any fallback from tec's fast path (GPU unused, cuDNN declined, no FP8 "
                                         "GEMM, an unfused epilogue, no CUDA graph) is an error (also TEC_STRICT=1)"),
                     cl::sub(runSubcommand()), cl::sub(trainSubcommand()), cl::cat(category()));

cl::opt<bool> noFusion("no-fusion", cl::desc("run every step alone: no elementwise chains, GEMM or convolution "
                                           "epilogues or in-place views (the same bits; to compare, or to profile "
                                           "each step)"),
                       cl::sub(runSubcommand()), cl::sub(trainSubcommand()), cl::sub(inspectSubcommand()),
                       cl::cat(category()));

std::string commonFlagsError() { return tec::optionChoiceError("device", device, {"auto", "cpu", "cuda"}); }



void printProfile(const tec::Session &s, const std::vector<double> &stepMillis, size_t runs, const char *per) {
  const tec::plan::Variant &v = s.variant();
  double sum = 0;
  for (double ms : stepMillis)
    sum += ms;
  llvm::outs() << llvm::formatv("=== Profile (mean per {5}) ===\n{0,4}  {1,-14} {2,10} {3,7}  {4}\n", "step", "kernel",
                                "ms", "%", "source", per);
  for (int i = 0; i < v.steps_size(); ++i) {
    const int by = s.computedBy(i); // a fused step's time is its launch's
    const std::string fused = by == i ? "" : llvm::formatv("[in step {0}] ", by).str();
    const std::string kernel = s.chosenKernel(i);
    llvm::outs() << llvm::formatv("{0,4}  {1,-14} {2,10:f4} {3,6:f1}%  {4}{5}{6}\n", i, v.steps(i).kernel(),
                                  stepMillis[i] / std::max<size_t>(runs, 1), sum ? 100 * stepMillis[i] / sum : 0, fused,
                                  v.steps(i).source(), kernel.empty() ? "" : " [" + kernel + "]");
  }
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

int reportApiError(const tec::ApiError &error) {
  llvm::errs() << "error: " << error.message << "\n";
  return error.kind == tec::ErrorKind::Internal ? kExitInternal : kExitBadInput;
}

int bindInputs(tec::Session &s, const std::vector<std::string> &specs, uint64_t randomSeed, bool quiet) {
  std::vector<bool> given(s.inputs().size());
  for (const std::string &spec : specs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    if (name.empty() || file.empty()) {
      llvm::errs() << "error: --input '" << spec << "': expected NAME=FILE\n";
      return kExitBadInput;
    }
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

void printNotes(const tec::Session &s) {
  for (const std::string &line : s.notes())
    llvm::outs() << "  note: " << line << "\n";
}

} // namespace cli
