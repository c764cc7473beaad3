// The tec dialect's elementwise ops: binary, comparisons, unary, where, casts, constants (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_ELEMENTWISE
#define TEC_OPS_ELEMENTWISE

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

#endif // TEC_OPS_ELEMENTWISE
