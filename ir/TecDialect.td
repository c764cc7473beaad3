#ifndef TEC_DIALECT
#define TEC_DIALECT

include "mlir/IR/OpBase.td"

def Tec_Dialect : Dialect {
  let name = "tec";
  let cppNamespace = "::tec";
  let summary = "Tensor ops of ONNX models, fused GEMMs and explicit FP8 numerics";
  let description = [{
    The `tec` dialect holds a model as pure ops on statically shaped ranked tensors. It has three
    layers: the ONNX subset the importer accepts (one op per ONNX operator, shape-only operators such
    as Flatten, Squeeze and Unsqueeze folded into `tec.reshape`), the fused `tec.linear` whose
    epilogue mirrors cuBLASLt's, and explicit FP8 ops (quantize, dequantize, amax, FP8 GEMM and the
    delayed-scaling update) so that nothing about FP8 is hidden inside a kernel.

    Trainable parameters are `func.func` arguments tagged `tec.param = "<initializer name>"`;
    their data lives outside the IR, so printing a large model never prints its weights.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let hasConstantMaterializer = 1;
}

class Tec_Op<string mnemonic, list<Trait> traits = []> : Op<Tec_Dialect, mnemonic, traits>;

#endif // TEC_DIALECT
