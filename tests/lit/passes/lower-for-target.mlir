// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=8" --tec-lower-for-target=target=sm_90 | FileCheck %s --check-prefix=SM90
// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=8" --tec-lower-for-target=target=sm_80 | FileCheck %s --check-prefix=SM80
// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=8" --tec-lower-for-target=target=sm_75 | FileCheck %s --check-prefix=SM75
// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=8" --tec-lower-for-target=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=8" --tec-lower-for-target="target=cpu fp8-emulate" | FileCheck %s --check-prefix=EMULATE
// RUN: not tec-opt %s --tec-lower-for-target=target=sm_42 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=block target=sm_80" --tec-lower-for-target=target=sm_80 | FileCheck %s --check-prefix=BLOCK80
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=mxfp8 target=cpu" --tec-lower-for-target=target=cpu | FileCheck %s --check-prefix=MXCPU
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=current target=sm_80" --tec-lower-for-target=target=sm_80 | FileCheck %s --check-prefix=CURRENT80

// Hopper keeps the FP8 GEMM and its state; the ineligible GEMM runs in BF16.
// SM90-LABEL: func @forward
//  SM90-SAME:   tec.state = "fc1/input/amax_history"
//       SM90:   tec.fp8_gemm {{.*}}tec.precision = "fp8: E4M3 x E4M3, delayed scaling"
//       SM90:   tec.linear {{.*}}tec.precision = "bf16: K=128, N=10: FP8 GEMMs need multiples of 16"
//  SM90-SAME:   (tensor<64x128xbf16>, tensor<10x128xbf16>) -> tensor<64x10xbf16>
//       SM90:   tec.delayed_scaling

// Ampere: the FP8 GEMM becomes BF16 and its FP8 state disappears from the signature.
// SM80-LABEL: func @forward(%arg0: tensor<64x256xf32>, %arg1: tensor<128x256xf32>, %arg2: tensor<128xf32>, %arg3: tensor<10x128xf32>) -> tensor<64x10xf32>
//   SM80-NOT:   tec.quantize
//       SM80:   tec.cast %arg0 : tensor<64x256xf32> to tensor<64x256xbf16>
//       SM80:   tec.linear {{.*}}{epilogue = "relu", tec.precision = "bf16: FP8 asked; no FP8 tensor cores before sm_89", transpose_b = true}
//       SM80:   tec.cast {{.*}} : tensor<64x128xbf16> to tensor<64x128xf32>
//   SM80-NOT:   tec.delayed_scaling

// Volta/Turing: FP16.
// SM75-LABEL: func @forward
//       SM75:   tec.linear {{.*}}tec.precision = "fp16: FP8 asked; no FP8 before sm_89, no BF16 before sm_80"
//  SM75-SAME:   -> tensor<64x128xf16>

// On the cpu target: FP32, no casts; with fp8-emulate the FP8 GEMM stays (emulated).
// CPU-LABEL: func @forward(%arg0: tensor<64x256xf32>, %arg1: tensor<128x256xf32>, %arg2: tensor<128xf32>, %arg3: tensor<10x128xf32>) -> tensor<64x10xf32>
//   CPU-NOT:   tec.cast
//       CPU:   tec.linear %arg0, %arg1, %arg2 {epilogue = "relu", tec.precision = "fp32: FP8 asked; cpu GEMMs run in FP32 (FP8 only emulated, with --fp8-emulate)", transpose_b = true}
// EMULATE:   tec.fp8_gemm {{.*}}tec.precision = "fp8: E4M3 x E4M3, delayed scaling (emulated)"

// Block-scaled and current-scaled GEMMs lose FP8 as delayed ones do: BF16 on what the quantizes read, no
// quantize, scale or block op left.
// BLOCK80-LABEL: func @forward(%arg0: tensor<64x256xf32>, %arg1: tensor<128x256xf32>, %arg2: tensor<128xf32>, %arg3: tensor<10x128xf32>) -> tensor<64x10xf32>
//   BLOCK80-NOT:   tec.quantize_blocks
//       BLOCK80:   tec.linear {{.*}}{epilogue = "relu", tec.precision = "bf16: FP8 asked; no FP8 tensor cores before sm_89", transpose_b = true}
//   BLOCK80-NOT:   tec.fp8_block_gemm
// MXCPU-LABEL: func @forward
//   MXCPU-NOT:   tec.quantize_blocks
//       MXCPU:   tec.linear %arg0, %arg1, %arg2 {epilogue = "relu", tec.precision = "fp32: FP8 asked; cpu GEMMs run in FP32 (FP8 only emulated, with --fp8-emulate)", transpose_b = true}
// CURRENT80-LABEL: func @forward
//   CURRENT80-NOT:   tec.current_scaling
//   CURRENT80-NOT:   tec.amax
//       CURRENT80:   tec.linear {{.*}}tec.precision = "bf16: FP8 asked; no FP8 tensor cores before sm_89"

// UNKNOWN: error: unknown target 'sm_42' (sm_100, sm_90, sm_89, sm_86, sm_80, sm_75, sm_70, cpu)
func.func @forward(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xf32>, %w2: tensor<10x128xf32>) -> tensor<64x10xf32> {
  %0 = tec.linear %x, %w, %b {epilogue = "relu", transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32> loc("fc1")
  %1 = tec.linear %0, %w2 {transpose_b = true} : (tensor<64x128xf32>, tensor<10x128xf32>) -> tensor<64x10xf32> loc("fc2")
  return %1 : tensor<64x10xf32>
}
