// Small matchers shared by the pattern passes.
#ifndef TEC_PASSES_MATCHERS_H
#define TEC_PASSES_MATCHERS_H

#include "ir/TecOps.h"

#include <cmath>
#include <optional>

namespace tec {

/// The value of a float constant that holds one value in every element (a scalar or a splat).
inline std::optional<double> splatConstant(mlir::Value v) {
  auto constant = v.getDefiningOp<ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = llvm::dyn_cast<mlir::DenseFPElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<llvm::APFloat>().convertToDouble();
}

/// True when `v` is a splat constant equal to `expected` up to the rounding exporters introduce
/// (1.4142135 for sqrt(2), 0.70710677 for 1/sqrt(2)).
inline bool isConstant(mlir::Value v, double expected) {
  auto value = splatConstant(v);
  return value && std::fabs(*value - expected) <= 1e-4 * std::fabs(expected);
}

/// A single-use intermediate can be absorbed into a fused op; a shared one must stay materialized.
inline bool absorbable(mlir::Value v) { return v.hasOneUse(); }

} // namespace tec

#endif
