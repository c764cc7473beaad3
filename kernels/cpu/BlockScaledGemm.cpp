// The CPU twin of kernels/cuda's block-scaled FP8 GEMM: the same sums in the same order (fused multiply-adds
// in ascending k), so that the cpu emulation of Float8BlockScaling and MXFP8 equals the GPU bit for bit.
// Tiles of 8 x 32 outputs accumulate in registers while k advances; each output is one thread's, so the
// thread count changes nothing.
#include "kernels/cpu/Clones.h"
#include "kernels/cpu/CpuKernels.h"
#include "support/Activations.h"

#include <algorithm>
#include <cmath>

namespace tec::kernels::cpu {

namespace {

constexpr int64_t kTileRows = 8, kTileCols = 32;

int64_t paddedColumns(int64_t n) { return (n + kTileCols - 1) / kTileCols * kTileCols; }
int64_t paddedRows(int64_t m) { return (m + kTileRows - 1) / kTileRows * kTileRows; }

/// w widened in panels of 32 columns, each [k, 32] and contiguous (zeros past n), so that the GEMM reads a
/// panel as one stream; read from [k, n] or, where transposed, [n, k], in 32 x 32 tiles.
void widenWeight(const BlockScaledOperand &w, bool transposed, float *out, int64_t n, int64_t k) {
  const int64_t cols = transposed ? k : n;
  const int64_t blocksPerRow = (cols + w.blockCols - 1) / w.blockCols;
  constexpr int64_t kTile = kTileCols;
  const int64_t kTiles = (k + kTile - 1) / kTile;
  parallelFor(kTiles, std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(kTile * n, 1)),
              [&](int64_t begin, int64_t end) {
                // A tile's scale indices, as block rows and block columns of w's own [rows, cols] (no division
                // per element).
                int64_t rowBlock[kTile], colBlock[kTile];
                for (int64_t i0 = begin * kTile; i0 < std::min(k, end * kTile); i0 += kTile) {
                  const int64_t i1 = std::min(k, i0 + kTile);
                  for (int64_t c0 = 0; c0 < n; c0 += kTile) {
                    const int64_t c1 = std::min(n, c0 + kTile);
                    const int64_t r0 = transposed ? c0 : i0, r1 = transposed ? c1 : i1;
                    const int64_t q0 = transposed ? i0 : c0, q1 = transposed ? i1 : c1;
                    for (int64_t r = r0; r < r1; ++r)
                      rowBlock[r - r0] = (r / w.blockRows) * blocksPerRow;
                    for (int64_t q = q0; q < q1; ++q)
                      colBlock[q - q0] = q / w.blockCols;
                    float *panel = out + c0 * k; // kTile == kTileCols: one panel
                    for (int64_t r = r0; r < r1; ++r)
                      for (int64_t q = q0; q < q1; ++q) {
                        const float v = fp8ToFloatBranchless(w.codes[r * cols + q], w.format) *
                                        w.scaleInv[rowBlock[r - r0] + colBlock[q - q0]];
                        const int64_t i = transposed ? q : r, c = transposed ? r : q;
                        panel[i * kTileCols + c - c0] = v;
                      }
                    for (int64_t i = i0; i < i1; ++i)
                      std::fill(panel + i * kTileCols + (c1 - c0), panel + (i + 1) * kTileCols, 0.0f);
                  }
                }
              });
}

/// x widened in tiles of 8 rows, each [k, 8] and contiguous (zero rows past m), the GEMM's other stream.
void widenInput(const BlockScaledOperand &x, float *out, int64_t m, int64_t k) {
  const int64_t blocksPerRow = (k + x.blockCols - 1) / x.blockCols, tiles = paddedRows(m) / kTileRows;
  parallelFor(tiles, std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(kTileRows * k, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t tile = begin; tile < end; ++tile) {
                  float *packed = out + tile * k * kTileRows;
                  for (int64_t t = 0; t < kTileRows; ++t) {
                    const int64_t r = tile * kTileRows + t;
                    if (r >= m) {
                      for (int64_t i = 0; i < k; ++i)
                        packed[i * kTileRows + t] = 0.0f;
                      continue;
                    }
                    const float *s = x.scaleInv + (r / x.blockRows) * blocksPerRow;
                    for (int64_t c0 = 0, block = 0; c0 < k; c0 += x.blockCols, ++block)
                      for (int64_t i = c0; i < std::min(k, c0 + x.blockCols); ++i)
                        packed[i * kTileRows + t] = fp8ToFloatBranchless(x.codes[r * k + i], x.format) * s[block];
                  }
                }
              });
}

/// Rows [r0, r1) of y (f32) += x · w over k in [k0, k1), in 8 x 32 tiles, each output's products by fused
/// multiply-adds in ascending k, continuing from y (zero where k0 is 0): a chain cut between K blocks and
/// picked up from the stored f32 sums the same, so that the K blocks keep the weight panel in cache.
TEC_CPU_CLONES void accumulateRows(const float *x, const float *w, float *y, int64_t r0, int64_t r1, int64_t n,
                                   int64_t k, int64_t k0, int64_t k1) {
  const int64_t padded = paddedColumns(n);
  for (int64_t c0 = 0; c0 < padded; c0 += kTileCols) {
    const int64_t cols = std::min(kTileCols, n - c0);
    for (int64_t r = r0; r < r1; r += kTileRows) {
      const int64_t rows = std::min(kTileRows, r1 - r);
      float acc[kTileRows][kTileCols] = {};
      if (k0 > 0)
        for (int64_t t = 0; t < rows; ++t)
          std::copy(y + (r + t) * n + c0, y + (r + t) * n + c0 + cols, acc[t]);
      for (int64_t i = k0; i < k1; ++i) {
        const float *wRow = w + c0 * k + i * kTileCols; // panel c0 / 32, row i
        const float *xRow = x + r * k + i * kTileRows; // tile r / 8, row i
        for (int64_t t = 0; t < kTileRows; ++t) {
          const float a = xRow[t];
          for (int64_t c = 0; c < kTileCols; ++c)
            acc[t][c] = std::fma(a, wRow[c], acc[t][c]);
        }
      }
      for (int64_t t = 0; t < rows; ++t)
        std::copy(acc[t], acc[t] + cols, y + (r + t) * n + c0);
    }
  }
}

TEC_CPU_CLONES void biasAndActivation(float *y, const float *bias, int64_t r0, int64_t r1, int64_t n, Epilogue epilogue) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < n; ++c)
      y[r * n + c] = applyEpilogue(bias ? y[r * n + c] + bias[c] : y[r * n + c], epilogue);
}

} // namespace

int64_t blockScaledGemmScratch(int64_t m, int64_t n, int64_t k) { return paddedRows(m) * k + k * paddedColumns(n); }

void blockScaledGemm(const BlockScaledOperand &x, const BlockScaledOperand &w, bool transposeB, const float *bias,
                     float *y, int64_t m, int64_t n, int64_t k, Epilogue epilogue, float *scratch) {
  float *xWide = scratch, *wWide = scratch + paddedRows(m) * k;
  widenInput(x, xWide, m, k);
  widenWeight(w, transposeB, wWide, n, k);
  // Each thread a band of rows (whole tiles); within it K in blocks of 4096 (a weight panel, 4096 x 32 floats,
  // stays in L2 while the band's tiles stream it).
  constexpr int64_t kBlockK = 4096, kBandRows = 8 * kTileRows;
  const int64_t bands = (m + kBandRows - 1) / kBandRows;
  const int64_t work = std::max<int64_t>(1, k * n * kBandRows);
  parallelFor(bands, std::max<int64_t>(1, kParallelThreshold / work), [&](int64_t begin, int64_t end) {
    for (int64_t band = begin; band < end; ++band) {
      const int64_t r0 = band * kBandRows, r1 = std::min(m, r0 + kBandRows);
      for (int64_t k0 = 0; k0 < k; k0 += kBlockK)
        accumulateRows(xWide, wWide, y, r0, r1, n, k, k0, std::min(k, k0 + kBlockK));
      if (k == 0)
        std::fill(y + r0 * n, y + r1 * n, 0.0f);
      biasAndActivation(y, bias, r0, r1, n, epilogue);
    }
  });
}

} // namespace tec::kernels::cpu
