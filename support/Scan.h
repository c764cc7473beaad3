// The running sum along an axis (tec.cumsum), one line at a time: the CPU and CUDA kernels and the
// compile-time folder all call it, so the three agree on the order of the additions.
#ifndef TEC_SUPPORT_SCAN_H
#define TEC_SUPPORT_SCAN_H

#include "support/HostDevice.h"

#include <cstdint>

namespace tec::kernels {

/// Sums `dim` values of one line in axis order (from the end with `reverse`); `load(j)` reads position
/// j, `store(j, sum)` writes the sum through j (before j with `exclusive`). Acc is f32 for floats, as
/// ONNX Runtime accumulates, and int64 for integers (i32 results wrap when stored).
template <typename Acc, typename Load, typename Store>
TEC_HOST_DEVICE void cumSumLine(Load load, Store store, int64_t dim, bool exclusive, bool reverse) {
  Acc sum = 0;
  for (int64_t step = 0; step < dim; ++step) {
    const int64_t j = reverse ? dim - 1 - step : step;
    const Acc v = load(j);
    if (exclusive) {
      store(j, sum);
      sum += v;
    } else {
      sum += v;
      store(j, sum);
    }
  }
}

/// Where line `line` of an [outer, dim, inner] tensor starts; its elements lie `inner` apart.
TEC_HOST_DEVICE int64_t lineStart(int64_t line, int64_t dim, int64_t inner) {
  return (line / inner) * dim * inner + line % inner;
}

} // namespace tec::kernels

#endif
