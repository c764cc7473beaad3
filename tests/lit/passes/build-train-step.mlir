// RUN: tec-opt %s --tec-build-train-step="loss=cross-entropy optimizer=sgd lr=0.1" --split-input-file | FileCheck %s
// RUN: tec-opt %s --tec-build-train-step="loss=cross-entropy optimizer=sgd lr=0.1 ignore-index=0" --split-input-file | FileCheck %s --check-prefix=ZERO

// A language model's cross-entropy: [B, T, V] logits against [B, T] int64 labels; labels equal to the
// ignore index (torch's -100 by default) pick class 0 with weight 0, and the mean is over the others.
// CHECK-LABEL: func @train_step
//  CHECK-SAME:   %[[LABELS:[^:]+]]: tensor<2x3xi64> {tec.target = 0 : i64}
//       CHECK:   %[[IGNORE:[^ ]+]] = tec.constant dense<-100> : tensor<2x3xi64>
//       CHECK:   %[[COUNTED:[^ ]+]] = tec.compare %[[LABELS]], %[[IGNORE]] {predicate = "ne"}
//       CHECK:   %[[SAFE:[^ ]+]] = tec.where %[[COUNTED]], %[[LABELS]], %{{.+}}
//       CHECK:   %[[WEIGHT:[^ ]+]] = tec.cast %[[COUNTED]] : tensor<2x3xi1> to tensor<2x3xf32>
//       CHECK:   tec.one_hot %[[SAFE]] : tensor<2x3xi64> -> tensor<2x3x5xf32>
//       CHECK:   %[[COUNT:[^ ]+]] = tec.reduce_sum %[[WEIGHT]] {axes = array<i64: 0, 1>, keepdims = false}
//       CHECK:   %[[DENOM:[^ ]+]] = tec.max %[[COUNT]]
//       CHECK:   tec.div %{{.+}}, %[[DENOM]]
// ZERO-LABEL: func @train_step
//       ZERO:   tec.constant dense<0> : tensor<2x3xi64>
//       ZERO:   tec.compare
func.func @forward(%x: tensor<2x3x4xf32>, %w: tensor<4x5xf32> {tec.param = "w"}) -> tensor<2x3x5xf32> {
  %0 = tec.matmul %x, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}
