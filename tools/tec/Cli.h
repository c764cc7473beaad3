// The tec CLI: one file per subcommand over api/ (Compile.cpp: `tec model.onnx`, Run.cpp, Train.cpp,
// Calibrate.cpp, Inspect.cpp, Export.cpp, Doctor.cpp), what they share in Common.cpp, main in tec.cpp.
#ifndef TEC_TOOLS_TEC_CLI_H
#define TEC_TOOLS_TEC_CLI_H

#include "api/Compile.h"
#include "api/Inspect.h"
#include "api/Runtime.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace cli {

/// Exit codes: bad input (model, plan, flags) is 2, a failure inside tec is 1.
constexpr int kExitBadInput = 2, kExitInternal = 1;

/// The options `tec --help` lists (every subcommand's).
llvm::cl::OptionCategory &category();
/// Each subcommand; the options without one are `tec model.onnx`'s.
llvm::cl::SubCommand &runSubcommand();
llvm::cl::SubCommand &trainSubcommand();
llvm::cl::SubCommand &calibrateSubcommand();
llvm::cl::SubCommand &inspectSubcommand();
llvm::cl::SubCommand &exportSubcommand();
llvm::cl::SubCommand &doctorSubcommand();

/// `--device`, `--tf32` and `--strict`, which run and train share; `--no-fusion`, theirs and inspect's.
extern llvm::cl::opt<std::string> device;
extern llvm::cl::opt<bool> allowTf32;
extern llvm::cl::opt<bool> strict;
extern llvm::cl::opt<bool> noFusion;

/// The whole command line (tec.cpp): parses argv, checks every option's range, runs the subcommand; the exit
/// code. Callable more than once in a process (the CLI fuzz target) after llvm::cl::ResetAllOptionOccurrences.
int tecMain(int argc, char **argv);

/// Each subcommand's entry point: 0 or an exit code.
int compile();
int run();
int trainLoop();
int calibrate();
int inspect();
int exportModel();
int doctor();

/// The first of a subcommand's options outside its range (the message names the flag), or empty.
std::string compileFlagsError();
std::string runFlagsError();
std::string trainFlagsError();
std::string calibrateFlagsError();
std::string commonFlagsError();

/// Refuses an output that is one of the command's inputs (by any path): writing it would destroy the
/// user's file. 0 or the exit code.
int refuseOverwrite(const std::string &flag, const std::string &output, const std::string &input);
/// --shape and --freeze-input into `options` (`tec model.onnx`'s; `tec calibrate model.onnx` takes --shape).
llvm::Error parseInputOptions(tec::ImportOptions &options);
using tec::bytesString;
using tec::memoryLine;
using tec::shapeString;
/// Each plan step's mean time over `runs` (summed in `stepMillis`), as trtexec --dumpProfile.
void printProfile(const tec::Session &s, const std::vector<double> &stepMillis, size_t runs, const char *per);
/// Prints a failed compile's message; the exit code (2 for a bad model, 1 for tec's own failure).
int reportCompileError(llvm::Error err);
/// The API's compile error as the CLI says it: the message, and the exit code of its kind.
int reportApiError(const tec::ApiError &error);
/// Binds `--input name=file` inputs and fills the rest with seeded random data; 0 or an exit code.
int bindInputs(tec::Session &s, const std::vector<std::string> &specs, uint64_t randomSeed, bool quiet = false);
/// What the backend ran instead of a faster path, and why (a fused epilogue cuBLASLt lacks, a CUDA graph
/// that could not be captured).
void printNotes(const tec::Session &s);

} // namespace cli

#endif
