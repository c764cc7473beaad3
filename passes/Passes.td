#ifndef TEC_PASSES
#define TEC_PASSES

include "mlir/Pass/PassBase.td"

def TecSimplifyShapes : Pass<"tec-simplify-shapes", "mlir::func::FuncOp"> {
  let summary = "Collapse chains of shape-only ops left by ONNX exporters";
  let description = [{
    Exporters emit Reshape→Reshape (Flatten then Reshape, Unsqueeze then Reshape) and
    Transpose→Transpose (attention's head split and merge) chains. Each chain becomes one op, and a
    transpose whose composed permutation is the identity disappears, so the fusion passes that follow
    see GEMMs directly connected to their consumers and the plan moves no bytes for nothing.
    A chain is only collapsed through an inner op with a single use: otherwise the inner result
    is still materialized and nothing is saved.
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecRecognizePatterns : Pass<"tec-recognize-patterns", "mlir::func::FuncOp"> {
  let summary = "Turn the decomposed GELU and LayerNorm forms exporters emit into single ops";
  let description = [{
    `torch.onnx.export` and older opsets write GELU as `x * 0.5 * (1 + erf(x / sqrt(2)))` (or with
    tanh: `x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`) and LayerNorm as
    ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add. Each becomes one `tec.gelu` or
    `tec.layer_norm`, so that fusion can put the GELU in a GEMM epilogue and the normalization runs as
    one kernel. Matching tolerates operand order, association, `x / sqrt(2)` vs `x * (1/sqrt(2))`,
    `Pow(d, 2)` vs `d * d`, and constants rounded to float. Intermediates used elsewhere block a match:
    they must stay materialized. The fused op's location lists every source node.
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecFuseLinear : Pass<"tec-fuse-linear", "mlir::func::FuncOp"> {
  let summary = "Fuse GEMM + bias + activation into tec.linear";
  let description = [{
    Gemm (alpha 1, A not transposed, C a per-column bias) and MatMul by a 2-D weight become
    `tec.linear`; a following Add of a per-column bias and a Relu or Gelu join it as its epilogue,
    mirroring cuBLASLt's BIAS, RELU_BIAS and GELU_BIAS so that codegen maps the chain to one launch.
    cuBLASLt's GELU epilogue computes the tanh form: an erf GELU keeps the exact `gelu` epilogue unless
    `fast-gelu` is set. Batched MatMuls (attention) are left alone, and so is an intermediate with a
    second use. The fused op's location lists every source node.
  }];
  let options = [Option<"fastGelu", "fast-gelu", "bool", "false",
                        "allow the tanh GELU epilogue for an erf GELU">];
  let dependentDialects = ["::tec::TecDialect"];
}

#endif // TEC_PASSES
