// Verifier negatives: each op rejects wrong element types and shapes with an expected-vs-actual message.
// RUN: tec-opt %s --split-input-file --verify-diagnostics

func.func @add_no_broadcast(%a: tensor<4x3xf32>, %b: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'tec.add' op operand shapes do not broadcast: 4x3 and 2x3}}
  %0 = tec.add %a, %b : (tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @add_wrong_result_shape(%a: tensor<4x3xf32>, %b: tensor<3xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'tec.add' op expected result shape 4x3 (broadcast of 4x3 and 3), got 4x4}}
  %0 = tec.add %a, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @mul_mixed_types(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.mul' op expected operand element type 'f32' (the result's), got 'f16'}}
  %0 = tec.mul %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @dynamic_shape(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{'tec.relu' op operand #0 must be statically shaped tensor}}
  %0 = tec.relu %a : tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

func.func @relu_on_ints(%a: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{'tec.relu' op operand #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %0 = tec.relu %a : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

func.func @gelu_bad_approximate(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.gelu' op expected approximate 'none' or 'tanh', got 'fast'}}
  %0 = tec.gelu %a {approximate = "fast"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @softmax_axis(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.softmax' op expected axis in [0, 2), got 2}}
  %0 = tec.softmax %a {axis = 2 : i64} : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_scale_shape(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.layer_norm' op expected scale/bias shape 8, got 4}}
  %0:3 = tec.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_stats_shape(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.layer_norm' op expected statistics shape 4x1, got 4}}
  %0:3 = tec.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_scale_shape(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.rms_norm' op expected scale/bias shape 8, got 4}}
  %0:2 = tec.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : (tensor<4x8xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_epsilon(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.rms_norm' op expected positive epsilon, got 0}}
  %0:2 = tec.rms_norm %x, %g {axis = 1 : i64, epsilon = 0.0 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @swiglu_shapes(%g: tensor<4x8xf32>, %u: tensor<4x3xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.swiglu' op}}
  %0 = tec.swiglu %g, %u : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @reduce_unsorted(%x: tensor<4x8xf32>) -> tensor<f32> {
  // expected-error @+1 {{'tec.reduce_sum' op expected sorted unique axes}}
  %0 = tec.reduce_sum %x {axes = array<i64: 1, 0>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @reduce_shape(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.reduce_mean' op expected result shape 4x1, got 4}}
  %0 = tec.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @matmul_inner(%a: tensor<4x8xf32>, %b: tensor<7x2xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'tec.matmul' op incompatible matmul operands 4x8 and 7x2}}
  %0 = tec.matmul %a, %b : (tensor<4x8xf32>, tensor<7x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @gemm_trans(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'tec.gemm' op expected matching inner dims, got 8 and 2}}
  %0 = tec.gemm %a, %b {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @linear_bias(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>, %b: tensor<256xf32>) -> tensor<64x128xf32> {
  // expected-error @+1 {{'tec.linear' op expected bias shape 128, got 256}}
  %0 = tec.linear %x, %w, %b {transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<256xf32>) -> tensor<64x128xf32>
  return %0 : tensor<64x128xf32>
}

// -----

func.func @linear_inner(%x: tensor<64x256xf32>, %w: tensor<128x256xf32>) -> tensor<64x256xf32> {
  // expected-error @+1 {{'tec.linear' op expected input inner dim 128 to match weight 128x256, got 256}}
  %0 = tec.linear %x, %w : (tensor<64x256xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  return %0 : tensor<64x256xf32>
}

// -----

func.func @linear_epilogue(%x: tensor<64x256xf32>, %w: tensor<256x128xf32>) -> tensor<64x128xf32> {
  // expected-error @+1 {{'tec.linear' op expected epilogue none, relu, gelu or gelu_tanh, got 'swish'}}
  %0 = tec.linear %x, %w {epilogue = "swish"} : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
  return %0 : tensor<64x128xf32>
}

// -----

func.func @transpose_perm(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'tec.transpose' op expected a permutation of [0, 2), got [1x1]}}
  %0 = tec.transpose %x {perm = array<i64: 1, 1>} : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) -> tensor<5x6xf32> {
  // expected-error @+1 {{'tec.reshape' op expected result with 32 elements, got 30}}
  %0 = tec.reshape %x : tensor<4x8xf32> -> tensor<5x6xf32>
  return %0 : tensor<5x6xf32>
}

// -----

func.func @expand_shape(%x: tensor<3x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.expand' op expected input 3x8 to broadcast to 4x8}}
  %0 = tec.expand %x : tensor<3x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @concat_dims(%a: tensor<4x2xf32>, %b: tensor<3x6xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tec.concat' op expected dim 0 of every input to be 4, got 3}}
  %0 = tec.concat %a, %b {axis = 1 : i64} : (tensor<4x2xf32>, tensor<3x6xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @split_sizes(%x: tensor<4x8xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'tec.split' op expected result sizes along axis 1 to add up to 8, got 7}}
  %0:2 = tec.split %x {axis = 1 : i64} : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x5xf32>)
  return %0#0 : tensor<4x2xf32>
}

// -----

func.func @slice_shape(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'tec.slice' op expected result shape 4x3, got 4x4}}
  %0 = tec.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 4, 8>, steps = array<i64: 1, 2>} : tensor<4x8xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @gather_indices(%t: tensor<100x16xf32>, %i: tensor<4xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'tec.gather' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = tec.gather %t, %i {axis = 0 : i64} : (tensor<100x16xf32>, tensor<4xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @where_condition(%c: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = tec.where %c, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @quantize_to_f16(%x: tensor<4xf32>, %s: tensor<f32>) -> tensor<4xf16> {
  // expected-error @+1 {{'tec.quantize' op expected f8E4M3FN or f8E5M2 result, got 'f16'}}
  %0 = tec.quantize %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @quantize_scale_not_scalar(%x: tensor<4xf32>, %s: tensor<4xf32>) -> tensor<4xf8E4M3FN> {
  // expected-error @+1 {{'tec.quantize' op operand #1 must be 0D tensor of 32-bit float values}}
  %0 = tec.quantize %x, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf8E4M3FN>
  return %0 : tensor<4xf8E4M3FN>
}

// -----

func.func @dequantize_from_f32(%x: tensor<4xf32>, %s: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.dequantize' op expected f8E4M3FN or f8E5M2 input, got 'f32'}}
  %0 = tec.dequantize %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @fp8_gemm_two_e5m2(%a: tensor<64x128xf8E5M2>, %b: tensor<128x128xf8E5M2>, %s: tensor<f32>) -> tensor<64x128xf32> {
  // expected-error @+1 {{'tec.fp8_gemm' op expected at most one f8E5M2 operand, got two (cuBLASLt has no E5M2 x E5M2 GEMM)}}
  %0 = tec.fp8_gemm %a, %b, %s, %s : (tensor<64x128xf8E5M2>, tensor<128x128xf8E5M2>, tensor<f32>, tensor<f32>) -> tensor<64x128xf32>
  return %0 : tensor<64x128xf32>
}

// -----

func.func @fp8_gemm_f32_operand(%a: tensor<64x128xf32>, %b: tensor<128x128xf8E4M3FN>, %s: tensor<f32>) -> tensor<64x128xf32> {
  // expected-error @+1 {{'tec.fp8_gemm' op operand #0 must be statically shaped tensor of f8E4M3FN type or f8E5M2 type values}}
  %0 = tec.fp8_gemm %a, %b, %s, %s : (tensor<64x128xf32>, tensor<128x128xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<64x128xf32>
  return %0 : tensor<64x128xf32>
}

// -----

func.func @delayed_scaling_fp8_max(%h: tensor<16xf32>, %s: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{'tec.delayed_scaling' op expected fp8_max 448 (E4M3) or 57344 (E5M2), got 240}}
  %0:3 = tec.delayed_scaling %h, %s, %s {fp8_max = 240.0 : f32} : (tensor<16xf32>, tensor<f32>, tensor<f32>) -> (tensor<16xf32>, tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}

// -----

func.func @delayed_scaling_history(%h: tensor<16xf32>, %s: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{'tec.delayed_scaling' op expected new history of type 'tensor<16xf32>', got 'tensor<8xf32>'}}
  %0:3 = tec.delayed_scaling %h, %s, %s {fp8_max = 448.0 : f32} : (tensor<16xf32>, tensor<f32>, tensor<f32>) -> (tensor<8xf32>, tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}

// -----

func.func @one_hot_shape(%l: tensor<4xi64>) -> tensor<5x10xf32> {
  // expected-error @+1 {{'tec.one_hot' op expected result shape 4xDEPTH, got 5x10}}
  %0 = tec.one_hot %l : tensor<4xi64> -> tensor<5x10xf32>
  return %0 : tensor<5x10xf32>
}

// -----

func.func @lr_schedule_cosine(%s: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{'tec.lr_schedule' op expected total_steps > warmup_steps for cosine, got 10 <= 10}}
  %0 = tec.lr_schedule %s, %s {schedule = "cosine", warmup_steps = 10 : i64, total_steps = 10 : i64} : tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @optimizer_update_moments(%p: tensor<4xf32>, %lr: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.optimizer_update' op expected 2 moments for adamw, got 0}}
  %0 = tec.optimizer_update %p, %p : tensor<4xf32>, tensor<4xf32> lr(%lr : tensor<f32>) step(%lr : tensor<f32>) {optimizer = "adamw"} -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @optimizer_update_kind(%p: tensor<4xf32>, %lr: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.optimizer_update' op expected optimizer sgd or adamw, got 'lion'}}
  %0 = tec.optimizer_update %p, %p : tensor<4xf32>, tensor<4xf32> lr(%lr : tensor<f32>) step(%lr : tensor<f32>) {optimizer = "lion"} -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @optimizer_update_shape(%p: tensor<4xf32>, %m: tensor<5xf32>, %lr: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{'tec.optimizer_update' op expected every moment of the param's type 'tensor<4xf32>', got 'tensor<5xf32>'}}
  %0, %1 = tec.optimizer_update %p, %p : tensor<4xf32>, tensor<4xf32> moments(%m : tensor<5xf32>) lr(%lr : tensor<f32>) step(%lr : tensor<f32>) {optimizer = "sgd", momentum = 0.9 : f32} -> tensor<4xf32>, tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @compare_unknown_predicate(%a: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error @+1 {{'tec.compare' op expected predicate eq, ne, lt, le, gt, ge, and, or or xor, got 'approx'}}
  %0 = tec.compare %a, %a {predicate = "approx"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @compare_mixed_types(%a: tensor<4xf32>, %b: tensor<4xi64>) -> tensor<4xi1> {
  // expected-error @+1 {{'tec.compare' op expected operands of one element type, got 'f32' and 'i64'}}
  %0 = tec.compare %a, %b {predicate = "eq"} : (tensor<4xf32>, tensor<4xi64>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @logical_on_floats(%a: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error @+1 {{'tec.compare' op expected bool operands for 'and', got 'f32'}}
  %0 = tec.compare %a, %a {predicate = "and"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @float_python_mod(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.mod' op expected fmod = true for a float remainder, got fmod = false on 'f32'}}
  %0 = tec.mod %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gather_elements_short_indices(%s: tensor<8x10xf32>, %l: tensor<4x1xi64>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'tec.gather_elements' op expected indices of the data's shape off axis 1 (8x10), got 4x1}}
  %0 = tec.gather_elements %s, %l {axis = 1 : i64} : (tensor<8x10xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

func.func @scatter_add_wrong_updates(%dy: tensor<4x8xf32>, %ids: tensor<4x8xi64>) -> tensor<100x16xf32> {
  // expected-error @+1 {{'tec.scatter_add' op expected updates of shape 4x8x16, got 4x8}}
  %0 = tec.scatter_add %dy, %ids {axis = 0 : i64, elements = false} : (tensor<4x8xf32>, tensor<4x8xi64>) -> tensor<100x16xf32>
  return %0 : tensor<100x16xf32>
}

// -----

func.func @conv_wrong_output(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  // expected-error @+1 {{'tec.conv' op expected output shape 1x4x6x6, got 1x4x8x8}}
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}

// -----

// channels_last reads [N, H, W, C]: an NCHW result does not follow from the window.
func.func @conv_channels_last_nchw_output(%x: tensor<1x8x8x3xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error @+1 {{'tec.conv' op expected output shape 1x4x6x6, got 1x6x4x6}}
  %0 = tec.conv %x, %w {channels_last, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_group_mismatch(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error @+1 {{'tec.conv' op expected weight dim 1 = input channels / group (3 / 3) and output channels divisible by the group, got weight 4x3x3x3}}
  %0 = tec.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 3 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @pool_unknown_kind(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error @+1 {{'tec.pool' op expected kind max or avg, got 'lp'}}
  %0 = tec.pool %x {kind = "lp", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @cumsum_axis(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'tec.cumsum' op expected axis in [0, 2), got 2}}
  %0 = tec.cumsum %x {axis = 2 : i64} : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @attention_heads(%q: tensor<1x6x4x8xf32>, %k: tensor<1x4x4x8xf32>) -> tensor<1x6x4x8xf32> {
  // expected-error @+1 {{'tec.attention' op expected the query heads (6) to be a multiple of the key heads (4)}}
  %o, %lse = tec.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<1x6x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>) -> (tensor<1x6x4x8xf32>, tensor<1x6x4xf32>)
  return %o : tensor<1x6x4x8xf32>
}

// -----

func.func @attention_head_size(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32> {
  // expected-error @+1 {{'tec.attention' op expected key [1, Hk, Tk, 8] and value [1, Hk, Tk, Dv] for query 1x2x4x8, got 1x2x4x16 and 1x2x4x16}}
  %o, %lse = tec.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> (tensor<1x2x4x16xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x16xf32>
}

// -----

func.func @attention_mask(%q: tensor<1x2x4x8xf32>, %m: tensor<1x1x3x4xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'tec.attention' op expected a 4-D mask broadcasting to the scores 1x2x4x4, got 1x1x3x4}}
  %o, %lse = tec.attention %q, %q, %q, %m {scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x3x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_logsumexp(%q: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'tec.attention' op expected logsumexp shape 1x2x4, got 1x2x4x1}}
  %o, %lse = tec.attention %q, %q, %q {scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x1xf32>)
  return %o : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_grad_types(%q: tensor<1x2x4x8xf32>, %lse: tensor<1x2x4xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'tec.attention_grad' op expected gradients of the query's, key's and value's types}}
  %dq, %dk, %dv = tec.attention_grad %q, %q, %q, %q, %q, %lse {scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>)
  return %dq : tensor<1x2x4x8xf32>
}

// -----

func.func @cast_fp8_activation(%x: tensor<4x8xbf16>, %s: tensor<f32>) -> tensor<4x8xf8E4M3FN> {
  // expected-error @+1 {{'tec.cast_fp8' op expected activation none, gelu or gelu_tanh, got 'relu'}}
  %q, %a = tec.cast_fp8 %x, %s {activation = "relu"} : (tensor<4x8xbf16>, tensor<f32>) -> (tensor<4x8xf8E4M3FN>, tensor<f32>)
  return %q : tensor<4x8xf8E4M3FN>
}

// -----

func.func @all_reduce_reduction(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.all_reduce' op expected reduction sum, max or mean, got 'min'}}
  %0 = tec.all_reduce %g {reduction = "min"} : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @all_reduce_types(%g: tensor<4xf32>, %h: tensor<2xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.all_reduce' op expected result 1 of its input's type 'tensor<2xf32>', got 'tensor<4xf32>'}}
  %0:2 = tec.all_reduce %g, %h {reduction = "sum"} : tensor<4xf32>, tensor<2xf32> -> tensor<4xf32>, tensor<4xf32>
  return %0#0 : tensor<4xf32>
}

// -----

func.func @reduce_scatter_shard_size(%g: tensor<3x5xf32>) -> tensor<7xf32> {
  // expected-error @+1 {{'tec.reduce_scatter' op expected tensor 0's shard over 2 ranks of 'tensor<3x5xf32>' to be tensor<8xf32>, got 'tensor<7xf32>'}}
  %0 = tec.reduce_scatter %g {ranks = 2 : i64} : tensor<3x5xf32> -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

func.func @all_gather_whole_size(%s: tensor<8xf32>) -> tensor<4x5xf32> {
  // expected-error @+1 {{'tec.all_gather' op expected tensor 0's shard over 2 ranks of 'tensor<4x5xf32>' to be tensor<10xf32>, got 'tensor<8xf32>'}}
  %0 = tec.all_gather %s {ranks = 2 : i64} : tensor<8xf32> -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

func.func @shard_ranks(%p: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tec.shard' op expected ranks >= 1, got 0}}
  %0 = tec.shard %p {ranks = 0 : i64} : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
