// The fold hooks evaluate ops on constants with the kernels' per-element math; large non-splat results
// stay ops (the plan computes them instead of storing them).
// RUN: tec-opt %s --canonicalize --split-input-file | FileCheck %s

// CHECK-LABEL: func @shape_arithmetic
//       CHECK:   %[[C:.+]] = tec.constant dense<[2, 12]> : tensor<2xi64>
//       CHECK:   return %[[C]]
func.func @shape_arithmetic() -> tensor<2xi64> {
  %shape = tec.constant dense<[2, 3, 4]> : tensor<3xi64>
  %i = tec.constant dense<0> : tensor<i64>
  %n = tec.gather %shape, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %rest = tec.slice %shape {starts = array<i64: 1>, ends = array<i64: 3>, steps = array<i64: 1>} : tensor<3xi64> -> tensor<2xi64>
  %a = tec.gather %rest, %i {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %one = tec.constant dense<1> : tensor<i64>
  %b = tec.gather %rest, %one {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %prod = tec.mul %a, %b : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %n1 = tec.reshape %n : tensor<i64> -> tensor<1xi64>
  %p1 = tec.reshape %prod : tensor<i64> -> tensor<1xi64>
  %r = tec.concat %n1, %p1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  return %r : tensor<2xi64>
}

// -----

// A causal mask from two index vectors, compared and selected: small enough to fold.
// CHECK-LABEL: func @small_mask
//       CHECK:   tec.constant dense<{{\[}}[0.000000e+00, -1.000000e+04, -1.000000e+04], [0.000000e+00, 0.000000e+00, -1.000000e+04], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32>
//   CHECK-NOT:   tec.compare
func.func @small_mask() -> tensor<3x3xf32> {
  %rows = tec.constant dense<[[0], [1], [2]]> : tensor<3x1xi64>
  %cols = tec.constant dense<[[0, 1, 2]]> : tensor<1x3xi64>
  %above = tec.compare %cols, %rows {predicate = "gt"} : (tensor<1x3xi64>, tensor<3x1xi64>) -> tensor<3x3xi1>
  %big = tec.constant dense<-1.0e4> : tensor<f32>
  %zero = tec.constant dense<0.0> : tensor<f32>
  %mask = tec.where %above, %big, %zero : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
  return %mask : tensor<3x3xf32>
}

// -----

// 300 x 300 = 90,000 elements: past the fold limit, the comparison stays and its operands are small.
// CHECK-LABEL: func @large_mask
//       CHECK:   tec.compare {{.*}} -> tensor<300x300xi1>
func.func @large_mask(%rows: tensor<300x1xi64>) -> tensor<300x300xi1> {
  %r = tec.constant dense<7> : tensor<300x1xi64>
  %c = tec.reshape %r : tensor<300x1xi64> -> tensor<1x300xi64>
  %iota = tec.add %r, %rows : (tensor<300x1xi64>, tensor<300x1xi64>) -> tensor<300x1xi64>
  %m = tec.compare %c, %iota {predicate = "le"} : (tensor<1x300xi64>, tensor<300x1xi64>) -> tensor<300x300xi1>
  return %m : tensor<300x300xi1>
}

// -----

// Splats fold at any size (to a splat); casts follow the kernels' rules (saturating, NaN to 0 as an
// integer and true as a bool).
// CHECK-LABEL: func @splats_and_casts
//   CHECK-DAG:   tec.constant dense<6.000000e+00> : tensor<1024x1024xf32>
//   CHECK-DAG:   tec.constant dense<[2147483647, 0, -3]> : tensor<3xi32>
//   CHECK-DAG:   tec.constant dense<true> : tensor<3xi1>
//   CHECK-DAG:   tec.constant dense<[1, 3, 0]> : tensor<3xi64>
func.func @splats_and_casts() -> (tensor<1024x1024xf32>, tensor<3xi32>, tensor<3xi1>, tensor<3xi64>) {
  %a = tec.constant dense<2.0> : tensor<1024x1024xf32>
  %b = tec.constant dense<3.0> : tensor<f32>
  %p = tec.mul %a, %b : (tensor<1024x1024xf32>, tensor<f32>) -> tensor<1024x1024xf32>
  %f = tec.constant dense<[1.0e10, 0x7FC00000, -3.7]> : tensor<3xf32>
  %i = tec.cast %f : tensor<3xf32> to tensor<3xi32>
  %nz = tec.cast %f : tensor<3xf32> to tensor<3xi1>
  %x = tec.constant dense<[7, -7, 6]> : tensor<3xi64>
  %y = tec.constant dense<[3, 5, 0]> : tensor<3xi64>
  // Python's remainder takes the divisor's sign; by 0 it is 0.
  %m = tec.mod %x, %y : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  return %p, %i, %nz, %m : tensor<1024x1024xf32>, tensor<3xi32>, tensor<3xi1>, tensor<3xi64>
}

// -----

// Position ids from an all-ones attention mask (HF's mask.cumsum(-1) - 1) fold; so does a reverse,
// exclusive float scan.
// CHECK-LABEL: func @cumsum_of_constants
//       CHECK:   %[[I:.+]] = tec.constant dense<{{\[}}[0, 1, 2, 3], [0, 1, 2, 3]]> : tensor<2x4xi64>
//       CHECK:   %[[F:.+]] = tec.constant dense<[3.500000e+00, 5.000000e-01, 0.000000e+00]> : tensor<3xf32>
//       CHECK:   return %[[I]], %[[F]]
func.func @cumsum_of_constants() -> (tensor<2x4xi64>, tensor<3xf32>) {
  %ones = tec.constant dense<1> : tensor<2x4xi64>
  %sum = tec.cumsum %ones {axis = 1 : i64} : tensor<2x4xi64>
  %one = tec.constant dense<1> : tensor<i64>
  %ids = tec.sub %sum, %one : (tensor<2x4xi64>, tensor<i64>) -> tensor<2x4xi64>
  %v = tec.constant dense<[2.0, 3.0, 0.5]> : tensor<3xf32>
  %r = tec.cumsum %v {axis = 0 : i64, exclusive = true, reverse = true} : tensor<3xf32>
  return %ids, %r : tensor<2x4xi64>, tensor<3xf32>
}

// -----

// A splat of the result's full shape beside an operand of that shape becomes a 0-D constant (the MSE
// gradient's 2/N at [8192, 1024] would otherwise be stored as 32 MiB); a splat that sets the result's shape stays.
// CHECK-LABEL: func @full_size_splat_operand
//   CHECK-DAG:   %[[S:.+]] = tec.constant dense<2.500000e-01> : tensor<f32>
//   CHECK-DAG:   %[[ONE:.+]] = tec.constant dense<1.000000e+00> : tensor<64x32xf32>
//       CHECK:   tec.mul %[[S]], %arg0 : (tensor<f32>, tensor<64x32xf32>) -> tensor<64x32xf32>
//       CHECK:   tec.add %[[ONE]], %arg1
func.func @full_size_splat_operand(%x: tensor<64x32xf32>, %b: tensor<32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  %s = tec.constant dense<0.25> : tensor<64x32xf32>
  %0 = tec.mul %s, %x : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %one = tec.constant dense<1.0> : tensor<64x32xf32>
  %1 = tec.add %one, %b : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
  return %0, %1 : tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// A mean's gradient under loss scaling: the scale expanded to the full shape, times 1/N, times the
// difference. The product with 1/N runs on the scalar, and the last product broadcasts it: no full-size
// copy of the scale. Where the expand sets the result's shape, the op runs first and the expand after.
// CHECK-LABEL: func @expanded_operands
//       CHECK:   %[[R:.+]] = tec.reshape %arg0 : tensor<f32> -> tensor<1x1xf32>
//       CHECK:   %[[S:.+]] = tec.mul %[[R]], %{{.+}} : (tensor<1x1xf32>, tensor<f32>) -> tensor<1x1xf32>
//       CHECK:   tec.mul %[[S]], %arg1 : (tensor<1x1xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
//       CHECK:   %[[A:.+]] = tec.add %arg2, %arg2 : (tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
//       CHECK:   tec.expand %[[A]] : tensor<32xf32> -> tensor<64x32xf32>
func.func @expanded_operands(%scale: tensor<f32>, %d: tensor<64x32xf32>, %b: tensor<32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  %inv = tec.constant dense<0.25> : tensor<f32>
  %r = tec.reshape %scale : tensor<f32> -> tensor<1x1xf32>
  %e = tec.expand %r : tensor<1x1xf32> -> tensor<64x32xf32>
  %0 = tec.mul %e, %inv : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
  %1 = tec.mul %0, %d : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %eb = tec.expand %b : tensor<32xf32> -> tensor<64x32xf32>
  %2 = tec.add %eb, %b : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
  return %1, %2 : tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// A slice of every element is its input (a dim of 1 keeps it at any step); a strided or a reversing one stays.
// CHECK-LABEL: func @whole_slice
// CHECK-NEXT: %[[S:.*]] = tec.slice %arg1
// CHECK-NEXT: %[[R:.*]] = tec.slice %arg1
// CHECK-NEXT: return %arg0, %[[S]], %[[R]]
func.func @whole_slice(%x: tensor<2x1x3xf32>, %y: tensor<4xf32>) -> (tensor<2x1x3xf32>, tensor<2xf32>, tensor<4xf32>) {
  %a = tec.slice %x {starts = array<i64: 0, 0, 0>, ends = array<i64: 2, 1, 3>, steps = array<i64: 1, 2, 1>} : tensor<2x1x3xf32> -> tensor<2x1x3xf32>
  %b = tec.slice %y {starts = array<i64: 0>, ends = array<i64: 4>, steps = array<i64: 2>} : tensor<4xf32> -> tensor<2xf32>
  %c = tec.slice %y {starts = array<i64: 3>, ends = array<i64: -1>, steps = array<i64: -1>} : tensor<4xf32> -> tensor<4xf32>
  return %a, %b, %c : tensor<2x1x3xf32>, tensor<2xf32>, tensor<4xf32>
}
