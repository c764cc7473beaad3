#include "Driver.h"

#include "codegen/Codegen.h"
#include "ir/TecOps.h"

#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace mlir;

namespace tec {

OpPrintingFlags irPrintingFlags() { return OpPrintingFlags().elideLargeElementsAttrs(16); }

namespace {

/// Records the passes that ran and, given a folder, writes the module after each one as NN-pass.mlir.
class PassRecorder : public PassInstrumentation {
public:
  PassRecorder(std::string dir, ModuleOp module, CompiledModel &out) : dir(std::move(dir)), module(module), out(out) {}
  void write(llvm::StringRef name) {
    if (dir.empty())
      return;
    llvm::SmallString<256> file(dir);
    llvm::sys::path::append(file, llvm::formatv("{0:02}-{1}.mlir", index++, name).str());
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    if (ec) {
      error = "cannot write " + file.str().str() + ": " + ec.message();
      return;
    }
    module.print(os, irPrintingFlags());
    out.dumpFiles.push_back(file.str().str());
  }
  void runAfterPass(Pass *pass, Operation *) override {
    if (pass->getArgument().empty()) // the adaptors that nest passes on functions
      return;
    out.passes.push_back(pass->getArgument().str());
    write(pass->getArgument());
  }
  std::string error;

private:
  std::string dir;
  ModuleOp module;
  CompiledModel &out;
  int index = 0;
};

std::map<std::string, int> countOps(ModuleOp module) {
  std::map<std::string, int> counts;
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "tec")
      ++counts[op->getName().stripDialect().str()];
  });
  return counts;
}

} // namespace

llvm::Expected<std::unique_ptr<CompiledModel>> compileModel(MLIRContext &context, const std::string &path,
                                                            const CompileOptions &options) {
  auto compiled = std::make_unique<CompiledModel>();
  auto model = importOnnxFile(context, path, options.import);
  if (!model)
    return model.takeError();
  compiled->model = std::move(*model);
  ModuleOp module = *compiled->model.module;
  compiled->importedOps = countOps(module);

  if (!options.dumpDir.empty())
    if (auto ec = llvm::sys::fs::create_directories(options.dumpDir))
      return llvm::createStringError("cannot create " + options.dumpDir + ": " + ec.message());
  PassManager pm(&context);
  buildInferencePipeline(pm, options.pipeline);
  auto recorder = std::make_unique<PassRecorder>(options.dumpDir, module, *compiled);
  PassRecorder &dumps = *recorder;
  dumps.write("import");
  pm.addInstrumentation(std::move(recorder));
  if (failed(pm.run(module)))
    return llvm::createStringError(path + ": the compile pipeline failed (see the diagnostics above)");
  if (!dumps.error.empty())
    return llvm::createStringError(dumps.error);
  compiled->compiledOps = countOps(module);

  // Params go into the data section once, shared by every variant.
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  CodegenInputs inputs;
  for (const auto &name : compiled->model.inputNames) {
    inputs.argNames.push_back(name);
    inputs.argDataOffsets.push_back(-1);
  }
  for (const auto &param : compiled->model.params) {
    inputs.argNames.push_back(param.name);
    inputs.argDataOffsets.push_back(compiled->data.add(param.bytes.data(), param.bytes.size()));
  }
  auto variant = buildVariant(forward, inputs, compiled->data);
  if (!variant)
    return llvm::createStringError(path + ": " + llvm::toString(variant.takeError()));
  auto &plan = compiled->plan;
  *plan.add_variants() = std::move(*variant);
  for (const auto &name : compiled->model.inputNames)
    plan.add_input_names(name);
  for (const auto &name : compiled->model.outputNames)
    plan.add_output_names(name);
  plan.set_source_model(llvm::sys::path::filename(path).str());
  plan.set_producer("tec");
  return compiled;
}

} // namespace tec
