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

#endif // TEC_PASSES
