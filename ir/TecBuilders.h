// Small builders for passes and gradient definitions that assemble tec ops.
#ifndef TEC_IR_TECBUILDERS_H
#define TEC_IR_TECBUILDERS_H

#include "ir/TecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace tec {

/// A 0-D constant of `element` type, broadcast by the ops that use it.
inline mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc, mlir::Type element, double value) {
  auto type = mlir::RankedTensorType::get({}, element);
  return b.create<ConstantOp>(loc, type, mlir::DenseElementsAttr::get(type, b.getFloatAttr(element, value)));
}

/// An elementwise binary op with the numpy-broadcast result type (the operands must broadcast).
template <typename Op> mlir::Value broadcastBinary(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value y) {
  auto tx = llvm::cast<mlir::RankedTensorType>(x.getType()), ty = llvm::cast<mlir::RankedTensorType>(y.getType());
  auto dims = shape::broadcast(tx.getShape(), ty.getShape());
  return b.create<Op>(loc, mlir::RankedTensorType::get(*dims, tx.getElementType()), x, y);
}

} // namespace tec

#endif
