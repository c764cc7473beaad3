// The CUDA block-scaled FP8 GEMM's tile steps (kernels/cuda/BlockGemmTiles.h) run on the CPU as the GPU
// runs them: every block of the launch grid, each phase between barriers for all 256 threads. Against
// kernels/cpu's block quantization and dequantization and a plain loop summing in the order the kernel
// promises (fused multiply-adds in ascending k), bit for bit.
#include "kernels/cuda/BlockGemmTiles.h"
#include "tests/unit/BlockGemmReference.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace tec::kernels;
using namespace tec::kernels::cuda;

namespace {

/// fp8BlockGemmKernel's schedule on the CPU: y before the epilogue, NaN where no thread wrote.
std::vector<float> runTiles(const BlockGemmProblem &p, int &writesTwice) {
  std::vector<float> y(p.m * p.n, NAN);
  const TileGrid grid = blockGemmGrid(p.m, p.n);
  const int64_t nTiles = (p.n + kBlockGemmTile - 1) / kBlockGemmTile;
  BlockGemmTiles tiles;
  for (unsigned bx = 0; bx < grid.x; ++bx)
    for (unsigned by = 0; by < grid.y; ++by)
      for (int64_t nTile = by; nTile < nTiles; nTile += grid.y) {
        const int64_t m0 = int64_t(bx) * kBlockGemmTile, n0 = nTile * kBlockGemmTile;
        float threadAcc[kBlockGemmBlockThreads][kBlockGemmPerThread][kBlockGemmPerThread] = {};
        for (int64_t k0 = 0; k0 < p.k; k0 += kBlockGemmTileK) {
          for (int t = 0; t < kBlockGemmBlockThreads; ++t)
            loadBlockGemmTiles(p, m0, n0, k0, t, tiles);
          for (int t = 0; t < kBlockGemmBlockThreads; ++t)
            accumulateBlockGemmTiles(tiles, blockGemmDepth(p.k, k0), t % kBlockGemmThreads, t / kBlockGemmThreads,
                                     threadAcc[t]);
        }
        for (int t = 0; t < kBlockGemmBlockThreads; ++t)
          for (int i = 0; i < kBlockGemmPerThread; ++i)
            for (int j = 0; j < kBlockGemmPerThread; ++j) {
              const int64_t row = m0 + t / kBlockGemmThreads + i * kBlockGemmThreads;
              const int64_t col = n0 + t % kBlockGemmThreads + j * kBlockGemmThreads;
              if (row < p.m && col < p.n) {
                writesTwice += !std::isnan(y[row * p.n + col]);
                y[row * p.n + col] = threadAcc[t][i][j];
              }
            }
      }
  return y;
}

struct Case {
  const char *name;
  int64_t m, n, k;
  bool transposeB;
  std::array<int64_t, 2> xBlock, wBlock;
  Fp8Format xFormat, wFormat;
  BlockScale kind;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

/// Each case's operands (seeded), x [m, k] and w [k, n] or [n, k].
class BlockGemmTilesTest : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override {
    x = tec::testing::blockScaledOperand(c.m, c.k, c.xBlock, c.xFormat, c.kind, rng);
    w = tec::testing::blockScaledOperand(c.transposeB ? c.n : c.k, wCols, c.wBlock, c.wFormat, c.kind, rng);
  }
  const Case c = GetParam();
  const int64_t wCols = c.transposeB ? c.k : c.n;
  std::mt19937 rng{7};
  tec::testing::BlockScaledOperand x, w;
};

TEST_P(BlockGemmTilesTest, EqualTheWidenedOperandsSummedInAscendingK) {
  const BlockGemmProblem p{blockScaled(x.codes.data(), x.scaleInv.data(), c.k, c.xBlock[0], c.xBlock[1], c.xFormat),
                           blockScaled(w.codes.data(), w.scaleInv.data(), wCols, c.wBlock[0], c.wBlock[1], c.wFormat),
                           c.transposeB, c.m, c.n, c.k};
  int writesTwice = 0;
  const std::vector<float> y = runTiles(p, writesTwice);
  EXPECT_EQ(writesTwice, 0);
  const std::vector<float> expected = tec::testing::blockGemmReference(x.widened, w.widened, c.m, c.n, c.k, c.transposeB);
  int64_t mismatches = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (std::memcmp(&y[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 5)
      ADD_FAILURE() << "y[" << i / c.n << ", " << i % c.n << "] = " << y[i] << ", expected " << expected[i];
  EXPECT_EQ(mismatches, 0);
}

// The cpu emulation's GEMM (kernels/cpu's blockScaledGemm, the GPU kernel's twin): the same sums, then the bias
// and the activation, at one thread and at two.
TEST_P(BlockGemmTilesTest, TheCpuTwinSumsAlike) {
  std::vector<float> bias(c.n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float &b : bias)
    b = normal(rng);
  std::vector<float> expected = tec::testing::blockGemmReference(x.widened, w.widened, c.m, c.n, c.k, c.transposeB);
  for (size_t i = 0; i < expected.size(); ++i)
    expected[i] = applyEpilogue(expected[i] + bias[i % c.n], Epilogue::Relu);
  for (int threads : {1, 2}) {
    cpu::setThreads(threads);
    std::vector<float> y(c.m * c.n, NAN), scratch(cpu::blockScaledGemmScratch(c.m, c.n, c.k));
    cpu::blockScaledGemm({x.codes.data(), x.scaleInv.data(), c.xBlock[0], c.xBlock[1], c.xFormat},
                         {w.codes.data(), w.scaleInv.data(), c.wBlock[0], c.wBlock[1], c.wFormat}, c.transposeB,
                         bias.data(), y.data(), c.m, c.n, c.k, Epilogue::Relu, scratch.data());
    EXPECT_EQ(std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)), 0) << threads << " thread(s)";
  }
  cpu::setThreads(1);
}

// Block scaling's 1x128 x 128x128 (transposed weight, partial blocks and tiles everywhere), its wgrad
// (1x128 x 128x1 of a [K, N] gradient), MXFP8 1x32 x 32x1 into E5M2, a K shorter than one K step, one element,
// and a K longer than the cpu twin's K blocks (its sums continued from the stored ones).
INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockGemmTilesTest,
    ::testing::Values(
        Case{"block_forward", 130, 200, 300, true, {1, 128}, {128, 128}, Fp8Format::E4M3, Fp8Format::E4M3, BlockScale::Pow2},
        Case{"block_wgrad", 70, 96, 129, false, {1, 128}, {128, 1}, Fp8Format::E4M3, Fp8Format::E4M3, BlockScale::F32},
        Case{"mxfp8_e5m2", 33, 40, 96, false, {1, 32}, {32, 1}, Fp8Format::E4M3, Fp8Format::E5M2, BlockScale::E8M0},
        Case{"short_k", 65, 65, 7, true, {1, 32}, {1, 32}, Fp8Format::E4M3, Fp8Format::E4M3, BlockScale::E8M0},
        Case{"one_element", 1, 1, 1, true, {1, 128}, {128, 128}, Fp8Format::E4M3, Fp8Format::E4M3, BlockScale::Pow2},
        Case{"long_k", 9, 33, 4200, false, {1, 128}, {128, 1}, Fp8Format::E4M3, Fp8Format::E5M2, BlockScale::Pow2}),
    [](const ::testing::TestParamInfo<Case> &info) { return std::string(info.param.name); });

} // namespace
