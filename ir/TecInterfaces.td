#ifndef TEC_INTERFACES
#define TEC_INTERFACES

include "mlir/IR/OpBase.td"

def Tec_Differentiable : OpInterface<"Differentiable"> {
  let cppNamespace = "::tec";
  let description = [{
    An op that knows its vector-Jacobian product: given the gradients flowing into its results, it
    builds the gradients of its operands. `tec-autodiff` walks a function backwards and asks each op;
    a new op brings its own gradient by implementing this interface.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds one gradient per operand into `operandGrads` (a null value where no gradient flows, e.g.
        into an integer index). `resultGrads` has one entry per result, null where nothing flows back.
        Fails, with a diagnostic on the op, when the gradient is not defined for this configuration.
      }],
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // TEC_INTERFACES
