// RUN: tec-opt %s --tec-build-train-step="optimizer=sgd lr=0.1 accumulate=4" | FileCheck %s
// RUN: tec-opt %s --tec-build-train-step="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=EVERY

// Gradient accumulation over 4 calls: the gradient joins its sum (state w/grad_sum), the 4th call (the
// counter accumulate/micro reaching 4) updates with the sum / 4 and clears the sum and the counter; the
// other calls gate the optimizer and the step counter off.
// CHECK-LABEL: func @train_step
//  CHECK-SAME:   %[[W:[^:]+]]: tensor<4x3xf32> {tec.param = "w"}
//  CHECK-SAME:   %[[STEP:[^:]+]]: tensor<f32> {tec.state = "step"
//  CHECK-SAME:   %[[MICRO:[^:]+]]: tensor<f32> {tec.state = "accumulate/micro"
//  CHECK-SAME:   %[[SUM:[^:]+]]: tensor<4x3xf32> {tec.state = "w/grad_sum", tec.state_init = 0.000000e+00 : f32, tec.state_kind = "optimizer"}
//       CHECK:   %[[GRAD:[^ ]+]] = tec.all_reduce %{{[^ ]+}} {reduction = "sum"} : tensor<4x3xf32>
//       CHECK:   %[[COUNTED:[^ ]+]] = tec.add %[[MICRO]]
//       CHECK:   %[[FOUR:[^ ]+]] = tec.constant dense<4.000000e+00>
//       CHECK:   %[[APPLY:[^ ]+]] = tec.compare %[[COUNTED]], %[[FOUR]] {predicate = "ge"}
//       CHECK:   %[[NEXT_MICRO:[^ ]+]] = tec.where %[[APPLY]], %{{[^,]+}}, %[[COUNTED]]
//       CHECK:   %[[TOTAL:[^ ]+]] = tec.add %[[SUM]], %[[GRAD]]
//       CHECK:   %[[NEXT_SUM:[^ ]+]] = tec.where %[[APPLY]], %{{[^,]+}}, %[[TOTAL]]
//       CHECK:   %[[MEAN:[^ ]+]] = tec.div %[[TOTAL]]
//       CHECK:   %[[NEW_W:[^ ]+]] = tec.optimizer_update %[[W]], %[[MEAN]] {{.*}} finite(%[[APPLY]] : tensor<i1>)
//       CHECK:   %[[NEXT_STEP:[^ ]+]] = tec.where %[[APPLY]], %{{[^,]+}}, %[[STEP]]
//       CHECK:   return %{{[^,]+}}, %[[NEXT_MICRO]], %[[NEXT_SUM]], %[[NEW_W]], %[[NEXT_STEP]]
// Without accumulation nothing of it: no sums, no counter, no gate.
// EVERY-LABEL: func @train_step
//   EVERY-NOT:   grad_sum
//   EVERY-NOT:   accumulate/micro
//   EVERY-NOT:   finite(
func.func @forward(%x: tensor<2x4xf32>, %w: tensor<4x3xf32> {tec.param = "w"}) -> tensor<2x3xf32> {
  %0 = tec.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
