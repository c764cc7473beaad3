// tec's block-scaled FP8 GEMM (Fp8Kernels.h): each operand widened by its blocks' scale_inv as a tile is
// loaded, then an FP32 multiply-accumulate over K in ascending order (BlockGemmTiles.h, tested on the CPU).
// The fallback where cuBLASLt's block scale modes do not run a GEMM (CUDA cores only); and the move of
// block scales into cuBLASLt's layout where they do.
#include "kernels/cuda/BlockGemmTiles.h"
#include "kernels/cuda/Common.cuh"
#include "kernels/cuda/Fp8Kernels.h"

namespace tec::kernels::cuda {

namespace {

/// One 64x64 tile of y = act(x · w + bias) per block (N tiles grid-strided on y).
__global__ void fp8BlockGemmKernel(BlockGemmProblem p, ConstRef bias, Ref y, Epilogue epilogue) {
  __shared__ BlockGemmTiles tiles;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m0 = int64_t(blockIdx.x) * kBlockGemmTile, nTiles = (p.n + kBlockGemmTile - 1) / kBlockGemmTile;
  for (int64_t nTile = blockIdx.y; nTile < nTiles; nTile += gridDim.y) {
    const int64_t n0 = nTile * kBlockGemmTile;
    float acc[kBlockGemmPerThread][kBlockGemmPerThread] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += kBlockGemmTileK) {
      loadBlockGemmTiles(p, m0, n0, k0, ty * kBlockGemmThreads + tx, tiles);
      __syncthreads();
      accumulateBlockGemmTiles(tiles, blockGemmDepth(p.k, k0), tx, ty, acc);
      __syncthreads(); // the tiles are the next K step's
    }
#pragma unroll
    for (int i = 0; i < kBlockGemmPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kBlockGemmPerThread; ++j) {
        const int64_t row = m0 + ty + i * kBlockGemmThreads, col = n0 + tx + j * kBlockGemmThreads;
        if (row < p.m && col < p.n)
          store(y, row * p.n + col, applyEpilogue(bias.data ? acc[i][j] + load(bias, col) : acc[i][j], epilogue));
      }
  }
}

__global__ void toCublasBlockScalesKernel(const float *scaleInv, float *out, GemmScaling scaling, int64_t rows,
                                          int64_t kBlocks) {
  TEC_GRID_LOOP(i, rows * kBlocks) {
    out[cublasScaleIndex(scaling, i / kBlocks, i % kBlocks, rows, kBlocks)] = scaleInv[i];
  }
}

} // namespace

void toCublasBlockScales(const float *scaleInv, float *out, GemmScaling scaling, int64_t rows, int64_t kBlocks,
                         void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  cudaMemsetAsync(out, 0, cublasScaleCount(scaling, rows, kBlocks) * sizeof(float), s);
  if (rows * kBlocks)
    toCublasBlockScalesKernel<<<blocksFor(rows * kBlocks), kThreads, 0, s>>>(scaleInv, out, scaling, rows, kBlocks);
}

void fp8BlockGemm(const uint8_t *x, const float *xScaleInv, int64_t xBlockRows, int64_t xBlockCols, Fp8Format xFormat,
                  const uint8_t *w, const float *wScaleInv, int64_t wBlockRows, int64_t wBlockCols, Fp8Format wFormat,
                  bool transposeB, ConstRef bias, Ref y, int64_t m, int64_t n, int64_t k, Epilogue epilogue,
                  void *stream) {
  if (m == 0 || n == 0)
    return;
  const BlockGemmProblem p{blockScaled(x, xScaleInv, k, xBlockRows, xBlockCols, xFormat),
                           blockScaled(w, wScaleInv, transposeB ? k : n, wBlockRows, wBlockCols, wFormat), transposeB,
                           m, n, k};
  const TileGrid grid = blockGemmGrid(m, n);
  fp8BlockGemmKernel<<<dim3(grid.x, grid.y), dim3(kBlockGemmThreads, kBlockGemmThreads), 0,
                       static_cast<cudaStream_t>(stream)>>>(p, bias, y, epilogue);
}

} // namespace tec::kernels::cuda
