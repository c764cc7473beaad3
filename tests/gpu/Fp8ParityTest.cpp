// CPU vs CUDA parity of the FP8 kernels, in the style of ggml's test-backend-ops: seeded inputs, the CPU
// kernel as the reference, bit-exact results expected. Skipped (visibly) without a CUDA device.
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cuda/Fp8Kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace tec::kernels;

namespace {

bool haveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

template <typename T> T *toDevice(const std::vector<T> &host) {
  T *p = nullptr;
  cudaMalloc(&p, host.size() * sizeof(T));
  cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

template <typename T> std::vector<T> toHost(const T *device, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

class Fp8Parity : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8Parity, QuantizeAmaxDequantizeMatchTheCpuBitForBit) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  const Fp8Format format = GetParam();
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t n = 1 << 20;
  std::vector<float> x(n);
  for (auto &v : x)
    v = normal(rng);
  x[7] = 1e9f;   // saturates
  x[11] = 1e-9f; // flushes
  const float scale = format == Fp8Format::E4M3 ? 37.5f : 1900.0f;
  std::vector<uint8_t> cpuQ(n);
  cpu::quantize(x.data(), scale, cpuQ.data(), n, format);
  float cpuAmax = cpu::amax(x.data(), n);

  float *dx = toDevice(x), *dScale = toDevice(std::vector<float>{scale}), *dAmax = toDevice(std::vector<float>{0.0f});
  uint8_t *dq = nullptr;
  cudaMalloc(&dq, n);
  cuda::quantizeWithAmax(dx, ElementType::F32, dScale, dq, dAmax, n, format, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(toHost(dq, n), cpuQ);
  EXPECT_EQ(toHost(dAmax, 1)[0], cpuAmax);

  float *dy = nullptr, *dScaleInv = toDevice(std::vector<float>{1.0f / scale});
  cudaMalloc(&dy, n * sizeof(float));
  cuda::dequantize(dq, dScaleInv, dy, n, format, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> cpuY(n);
  cpu::dequantize(cpuQ.data(), 1.0f / scale, cpuY.data(), n, format);
  auto gpuY = toHost(dy, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(&gpuY[i], &cpuY[i], 4), 0) << "element " << i;
  for (void *p : {static_cast<void *>(dx), static_cast<void *>(dScale), static_cast<void *>(dAmax),
                  static_cast<void *>(dq), static_cast<void *>(dy), static_cast<void *>(dScaleInv)})
    cudaFree(p);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Parity, ::testing::Values(Fp8Format::E4M3, Fp8Format::E5M2));

TEST(DelayedScalingParity, MatchesTheCpu) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  std::vector<float> history = {0.0f, 3.0f, 10.0f, 1.0f, 0.5f};
  for (bool mostRecent : {false, true}) {
    std::vector<float> cpuHistory(history.size());
    float cpuScale, cpuScaleInv;
    cpu::delayedScaling(history.data(), history.size(), 2.0f, 4.0f, kE4M3Max, 1, mostRecent, cpuHistory.data(),
                        &cpuScale, &cpuScaleInv);
    float *dh = toDevice(history), *dnh = toDevice(history), *ds = toDevice(std::vector<float>{2.0f}),
          *da = toDevice(std::vector<float>{4.0f}), *dns = toDevice(std::vector<float>{0.0f}),
          *dnsi = toDevice(std::vector<float>{0.0f});
    ASSERT_TRUE(cuda::delayedScaling(dh, history.size(), ds, da, kE4M3Max, 1, mostRecent, dnh, dns, dnsi, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(toHost(dnh, history.size()), cpuHistory);
    EXPECT_EQ(toHost(dns, 1)[0], cpuScale);
    EXPECT_EQ(toHost(dnsi, 1)[0], cpuScaleInv);
    for (float *p : {dh, dnh, ds, da, dns, dnsi})
      cudaFree(p);
  }
}

TEST(QuantizeTransposedParity, EqualsTransposeThenQuantizeWithCounts) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  // Sizes off the 32x32 tiles on purpose; a few values saturate and a few flush.
  const int64_t rows = 333, cols = 70;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 50.0f);
  std::vector<float> x(rows * cols), xt(rows * cols);
  for (auto &v : x)
    v = normal(rng);
  x[5] = 1e6f;
  x[17] = 1e-12f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      xt[c * rows + r] = x[r * cols + c];
  const float scale = 2.0f;
  std::vector<uint8_t> cpuQ(x.size());
  int64_t saturated = 0, flushed = 0;
  cpu::quantizeCounting(xt.data(), scale, cpuQ.data(), xt.size(), Fp8Format::E5M2, saturated, flushed);
  float *dx = toDevice(x), *dScale = toDevice(std::vector<float>{scale}), *dAmax = toDevice(std::vector<float>{0.0f});
  unsigned long long *dCounts = nullptr;
  cudaMalloc(&dCounts, 2 * sizeof(unsigned long long));
  cudaMemset(dCounts, 0, 2 * sizeof(unsigned long long));
  uint8_t *dq = nullptr;
  cudaMalloc(&dq, x.size());
  cuda::quantizeTransposedWithAmax(dx, ElementType::F32, rows, cols, dScale, dq, dAmax, Fp8Format::E5M2, nullptr,
                                   dCounts);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(toHost(dq, x.size()), cpuQ);
  EXPECT_EQ(toHost(dAmax, 1)[0], cpu::amax(x.data(), x.size()));
  auto counts = toHost(dCounts, 2);
  EXPECT_EQ(static_cast<int64_t>(counts[0]), saturated);
  EXPECT_EQ(static_cast<int64_t>(counts[1]), flushed);
  for (void *p : {static_cast<void *>(dx), static_cast<void *>(dScale), static_cast<void *>(dAmax),
                  static_cast<void *>(dCounts), static_cast<void *>(dq)})
    cudaFree(p);
}

} // namespace
