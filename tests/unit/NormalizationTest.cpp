// LayerNorm and RMSNorm rows against a double-precision reference, at the lengths where the kernel sums in
// fixed lanes (short rows, with and without a remainder past the last 8) and by `omp simd` (long rows).
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace tec::kernels;

namespace {

TEST(Normalization, LayerNormAndRmsNormRowsMatchDoublePrecision) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.5f, 3.0f);
  for (int64_t cols : {1, 3, 8, 40, 43, 96, 255, 256, 300, 768}) {
    for (bool center : {true, false}) {
      const int64_t rows = 37;
      std::vector<float> x(rows * cols), scale(cols), bias(cols), y(rows * cols), mean(rows), rstd(rows);
      for (float &v : x)
        v = normal(rng);
      for (float &v : scale)
        v = normal(rng);
      for (float &v : bias)
        v = normal(rng);
      const float epsilon = 1e-5f;
      cpu::layerNorm(x.data(), scale.data(), center ? bias.data() : nullptr, y.data(), mean.data(), rstd.data(),
                     rows, cols, epsilon, center);
      for (int64_t r = 0; r < rows; ++r) {
        const float *row = x.data() + r * cols;
        double mu = 0, sq = 0;
        if (center) {
          for (int64_t j = 0; j < cols; ++j)
            mu += row[j];
          mu /= cols;
        }
        for (int64_t j = 0; j < cols; ++j)
          sq += (row[j] - mu) * (row[j] - mu);
        const double inv = 1.0 / std::sqrt(sq / cols + epsilon);
        EXPECT_NEAR(mean[r], mu, 1e-6 * (std::abs(mu) + 1)) << cols << " columns, row " << r;
        EXPECT_NEAR(rstd[r], inv, 2e-7 * inv) << cols << " columns, row " << r;
        for (int64_t j = 0; j < cols; ++j) {
          const double want = (row[j] - mu) * inv * scale[j] + (center ? bias[j] : 0.0);
          ASSERT_NEAR(y[r * cols + j], want, 1e-5 * (std::abs(want) + std::abs(scale[j]) + 1))
              << cols << " columns, row " << r << ", column " << j << (center ? "" : " (RMSNorm)");
        }
      }
    }
  }
}

} // namespace
