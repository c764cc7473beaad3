// Round trip of every tec op: print, parse again, and through the generic form too.
// RUN: tec-opt %s | tec-opt | FileCheck %s
// RUN: tec-opt %s --mlir-print-op-generic | tec-opt | FileCheck %s

// CHECK-LABEL: func @elementwise
func.func @elementwise(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x1xi1>, %i: tensor<4x8xi64>) -> tensor<4x8xf32> {
  // CHECK: tec.add %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = tec.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.sub
  %1 = tec.sub %0, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.mul
  %2 = tec.mul %1, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.div
  %3 = tec.div %2, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.pow
  %4 = tec.pow %3, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.add %{{.*}} : (tensor<4x8xi64>, tensor<4x8xi64>) -> tensor<4x8xi64>
  %ints = tec.add %i, %i : (tensor<4x8xi64>, tensor<4x8xi64>) -> tensor<4x8xi64>
  // CHECK: tec.relu %{{.*}} : tensor<4x8xf32>
  %5 = tec.relu %4 : tensor<4x8xf32>
  // CHECK: tec.tanh
  %6 = tec.tanh %5 : tensor<4x8xf32>
  // CHECK: tec.sigmoid
  %7 = tec.sigmoid %6 : tensor<4x8xf32>
  // CHECK: tec.erf
  %8 = tec.erf %7 : tensor<4x8xf32>
  // CHECK: tec.sqrt
  %9 = tec.sqrt %8 : tensor<4x8xf32>
  // CHECK: tec.exp
  %e = tec.exp %9 : tensor<4x8xf32>
  // CHECK: tec.relu_grad %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %rg = tec.relu_grad %e, %9 : tensor<4x8xf32>
  // CHECK: tec.gelu_grad %{{.*}}, %{{.*}} {approximate = "tanh"} : tensor<4x8xf32>
  %gg = tec.gelu_grad %rg, %9 {approximate = "tanh"} : tensor<4x8xf32>
  // CHECK: tec.gelu %{{.*}} : tensor<4x8xf32>
  %10 = tec.gelu %gg : tensor<4x8xf32>
  // CHECK: tec.gelu %{{.*}} {approximate = "tanh"} : tensor<4x8xf32>
  %11 = tec.gelu %10 {approximate = "tanh"} : tensor<4x8xf32>
  // CHECK: tec.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %12 = tec.where %c, %11, %b : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.cast %{{.*}} : tensor<4x8xf32> to tensor<4x8xbf16>
  %13 = tec.cast %12 : tensor<4x8xf32> to tensor<4x8xbf16>
  // CHECK: tec.cast %{{.*}} : tensor<4x8xbf16> to tensor<4x8xf32>
  %14 = tec.cast %13 : tensor<4x8xbf16> to tensor<4x8xf32>
  return %14 : tensor<4x8xf32>
}

// CHECK-LABEL: func @training
func.func @training(%x: tensor<4x8xf32>, %labels: tensor<4xi64>, %step: tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x10xf32>, tensor<f32>, tensor<f32>) {
  // CHECK: tec.abs %{{.*}} : tensor<4x8xf32>
  %0 = tec.abs %x : tensor<4x8xf32>
  // CHECK: tec.neg
  // CHECK: tec.reciprocal
  // CHECK: tec.log
  // CHECK: tec.sin
  // CHECK: tec.cos
  // CHECK: tec.softplus
  // CHECK: tec.floor
  // CHECK: tec.ceil
  %n0 = tec.neg %x : tensor<4x8xf32>
  %n1 = tec.reciprocal %n0 : tensor<4x8xf32>
  %n2 = tec.log %n1 : tensor<4x8xf32>
  %n3 = tec.sin %n2 : tensor<4x8xf32>
  %n4 = tec.cos %n3 : tensor<4x8xf32>
  %n5 = tec.softplus %n4 : tensor<4x8xf32>
  %n6 = tec.floor %n5 : tensor<4x8xf32>
  %n7 = tec.ceil %n6 : tensor<4x8xf32>
  // CHECK: tec.sign %{{.*}} : tensor<4x8xf32>
  %1 = tec.sign %x : tensor<4x8xf32>
  // CHECK: tec.one_hot %{{.*}} : tensor<4xi64> -> tensor<4x10xf32>
  %2 = tec.one_hot %labels : tensor<4xi64> -> tensor<4x10xf32>
  // CHECK: tec.clip_coefficient %{{.*}} {max_norm = 1.000000e+00 : f32} : tensor<f32>
  %3 = tec.clip_coefficient %step {max_norm = 1.0 : f32} : tensor<f32>
  // CHECK: tec.lr_schedule %{{.*}}, %{{.*}} {schedule = "cosine", total_steps = 100 : i64, warmup_steps = 10 : i64} : tensor<f32>
  %4 = tec.lr_schedule %step, %step {schedule = "cosine", warmup_steps = 10 : i64, total_steps = 100 : i64} : tensor<f32>
  return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x10xf32>, tensor<f32>, tensor<f32>
}

// CHECK-LABEL: func @constant
func.func @constant() -> tensor<2xf32> {
  // CHECK: tec.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
  %0 = tec.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// CHECK-LABEL: func @normalization
func.func @normalization(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) {
  // CHECK: tec.softmax %{{.*}} {axis = 1 : i64} : tensor<4x8xf32>
  %0 = tec.softmax %x {axis = 1 : i64} : tensor<4x8xf32>
  // CHECK: tec.log_softmax %{{.*}} {axis = 0 : i64} : tensor<4x8xf32>
  %1 = tec.log_softmax %x {axis = 0 : i64} : tensor<4x8xf32>
  // CHECK: tec.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999974E-6 : f32}
  %2:3 = tec.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  // CHECK: tec.layer_norm %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 1.000000e-03 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %3:3 = tec.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-03 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  // CHECK: tec.reduce_mean %{{.*}} {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %4 = tec.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  // CHECK: tec.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
  %5 = tec.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
  return %0, %1, %2#0, %3#0, %4, %5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>
}

// CHECK-LABEL: func @rms_norm_swiglu
func.func @rms_norm_swiglu(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %u: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: tec.rms_norm %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>)
  %0:2 = tec.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>)
  // CHECK: tec.swiglu %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tec.swiglu %0#0, %u : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0#0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func @gemms
func.func @gemms(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xf32>, %x3: tensor<2x4x256xf32>, %wkn: tensor<256x128xf32>) -> (tensor<2x4x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>, tensor<2x4x128xf32>) {
  // CHECK: tec.matmul %{{.*}}, %{{.*}} : (tensor<2x4x256xf32>, tensor<256x128xf32>) -> tensor<2x4x128xf32>
  %0 = tec.matmul %x3, %wkn : (tensor<2x4x256xf32>, tensor<256x128xf32>) -> tensor<2x4x128xf32>
  // CHECK: tec.gemm %{{.*}}, %{{.*}}, %{{.*}} {alpha = 1.000000e+00 : f32, beta = 5.000000e-01 : f32, trans_a = false, trans_b = true}
  %1 = tec.gemm %x, %w, %b {alpha = 1.0 : f32, beta = 0.5 : f32, trans_a = false, trans_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  // CHECK: tec.gemm %{{.*}}, %{{.*}} {alpha
  %2 = tec.gemm %x, %w {alpha = 2.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>) -> tensor<64x128xf32>
  // CHECK: tec.linear %{{.*}}, %{{.*}}, %{{.*}} {epilogue = "relu", transpose_b = true}
  %3 = tec.linear %x, %w, %b {epilogue = "relu", transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  // CHECK: tec.linear %{{.*}}, %{{.*}} {epilogue = "gelu_tanh"} : (tensor<2x4x256xf32>, tensor<256x128xf32>) -> tensor<2x4x128xf32>
  %4 = tec.linear %x3, %wkn {epilogue = "gelu_tanh"} : (tensor<2x4x256xf32>, tensor<256x128xf32>) -> tensor<2x4x128xf32>
  return %0, %1, %2, %3, %4 : tensor<2x4x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>, tensor<2x4x128xf32>
}

// CHECK-LABEL: func @shapes
func.func @shapes(%x: tensor<4x8xf32>, %y: tensor<4x6xf32>, %r: tensor<1x8xf32>, %table: tensor<100x16xf32>, %ids: tensor<4x8xi64>) -> (tensor<8x4xf32>, tensor<2x2x8xf32>, tensor<4x8xf32>, tensor<4x14xf32>, tensor<4x2xf32>, tensor<4x3xf32>, tensor<4x8x16xf32>) {
  // CHECK: tec.transpose %{{.*}} {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %0 = tec.transpose %x {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  // CHECK: tec.reshape %{{.*}} : tensor<4x8xf32> -> tensor<2x2x8xf32>
  %1 = tec.reshape %x : tensor<4x8xf32> -> tensor<2x2x8xf32>
  // CHECK: tec.expand %{{.*}} : tensor<1x8xf32> -> tensor<4x8xf32>
  %2 = tec.expand %r : tensor<1x8xf32> -> tensor<4x8xf32>
  // CHECK: tec.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<4x14xf32>
  %3 = tec.concat %x, %y {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<4x14xf32>
  // CHECK: tec.split %{{.*}} {axis = 1 : i64} : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x6xf32>)
  %4:2 = tec.split %x {axis = 1 : i64} : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x6xf32>)
  // CHECK: tec.slice %{{.*}} {ends = array<i64: 4, 8>, starts = array<i64: 0, 2>, steps = array<i64: 1, 2>} : tensor<4x8xf32> -> tensor<4x3xf32>
  %5 = tec.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 4, 8>, steps = array<i64: 1, 2>} : tensor<4x8xf32> -> tensor<4x3xf32>
  // CHECK: tec.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<100x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
  %6 = tec.gather %table, %ids {axis = 0 : i64} : (tensor<100x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
  return %0, %1, %2, %3, %4#0, %5, %6 : tensor<8x4xf32>, tensor<2x2x8xf32>, tensor<4x8xf32>, tensor<4x14xf32>, tensor<4x2xf32>, tensor<4x3xf32>, tensor<4x8x16xf32>
}

// CHECK-LABEL: func @fp8
func.func @fp8(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xbf16>, %dy: tensor<64x128xf32>,
               %s: tensor<f32>, %hist: tensor<1024xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xf32>, tensor<1024xf32>, tensor<f32>, tensor<f32>) {
  // CHECK: tec.quantize %{{.*}}, %{{.*}} : (tensor<64x256xf32>, tensor<f32>) -> tensor<64x256xf8E4M3FN>
  %xq = tec.quantize %x, %s : (tensor<64x256xf32>, tensor<f32>) -> tensor<64x256xf8E4M3FN>
  %wq = tec.quantize %w, %s : (tensor<128x256xf32>, tensor<f32>) -> tensor<128x256xf8E4M3FN>
  // CHECK: tec.quantize %{{.*}}, %{{.*}} : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf8E5M2>
  %dyq = tec.quantize %dy, %s : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf8E5M2>
  // CHECK: tec.dequantize %{{.*}}, %{{.*}} : (tensor<64x256xf8E4M3FN>, tensor<f32>) -> tensor<64x256xf32>
  %xd = tec.dequantize %xq, %s : (tensor<64x256xf8E4M3FN>, tensor<f32>) -> tensor<64x256xf32>
  // CHECK: tec.amax %{{.*}} : tensor<64x256xf32> -> tensor<f32>
  %a = tec.amax %x : tensor<64x256xf32> -> tensor<f32>
  // CHECK: tec.fp8_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {epilogue = "gelu_tanh", transpose_b = true}
  %y = tec.fp8_gemm %xq, %wq, %s, %s, %b {epilogue = "gelu_tanh", transpose_b = true} : (tensor<64x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<f32>, tensor<f32>, tensor<128xbf16>) -> tensor<64x128xbf16>
  // dgrad in the HYBRID recipe: E5M2 gradient times E4M3 weight.
  // CHECK: tec.fp8_gemm {{.*}} : (tensor<64x128xf8E5M2>, tensor<128x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<64x256xf32>
  %dx = tec.fp8_gemm %dyq, %wq, %s, %s : (tensor<64x128xf8E5M2>, tensor<128x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<64x256xf32>
  // CHECK: tec.delayed_scaling %{{.*}}, %{{.*}}, %{{.*}} {algo = "most_recent", fp8_max = 4.480000e+02 : f32, margin = 1 : i64}
  %h, %ns, %nsi = tec.delayed_scaling %hist, %s, %a {fp8_max = 448.0 : f32, margin = 1 : i64, algo = "most_recent"} : (tensor<1024xf32>, tensor<f32>, tensor<f32>) -> (tensor<1024xf32>, tensor<f32>, tensor<f32>)
  return %y, %xd, %dx, %h, %ns, %nsi : tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xf32>, tensor<1024xf32>, tensor<f32>, tensor<f32>
}

// CHECK-LABEL: func @optimizer_update
func.func @optimizer_update(%p: tensor<4x8xf32>, %g: tensor<4x8xf32>, %m: tensor<4x8xf32>, %v: tensor<4x8xf32>,
                            %lr: tensor<f32>, %t: tensor<f32>, %ok: tensor<i1>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: tec.optimizer_update %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32> moments(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>) lr(%{{.*}} : tensor<f32>) step(%{{.*}} : tensor<f32>) clip(%{{.*}} : tensor<f32>) finite(%{{.*}} : tensor<i1>) {{{.*}}optimizer = "adamw"{{.*}}} -> tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  %p1, %m1, %v1 = tec.optimizer_update %p, %g : tensor<4x8xf32>, tensor<4x8xf32> moments(%m, %v : tensor<4x8xf32>, tensor<4x8xf32>)
      lr(%lr : tensor<f32>) step(%t : tensor<f32>) clip(%lr : tensor<f32>) finite(%ok : tensor<i1>)
      {optimizer = "adamw", beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32}
      -> tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  // Plain SGD has no moments.
  // CHECK: tec.optimizer_update %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32> lr(%{{.*}} : tensor<f32>) step(%{{.*}} : tensor<f32>) {optimizer = "sgd"} -> tensor<4x8xf32>
  %p2 = tec.optimizer_update %p, %g : tensor<4x8xf32>, tensor<4x8xf32> lr(%lr : tensor<f32>) step(%t : tensor<f32>) {optimizer = "sgd"} -> tensor<4x8xf32>
  return %p1, %m1, %v1, %p2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func @compare_and_select
func.func @compare_and_select(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %i: tensor<4xi64>, %j: tensor<4xi64>, %p: tensor<4x8xi1>)
    -> (tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xi64>, tensor<4xi64>) {
  // CHECK: tec.compare %{{.*}}, %{{.*}} {predicate = "lt"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %0 = tec.compare %a, %b {predicate = "lt"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: tec.compare %{{.*}}, %{{.*}} {predicate = "xor"} : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  %1 = tec.compare %0, %p {predicate = "xor"} : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  // CHECK: tec.max %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = tec.max %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.min
  %3 = tec.min %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: tec.mod %{{.*}}, %{{.*}} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %4 = tec.mod %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: tec.mod %{{.*}}, %{{.*}} {fmod = true}
  %5 = tec.mod %i, %j {fmod = true} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return %0, %1, %2, %3, %4, %5 : tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xi64>, tensor<4xi64>
}

// CHECK-LABEL: func @indexing
func.func @indexing(%t: tensor<100x16xf32>, %ids: tensor<4x8xi64>, %s: tensor<8x10xf32>, %l: tensor<8x1xi64>, %dy: tensor<4x8x16xf32>)
    -> (tensor<8x1xf32>, tensor<100x16xf32>) {
  // CHECK: tec.gather_elements %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<8x10xf32>, tensor<8x1xi64>) -> tensor<8x1xf32>
  %0 = tec.gather_elements %s, %l {axis = 1 : i64} : (tensor<8x10xf32>, tensor<8x1xi64>) -> tensor<8x1xf32>
  // CHECK: tec.scatter_add %{{.*}}, %{{.*}} {axis = 0 : i64, elements = false} : (tensor<4x8x16xf32>, tensor<4x8xi64>) -> tensor<100x16xf32>
  %1 = tec.scatter_add %dy, %ids {axis = 0 : i64, elements = false} : (tensor<4x8x16xf32>, tensor<4x8xi64>) -> tensor<100x16xf32>
  return %0, %1 : tensor<8x1xf32>, tensor<100x16xf32>
}

// CHECK-LABEL: func @extreme_reductions
func.func @extreme_reductions(%x: tensor<4x8xf32>, %i: tensor<4x8xi32>) -> (tensor<4x1xf32>, tensor<8xf32>, tensor<4xi32>) {
  // CHECK: tec.reduce_max %{{.*}} {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %0 = tec.reduce_max %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  // CHECK: tec.reduce_min
  %1 = tec.reduce_min %x {axes = array<i64: 0>, keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: tec.reduce_prod
  %2 = tec.reduce_prod %i {axes = array<i64: 1>, keepdims = false} : tensor<4x8xi32> -> tensor<4xi32>
  return %0, %1, %2 : tensor<4x1xf32>, tensor<8xf32>, tensor<4xi32>
}

// CHECK-LABEL: func @windows
func.func @windows(%x: tensor<8x3x32x32xf32>, %w: tensor<16x3x3x3xf32>, %b: tensor<16xf32>) -> (tensor<8x16x16x16xf32>, tensor<8x3x16x16xf32>) {
  // CHECK: tec.conv %{{.*}}, %{{.*}}, %{{.*}} {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}
  %0 = tec.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64}
       : (tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<8x16x16x16xf32>
  // ceil_mode shows in the result: 32 with kernel 3, stride 2 is 15 floored, 16 ceiled.
  // CHECK: tec.pool %{{.*}} {{{.*}}kind = "max"{{.*}}} : tensor<8x3x32x32xf32> -> tensor<8x3x16x16xf32>
  %1 = tec.pool %x {kind = "max", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
       : tensor<8x3x32x32xf32> -> tensor<8x3x16x16xf32>
  return %0, %1 : tensor<8x16x16x16xf32>, tensor<8x3x16x16xf32>
}

// CHECK-LABEL: func @cumsum
func.func @cumsum(%x: tensor<2x8xi64>) -> tensor<2x8xi64> {
  // CHECK: tec.cumsum %{{.*}} {axis = 1 : i64, exclusive = true} : tensor<2x8xi64>
  %0 = tec.cumsum %x {axis = 1 : i64, exclusive = true} : tensor<2x8xi64>
  return %0 : tensor<2x8xi64>
}

// CHECK-LABEL: func @arg_reduce
func.func @arg_reduce(%x: tensor<8x10xf32>) -> tensor<8xi64> {
  // CHECK: tec.arg_reduce %{{.*}} {axis = 1 : i64, keepdims = false, kind = "max"} : tensor<8x10xf32> -> tensor<8xi64>
  %0 = tec.arg_reduce %x {kind = "max", axis = 1 : i64, keepdims = false} : tensor<8x10xf32> -> tensor<8xi64>
  return %0 : tensor<8xi64>
}

// Grouped-query attention with a boolean mask, and its gradient: both round-trip.
// CHECK-LABEL: func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %kv: tensor<2x2x8x16xf32>, %m: tensor<2x1x1x8xi1>, %do: tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>) {
  // CHECK: tec.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal = true, scale = 2.500000e-01 : f32}
  %o, %lse = tec.attention %q, %kv, %kv, %m {causal = true, scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x1x1x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  // CHECK: tec.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal = true, scale = 2.500000e-01 : f32}
  %dq, %dk, %dv = tec.attention_grad %do, %q, %kv, %kv, %o, %lse, %m {causal = true, scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x1x1x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  return %dq, %dk : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>
}

// The fused FP8 casts: round-trip.
// CHECK-LABEL: func @fused_fp8_casts
func.func @fused_fp8_casts(%x: tensor<4x8xbf16>, %g: tensor<8xbf16>, %s: tensor<f32>) -> (tensor<4x8xf8E4M3FN>, tensor<4x8xf8E4M3FN>) {
  // CHECK: tec.cast_fp8 %{{.*}}, %{{.*}} {activation = "gelu_tanh"}
  %q, %a = tec.cast_fp8 %x, %s {activation = "gelu_tanh"} : (tensor<4x8xbf16>, tensor<f32>) -> (tensor<4x8xf8E4M3FN>, tensor<f32>)
  // CHECK: tec.layer_norm_fp8 %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999974E-6 : f32}
  %q2, %a2, %m, %r = tec.layer_norm_fp8 %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<f32>) -> (tensor<4x8xf8E4M3FN>, tensor<f32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %q, %q2 : tensor<4x8xf8E4M3FN>, tensor<4x8xf8E4M3FN>
}

// CHECK-LABEL: func @collectives
func.func @collectives(%g: tensor<4x8xf32>, %b: tensor<8xf32>, %a: tensor<f32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<f32>, tensor<f32>) {
  // CHECK: %[[N:.+]] = tec.world_size : tensor<f32>
  %n = tec.world_size : tensor<f32>
  // CHECK: tec.all_reduce %{{.*}}, %{{.*}} {reduction = "sum"} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>
  %0:2 = tec.all_reduce %g, %b {reduction = "sum"} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>
  // CHECK: tec.all_reduce %{{.*}} {reduction = "max"} : tensor<f32> -> tensor<f32>
  %1 = tec.all_reduce %a {reduction = "max"} : tensor<f32> -> tensor<f32>
  return %0#0, %0#1, %1, %n : tensor<4x8xf32>, tensor<8xf32>, tensor<f32>, tensor<f32>
}

// Optimizer sharding over 3 ranks: 15 elements in shards of 5, 4 in shards of 2 (padded with 2 zeros).
// CHECK-LABEL: func @sharding
func.func @sharding(%g: tensor<3x5xf32>, %b: tensor<4xf32>) -> (tensor<3x5xf32>, tensor<4xf32>, tensor<5xf32>) {
  // CHECK: tec.reduce_scatter %{{.*}}, %{{.*}} {ranks = 3 : i64} : tensor<3x5xf32>, tensor<4xf32> -> tensor<5xf32>, tensor<2xf32>
  %s:2 = tec.reduce_scatter %g, %b {ranks = 3 : i64} : tensor<3x5xf32>, tensor<4xf32> -> tensor<5xf32>, tensor<2xf32>
  // CHECK: tec.shard %{{.*}} {ranks = 3 : i64} : tensor<3x5xf32> -> tensor<5xf32>
  %p = tec.shard %g {ranks = 3 : i64} : tensor<3x5xf32> -> tensor<5xf32>
  // CHECK: tec.all_gather %{{.*}}, %{{.*}} {ranks = 3 : i64} : tensor<5xf32>, tensor<2xf32> -> tensor<3x5xf32>, tensor<4xf32>
  %w:2 = tec.all_gather %s#0, %s#1 {ranks = 3 : i64} : tensor<5xf32>, tensor<2xf32> -> tensor<3x5xf32>, tensor<4xf32>
  return %w#0, %w#1, %p : tensor<3x5xf32>, tensor<4xf32>, tensor<5xf32>
}
