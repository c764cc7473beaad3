// tec calibrate plan.tecplan: fill the FP8 amax histories from sample inputs and freeze the scales.
#include "Cli.h"

#include "api/Compile.h"
#include "api/TensorFiles.h"

#include <random>

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &calibrateSubcommand() {
  static cl::SubCommand sub("calibrate", "fill the FP8 amax histories from sample inputs and freeze the scales");
  return sub;
}

cl::opt<std::string> calibratePlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required,
                                   cl::sub(calibrateSubcommand()), cl::cat(category()));

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

std::string calibrateFlagsError() { return tec::optionRangeError("steps", calibrateSteps, 1, 1e9); }

} // namespace cli
