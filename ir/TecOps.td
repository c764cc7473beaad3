#ifndef TEC_OPS
#define TEC_OPS

include "ir/TecDialect.td"
include "ir/TecInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Tec_Float : AnyTypeOf<[F32, F16, BF16]>;
def Tec_Fp8 : AnyTypeOf<[F8E4M3FN, F8E5M2]>;
def Tec_Int : AnyTypeOf<[I32, I64]>;
def Tec_Element : AnyTypeOf<[F32, F16, BF16, I32, I64, I1, F8E4M3FN, F8E5M2]>;

def Tec_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def Tec_NumericTensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64]>;
def Tec_Fp8Tensor : StaticShapeTensorOf<[F8E4M3FN, F8E5M2]>;
def Tec_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Tec_BoolTensor : StaticShapeTensorOf<[I1]>;
def Tec_Tensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64, I1, F8E4M3FN, F8E5M2]>;
// A per-tensor FP8 scale, scale_inv or amax: one f32.
def Tec_Scalar : 0DTensorOf<[F32]>;
def Tec_History : StaticShapeTensorOf<[F32]>;

// cuBLASLt epilogues a fused GEMM can carry.
def Tec_EpilogueAttr : DefaultValuedAttr<StrAttr, "\"none\"">;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Tec_BinaryOp<string mnemonic, string onnxName, Type operandType,
                   list<Trait> traits = [DeclareOpInterfaceMethods<Tec_Differentiable>]>
    : Tec_Op<mnemonic, !listconcat([Pure], traits)> {
  let summary = "elementwise " # onnxName # " with numpy broadcasting";
  let description = !strconcat([{
    ONNX `}], onnxName, [{` (opset 13+): both operands have the same element type and broadcast
    numpy-style; the result has the broadcast shape.

    Example:
    ```mlir
    %0 = tec.}], mnemonic, [{ %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }]);
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs operandType:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  // A splat constant operand of the result's full shape becomes a 0-D one (broadcast): gradients of
  // means and losses write such splats, and stored at full size they would bloat plans.
  let hasCanonicalizer = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() { return verifyElementwiseBinary(*this); }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      return foldBinary(*this, adaptor.getLhs(), adaptor.getRhs());
    }
    void $cppClass::getCanonicalizationPatterns(::mlir::RewritePatternSet &results, ::mlir::MLIRContext *context) {
      addScalarSplatOperandPattern(results, context, getOperationName());
    }
  }];
}

def Tec_AddOp : Tec_BinaryOp<"add", "Add", Tec_NumericTensor>;
def Tec_SubOp : Tec_BinaryOp<"sub", "Sub", Tec_NumericTensor>;
def Tec_MulOp : Tec_BinaryOp<"mul", "Mul", Tec_NumericTensor>;
def Tec_DivOp : Tec_BinaryOp<"div", "Div", Tec_NumericTensor>;
def Tec_PowOp : Tec_BinaryOp<"pow", "Pow", Tec_FloatTensor>;
def Tec_MaxOp : Tec_BinaryOp<"max", "Max", Tec_NumericTensor>; // NaN propagates; the gradient goes to lhs on ties
def Tec_MinOp : Tec_BinaryOp<"min", "Min", Tec_NumericTensor>;

def Tec_SwigluOp : Tec_Op<"swiglu", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "SwiGLU's gating: silu(gate) * up, elementwise with numpy broadcasting";
  let description = [{
    Recognized from `Mul(x * Sigmoid(x), up)` (Llama's MLP: `down(silu(gate(h)) * up(h))`): one kernel
    reads both projections once instead of materializing `silu(gate)`, and the gradient
    (`d gate = dy * up * silu'(gate)`, `d up = dy * silu(gate)`) needs only the two inputs.

    Example:
    ```mlir
    %0 = tec.swiglu %gate, %up : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$gate, Tec_FloatTensor:$up);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() { return verifyElementwiseBinary(*this); }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      return foldBinary(*this, adaptor.getGate(), adaptor.getUp());
    }
  }];
}

def Tec_ModOp : Tec_Op<"mod", [Pure]> {
  let summary = "elementwise remainder with numpy broadcasting";
  let description = [{
    ONNX `Mod`: with `fmod = false` the remainder takes the divisor's sign (Python's `%`, integers only in
    ONNX), with `fmod = true` the dividend's (C's `fmod`). A remainder by 0 is 0 for integers (undefined
    in ONNX; it never traps). Piecewise linear with jumps, so it has no gradient.

    Example:
    ```mlir
    %0 = tec.mod %a, %b {fmod = true} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Tec_NumericTensor:$lhs, Tec_NumericTensor:$rhs, DefaultValuedAttr<BoolAttr, "false">:$fmod);
  let results = (outs Tec_NumericTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      return foldBinary(*this, adaptor.getLhs(), adaptor.getRhs());
    }
  }];
}

def Tec_CompareOp : Tec_Op<"compare", [Pure]> {
  let summary = "elementwise comparison or logical op with numpy broadcasting, producing bool";
  let description = [{
    ONNX `Equal`, `Less`, `LessOrEqual`, `Greater`, `GreaterOrEqual` (`predicate` eq, lt, le, gt, ge; and
    `ne`, which `IsNaN` is built from) on two operands of one numeric type, and `And`, `Or`, `Xor`
    (`and`, `or`, `xor`) on bools. f16/bf16 compare exactly in f32. NaN compares unequal to everything.

    Example:
    ```mlir
    %0 = tec.compare %a, %b {predicate = "lt"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
    ```
  }];
  let arguments = (ins Tec_Tensor:$lhs, Tec_Tensor:$rhs, StrAttr:$predicate);
  let results = (outs Tec_BoolTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

class Tec_UnaryOp<string mnemonic, string onnxName, string formula, Type tensor = Tec_FloatTensor>
    : Tec_Op<mnemonic, [Pure, Elementwise, SameOperandsAndResultType, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "elementwise " # onnxName;
  let description = !strconcat([{
    ONNX `}], onnxName, [{`: `y = }], formula, [{` per element; shape and type are kept.

    Example:
    ```mlir
    %0 = tec.}], mnemonic, [{ %x : tensor<4x8xf32>
    ```
  }]);
  let arguments = (ins tensor:$input);
  let results = (outs tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) { return foldUnary(*this, adaptor.getInput()); }
  }];
}

def Tec_ReluOp : Tec_UnaryOp<"relu", "Relu", "max(x, 0)">;
def Tec_TanhOp : Tec_UnaryOp<"tanh", "Tanh", "tanh(x)">;
def Tec_SigmoidOp : Tec_UnaryOp<"sigmoid", "Sigmoid", "1 / (1 + exp(-x))">;
def Tec_ErfOp : Tec_UnaryOp<"erf", "Erf", "erf(x)">;
def Tec_SqrtOp : Tec_UnaryOp<"sqrt", "Sqrt", "sqrt(x)">;
def Tec_ExpOp : Tec_UnaryOp<"exp", "Exp", "e^x">;
// Abs, Neg and Sign take integers too (position buckets, masks), wrapping at the type's minimum.
def Tec_AbsOp : Tec_UnaryOp<"abs", "Abs", "|x|", Tec_NumericTensor>;
def Tec_NegOp : Tec_UnaryOp<"neg", "Neg", "-x", Tec_NumericTensor>;
def Tec_ReciprocalOp : Tec_UnaryOp<"reciprocal", "Reciprocal", "1 / x">;
def Tec_LogOp : Tec_UnaryOp<"log", "Log", "ln(x)">;
def Tec_SinOp : Tec_UnaryOp<"sin", "Sin", "sin(x)">;
def Tec_CosOp : Tec_UnaryOp<"cos", "Cos", "cos(x)">;
def Tec_SoftplusOp : Tec_UnaryOp<"softplus", "Softplus", "ln(1 + e^x)">;
def Tec_SiluOp : Tec_UnaryOp<"silu", "x * Sigmoid(x) (SiLU, recognized)", "x / (1 + exp(-x))">;
def Tec_HardSwishOp : Tec_UnaryOp<"hard_swish", "HardSwish", "x * max(0, min(1, x / 6 + 1/2))">;
def Tec_FloorOp : Tec_UnaryOp<"floor", "Floor", "floor(x) (gradient 0, as PyTorch's)">;
def Tec_CeilOp : Tec_UnaryOp<"ceil", "Ceil", "ceil(x) (gradient 0, as PyTorch's)">;
def Tec_RoundOp : Tec_UnaryOp<"round", "Round", "round half to even (gradient 0, as PyTorch's)">;
def Tec_TanOp : Tec_UnaryOp<"tan", "Tan", "tan(x)">;
def Tec_AsinOp : Tec_UnaryOp<"asin", "Asin", "asin(x)">;
def Tec_AcosOp : Tec_UnaryOp<"acos", "Acos", "acos(x)">;
def Tec_AtanOp : Tec_UnaryOp<"atan", "Atan", "atan(x)">;
def Tec_SinhOp : Tec_UnaryOp<"sinh", "Sinh", "sinh(x)">;
def Tec_CoshOp : Tec_UnaryOp<"cosh", "Cosh", "cosh(x)">;
def Tec_AsinhOp : Tec_UnaryOp<"asinh", "Asinh", "asinh(x)">;
def Tec_AcoshOp : Tec_UnaryOp<"acosh", "Acosh", "acosh(x)">;
def Tec_AtanhOp : Tec_UnaryOp<"atanh", "Atanh", "atanh(x)">;
def Tec_SoftsignOp : Tec_UnaryOp<"softsign", "Softsign", "x / (1 + |x|)">;

def Tec_SignOp : Tec_Op<"sign", [Pure, Elementwise, SameOperandsAndResultType]> {
  let summary = "elementwise sign";
  let description = [{
    `y = -1, 0 or 1` as x is negative, zero or positive (NaN stays NaN). Piecewise constant, so it has no
    gradient; it appears in the gradient of `tec.abs`.

    Example:
    ```mlir
    %0 = tec.sign %x : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Tec_NumericTensor:$input);
  let results = (outs Tec_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) { return foldUnary(*this, adaptor.getInput()); }
  }];
}

def Tec_GeluOp : Tec_Op<"gelu", [Pure, Elementwise, SameOperandsAndResultType, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "GELU activation, exact (erf) or tanh approximation";
  let description = [{
    ONNX `Gelu` (opset 20). `approximate = "none"` is `x/2 * (1 + erf(x/√2))`;
    `approximate = "tanh"` is `x/2 * (1 + tanh(√(2/π) * (x + 0.044715 x³)))`, the form of cuBLASLt's
    GELU epilogue.

    Example:
    ```mlir
    %0 = tec.gelu %x {approximate = "tanh"} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Tec_WhereOp : Tec_Op<"where", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "elementwise select with numpy broadcasting";
  let description = [{
    ONNX `Where`: `condition ? x : y`, all three broadcast together; `x` and `y` share the result's
    element type.

    Example:
    ```mlir
    %0 = tec.where %c, %x, %y : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Tec_BoolTensor:$condition, Tec_Tensor:$x, Tec_Tensor:$y);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$condition `,` $x `,` $y attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_CastOp : Tec_Op<"cast", [Pure, SameOperandsAndResultShape, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "element type conversion";
  let description = [{
    ONNX `Cast`: converts each element to the result's element type (floats round to nearest even,
    float to integer truncates toward zero, anything nonzero becomes `true`).

    Example:
    ```mlir
    %0 = tec.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins Tec_Tensor:$input);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
}

def Tec_ConstantOp : Tec_Op<"constant", [Pure, ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "a constant tensor";
  let description = [{
    ONNX `Constant`, and small initializers consumed as constants. Large initializers are not
    constants: they are `tec.param` function arguments.

    Example:
    ```mlir
    %0 = tec.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Normalization and reductions
//===----------------------------------------------------------------------===//

class Tec_SoftmaxLikeOp<string mnemonic, string onnxName, string formula>
    : Tec_Op<mnemonic, [Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = onnxName # " along one axis";
  let description = !strconcat([{
    ONNX `}], onnxName, [{` (opset 13+): `}], formula, [{` along `axis`
    (normalized to `0 <= axis < rank` by the importer).

    Example:
    ```mlir
    %0 = tec.}], mnemonic, [{ %x {axis = 1 : i64} : tensor<4x8xf32>
    ```
  }]);
  let arguments = (ins Tec_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() { return verifyAxis(*this, getAxis(), getInput().getType().getRank()); }
  }];
}

def Tec_SoftmaxOp : Tec_SoftmaxLikeOp<"softmax", "Softmax", "exp(x - max) / sum(exp(x - max))">;
def Tec_LogSoftmaxOp : Tec_SoftmaxLikeOp<"log_softmax", "LogSoftmax", "x - max - log(sum(exp(x - max)))">;

def Tec_LayerNormOp : Tec_Op<"layer_norm", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "layer normalization over the trailing dimensions from axis";
  let description = [{
    ONNX `LayerNormalization` (opset 17): normalizes over dims `axis..rank-1` with `epsilon`, then
    scales by `scale` and adds the optional `bias`, both shaped like the normalized dims. Like ONNX
    (and PyTorch's `native_layer_norm`) it also yields the f32 `mean` and `inv_std_dev`, shaped like
    the input with the normalized dims set to 1: the backward pass needs them, and an unused one costs
    nothing after codegen.

    Example:
    ```mlir
    %y, %mean, %rstd = tec.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32}
           : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_FloatTensor:$scale,
                   Optional<Tec_FloatTensor>:$bias, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tec_FloatTensor:$result, StaticShapeTensorOf<[F32]>:$mean,
                 StaticShapeTensorOf<[F32]>:$inv_std_dev);
  let assemblyFormat = "$input `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_RmsNormOp : Tec_Op<"rms_norm", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "RMS normalization over the trailing dimensions from axis";
  let description = [{
    RMSNorm (Llama, T5; ONNX `RMSNormalization` of opset 23): `x * rsqrt(mean(x^2) + epsilon) * scale`
    over dims `axis..rank-1`, with `scale` shaped like the normalized dims. Recognized from the forms
    exporters write (`Pow(x, 2)` or `x * x`; `Reciprocal(Sqrt)`, `1 / Sqrt` or a division by the
    `Sqrt`; the scale on either side). Like `tec.layer_norm` it also yields the f32 `inv_rms`, shaped
    like the input with the normalized dims set to 1, for the backward pass.

    Example:
    ```mlir
    %y, %rstd = tec.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32}
           : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>)
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_FloatTensor:$scale, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tec_FloatTensor:$result, StaticShapeTensorOf<[F32]>:$inv_rms);
  let assemblyFormat = "$input `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

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

class Tec_ReduceOp<string mnemonic, string onnxName,
                   list<Trait> traits = [DeclareOpInterfaceMethods<Tec_Differentiable>]>
    : Tec_Op<mnemonic, !listconcat([Pure], traits)> {
  let summary = onnxName # " over a set of axes";
  let description = !strconcat([{
    ONNX `}], onnxName, [{`: reduces over `axes` (sorted, unique, non-negative; empty never means
    "all": the importer lists the axes); `keepdims` keeps reduced dims as size 1.

    Example:
    ```mlir
    %0 = tec.}], mnemonic, [{ %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
    ```
  }]);
  let arguments = (ins Tec_NumericTensor:$input, DenseI64ArrayAttr:$axes, BoolAttr:$keepdims);
  let results = (outs Tec_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyReduction(*this, getInput().getType(), getAxes(), getKeepdims(), getResult().getType());
    }
  }];
}

def Tec_ReduceMeanOp : Tec_ReduceOp<"reduce_mean", "ReduceMean">;
def Tec_ReduceSumOp : Tec_ReduceOp<"reduce_sum", "ReduceSum">;
// Max and Min propagate NaN; their gradient is split evenly between tied maxima (as torch.amax's).
def Tec_ReduceMaxOp : Tec_ReduceOp<"reduce_max", "ReduceMax">;
def Tec_ReduceMinOp : Tec_ReduceOp<"reduce_min", "ReduceMin">;
// No gradient: dy * prod / x is undefined at zeros, and models train through products of sums.
def Tec_ReduceProdOp : Tec_ReduceOp<"reduce_prod", "ReduceProd", []>;

//===----------------------------------------------------------------------===//
// GEMMs
//===----------------------------------------------------------------------===//

def Tec_MatMulOp : Tec_Op<"matmul", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "numpy matrix product";
  let description = [{
    ONNX `MatMul`: 1-D operands are promoted as numpy does, batch dims broadcast.

    Example:
    ```mlir
    %0 = tec.matmul %a, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$lhs, Tec_FloatTensor:$rhs);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_GemmOp : Tec_Op<"gemm", [Pure]> {
  let summary = "ONNX Gemm: alpha * op(A) * op(B) + beta * C";
  let description = [{
    ONNX `Gemm` on 2-D operands; `op(X)` transposes when `trans_a`/`trans_b` is set; `C` is optional
    and broadcasts to the `MxN` result.

    Example:
    ```mlir
    %0 = tec.gemm %x, %w, %b {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true}
           : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$a, Tec_FloatTensor:$b, Optional<Tec_FloatTensor>:$c,
                   F32Attr:$alpha, F32Attr:$beta, BoolAttr:$trans_a, BoolAttr:$trans_b);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$a `,` $b (`,` $c^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_LinearOp : Tec_Op<"linear", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "fused GEMM + optional bias + activation epilogue";
  let description = [{
    `result = epilogue(input · W + bias)` where `W` is `weight` (`KxN`) or, with `transpose_b`,
    its transpose (`weight` is `NxK`, the PyTorch `nn.Linear` layout). The epilogue is one of
    `none`, `relu`, `gelu` (exact, erf form) or `gelu_tanh` (cuBLASLt's GELU epilogue), so codegen
    maps the op to one cuBLASLt call with BIAS, RELU_BIAS or GELU_BIAS. The input may have leading
    batch dims; the bias is `N` long.

    Example:
    ```mlir
    %0 = tec.linear %x, %w, %b {epilogue = "relu", transpose_b = true}
           : (tensor<64x256xf32>, tensor<128x256xf32>, tensor<128xf32>) -> tensor<64x128xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_FloatTensor:$weight,
                   Optional<Tec_FloatTensor>:$bias, Tec_EpilogueAttr:$epilogue,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

def Tec_TransposeOp : Tec_Op<"transpose", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "permute dimensions";
  let description = [{
    ONNX `Transpose`: result dim `i` is input dim `perm[i]`.

    Example:
    ```mlir
    %0 = tec.transpose %x {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_ReshapeOp : Tec_Op<"reshape", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "reinterpret the shape, keeping element order";
  let description = [{
    ONNX `Reshape`, `Flatten`, `Squeeze` and `Unsqueeze`: with static shapes all four only change the
    shape, so the result type says everything.

    Example:
    ```mlir
    %0 = tec.reshape %x : tensor<4x8xf32> -> tensor<2x2x8xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$input);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_ExpandOp : Tec_Op<"expand", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "broadcast to a larger shape";
  let description = [{
    ONNX `Expand`: the input broadcasts numpy-style to the result shape.

    Example:
    ```mlir
    %0 = tec.expand %x : tensor<1x8xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$input);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_ConcatOp : Tec_Op<"concat", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "join tensors along an axis";
  let description = [{
    ONNX `Concat`: all inputs agree on every dim but `axis`.

    Example:
    ```mlir
    %0 = tec.concat %a, %b {axis = 1 : i64} : (tensor<4x2xf32>, tensor<4x6xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Tec_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_SplitOp : Tec_Op<"split", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "cut a tensor into pieces along an axis";
  let description = [{
    ONNX `Split`: the results' sizes along `axis` add up to the input's.

    Example:
    ```mlir
    %0:2 = tec.split %x {axis = 1 : i64} : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x6xf32>)
    ```
  }];
  let arguments = (ins Tec_Tensor:$input, I64Attr:$axis);
  let results = (outs Variadic<Tec_Tensor>:$outputs);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_SliceOp : Tec_Op<"slice", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "strided slice with one start/end/step per dim";
  let description = [{
    ONNX `Slice` after the importer normalizes it: `starts`, `ends` and `steps` have one entry per
    input dim, negative indices resolved and clamped, so result dim `i` has
    `ceil((ends[i] - starts[i]) / steps[i])` elements (never negative).

    Example:
    ```mlir
    %0 = tec.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 4, 8>, steps = array<i64: 1, 2>}
           : tensor<4x8xf32> -> tensor<4x3xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$input, DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$ends,
                   DenseI64ArrayAttr:$steps);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_GatherOp : Tec_Op<"gather", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "gather slices along an axis by index";
  let description = [{
    ONNX `Gather`: result shape is `data[:axis] ++ indices ++ data[axis+1:]`; negative indices count
    from the end; an index out of range is a run-time error.

    Example:
    ```mlir
    %0 = tec.gather %table, %ids {axis = 0 : i64} : (tensor<100x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$data, Tec_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_ArgReduceOp : Tec_Op<"arg_reduce", [Pure]> {
  let summary = "the index of the max or min along an axis (ONNX ArgMax, ArgMin)";
  let description = [{
    `kind` is "max" or "min"; ties go to the first index, or the last with `select_last_index`; NaN wins
    over numbers (the first NaN). The result is i64 with the axis dropped, or kept as 1 with `keepdims`.

    Example:
    ```mlir
    %0 = tec.arg_reduce %logits {kind = "max", axis = 1 : i64, keepdims = false} : tensor<8x10xf32> -> tensor<8xi64>
    ```
  }];
  let arguments = (ins Tec_NumericTensor:$input, StrAttr:$kind, I64Attr:$axis, BoolAttr:$keepdims,
                   DefaultValuedAttr<BoolAttr, "false">:$select_last_index);
  let results = (outs StaticShapeTensorOf<[I64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tec_CumSumOp : Tec_Op<"cumsum", [Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "running sum along an axis (ONNX CumSum)";
  let description = [{
    `result[..., i, ...] = sum of input[..., j, ...]` for j <= i (j < i with `exclusive`; j >= i, or j > i,
    with `reverse`). Floats accumulate in f32 in order along the axis, as ONNX Runtime does; integers wrap.
    The gradient is the cumsum of the output gradient in the other direction. HF models build position
    ids this way (`attention_mask.cumsum(-1) - 1`).

    Example:
    ```mlir
    %0 = tec.cumsum %mask {axis = 1 : i64} : tensor<2x8xi64>
    ```
  }];
  let arguments = (ins Tec_NumericTensor:$input, I64Attr:$axis, DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                   DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs Tec_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tec_GatherElementsOp : Tec_Op<"gather_elements", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "pick one element along an axis per index";
  let description = [{
    ONNX `GatherElements` (and the picking of a class score in NLL and cross-entropy losses): the result
    has the indices' shape and `result[c] = data[c with c[axis] = indices[c]]`. The indices' other dims
    equal the data's; negative indices count from the end; an index out of range is a run-time error.

    Example:
    ```mlir
    %0 = tec.gather_elements %logp, %labels {axis = 1 : i64} : (tensor<8x10xf32>, tensor<8x1xi64>) -> tensor<8x1xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$data, Tec_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs Tec_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_ScatterAddOp : Tec_Op<"scatter_add", [Pure, DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "sum updates into zeros at their indices: the gradient of gather and gather_elements";
  let description = [{
    With `elements = false` (the gradient of `tec.gather`, e.g. an embedding table's) `updates` has
    gather's result layout, `result[:axis] ++ indices ++ result[axis+1:]`, and each slice is added to
    the row its index names; with `elements = true` (the gradient of `tec.gather_elements`) `updates`
    has the indices' shape and each element is added where it was picked. Repeated indices add up in
    index order on every backend (no atomics), so the gradient is deterministic. ONNX `ScatterND` is built
    from it; its own gradient gathers back what each update was added to.

    Example:
    ```mlir
    %0 = tec.scatter_add %dy, %ids {axis = 0 : i64, elements = false} : (tensor<4x8x16xf32>, tensor<4x8xi64>) -> tensor<100x16xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$updates, Tec_IndexTensor:$indices, I64Attr:$axis, BoolAttr:$elements);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$updates `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Convolutions and pools (NCHW; 1-D ones have H = 1)
//===----------------------------------------------------------------------===//

class Tec_WindowOp<string mnemonic, list<Trait> traits = []> : Tec_Op<mnemonic, !listconcat([Pure], traits)>;

def Tec_ConvOp : Tec_WindowOp<"conv", [DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "2-D convolution (ONNX Conv) with groups, strides, pads and dilations";
  let description = [{
    `y[n, m, oy, ox] = bias[m] + sum over c in m's group, ky, kx of
    x[n, c, oy*sh - pad_top + ky*dh, ox*sw - pad_left + kx*dw] * weight[m, c, ky, kx]`, zero outside the
    input. `pads` are [top, left, bottom, right]. The importer turns 1-D convolutions into this with H = 1.
    With `channels_last` the input is [N, H, W, C] and the result [N, OH, OW, M] (the weight stays
    [M, C / group, kH, kW]): the layout tec-channels-last gives CPU inference, where oneDNN's direct
    kernels read it without reorders. Such a conv has no gradient (training keeps NCHW).

    Example:
    ```mlir
    %0 = tec.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64}
         : (tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<8x16x16x16xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, Tec_FloatTensor:$weight, Optional<Tec_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations, I64Attr:$group,
                   UnitAttr:$channels_last);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_ConvInputGradOp : Tec_WindowOp<"conv_input_grad", [DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "the gradient of tec.conv with respect to its input, and ONNX ConvTranspose";
  let description = [{
    `dx = conv_transpose(dy, weight)` with tec.conv's attributes; `result` has the input's shape. It is ONNX
    `ConvTranspose` too (its weight [C, M/group, kh, kw] is the conv's from M to C channels; output_padding
    is a larger `result` whose last rows no window reaches from the end padding), so it differentiates:
    the conv of the incoming gradient for `dy`, the conv's weight gradient with the roles swapped for
    `weight`.
  }];
  let arguments = (ins Tec_FloatTensor:$dy, Tec_FloatTensor:$weight, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_ConvWeightGradOp : Tec_WindowOp<"conv_weight_grad"> {
  let summary = "the gradient of tec.conv with respect to its weight";
  let description = [{
    `dweight[m, c, ky, kx] = sum over n, oy, ox of dy[n, m, oy, ox] * x[n, c', iy, ix]` (tec.conv's
    window), summed over the batch in order; `result` has the weight's shape.
  }];
  let arguments = (ins Tec_FloatTensor:$dy, Tec_FloatTensor:$input, DenseI64ArrayAttr:$kernel,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tec_PoolOp : Tec_WindowOp<"pool", [DeclareOpInterfaceMethods<Tec_Differentiable>]> {
  let summary = "2-D max or average pooling (ONNX MaxPool, AveragePool)";
  let description = [{
    Each output is the max (NaN propagates; padding never wins) or the mean of its window. The mean
    divides by the cells inside the input, or with `count_include_pad` inside the input and its pads.
    `ceil_mode` shows in the result shape (the verifier accepts floor or ceil sizes). With
    `channels_last` input and result are [N, H, W, C] (tec-channels-last's layout; no gradient).

    Example:
    ```mlir
    %0 = tec.pool %x {kind = "max", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
         : tensor<8x16x32x32xf32> -> tensor<8x16x16x16xf32>
    ```
  }];
  let arguments = (ins Tec_FloatTensor:$input, StrAttr:$kind, DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad, UnitAttr:$channels_last);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tec_PoolGradOp : Tec_WindowOp<"pool_grad"> {
  let summary = "the gradient of tec.pool";
  let description = [{
    Max pooling's gradient goes to the first maximum of each window (PyTorch's choice), average
    pooling's is spread over the cells its divisor counted inside the input. Takes dy and the pool's input.
  }];
  let arguments = (ins Tec_FloatTensor:$dy, Tec_FloatTensor:$input, StrAttr:$kind, DenseI64ArrayAttr:$kernel,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

class Tec_ActivationGradOp<string mnemonic, string forward, string formula>
    : Tec_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = "gradient of " # forward;
  let description = !strconcat([{
    The vector-Jacobian product of `}], forward, [{`: `dx = }], formula, [{`, with `x` the
    forward op's input. One kernel, as cuBLASLt's DGELU/DRELU epilogues and Transformer Engine's
    activation-backward kernels compute it.

    Example:
    ```mlir
    %dx = tec.}], mnemonic, [{ %dy, %x : tensor<64x128xf32>
    ```
  }]);
  let arguments = (ins Tec_FloatTensor:$grad, Tec_FloatTensor:$input);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

def Tec_ReluGradOp : Tec_ActivationGradOp<"relu_grad", "tec.relu", "x > 0 ? dy : 0">;

def Tec_GeluGradOp : Tec_ActivationGradOp<"gelu_grad", "tec.gelu", "dy * gelu'(x)"> {
  let arguments = (ins Tec_FloatTensor:$grad, Tec_FloatTensor:$input,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let hasVerifier = 1;
}

def Tec_OneHotOp : Tec_Op<"one_hot", [Pure]> {
  let summary = "class indices to one-hot rows";
  let description = [{
    `result[..., c] = (labels[...] == c) ? 1 : 0` for `c < depth`, the last result dim. An index outside
    [0, depth) is a run-time error. Integer labels carry no gradient.

    Example:
    ```mlir
    %0 = tec.one_hot %labels : tensor<64xi64> -> tensor<64x10xf32>
    ```
  }];
  let arguments = (ins Tec_IndexTensor:$labels);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$labels attr-dict `:` type($labels) `->` type($result)";
  let hasVerifier = 1;
}

def Tec_ClipCoefficientOp : Tec_Op<"clip_coefficient", [Pure, AllTypesMatch<["norm", "result"]>]> {
  let summary = "the factor that clips gradients to a global norm";
  let description = [{
    `min(1, max_norm / (norm + 1e-6))`, as `torch.nn.utils.clip_grad_norm_` computes it: every gradient is
    multiplied by it before the optimizer step.

    Example:
    ```mlir
    %c = tec.clip_coefficient %norm {max_norm = 1.0 : f32} : tensor<f32>
    ```
  }];
  let arguments = (ins Tec_Scalar:$norm, F32Attr:$max_norm);
  let results = (outs Tec_Scalar:$result);
  let assemblyFormat = "$norm attr-dict `:` type($norm)";
}

def Tec_AllFiniteOp : Tec_Op<"all_finite", [Pure]> {
  let summary = "whether every element of every input is finite";
  let description = [{
    `true` when no input holds an inf or a NaN: dynamic loss scaling skips a step whose gradients overflowed.

    Example:
    ```mlir
    %ok = tec.all_finite %g0, %g1 : tensor<64x32xf32>, tensor<32xf32> -> tensor<i1>
    ```
  }];
  let arguments = (ins Variadic<Tec_FloatTensor>:$inputs);
  let results = (outs 0DTensorOf<[I1]>:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
}

def Tec_LossScaleUpdateOp : Tec_Op<"loss_scale_update", [Pure]> {
  let summary = "dynamic loss scaling, as torch.cuda.amp.GradScaler";
  let description = [{
    When the step's gradients were finite: count one more clean step, and after `growth_interval` clean
    steps multiply the scale by `growth_factor` (and restart the count). Otherwise multiply it by
    `backoff_factor` and restart the count; the step itself is skipped by its caller.

    Example:
    ```mlir
    %s, %n = tec.loss_scale_update %scale, %clean, %ok {growth_interval = 2000 : i64}
        : tensor<f32>, tensor<f32>, tensor<i1> -> tensor<f32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tec_Scalar:$scale, Tec_Scalar:$clean_steps, 0DTensorOf<[I1]>:$finite,
                   I64Attr:$growth_interval, DefaultValuedAttr<F32Attr, "2.0f">:$growth_factor,
                   DefaultValuedAttr<F32Attr, "0.5f">:$backoff_factor);
  let results = (outs Tec_Scalar:$new_scale, Tec_Scalar:$new_clean_steps);
  let assemblyFormat = [{
    $scale `,` $clean_steps `,` $finite attr-dict `:` type($scale) `,` type($clean_steps) `,` type($finite)
    `->` type($new_scale) `,` type($new_clean_steps)
  }];
}

def Tec_OptimizerUpdateOp : Tec_Op<"optimizer_update", [Pure, AttrSizedOperandSegments]> {
  let summary = "one parameter's optimizer step, fused into one pass over its elements";
  let description = [{
    The whole update of one parameter as one op (one kernel, not a dozen elementwise ones): the gradient
    times the clipping coefficient `clip` (when given), then
    - `sgd`: `g += weight_decay * p` (L2, as torch.optim.SGD); with `momentum`, one moment
      `v' = momentum * v + g` and the direction `v'` (or `g + momentum * v'` with `nesterov`);
      `p' = p - lr * direction`.
    - `adamw`: moments `m' = beta1 m + (1 - beta1) g`, `v' = beta2 v + (1 - beta2) g^2`, bias-corrected at
      `t = step + 1`, `p' = p - lr * (m'/(1 - beta1^t) / (sqrt(v'/(1 - beta2^t)) + eps) + weight_decay * p)`
      (decoupled weight decay, as torch.optim.AdamW).
    With `finite` false the step leaves everything as it was: gradients that overflowed (dynamic loss
    scaling), or a step of gradient accumulation that only adds to the sums.
    Backends may run every parameter's update of a step in one launch.

    Example:
    ```mlir
    %p2, %m2, %v2 = tec.optimizer_update %p, %g : tensor<4x8xf32>, tensor<4x8xf32>
        moments(%m, %v : tensor<4x8xf32>, tensor<4x8xf32>) lr(%lr : tensor<f32>) step(%t : tensor<f32>)
        {optimizer = "adamw", beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32,
         weight_decay = 0.01 : f32} -> tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[F32]>:$param, StaticShapeTensorOf<[F32]>:$grad,
                   Variadic<StaticShapeTensorOf<[F32]>>:$moments, Tec_Scalar:$lr, Tec_Scalar:$step,
                   Optional<Tec_Scalar>:$clip, Optional<0DTensorOf<[I1]>>:$finite, StrAttr:$optimizer,
                   DefaultValuedAttr<F32Attr, "0.9f">:$beta1, DefaultValuedAttr<F32Attr, "0.999f">:$beta2,
                   DefaultValuedAttr<F32Attr, "1e-8f">:$eps, DefaultValuedAttr<F32Attr, "0.0f">:$weight_decay,
                   DefaultValuedAttr<F32Attr, "0.0f">:$momentum, DefaultValuedAttr<BoolAttr, "false">:$nesterov);
  let results = (outs StaticShapeTensorOf<[F32]>:$new_param, Variadic<StaticShapeTensorOf<[F32]>>:$new_moments);
  let assemblyFormat = [{
    $param `,` $grad `:` type($param) `,` type($grad) (`moments` `(` $moments^ `:` type($moments) `)`)?
    `lr` `(` $lr `:` type($lr) `)` `step` `(` $step `:` type($step) `)`
    (`clip` `(` $clip^ `:` type($clip) `)`)? (`finite` `(` $finite^ `:` type($finite) `)`)?
    attr-dict `->` type(results)
  }];
  let hasVerifier = 1;
}

def Tec_LrScheduleOp : Tec_Op<"lr_schedule", [Pure, AllTypesMatch<["step", "lr", "result"]>]> {
  let summary = "the learning rate at a training step";
  let description = [{
    `constant`: `lr`. `warmup`: `lr * min(1, (step + 1) / warmup_steps)`. `cosine`: the same warm-up,
    then `lr * 0.5 * (1 + cos(pi * (step - warmup_steps) / (total_steps - warmup_steps)))`, reaching 0 at
    `total_steps`. `step` counts from 0. `lr` is an operand, not an attribute: the train step's "lr" state,
    which a trainer may set between steps (PyTorch-style schedulers drive it there).

    Example:
    ```mlir
    %rate = tec.lr_schedule %step, %lr {schedule = "cosine", warmup_steps = 10 : i64, total_steps = 100 : i64} : tensor<f32>
    ```
  }];
  let arguments = (ins Tec_Scalar:$step, Tec_Scalar:$lr, StrAttr:$schedule, I64Attr:$warmup_steps,
                   I64Attr:$total_steps);
  let results = (outs Tec_Scalar:$result);
  let assemblyFormat = "$step `,` $lr attr-dict `:` type($step)";
  let hasVerifier = 1;
}

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

#endif // TEC_OPS
