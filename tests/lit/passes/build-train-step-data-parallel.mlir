// RUN: tec-opt %s --tec-build-train-step="optimizer=sgd lr=0.1 bucket-mb=0" | FileCheck %s
// RUN: tec-opt %s --tec-build-train-step="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=ONE-BUCKET
// RUN: tec-opt %s --tec-build-train-step="optimizer=adamw lr=0.1 shard-optimizer=3 clip-norm=1 loss-scale=1024" | FileCheck %s --check-prefix=ZERO

// Data parallelism in every train step: the backward starts from 1 / world_size (each rank's loss is the
// mean over its share of the global batch), the loss is averaged over the ranks where it is computed, and
// the gradients are summed over them in buckets taken in the order the backward produces them, each
// right after its last gradient: with buckets of 0 MiB the last layer's (w2) goes first, before w1's
// gradient exists, so it may travel while the backward goes on.
// CHECK-LABEL: func @train_step
//  CHECK-SAME:   %[[W1:[^:]+]]: tensor<4x8xf32> {tec.param = "w1"}
//  CHECK-SAME:   %[[W2:[^:]+]]: tensor<8x3xf32> {tec.param = "w2"}
//       CHECK:   %[[RANKS:.+]] = tec.world_size : tensor<f32>
//       CHECK:   %[[SEED:.+]] = tec.div %{{.+}}, %[[RANKS]]
//       CHECK:   tec.reduce_mean
//  CHECK-NEXT:   tec.all_reduce %{{.+}} {reduction = "mean"} : tensor<f32> -> tensor<f32>
//       CHECK:   %[[G2:.+]] = tec.all_reduce %{{.+}} {reduction = "sum"} : tensor<8x3xf32> -> tensor<8x3xf32>
//       CHECK:   %[[G1:.+]] = tec.all_reduce %{{.+}} {reduction = "sum"} : tensor<4x8xf32> -> tensor<4x8xf32>
//       CHECK:   tec.optimizer_update %[[W1]], %[[G1]]
//       CHECK:   tec.optimizer_update %[[W2]], %[[G2]]
// The default buckets (25 MiB) take both gradients in one collective, w2's first.
// ONE-BUCKET-LABEL: func @train_step
//       ONE-BUCKET:   tec.all_reduce %{{.+}}, %{{.+}} {reduction = "sum"} : tensor<8x3xf32>, tensor<4x8xf32> -> tensor<8x3xf32>, tensor<4x8xf32>
//   ONE-BUCKET-NOT:   {reduction = "sum"}
// Optimizer sharding over 3 ranks (ZeRO-1): the bucket is reduce-scattered (w1's 32 elements in shards of
// 11, w2's 24 in shards of 8), each moment is a shard tagged with its whole shape, the finite check and the
// clipping norm are reduced over the ranks, each rank updates its shard of each param, and the params are
// gathered whole.
// ZERO-LABEL: func @train_step
//  ZERO-SAME:   %[[W1:[^:]+]]: tensor<4x8xf32> {tec.param = "w1"}
//  ZERO-SAME:   tensor<11xf32> {tec.state = "w1/adam_m", {{.+}}, tec.state_shard_of = array<i64: 4, 8>, tec.state_shard_ranks = 3 : i64}
//  ZERO-SAME:   tensor<8xf32> {tec.state = "w2/adam_v", {{.+}}, tec.state_shard_of = array<i64: 8, 3>, tec.state_shard_ranks = 3 : i64}
//       ZERO:   %[[G:.+]]:2 = tec.reduce_scatter %{{.+}}, %{{.+}} {ranks = 3 : i64} : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<11xf32>, tensor<8xf32>
//       ZERO:   tec.all_finite %[[G]]#0, %[[G]]#1
//       ZERO:   tec.all_reduce %{{.+}} {reduction = "max"} : tensor<f32> -> tensor<f32>
//       ZERO:   %[[SUMSQ:.+]] = tec.all_reduce %{{.+}} {reduction = "sum"} : tensor<f32> -> tensor<f32>
//  ZERO-NEXT:   tec.sqrt %[[SUMSQ]]
//       ZERO:   %[[S1:.+]] = tec.shard %[[W1]] {ranks = 3 : i64} : tensor<4x8xf32> -> tensor<11xf32>
//  ZERO-NEXT:   %[[P1:[^,]+]], %{{.+}} = tec.optimizer_update %[[S1]], %[[G]]#0 : tensor<11xf32>, tensor<11xf32>
//       ZERO:   %[[P2:[^,]+]], %{{.+}} = tec.optimizer_update %{{.+}}, %[[G]]#1 : tensor<8xf32>, tensor<8xf32>
//  ZERO-NEXT:   %[[NEW:.+]]:2 = tec.all_gather %[[P1]], %[[P2]] {ranks = 3 : i64} : tensor<11xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8x3xf32>
//       ZERO:   return {{.+}}, %[[NEW]]#0, %[[NEW]]#1,
func.func @forward(%x: tensor<2x4xf32>, %w1: tensor<4x8xf32> {tec.param = "w1"}, %w2: tensor<8x3xf32> {tec.param = "w2"}) -> tensor<2x3xf32> {
  %0 = tec.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %1 = tec.relu %0 : tensor<2x8xf32>
  %2 = tec.matmul %1, %w2 : (tensor<2x8xf32>, tensor<8x3xf32>) -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}
