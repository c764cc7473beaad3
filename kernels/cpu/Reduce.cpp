// CPU kernels: reductions in double-precision lanes.
#include "kernels/cpu/CpuKernels.h"

#include "kernels/cpu/Clones.h"
#include "kernels/cpu/BroadcastRows.h"
#include "kernels/cpu/Dims.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

namespace tec::kernels::cpu {

namespace {

/// The sum of x in double, in one order: 8 running partial sums (vector lanes), then a tree.
template <typename T> TEC_CPU_CLONES double laneSumDouble(const T *x, int64_t n) {
  constexpr int64_t kLanes = 8;
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t lane = 0; lane < kLanes; ++lane)
      partial[lane] += static_cast<double>(x[i + lane]);
  for (int64_t lane = 0; i < n; ++i, ++lane)
    partial[lane] += static_cast<double>(x[i]);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t lane = 0; lane < width; ++lane)
      partial[lane] += partial[lane + width];
  return partial[0];
}

/// The most columns addRows sums at once.
constexpr int64_t kSumColumns = 256;

/// sums[c] = the double sum of x[r * stride + c] over rows r in order, for c < width (<= kSumColumns).
TEC_CPU_CLONES void addRows(const float *x, int64_t rows, int64_t stride, int64_t width, double *sums) {
  double acc[kSumColumns] = {}; // on the stack: apart from x and sums, so the loop vectorizes
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * stride;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c)
      acc[c] += row[c];
  }
  std::copy(acc, acc + width, sums);
}

} // namespace

template <typename T>
void reduce(ReduceKind kind, const T *x, const Shape &shape, const std::vector<int64_t> &axes, T *y) {
  const int64_t rank = shape.size();
  Dims strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  // Over the trailing dims (a loss's mean, a row's sum): each output's elements are contiguous, read in order.
  // Float sums go into 8 running partial sums then a tree: a fixed order on every CPU and thread count.
  const int64_t reduced = static_cast<int64_t>(axes.size());
  bool trailing = reduced > 0;
  for (int64_t i = 0; i < reduced && trailing; ++i)
    trailing = std::count(axes.begin(), axes.end(), rank - reduced + i) == 1;
  if (trailing) {
    int64_t count = 1, outCount = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < rank - reduced ? outCount : count) *= shape[d];
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    parallelLoop(outCount, outCount * count, [&](int64_t o) {
      const T *row = x + o * count;
      Acc sum = kernels::reduceIdentity<Acc>(kind);
      if constexpr (std::is_floating_point_v<T>)
        if (kind == ReduceKind::Sum || kind == ReduceKind::Mean)
          sum = laneSumDouble(row, count);
      if (!std::is_floating_point_v<T> || (kind != ReduceKind::Sum && kind != ReduceKind::Mean))
        for (int64_t i = 0; i < count; ++i)
          sum = kernels::reduceCombine<Acc>(kind, sum, row[i]);
      y[o] = kind == ReduceKind::Mean ? static_cast<T>(count ? sum / static_cast<Acc>(count) : 0) : static_cast<T>(sum);
    });
    return;
  }
  // A sum over middle dims (a bias gradient: [rows, cols] -> [cols]; global pooling of an NHWC image:
  // [N, H*W, C] -> [N, C]): rows added in order into a block of double column accumulators, reading x row by
  // row instead of down each column; a long one in bands of rows over the pool, whose partial sums are then
  // added in band order. The bands depend on the shape alone: the same sums at any thread count.
  Dims merged; // unit dims dropped, adjacent dims alike (reduced or kept) merged: [rows, cols] or [outer, rows, cols]
  std::vector<bool> mergedReduced;
  for (int64_t d = 0; d < rank; ++d) {
    const bool r = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (shape[d] == 1)
      continue;
    if (!merged.empty() && mergedReduced.back() == r)
      merged.back() *= shape[d];
    else
      merged.push_back(shape[d]), mergedReduced.push_back(r);
  }
  const bool middle = std::is_same_v<T, float> && (kind == ReduceKind::Sum || kind == ReduceKind::Mean) &&
                      numElements(shape) > 0 &&
                      (mergedReduced == std::vector<bool>{true, false} ||
                       mergedReduced == std::vector<bool>{false, true, false});
  if (middle) {
    const int64_t cols = merged.back(), rows = merged[merged.size() - 2], outer = merged.size() == 3 ? merged[0] : 1;
    const int64_t blocks = (cols + kSumColumns - 1) / kSumColumns;
    // Bands of about max(64, kParallelThreshold / cols) rows, near-equal and an even count: 196 rows in bands
    // of 64 (64, 64, 64, 4) left 2 threads at 128:68.
    const int64_t bandRows = std::max<int64_t>(64, kParallelThreshold / cols);
    int64_t bands = (rows + bandRows - 1) / bandRows;
    bands += bands > 1 ? bands % 2 : 0;
    auto bandStart = [&](int64_t band) { return rows * band / bands; };
    thread_local std::vector<double> partial;
    partial.assign(outer * bands * cols, 0.0);
    double *sums = partial.data(); // [outer, band, cols]
    parallelFor(outer * blocks * bands, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / (blocks * bands), c0 = t % blocks * kSumColumns, c1 = std::min(cols, c0 + kSumColumns);
        const int64_t band = t / blocks % bands, r0 = bandStart(band), r1 = bandStart(band + 1);
        if constexpr (std::is_same_v<T, float>)
          addRows(x + (o * rows + r0) * cols + c0, r1 - r0, cols, c1 - c0, sums + (o * bands + band) * cols + c0);
      }
    });
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < cols; ++c) {
        double sum = 0;
        for (int64_t band = 0; band < bands; ++band)
          sum += sums[(o * bands + band) * cols + c];
        y[o * cols + c] = static_cast<T>(kind == ReduceKind::Mean ? sum / static_cast<double>(rows) : sum);
      }
    return;
  }
  Dims keptDims, keptStrides;
  // Each reduced element's offset from its output's first, kept per thread across calls (no allocation
  // once the largest reduction has run).
  thread_local std::vector<int64_t> reducedOffsets, next;
  reducedOffsets.assign(1, 0);
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      keptDims.push_back(shape[d]);
      keptStrides.push_back(strides[d]);
      continue;
    }
    next.clear();
    for (int64_t base : reducedOffsets)
      for (int64_t i = 0; i < shape[d]; ++i)
        next.push_back(base + i * strides[d]);
    reducedOffsets.swap(next);
  }
  const int64_t outCount = numElements(keptDims), count = reducedOffsets.size();
  // The caller's offsets: inside the loop a helper thread would name its own thread_local vector.
  const int64_t *offsets = reducedOffsets.data();
  parallelLoop(outCount, outCount * count, [&](int64_t o) {
    int64_t base = 0, rest = o;
    for (int64_t d = static_cast<int64_t>(keptDims.size()) - 1; d >= 0; --d) {
      base += (rest % keptDims[d]) * keptStrides[d];
      rest /= keptDims[d];
    }
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    Acc sum = kernels::reduceIdentity<Acc>(kind);
    for (int64_t i = 0; i < count; ++i)
      sum = kernels::reduceCombine<Acc>(kind, sum, x[base + offsets[i]]);
    y[o] = kind == ReduceKind::Mean ? static_cast<T>(count ? sum / static_cast<Acc>(count) : 0) : static_cast<T>(sum);
  });
}

template void reduce<float>(ReduceKind, const float *, const Shape &, const std::vector<int64_t> &, float *);
template void reduce<int32_t>(ReduceKind, const int32_t *, const Shape &, const std::vector<int64_t> &, int32_t *);
template void reduce<int64_t>(ReduceKind, const int64_t *, const Shape &, const std::vector<int64_t> &, int64_t *);

} // namespace tec::kernels::cpu
