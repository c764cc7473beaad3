// RUN: tec-opt %s --tec-autodiff --verify-diagnostics

// An active op without a gradient is an error that names it.
func.func @forward(%a: tensor<4x8xf32> {tec.param = "a"}, %b: tensor<8x6xf32>) -> tensor<4x6xf32> {
  // expected-error@+1 {{'tec.gemm' has no gradient: tec cannot train through it}}
  %0 = tec.gemm %a, %b {alpha = 2.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = false} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}
