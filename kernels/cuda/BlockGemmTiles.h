// The tile steps of tec's block-scaled FP8 GEMM (kernels/cuda/Fp8BlockGemm.cu), as host/device functions:
// the kernel runs them between barriers, and tests/unit runs them thread by thread on the CPU, so that the
// kernel's indexing (blocks, partial tiles, transposed weights) and its summation order are tested here.
#ifndef TEC_KERNELS_CUDA_BLOCKGEMMTILES_H
#define TEC_KERNELS_CUDA_BLOCKGEMMTILES_H

#include "kernels/cuda/LaunchShapes.h"
#include "support/Fp8.h"

#include <cmath>
#include <cstdint>

namespace tec::kernels::cuda {

/// An FP8 operand [rows, cols] (row-major) with one scale_inv per block of blockRows x blockCols.
struct BlockScaled {
  const uint8_t *codes;
  const float *scaleInv;
  int64_t cols, blockRows, blockCols, blocksPerRow;
  Fp8Format format;
  /// The value kernels/cpu's dequantizeBlocks gives element (r, c).
  TEC_HOST_DEVICE float at(int64_t r, int64_t c) const {
    return fp8ToFloat(codes[r * cols + c], format) * scaleInv[(r / blockRows) * blocksPerRow + c / blockCols];
  }
};

inline BlockScaled blockScaled(const uint8_t *codes, const float *scaleInv, int64_t cols, int64_t blockRows,
                               int64_t blockCols, Fp8Format format) {
  return {codes, scaleInv, cols, blockRows, blockCols, (cols + blockCols - 1) / blockCols, format};
}

/// y[m, n] = x[m, k] · w, w [k, n] or [n, k] where transposeB.
struct BlockGemmProblem {
  BlockScaled x, w;
  bool transposeB;
  int64_t m, n, k;
};

inline constexpr int kBlockGemmTileK = 16, kBlockGemmPerThread = kBlockGemmTile / kBlockGemmThreads,
                     kBlockGemmBlockThreads = kBlockGemmThreads * kBlockGemmThreads;

/// One K step's widened tiles, K-major; rows padded by one float so that the column-wise stores of a
/// tile's transpose fall on distinct shared-memory banks.
struct BlockGemmTiles {
  float x[kBlockGemmTileK][kBlockGemmTile + 1];
  float w[kBlockGemmTileK][kBlockGemmTile + 1];
};

/// How many of the K step at k0 are inside K (the last step may be partial).
TEC_HOST_DEVICE int blockGemmDepth(int64_t k, int64_t k0) {
  return k - k0 < kBlockGemmTileK ? static_cast<int>(k - k0) : kBlockGemmTileK;
}

/// Thread t's share of loading the K step at k0 for the output tile at (m0, n0): zeros outside the
/// operands. Each operand is read along its rows (K for x and a transposed w, N for a [k, n] w).
TEC_HOST_DEVICE void loadBlockGemmTiles(const BlockGemmProblem &p, int64_t m0, int64_t n0, int64_t k0, int t,
                                        BlockGemmTiles &tiles) {
  const int depth = blockGemmDepth(p.k, k0);
  for (int i = t; i < kBlockGemmTile * kBlockGemmTileK; i += kBlockGemmBlockThreads) {
    const int r = i / kBlockGemmTileK, d = i % kBlockGemmTileK;
    tiles.x[d][r] = m0 + r < p.m && d < depth ? p.x.at(m0 + r, k0 + d) : 0.0f;
  }
  for (int i = t; i < kBlockGemmTile * kBlockGemmTileK; i += kBlockGemmBlockThreads) {
    const int c = p.transposeB ? i / kBlockGemmTileK : i % kBlockGemmTile;
    const int d = p.transposeB ? i % kBlockGemmTileK : i / kBlockGemmTile;
    tiles.w[d][c] = n0 + c < p.n && d < depth ? (p.transposeB ? p.w.at(n0 + c, k0 + d) : p.w.at(k0 + d, n0 + c))
                                               : 0.0f;
  }
}

/// Thread (tx, ty)'s outputs (rows ty + 16i, columns tx + 16j of the tile) += this K step, one fused
/// multiply-add per k in ascending order: y[r, c] is fmaf(x[r, K-1], w[K-1, c], ... fmaf(x[r, 0], w[0, c], 0)).
TEC_HOST_DEVICE void accumulateBlockGemmTiles(const BlockGemmTiles &tiles, int depth, int tx, int ty,
                                              float (&acc)[kBlockGemmPerThread][kBlockGemmPerThread]) {
  for (int d = 0; d < depth; ++d) {
    float a[kBlockGemmPerThread], b[kBlockGemmPerThread];
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int i = 0; i < kBlockGemmPerThread; ++i)
      a[i] = tiles.x[d][ty + i * kBlockGemmThreads], b[i] = tiles.w[d][tx + i * kBlockGemmThreads];
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int i = 0; i < kBlockGemmPerThread; ++i)
      for (int j = 0; j < kBlockGemmPerThread; ++j)
        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

} // namespace tec::kernels::cuda

#endif
