// RUN: tec-opt %s --tec-recognize-patterns --split-input-file | FileCheck %s

// The torch.onnx.export form: x * (1 + erf(x / sqrt(2))) * 0.5.
// CHECK-LABEL: func @gelu_erf_div
//       CHECK:   %[[G:.+]] = tec.gelu %arg0 : tensor<4x8xf32>
//   CHECK-NOT:   tec.erf
//       CHECK:   return %[[G]]
func.func @gelu_erf_div(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %sqrt2 = tec.constant dense<1.41421354> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.div %x, %sqrt2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = tec.erf %0 : tensor<4x8xf32>
  %2 = tec.add %1, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = tec.mul %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tec.mul %3, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// Another association and operand order, and x * (1/sqrt(2)) instead of x / sqrt(2).
// CHECK-LABEL: func @gelu_erf_mul_reordered
//       CHECK:   tec.gelu %arg0 : tensor<4x8xf32>
//   CHECK-NOT:   tec.erf
func.func @gelu_erf_mul_reordered(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %inv = tec.constant dense<0.707106769> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.mul %inv, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tec.erf %0 : tensor<4x8xf32>
  %2 = tec.add %one, %1 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tec.mul %half, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tec.mul %2, %3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// The tanh approximation with Pow(x, 3): becomes gelu {approximate = "tanh"}.
// CHECK-LABEL: func @gelu_tanh_pow
//       CHECK:   tec.gelu %arg0 {approximate = "tanh"} : tensor<4x8xf32>
//   CHECK-NOT:   tec.tanh
func.func @gelu_tanh_pow(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %three = tec.constant dense<3.0> : tensor<f32>
  %k = tec.constant dense<0.044715> : tensor<f32>
  %c = tec.constant dense<0.797884583> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = tec.mul %0, %k : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = tec.add %x, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tec.mul %c, %2 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tec.tanh %3 : tensor<4x8xf32>
  %5 = tec.add %4, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %6 = tec.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %7 = tec.mul %6, %5 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %7 : tensor<4x8xf32>
}

// -----

// BLOOM's and Falcon's factored form: x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x))).
// CHECK-LABEL: func @gelu_tanh_factored
//       CHECK:   tec.gelu %arg0 {approximate = "tanh"} : tensor<4x8xf32>
//   CHECK-NOT:   tec.tanh
func.func @gelu_tanh_factored(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %k = tec.constant dense<0.044715> : tensor<f32>
  %c = tec.constant dense<0.79788456> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.mul %k, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tec.mul %0, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tec.add %one, %1 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tec.mul %c, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tec.mul %3, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = tec.tanh %4 : tensor<4x8xf32>
  %6 = tec.add %one, %5 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = tec.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %8 = tec.mul %7, %6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}

// -----

// The factored form with another inner constant is no GELU: left alone.
// CHECK-LABEL: func @not_gelu_factored
//       CHECK:   tec.tanh
func.func @not_gelu_factored(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %k = tec.constant dense<0.5> : tensor<f32>
  %c = tec.constant dense<0.79788456> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.mul %k, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tec.mul %0, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tec.add %one, %1 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tec.mul %c, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tec.mul %3, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = tec.tanh %4 : tensor<4x8xf32>
  %6 = tec.add %one, %5 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = tec.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %8 = tec.mul %7, %6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}

// -----

// The cube written as x * (x * x).
// CHECK-LABEL: func @gelu_tanh_mul_cube
//       CHECK:   tec.gelu %arg0 {approximate = "tanh"}
func.func @gelu_tanh_mul_cube(%x: tensor<8xf32>) -> tensor<8xf32> {
  %k = tec.constant dense<0.044715> : tensor<f32>
  %c = tec.constant dense<0.797884583> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %sq = tec.mul %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %0 = tec.mul %x, %sq : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = tec.mul %k, %0 : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %2 = tec.add %1, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %3 = tec.mul %2, %c : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %4 = tec.tanh %3 : tensor<8xf32>
  %5 = tec.add %one, %4 : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %6 = tec.mul %5, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %7 = tec.mul %half, %6 : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  return %7 : tensor<8xf32>
}

// -----

// A constant that is not 0.5 is not GELU.
// CHECK-LABEL: func @not_gelu_wrong_constant
//       CHECK:   tec.erf
//   CHECK-NOT:   tec.gelu
func.func @not_gelu_wrong_constant(%x: tensor<8xf32>) -> tensor<8xf32> {
  %sqrt2 = tec.constant dense<1.41421354> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %c = tec.constant dense<0.6> : tensor<f32>
  %0 = tec.div %x, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %1 = tec.erf %0 : tensor<8xf32>
  %2 = tec.add %1, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %3 = tec.mul %x, %2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = tec.mul %3, %c : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %4 : tensor<8xf32>
}

// -----

// erf's argument is scaled from another tensor than the factor: not GELU.
// CHECK-LABEL: func @not_gelu_different_input
//       CHECK:   tec.erf
//   CHECK-NOT:   tec.gelu
func.func @not_gelu_different_input(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {
  %sqrt2 = tec.constant dense<1.41421354> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.div %y, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %1 = tec.erf %0 : tensor<8xf32>
  %2 = tec.add %1, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %3 = tec.mul %x, %2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = tec.mul %3, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %4 : tensor<8xf32>
}

// -----

// The erf result is also returned: it must stay materialized, so nothing is fused.
// CHECK-LABEL: func @not_gelu_shared_intermediate
//       CHECK:   tec.erf
//   CHECK-NOT:   tec.gelu
func.func @not_gelu_shared_intermediate(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %sqrt2 = tec.constant dense<1.41421354> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %half = tec.constant dense<0.5> : tensor<f32>
  %0 = tec.div %x, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %1 = tec.erf %0 : tensor<8xf32>
  %2 = tec.add %1, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %3 = tec.mul %x, %2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = tec.mul %3, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %4, %1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// LayerNorm over the last dim, as exporters write it (Pow form), gamma and beta on the right.
// CHECK-LABEL: func @layer_norm_pow
//       CHECK:   %[[Y:.+]], %{{.+}}, %{{.+}} = tec.layer_norm %arg0, %arg1, %arg2 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
//  CHECK-SAME:     -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>)
//   CHECK-NOT:   tec.reduce_mean
//       CHECK:   return %[[Y]]
func.func @layer_norm_pow(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = tec.constant dense<2.0> : tensor<f32>
  %eps = tec.constant dense<1.0e-05> : tensor<f32>
  %mean = tec.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %d = tec.sub %x, %mean : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %sq = tec.pow %d, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %var = tec.reduce_mean %sq {axes = array<i64: 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %ve = tec.add %var, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %std = tec.sqrt %ve : tensor<2x4x1xf32>
  %n = tec.div %d, %std : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %s = tec.mul %n, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %y = tec.add %s, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// d * d for the square, eps on the left, gamma and beta on the left, over the last two dims.
// CHECK-LABEL: func @layer_norm_mul_square_two_dims
//       CHECK:   tec.layer_norm %arg0, %arg1, %arg2 {axis = 1 : i64, epsilon = 1.000000e-03 : f32}
func.func @layer_norm_mul_square_two_dims(%x: tensor<2x4x8xf32>, %g: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %eps = tec.constant dense<1.0e-03> : tensor<f32>
  %mean = tec.reduce_mean %x {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %d = tec.sub %x, %mean : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  %sq = tec.mul %d, %d : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %var = tec.reduce_mean %sq {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %ve = tec.add %eps, %var : (tensor<f32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %std = tec.sqrt %ve : tensor<2x1x1xf32>
  %n = tec.div %d, %std : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  %s = tec.mul %g, %n : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = tec.add %b, %s : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Normalizing over a leading dim is not LayerNorm.
// CHECK-LABEL: func @not_layer_norm_leading_axis
//   CHECK-NOT:   tec.layer_norm
func.func @not_layer_norm_leading_axis(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = tec.constant dense<2.0> : tensor<f32>
  %eps = tec.constant dense<1.0e-05> : tensor<f32>
  %mean = tec.reduce_mean %x {axes = array<i64: 0>, keepdims = true} : tensor<4x8xf32> -> tensor<1x8xf32>
  %d = tec.sub %x, %mean : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %sq = tec.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %var = tec.reduce_mean %sq {axes = array<i64: 0>, keepdims = true} : tensor<4x8xf32> -> tensor<1x8xf32>
  %ve = tec.add %var, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %std = tec.sqrt %ve : tensor<1x8xf32>
  %n = tec.div %d, %std : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %s = tec.mul %n, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = tec.add %s, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A gamma that is not shaped like the normalized dims (here per row) is not LayerNorm's scale.
// CHECK-LABEL: func @not_layer_norm_row_gamma
//   CHECK-NOT:   tec.layer_norm
func.func @not_layer_norm_row_gamma(%x: tensor<4x8xf32>, %g: tensor<4x1xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %two = tec.constant dense<2.0> : tensor<f32>
  %eps = tec.constant dense<1.0e-05> : tensor<f32>
  %mean = tec.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = tec.sub %x, %mean : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %sq = tec.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %var = tec.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = tec.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %std = tec.sqrt %ve : tensor<4x1xf32>
  %n = tec.div %d, %std : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %s = tec.mul %n, %g : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = tec.add %s, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// SiLU in either operand order; a sigmoid used elsewhere stays.
// CHECK-LABEL: func @silu
//       CHECK:   %[[A:.+]] = tec.silu %arg0 : tensor<4x8xf32>
//       CHECK:   %[[S:.+]] = tec.sigmoid %arg1
//       CHECK:   tec.mul %arg1, %[[S]]
func.func @silu(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = tec.sigmoid %x : tensor<4x8xf32>
  %0 = tec.mul %s, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = tec.sigmoid %y : tensor<4x8xf32>
  %1 = tec.mul %y, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %t : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// SwiGLU (Llama's MLP): the SiLU of the gate times the up projection, in either order; a SiLU used
// elsewhere, or an up projection that broadcasts, stays a product.
// CHECK-LABEL: func @swiglu
//       CHECK:   %[[A:.+]] = tec.swiglu %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
//       CHECK:   %[[S:.+]] = tec.silu %arg1
//       CHECK:   tec.mul %[[S]], %arg0
//       CHECK:   tec.swiglu %arg0, %arg2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
//       CHECK:   tec.mul %{{.*}}, %arg3 : (tensor<4x8xf32>, tensor<8xf32>)
func.func @swiglu(%g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %v: tensor<4x8xf32>, %w: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %sg = tec.sigmoid %g : tensor<4x8xf32>
  %silu = tec.mul %g, %sg : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = tec.mul %silu, %u : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %su = tec.sigmoid %u : tensor<4x8xf32>
  %shared = tec.mul %u, %su : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tec.mul %shared, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s2 = tec.sigmoid %g : tensor<4x8xf32>
  %silu2 = tec.mul %s2, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tec.mul %v, %silu2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s3 = tec.sigmoid %v : tensor<4x8xf32>
  %silu3 = tec.mul %s3, %v : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tec.mul %silu3, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0, %1, %shared, %2, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// RMSNorm as the TorchScript exporter writes Llama's: Pow(x, 2), ReduceMean, Add eps, Sqrt, 1 / sqrt,
// x * r, then the weight on the left.
// CHECK-LABEL: func @rms_norm_div_one
//       CHECK:   %[[N:[^,]+]], %{{.*}} = tec.rms_norm %arg0, %arg1 {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>)
//   CHECK-NOT:   tec.sqrt
//       CHECK:   return %[[N]] :
func.func @rms_norm_div_one(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %two = tec.constant dense<2.0> : tensor<f32>
  %eps = tec.constant dense<1.0e-06> : tensor<f32>
  %one = tec.constant dense<1.0> : tensor<f32>
  %0 = tec.pow %x, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %1 = tec.reduce_mean %0 {axes = array<i64: 2>, keepdims = true} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %2 = tec.add %1, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %3 = tec.sqrt %2 : tensor<2x3x1xf32>
  %4 = tec.div %one, %3 : (tensor<f32>, tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %5 = tec.mul %x, %4 : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %6 = tec.mul %w, %5 : (tensor<8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %6 : tensor<2x3x8xf32>
}

// -----

// The dynamo exporter's form (Reciprocal, rsqrt on the left of x), x * x as the square, and the weight
// on the right.
// CHECK-LABEL: func @rms_norm_reciprocal
//       CHECK:   tec.rms_norm %arg0, %arg1 {axis = 1 : i64, epsilon = 9.99999974E-6 : f32}
//   CHECK-NOT:   tec.reciprocal
func.func @rms_norm_reciprocal(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %eps = tec.constant dense<1.0e-05> : tensor<f32>
  %0 = tec.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tec.reduce_mean %0 {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %2 = tec.add %eps, %1 : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %3 = tec.sqrt %2 : tensor<4x1xf32>
  %4 = tec.reciprocal %3 : tensor<4x1xf32>
  %5 = tec.mul %4, %x : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = tec.mul %5, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %6 : tensor<4x8xf32>
}

// -----

// x / sqrt(v) and Pow(v, -0.5) are the other inverse square roots.
// CHECK-LABEL: func @rms_norm_div_and_pow
//       CHECK:   tec.rms_norm %arg0, %arg1 {axis = 1 : i64
//       CHECK:   tec.rms_norm %arg0, %arg1 {axis = 1 : i64
//   CHECK-NOT:   tec.sqrt
//   CHECK-NOT:   tec.pow
func.func @rms_norm_div_and_pow(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %two = tec.constant dense<2.0> : tensor<f32>
  %eps = tec.constant dense<1.0e-05> : tensor<f32>
  %mhalf = tec.constant dense<-0.5> : tensor<f32>
  %0 = tec.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = tec.reduce_mean %0 {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %2 = tec.add %1, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %3 = tec.sqrt %2 : tensor<4x1xf32>
  %4 = tec.div %x, %3 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %5 = tec.mul %4, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %6 = tec.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %7 = tec.reduce_mean %6 {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %8 = tec.add %7, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %9 = tec.pow %8, %mhalf : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %10 = tec.mul %x, %9 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %11 = tec.mul %w, %10 : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %5, %11 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Not RMSNorm: a mean over a leading axis, a weight that is not the normalized shape, and a square of
// another tensor.
// CHECK-LABEL: func @not_rms_norm
//   CHECK-NOT:   tec.rms_norm
func.func @not_rms_norm(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8xf32>, %wrow: tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %two = tec.constant dense<2.0> : tensor<f32>
  %eps = tec.constant dense<1.0e-05> : tensor<f32>
  %0 = tec.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = tec.reduce_mean %0 {axes = array<i64: 0>, keepdims = true} : tensor<4x8xf32> -> tensor<1x8xf32>
  %2 = tec.add %1, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %3 = tec.sqrt %2 : tensor<1x8xf32>
  %4 = tec.div %x, %3 : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %5 = tec.mul %4, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %6 = tec.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %7 = tec.reduce_mean %6 {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %8 = tec.add %7, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %9 = tec.sqrt %8 : tensor<4x1xf32>
  %10 = tec.div %x, %9 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %11 = tec.mul %10, %wrow : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %12 = tec.pow %y, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %13 = tec.reduce_mean %12 {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %14 = tec.add %13, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %15 = tec.sqrt %14 : tensor<4x1xf32>
  %16 = tec.div %x, %15 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %17 = tec.mul %16, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %5, %11, %17 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Grouped-query attention (HF's repeat_kv): 2 K/V heads, each shared by 2 of the 4 query heads. Q·K^T and
// P·V read K and V once per group instead of once per query head: no expand is left.
// CHECK-LABEL: func @repeated_kv_heads
//   CHECK-NOT:   tec.expand
//       CHECK:   %[[K:.+]] = tec.reshape %arg1 : tensor<2x2x1x8x4xf32> -> tensor<2x2x8x4xf32>
//       CHECK:   %[[KT:.+]] = tec.transpose %[[K]] {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x8x4xf32> -> tensor<2x2x4x8xf32>
//       CHECK:   %[[Q:.+]] = tec.reshape %arg0 : tensor<2x4x8x4xf32> -> tensor<2x2x16x4xf32>
//       CHECK:   %[[S:.+]] = tec.matmul %[[Q]], %[[KT]] : (tensor<2x2x16x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x16x8xf32>
//       CHECK:   tec.reshape %[[S]] : tensor<2x2x16x8xf32> -> tensor<2x4x8x8xf32>
//       CHECK:   tec.matmul %{{.+}}, %{{.+}} : (tensor<2x2x16x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x16x4xf32>
//   CHECK-NOT:   tec.expand
func.func @repeated_kv_heads(%q: tensor<2x4x8x4xf32>, %k: tensor<2x2x1x8x4xf32>, %v: tensor<2x2x1x8x4xf32>) -> tensor<2x4x8x4xf32> {
  %0 = tec.expand %k : tensor<2x2x1x8x4xf32> -> tensor<2x2x2x8x4xf32>
  %1 = tec.reshape %0 : tensor<2x2x2x8x4xf32> -> tensor<2x4x8x4xf32>
  %2 = tec.transpose %1 {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x8x4xf32> -> tensor<2x4x4x8xf32>
  %3 = tec.matmul %q, %2 : (tensor<2x4x8x4xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x8x8xf32>
  %4 = tec.expand %v : tensor<2x2x1x8x4xf32> -> tensor<2x2x2x8x4xf32>
  %5 = tec.reshape %4 : tensor<2x2x2x8x4xf32> -> tensor<2x4x8x4xf32>
  %6 = tec.matmul %3, %5 : (tensor<2x4x8x8xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x4xf32>
  return %6 : tensor<2x4x8x4xf32>
}

// -----

// A repeat that the matmul's other operand does not line up with (its batch broadcasts) is left alone.
// CHECK-LABEL: func @repeat_not_lined_up
//       CHECK:   tec.expand
//       CHECK:   tec.matmul %arg0, %{{.+}} : (tensor<1x4x8x4xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x8x8xf32>
func.func @repeat_not_lined_up(%q: tensor<1x4x8x4xf32>, %k: tensor<2x2x1x4x8xf32>) -> tensor<2x4x8x8xf32> {
  %0 = tec.expand %k : tensor<2x2x1x4x8xf32> -> tensor<2x2x2x4x8xf32>
  %1 = tec.reshape %0 : tensor<2x2x2x4x8xf32> -> tensor<2x4x4x8xf32>
  %2 = tec.matmul %q, %1 : (tensor<1x4x8x4xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x8x8xf32>
  return %2 : tensor<2x4x8x8xf32>
}
