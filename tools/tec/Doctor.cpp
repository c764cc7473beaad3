// tec doctor [plan.tecplan]: what this machine runs, and which variant of a plan.
#include "Cli.h"

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &doctorSubcommand() {
  static cl::SubCommand sub("doctor", "what this machine can run: GPU, CUDA libraries, FP8, and a plan's variant");
  return sub;
}

cl::opt<std::string> doctorPlan(cl::Positional, cl::desc("[model.tecplan]"), cl::sub(doctorSubcommand()), cl::cat(category()));

int doctor() {
  auto report = tec::doctorReport(doctorPlan);
  if (!report.ok()) {
    llvm::errs() << "error: " << report.error().message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << *report;
  return 0;
}

} // namespace cli
