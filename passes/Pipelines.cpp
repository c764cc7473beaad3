#include "passes/Passes.h"
#include "support/Targets.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace tec {

const std::vector<std::string> &pipelinePassNames() {
  static const std::vector<std::string> names = {"tec-simplify-shapes",  "canonicalize",   "cse",
                                                 "tec-recognize-attention", "tec-recognize-patterns", "tec-fuse-linear", "tec-insert-fp8",
                                                 "tec-lower-for-target", "tec-narrow-activations", "tec-channels-last",
                                                 "tec-fuse-quantize", "tec-recast-weights"};
  return names;
}

void buildInferencePipeline(OpPassManager &pm, const PipelineOptions &options) {
  auto enabled = [&](StringRef arg) { return !options.disabledPasses.count(arg.str()); };
  if (enabled("tec-simplify-shapes"))
    pm.addNestedPass<func::FuncOp>(createTecSimplifyShapes());
  if (enabled("canonicalize"))
    pm.addNestedPass<func::FuncOp>(createCanonicalizerPass());
  if (enabled("cse"))
    pm.addNestedPass<func::FuncOp>(createCSEPass());
  if (enabled("tec-recognize-attention"))
    pm.addNestedPass<func::FuncOp>(createTecRecognizeAttention());
  if (enabled("tec-recognize-patterns"))
    pm.addNestedPass<func::FuncOp>(createTecRecognizePatterns());
  if (enabled("tec-fuse-linear"))
    pm.addNestedPass<func::FuncOp>(createTecFuseLinear({options.fastGelu, /*fuseGelu=*/!options.training}));
}

void buildTargetPipeline(OpPassManager &pm, const PipelineOptions &options, StringRef target) {
  auto enabled = [&](StringRef arg) { return !options.disabledPasses.count(arg.str()); };
  if (enabled("tec-insert-fp8") && options.fp8.mode != Fp8Mode::None)
    pm.addPass(createTecInsertFp8(options.fp8));
  if (enabled("tec-lower-for-target"))
    pm.addPass(createTecLowerForTarget({target.str(), options.fp8Emulate}));
  // GPU targets keep activations in 16 bits; the CPU computes in f32 (its BF16 would only emulate).
  const TargetCapability *cap = lookupTarget(target);
  const bool narrow =
      cap && cap->name != "cpu" && (cap->fallback == GemmPrecision::BF16 || cap->fallback == GemmPrecision::F16);
  if (enabled("tec-narrow-activations") && narrow)
    pm.addNestedPass<func::FuncOp>(
        createTecNarrowActivations({cap->fallback == GemmPrecision::F16 ? "f16" : "bf16"}));
  // The cpu target's inference convolutions run channels-last (oneDNN's layout); training keeps NCHW.
  if (enabled("tec-channels-last") && cap && cap->name == "cpu" && !options.training)
    pm.addNestedPass<func::FuncOp>(createTecChannelsLast());
  if (enabled("canonicalize"))
    pm.addNestedPass<func::FuncOp>(createCanonicalizerPass());
  if (enabled("cse"))
    pm.addNestedPass<func::FuncOp>(createCSEPass());
  const bool keepsFp8 = cap && options.fp8.mode != Fp8Mode::None &&
                        (cap->gemms == GemmPrecision::Fp8 || (cap->name == "cpu" && options.fp8Emulate));
  if (enabled("tec-fuse-quantize") && keepsFp8)
    pm.addNestedPass<func::FuncOp>(createTecFuseQuantize());
  if (enabled("tec-recast-weights") && narrow && options.training)
    pm.addNestedPass<func::FuncOp>(createTecRecastWeights());
}

void buildTrainingPipeline(OpPassManager &pm, const PipelineOptions &options, StringRef target) {
  PipelineOptions forward = options;
  forward.training = true;
  buildInferencePipeline(pm, forward);
  TrainOptions t = options.train;
  // FP16 GEMMs need dynamic loss scaling (GradScaler's defaults unless asked otherwise).
  const TargetCapability *cap = lookupTarget(target);
  if (cap && cap->fallback == GemmPrecision::F16 && t.lossScale == 0.0)
    t.lossScale = 65536.0;
  pm.addPass(createTecBuildTrainStep(t));
  pm.addNestedPass<func::FuncOp>(createCanonicalizerPass());
  pm.addNestedPass<func::FuncOp>(createCSEPass());
  // On cpu FP8 training is emulated, so only with --fp8-emulate; GPU targets follow their capability.
  if (target != "cpu" || (options.fp8.mode != Fp8Mode::None && options.fp8Emulate))
    buildTargetPipeline(pm, forward, target);
}

void registerTecPassesAndPipelines() {
  registerTecPasses();
  PassPipelineRegistration<>("tec-inference-pipeline", "the pipeline `tec model.onnx` runs",
                             [](OpPassManager &pm) { buildInferencePipeline(pm, {}); });
}

} // namespace tec
