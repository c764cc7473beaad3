// tec export plan.tecplan -o model.onnx: the model with the plan's or a checkpoint's weights.
#include "Cli.h"

#include "api/Export.h"

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &exportSubcommand() {
  static cl::SubCommand sub("export", "write an ONNX model with the plan's (or a checkpoint's trained) weights");
  return sub;
}

cl::opt<std::string> exportPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(exportSubcommand()),
                                cl::cat(category()));

cl::opt<std::string> exportCheckpoint("checkpoint", cl::desc("take trained params from DIR's latest checkpoint"),
                                      cl::value_desc("DIR"), cl::sub(exportSubcommand()), cl::cat(category()));

cl::opt<std::string> exportOutput("o", cl::desc("the ONNX file to write"), cl::value_desc("file"), cl::Required,
                                  cl::sub(exportSubcommand()), cl::cat(category()));

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

} // namespace cli
