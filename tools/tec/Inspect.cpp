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

int inspect() {
  auto file = tec::PlanFile::open(inspectPlan);
  if (!file.ok()) {
    llvm::errs() << "error: " << file.error().message() << "\n";
    return kExitBadInput;
  }
  llvm::outs() << (inspectJson ? tec::planMetadataJson((*file)->plan()) : tec::describePlan(**file, inspectPlan));
  return 0;
}

} // namespace cli
