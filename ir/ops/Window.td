// The tec dialect's convolutions and pools (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_WINDOW
#define TEC_OPS_WINDOW

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

#endif // TEC_OPS_WINDOW
