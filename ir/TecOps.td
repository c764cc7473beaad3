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

// The ops, one file per family.
include "ir/ops/Elementwise.td"
include "ir/ops/Normalization.td"
include "ir/ops/Attention.td"
include "ir/ops/Linear.td"
include "ir/ops/Layout.td"
include "ir/ops/Window.td"
include "ir/ops/Training.td"
include "ir/ops/Fp8.td"

#endif // TEC_OPS
