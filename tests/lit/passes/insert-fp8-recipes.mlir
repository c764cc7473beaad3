// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=current" --split-input-file | FileCheck %s --check-prefix=CURRENT
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=block" --split-input-file | FileCheck %s --check-prefix=BLOCK
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=mxfp8" --split-input-file | FileCheck %s --check-prefix=MX
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=block;^fc2$=delayed" --split-input-file | FileCheck %s --check-prefix=LAYER
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=mxfp8 target=sm_90" --split-input-file | FileCheck %s --check-prefix=HOPPER
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=mxfp8 target=sm_89" --split-input-file | FileCheck %s --check-prefix=ADA
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=auto target=sm_100" --split-input-file | FileCheck %s --check-prefix=AUTO100
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=auto target=sm_90" --split-input-file | FileCheck %s --check-prefix=AUTO90
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=auto target=sm_89" --split-input-file | FileCheck %s --check-prefix=AUTO89
// RUN: tec-opt %s --tec-insert-fp8="fp8=all recipe=auto" --split-input-file | FileCheck %s --check-prefix=AUTOCPU

// Current scaling: each operand's scale from its own amax this step, no state; HYBRID by default.
// Block scaling: 1x128 blocks along K, power-of-two scales, E4M3, one scale per block; MXFP8: 1x32, E8M0.
// A recipe per layer; where the target lacks one, the next recipe and why.
// CURRENT-LABEL: func @forward
//  CURRENT-SAME:   (%arg0: tensor<64x256xf32>, %arg1: tensor<128x256xf32>, %arg2: tensor<128xf32>) -> tensor<64x128xf32>
//       CURRENT:   %[[A:.+]] = tec.amax %arg0
//       CURRENT:   %[[S:.+]], %[[SI:.+]] = tec.current_scaling %[[A]] {fp8_max = 4.480000e+02 : f32}
//       CURRENT:   %[[XQ:.+]] = tec.quantize %arg0, %[[S]]
//       CURRENT:   tec.fp8_gemm %[[XQ]], %{{.+}}, %[[SI]], {{.*}}tec.precision = "E4M3 x E4M3, current scaling"
//   CURRENT-NOT:   tec.delayed_scaling
// BLOCK-LABEL: func @forward
//  BLOCK-SAME:   -> tensor<64x128xf32>
//       BLOCK:   %[[XQ:.+]], %[[XS:.+]] = tec.quantize_blocks %arg0 {block = array<i64: 1, 128>, scale_type = "pow2"} : (tensor<64x256xf32>) -> (tensor<64x256xf8E4M3FN>, tensor<64x2xf32>)
//       BLOCK:   %[[WQ:.+]], %[[WS:.+]] = tec.quantize_blocks %arg1 {{.*}}block = array<i64: 1, 128>{{.*}} -> (tensor<128x256xf8E4M3FN>, tensor<128x2xf32>)
//       BLOCK:   tec.fp8_block_gemm %[[XQ]], %[[WQ]], %[[XS]], %[[WS]], %arg2 {epilogue = "relu", input_block = array<i64: 1, 128>, tec.precision = "E4M3 x E4M3, block scaling 1x128 x 1x128, pow2 scales", transpose_b = true, weight_block = array<i64: 1, 128>}
// MX-LABEL: func @forward
//       MX:   tec.quantize_blocks %arg0 {{.*}}block = array<i64: 1, 32>, scale_type = "e8m0"{{.*}} -> (tensor<64x256xf8E4M3FN>, tensor<64x8xf32>)
//       MX:   tec.fp8_block_gemm {{.*}}tec.precision = "E4M3 x E4M3, MXFP8 1x32 x 1x32, E8M0 scales"
// AUTO100-LABEL: func @forward
//       AUTO100:   tec.fp8_block_gemm {{.*}}tec.precision = "E4M3 x E4M3, MXFP8 1x32 x 1x32, E8M0 scales"
// AUTO90-LABEL: func @forward
//       AUTO90:   tec.fp8_block_gemm {{.*}}tec.precision = "E4M3 x E4M3, block scaling 1x128 x 1x128, pow2 scales"
// AUTO89-LABEL: func @forward
//       AUTO89:   tec.fp8_gemm {{.*}}tec.precision = "E4M3 x E4M3, current scaling"
// AUTOCPU-LABEL: func @forward
//       AUTOCPU:   tec.fp8_block_gemm {{.*}}tec.precision = "E4M3 x E4M3, block scaling 1x128 x 1x128, pow2 scales"
// HOPPER-LABEL: func @forward
//       HOPPER:   tec.fp8_block_gemm {{.*}}tec.precision = "E4M3 x E4M3, block scaling 1x128 x 1x128, pow2 scales (mxfp8: needs sm_100 (Blackwell))"
// ADA-LABEL: func @forward
//       ADA:   tec.fp8_gemm {{.*}}tec.precision = "E4M3 x E4M3, current scaling (mxfp8: needs sm_100 (Blackwell); block: needs sm_90 (Hopper))"
func.func @forward(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xf32>) -> tensor<64x128xf32> {
  %0 = tec.linear %x, %w, %b {epilogue = "relu", transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32> loc("fc1")
  return %0 : tensor<64x128xf32>
}

// -----

// A training layer under block scaling: every GEMM reads both operands K-major (cuBLASLt's block scale
// modes take only that), a [K, N] operand quantized from its transpose in place: the parameter in 128x128
// tiles, the gradient in 1x128 blocks for dgrad and, transposed, 1x128 along the batch for wgrad, the
// activation quantized again from itself, transposed, for wgrad: copies from high precision, none from FP8.
// The per-layer recipe keeps fc2 in delayed scaling; fc1 (reading the same tensors) is block-scaled.
// BLOCK-LABEL: func @training
//       BLOCK:   %[[HQ:.+]], %[[HS:.+]] = tec.quantize_blocks %arg0 {{.*}}block = array<i64: 1, 128>{{.*}} : (tensor<256x128xf32>) -> (tensor<256x128xf8E4M3FN>, tensor<256x1xf32>)
//  BLOCK-NEXT:   %[[HT:.+]], %[[HTS:.+]] = tec.quantize_blocks %arg0 {{.*}}block = array<i64: 1, 128>{{.*}}transpose_input = true} : (tensor<256x128xf32>) -> (tensor<128x256xf8E4M3FN>, tensor<128x2xf32>)
//       BLOCK:   %[[WT:.+]], %{{.+}} = tec.quantize_blocks %arg1 {{.*}}block = array<i64: 128, 128>{{.*}}transpose_input = true} : (tensor<128x32xf32>) -> (tensor<32x128xf8E4M3FN>, tensor<1x1xf32>)
//       BLOCK:   tec.fp8_block_gemm %[[HQ]], %[[WT]], {{.*}}transpose_b = true
//       BLOCK:   %[[DYQ:.+]], %{{.+}} = tec.quantize_blocks %arg2 {{.*}}block = array<i64: 1, 128>{{.*}} -> (tensor<256x32xf8E4M3FN>, tensor<256x1xf32>)
//  BLOCK-NEXT:   %[[DYT:.+]], %{{.+}} = tec.quantize_blocks %arg2 {{.*}}block = array<i64: 1, 128>{{.*}}transpose_input = true} : (tensor<256x32xf32>) -> (tensor<32x256xf8E4M3FN>, tensor<32x2xf32>)
//       BLOCK:   %[[WQ:.+]], %{{.+}} = tec.quantize_blocks %arg1 {{.*}}block = array<i64: 128, 128>{{.*}} : (tensor<128x32xf32>) -> (tensor<128x32xf8E4M3FN>, tensor<1x1xf32>)
//       BLOCK:   tec.fp8_block_gemm %[[DYQ]], %[[WQ]], {{.*}}tec.gemm_role = "dgrad"{{.*}}transpose_b = true
//       BLOCK:   tec.fp8_block_gemm %[[HT]], %[[DYT]], {{.*}}input_block = array<i64: 1, 128>, {{.*}}transpose_b = true, weight_block = array<i64: 1, 128>
//   BLOCK-NOT:   tec.transpose %arg1
// LAYER-LABEL: func @training
//       LAYER:   tec.fp8_gemm {{.*}}"E4M3 x E4M3, delayed scaling"
//       LAYER:   tec.fp8_block_gemm {{.*}}"E4M3 x E4M3, block scaling 1x128 x 128x128, pow2 scales"
func.func @training(%h: tensor<256x128xf32>, %w: tensor<128x32xf32> {tec.param = "fc2.weight"}, %dy: tensor<256x32xf32>) -> (tensor<256x32xf32>, tensor<256x128xf32>, tensor<128x32xf32>, tensor<256x32xf32>) {
  %y = tec.linear %h, %w : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32> loc("fc2")
  %dh = tec.linear %dy, %w {tec.gemm_role = "dgrad", tec.grad_operand = 0 : i64, transpose_b = true} : (tensor<256x32xf32>, tensor<128x32xf32>) -> tensor<256x128xf32> loc("fc2")
  %ht = tec.transpose %h {perm = array<i64: 1, 0>} : tensor<256x128xf32> -> tensor<128x256xf32>
  %dw = tec.linear %ht, %dy {tec.gemm_role = "wgrad", tec.grad_operand = 1 : i64} : (tensor<128x256xf32>, tensor<256x32xf32>) -> tensor<128x32xf32> loc("fc2")
  %z = tec.linear %h, %w : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32> loc("fc1")
  return %y, %dh, %dw, %z : tensor<256x32xf32>, tensor<256x128xf32>, tensor<128x32xf32>, tensor<256x32xf32>
}
