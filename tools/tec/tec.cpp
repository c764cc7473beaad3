// tec: compile an ONNX model into a plan (`tec model.onnx`), run, train, calibrate, inspect and export
// plans, and say what this machine runs (`tec doctor`). Each subcommand has its own file (Cli.h).
#include "Cli.h"

#include "api/Compile.h"

#include "llvm/Config/llvm-config.h"

#include <cstdio>
#include <deque>

namespace cl = llvm::cl;

namespace {

/// Appends "(default: X)" to the help of every option of tec's with a default worth saying (not false, not
/// empty): `tec --help` and each subcommand's show what an omitted flag means.
void showDefaults() {
  static std::deque<std::string> descriptions; // the options keep StringRefs into these
  auto withDefault = [](cl::Option *o, const std::string &value) {
    descriptions.push_back(o->HelpStr.str() + " (default: " + value + ")");
    o->setDescription(descriptions.back());
  };
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    for (auto &[name, option] : sub->OptionsMap) {
      if (llvm::find(option->Categories, &cli::category()) == option->Categories.end() ||
          option->HelpStr.contains("(default: "))
        continue;
      if (auto *o = dynamic_cast<cl::opt<int> *>(option); o && o->getDefault().hasValue())
        withDefault(o, std::to_string(o->getDefault().getValue()));
      else if (auto *o = dynamic_cast<cl::opt<int64_t> *>(option); o && o->getDefault().hasValue())
        withDefault(o, std::to_string(o->getDefault().getValue()));
      else if (auto *o = dynamic_cast<cl::opt<uint64_t> *>(option); o && o->getDefault().hasValue())
        withDefault(o, std::to_string(o->getDefault().getValue()));
      else if (auto *o = dynamic_cast<cl::opt<double> *>(option); o && o->getDefault().hasValue()) {
        char text[32];
        std::snprintf(text, sizeof(text), "%g", o->getDefault().getValue());
        withDefault(o, text);
      }
      else if (auto *o = dynamic_cast<cl::opt<std::string> *>(option);
               o && o->getDefault().hasValue() && !o->getDefault().getValue().empty())
        withDefault(o, o->getDefault().getValue());
    }
}

/// LLVM's parse errors without the noise one mistyped flag makes: after "Unknown command line argument" (with
/// its suggestion), the flag's value is taken for a positional argument and a "Too many positional
/// arguments" error follows; only the first is the user's mistake.
std::string usageErrors(const std::string &errors) {
  if (errors.find("Unknown command line argument") == std::string::npos)
    return errors;
  std::string kept;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(errors).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines)
    if (!line.contains("Too many positional arguments") && !line.starts_with("Can specify at most"))
      kept += line.str() + "\n";
  return kept;
}

/// Every option's range, checked before anything runs: a value outside it is a usage error naming the
/// flag. Empty when all hold.
std::string optionError() {
  for (auto check : {cli::compileFlagsError, cli::runFlagsError, cli::calibrateFlagsError, cli::trainFlagsError,
                     cli::commonFlagsError})
    if (std::string e = check(); !e.empty())
      return e;
  return "";
}

/// tec's own --help and --version. LLVM's print and call exit() from inside its parser, which also reads
/// arguments through letter grouping (every one-letter option groups: `-Whelp`, and `--heckpoint` for a
/// mistyped --checkpoint, were its help, exit 0): tec answers them after parsing, and a typo is an unknown option.
struct HelpOptions {
  cl::opt<bool> help{"help", cl::desc("Display available options (--help-hidden for more)"),
                     cl::sub(cl::SubCommand::getAll())};
  cl::alias h{"h", cl::desc("Alias for --help"), cl::aliasopt(help)};
  cl::opt<bool> helpHidden{"help-hidden", cl::desc("Display all available options"), cl::Hidden,
                           cl::sub(cl::SubCommand::getAll())};
  cl::opt<bool> version{"version", cl::desc("Display the version of tec"), cl::sub(cl::SubCommand::getAll())};
};

const HelpOptions &helpOptions() {
  static const HelpOptions *options = [] {
    // getRegisteredOptions makes LLVM's common options first, so they are there to remove.
    llvm::StringMap<cl::Option *> &registered = cl::getRegisteredOptions();
    for (const char *name : {"help", "h", "help-list", "help-hidden", "help-list-hidden", "version"})
      if (cl::Option *o = registered.lookup(name))
        o->removeArgument();
    return new HelpOptions;
  }();
  return *options;
}

} // namespace

int cli::tecMain(int argc, char **argv) {
  const HelpOptions &help = helpOptions();
  cl::HideUnrelatedOptions(cli::category());
  showDefaults();
  // LLVM's parser reads an argument @FILE as more arguments, from any file however large (`tec @/dev/zero`
  // never ended): tec takes none.
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] == '@') {
      llvm::errs() << "error: '" << argv[i] << "': tec reads no response files (@FILE); give the arguments "
                   << "themselves\n";
      return cli::kExitBadInput;
    }
  // A usage error is bad input the user can fix: exit 2, as for a bad file.
  std::string errors;
  llvm::raw_string_ostream errorStream(errors);
  const bool parsed = cl::ParseCommandLineOptions(
      argc, argv, "tec: compile an ONNX model for fast low-precision training and inference\n", &errorStream);
  errorStream.flush();
  // Help and version whatever else the line holds where asked for by name (`tec run --help` names no plan);
  // reached through letter grouping (`-hx`: single letters group), only on a line that parses.
  const bool named = llvm::any_of(llvm::ArrayRef(argv + 1, argv + argc), [](llvm::StringRef arg) {
    return arg.starts_with("-") && llvm::is_contained({"h", "help", "help-hidden", "version"}, arg.ltrim('-'));
  });
  if ((parsed || named) && help.version) {
    llvm::outs() << "tec " TEC_VERSION " (LLVM/MLIR " LLVM_VERSION_STRING ")\n";
    return 0;
  }
  if ((parsed || named) && (help.help || help.helpHidden)) {
    cl::PrintHelpMessage(/*Hidden=*/help.helpHidden, /*Categorized=*/true);
    return 0;
  }
  llvm::errs() << usageErrors(errors);
  if (!parsed)
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
