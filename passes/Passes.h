// tec's passes and the pipelines built from them.
#ifndef TEC_PASSES_PASSES_H
#define TEC_PASSES_PASSES_H

#include "ir/TecOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <set>
#include <string>

namespace tec {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// What the user chose on the command line that shapes the pipeline.
struct PipelineOptions {
  /// Pass arguments (e.g. "tec-simplify-shapes") to leave out, as `--disable-pass` asks.
  std::set<std::string> disabledPasses;
  /// Let an erf GELU use cuBLASLt's tanh GELU epilogue (`--fast-gelu`).
  bool fastGelu = false;
};

/// The inference pipeline, spelled out in one place.
void buildInferencePipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// Registers every tec pass and the named pipelines with MLIR's registry (for tec-opt).
void registerTecPassesAndPipelines();

} // namespace tec

#endif // TEC_PASSES_PASSES_H
