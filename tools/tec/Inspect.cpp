// tec inspect plan.tecplan: a plan's variants, steps, buffers and memory (or its metadata as JSON).
#include "Cli.h"

#include "api/Inspect.h"

#include <google/protobuf/util/json_util.h>

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &inspectSubcommand() {
  static cl::SubCommand sub("inspect", "print a plan's variants, steps, buffers and memory");
  return sub;
}

cl::opt<std::string> inspectPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(inspectSubcommand()), cl::cat(category()));

cl::opt<bool> inspectJson("json", cl::desc("the plan's metadata as JSON"), cl::sub(inspectSubcommand()), cl::cat(category()));

cl::opt<std::string> inspectSchedule("schedule", cl::desc("how this machine's backend runs the variant for TARGET (cpu, "
                                                          "sm_90, ...): each step's launch, or the one it is fused into"),
                                     cl::value_desc("TARGET"), cl::sub(inspectSubcommand()), cl::cat(category()));

int inspect() {
  if (!inspectSchedule.empty()) {
    tec::SessionOptions options;
    options.variant = inspectSchedule;
    options.fusion = !noFusion;
    auto session = tec::Session::open(inspectPlan, options);
    if (!session.ok()) {
      llvm::errs() << "error: " << session.error().message() << "\n";
      return kExitBadInput;
    }
    llvm::outs() << tec::describeSchedule(**session);
    return 0;
  }
  auto file = tec::PlanFile::open(inspectPlan);
  if (!file.ok()) {
    llvm::errs() << "error: " << file.error().message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << (inspectJson ? tec::planMetadataJson((*file)->plan()) : tec::describePlan(**file, inspectPlan));
  return 0;
}

} // namespace cli
