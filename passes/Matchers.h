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

/// Grouped-query attention's repeat of each K/V head for the query heads sharing it (HF's repeat_kv:
/// Unsqueeze, Expand to [..., G, r, A, B], Reshape to [..., G*r, A, B]): `source` is the
/// [..., G, 1, A, B] tensor the heads are repeated from.
struct RepeatedHeads {
  mlir::Value source;
  int64_t groups = 0, repeats = 0;
  ExpandOp expand;
  ReshapeOp reshape;
};

/// `v` as a repeat of heads whose intermediates nothing else reads, or nullopt.
inline std::optional<RepeatedHeads> matchRepeatedHeads(mlir::Value v) {
  auto reshape = v.getDefiningOp<ReshapeOp>();
  auto expand = reshape && absorbable(v) ? reshape.getInput().getDefiningOp<ExpandOp>() : nullptr;
  if (!expand || !absorbable(reshape.getInput()))
    return std::nullopt;
  auto ut = llvm::cast<mlir::RankedTensorType>(expand.getInput().getType());
  auto et = llvm::cast<mlir::RankedTensorType>(expand.getType()), rt = llvm::cast<mlir::RankedTensorType>(v.getType());
  const int64_t rank = rt.getRank(), g = rank - 3;
  if (rank < 3 || ut.getRank() != rank + 1 || ut.getDimSize(g + 1) != 1)
    return std::nullopt;
  const int64_t groups = ut.getDimSize(g), repeats = et.getDimSize(g + 1);
  shape::Dims repeated(ut.getShape()), merged(ut.getShape().take_front(g));
  repeated[g + 1] = repeats;
  merged.push_back(groups * repeats);
  llvm::append_range(merged, ut.getShape().take_back(2));
  if (et.getShape() != llvm::ArrayRef<int64_t>(repeated) || rt.getShape() != llvm::ArrayRef<int64_t>(merged))
    return std::nullopt;
  return RepeatedHeads{expand.getInput(), groups, repeats, expand, reshape};
}

/// A permutation that swaps the last two dims and keeps the others (K^T in attention).
inline bool swapsLastTwo(llvm::ArrayRef<int64_t> perm) {
  const int64_t rank = perm.size();
  for (int64_t d = 0; d < rank; ++d)
    if (perm[d] != (d < rank - 2 ? d : (d == rank - 2 ? rank - 1 : rank - 2)))
      return false;
  return rank >= 2;
}

} // namespace tec

#endif
