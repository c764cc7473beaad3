#include "kernels/cuda/LaunchShapes.h"

#include <algorithm>

namespace tec::kernels::cuda {

bool makeExtent(const Shape &shape, Extent &extent) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    return false;
  extent.rank = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    extent.dims[d] = shape[d];
  return true;
}

Strided broadcastOperand(const Shape &shape, const Shape &out) {
  Strided s;
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1, o = static_cast<int64_t>(out.size()) - 1; i >= 0 && o >= 0;
       --i, --o) {
    if (o < kMaxRank)
      s.strides[o] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return s;
}

Strided contiguous(const Shape &shape) { return broadcastOperand(shape, shape); }

int64_t count(const Extent &e) {
  int64_t n = 1;
  for (int d = 0; d < e.rank; ++d)
    n *= e.dims[d];
  return n;
}

void coalesce(Extent &extent, std::initializer_list<Strided *> operands) {
  Extent merged;
  int64_t strides[kMaxRank][kMaxRank] = {}; // [operand][dim]
  for (int d = 0; d < extent.rank; ++d) {
    if (extent.dims[d] == 1)
      continue;
    const int last = merged.rank - 1;
    bool joins = last >= 0;
    int k = 0;
    for (Strided *s : operands) {
      joins = joins && strides[k][last] == s->strides[d] * extent.dims[d];
      ++k;
    }
    if (joins) {
      merged.dims[last] *= extent.dims[d];
      k = 0;
      for (Strided *s : operands)
        strides[k++][last] = s->strides[d];
      continue;
    }
    merged.dims[merged.rank] = extent.dims[d];
    k = 0;
    for (Strided *s : operands)
      strides[k++][merged.rank] = s->strides[d];
    ++merged.rank;
  }
  if (count(extent) == 0) // an empty space stays empty
    return;
  int k = 0;
  for (Strided *s : operands) {
    for (int d = 0; d < kMaxRank; ++d)
      s->strides[d] = d < merged.rank ? strides[k][d] : 0;
    ++k;
  }
  extent = merged;
}

bool isContiguous(const Extent &extent, const Strided &s) {
  int64_t expected = 1;
  for (int d = extent.rank - 1; d >= 0; --d) {
    if (extent.dims[d] != 1 && s.strides[d] != expected)
      return false;
    expected *= extent.dims[d];
  }
  return true;
}

ReductionPlan planReduction(Extent &kept, Strided &keptStrides, Extent &reduced, Strided &reducedStrides,
                            int multiprocessors) {
  coalesce(kept, {&keptStrides});
  coalesce(reduced, {&reducedStrides});
  ReductionPlan p;
  p.outputs = count(kept);
  p.reducedCount = count(reduced);
  const int64_t wanted = kReduceBlocksPerSm * std::max(1, multiprocessors);
  if (kept.rank == 1 && keptStrides.strides[0] == 1 && reduced.rank == 1 && reducedStrides.strides[0] >= p.outputs) {
    // Columns: a block of threads covers kReduceThreads outputs; blocks along y split the rows.
    p.kind = ReductionPlan::Kind::Columns;
    p.columnStride = reducedStrides.strides[0];
    const int64_t columnBlocks = (p.outputs + kReduceThreads - 1) / kReduceThreads;
    const int64_t rowsPerSplit = std::max<int64_t>(1, kMinPerBlock / kReduceThreads);
    p.splits = std::clamp<int64_t>(wanted / columnBlocks, 1,
                                   std::min<int64_t>(65535, (p.reducedCount + rowsPerSplit - 1) / rowsPerSplit));
    p.gridX = static_cast<unsigned>(std::min<int64_t>(columnBlocks, int64_t(1) << 30));
    p.gridY = static_cast<unsigned>(p.splits);
  } else {
    p.kind = reduced.rank == 1 && reducedStrides.strides[0] == 1 ? ReductionPlan::Kind::Rows
                                                                  : ReductionPlan::Kind::General;
    // One block per output where there are enough outputs to fill the GPU; else split each output.
    const int64_t perOutput = p.outputs >= wanted ? 1 : (wanted + p.outputs - 1) / std::max<int64_t>(1, p.outputs);
    p.splits = std::clamp<int64_t>(perOutput, 1, std::max<int64_t>(1, p.reducedCount / kMinPerBlock));
    p.gridX = static_cast<unsigned>(std::min<int64_t>(p.outputs, 65535 * 16));
    p.gridY = static_cast<unsigned>(p.splits);
  }
  p.partials = p.splits > 1 ? p.outputs * p.splits : 0;
  return p;
}

int atomicGridBlocks(int64_t n, int threads, int multiprocessors) {
  const int64_t resident = int64_t(std::max(1, multiprocessors)) * (2048 / threads);
  return static_cast<int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, resident));
}

TileGrid tileGrid(int64_t rows, int64_t cols, int tile) {
  TileGrid g;
  g.x = static_cast<unsigned>(std::min<int64_t>((rows + tile - 1) / tile, (int64_t(1) << 31) - 1));
  g.y = static_cast<unsigned>(std::min<int64_t>((cols + tile - 1) / tile, 65535));
  return g;
}

} // namespace tec::kernels::cuda
