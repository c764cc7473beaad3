#include "kernels/cuda/Fp8Kernels.h"
#include "kernels/cuda/BlockSum.cuh"
#include "kernels/cuda/LaunchShapes.h"

#include "support/Activations.h"
#include "support/Half.h"

#include <cfloat>
#include <cuda_runtime.h>

namespace tec::kernels::cuda {

namespace {

constexpr int kThreads = 256;

/// Element i of an f32, bf16 or f16 tensor as f32 (exact).
__device__ __forceinline__ float loadWide(const void *x, ElementType type, int64_t i) {
  switch (type) {
  case ElementType::BF16: return bf16ToFloat(static_cast<const uint16_t *>(x)[i]);
  case ElementType::F16: return f16ToFloat(static_cast<const uint16_t *>(x)[i]);
  default: return static_cast<const float *>(x)[i];
  }
}

int blocksFor(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

/// One value's FP8 health: saturated (finite but beyond the format's range) or flushed (nonzero to 0).
__device__ void countHealth(float scaled, uint8_t q, Fp8Format format, unsigned long long &saturated,
                            unsigned long long &flushed) {
  saturated += fabsf(scaled) > fp8Max(format) && isfinite(scaled);
  flushed += scaled != 0.0f && (q & 0x7F) == 0;
}

/// The end of a quantize block: its health counts and its threads' max |x| into the global ones. `t` is
/// the thread's index in the block, `shared` holds one float per thread; every thread must call this.
__device__ void finishQuantizeBlock(float local, unsigned long long saturated, unsigned long long flushed, float *amax,
                                    unsigned long long *counts, float *shared, int t, int threads) {
  if (counts && (saturated || flushed)) {
    atomicAdd(&counts[0], saturated);
    atomicAdd(&counts[1], flushed);
  }
  if (!amax)
    return;
  shared[t] = local;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (t < stride)
      shared[t] = maxAbsNanWins(shared[t], shared[t + stride]);
    __syncthreads();
  }
  if (t == 0)
    atomicMaxAbs(amax, shared[0]);
}

/// Current scaling taken into its quantize: every block computes the scale from this step's amax, the first
/// writes it and its inverse (the current_scaling kernel's values, bit for bit).
struct CurrentScale {
  const float *amax = nullptr;
  float fp8Max = 0.0f, epsilon = 0.0f;
  bool pow2 = false;
  float *scale = nullptr, *scaleInv = nullptr;
};

__device__ float quantizeScale(const float *scale, const CurrentScale &current) {
  if (!current.amax)
    return *scale;
  const float s = scaleFromAmax(*current.amax, current.fp8Max, current.pow2, current.epsilon);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *current.scale = s, *current.scaleInv = 1.0f / s;
  return s;
}

__global__ void quantizeAmaxKernel(const void *x, ElementType xType, const float *scale, uint8_t *y, float *amax,
                                   int64_t n, Fp8Format format, unsigned long long *counts, Epilogue activation,
                                   CurrentScale current) {
  __shared__ float blockMax[kThreads];
  float local = 0.0f;
  const float s = quantizeScale(scale, current);
  unsigned long long saturated = 0, flushed = 0;
  gridStrideByFour(
      n, [&](int64_t i) { return loadWide(x, xType, i); },
      [&](int64_t i, float loaded) {
        const float v = applyEpilogue(loaded, activation), scaled = v * s;
        const uint8_t q = floatToFp8(scaled, format);
        y[i] = q;
        local = maxAbsNanWins(local, v);
        if (counts)
          countHealth(scaled, q, format, saturated, flushed);
      });
  finishQuantizeBlock(local, saturated, flushed, amax, counts, blockMax, threadIdx.x, blockDim.x);
}

constexpr int kTileRows = 8;

/// 32x32 tiles: read along x's rows, write along y's rows (both coalesced). Row tiles on blockIdx.x (the
/// long dimension: tokens), column tiles from blockIdx.y by a grid-stride loop (transposeGrid).
__global__ void quantizeTransposedKernel(const void *x, ElementType xType, int64_t rows, int64_t cols,
                                         const float *scale, uint8_t *y, float *amax, Fp8Format format,
                                         unsigned long long *counts, CurrentScale current) {
  __shared__ float tile[kTile][kTile + 1];
  __shared__ float blockMax[kTile * kTileRows];
  const int64_t r0 = int64_t(blockIdx.x) * kTile;
  const float s = quantizeScale(scale, current);
  float local = 0.0f;
  unsigned long long saturated = 0, flushed = 0;
  for (int64_t c0 = int64_t(blockIdx.y) * kTile; c0 < cols; c0 += int64_t(gridDim.y) * kTile) {
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      float v = 0.0f;
      if (r < rows && c < cols) {
        v = loadWide(x, xType, r * cols + c);
        local = maxAbsNanWins(local, v);
      }
      tile[i][threadIdx.x] = v;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x; // y[c, r]
      if (c < cols && r < rows) {
        const float scaled = tile[threadIdx.x][i] * s;
        const uint8_t q = floatToFp8(scaled, format);
        y[c * rows + r] = q;
        if (counts)
          countHealth(scaled, q, format, saturated, flushed);
      }
    }
    __syncthreads();
  }
  finishQuantizeBlock(local, saturated, flushed, amax, counts, blockMax, threadIdx.y * kTile + threadIdx.x,
                      kTile * kTileRows);
}

/// One block per row: the LayerNorm of kernels/cuda's layerNormKernel (mean and variance in double), each
/// normalized value quantized as it is made, and the row's max |y| into *amax.
__global__ void layerNormQuantizeKernel(const void *x, ElementType xType, const void *weight, const void *bias,
                                        ElementType affineType, const float *scale, uint8_t *y, float *amax,
                                        float *mean, float *rstd, int64_t cols, float epsilon, Fp8Format format,
                                        unsigned long long *counts) {
  __shared__ double sums[kThreads];
  __shared__ float blockMax[kThreads];
  const int64_t base = blockIdx.x * cols;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    sum += loadWide(x, xType, base + j);
  const double mu = blockSum(sum, sums) / cols;
  double sq = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double d = loadWide(x, xType, base + j) - mu;
    sq += d * d;
  }
  const float inv = static_cast<float>(1.0 / sqrt(blockSum(sq, sums) / cols + epsilon)), m = static_cast<float>(mu);
  const float s = *scale;
  float local = 0.0f;
  unsigned long long saturated = 0, flushed = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = (loadWide(x, xType, base + j) - m) * inv * loadWide(weight, affineType, j) +
                    (bias ? loadWide(bias, affineType, j) : 0.0f);
    const float scaled = v * s;
    const uint8_t q = floatToFp8(scaled, format);
    y[base + j] = q;
    local = maxAbsNanWins(local, v);
    if (counts)
      countHealth(scaled, q, format, saturated, flushed);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = inv;
  }
  finishQuantizeBlock(local, saturated, flushed, amax, counts, blockMax, threadIdx.x, blockDim.x);
}

/// cast_fp8_dbias, pass 1: a thread per column over a chunk of kBiasGradRows rows (reads coalesced along
/// the row), quantizing each value, its column's partial sum in f64 into partials[chunk, column].
__global__ void quantizeBiasGradKernel(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *scale,
                                       uint8_t *y, float *amax, double *partials, Fp8Format format,
                                       unsigned long long *counts) {
  __shared__ float blockMax[kThreads];
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, r0 = int64_t(blockIdx.y) * kBiasGradRows;
  const float s = *scale;
  float local = 0.0f;
  unsigned long long saturated = 0, flushed = 0;
  if (c < cols) {
    double sum = 0;
    for (int64_t r = r0; r < rows && r < r0 + kBiasGradRows; ++r) {
      const float v = loadWide(x, xType, r * cols + c), scaled = v * s;
      const uint8_t q = floatToFp8(scaled, format);
      y[r * cols + c] = q;
      local = maxAbsNanWins(local, v);
      sum += v;
      if (counts)
        countHealth(scaled, q, format, saturated, flushed);
    }
    partials[blockIdx.y * cols + c] = sum;
  }
  finishQuantizeBlock(local, saturated, flushed, amax, counts, blockMax, threadIdx.x, blockDim.x);
}

/// Pass 2: each column's partial sums, in chunk order.
__global__ void sumBiasGradKernel(const double *partials, int64_t chunks, int64_t cols, float *dbias) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols)
    return;
  double sum = 0;
  for (int64_t k = 0; k < chunks; ++k)
    sum += partials[k * cols + c];
  dbias[c] = static_cast<float>(sum);
}

__global__ void dequantizeKernel(const uint8_t *x, const float *scaleInv, float *y, int64_t n, Fp8Format format) {
  const float s = *scaleInv;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = fp8ToFloat(x[i], format) * s;
}

__global__ void quantizeBlocksKernel(const void *x, ElementType xType, uint8_t *y, float *scaleInv, int64_t rows,
                                     int64_t cols, int64_t blockRows, int64_t blockCols, bool transposed,
                                     Fp8Format format, BlockScale kind, float epsilon) {
  __shared__ float shared[kThreads];
  __shared__ float blockScale;
  const int64_t blocksPerBand = (cols + blockCols - 1) / blockCols, total = (rows + blockRows - 1) / blockRows * blocksPerBand;
  const int t = threadIdx.x;
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    const int64_t r0 = b / blocksPerBand * blockRows, c0 = b % blocksPerBand * blockCols;
    const int64_t h = min(blockRows, rows - r0), w = min(blockCols, cols - c0), n = h * w;
    auto source = [&](int64_t i) {
      const int64_t r = r0 + i / w, c = c0 + i % w;
      return transposed ? c * rows + r : r * cols + c;
    };
    float local = 0.0f;
    for (int64_t i = t; i < n; i += blockDim.x)
      local = maxAbsNanWins(local, loadWide(x, xType, source(i)));
    shared[t] = local;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (t < stride)
        shared[t] = maxAbsNanWins(shared[t], shared[t + stride]);
      __syncthreads();
    }
    if (t == 0) {
      const BlockScales s = blockScales(shared[0], fp8Max(format), kind, epsilon);
      blockScale = s.scale;
      scaleInv[b] = s.scaleInv;
    }
    __syncthreads();
    for (int64_t i = t; i < n; i += blockDim.x)
      y[(r0 + i / w) * cols + c0 + i % w] = floatToFp8Branchless(loadWide(x, xType, source(i)) * blockScale, format);
    __syncthreads(); // the shared values are the next block's
  }
}

__global__ void currentScalingKernel(const float *amax, float fp8Max, bool pow2, float epsilon, float *scale,
                                     float *scaleInv) {
  const float s = scaleFromAmax(*amax, fp8Max, pow2, epsilon);
  *scale = s;
  *scaleInv = 1.0f / s;
}

/// One block: reduce the history with this step's amax (max or most recent), compute the scale, roll
/// (torch.roll(-1), slot 0 = 0). As Transformer Engine's bulk update: a step whose amax is 0 (the tensor
/// saw nothing) leaves the history as it is and keeps the scale.
__global__ void delayedScalingKernel(const float *history, int64_t length, const float *scale, const float *amax,
                                     float fp8Max, int64_t margin, bool mostRecent, float *newHistory, float *newScale,
                                     float *newScaleInv) {
  __shared__ float reduced;
  const float current = *amax;
  const bool roll = current != 0.0f;
  if (threadIdx.x == 0) {
    float a = current;
    if (!mostRecent && roll)
      for (int64_t i = 1; i < length; ++i)
        a = maxAbsNanWins(a, history[i]);
    reduced = a;
  }
  __syncthreads();
  // Every thread reads the old history before any writes the new one (they may alias).
  float staged[4];
  int count = 0;
  for (int64_t i = threadIdx.x; i < length && count < 4; i += blockDim.x, ++count)
    staged[count] = !roll ? history[i] : i == 0 ? 0.0f : (i + 1) % length == 0 ? current : history[i + 1];
  __syncthreads();
  count = 0;
  for (int64_t i = threadIdx.x; i < length && count < 4; i += blockDim.x, ++count)
    newHistory[i] = staged[count];
  if (threadIdx.x == 0) {
    const float s = delayedScale(reduced, *scale, fp8Max, static_cast<int>(margin));
    *newScale = s;
    *newScaleInv = 1.0f / s;
  }
}

} // namespace

void quantizeWithAmax(const void *x, ElementType xType, const float *scale, uint8_t *y, float *amax, int64_t n,
                      Fp8Format format, void *stream, unsigned long long *counts, Epilogue activation) {
  if (n)
    quantizeAmaxKernel<<<atomicGridBlocks(n, kThreads, currentMultiprocessors()), kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(x, xType, scale, y, amax, n, format, counts, activation,
                                                              CurrentScale{});
}

void quantizeCurrentScaled(const void *x, ElementType xType, const float *amax, float fp8Max, bool pow2, float epsilon,
                           float *scale, float *scaleInv, uint8_t *y, int64_t n, Fp8Format format, void *stream,
                           unsigned long long *counts) {
  // atomicGridBlocks gives at least one block: the scale is written even for an empty tensor, as
  // current_scaling writes it.
  quantizeAmaxKernel<<<atomicGridBlocks(n, kThreads, currentMultiprocessors()), kThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(x, xType, nullptr, y, nullptr, n, format, counts,
                                                            Epilogue::None,
                                                            CurrentScale{amax, fp8Max, epsilon, pow2, scale, scaleInv});
}

void quantizeWithBiasGrad(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *scale, uint8_t *y,
                          float *amax, float *dbias, double *partials, Fp8Format format, void *stream,
                          unsigned long long *counts) {
  if (rows * cols == 0)
    return;
  const int64_t chunks = biasGradChunks(rows);
  const auto s = static_cast<cudaStream_t>(stream);
  quantizeBiasGradKernel<<<dim3(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(chunks)),
                           kThreads, 0, s>>>(x, xType, rows, cols, scale, y, amax, partials, format, counts);
  sumBiasGradKernel<<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, s>>>(partials, chunks, cols,
                                                                                                  dbias);
}

void layerNormQuantize(const void *x, ElementType xType, const void *weight, const void *bias, ElementType affineType,
                       const float *scale, uint8_t *y, float *amax, float *mean, float *rstd, int64_t rows,
                       int64_t cols, float epsilon, Fp8Format format, void *stream, unsigned long long *counts) {
  if (rows * cols)
    layerNormQuantizeKernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        x, xType, weight, bias, affineType, scale, y, amax, mean, rstd, cols, epsilon, format, counts);
}

void quantizeTransposedWithAmax(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *scale,
                                uint8_t *y, float *amax, Fp8Format format, void *stream, unsigned long long *counts) {
  if (rows == 0 || cols == 0)
    return;
  const TileGrid grid = transposeGrid(rows, cols);
  quantizeTransposedKernel<<<dim3(grid.x, grid.y), dim3(kTile, kTileRows), 0, static_cast<cudaStream_t>(stream)>>>(
      x, xType, rows, cols, scale, y, amax, format, counts, CurrentScale{});
}

void quantizeTransposedCurrentScaled(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *amax,
                                     float fp8Max, bool pow2, float epsilon, float *scale, float *scaleInv, uint8_t *y,
                                     Fp8Format format, void *stream, unsigned long long *counts) {
  if (rows == 0 || cols == 0) // no tile to launch: the scale alone, as current_scaling writes it
    return currentScaling(amax, fp8Max, pow2, epsilon, scale, scaleInv, stream);
  const TileGrid grid = transposeGrid(rows, cols);
  quantizeTransposedKernel<<<dim3(grid.x, grid.y), dim3(kTile, kTileRows), 0, static_cast<cudaStream_t>(stream)>>>(
      x, xType, rows, cols, nullptr, y, nullptr, format, counts,
      CurrentScale{amax, fp8Max, epsilon, pow2, scale, scaleInv});
}

void dequantize(const uint8_t *x, const float *scaleInv, float *y, int64_t n, Fp8Format format, void *stream) {
  if (n)
    dequantizeKernel<<<blocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, scaleInv, y, n, format);
}

void quantizeBlocks(const void *x, ElementType xType, uint8_t *y, float *scaleInv, int64_t rows, int64_t cols,
                    int64_t blockRows, int64_t blockCols, bool transposed, Fp8Format format, BlockScale kind,
                    float epsilon, void *stream) {
  const int64_t total = (rows + blockRows - 1) / blockRows * ((cols + blockCols - 1) / blockCols);
  if (total > 0)
    quantizeBlocksKernel<<<static_cast<int>(std::min<int64_t>(total, 65535)), kThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(x, xType, y, scaleInv, rows, cols, blockRows, blockCols,
                                                                transposed, format, kind, epsilon);
}

void currentScaling(const float *amax, float fp8Max, bool pow2, float epsilon, float *scale, float *scaleInv,
                    void *stream) {
  currentScalingKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(amax, fp8Max, pow2, epsilon, scale, scaleInv);
}

bool delayedScaling(const float *history, int64_t length, const float *scale, const float *amax, float fp8Max,
                    int64_t margin, bool mostRecent, float *newHistory, float *newScale, float *newScaleInv,
                    void *stream) {
  // 1024 threads x 4 slots each (TE's default history is 1024).
  if (length < 1 || length > kMaxHistory)
    return false;
  delayedScalingKernel<<<1, 1024, 0, static_cast<cudaStream_t>(stream)>>>(history, length, scale, amax, fp8Max, margin,
                                                                          mostRecent, newHistory, newScale, newScaleInv);
  return true;
}

} // namespace tec::kernels::cuda
