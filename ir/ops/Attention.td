// The tec dialect's fused attention, 16-bit and FP8, forward and backward (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_ATTENTION
#define TEC_OPS_ATTENTION

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Tec_AttentionOp : Tec_Op<"attention", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "scaled dot-product attention: softmax(scale * Q K^T + mask) V";
  let description = [{
    `query` [B, H, Tq, D], `key` [B, Hk, Tk, D], `value` [B, Hk, Tk, Dv] give `result` [B, H, Tq, Dv]:
    for each query row, `softmax_j(scale * q . k_j + mask[.., i, j]) v_j`. H is a multiple of Hk: query
    head h reads K/V head h / (H / Hk) (grouped-query and multi-query attention, with no copy of K and
    V per head). The optional `mask` broadcasts to [B, H, Tq, Tk]: a float mask is added to the scores,
    a boolean one hides the keys where it is false. With `causal`, key j is hidden from query i when
    j > i (PyTorch's `is_causal`). A row with every key hidden is NaN, as the decomposed softmax gives.

    Recognized by tec-recognize-attention from the decomposed forms exporters write. The kernels never
    hold the [Tq, Tk] scores: they walk the keys in blocks with an online softmax (FlashAttention), and
    yield the f32 `logsumexp` [B, H, Tq] of each row, from which the backward pass recomputes the
    probabilities.

    Example:
    ```mlir
    %o, %lse = tec.attention %q, %k, %v {scale = 0.125 : f32, causal = true}
        : (tensor<2x8x128x64xf32>, tensor<2x2x128x64xf32>, tensor<2x2x128x64xf32>)
        -> (tensor<2x8x128x64xf32>, tensor<2x8x128xf32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$query, Tec_FloatTensor:$key, Tec_FloatTensor:$value,
                   Optional<StaticShapeTensorOf<[F32, F16, BF16, I1]>>:$mask, F32Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Tec_FloatTensor:$result, StaticShapeTensorOf<[F32]>:$logsumexp);
  let assemblyFormat = "$query `,` $key `,` $value (`,` $mask^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_AttentionGradOp : Tec_Op<"attention_grad", [Pure]> {
  let summary = "the gradients of tec.attention with respect to query, key and value";
  let description = [{
    FlashAttention-2's backward: from `grad` (dL/d result) and the forward's operands, `result` and
    `logsumexp`, the probabilities are recomputed a block at a time; `delta_i = grad_i . result_i`,
    `ds = p * (grad . v_j - delta_i)`, `dq = scale * ds K`, `dk = scale * ds^T Q`, `dv = p^T grad`,
    each K/V head's gradients summed over the query heads sharing it. Same attributes as tec.attention.
  }];
  let arguments = (ins Tec_FloatTensor:$grad, Tec_FloatTensor:$query, Tec_FloatTensor:$key, Tec_FloatTensor:$value,
                   Tec_FloatTensor:$result, StaticShapeTensorOf<[F32]>:$logsumexp,
                   Optional<StaticShapeTensorOf<[F32, F16, BF16, I1]>>:$mask, F32Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Tec_FloatTensor:$query_grad, Tec_FloatTensor:$key_grad, Tec_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $result `,` $logsumexp (`,` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Tec_AttentionFp8Op : Tec_Op<"attention_fp8", [Pure]> {
  let summary = "tec.attention on FP8 operands with per-tensor scales (cuDNN's FP8 fused attention)";
  let description = [{
    `query`, `key` and `value` hold E4M3 codes, each worth its code times its `*_scale_inv`. As in
    tec.attention, `p = softmax(scale * q . k + mask)` with the f32 `logsumexp`; then p goes through E4M3
    with `probs_scale` (`fp8(p * probs_scale) * probs_scale_inv`) before it multiplies V, as cuDNN's FP8
    kernels compute; `result = fp8(o * result_scale)`, E4M3. `probs_amax = max p` and
    `result_amax = max |o|` (before scaling) feed the delayed scaling of the probabilities and the result.
    Made by tec-insert-fp8 under `--fp8-attention` (Transformer Engine's `fp8_dpa`).

    Example:
    ```mlir
    %o, %lse, %pa, %oa = tec.attention_fp8 %q, %k, %v scales(%qsi, %ksi, %vsi, %ps, %psi, %os) {scale = 0.125 : f32}
        : (tensor<2x8x128x64xf8E4M3FN>, tensor<2x8x128x64xf8E4M3FN>, tensor<2x8x128x64xf8E4M3FN>, tensor<f32>,
           tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>)
        -> (tensor<2x8x128x64xf8E4M3FN>, tensor<2x8x128xf32>, tensor<f32>, tensor<f32>)
    ```
  }];
  let arguments = (ins Tec_Fp8Tensor:$query, Tec_Fp8Tensor:$key, Tec_Fp8Tensor:$value, Tec_Scalar:$query_scale_inv,
                   Tec_Scalar:$key_scale_inv, Tec_Scalar:$value_scale_inv, Tec_Scalar:$probs_scale,
                   Tec_Scalar:$probs_scale_inv, Tec_Scalar:$result_scale,
                   Optional<StaticShapeTensorOf<[F32, F16, BF16, I1]>>:$mask, F32Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Tec_Fp8Tensor:$result, StaticShapeTensorOf<[F32]>:$logsumexp, Tec_Scalar:$probs_amax,
                 Tec_Scalar:$result_amax);
  let assemblyFormat = [{
    $query `,` $key `,` $value `scales` `(` $query_scale_inv `,` $key_scale_inv `,` $value_scale_inv `,` $probs_scale
    `,` $probs_scale_inv `,` $result_scale `)` (`mask` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Tec_AttentionFp8GradOp : Tec_Op<"attention_fp8_grad", [Pure]> {
  let summary = "the gradients of tec.attention_fp8 (cuDNN's FP8 fused attention backward)";
  let description = [{
    tec.attention_grad on FP8 operands: `grad` (dL/d result, E5M2 under the HYBRID recipe), `query`,
    `key`, `value` and `result` are codes worth code times their `*_scale_inv`. The probabilities are
    recomputed from `logsumexp` and go through E4M3 with `probs_scale` before multiplying grad (dv); the
    scores' gradient times `scale`, `dP = scale * p * (grad . v - grad . result)` (d loss / d (Q K^T), what
    cuDNN quantizes), goes through FP8 (the gradients' format) with `dprobs_scale` before multiplying K (dq)
    and Q (dk). The gradients are written quantized with their
    `*_grad_scale`, in the format of their type; the amaxes (before scaling) feed their delayed scaling.
  }];
  let arguments = (ins Tec_Fp8Tensor:$grad, Tec_Fp8Tensor:$query, Tec_Fp8Tensor:$key, Tec_Fp8Tensor:$value,
                   Tec_Fp8Tensor:$result, StaticShapeTensorOf<[F32]>:$logsumexp, Tec_Scalar:$query_scale_inv,
                   Tec_Scalar:$key_scale_inv, Tec_Scalar:$value_scale_inv, Tec_Scalar:$result_scale_inv,
                   Tec_Scalar:$grad_scale_inv, Tec_Scalar:$probs_scale, Tec_Scalar:$probs_scale_inv,
                   Tec_Scalar:$dprobs_scale, Tec_Scalar:$dprobs_scale_inv, Tec_Scalar:$query_grad_scale,
                   Tec_Scalar:$key_grad_scale, Tec_Scalar:$value_grad_scale,
                   Optional<StaticShapeTensorOf<[F32, F16, BF16, I1]>>:$mask, F32Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Tec_Fp8Tensor:$query_grad, Tec_Fp8Tensor:$key_grad, Tec_Fp8Tensor:$value_grad,
                 Tec_Scalar:$query_grad_amax, Tec_Scalar:$key_grad_amax, Tec_Scalar:$value_grad_amax,
                 Tec_Scalar:$dprobs_amax);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $result `,` $logsumexp `scales` `(` $query_scale_inv `,` $key_scale_inv
    `,` $value_scale_inv `,` $result_scale_inv `,` $grad_scale_inv `,` $probs_scale `,` $probs_scale_inv `,`
    $dprobs_scale `,` $dprobs_scale_inv `,` $query_grad_scale `,` $key_grad_scale `,` $value_grad_scale `)`
    (`mask` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // TEC_OPS_ATTENTION
