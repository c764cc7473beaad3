// The tec dialect's shapes and data movement (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_LAYOUT
#define TEC_OPS_LAYOUT

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
    from the end; an index out of range is a run-time error. `padding_index` (PyTorch's nn.Embedding
    `padding_idx`, which its export drops; the importer finds it as the table's one all-zero row): positions
    that gather that slice pass no gradient to it, so PyTorch's never-trained padding row stays untrained.

    Example:
    ```mlir
    %0 = tec.gather %table, %ids {axis = 0 : i64} : (tensor<100x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    ```
  }];
  let arguments = (ins Tec_Tensor:$data, Tec_IndexTensor:$indices, I64Attr:$axis,
                       OptionalAttr<I64Attr>:$padding_index);
  let results = (outs Tec_Tensor:$result);
  let builders = [OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$data, "::mlir::Value":$indices, "int64_t":$axis), [{
    build($_builder, $_state, result, data, indices, $_builder.getI64IntegerAttr(axis), ::mlir::IntegerAttr());
  }]>];
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

#endif // TEC_OPS_LAYOUT
