// RUN: tec-opt %s --tec-fuse-quantize --split-input-file | FileCheck %s

// A LayerNorm read only by its amax and its quantize, and a GELU likewise: each becomes one fused op that
// quantizes as it computes; the GELU's output and the LayerNorm's are never stored.
// CHECK-LABEL: func @layer_norm_and_gelu
//       CHECK:   %[[Q:.+]], %[[A:.+]], %[[M:.+]], %[[R:.+]] = tec.layer_norm_fp8 %arg0, %arg3, %arg1, %arg2 {axis = 1 : i64, epsilon = 9.99999974E-6 : f32}
//       CHECK:   %[[H:.+]] = tec.fp8_gemm %[[Q]]
//       CHECK:   %[[G:.+]], %[[GA:.+]] = tec.cast_fp8 %[[H]], %arg4 {activation = "gelu"}
//   CHECK-NOT:   tec.layer_norm %
//   CHECK-NOT:   tec.gelu
//       CHECK:   return %[[G]], %[[A]], %[[GA]], %[[M]], %[[R]]
func.func @layer_norm_and_gelu(%x: tensor<16x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %s: tensor<f32>, %s2: tensor<f32>, %w: tensor<32x32xf8E4M3FN>, %si: tensor<f32>) -> (tensor<16x32xf8E4M3FN>, tensor<f32>, tensor<f32>, tensor<16x1xf32>, tensor<16x1xf32>) {
  %y, %mean, %rstd = tec.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<16x1xf32>, tensor<16x1xf32>)
  %a = tec.amax %y : tensor<16x32xbf16> -> tensor<f32>
  %q = tec.quantize %y, %s : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
  %h = tec.fp8_gemm %q, %w, %si, %si {transpose_b = true} : (tensor<16x32xf8E4M3FN>, tensor<32x32xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<16x32xbf16>
  %gelu = tec.gelu %h : tensor<16x32xbf16>
  %ga = tec.amax %gelu : tensor<16x32xbf16> -> tensor<f32>
  %gq = tec.quantize %gelu, %s2 : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
  return %gq, %a, %ga, %mean, %rstd : tensor<16x32xf8E4M3FN>, tensor<f32>, tensor<f32>, tensor<16x1xf32>, tensor<16x1xf32>
}

// -----

// A wgrad's transposed FP8 copy, quantized with the scale of the forward's copy, is that copy transposed.
// CHECK-LABEL: func @transposed_copy
//       CHECK:   %[[Q:.+]] = tec.quantize %arg0, %arg1 : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
//       CHECK:   %[[T:.+]] = tec.transpose %[[Q]] {perm = array<i64: 1, 0>} : tensor<16x32xf8E4M3FN> -> tensor<32x16xf8E4M3FN>
//       CHECK:   return %[[Q]], %[[T]]
func.func @transposed_copy(%y: tensor<16x32xbf16>, %s: tensor<f32>) -> (tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>) {
  %q = tec.quantize %y, %s : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
  %t = tec.quantize %y, %s {transpose_input = true} : (tensor<16x32xbf16>, tensor<f32>) -> tensor<32x16xf8E4M3FN>
  return %q, %t : tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>
}

// -----

// A GELU output read by anything else stays: the fusion would have to store it anyway.
// CHECK-LABEL: func @gelu_read_elsewhere
//       CHECK:   tec.gelu
//       CHECK:   tec.quantize
//   CHECK-NOT:   tec.cast_fp8
func.func @gelu_read_elsewhere(%h: tensor<16x32xbf16>, %s: tensor<f32>) -> (tensor<16x32xf8E4M3FN>, tensor<f32>, tensor<16x32xbf16>) {
  %gelu = tec.gelu %h : tensor<16x32xbf16>
  %a = tec.amax %gelu : tensor<16x32xbf16> -> tensor<f32>
  %q = tec.quantize %gelu, %s : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
  return %q, %a, %gelu : tensor<16x32xf8E4M3FN>, tensor<f32>, tensor<16x32xbf16>
}

// -----

// A GEMM output's gradient read by its amax, its quantize (the dgrad's E5M2 operand) and the bias
// gradient's sum: one tec.cast_fp8_dbias where the first of them was.
// CHECK-LABEL: func @bias_gradient
//       CHECK:   %[[Q:.+]], %[[A:.+]], %[[DB:.+]] = tec.cast_fp8_dbias %arg0, %arg1 : (tensor<16x32xbf16>, tensor<f32>) -> (tensor<16x32xf8E5M2>, tensor<f32>, tensor<32xf32>)
//   CHECK-NOT:   tec.reduce_sum
//       CHECK:   return %[[Q]], %[[A]], %[[DB]]
func.func @bias_gradient(%dy: tensor<16x32xbf16>, %s: tensor<f32>) -> (tensor<16x32xf8E5M2>, tensor<f32>, tensor<32xf32>) {
  %a = tec.amax %dy : tensor<16x32xbf16> -> tensor<f32>
  %q = tec.quantize %dy, %s : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E5M2>
  %db = tec.reduce_sum %dy {axes = array<i64: 0>, keepdims = false} : tensor<16x32xbf16> -> tensor<32xf32>
  return %q, %a, %db : tensor<16x32xf8E5M2>, tensor<f32>, tensor<32xf32>
}
