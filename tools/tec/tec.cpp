// tec: compile an ONNX model. Imports it, runs the pipeline, prints a compile summary.
#include "frontend/Importer.h"
#include "ir/TecOps.h"
#include "passes/Passes.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

/// Exit codes: bad input (model, flags) is 2, a failure inside tec is 1.
constexpr int kExitBadInput = 2, kExitInternal = 1;

cl::OptionCategory category("tec options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"), cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("write the compiled IR to this file"), cl::value_desc("file"),
                                cl::cat(category));
cl::list<std::string> shapes("shape", cl::desc("fix dynamic input dims, e.g. --shape x=64x1024 (repeatable, or a,b)"),
                             cl::value_desc("name=AxB"), cl::CommaSeparated, cl::cat(category));
cl::list<std::string> frozenInputs("freeze-input",
                                   cl::desc("fix a graph input's value at compile time (ONNX TensorProto .pb), "
                                            "e.g. a shape input; repeatable"),
                                   cl::value_desc("name=file.pb"), cl::CommaSeparated, cl::cat(category));
enum class Emit { Summary, Import, Tec };
cl::opt<Emit> emit("emit", cl::desc("what to print on stdout"), cl::init(Emit::Summary),
                   cl::values(clEnumValN(Emit::Summary, "summary", "the compile summary (default)"),
                              clEnumValN(Emit::Import, "import", "the tec IR as imported, before any pass"),
                              clEnumValN(Emit::Tec, "tec", "the tec IR after the pipeline")),
                   cl::cat(category));
cl::opt<std::string> dumpPasses("dump-passes", cl::desc("write the IR after each pass as DIR/NN-pass.mlir"),
                                cl::value_desc("DIR"), cl::cat(category));
cl::list<std::string> disabledPasses("disable-pass", cl::desc("leave a pass out of the pipeline (repeatable)"),
                                     cl::value_desc("pass"), cl::CommaSeparated, cl::cat(category));

OpPrintingFlags printingFlags() { return OpPrintingFlags().elideLargeElementsAttrs(16); }

/// Records the passes that ran and, given a folder, writes the module after each one as NN-pass.mlir.
class PassRecorder : public PassInstrumentation {
public:
  PassRecorder(std::string dir, ModuleOp module) : dir(std::move(dir)), module(module) {}
  void write(llvm::StringRef name) {
    if (dir.empty())
      return;
    llvm::SmallString<256> file(dir);
    llvm::sys::path::append(file, llvm::formatv("{0:02}-{1}.mlir", index++, name).str());
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    if (ec) {
      llvm::errs() << "error: cannot write " << file << ": " << ec.message() << "\n";
      failed = true;
      return;
    }
    module.print(os, printingFlags());
    files.push_back(file.str().str());
  }
  void runAfterPass(Pass *pass, Operation *) override {
    if (pass->getArgument().empty()) // the adaptors that nest passes on functions
      return;
    passes.push_back(pass->getArgument().str());
    write(pass->getArgument());
  }
  std::vector<std::string> passes, files;
  bool failed = false;

private:
  std::string dir;
  ModuleOp module;
  int index = 0;
};

llvm::Error parseInputOptions(tec::ImportOptions &options) {
  for (const std::string &spec : shapes) {
    auto [name, dims] = llvm::StringRef(spec).split('=');
    if (name.empty() || dims.empty())
      return llvm::createStringError("--shape '" + spec + "': expected name=AxB (e.g. x=64x1024)");
    llvm::SmallVector<llvm::StringRef> parts;
    dims.split(parts, 'x');
    llvm::SmallVector<int64_t> values;
    for (llvm::StringRef p : parts) {
      int64_t v;
      if (p.getAsInteger(10, v) || v < 0)
        return llvm::createStringError("--shape '" + spec + "': '" + p.str() + "' is not a non-negative integer");
      values.push_back(v);
    }
    options.shapes[name] = values;
  }
  for (const std::string &spec : frozenInputs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    if (name.empty() || file.empty())
      return llvm::createStringError("--freeze-input '" + spec + "': expected name=file.pb");
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false);
    if (!buffer)
      return llvm::createStringError("--freeze-input '" + spec + "': cannot read " + file.str() + ": " +
                                     buffer.getError().message());
    options.frozenInputs[name] = (*buffer)->getBuffer().str();
  }
  return llvm::Error::success();
}

std::string typeString(Type type) {
  auto t = llvm::cast<RankedTensorType>(type);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t.getElementType() << "[" << tec::shape::str(t.getShape()) << "]";
  return s;
}

std::string bytesString(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3)
    bytes /= 1024, ++u;
  return llvm::formatv("{0:f1} {1}", bytes, units[u]).str();
}

std::map<std::string, int> countOps(ModuleOp module) {
  std::map<std::string, int> counts;
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "tec")
      ++counts[op->getName().stripDialect().str()];
  });
  return counts;
}

std::string opsString(const std::map<std::string, int> &counts) {
  std::string s;
  for (const auto &[name, n] : counts)
    s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
  return s;
}

int total(const std::map<std::string, int> &counts) {
  int n = 0;
  for (const auto &[_, c] : counts)
    n += c;
  return n;
}

void printSummary(const tec::ImportedModel &model, func::FuncOp forward, const std::map<std::string, int> &imported,
                  const std::map<std::string, int> &compiled, const PassRecorder &recorder) {
  auto &os = llvm::outs();
  os << "tec: compiled " << inputPath << "\n";
  os << "  model    opset " << model.opset << (model.producer.empty() ? "" : ", producer " + model.producer) << "\n";
  auto args = forward.getArgumentTypes();
  for (auto [i, name] : llvm::enumerate(model.inputNames))
    os << "  input    " << name << " " << typeString(args[i]) << "\n";
  auto results = forward.getResultTypes();
  for (auto [i, name] : llvm::enumerate(model.outputNames))
    os << "  output   " << name << " " << typeString(results[i]) << "\n";
  double bytes = 0;
  int64_t elements = 0;
  for (const auto &p : model.params) {
    bytes += p.bytes.size();
    elements += p.type.getNumElements();
  }
  os << "  params   " << model.params.size() << " tensors, " << elements << " values, " << bytesString(bytes) << "\n";
  os << "  imported " << total(imported) << " ops: " << opsString(imported) << "\n";
  os << "  compiled " << total(compiled) << " ops: " << opsString(compiled) << "\n";
  os << "  pipeline " << llvm::join(recorder.passes, " -> ") << "\n";
  if (!recorder.files.empty())
    os << "  dumps    " << recorder.files.size() << " files in " << dumpPasses << "\n";
}

int compile() {
  tec::ImportOptions options;
  if (auto err = parseInputOptions(options)) {
    llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
    return kExitBadInput;
  }
  MLIRContext context;
  context.printOpOnDiagnostic(false);
  auto model = tec::importOnnxFile(context, inputPath, options);
  if (!model) {
    llvm::errs() << "error: " << llvm::toString(model.takeError()) << "\n";
    return kExitBadInput;
  }
  ModuleOp module = *model->module;
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (emit == Emit::Import) {
    module.print(llvm::outs(), printingFlags());
    llvm::outs() << "\n";
    return 0;
  }
  auto imported = countOps(module);

  tec::PipelineOptions pipelineOptions;
  pipelineOptions.disabledPasses.insert(disabledPasses.begin(), disabledPasses.end());
  PassManager pm(&context);
  tec::buildInferencePipeline(pm, pipelineOptions);
  if (!dumpPasses.empty())
    if (auto ec = llvm::sys::fs::create_directories(dumpPasses)) {
      llvm::errs() << "error: cannot create " << dumpPasses << ": " << ec.message() << "\n";
      return kExitBadInput;
    }
  auto owned = std::make_unique<PassRecorder>(dumpPasses, module);
  PassRecorder &recorder = *owned;
  recorder.write("import");
  pm.addInstrumentation(std::move(owned));
  if (failed(pm.run(module))) {
    llvm::errs() << "error: " << inputPath << ": the compile pipeline failed (see the diagnostics above)\n";
    return kExitInternal;
  }
  if (recorder.failed)
    return kExitBadInput;

  if (!outputPath.empty()) {
    std::string error;
    auto out = openOutputFile(outputPath, &error);
    if (!out) {
      llvm::errs() << "error: " << error << "\n";
      return kExitBadInput;
    }
    module.print(out->os(), printingFlags());
    out->keep();
  }
  if (emit == Emit::Tec) {
    module.print(llvm::outs(), printingFlags());
    llvm::outs() << "\n";
    return 0;
  }
  printSummary(*model, forward, imported, countOps(module), recorder);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv, "tec: compile an ONNX model for fast low-precision training and inference\n");
  return compile();
}
