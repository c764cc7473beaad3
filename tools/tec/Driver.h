// The compile flow behind `tec model.onnx`: import, run the pipeline (recording and optionally dumping
// each pass), generate the plan. Shared by the CLI and the conformance tests.
#ifndef TEC_TOOLS_TEC_DRIVER_H
#define TEC_TOOLS_TEC_DRIVER_H

#include "frontend/Importer.h"
#include "passes/Passes.h"
#include "runtime/PlanFile.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace tec {

struct CompileOptions {
  ImportOptions import;
  PipelineOptions pipeline;
  /// Write the IR after the import and after each pass here (`--dump-passes`); empty: don't.
  std::string dumpDir;
};

struct CompiledModel {
  ImportedModel model;
  std::map<std::string, int> importedOps, compiledOps;
  std::vector<std::string> passes, dumpFiles;
  plan::Plan plan;
  /// The plan's data section; refers to the model's weights and the IR's constants.
  PlanDataBuilder data;
};

/// Imports and compiles; errors carry ImportError (bad model: exit 2) or a plain message (exit 1).
/// `context` must outlive the result.
llvm::Expected<std::unique_ptr<CompiledModel>> compileModel(mlir::MLIRContext &context, const std::string &path,
                                                            const CompileOptions &options);

/// The IR as the dumps and --emit print it (large constants elided).
mlir::OpPrintingFlags irPrintingFlags();

} // namespace tec

#endif
