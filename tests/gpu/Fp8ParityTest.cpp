// CPU vs CUDA parity of the FP8 kernels, in the style of ggml's test-backend-ops: seeded inputs, the CPU
// kernel as the reference, bit-exact results expected. Skipped (visibly) without a CUDA device.
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cuda/Fp8Kernels.h"
#include "tests/unit/BlockGemmReference.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// tec's block-scaled GEMM on the GPU: the sums kernels/cuda/Fp8Kernels.h promises (ascending-k fused
// multiply-adds of the widened operands), bit for bit; block scaling's forward GEMM at a layer's size with
// partial tiles, and MXFP8's wgrad-like [K, N] weight into bf16 with a bias and a ReLU.
TEST(BlockGemmParity, EqualsAscendingKFusedMultiplyAddsOfTheWidenedOperands) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t m, n, k;
    bool transposeB;
    std::array<int64_t, 2> xBlock, wBlock;
    BlockScale kind;
  };
  for (const Shape &c : {Shape{1000, 700, 1536, true, {1, 128}, {128, 128}, BlockScale::Pow2},
                         Shape{77, 130, 96, false, {1, 32}, {32, 1}, BlockScale::E8M0}}) {
    std::mt19937 rng(11);
    const int64_t wRows = c.transposeB ? c.n : c.k, wCols = c.transposeB ? c.k : c.n;
    const auto x = tec::testing::blockScaledOperand(c.m, c.k, c.xBlock, Fp8Format::E4M3, c.kind, rng);
    const auto w = tec::testing::blockScaledOperand(wRows, wCols, c.wBlock, Fp8Format::E4M3, c.kind, rng);
    std::vector<float> expected = tec::testing::blockGemmReference(x.widened, w.widened, c.m, c.n, c.k, c.transposeB);
    uint8_t *dx = toDevice(x.codes), *dw = toDevice(w.codes);
    float *dxs = toDevice(x.scaleInv), *dws = toDevice(w.scaleInv), *dy = nullptr;
    cudaMalloc(&dy, expected.size() * sizeof(float));
    cuda::fp8BlockGemm(dx, dxs, c.xBlock[0], c.xBlock[1], Fp8Format::E4M3, dw, dws, c.wBlock[0], c.wBlock[1],
                       Fp8Format::E4M3, c.transposeB, {}, cuda::Ref{dy, ElementType::F32}, c.m, c.n, c.k,
                       Epilogue::None, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> y = toHost(dy, expected.size());
    int64_t mismatches = 0;
    for (size_t i = 0; i < y.size(); ++i)
      if (std::memcmp(&y[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 5)
        ADD_FAILURE() << c.m << "x" << c.n << "x" << c.k << ": y[" << i / c.n << ", " << i % c.n << "] = " << y[i]
                      << ", expected " << expected[i];
    EXPECT_EQ(mismatches, 0);
    for (void *p : {static_cast<void *>(dx), static_cast<void *>(dw), static_cast<void *>(dxs),
                    static_cast<void *>(dws), static_cast<void *>(dy)})
      cudaFree(p);
  }
}

// Current scaling folded into its quantize: the scale, scale_inv and codes of current_scaling then quantize.
TEST(CurrentScaledQuantizeParity, EqualsTheScaleThenTheQuantize) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  const int64_t n = 100003;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 20.0f);
  std::vector<float> x(n);
  for (auto &v : x)
    v = normal(rng);
  const float amax = cpu::amax(x.data(), n);
  const float scale = scaleFromAmax(amax, kE4M3Max, /*pow2=*/true, 0.0f);
  std::vector<uint8_t> cpuQ(n);
  cpu::quantize(x.data(), scale, cpuQ.data(), n, Fp8Format::E4M3);
  float *dx = toDevice(x), *dAmax = toDevice(std::vector<float>{amax}), *dScales = toDevice(std::vector<float>{0, 0});
  uint8_t *dq = nullptr;
  cudaMalloc(&dq, n);
  cuda::quantizeCurrentScaled(dx, ElementType::F32, dAmax, kE4M3Max, true, 0.0f, dScales, dScales + 1, dq, n,
                              Fp8Format::E4M3, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(toHost(dq, n), cpuQ);
  EXPECT_EQ(toHost(dScales, 2), (std::vector<float>{scale, 1.0f / scale}));
  // The transposed form (a wgrad operand): x [333, 300] read as its transpose, off the 32x32 tiles.
  const int64_t rows = 333, cols = 300;
  std::vector<float> xt(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      xt[c * rows + r] = x[r * cols + c];
  const float tAmax = cpu::amax(x.data(), rows * cols), tScale = scaleFromAmax(tAmax, kE5M2Max, false, 0.0f);
  std::vector<uint8_t> cpuT(rows * cols);
  cpu::quantize(xt.data(), tScale, cpuT.data(), rows * cols, Fp8Format::E5M2);
  cudaMemcpy(dAmax, &tAmax, sizeof(float), cudaMemcpyHostToDevice);
  cuda::quantizeTransposedCurrentScaled(dx, ElementType::F32, rows, cols, dAmax, kE5M2Max, false, 0.0f, dScales,
                                        dScales + 1, dq, Fp8Format::E5M2, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(toHost(dq, rows * cols), cpuT);
  EXPECT_EQ(toHost(dScales, 2), (std::vector<float>{tScale, 1.0f / tScale}));
  for (void *p : {static_cast<void *>(dx), static_cast<void *>(dAmax), static_cast<void *>(dScales),
                  static_cast<void *>(dq)})
    cudaFree(p);
}

} // namespace
