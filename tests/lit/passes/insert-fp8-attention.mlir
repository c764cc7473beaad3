// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=4 attention" | FileCheck %s
// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=4" | FileCheck %s --check-prefix=OFF
// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=4 attention" --tec-lower-for-target=target=sm_80 | FileCheck %s --check-prefix=SM80

// --fp8-attention (Transformer Engine's fp8_dpa): the forward attention reads Q, K and V quantized to
// E4M3, with the probabilities and the output scaled too, and its readers get the output dequantized;
// the gradient reads the forward's FP8 tensors (not the 32-bit ones), the output gradient in E5M2, and
// yields dQ, dK and dV in E5M2 for their dequantizes. Every scaled tensor has its delayed scaling.
// CHECK-LABEL: func @attention_step
//  CHECK-SAME:   {tec.state = "attn/query/scale"
//  CHECK-SAME:   {tec.state = "attn/probs/scale"
//  CHECK-SAME:   {tec.state = "attn/result/scale"
//  CHECK-SAME:   {tec.state = "attn/grad/output/scale"
//  CHECK-SAME:   {tec.state = "attn/grad/dprobs/scale"
//  CHECK-SAME:   {tec.state = "attn/grad/value/scale"
//       CHECK:   %[[Q:.+]] = tec.quantize %arg0, %{{.+}} : (tensor<1x2x32x16xf32>, tensor<f32>) -> tensor<1x2x32x16xf8E4M3FN>
//       CHECK:   %[[K:.+]] = tec.quantize %arg1
//       CHECK:   %[[V:.+]] = tec.quantize %arg2
//       CHECK:   %[[O:[a-z_0-9]+]], %[[LSE:[a-z_0-9]+]], %[[PA:[a-z_0-9]+]], %[[OA:[a-z_0-9]+]] = tec.attention_fp8 %[[Q]], %[[K]], %[[V]] scales({{.+}}) {causal = true, scale = 2.500000e-01 : f32}
//       CHECK:   %[[OUT:.+]] = tec.dequantize %[[O]], %{{.+}} : (tensor<1x2x32x16xf8E4M3FN>, tensor<f32>) -> tensor<1x2x32x16xf32>
//       CHECK:   %[[DO:.+]] = tec.quantize %arg3, %{{.+}} : (tensor<1x2x32x16xf32>, tensor<f32>) -> tensor<1x2x32x16xf8E5M2>
//       CHECK:   %[[DQ:[a-z_0-9]+]], %[[DK:[a-z_0-9]+]], %[[DV:[a-z_0-9]+]], {{.+}} = tec.attention_fp8_grad %[[DO]], %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]] scales
//  CHECK-SAME:   -> (tensor<1x2x32x16xf8E5M2>, tensor<1x2x32x16xf8E5M2>, tensor<1x2x32x16xf8E5M2>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>)
//       CHECK:   tec.dequantize %[[DQ]]
//       CHECK:   tec.dequantize %[[DK]]
//       CHECK:   tec.dequantize %[[DV]]
//       CHECK:   tec.delayed_scaling {{.+}}, %[[PA]] {fp8_max = 4.480000e+02 : f32
//       CHECK:   tec.delayed_scaling {{.+}}, %[[OA]] {fp8_max = 4.480000e+02 : f32
//       CHECK:   tec.delayed_scaling {{.+}} {fp8_max = 5.734400e+04 : f32
//       CHECK:   return %[[OUT]],
// Without it attention stays as it was.
// OFF-LABEL: func @attention_step
//   OFF-NOT:   tec.quantize
//       OFF:   tec.attention %arg0
//       OFF:   tec.attention_grad
// A target without FP8 computes attention as before from what the quantizes read; no FP8 state is left.
// SM80-LABEL: func @attention_step
//   SM80-NOT:   tec.state
//       SM80:   %[[O:[a-z_0-9]+]], %[[LSE:[a-z_0-9]+]] = tec.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f32}
//       SM80:   tec.attention_grad %arg3, %arg0, %arg1, %arg2, %[[O]], %[[LSE]]
//   SM80-NOT:   fp8
//       SM80:   return
func.func @attention_step(%q: tensor<1x2x32x16xf32>, %k: tensor<1x2x32x16xf32>, %v: tensor<1x2x32x16xf32>,
                          %do: tensor<1x2x32x16xf32>)
    -> (tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>) {
  %o, %lse = tec.attention %q, %k, %v {scale = 0.25 : f32, causal = true}
      : (tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>)
      -> (tensor<1x2x32x16xf32>, tensor<1x2x32xf32>) loc("attn")
  %dq, %dk, %dv = tec.attention_grad %do, %q, %k, %v, %o, %lse {scale = 0.25 : f32, causal = true}
      : (tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>,
         tensor<1x2x32x16xf32>, tensor<1x2x32xf32>)
      -> (tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>) loc("attn")
  return %o, %dq, %dk, %dv : tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>
}
