// RUN: tec-opt %s --tec-autodiff --split-input-file | FileCheck %s
// RUN: tec-opt %s --tec-autodiff=wrt=inputs --split-input-file | FileCheck %s --check-prefix=INPUTS
// RUN: not tec-opt %s --tec-autodiff=wrt=weights --split-input-file 2>&1 | FileCheck %s --check-prefix=BADWRT

// The VJP of a linear layer with GELU: gradients for the params (the default), tagged with their
// argument; the cotangent is the extra argument.
// CHECK-LABEL: func.func @forward_vjp(
//  CHECK-SAME:   %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[W:[a-z0-9]+]]: tensor<16x8xf32> {tec.param = "w"}, %[[B:[a-z0-9]+]]: tensor<16xf32> {tec.param = "b"}, %[[DY:[a-z0-9]+]]: tensor<4x16xf32>)
//  CHECK-SAME:   -> (tensor<4x16xf32>, tensor<16x8xf32> {tec.grad_of = 1 : i64}, tensor<16xf32> {tec.grad_of = 2 : i64})
//       CHECK:   %[[Z:.+]] = tec.linear %[[X]], %[[W]], %[[B]] {transpose_b = true}
//       CHECK:   %[[Y:.+]] = tec.gelu %[[Z]]
//       CHECK:   %[[DZ:.+]] = tec.gelu_grad %[[DY]], %[[Z]]
//       CHECK:   tec.linear %[[DZ]], %[[W]] {tec.gemm_role = "dgrad", tec.grad_operand = 0 : i64}
//       CHECK:   %[[DZT:.+]] = tec.transpose %[[DZ]] {perm = array<i64: 1, 0>}
//       CHECK:   %[[DW:.+]] = tec.linear %[[DZT]], %[[X]] {tec.gemm_role = "wgrad", tec.grad_operand = 0 : i64}
//       CHECK:   %[[DB:.+]] = tec.reduce_sum %[[DZ]] {axes = array<i64: 0>, keepdims = false}
//       CHECK:   return %[[Y]], %[[DW]], %[[DB]]
// INPUTS-LABEL: func.func @forward_vjp(
//  INPUTS-SAME:   -> (tensor<4x16xf32>, tensor<4x8xf32> {tec.grad_of = 0 : i64})
// BADWRT: error: expected wrt=params|inputs|all, got 'weights'
func.func @forward(%x: tensor<4x8xf32>, %w: tensor<16x8xf32> {tec.param = "w"}, %b: tensor<16xf32> {tec.param = "b"}) -> tensor<4x16xf32> {
  %0 = tec.linear %x, %w, %b {transpose_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %1 = tec.gelu %0 : tensor<4x16xf32>
  return %1 : tensor<4x16xf32>
}

// -----

// A value used twice gets the sum of both gradients; a param nothing depends on gets zeros.
// CHECK-LABEL: func.func @forward_vjp(
//       CHECK:   %[[M:.+]] = tec.mul %arg2, %arg0
//       CHECK:   %[[N:.+]] = tec.mul %arg2, %arg0
//       CHECK:   %[[S:.+]] = tec.add %[[M]], %[[N]]
//       CHECK:   %[[Z:.+]] = tec.constant dense<0.000000e+00> : tensor<3xf32>
//       CHECK:   return %{{.+}}, %[[S]], %[[Z]]
func.func @forward(%a: tensor<3xf32> {tec.param = "a"}, %unused: tensor<3xf32> {tec.param = "u"}) -> tensor<3xf32> {
  %0 = tec.mul %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}


// -----

// An embedding lookup with PyTorch's padding row: positions that gathered row 0 pass no gradient to it.
// CHECK-LABEL: func.func @forward_vjp(
//       CHECK:   %[[ROW:.+]] = tec.constant dense<0> : tensor<i64>
//       CHECK:   %[[AT:.+]] = tec.compare %arg1, %[[ROW]] {predicate = "eq"} : (tensor<2x5xi64>, tensor<i64>) -> tensor<2x5xi1>
//       CHECK:   %[[MASK:.+]] = tec.reshape %[[AT]] : tensor<2x5xi1> -> tensor<2x5x1xi1>
//       CHECK:   %[[DY:.+]] = tec.where %[[MASK]], %{{.+}}, %arg2 : (tensor<2x5x1xi1>, tensor<f32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
//       CHECK:   %[[DW:.+]] = tec.scatter_add %[[DY]], %arg1 {axis = 0 : i64
//       CHECK:   return %{{.+}}, %[[DW]]
func.func @forward(%table: tensor<10x4xf32> {tec.param = "embed.weight"}, %ids: tensor<2x5xi64>) -> tensor<2x5x4xf32> {
  %0 = tec.gather %table, %ids {axis = 0 : i64, padding_index = 0 : i64} : (tensor<10x4xf32>, tensor<2x5xi64>) -> tensor<2x5x4xf32>
  return %0 : tensor<2x5x4xf32>
}
