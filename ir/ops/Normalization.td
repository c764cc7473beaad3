// The tec dialect's softmax, normalizations and reductions (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_NORMALIZATION
#define TEC_OPS_NORMALIZATION

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

#endif // TEC_OPS_NORMALIZATION
