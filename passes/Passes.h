// tec's passes and the pipelines built from them.
#ifndef TEC_PASSES_PASSES_H
#define TEC_PASSES_PASSES_H

#include "ir/TecOps.h"
#include "passes/PassOptions.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tec {

// Every other pass's declarations (PassOptions.h has tec-insert-fp8's and tec-build-train-step's): a pass
// added to Passes.td is listed here, or its create function is undeclared where a pipeline uses it.
#define GEN_PASS_DECL_TECAUTODIFF
#define GEN_PASS_DECL_TECCHANNELSLAST
#define GEN_PASS_DECL_TECFUSELINEAR
#define GEN_PASS_DECL_TECFUSEQUANTIZE
#define GEN_PASS_DECL_TECLOWERFORTARGET
#define GEN_PASS_DECL_TECNARROWACTIVATIONS
#define GEN_PASS_DECL_TECRECASTWEIGHTS
#define GEN_PASS_DECL_TECRECOGNIZEATTENTION
#define GEN_PASS_DECL_TECRECOGNIZEPATTERNS
#define GEN_PASS_DECL_TECSIMPLIFYSHAPES
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Removes @forward's results tagged `tec.running_stat` (the next running statistics of training-mode
/// BatchNormalization: inference keeps its statistics), returning each removed value, still in the body
/// until dead code is removed, with the index of the param argument it is the next value of.
llvm::SmallVector<std::pair<mlir::Value, unsigned>> dropRunningStatistics(mlir::func::FuncOp forward);

/// Adds `name`: `forward`'s arguments plus one cotangent per result, returning its results and the
/// gradients of the arguments selected by `wrt` (params | inputs | all), each tagged `tec.grad_of`.
/// Fails, with a diagnostic on the op, when an active op has no gradient.
mlir::FailureOr<mlir::func::FuncOp> buildVjp(mlir::func::FuncOp forward, llvm::StringRef wrt, llvm::StringRef name);

/// tec-simplify-shapes' patterns: a chain of reshapes, or of transposes, becomes one op.
void populateShapeChainPatterns(mlir::RewritePatternSet &patterns);

/// The target-independent inference pipeline, spelled out in one place.
void buildInferencePipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// The training pipeline for one target: the forward part of the inference pipeline, @train_step, then
/// the target's FP8 insertion and lowering (on cpu, FP8 only with --fp8-emulate).
void buildTrainingPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, llvm::StringRef target);

/// What runs per target after it, on a copy of the module: FP8 insertion and lowering.
void buildTargetPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, llvm::StringRef target);

/// Registers every tec pass and the named pipelines with MLIR's registry (for tec-opt).
void registerTecPassesAndPipelines();

} // namespace tec

#endif // TEC_PASSES_PASSES_H
