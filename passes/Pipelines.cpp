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
  if (enabled("tec-insert-fp8") && options.fp8.mode != Fp8Mode::None) {
    TecInsertFp8Options fp8 = options.fp8;
    fp8.target = target.str();
    pm.addPass(createTecInsertFp8(fp8));
  }
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

namespace {

/// The flags of `tec model.onnx` that shape the pipelines, as tec-opt's pipeline options (the CLI's names).
struct InferencePipelineFlags : PassPipelineOptions<InferencePipelineFlags> {
  Option<bool> fastGelu{*this, "fast-gelu", llvm::cl::desc("an erf GELU may use cuBLASLt's tanh GELU epilogue"),
                        llvm::cl::init(false)};
};

struct TargetPipelineFlags : PassPipelineOptions<TargetPipelineFlags> {
  Option<std::string> target{*this, "target", llvm::cl::desc("cpu, sm_70 ... sm_100 (support/Targets.cpp)"),
                             llvm::cl::init("cpu")};
  Option<Fp8Mode> fp8{*this, "fp8", llvm::cl::desc("auto | all | none"), llvm::cl::init(Fp8Mode::Auto),
                      llvm::cl::values(clEnumValN(Fp8Mode::Auto, "auto", "where the cost model says FP8 pays"),
                                       clEnumValN(Fp8Mode::All, "all", "every eligible GEMM"),
                                       clEnumValN(Fp8Mode::None, "none", "no GEMM"))};
  Option<bool> fp8Emulate{*this, "fp8-emulate", llvm::cl::desc("on cpu, keep FP8 GEMMs, emulated"),
                          llvm::cl::init(false)};
  Option<bool> training{*this, "training", llvm::cl::desc("the target part of the training pipeline"),
                        llvm::cl::init(false)};
};

struct TrainingPipelineFlags : PassPipelineOptions<TrainingPipelineFlags> {
  Option<std::string> target{*this, "target", llvm::cl::desc("cpu, sm_70 ... sm_100"), llvm::cl::init("cpu")};
  Option<Fp8Mode> fp8{*this, "fp8", llvm::cl::desc("auto | all | none"), llvm::cl::init(Fp8Mode::Auto),
                      llvm::cl::values(clEnumValN(Fp8Mode::Auto, "auto", "where the cost model says FP8 pays"),
                                       clEnumValN(Fp8Mode::All, "all", "every eligible GEMM"),
                                       clEnumValN(Fp8Mode::None, "none", "no GEMM"))};
  Option<bool> fp8Emulate{*this, "fp8-emulate", llvm::cl::desc("on cpu, FP8 training emulated"), llvm::cl::init(false)};
  Option<Loss> loss{*this, "loss", llvm::cl::desc("mse | l1 | cross-entropy"), llvm::cl::init(Loss::Mse),
                    llvm::cl::values(clEnumValN(Loss::Mse, "mse", ""), clEnumValN(Loss::L1, "l1", ""),
                                     clEnumValN(Loss::CrossEntropy, "cross-entropy", ""))};
  Option<Optimizer> optimizer{*this, "optimizer", llvm::cl::desc("sgd | adamw"), llvm::cl::init(Optimizer::AdamW),
                              llvm::cl::values(clEnumValN(Optimizer::Sgd, "sgd", ""),
                                               clEnumValN(Optimizer::AdamW, "adamw", ""))};
  Option<double> lr{*this, "lr", llvm::cl::desc("base learning rate"), llvm::cl::init(1e-3)};
};

} // namespace

void registerTecPassesAndPipelines() {
  registerTecPasses();
  PassPipelineRegistration<InferencePipelineFlags>(
      "tec-inference-pipeline", "the target-independent pipeline `tec model.onnx` runs first",
      [](OpPassManager &pm, const InferencePipelineFlags &flags) {
        PipelineOptions options;
        options.fastGelu = flags.fastGelu;
        buildInferencePipeline(pm, options);
      });
  PassPipelineRegistration<TargetPipelineFlags>(
      "tec-target-pipeline", "one target's part of `tec model.onnx --target T`: FP8, lowering, narrowing",
      [](OpPassManager &pm, const TargetPipelineFlags &flags) {
        PipelineOptions options;
        options.fp8.mode = flags.fp8;
        options.fp8Emulate = flags.fp8Emulate;
        options.training = flags.training;
        buildTargetPipeline(pm, options, flags.target);
      });
  PassPipelineRegistration<TrainingPipelineFlags>(
      "tec-training-pipeline", "`tec model.onnx --train --target T`'s pipeline: the forward, @train_step, the target",
      [](OpPassManager &pm, const TrainingPipelineFlags &flags) {
        PipelineOptions options;
        options.fp8.mode = flags.fp8;
        options.fp8Emulate = flags.fp8Emulate;
        options.train.loss = flags.loss;
        options.train.optimizer = flags.optimizer;
        options.train.learningRate = flags.lr;
        buildTrainingPipeline(pm, options, flags.target);
      });
}

} // namespace tec
