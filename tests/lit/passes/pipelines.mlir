// tec-opt runs the pipelines `tec model.onnx` runs, with the CLI's options (passes/Pipelines.cpp).
// RUN: tec-opt %s --tec-inference-pipeline | FileCheck %s --check-prefix=INFERENCE
// RUN: tec-opt %s --tec-inference-pipeline --tec-target-pipeline="target=sm_90 fp8=all" | FileCheck %s --check-prefix=SM90
// RUN: tec-opt %s --tec-inference-pipeline --tec-target-pipeline="target=sm_80" | FileCheck %s --check-prefix=SM80
// RUN: tec-opt %s --tec-training-pipeline="target=cpu optimizer=sgd lr=0.5" | FileCheck %s --check-prefix=TRAIN
// RUN: not tec-opt %s --tec-target-pipeline="target=sm_90 fp8=maybe" 2>&1 | FileCheck %s --check-prefix=BAD

// The target-independent part: MatMul + Add + Relu become one tec.linear.
// INFERENCE-LABEL: func @forward
//       INFERENCE:   tec.linear {{.*}}epilogue = "relu"
//   INFERENCE-NOT:   tec.matmul

// Hopper: the GEMM in FP8 with its delayed-scaling state.
// SM90-LABEL: func @forward
//  SM90-SAME:   tec.state = "fc1/input/amax_history"
//       SM90:   tec.fp8_gemm
//       SM90:   tec.delayed_scaling

// Ampere: BF16, no FP8 state.
// SM80-LABEL: func @forward
//   SM80-NOT:   tec.state
//       SM80:   tec.linear {{.*}}tec.precision = "bf16

// Training: @train_step with SGD at the given rate.
// TRAIN: func @train_step{{.*}}tec.state = "lr", tec.state_init = 5.000000e-01
// TRAIN:   tec.optimizer_update {{.*}}optimizer = "sgd"

// BAD: for the --fp8 option: Cannot find option named 'maybe'!
func.func @forward(%x: tensor<64x256xf32>, %w: tensor<256x128xf32> {tec.param = "fc1.weight"},
                   %b: tensor<128xf32> {tec.param = "fc1.bias"}) -> tensor<64x128xf32> {
  %0 = tec.matmul %x, %w : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32> loc("fc1")
  %1 = tec.add %0, %b : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32> loc("fc1_bias")
  %2 = tec.relu %1 : tensor<64x128xf32> loc("relu1")
  return %2 : tensor<64x128xf32>
}
