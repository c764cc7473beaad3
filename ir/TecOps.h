// The tec dialect: ops, plus the shape rules shared by the verifiers and the ONNX importer.
#ifndef TEC_IR_TECOPS_H
#define TEC_IR_TECOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>
#include <string>
#include <vector>

#include "ir/TecOpsDialect.h.inc"

#include "ir/TecInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ir/TecOps.h.inc"

namespace tec {

/// Name of the function-argument attribute that marks a trainable parameter (an ONNX initializer).
inline constexpr llvm::StringLiteral kParamAttrName = "tec.param";
/// On a param argument: why it is not trained (a running statistic, an exporter-folded constant...).
inline constexpr llvm::StringLiteral kFrozenAttrName = "tec.frozen";
/// A state argument (FP8 meta state, optimizer state): its name, and the value every element starts at.
inline constexpr llvm::StringLiteral kStateAttrName = "tec.state";
inline constexpr llvm::StringLiteral kStateInitAttrName = "tec.state_init";
/// What a state argument holds, for the memory report: "optimizer" (moments), "fp8" (scaling meta state) or
/// "training" (the step counter, the loss scale).
inline constexpr llvm::StringLiteral kStateKindAttrName = "tec.state_kind";
/// On a state argument that is one rank's shard (ZeRO stage 1, support/Sharding.h): the shape of the whole
/// tensor it is a shard of, and the ranks it is split over.
inline constexpr llvm::StringLiteral kStateShardOfAttrName = "tec.state_shard_of";
inline constexpr llvm::StringLiteral kStateShardRanksAttrName = "tec.state_shard_ranks";
/// On an input argument taken in 16 bits: the caller still gives f32, which the session rounds as it writes.
inline constexpr llvm::StringLiteral kHostF32AttrName = "tec.host_f32";
/// On train_step's result: the loss. Temporaries computed before it and read after it are saved activations.
inline constexpr llvm::StringLiteral kLossAttrName = "tec.loss";
/// On a function result: the index of the state argument this result is the next value of.
inline constexpr llvm::StringLiteral kStateUpdateAttrName = "tec.state_update";
/// On a @forward result: the index of the param (a BatchNormalization running statistic) it is the next
/// value of in training. Inference drops these results; the training step writes them back.
inline constexpr llvm::StringLiteral kRunningStatAttrName = "tec.running_stat";
/// On a train_step argument: the index of the model output it is the target of.
inline constexpr llvm::StringLiteral kTargetAttrName = "tec.target";
/// On a train_step argument of a multi-output model: the index of the output whose loss term it weighs
/// (1 trains on that output, 0 ignores it).
inline constexpr llvm::StringLiteral kLossWeightAttrName = "tec.loss_weight";
/// On a result of a vector-Jacobian product: the index of the argument it is the gradient of.
inline constexpr llvm::StringLiteral kGradOfAttrName = "tec.grad_of";
/// On a GEMM built by autodiff: its role in training ("dgrad", "wgrad"; forward GEMMs have none) and
/// which operand (0 or 1) is a gradient, which the HYBRID FP8 recipe quantizes to E5M2.
inline constexpr llvm::StringLiteral kGemmRoleAttrName = "tec.gemm_role";
inline constexpr llvm::StringLiteral kGradOperandAttrName = "tec.grad_operand";
/// On a GEMM: the precision it runs in and why, for the compile summary's per-layer table.
inline constexpr llvm::StringLiteral kPrecisionAttrName = "tec.precision";

/// The epilogues a fused GEMM may carry, in cuBLASLt's terms.
bool isKnownEpilogue(llvm::StringRef epilogue);

/// The ONNX nodes an op came from: its location's names (a fused op's location carries several).
std::vector<std::string> sourceNodes(mlir::Location loc);

namespace shape {
using Dims = llvm::SmallVector<int64_t>;
/// Numpy broadcast of two shapes; nullopt when they are incompatible.
std::optional<Dims> broadcast(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
/// Numpy matmul result shape (1-D promotion, batch broadcast); nullopt when incompatible.
std::optional<Dims> matmul(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
/// Shape after reducing `axes` (sorted, non-negative).
Dims reduce(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> axes, bool keepdims);
/// Number of elements of `step`-strided range [start, end): never negative.
int64_t sliceLength(int64_t start, int64_t end, int64_t step);
/// No tensor has a dim past this (2^40): an empty tensor with one would pass an element-count check, and
/// sums and products of such dims overflow int64.
inline constexpr int64_t kMaxDim = int64_t(1) << 40;
/// Element count, or nullopt when it overflows int64 or a dim is negative or past kMaxDim.
std::optional<int64_t> elementCount(llvm::ArrayRef<int64_t> dims);
/// A block-scaled tensor's scale shape: the tensor as [rows, cols] (every dim but the last as rows) in
/// blocks of block[0] x block[1], partial at the ends: [ceil(rows / block[0]), ceil(cols / block[1])].
Dims blockScales(llvm::ArrayRef<int64_t> dims, llvm::ArrayRef<int64_t> block);
/// "4x8" for diagnostics.
std::string str(llvm::ArrayRef<int64_t> dims);
} // namespace shape

} // namespace tec

#endif // TEC_IR_TECOPS_H
