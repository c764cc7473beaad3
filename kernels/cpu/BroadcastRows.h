// The CPU kernels' shared walks (internal to kernels/cpu): element counts of Dims, and the broadcast row
// walk the elementwise, GEMM and copy kernels share.
#ifndef TEC_KERNELS_CPU_BROADCASTROWS_H
#define TEC_KERNELS_CPU_BROADCASTROWS_H

#include "kernels/cpu/Dims.h"
#include "kernels/cpu/ThreadPool.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace tec::kernels::cpu {

inline int64_t numElements(const Dims &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Calls f(row, offsets...) for each row of `out` (its last dim), with each operand's element offset
/// at the row's start; operands advance along the row by their last stride. Rows go in chunks of about
/// 16K elements: one division walk per chunk, then an odometer step per row (short rows are common:
/// attention heads).
template <size_t N, typename F>
void forEachBroadcastRow(const Dims &out, const std::array<Dims, N> &strides, F f) {
  const int64_t rank = out.size();
  const int64_t inner = rank ? out.back() : 1;
  const int64_t rows = inner ? numElements(out) / inner : 0;
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(inner, 1));
  const int64_t chunks = (rows + chunk - 1) / chunk;
  parallelLoop(chunks, rows * inner, [&](int64_t c) {
    const int64_t begin = c * chunk, end = std::min(rows, begin + chunk);
    Dims coord(std::max<int64_t>(rank - 1, 0));
    std::array<int64_t, N> offsets{};
    int64_t rest = begin;
    for (int64_t d = rank - 2; d >= 0; --d) {
      coord[d] = rest % out[d];
      rest /= out[d];
      for (size_t k = 0; k < N; ++k)
        offsets[k] += coord[d] * strides[k][d];
    }
    for (int64_t row = begin; row < end; ++row) {
      f(row * inner, offsets);
      for (int64_t d = rank - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k)
          offsets[k] += strides[k][d];
        if (++coord[d] < out[d])
          break;
        for (size_t k = 0; k < N; ++k)
          offsets[k] -= strides[k][d] * out[d];
        coord[d] = 0;
      }
    }
  });
}

} // namespace tec::kernels::cpu

#endif
