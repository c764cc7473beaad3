// tec: compile an ONNX model into a plan (`tec model.onnx`), run, train, calibrate, inspect and export
// plans, and say what this machine runs (`tec doctor`). Each subcommand has its own file (Cli.h).
#include "Cli.h"

#include "api/Compile.h"

namespace cl = llvm::cl;

namespace {

/// Every option's range, checked before anything runs: a value outside it is a usage error naming the
/// flag. Empty when all hold.
std::string optionError() {
  for (auto check : {cli::compileFlagsError, cli::runFlagsError, cli::calibrateFlagsError, cli::trainFlagsError,
                     cli::commonFlagsError})
    if (std::string e = check(); !e.empty())
      return e;
  return "";
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(cli::category());
  // A usage error is bad input the user can fix: exit 2, as for a bad file.
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "tec: compile an ONNX model for fast low-precision training and inference\n",
                                   &llvm::errs()))
    return cli::kExitBadInput;
  if (std::string e = optionError(); !e.empty()) {
    llvm::errs() << "error: " << e << "\n";
    return cli::kExitBadInput;
  }
  if (cli::runSubcommand())
    return cli::run();
  if (cli::inspectSubcommand())
    return cli::inspect();
  if (cli::calibrateSubcommand())
    return cli::calibrate();
  if (cli::trainSubcommand())
    return cli::trainLoop();
  if (cli::exportSubcommand())
    return cli::exportModel();
  if (cli::doctorSubcommand())
    return cli::doctor();
  return cli::compile();
}
