// RUN: tec-opt %s --tec-insert-fp8="fp8=all amax-history=16" --split-input-file | FileCheck %s
// RUN: tec-opt %s --tec-insert-fp8="fp8=auto" --split-input-file | FileCheck %s --check-prefix=AUTO
// RUN: tec-opt %s --tec-insert-fp8="fp8=all keep-precision=^fc1$" --split-input-file | FileCheck %s --check-prefix=KEEP
// RUN: tec-opt %s --tec-insert-fp8="fp8=none" --split-input-file | FileCheck %s --check-prefix=NONE

// An eligible GEMM: both operands quantized with their current scale, the FP8 GEMM takes the
// scale_invs, the amaxes feed delayed scaling at the end, and the state is explicit.
// CHECK-LABEL: func @eligible
//  CHECK-SAME:   %[[H:[a-z0-9]+]]: tensor<16xf32> {tec.state = "fc1/input/amax_history", tec.state_init = 0.000000e+00 : f32, tec.state_kind = "fp8"}
//  CHECK-SAME:   %[[S:[a-z0-9]+]]: tensor<f32> {tec.state = "fc1/input/scale", tec.state_init = 1.000000e+00 : f32, tec.state_kind = "fp8"}
//  CHECK-SAME:   %[[SI:[a-z0-9]+]]: tensor<f32> {tec.state = "fc1/input/scale_inv", tec.state_init = 1.000000e+00 : f32, tec.state_kind = "fp8"}
//  CHECK-SAME:   {tec.state = "fc1/weight/amax_history"
//  CHECK-SAME:   -> (tensor<64x128xf32>, tensor<16xf32> {tec.state_update = 3 : i64}, tensor<f32> {tec.state_update = 4 : i64}
//       CHECK:   %[[A:.+]] = tec.amax %arg0
//       CHECK:   %[[XQ:.+]] = tec.quantize %arg0, %[[S]] : (tensor<64x256xf32>, tensor<f32>) -> tensor<64x256xf8E4M3FN>
//       CHECK:   %[[WQ:.+]] = tec.quantize %arg1
//       CHECK:   %[[Y:.+]] = tec.fp8_gemm %[[XQ]], %[[WQ]], %[[SI]], %{{.+}}, %arg2 {epilogue = "relu", tec.precision = "E4M3 x E4M3, delayed scaling", transpose_b = true}
//   CHECK-NOT:   tec.linear
//       CHECK:   %{{.+}}, %{{.+}}, %{{.+}} = tec.delayed_scaling %[[H]], %[[S]], %[[A]] {fp8_max = 4.480000e+02 : f32}
//       CHECK:   return %[[Y]],
// NONE-LABEL: func @eligible
//   NONE-NOT:   tec.quantize
//       NONE:   tec.linear
func.func @eligible(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xf32>) -> tensor<64x128xf32> {
  %0 = tec.linear %x, %w, %b {epilogue = "relu", transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32> loc("fc1")
  return %0 : tensor<64x128xf32>
}

// -----

// N = 10 is not a multiple of 16: Hopper's FP8 GEMMs cannot take it. The reason is recorded.
// CHECK-LABEL: func @ineligible_dims
//   CHECK-NOT:   tec.quantize
//       CHECK:   tec.linear %arg0, %arg1 {tec.precision = "K=256, N=10: FP8 GEMMs need multiples of 16", transpose_b = true}
func.func @ineligible_dims(%x: tensor<64x256xf32>, %w: tensor<10x256xf32>) -> tensor<64x10xf32> {
  %0 = tec.linear %x, %w {transpose_b = true} : (tensor<64x256xf32>, tensor<10x256xf32>) -> tensor<64x10xf32> loc("head")
  return %0 : tensor<64x10xf32>
}

// -----

// Small GEMMs stay out of FP8 under --fp8=auto; large ones go in. --keep-precision matches node names.
// AUTO-LABEL: func @sizes
//       AUTO:   tec.linear %arg0, %arg1 {tec.precision = "64x128x256 is too small for FP8 to pay (--fp8=all forces it)"
//       AUTO:   tec.fp8_gemm
// KEEP-LABEL: func @sizes
//       KEEP:   tec.linear %arg0, %arg1 {tec.precision = "kept by --keep-precision (fc1)"
//       KEEP:   tec.fp8_gemm
func.func @sizes(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %big: tensor<512x1024xf32>, %wb: tensor<1024x1024xf32>) -> (tensor<64x128xf32>, tensor<512x1024xf32>) {
  %0 = tec.linear %x, %w {transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>) -> tensor<64x128xf32> loc("fc1")
  %1 = tec.linear %big, %wb : (tensor<512x1024xf32>, tensor<1024x1024xf32>) -> tensor<512x1024xf32> loc("fc2")
  return %0, %1 : tensor<64x128xf32>, tensor<512x1024xf32>
}

// -----

// Backward GEMMs from autodiff: under HYBRID the gradient operand is quantized to E5M2 (max 57344),
// the other to E4M3; their state is named by role.
// CHECK-LABEL: func @backward_gemms
//  CHECK-SAME:   {tec.state = "fc1/dgrad/grad/amax_history"
//  CHECK-SAME:   {tec.state = "fc1/dgrad/weight/amax_history"
//  CHECK-SAME:   {tec.state = "fc1/wgrad/grad/amax_history"
//  CHECK-SAME:   {tec.state = "fc1/wgrad/activation/amax_history"
//       CHECK:   tec.quantize %arg0, %{{.+}} : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf8E5M2>
//       CHECK:   tec.quantize %arg1, %{{.+}} : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf8E4M3FN>
//       CHECK:   tec.fp8_gemm {{.*}}tec.gemm_role = "dgrad", tec.precision = "E5M2 x E4M3, delayed scaling"
//       CHECK:   tec.fp8_gemm {{.*}}tec.gemm_role = "wgrad", tec.precision = "E5M2 x E4M3, delayed scaling"
//       CHECK:   tec.delayed_scaling {{.*}}fp8_max = 5.734400e+04 : f32
func.func @backward_gemms(%dy: tensor<64x128xf32>, %w: tensor<128x256xf32>, %dyt: tensor<128x64xf32>, %x: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<128x256xf32>) {
  %0 = tec.linear %dy, %w {tec.gemm_role = "dgrad", tec.grad_operand = 0 : i64} : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32> loc("fc1")
  %1 = tec.linear %dyt, %x {tec.gemm_role = "wgrad", tec.grad_operand = 0 : i64} : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32> loc("fc1")
  return %0, %1 : tensor<64x256xf32>, tensor<128x256xf32>
}

// -----

// A tensor two GEMMs read is quantized once per layout with one scale (Transformer Engine's recipe): the
// forward's activation %h and the wgrad's transposed view of it share fc2/input's scale, the transposed
// copy is made right after the forward's (so %h dies in the forward), the gradient %dy is one E5M2
// tensor for both backward GEMMs, and the weight is quantized per GEMM.
// CHECK-LABEL: func @shared_quantization
//       CHECK:   %[[HQ:.+]] = tec.quantize %arg0, %[[S:[a-z0-9]+]] : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf8E4M3FN>
//  CHECK-NEXT:   %[[HT:.+]] = tec.quantize %arg0, %[[S]] {transpose_input = true} : (tensor<64x128xf32>, tensor<f32>) -> tensor<128x64xf8E4M3FN>
//       CHECK:   tec.fp8_gemm %[[HQ]]
//       CHECK:   %[[DYQ:.+]] = tec.quantize %arg2, %{{.+}} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf8E5M2>
//       CHECK:   tec.quantize %arg1
//       CHECK:   tec.fp8_gemm %[[DYQ]], {{.*}}tec.gemm_role = "dgrad"
//       CHECK:   tec.fp8_gemm %[[HT]], %[[DYQ]], {{.*}}tec.gemm_role = "wgrad"
//   CHECK-NOT:   fc2/wgrad/activation
func.func @shared_quantization(%h: tensor<64x128xf32>, %w: tensor<128x32xf32> {tec.param = "fc2.weight"}, %dy: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64x128xf32>, tensor<128x32xf32>) {
  %y = tec.linear %h, %w : (tensor<64x128xf32>, tensor<128x32xf32>) -> tensor<64x32xf32> loc("fc2")
  %dh = tec.linear %dy, %w {tec.gemm_role = "dgrad", tec.grad_operand = 0 : i64, transpose_b = true} : (tensor<64x32xf32>, tensor<128x32xf32>) -> tensor<64x128xf32> loc("fc2")
  %ht = tec.transpose %h {perm = array<i64: 1, 0>} : tensor<64x128xf32> -> tensor<128x64xf32>
  %dw = tec.linear %ht, %dy {tec.gemm_role = "wgrad", tec.grad_operand = 1 : i64} : (tensor<128x64xf32>, tensor<64x32xf32>) -> tensor<128x32xf32> loc("fc2")
  return %y, %dh, %dw : tensor<64x32xf32>, tensor<64x128xf32>, tensor<128x32xf32>
}

// -----

// A square tensor read as it lies by one GEMM and transposed by another has the same type both ways: two
// copies still, the cache of layouts being keyed by the transposition too. With one copy the wgrad
// multiplied by the untransposed tensor: FP8 training of a batch-16 MLP with 16 outputs (its [16, 16]
// gradient) computed that layer's weight gradient wrong.
// CHECK-LABEL: func @square_operand_both_layouts
//       CHECK:   %[[HQ:.+]] = tec.quantize %arg0, %[[S:[a-z0-9]+]] : (tensor<64x64xf32>, tensor<f32>) -> tensor<64x64xf8E4M3FN>
//  CHECK-NEXT:   %[[HT:.+]] = tec.quantize %arg0, %[[S]] {transpose_input = true} : (tensor<64x64xf32>, tensor<f32>) -> tensor<64x64xf8E4M3FN>
//       CHECK:   tec.fp8_gemm %[[HQ]]
//       CHECK:   tec.fp8_gemm %[[HT]], {{.*}}tec.gemm_role = "wgrad"
func.func @square_operand_both_layouts(%h: tensor<64x64xf32>, %w: tensor<64x32xf32> {tec.param = "fc2.weight"}, %dy: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  %y = tec.linear %h, %w : (tensor<64x64xf32>, tensor<64x32xf32>) -> tensor<64x32xf32> loc("fc2")
  %ht = tec.transpose %h {perm = array<i64: 1, 0>} : tensor<64x64xf32> -> tensor<64x64xf32>
  %dw = tec.linear %ht, %dy {tec.gemm_role = "wgrad", tec.grad_operand = 1 : i64} : (tensor<64x64xf32>, tensor<64x32xf32>) -> tensor<64x32xf32> loc("fc2")
  return %y, %dw : tensor<64x32xf32>, tensor<64x32xf32>
}
