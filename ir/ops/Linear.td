// The tec dialect's GEMMs (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_LINEAR
#define TEC_OPS_LINEAR

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

#endif // TEC_OPS_LINEAR
