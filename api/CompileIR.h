// The compile flow with its IR: the MLIR context it runs in, the compiled model's modules, how the dumps
// print them. For the CLI's --emit and the tests that look at IR; api/Compile.h is the flow without MLIR.
#ifndef TEC_API_COMPILEIR_H
#define TEC_API_COMPILEIR_H

#include "api/Compile.h"
#include "frontend/Importer.h"
#include "passes/Passes.h"

#include "mlir/IR/MLIRContext.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tec {

/// Every tensor of `module` within kMaxTensorBytes and every constant within `maxConstantBytes`, or an
/// ImportError (bad model, exit 2) naming the first node past a limit.
llvm::Error checkTensorSizes(mlir::ModuleOp module, const std::string &path, int64_t maxConstantBytes);

struct CompiledModel {
  ImportedModel model;
  std::vector<LayerPrecision> layers;
  std::map<std::string, int> importedOps, compiledOps;
  std::vector<std::string> passes, dumpFiles;
  plan::Plan plan;
  /// The plan's data section; refers to the model's weights and the IR's constants.
  PlanDataBuilder data;
  /// With --train: the modules holding each target's @train_step (their constants are in `data`).
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> trainModules;
};

/// Imports and compiles; errors carry ImportError (bad model: exit 2) or a plain message (exit 1).
/// `context` must outlive the result.
llvm::Expected<std::unique_ptr<CompiledModel>> compileModel(mlir::MLIRContext &context, const std::string &path,
                                                            const CompileOptions &options);

/// The IR as the dumps and --emit print it (large constants elided).
mlir::OpPrintingFlags irPrintingFlags();

} // namespace tec

#endif
