// RUN: tec-opt %s --tec-fuse-linear --split-input-file | FileCheck %s
// RUN: tec-opt %s --tec-fuse-linear=fast-gelu --split-input-file | FileCheck %s --check-prefix=FAST

// CHECK-LABEL: func @gemm_transb_bias_relu
//       CHECK:   %[[Y:.+]] = tec.linear %arg0, %arg1, %arg2 {epilogue = "relu", transpose_b = true}
//  CHECK-SAME:     : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32>
//   CHECK-NOT:   tec.relu
//       CHECK:   return %[[Y]]
func.func @gemm_transb_bias_relu(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xf32>) -> tensor<64x128xf32> {
  %0 = tec.gemm %x, %w, %b {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %1 = tec.relu %0 : tensor<64x128xf32>
  return %1 : tensor<64x128xf32>
}

// -----

// MatMul + Add (bias first or second) + erf GELU: the exact GELU epilogue, or the tanh one with fast-gelu.
// CHECK-LABEL: func @matmul_bias_gelu
//       CHECK:   tec.linear %arg0, %arg1, %arg2 {epilogue = "gelu"} : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32>
//   CHECK-NOT:   tec.add
//   CHECK-NOT:   tec.gelu
// FAST-LABEL: func @matmul_bias_gelu
//       FAST:   tec.linear %arg0, %arg1, %arg2 {epilogue = "gelu_tanh"}
func.func @matmul_bias_gelu(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>, %b: tensor<256xf32>) -> tensor<2x16x256xf32> {
  %0 = tec.matmul %x, %w : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
  %1 = tec.add %b, %0 : (tensor<256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %2 = tec.gelu %1 : tensor<2x16x256xf32>
  return %2 : tensor<2x16x256xf32>
}

// -----

// A tanh GELU is cuBLASLt's epilogue as it is.
// CHECK-LABEL: func @matmul_gelu_tanh
//       CHECK:   tec.linear %arg0, %arg1 {epilogue = "gelu_tanh"}
func.func @matmul_gelu_tanh(%x: tensor<8x64xf32>, %w: tensor<64x32xf32>) -> tensor<8x32xf32> {
  %0 = tec.matmul %x, %w : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
  %1 = tec.gelu %0 {approximate = "tanh"} : tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// -----

// A [1, N] bias rides in the epilogue after a reshape to [N].
// CHECK-LABEL: func @gemm_row_vector_bias
//       CHECK:   %[[B:.+]] = tec.reshape %arg2 : tensor<1x128xf32> -> tensor<128xf32>
//       CHECK:   tec.linear %arg0, %arg1, %[[B]] {transpose_b = true}
func.func @gemm_row_vector_bias(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<1x128xf32>) -> tensor<64x128xf32> {
  %0 = tec.gemm %x, %w, %b {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<1x128xf32>) -> tensor<64x128xf32>
  return %0 : tensor<64x128xf32>
}

// -----

// A bias that broadcasts along rows cannot ride in the epilogue.
// CHECK-LABEL: func @row_bias_not_fused
//       CHECK:   %[[L:.+]] = tec.linear %arg0, %arg1 :
//       CHECK:   tec.add %[[L]], %arg2
func.func @row_bias_not_fused(%x: tensor<64x256xf32>, %w: tensor<256x128xf32>, %b: tensor<64x1xf32>) -> tensor<64x128xf32> {
  %0 = tec.matmul %x, %w : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
  %1 = tec.add %0, %b : (tensor<64x128xf32>, tensor<64x1xf32>) -> tensor<64x128xf32>
  return %1 : tensor<64x128xf32>
}

// -----

// Gemm with alpha != 1, or a transposed A, is not a linear layer.
// CHECK-LABEL: func @gemm_not_linear
//       CHECK:   tec.gemm %arg0, %arg1 {alpha = 2.000000e+00
//       CHECK:   tec.gemm %arg2, %arg1 {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, trans_a = true
//   CHECK-NOT:   tec.linear
func.func @gemm_not_linear(%x: tensor<64x256xf32>, %w: tensor<256x128xf32>, %xt: tensor<256x64xf32>) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %0 = tec.gemm %x, %w {alpha = 2.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = false} : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
  %1 = tec.gemm %xt, %w {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = true, trans_b = false} : (tensor<256x64xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
  return %0, %1 : tensor<64x128xf32>, tensor<64x128xf32>
}

// -----

// Attention's batched MatMul (both operands activations with batch dims) stays a matmul.
// CHECK-LABEL: func @batched_matmul_stays
//       CHECK:   tec.matmul
//   CHECK-NOT:   tec.linear
func.func @batched_matmul_stays(%q: tensor<2x4x16x16xf32>, %k: tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32> {
  %0 = tec.matmul %q, %k : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  return %0 : tensor<2x4x16x16xf32>
}

// -----

// The pre-activation is also returned: the ReLU cannot be folded into the epilogue.
// CHECK-LABEL: func @shared_result_not_fused
//       CHECK:   %[[L:.+]] = tec.linear %arg0, %arg1 :
//       CHECK:   tec.relu %[[L]]
func.func @shared_result_not_fused(%x: tensor<8x64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %0 = tec.matmul %x, %w : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
  %1 = tec.relu %0 : tensor<8x32xf32>
  return %1, %0 : tensor<8x32xf32>, tensor<8x32xf32>
}

// -----

// An output layer tied to the embedding: MatMul by the table's transpose reads the table in place.
// CHECK-LABEL: func @tied_output_layer
//       CHECK:   %[[Y:.+]] = tec.linear %arg0, %arg1 {transpose_b = true}
//   CHECK-NOT:   tec.transpose
//       CHECK:   return %[[Y]]
func.func @tied_output_layer(%h: tensor<2x8x32xf32>, %table: tensor<64x32xf32>) -> tensor<2x8x64xf32> {
  %t = tec.transpose %table {perm = array<i64: 1, 0>} : tensor<64x32xf32> -> tensor<32x64xf32>
  %y = tec.matmul %h, %t : (tensor<2x8x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}
