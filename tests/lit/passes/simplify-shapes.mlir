// RUN: tec-opt %s --tec-simplify-shapes --split-input-file | FileCheck %s
// RUN: tec-opt %s --tec-simplify-shapes --canonicalize --split-input-file | FileCheck %s --check-prefix=CANON

// CHECK-LABEL: func @reshape_chain
//       CHECK:   %[[R:.+]] = tec.reshape %arg0 : tensor<4x8xf32> -> tensor<32xf32>
//   CHECK-NOT:   tec.reshape
//       CHECK:   return %[[R]]
func.func @reshape_chain(%x: tensor<4x8xf32>) -> tensor<32xf32> {
  %0 = tec.reshape %x : tensor<4x8xf32> -> tensor<2x16xf32>
  %1 = tec.reshape %0 : tensor<2x16xf32> -> tensor<32xf32>
  return %1 : tensor<32xf32>
}

// -----

// Attention's key transpose: (0,2,1,3) then (0,1,3,2) is one transpose (0,2,3,1).
// CHECK-LABEL: func @transpose_chain
//       CHECK:   tec.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>} : tensor<2x16x4x8xf32> -> tensor<2x4x8x16xf32>
//   CHECK-NOT:   tec.transpose
func.func @transpose_chain(%x: tensor<2x16x4x8xf32>) -> tensor<2x4x8x16xf32> {
  %0 = tec.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x4x8xf32> -> tensor<2x4x16x8xf32>
  %1 = tec.transpose %0 {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x16x8xf32> -> tensor<2x4x8x16xf32>
  return %1 : tensor<2x4x8x16xf32>
}

// -----

// A transpose pair that undoes itself composes to the identity, which the canonicalizer removes.
// CANON-LABEL: func @transpose_roundtrip
//   CANON-NOT:   tec.transpose
//       CANON:   return %arg0
func.func @transpose_roundtrip(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = tec.transpose %x {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %1 = tec.transpose %0 {perm = array<i64: 1, 0>} : tensor<8x4xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Reshaping back to the original shape leaves nothing after canonicalization.
// CANON-LABEL: func @reshape_roundtrip
//   CANON-NOT:   tec.reshape
//       CANON:   return %arg0
func.func @reshape_roundtrip(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = tec.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
  %1 = tec.reshape %0 : tensor<32xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// The inner reshape has a second use: it stays materialized, so the chain is not collapsed.
// CHECK-LABEL: func @shared_inner_reshape
//       CHECK:   %[[A:.+]] = tec.reshape %arg0 : tensor<4x8xf32> -> tensor<2x16xf32>
//       CHECK:   tec.reshape %[[A]] : tensor<2x16xf32> -> tensor<32xf32>
func.func @shared_inner_reshape(%x: tensor<4x8xf32>) -> (tensor<32xf32>, tensor<2x16xf32>) {
  %0 = tec.reshape %x : tensor<4x8xf32> -> tensor<2x16xf32>
  %1 = tec.reshape %0 : tensor<2x16xf32> -> tensor<32xf32>
  return %1, %0 : tensor<32xf32>, tensor<2x16xf32>
}

// -----

// CHECK-LABEL: func @shared_inner_transpose
//       CHECK:   tec.transpose %arg0 {perm = array<i64: 1, 0>}
//       CHECK:   tec.transpose %{{.*}} {perm = array<i64: 1, 0>}
func.func @shared_inner_transpose(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x4xf32>) {
  %0 = tec.transpose %x {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %1 = tec.transpose %0 {perm = array<i64: 1, 0>} : tensor<8x4xf32> -> tensor<4x8xf32>
  return %1, %0 : tensor<4x8xf32>, tensor<8x4xf32>
}
