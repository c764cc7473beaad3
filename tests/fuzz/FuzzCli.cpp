// The tec command line: each input is an argument list (one argument per line), parsed and run in-process
// as `tec` runs it, from an empty folder (no file an argument names exists, unless the input names one of
// the system's). Any outcome but an exit code is a bug: a crash, a sanitizer report, a hang, an exit.
#include "FuzzFiles.h"

#include "tools/tec/Cli.h"

#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const bool inScratch = chdir(tec::fuzz::scratchDir().c_str()) == 0;
  if (!inScratch)
    std::abort();
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(reinterpret_cast<const char *>(data), size).split(lines, '\n');
  std::vector<std::string> args{"tec"};
  for (llvm::StringRef line : lines) {
    if (args.size() > 24)
      break;
    line = line.take_until([](char c) { return c == '\0'; }); // what argv can hold: C strings
    args.push_back(line.str());
  }
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  llvm::cl::ResetAllOptionOccurrences();
  cli::tecMain(static_cast<int>(args.size()), argv.data());
  return 0;
}
