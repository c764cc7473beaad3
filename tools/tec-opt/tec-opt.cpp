// mlir-opt for the tec dialect: runs any tec pass (or pipeline) on a .mlir file; drives the lit tests.
#include "api/Opt.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Debug/Counter.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  tec::registerTecOpt(registry);
  // mlir-opt's options, parsed here with an error stream: a bad flag or an unknown pass returns instead of
  // exiting 1. Every failure is the command line's or the input's (a missing or malformed file, IR a pass
  // rejects, diagnostics not as expected): exit 2, as tec does for bad input.
  static llvm::cl::opt<std::string> input(llvm::cl::Positional, llvm::cl::desc("<input file>"), llvm::cl::init("-"));
  static llvm::cl::opt<std::string> output("o", llvm::cl::desc("Output filename"), llvm::cl::value_desc("filename"),
                                           llvm::cl::init("-"));
  mlir::MlirOptMainConfig::registerCLOptions(registry);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::tracing::DebugCounter::registerCLOptions();
  for (int i = 1; i < argc; ++i) // LLVM would read @FILE as arguments, from any file however large
    if (argv[i][0] == '@') {
      llvm::errs() << "error: '" << argv[i] << "': tec-opt reads no response files (@FILE)\n";
      return 2;
    }
  if (!llvm::cl::ParseCommandLineOptions(argc, argv, "tec optimizer driver\n", &llvm::errs()))
    return 2;
  return mlir::failed(mlir::MlirOptMain(argc, argv, input, output, registry)) ? 2 : 0;
}
