// RUN: tec-opt %s --tec-channels-last --canonicalize --split-input-file | FileCheck %s

// Two convolutions with an activation between: one transpose in, one out, none between.
// CHECK-LABEL: func @conv_relu_conv
//       CHECK:   %[[IN:.+]] = tec.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x3x8x8xf32> -> tensor<1x8x8x3xf32>
//       CHECK:   %[[A:.+]] = tec.conv %[[IN]], %arg1 {channels_last, {{.*}}} : (tensor<1x8x8x3xf32>, tensor<4x3x3x3xf32>) -> tensor<1x8x8x4xf32>
//       CHECK:   %[[R:.+]] = tec.relu %[[A]] : tensor<1x8x8x4xf32>
//       CHECK:   %[[B:.+]] = tec.conv %[[R]], %arg2 {channels_last, {{.*}}} : (tensor<1x8x8x4xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x4x4xf32>
//       CHECK:   %[[OUT:.+]] = tec.transpose %[[B]] {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x4x4xf32> -> tensor<1x4x4x4xf32>
//       CHECK:   return %[[OUT]]
func.func @conv_relu_conv(%x: tensor<1x3x8x8xf32>, %w1: tensor<4x3x3x3xf32>, %w2: tensor<4x1x3x3xf32>) -> tensor<1x4x4x4xf32> {
  %0 = tec.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  %1 = tec.relu %0 : tensor<1x4x8x8xf32>
  %2 = tec.conv %1, %w2 {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x4x4xf32>
  return %2 : tensor<1x4x4x4xf32>
}

// -----

// A BatchNorm's constants and a residual add stay channels-last; the constants fold into NHWC order.
// CHECK-LABEL: func @scale_and_residual
//       CHECK:   %[[SCALE:.+]] = tec.constant dense<{{.*}}> : tensor<1x1x1x4xf32>
//       CHECK:   %[[A:.+]] = tec.conv
//       CHECK:   %[[M:.+]] = tec.mul %[[A]], %[[SCALE]] : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x6x6x4xf32>
//       CHECK:   %[[B:.+]] = tec.conv %[[M]]
//       CHECK:   %[[S:.+]] = tec.add %[[B]], %[[M]] : (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
//       CHECK:   tec.transpose %[[S]] {perm = array<i64: 0, 3, 1, 2>}
//   CHECK-NOT:   tec.transpose
func.func @scale_and_residual(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32> {
  %scale = tec.constant dense<[[[1.0]], [[2.0]], [[3.0]], [[4.0]]]> : tensor<4x1x1xf32>
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %1 = tec.mul %0, %scale : (tensor<1x4x6x6xf32>, tensor<4x1x1xf32>) -> tensor<1x4x6x6xf32>
  %2 = tec.conv %1, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %3 = tec.add %2, %1 : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %3 : tensor<1x4x6x6xf32>
}

// -----

// Squeeze-excitation: the pooled [1, C, 1, 1] gate is a reshape away from NHWC, so the gate's product stays
// channels-last; the pooling reduces H and W of the NHWC image.
// CHECK-LABEL: func @squeeze_excitation
//       CHECK:   %[[A:.+]] = tec.conv
//       CHECK:   %[[P:.+]] = tec.reduce_mean %[[A]] {axes = array<i64: 1, 2>, keepdims = true} : tensor<1x6x6x4xf32> -> tensor<1x1x1x4xf32>
//       CHECK:   %[[G:.+]] = tec.sigmoid %[[P]] : tensor<1x1x1x4xf32>
//       CHECK:   tec.mul %[[A]], %[[G]] : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x6x6x4xf32>
func.func @squeeze_excitation(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %1 = tec.reduce_mean %0 {axes = array<i64: 2, 3>, keepdims = true} : tensor<1x4x6x6xf32> -> tensor<1x4x1x1xf32>
  %2 = tec.sigmoid %1 : tensor<1x4x1x1xf32>
  %3 = tec.mul %0, %2 : (tensor<1x4x6x6xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x6x6xf32>
  return %3 : tensor<1x4x6x6xf32>
}

// -----

// Global pooling without keepdims: [N, C] comes out in order, no transpose after it.
// CHECK-LABEL: func @global_pool_flat
//       CHECK:   %[[A:.+]] = tec.conv
//       CHECK:   %[[P:.+]] = tec.reduce_mean %[[A]] {axes = array<i64: 1, 2>, keepdims = false} : tensor<2x6x6x4xf32> -> tensor<2x4xf32>
//       CHECK:   return %[[P]]
func.func @global_pool_flat(%x: tensor<2x4x6x6xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<2x4xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x6x6xf32>
  %1 = tec.reduce_mean %0 {axes = array<i64: 2, 3>, keepdims = false} : tensor<2x4x6x6xf32> -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}

// -----

// Skip connections joined along the channels (a U-Net): the concat runs along NHWC's last dim.
// CHECK-LABEL: func @concat_channels
//       CHECK:   %[[R:.+]] = tec.relu
//       CHECK:   %[[B:.+]] = tec.conv %[[R]]
//       CHECK:   %[[C:.+]] = tec.concat %[[R]], %[[B]] {axis = 3 : i64} : (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>) -> tensor<1x6x6x8xf32>
//       CHECK:   tec.conv %[[C]]
func.func @concat_channels(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %w2: tensor<2x8x3x3xf32>) -> tensor<1x2x6x6xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %1 = tec.relu %0 : tensor<1x4x6x6xf32>
  %2 = tec.conv %1, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %3 = tec.concat %1, %2 {axis = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x8x6x6xf32>
  %4 = tec.conv %3, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x8x6x6xf32>, tensor<2x8x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %4 : tensor<1x2x6x6xf32>
}

// -----

// An image from elsewhere (a model input) added to a conv's: transposing it would cost as much as the
// transpose saved, so the conv's output goes back to NCHW before the add.
// CHECK-LABEL: func @foreign_operand
//       CHECK:   %[[A:.+]] = tec.conv
//       CHECK:   %[[T:.+]] = tec.transpose %[[A]] {perm = array<i64: 0, 3, 1, 2>}
//       CHECK:   tec.add %[[T]], %arg2 : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>)
func.func @foreign_operand(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %y: tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %1 = tec.add %0, %y : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %1 : tensor<1x4x6x6xf32>
}

// -----

// Other transposes (attention's head split) are not this pass's to move.
// CHECK-LABEL: func @other_transposes_stay
//       CHECK:   %[[T:.+]] = tec.transpose %arg0 {perm = array<i64: 0, 2, 1, 3>}
//       CHECK:   tec.relu %[[T]]
func.func @other_transposes_stay(%x: tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32> {
  %0 = tec.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %1 = tec.relu %0 : tensor<2x4x8x16xf32>
  return %1 : tensor<2x4x8x16xf32>
}

// -----

// A 1x1 conv over NHWC is a GEMM of each pixel by the [M, C] weight: tec.linear.
// CHECK-LABEL: func @pointwise_is_linear
//       CHECK:   %[[IN:.+]] = tec.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>}
//       CHECK:   %[[W:.+]] = tec.reshape %arg1 : tensor<8x4x1x1xf32> -> tensor<8x4xf32>
//       CHECK:   %[[Y:.+]] = tec.linear %[[IN]], %[[W]], %arg2 {transpose_b = true} : (tensor<2x6x5x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x6x5x8xf32>
//       CHECK:   tec.transpose %[[Y]] {perm = array<i64: 0, 3, 1, 2>}
func.func @pointwise_is_linear(%x: tensor<2x4x6x5xf32>, %w: tensor<8x4x1x1xf32>, %b: tensor<8xf32>) -> tensor<2x8x6x5xf32> {
  %0 = tec.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x6x5xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<2x8x6x5xf32>
  return %0 : tensor<2x8x6x5xf32>
}

// -----

// Strided or grouped 1x1 convs stay convolutions.
// CHECK-LABEL: func @strided_pointwise_stays_conv
//       CHECK:   tec.conv {{.*}}channels_last
//       CHECK:   tec.conv {{.*}}channels_last
func.func @strided_pointwise_stays_conv(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x1x1xf32>, %g: tensor<4x2x1x1xf32>) -> tensor<1x4x3x3xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %1 = tec.conv %0, %g {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x3x3xf32>, tensor<4x2x1x1xf32>) -> tensor<1x4x3x3xf32>
  return %1 : tensor<1x4x3x3xf32>
}

// -----

// A 1-D conv net: the importer's unit H leaves and comes back around the activation (reshapes); the
// transposes move through both reshapes and cancel.
// CHECK-LABEL: func @conv1d_reshapes
//       CHECK:   %[[A:.+]] = tec.conv {{.*}}channels_last
//       CHECK:   %[[R:.+]] = tec.reshape %[[A]] : tensor<1x1x16x4xf32> -> tensor<1x16x4xf32>
//       CHECK:   %[[G:.+]] = tec.gelu %[[R]] : tensor<1x16x4xf32>
//       CHECK:   %[[B:.+]] = tec.reshape %[[G]] : tensor<1x16x4xf32> -> tensor<1x1x16x4xf32>
//       CHECK:   tec.conv %[[B]], {{.*}}channels_last
func.func @conv1d_reshapes(%x: tensor<1x4x1x16xf32>, %w: tensor<4x4x1x3xf32>) -> tensor<1x4x1x16xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 1, 0, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x1x16xf32>, tensor<4x4x1x3xf32>) -> tensor<1x4x1x16xf32>
  %1 = tec.reshape %0 : tensor<1x4x1x16xf32> -> tensor<1x4x16xf32>
  %2 = tec.gelu %1 : tensor<1x4x16xf32>
  %3 = tec.reshape %2 : tensor<1x4x16xf32> -> tensor<1x4x1x16xf32>
  %4 = tec.conv %3, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 1, 0, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x1x16xf32>, tensor<4x4x1x3xf32>) -> tensor<1x4x1x16xf32>
  return %4 : tensor<1x4x1x16xf32>
}

// -----

// A reshape that reorders what the transpose moved (a flatten of C and H together) stops the transpose.
// CHECK-LABEL: func @flatten_stops
//       CHECK:   %[[A:.+]] = tec.conv
//       CHECK:   %[[T:.+]] = tec.transpose %[[A]] {perm = array<i64: 0, 3, 1, 2>}
//       CHECK:   tec.reshape %[[T]] : tensor<1x4x6x6xf32> -> tensor<1x144xf32>
func.func @flatten_stops(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<1x144xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %1 = tec.reshape %0 : tensor<1x4x6x6xf32> -> tensor<1x144xf32>
  return %1 : tensor<1x144xf32>
}

// -----

// A ResNet's max pool between the stem and the first block runs channels-last.
// CHECK-LABEL: func @stem_pool
//       CHECK:   %[[A:.+]] = tec.conv
//       CHECK:   %[[P:.+]] = tec.pool %[[A]] {channels_last, {{.*}}kind = "max"{{.*}}} : tensor<1x8x8x4xf32> -> tensor<1x4x4x4xf32>
//       CHECK:   tec.conv %[[P]]
func.func @stem_pool(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %w2: tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32> {
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  %1 = tec.pool %0 {kind = "max", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>
  %2 = tec.conv %1, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32>
  return %2 : tensor<1x4x4x4xf32>
}
