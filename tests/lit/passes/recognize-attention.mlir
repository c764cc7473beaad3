// RUN: tec-opt %s --tec-recognize-attention --split-input-file | FileCheck %s

// HF's GPT-2: Q·K^T by a K transposed from [B, T, H, D], scaled, a causal Where with finfo.min, softmax,
// times V. The causal constant becomes `causal`; K^T's transpose and the swap cancel into K's own layout.
// CHECK-LABEL: func @causal_where
//       CHECK:   %[[K:.+]] = tec.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
//       CHECK:   %[[O:.+]], %{{.+}} = tec.attention %arg0, %[[K]], %arg2 {causal = true, scale = 0.353553385 : f32}
//  CHECK-SAME:     -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
//       CHECK:   return %[[O]]
//   CHECK-NOT:   tec.softmax
func.func @causal_where(%q: tensor<1x2x4x8xf32>, %k: tensor<1x4x2x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %causal = tec.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %scale = tec.constant dense<0.353553385> : tensor<f32>
  %fill = tec.constant dense<-3.40282347E+38> : tensor<f32>
  %kt = tec.transpose %k {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %s = tec.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %scaled = tec.mul %s, %scale : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %masked = tec.where %causal, %scaled, %fill : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %masked {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// HF's BERT: scores divided by sqrt(d), plus the extended padding mask [B, 1, 1, T] computed from an
// input: the mask stays an operand, as it is (already 4-D).
// CHECK-LABEL: func @padding_mask
//       CHECK:   %[[M:.+]] = tec.mul
//       CHECK:   %[[K:.+]] = tec.transpose %arg1 {perm = array<i64: 0, 1, 3, 2>}
//       CHECK:   tec.attention %arg0, %[[K]], %arg2, %[[M]] {scale = 0.353553385 : f32}
//  CHECK-SAME:     tensor<2x1x1x4xf32>
func.func @padding_mask(%q: tensor<2x2x4x8xf32>, %kt: tensor<2x2x8x4xf32>, %v: tensor<2x2x4x8xf32>, %pad: tensor<2x1x1x4xf32>) -> tensor<2x2x4x8xf32> {
  %root = tec.constant dense<2.82842708> : tensor<f32>
  %min = tec.constant dense<-3.40282347E+38> : tensor<f32>
  %mask = tec.mul %pad, %min : (tensor<2x1x1x4xf32>, tensor<f32>) -> tensor<2x1x1x4xf32>
  %s = tec.matmul %q, %kt : (tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x4x4xf32>
  %scaled = tec.div %s, %root : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %masked = tec.add %scaled, %mask : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %p = tec.softmax %masked {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// Exporters of scaled_dot_product_attention scale Q and K^T by sqrt(scale) each; the two multiply into
// one scale. A causal additive constant (0 kept, -inf hidden) becomes `causal`.
// CHECK-LABEL: func @sdpa_split_scale
//       CHECK:   tec.attention %arg0, %{{.+}}, %arg2 {causal = true, scale = 0.353553{{[0-9]+}} : f32}
//   CHECK-NOT:   tec.mul
func.func @sdpa_split_scale(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = tec.constant dense<0.594603539> : tensor<f32>
  %causal = tec.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %qs = tec.mul %q, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %ks = tec.mul %kt, %c : (tensor<1x2x8x4xf32>, tensor<f32>) -> tensor<1x2x8x4xf32>
  %s = tec.matmul %qs, %ks : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %masked = tec.add %s, %causal : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %masked {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// nn.MultiheadAttention (and so nn.TransformerEncoderLayer): [B*H, T, D] operands become [1, B*H, T, D],
// the result is reshaped back.
// CHECK-LABEL: func @multihead_rank3
//       CHECK:   %[[Q:.+]] = tec.reshape %arg0 : tensor<8x4x16xf32> -> tensor<1x8x4x16xf32>
//       CHECK:   %[[V:.+]] = tec.reshape %arg2 : tensor<8x4x16xf32> -> tensor<1x8x4x16xf32>
//       CHECK:   %[[O:.+]], %{{.+}} = tec.attention %[[Q]], %{{.+}}, %[[V]] {scale = 2.500000e-01 : f32}
//       CHECK:   tec.reshape %[[O]] : tensor<1x8x4x16xf32> -> tensor<8x4x16xf32>
func.func @multihead_rank3(%q: tensor<8x4x16xf32>, %k: tensor<8x4x16xf32>, %v: tensor<8x4x16xf32>) -> tensor<8x4x16xf32> {
  %c = tec.constant dense<2.500000e-01> : tensor<f32>
  %qs = tec.mul %q, %c : (tensor<8x4x16xf32>, tensor<f32>) -> tensor<8x4x16xf32>
  %kt = tec.transpose %k {perm = array<i64: 0, 2, 1>} : tensor<8x4x16xf32> -> tensor<8x16x4xf32>
  %s = tec.matmul %qs, %kt : (tensor<8x4x16xf32>, tensor<8x16x4xf32>) -> tensor<8x4x4xf32>
  %p = tec.softmax %s {axis = 2 : i64} : tensor<8x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<8x4x4xf32>, tensor<8x4x16xf32>) -> tensor<8x4x16xf32>
  return %o : tensor<8x4x16xf32>
}

// -----

// Grouped-query attention (HF's repeat_kv on K and V): the op reads the 2 K/V heads themselves.
// CHECK-LABEL: func @grouped_query
//   CHECK-NOT:   tec.expand
//       CHECK:   %[[K:.+]] = tec.reshape %arg1 : tensor<2x2x1x8x4xf32> -> tensor<2x2x8x4xf32>
//       CHECK:   %[[V:.+]] = tec.reshape %arg2 : tensor<2x2x1x8x4xf32> -> tensor<2x2x8x4xf32>
//       CHECK:   tec.attention %arg0, %[[K]], %[[V]] {scale = 5.000000e-01 : f32}
//  CHECK-SAME:     (tensor<2x4x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8xf32>)
func.func @grouped_query(%q: tensor<2x4x8x4xf32>, %k: tensor<2x2x1x8x4xf32>, %v: tensor<2x2x1x8x4xf32>) -> tensor<2x4x8x4xf32> {
  %c = tec.constant dense<5.000000e-01> : tensor<f32>
  %0 = tec.expand %k : tensor<2x2x1x8x4xf32> -> tensor<2x2x2x8x4xf32>
  %1 = tec.reshape %0 : tensor<2x2x2x8x4xf32> -> tensor<2x4x8x4xf32>
  %2 = tec.transpose %1 {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x8x4xf32> -> tensor<2x4x4x8xf32>
  %3 = tec.matmul %q, %2 : (tensor<2x4x8x4xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x8x8xf32>
  %s = tec.mul %3, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p = tec.softmax %s {axis = 3 : i64} : tensor<2x4x8x8xf32>
  %4 = tec.expand %v : tensor<2x2x1x8x4xf32> -> tensor<2x2x2x8x4xf32>
  %5 = tec.reshape %4 : tensor<2x2x2x8x4xf32> -> tensor<2x4x8x4xf32>
  %6 = tec.matmul %p, %5 : (tensor<2x4x8x8xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x4xf32>
  return %6 : tensor<2x4x8x4xf32>
}

// -----

// A boolean constant that is not the causal rule (here the sliding window of one key back) stays a mask.
// CHECK-LABEL: func @window_mask
//       CHECK:   %[[M:.+]] = tec.constant dense<{{.+}}> : tensor<1x1x4x4xi1>
//       CHECK:   tec.attention %arg0, %{{.+}}, %arg2, %[[M]] {scale = 1.000000e+00 : f32}
func.func @window_mask(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %window = tec.constant dense<[[true, false, false, false], [true, true, false, false], [false, true, true, false], [false, false, true, true]]> : tensor<4x4xi1>
  %fill = tec.constant dense<-1.000000e+09> : tensor<f32>
  %s = tec.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %masked = tec.where %window, %s, %fill : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %masked {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Attention weights that are also returned (output_attentions=True) must stay materialized.
// CHECK-LABEL: func @weights_returned
//       CHECK:   tec.softmax
//   CHECK-NOT:   tec.attention
func.func @weights_returned(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %s = tec.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %s {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %p : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}

// -----

// A learned position bias (a trained param added to the scores) needs its gradient: left decomposed.
// A frozen param (an exporter-folded mask) is a mask like any other.
// CHECK-LABEL: func @learned_bias
//       CHECK:   tec.softmax
//   CHECK-NOT:   tec.attention
func.func @learned_bias(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>, %bias: tensor<1x2x4x4xf32> {tec.param = "rel_bias"}) -> tensor<1x2x4x8xf32> {
  %s = tec.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %b = tec.add %s, %bias : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %b {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func @frozen_mask
//       CHECK:   tec.attention %arg0, %{{.+}}, %arg2, %arg3
func.func @frozen_mask(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>, %mask: tensor<1x1x4x4xf32> {tec.param = "where", tec.frozen = "an additive mask"}) -> tensor<1x2x4x8xf32> {
  %s = tec.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %b = tec.add %s, %mask : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %b {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tec.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The dynamo exporter's scaled_dot_product_attention: Where(IsNaN(p), 0, p) guards the probabilities, so
// a row with every key hidden gives 0; the guard moves onto the output, where it does the same.
// CHECK-LABEL: func @dynamo_nan_guard
//       CHECK:   %[[O:.+]], %{{.+}} = tec.attention %arg0, %{{.+}}, %arg2, %arg3 {scale = 0.353553{{[0-9]+}} : f32}
//       CHECK:   %[[NAN:.+]] = tec.compare %[[O]], %[[O]] {predicate = "ne"}
//       CHECK:   %[[Z:.+]] = tec.where %[[NAN]], %{{.+}}, %[[O]]
//       CHECK:   return %[[Z]]
//   CHECK-NOT:   tec.softmax
func.func @dynamo_nan_guard(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>, %mask: tensor<1x1x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %c = tec.constant dense<0.594603539> : tensor<f32>
  %zero = tec.constant dense<0.0> : tensor<f32>
  %qs = tec.mul %q, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %ks = tec.mul %kt, %c : (tensor<1x2x8x4xf32>, tensor<f32>) -> tensor<1x2x8x4xf32>
  %s = tec.matmul %qs, %ks : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %masked = tec.add %s, %mask : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tec.softmax %masked {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %nan = tec.compare %p, %p {predicate = "ne"} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %guarded = tec.where %nan, %zero, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = tec.matmul %guarded, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
