// The tec dialect's FP8 quantization, scaling and GEMMs (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_FP8
#define TEC_OPS_FP8

//===----------------------------------------------------------------------===//
// FP8
//===----------------------------------------------------------------------===//

def Tec_QuantizeOp : Tec_Op<"quantize", [Pure]> {
  let summary = "scale and cast to FP8, round to nearest even, saturate to finite";
  let description = [{
    `result = fp8(input * scale)`, bit for bit CUDA's `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, …)`:
    E4M3 saturates at ±448, E5M2 at ±57344, NaN stays NaN. `scale` is the tensor's per-tensor
    delayed-scaling scale. With `transpose_input` a 2-D input [R, C] is read transposed into a [C, R]
    result: the TN operand of a backward GEMM in one pass, without the transposed copy in between.

    Example:
    ```mlir
    %0 = tec.quantize %x, %scale : (tensor<64x256xf32>, tensor<f32>) -> tensor<64x256xf8E4M3FN>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_Scalar:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_DequantizeOp : Tec_Op<"dequantize", [Pure]> {
  let summary = "widen FP8 and multiply by scale_inv";
  let description = [{
    `result = float(input) * scale_inv`, the inverse of `tec.quantize` up to FP8 rounding.

    Example:
    ```mlir
    %0 = tec.dequantize %q, %scale_inv : (tensor<64x256xf8E4M3FN>, tensor<f32>) -> tensor<64x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, Tec_Scalar:$scale_inv);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `,` $scale_inv attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_AmaxOp : Tec_Op<"amax", [Pure]> {
  let summary = "maximum absolute value of a tensor";
  let description = [{
    `result = max(|input|)` over all elements, as f32; NaN propagates. It feeds the tensor's amax
    history (slot 0 of `tec.delayed_scaling`).

    Example:
    ```mlir
    %0 = tec.amax %x : tensor<64x256xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input);
  let results = (outs Tec_Scalar:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Tec_CastFp8Op : Tec_Op<"cast_fp8", [Pure]> {
  let summary = "an activation, its amax and its FP8 quantize in one pass";
  let description = [{
    `result = fp8(activation(input) * scale)` and `amax = max |activation(input)|` (NaN wins), computed
    from the f32 activation: what `tec.amax` and `tec.quantize` give on the activation's output, without
    that output in memory (Transformer Engine's fused GELU + cast). `activation` is `none`, `gelu` or
    `gelu_tanh`. Made by tec-fuse-quantize.

    Example:
    ```mlir
    %q, %amax = tec.cast_fp8 %h, %scale {activation = "gelu"}
        : (tensor<64x256xbf16>, tensor<f32>) -> (tensor<64x256xf8E4M3FN>, tensor<f32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_Scalar:$scale, DefaultValuedAttr<StrAttr, "\"none\"">:$activation);
  let results = (outs Tec_Fp8Tensor:$result, Tec_Scalar:$amax);
  let assemblyFormat = "$input `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_CastFp8BiasGradOp : Tec_Op<"cast_fp8_dbias", [Pure]> {
  let summary = "a gradient's FP8 quantize, its amax and the bias gradient in one pass";
  let description = [{
    For a GEMM's output gradient dY [..., C]: `result = fp8(dY * scale)`, `amax = max |dY|`, and
    `bias_grad[c] = sum of dY[..., c]` (f32, summed in f64 inside), reading dY once (Transformer
    Engine's cast + dbias). Made by tec-fuse-quantize.

    Example:
    ```mlir
    %q, %amax, %db = tec.cast_fp8_dbias %dy, %scale
        : (tensor<64x256xbf16>, tensor<f32>) -> (tensor<64x256xf8E5M2>, tensor<f32>, tensor<256xf32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_Scalar:$scale);
  let results = (outs Tec_Fp8Tensor:$result, Tec_Scalar:$amax, StaticShapeTensorOf<[F32]>:$bias_grad);
  let assemblyFormat = "$input `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_LayerNormFp8Op : Tec_Op<"layer_norm_fp8", [Pure]> {
  let summary = "LayerNorm with its output quantized to FP8 in the same pass";
  let description = [{
    `tec.layer_norm` whose normalized output goes straight to FP8, `result = fp8(y * fp8_scale)` with its
    `amax = max |y|`, y never in memory (Transformer Engine's LayerNormLinear); `mean` and `inv_std_dev`
    as tec.layer_norm's, for the backward pass. Made by tec-fuse-quantize.

    Example:
    ```mlir
    %q, %amax, %mean, %rstd = tec.layer_norm_fp8 %x, %s, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32}
        : (tensor<64x256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<f32>)
        -> (tensor<64x256xf8E4M3FN>, tensor<f32>, tensor<64x1xf32>, tensor<64x1xf32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_FloatTensor:$weight, Optional<Tec_FloatTensor>:$bias,
                   Tec_Scalar:$fp8_scale, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tec_Fp8Tensor:$result, Tec_Scalar:$amax, StaticShapeTensorOf<[F32]>:$mean,
                 StaticShapeTensorOf<[F32]>:$inv_std_dev);
  // The FP8 scale printed second: an optional bias before it could not be told from it.
  let assemblyFormat = [{
    $input `,` $fp8_scale `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Tec_Fp8GemmOp : Tec_Op<"fp8_gemm", [Pure]> {
  let summary = "FP8 GEMM with per-tensor scale_inv operands and a fused epilogue";
  let description = [{
    `result = epilogue((input · W) * input_scale_inv * weight_scale_inv + bias)` with FP8 operands, as
    cuBLASLt computes it with A/B scale pointers. `W` follows `tec.linear`'s `transpose_b` rule.
    At most one operand may be E5M2 (gradients in the HYBRID recipe); cuBLASLt has no E5M2×E5M2 GEMM.
    The bias has the result's element type, as cuBLASLt's `BIAS_DATA_TYPE` does for BF16/FP16/FP32 outputs.

    Example:
    ```mlir
    %0 = tec.fp8_gemm %xq, %wq, %xsi, %wsi, %b {epilogue = "gelu_tanh", transpose_b = true}
           : (tensor<64x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<f32>, tensor<f32>, tensor<128xbf16>)
           -> tensor<64x128xbf16>
    ```
  }];
  let arguments = (ins Tec_Fp8Tensor:$input, Tec_Fp8Tensor:$weight, Tec_Scalar:$input_scale_inv,
                   Tec_Scalar:$weight_scale_inv, Optional<Tec_FloatTensor>:$bias,
                   Tec_EpilogueAttr:$epilogue, DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $input_scale_inv `,` $weight_scale_inv (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Tec_DelayedScalingOp : Tec_Op<"delayed_scaling", [Pure]> {
  let summary = "Transformer Engine's delayed-scaling update of an amax history and scale";
  let description = [{
    Stages `amax` in slot 0 of `history`, reduces the history (`algo = "max"` over all slots, or
    `"most_recent"` = slot 0) to `a`, and computes `scale = (fp8_max / a) / 2^margin`, keeping the old
    `scale` when `a` is 0, inf or NaN and clamping an overflowing scale to FLT_MAX. The history then
    rolls one slot (the new slot 0 is zero, ready for the next step). `fp8_max` is 448 for E4M3 and
    57344 for E5M2. Results: the rolled history, the scale and its inverse.

    Example:
    ```mlir
    %h, %s, %si = tec.delayed_scaling %hist, %scale, %amax {fp8_max = 448.0 : f32, margin = 0 : i64, algo = "max"}
        : (tensor<1024xf32>, tensor<f32>, tensor<f32>) -> (tensor<1024xf32>, tensor<f32>, tensor<f32>)
    ```
  }];
  let arguments = (ins Tec_History:$history, Tec_Scalar:$scale, Tec_Scalar:$amax,
                   F32Attr:$fp8_max, DefaultValuedAttr<I64Attr, "0">:$margin,
                   DefaultValuedAttr<StrAttr, "\"max\"">:$algo);
  let results = (outs Tec_History:$new_history, Tec_Scalar:$new_scale, Tec_Scalar:$new_scale_inv);
  let assemblyFormat = "$history `,` $scale `,` $amax attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_CurrentScalingOp : Tec_Op<"current_scaling", [Pure]> {
  let summary = "Transformer Engine's current scaling: a tensor's scale from its own amax";
  let description = [{
    `scale = fp8_max / max(amax, amax_epsilon)` for the tensor whose `amax` this step measured (TE 2.x's
    Float8CurrentScaling: no history, no state): 1 where the amax is 0 or infinite, FLT_MAX where the
    quotient overflows, rounded down to a power of two with `pow2_scales`, NaN for a NaN amax (the tensor
    then quantizes to NaN). Results: the scale and its reciprocal, for `tec.quantize` and the GEMM.

    Example:
    ```mlir
    %s, %si = tec.current_scaling %amax {fp8_max = 448.0 : f32} : (tensor<f32>) -> (tensor<f32>, tensor<f32>)
    ```
  }];
  let arguments = (ins Tec_Scalar:$amax, F32Attr:$fp8_max, DefaultValuedAttr<BoolAttr, "false">:$pow2_scales,
                   DefaultValuedAttr<F32Attr, "0.0f">:$amax_epsilon);
  let results = (outs Tec_Scalar:$scale, Tec_Scalar:$scale_inv);
  let assemblyFormat = "$amax attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_QuantizeBlocksOp : Tec_Op<"quantize_blocks", [Pure]> {
  let summary = "block-scaled FP8 quantize: one scale per block, from the block's own amax";
  let description = [{
    The result, seen as [rows, cols] (every dim but the last as rows), is cut into blocks of
    `block = [block_rows, block_cols]`, partial at the ends; each block is quantized as
    `fp8(x * scale)` with the scale from its own amax, and `scale_inv`
    [ceil(rows / block_rows), ceil(cols / block_cols)] receives each block's dequantization factor.
    `scale_type` says how a scale is made: `f32` or `pow2` (Transformer Engine's Float8BlockScaling, 1x128
    blocks of activations and gradients, 128x128 of weights; `pow2`, TE's default, rounds each scale down to
    a power of two) or `e8m0` (MXFP8, OCP microscaling: 1x32 blocks, the smallest power of two that keeps the
    block's largest value finite, E8M0's range). A block holding a NaN is all NaN. With `transpose_input` a
    2-D input [C, R] is read transposed into the [R, C] result, its blocks made on the transpose (TE's
    columnwise copy: the wgrad GEMM's operand, quantized from the high-precision tensor, not from the
    rowwise copy).

    Example:
    ```mlir
    %q, %si = tec.quantize_blocks %x {block = array<i64: 1, 128>, scale_type = "pow2"}
        : (tensor<64x256xf32>) -> (tensor<64x256xf8E4M3FN>, tensor<64x2xf32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, DenseI64ArrayAttr:$block, StrAttr:$scale_type,
                   DefaultValuedAttr<F32Attr, "0.0f">:$amax_epsilon,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_input);
  let results = (outs Tec_Fp8Tensor:$result, StaticShapeTensorOf<[F32]>:$scale_inv);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_Fp8BlockGemmOp : Tec_Op<"fp8_block_gemm", [Pure]> {
  let summary = "FP8 GEMM on block-scaled operands, with a fused epilogue";
  let description = [{
    `result = epilogue(dequantize(input) · dequantize(W) + bias)`, each operand dequantized by the
    `scale_inv` of its blocks (`input_block`, `weight_block`, as `tec.quantize_blocks` made them), `W` by
    `tec.linear`'s `transpose_b` rule. cuBLASLt runs it with its VEC128_32F / BLK128x128_32F (Hopper) and
    VEC32_UE8M0 (Blackwell) scale modes, which take blocks along K; the CPU emulation widens both operands
    exactly and runs an f32 GEMM.

    Example:
    ```mlir
    %0 = tec.fp8_block_gemm %xq, %wq, %xsi, %wsi {epilogue = "none", input_block = array<i64: 1, 128>,
           transpose_b = true, weight_block = array<i64: 128, 128>}
           : (tensor<64x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<64x2xf32>, tensor<1x2xf32>)
           -> tensor<64x128xf32>
    ```
  }];
  let arguments = (ins Tec_Fp8Tensor:$input, Tec_Fp8Tensor:$weight, StaticShapeTensorOf<[F32]>:$input_scale_inv,
                   StaticShapeTensorOf<[F32]>:$weight_scale_inv, Optional<Tec_FloatTensor>:$bias,
                   Tec_EpilogueAttr:$epilogue, DefaultValuedAttr<BoolAttr, "false">:$transpose_b,
                   DenseI64ArrayAttr:$input_block, DenseI64ArrayAttr:$weight_block);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $input_scale_inv `,` $weight_scale_inv (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // TEC_OPS_FP8
