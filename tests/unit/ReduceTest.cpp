// The CPU reduction over any axes against a plain double-precision sum, bit for bit at 1 and 2 threads: the
// trailing-axes rows, the middle-axes column sums (global pooling of an NHWC image, a bias gradient) whole and
// in bands of rows, and the general strided walk.
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace tec::kernels;
using namespace tec::kernels::cpu;

namespace {

struct ReduceCase {
  const char *name;
  Shape shape;
  std::vector<int64_t> axes;
};

/// The reference: each output's elements summed in double, in row-major order.
std::vector<double> referenceSums(const std::vector<float> &x, const Shape &shape, const std::vector<int64_t> &axes,
                                  int64_t &count) {
  const int64_t rank = shape.size();
  Shape kept;
  count = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end())
      kept.push_back(shape[d]);
    else
      count *= shape[d];
  std::vector<double> sums(numElements(kept), 0.0);
  std::vector<int64_t> index(rank, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t out = 0;
    for (int64_t d = 0; d < rank; ++d)
      if (std::find(axes.begin(), axes.end(), d) == axes.end())
        out = out * shape[d] + index[d];
    sums[out] += x[i];
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == shape[d]; --d)
      index[d] = 0;
  }
  return sums;
}

class Reduce : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(Reduce, SumAndMeanMatchDoublePrecisionAtAnyThreadCount) {
  const ReduceCase &c = GetParam();
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(1.0f, 3.0f);
  std::vector<float> x(numElements(c.shape));
  for (float &v : x)
    v = normal(rng);
  int64_t count = 0;
  const std::vector<double> sums = referenceSums(x, c.shape, c.axes, count);
  for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean}) {
    std::vector<std::vector<float>> runs;
    for (int threads : {1, 2}) {
      setThreads(threads);
      std::vector<float> y(sums.size(), NAN);
      reduce(kind, x.data(), c.shape, c.axes, y.data());
      for (size_t i = 0; i < y.size(); ++i) {
        const double want = kind == ReduceKind::Mean ? sums[i] / count : sums[i];
        ASSERT_NEAR(y[i], want, 1e-6 * (1 + std::abs(want))) << c.name << " output " << i << " on " << threads;
      }
      runs.push_back(y);
    }
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0)
        << c.name << ": 1 and 2 threads differ";
  }
  setThreads(0);
}

const ReduceCase kCases[] = {
    {"rows", {6, 300}, {1}},
    {"nhwc_global_pool_banded", {1, 112, 112, 32}, {1, 2}},
    {"nhwc_global_pool_wide", {2, 7, 7, 600}, {1, 2}},
    {"bias_gradient", {4096, 40}, {0}},
    {"middle_with_unit_dims", {3, 1, 50, 1, 20}, {1, 2, 3}},
    {"strided_walk", {5, 6, 7}, {0, 2}},
    // Large enough to run on the pool: an NCHW bias or scale gradient (training's conv and BatchNorm); the
    // helpers once walked offsets of their own, not the caller's.
    {"strided_walk_parallel", {2, 64, 32, 32}, {0, 2, 3}},
    {"one_element", {1}, {0}},
};

INSTANTIATE_TEST_SUITE_P(Cpu, Reduce, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return std::string(info.param.name); });

} // namespace
