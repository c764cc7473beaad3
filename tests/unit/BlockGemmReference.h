// What tec's block-scaled FP8 GEMM kernel promises (kernels/cuda/Fp8Kernels.h), written plainly for its tests:
// random operands quantized by blocks with kernels/cpu, and y summed by fused multiply-adds in ascending k.
#ifndef TEC_TESTS_UNIT_BLOCKGEMMREFERENCE_H
#define TEC_TESTS_UNIT_BLOCKGEMMREFERENCE_H

#include "kernels/cpu/CpuKernels.h"

#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace tec::testing {

struct BlockScaledOperand {
  std::vector<uint8_t> codes;
  std::vector<float> scaleInv, widened;
};

/// A random [rows, cols] tensor (one value in 50 an outlier), quantized by blocks and widened again.
inline BlockScaledOperand blockScaledOperand(int64_t rows, int64_t cols, std::array<int64_t, 2> block,
                                             kernels::Fp8Format format, kernels::BlockScale kind, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = normal(rng) * (rng() % 50 == 0 ? 300.0f : 1.0f);
  BlockScaledOperand o;
  o.codes.resize(x.size());
  o.scaleInv.resize(((rows + block[0] - 1) / block[0]) * ((cols + block[1] - 1) / block[1]));
  o.widened.resize(x.size());
  kernels::cpu::quantizeBlocks(x.data(), o.codes.data(), o.scaleInv.data(), rows, cols, block[0], block[1], false,
                               format, kind, 0.0f);
  kernels::cpu::dequantizeBlocks(o.codes.data(), o.scaleInv.data(), o.widened.data(), rows, cols, block[0], block[1],
                                 format);
  return o;
}

/// y[m, n] = x · w of the widened operands (w [k, n], or [n, k] where transposeB), each output one chain of
/// fused multiply-adds in ascending k from 0.
inline std::vector<float> blockGemmReference(const std::vector<float> &x, const std::vector<float> &w, int64_t m,
                                             int64_t n, int64_t k, bool transposeB) {
  std::vector<float> y(m * n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t i = 0; i < k; ++i)
        sum = std::fma(x[r * k + i], w[transposeB ? c * k + i : i * n + c], sum);
      y[r * n + c] = sum;
    }
  return y;
}

} // namespace tec::testing

#endif
