// Compile-time evaluation shared by the tec ops' fold hooks (see TecFolding.cpp).
#ifndef TEC_IR_TECFOLDING_H
#define TEC_IR_TECFOLDING_H

#include "ir/TecOps.h"

#include "mlir/IR/PatternMatch.h"

namespace tec {

/// The largest non-splat result a fold computes: shape arithmetic and small masks fold, a large
/// constant subgraph stays ops (computed by the plan, not stored in it).
inline constexpr int64_t kMaxFoldedElements = 1 << 16;

/// The elementwise ops (Tec_UnaryOp, Tec_BinaryOp, tec.mod) on constant operands.
mlir::OpFoldResult foldUnary(mlir::Operation *op, mlir::Attribute input);
mlir::OpFoldResult foldBinary(mlir::Operation *op, mlir::Attribute lhs, mlir::Attribute rhs);

/// The binary elementwise ops' canonicalization: a splat constant operand of the result's full shape beside
/// an operand that has that shape becomes a 0-D constant the op broadcasts, so the plan stores one value;
/// likewise an expanded operand is read unexpanded where the op's broadcasting gives the same result, and
/// an op of an expanded tensor and a value broadcasting into the unexpanded one runs before the expand.
void addScalarSplatOperandPattern(mlir::RewritePatternSet &patterns, mlir::MLIRContext *context,
                                  llvm::StringRef opName);

} // namespace tec

#endif
