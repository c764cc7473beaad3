// RUN: tec-opt %s --tec-narrow-activations --split-input-file | FileCheck %s
// RUN: tec-opt %s --tec-narrow-activations=precision=f16 --split-input-file | FileCheck %s --check-prefix=F16

// After tec-lower-for-target on a BF16 target: every GEMM casts its result back to f32 and the next one
// casts it down again. The round trips fold, the input is taken in bf16 (the session rounds the caller's
// f32), and the last GEMM (no bias) writes the f32 output itself.
// CHECK-LABEL: func @gemm_chain
//  CHECK-SAME:   (%[[X:[a-z0-9]+]]: tensor<4x8xbf16> {tec.host_f32}, %[[W:[a-z0-9]+]]: tensor<8x8xf32> {tec.param = "w"})
//       CHECK:   %[[WB:.+]] = tec.cast %[[W]] : tensor<8x8xf32> to tensor<8x8xbf16>
//       CHECK:   %[[H:.+]] = tec.linear %[[X]], %[[WB]] {{.*}} -> tensor<4x8xbf16>
//       CHECK:   %[[A:.+]] = tec.gelu %[[H]] : tensor<4x8xbf16>
//       CHECK:   %[[Y:.+]] = tec.linear %[[A]], %[[WB]] {{.*}} -> tensor<4x8xf32>
//       CHECK:   return %[[Y]]
func.func @gemm_chain(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {tec.param = "w"}) -> tensor<4x8xf32> {
  %xb = tec.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
  %wb = tec.cast %w : tensor<8x8xf32> to tensor<8x8xbf16>
  %h = tec.linear %xb, %wb : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %hf = tec.cast %h : tensor<4x8xbf16> to tensor<4x8xf32>
  %a = tec.gelu %hf : tensor<4x8xf32>
  %ab = tec.cast %a : tensor<4x8xf32> to tensor<4x8xbf16>
  %y = tec.linear %ab, %wb : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %yf = tec.cast %y : tensor<4x8xbf16> to tensor<4x8xf32>
  return %yf : tensor<4x8xf32>
}

// -----

// An MSE loss and its gradient: the target is taken in bf16 too (its rounding adds what the prediction's
// own bf16 rounding does), the difference and its square stay bf16, and the mean reduces them into an
// f32 loss. 2/N becomes a bf16 constant.
// CHECK-LABEL: func @mse
//  CHECK-SAME:   %[[T:[a-z0-9]+]]: tensor<4x8xbf16> {tec.host_f32}
//       CHECK:   %[[D:.+]] = tec.sub %arg0, %[[T]] : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
//       CHECK:   %[[SQ:.+]] = tec.mul %[[D]], %[[D]] : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
//       CHECK:   %[[L:.+]] = tec.reduce_mean %[[SQ]] {{.*}} : tensor<4x8xbf16> -> tensor<f32>
//       CHECK:   tec.mul %{{.+}}, %[[D]] : (tensor<bf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
//       CHECK:   return %[[L]]
func.func @mse(%y: tensor<4x8xbf16>, %t: tensor<4x8xf32>) -> (tensor<f32>, tensor<4x8xbf16>) {
  %c = tec.constant dense<6.250000e-02> : tensor<f32>
  %yf = tec.cast %y : tensor<4x8xbf16> to tensor<4x8xf32>
  %d = tec.sub %yf, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sq = tec.mul %d, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %loss = tec.reduce_mean %sq {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  %g = tec.mul %c, %d : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %gb = tec.cast %g : tensor<4x8xf32> to tensor<4x8xbf16>
  return %loss, %gb : tensor<f32>, tensor<4x8xbf16>
}

// -----

// A weight gradient: the narrowing of the transposed dY moves above the transpose (half the bytes move;
// dY, an input here, is then taken in bf16), and the GEMM writes the f32 gradient the optimizer reads.
// CHECK-LABEL: func @weight_gradient
//  CHECK-SAME:   (%[[DY:[a-z0-9]+]]: tensor<4x8xbf16> {tec.host_f32}
//       CHECK:   %[[DYT:.+]] = tec.transpose %[[DY]] {perm = array<i64: 1, 0>} : tensor<4x8xbf16> -> tensor<8x4xbf16>
//       CHECK:   %[[DW:.+]] = tec.linear %[[DYT]], %arg1 : (tensor<8x4xbf16>, tensor<4x8xbf16>) -> tensor<8x8xf32>
//       CHECK:   return %[[DW]]
func.func @weight_gradient(%dy: tensor<4x8xf32>, %a: tensor<4x8xbf16>) -> tensor<8x8xf32> {
  %dyt = tec.transpose %dy {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %dytb = tec.cast %dyt : tensor<8x4xf32> to tensor<8x4xbf16>
  %dw = tec.linear %dytb, %a : (tensor<8x4xbf16>, tensor<4x8xbf16>) -> tensor<8x8xbf16>
  %dwf = tec.cast %dw : tensor<8x8xbf16> to tensor<8x8xf32>
  return %dwf : tensor<8x8xf32>
}

// -----

// Computations on f32 values that were never narrowed (params, optimizer math) stay f32.
// CHECK-LABEL: func @f32_stays
//       CHECK:   tec.mul %arg0, %arg1 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
//   CHECK-NOT:   bf16
func.func @f32_stays(%p: tensor<64x64xf32> {tec.param = "p"}, %q: tensor<64x64xf32> {tec.param = "q"}) -> tensor<64x64xf32> {
  %0 = tec.mul %p, %q : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// -----

// The loss scale (FP16's dynamic loss scaling, 2^17 here) is state: the weight gradient it unscales is
// divided in f32, after the GEMM writes f32 (2^17 is past FP16's range).
// CHECK-LABEL: func @unscale
//       CHECK:   %[[DW:.+]] = tec.linear %arg0, %arg1 : (tensor<8x4xbf16>, tensor<4x8xbf16>) -> tensor<8x8xf32>
//       CHECK:   tec.div %[[DW]], %arg2 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
func.func @unscale(%a: tensor<8x4xbf16>, %b: tensor<4x8xbf16>, %scale: tensor<f32> {tec.state = "loss_scale"}) -> tensor<8x8xf32> {
  %dw = tec.linear %a, %b : (tensor<8x4xbf16>, tensor<4x8xbf16>) -> tensor<8x8xbf16>
  %dwf = tec.cast %dw : tensor<8x8xbf16> to tensor<8x8xf32>
  %g = tec.div %dwf, %scale : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  return %g : tensor<8x8xf32>
}

// -----

// On an FP16 target a GELU narrows as on BF16, but exp would overflow f16 past 11: it reads and writes
// f32 (autocast's f32 list), and the narrowing stops before it.
// F16-LABEL: func @exp_range
//       F16:   %[[G:.+]] = tec.gelu %arg0 : tensor<4x8xf16>
//       F16:   %[[GF:.+]] = tec.cast %[[G]] : tensor<4x8xf16> to tensor<4x8xf32>
//       F16:   tec.exp %[[GF]] : tensor<4x8xf32>
func.func @exp_range(%h: tensor<4x8xf16>) -> tensor<4x8xf32> {
  %hf = tec.cast %h : tensor<4x8xf16> to tensor<4x8xf32>
  %a = tec.gelu %hf : tensor<4x8xf32>
  %e = tec.exp %a : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
}

// -----

// The same loss on FP16: the difference narrows, but its square would overflow past |y - t| = 256 and is
// taken in f32.
// F16-LABEL: func @mse_f16
//       F16:   %[[D:.+]] = tec.sub %arg0, %{{.+}} : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
//       F16:   %[[DF:.+]] = tec.cast %[[D]] : tensor<4x8xf16> to tensor<4x8xf32>
//       F16:   tec.mul %[[DF]], %[[DF]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @mse_f16(%y: tensor<4x8xf16>, %t: tensor<4x8xf32>) -> tensor<f32> {
  %yf = tec.cast %y : tensor<4x8xf16> to tensor<4x8xf32>
  %d = tec.sub %yf, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sq = tec.mul %d, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %loss = tec.reduce_mean %sq {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %loss : tensor<f32>
}
