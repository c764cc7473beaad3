#include "kernels/cuda/Kernels.h"
#include "kernels/cuda/BlockSum.cuh"

#include "support/Cast.h"
#include "support/Fp8.h"
#include "support/Half.h"
#include "support/Scan.h"

#include <cuda_runtime.h>

#include <cfloat>
#include <cstring>
#include <type_traits>

namespace tec::kernels::cuda {

namespace {

constexpr int kThreads = 256;

cudaStream_t asStream(void *stream) { return static_cast<cudaStream_t>(stream); }

int blocksFor(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)));
}

#define TEC_GRID_LOOP(i, n)                                                                                        \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

/// A float operand's element as f32; FP8 operands give their codes' values (FP8 attention scales them).
__device__ float load(ConstRef r, int64_t i) {
  switch (r.type) {
  case ElementType::F16: return f16ToFloat(static_cast<const uint16_t *>(r.data)[i]);
  case ElementType::BF16: return bf16ToFloat(static_cast<const uint16_t *>(r.data)[i]);
  case ElementType::F8E4M3: return fp8ToFloat(static_cast<const uint8_t *>(r.data)[i], Fp8Format::E4M3);
  case ElementType::F8E5M2: return fp8ToFloat(static_cast<const uint8_t *>(r.data)[i], Fp8Format::E5M2);
  default: return static_cast<const float *>(r.data)[i];
  }
}

__device__ void store(Ref r, int64_t i, float v) {
  switch (r.type) {
  case ElementType::F16: static_cast<uint16_t *>(r.data)[i] = floatToF16(v); return;
  case ElementType::BF16: static_cast<uint16_t *>(r.data)[i] = floatToBf16(v); return;
  case ElementType::F8E4M3: static_cast<uint8_t *>(r.data)[i] = floatToFp8(v, Fp8Format::E4M3); return;
  case ElementType::F8E5M2: static_cast<uint8_t *>(r.data)[i] = floatToFp8(v, Fp8Format::E5M2); return;
  default: static_cast<float *>(r.data)[i] = v; return;
  }
}

/// Element offset of linear index `i`: without div/mod where the launch found the operand contiguous.
template <bool Contiguous> __device__ int64_t at(const Extent &extent, const Strided &s, int64_t i) {
  return Contiguous ? s.base + i : offsetOf(extent, s, i);
}

template <bool Contiguous>
__global__ void binaryFloat(BinaryKind kind, ConstRef a, Strided as, ConstRef b, Strided bs, Ref out, Extent extent,
                            int64_t n) {
  TEC_GRID_LOOP(i, n) {
    store(out, i, applyBinary(kind, load(a, at<Contiguous>(extent, as, i)), load(b, at<Contiguous>(extent, bs, i))));
  }
}

template <bool Contiguous, typename T>
__global__ void binaryInt(BinaryKind kind, const T *a, Strided as, const T *b, Strided bs, T *out, Extent extent,
                          int64_t n) {
  TEC_GRID_LOOP(i, n) { out[i] = applyIntBinary(kind, a[at<Contiguous>(extent, as, i)], b[at<Contiguous>(extent, bs, i)]); }
}

template <bool Contiguous, typename T>
__global__ void compareKernel(CompareKind kind, const T *a, Strided as, const T *b, Strided bs, bool *out,
                              Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) { out[i] = applyCompare(kind, a[at<Contiguous>(extent, as, i)], b[at<Contiguous>(extent, bs, i)]); }
}

/// Comparisons of f16/bf16 widen to f32 (exact), so one float instance serves all float types.
template <bool Contiguous>
__global__ void compareFloat(CompareKind kind, ConstRef a, Strided as, ConstRef b, Strided bs, bool *out,
                             Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) {
    out[i] = applyCompare(kind, load(a, at<Contiguous>(extent, as, i)), load(b, at<Contiguous>(extent, bs, i)));
  }
}

__global__ void unaryKernel(UnaryKind kind, ConstRef x, Ref y, int64_t n) {
  TEC_GRID_LOOP(i, n) { store(y, i, applyUnary(kind, load(x, i))); }
}

template <typename T> __global__ void intUnaryKernel(UnaryKind kind, const T *x, T *y, int64_t n) {
  TEC_GRID_LOOP(i, n) { y[i] = applyIntUnary(kind, x[i]); }
}

__global__ void activationGradKernel(ActivationGradKind kind, ConstRef dy, ConstRef x, Ref dx, int64_t n) {
  TEC_GRID_LOOP(i, n) { store(dx, i, applyActivationGrad(kind, load(dy, i), load(x, i))); }
}

template <bool Contiguous, typename T>
__global__ void whereKernel(const bool *cond, Strided cs, const T *x, Strided xs, const T *y, Strided ys, T *out,
                            Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) {
    out[i] = cond[at<Contiguous>(extent, cs, i)] ? x[at<Contiguous>(extent, xs, i)] : y[at<Contiguous>(extent, ys, i)];
  }
}

__global__ void castKernel(const void *x, ElementType from, void *y, ElementType to, int64_t n) {
  TEC_GRID_LOOP(i, n) { castElement(x, from, y, to, i); }
}

template <typename T>
__global__ void stridedCopyKernel(const T *src, Strided s, T *dst, Strided d, Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) { dst[offsetOf(extent, d, i)] = src[offsetOf(extent, s, i)]; }
}

/// y[c, r] = x[r, c] through 32x32 shared-memory tiles, reads and writes coalesced; row tiles on x.
template <typename T> __global__ void transposeKernel(const T *x, int64_t rows, int64_t cols, T *y) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.x) * kTile;
  for (int64_t c0 = int64_t(blockIdx.y) * kTile; c0 < cols; c0 += int64_t(gridDim.y) * kTile) {
    for (int i = threadIdx.y; i < kTile; i += blockDim.y)
      if (r0 + i < rows && c0 + threadIdx.x < cols)
        tile[i][threadIdx.x] = x[(r0 + i) * cols + c0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y)
      if (c0 + i < cols && r0 + threadIdx.x < rows)
        y[(c0 + i) * rows + r0 + threadIdx.x] = tile[threadIdx.x][i];
    __syncthreads();
  }
}

template <typename T, typename Index>
__global__ void gatherKernel(const T *data, int64_t outer, int64_t axisDim, int64_t inner, const Index *indices,
                             int64_t numIndices, T *y, int *error) {
  const int64_t n = outer * numIndices * inner;
  TEC_GRID_LOOP(i, n) {
    const int64_t in = i % inner, j = (i / inner) % numIndices, o = i / (inner * numIndices);
    int64_t index = indices[j];
    if (index < 0)
      index += axisDim;
    if (index < 0 || index >= axisDim) {
      atomicExch(error, 1);
      y[i] = T(0);
      continue;
    }
    y[i] = data[(o * axisDim + index) * inner + in];
  }
}

template <typename T, typename Index>
__global__ void gatherElementsKernel(const T *data, int64_t outer, int64_t axisDim, int64_t inner,
                                     const Index *indices, int64_t picks, T *y, int *error) {
  const int64_t n = outer * picks * inner;
  TEC_GRID_LOOP(i, n) {
    const int64_t in = i % inner, o = i / (inner * picks);
    int64_t index = indices[i];
    if (index < 0)
      index += axisDim;
    if (index < 0 || index >= axisDim) {
      atomicExch(error, 1);
      y[i] = T(0);
      continue;
    }
    y[i] = data[(o * axisDim + index) * inner + in];
  }
}

/// GatherElements' gradient: one thread per output element sums, in index order, the updates picked
/// from it (picks along the axis are few: a class per label).
template <typename Index>
__global__ void scatterAddElementsKernel(ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner,
                                         const Index *indices, int64_t picks, Ref y) {
  const int64_t n = outer * axisDim * inner;
  TEC_GRID_LOOP(i, n) {
    const int64_t in = i % inner, row = (i / inner) % axisDim, o = i / (inner * axisDim);
    float sum = 0.0f;
    for (int64_t j = 0; j < picks; ++j) {
      const int64_t u = (o * picks + j) * inner + in;
      const int64_t index = indices[u] < 0 ? indices[u] + axisDim : indices[u];
      if (index == row)
        sum += load(updates, u);
    }
    store(y, i, sum);
  }
}

/// Gather's gradient (an embedding table's): one block per output row scans the indices a tile at a
/// time and its threads add the matching update rows in index order, so repeated tokens sum the same
/// way every run without atomics.
template <typename Index>
__global__ void scatterAddRowsKernel(ConstRef updates, int64_t axisDim, int64_t inner, const Index *indices,
                                     int64_t picks, Ref y) {
  __shared__ bool match[kThreads];
  const int64_t row = blockIdx.x % axisDim, o = blockIdx.x / axisDim;
  for (int64_t in = threadIdx.x; in < inner; in += blockDim.x)
    store(y, (o * axisDim + row) * inner + in, 0.0f);
  for (int64_t tile = 0; tile < picks; tile += blockDim.x) {
    const int64_t j = tile + threadIdx.x;
    int64_t index = j < picks ? indices[j] : -1;
    if (index < 0 && j < picks)
      index += axisDim;
    match[threadIdx.x] = j < picks && index == row;
    __syncthreads();
    for (int t = 0; t < blockDim.x && tile + t < picks; ++t)
      if (match[t])
        for (int64_t in = threadIdx.x; in < inner; in += blockDim.x) {
          const int64_t out = (o * axisDim + row) * inner + in;
          store(y, out, load(ConstRef(y), out) + load(updates, (o * picks + tile + t) * inner + in));
        }
    __syncthreads();
  }
}

/// Convolutions and pools, one thread per output element of each kernel (direct loops: tec's own kernels,
/// where cuDNN is not used).
__global__ void convKernel(Window w, ConstRef x, ConstRef weight, ConstRef bias, Ref y) {
  const int64_t n = w.batch * w.outChannels * w.outHeight * w.outWidth;
  TEC_GRID_LOOP(i, n) {
    const int64_t ox = i % w.outWidth, oy = (i / w.outWidth) % w.outHeight, m = (i / (w.outWidth * w.outHeight)) % w.outChannels,
                  b = i / (w.outWidth * w.outHeight * w.outChannels);
    const int64_t g = m / w.groupOutChannels();
    float sum = bias.data ? load(bias, m) : 0.0f;
    for (int64_t c = 0; c < w.groupChannels(); ++c)
      for (int64_t ky = 0; ky < w.kernelH; ++ky)
        for (int64_t kx = 0; kx < w.kernelW; ++kx) {
          const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
          if (w.inside(iy, ix))
            sum += load(x, ((b * w.channels + g * w.groupChannels() + c) * w.height + iy) * w.width + ix) *
                   load(weight, ((m * w.groupChannels() + c) * w.kernelH + ky) * w.kernelW + kx);
        }
    store(y, i, sum);
  }
}

/// The output position whose window puts kernel tap k on input coordinate `in`, or -1.
__device__ int64_t windowOrigin(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation, int64_t outSize) {
  const int64_t t = in + pad - k * dilation;
  if (t < 0 || t % stride)
    return -1;
  return t / stride < outSize ? t / stride : -1;
}

__global__ void convInputGradKernel(Window w, ConstRef dy, ConstRef weight, Ref dx) {
  const int64_t n = w.batch * w.channels * w.height * w.width;
  TEC_GRID_LOOP(i, n) {
    const int64_t ix = i % w.width, iy = (i / w.width) % w.height, c = (i / (w.width * w.height)) % w.channels,
                  b = i / (w.width * w.height * w.channels);
    const int64_t g = c / w.groupChannels(), cg = c % w.groupChannels();
    float sum = 0.0f;
    for (int64_t ky = 0; ky < w.kernelH; ++ky) {
      const int64_t oy = windowOrigin(iy, ky, w.strideH, w.padTop, w.dilationH, w.outHeight);
      if (oy < 0)
        continue;
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const int64_t ox = windowOrigin(ix, kx, w.strideW, w.padLeft, w.dilationW, w.outWidth);
        if (ox < 0)
          continue;
        for (int64_t mg = 0; mg < w.groupOutChannels(); ++mg) {
          const int64_t m = g * w.groupOutChannels() + mg;
          sum += load(dy, ((b * w.outChannels + m) * w.outHeight + oy) * w.outWidth + ox) *
                 load(weight, ((m * w.groupChannels() + cg) * w.kernelH + ky) * w.kernelW + kx);
        }
      }
    }
    store(dx, i, sum);
  }
}

/// One thread per weight element sums over the batch and positions in order (deterministic).
__global__ void convWeightGradKernel(Window w, ConstRef dy, ConstRef x, Ref dweight) {
  const int64_t n = w.outChannels * w.groupChannels() * w.kernelH * w.kernelW;
  TEC_GRID_LOOP(i, n) {
    const int64_t kx = i % w.kernelW, ky = (i / w.kernelW) % w.kernelH, cg = (i / (w.kernelW * w.kernelH)) % w.groupChannels(),
                  m = i / (w.kernelW * w.kernelH * w.groupChannels());
    const int64_t c = (m / w.groupOutChannels()) * w.groupChannels() + cg;
    float sum = 0.0f;
    for (int64_t b = 0; b < w.batch; ++b)
      for (int64_t oy = 0; oy < w.outHeight; ++oy)
        for (int64_t ox = 0; ox < w.outWidth; ++ox) {
          const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
          if (w.inside(iy, ix))
            sum += load(dy, ((b * w.outChannels + m) * w.outHeight + oy) * w.outWidth + ox) *
                   load(x, ((b * w.channels + c) * w.height + iy) * w.width + ix);
        }
    store(dweight, i, sum);
  }
}

/// The first maximum of one pool window (as the CPU's), as an input offset within its plane; -1 if empty.
__device__ int64_t windowArgmax(const Window &w, ConstRef x, int64_t plane, int64_t oy, int64_t ox) {
  int64_t best = -1;
  float bestValue = -INFINITY;
  for (int64_t ky = 0; ky < w.kernelH; ++ky)
    for (int64_t kx = 0; kx < w.kernelW; ++kx) {
      const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
      if (!w.inside(iy, ix))
        continue;
      const float v = load(x, plane + iy * w.width + ix);
      if (best < 0 || v > bestValue || (v != v && bestValue == bestValue)) {
        best = iy * w.width + ix;
        bestValue = v;
      }
    }
  return best;
}

__global__ void poolKernel(Window w, bool max, bool countIncludePad, ConstRef x, Ref y) {
  const int64_t n = w.batch * w.channels * w.outHeight * w.outWidth;
  TEC_GRID_LOOP(i, n) {
    const int64_t ox = i % w.outWidth, oy = (i / w.outWidth) % w.outHeight, p = i / (w.outWidth * w.outHeight);
    const int64_t plane = p * w.height * w.width;
    float acc = max ? -INFINITY : 0.0f;
    for (int64_t ky = 0; ky < w.kernelH; ++ky)
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
        if (!w.inside(iy, ix))
          continue;
        const float v = load(x, plane + iy * w.width + ix);
        acc = max ? ((v > acc || v != v) ? v : acc) : acc + v;
      }
    if (!max)
      acc /= static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
    store(y, i, acc);
  }
}

/// One thread per input element gathers from the windows that cover it (no atomics).
__global__ void poolGradKernel(Window w, bool max, bool countIncludePad, ConstRef dy, ConstRef x, Ref dx) {
  const int64_t n = w.batch * w.channels * w.height * w.width;
  TEC_GRID_LOOP(i, n) {
    const int64_t ix = i % w.width, iy = (i / w.width) % w.height, p = i / (w.width * w.height);
    const int64_t plane = p * w.height * w.width;
    float sum = 0.0f;
    for (int64_t ky = 0; ky < w.kernelH; ++ky) {
      const int64_t oy = windowOrigin(iy, ky, w.strideH, w.padTop, w.dilationH, w.outHeight);
      if (oy < 0)
        continue;
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const int64_t ox = windowOrigin(ix, kx, w.strideW, w.padLeft, w.dilationW, w.outWidth);
        if (ox < 0)
          continue;
        const float g = load(dy, (p * w.outHeight + oy) * w.outWidth + ox);
        if (max)
          sum += windowArgmax(w, x, plane, oy, ox) == iy * w.width + ix ? g : 0.0f;
        else
          sum += g / static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
      }
    }
    store(dx, i, sum);
  }
}

template <typename Read>
__global__ void argReduceKernel(bool max, bool last, Read x, int64_t outer, int64_t dim, int64_t inner, int64_t *y) {
  TEC_GRID_LOOP(i, outer * inner) {
    const int64_t base = (i / inner) * dim * inner + i % inner;
    int64_t best = 0;
    for (int64_t j = 1; j < dim; ++j)
      if (argBetter(max, last, x(base + j * inner), x(base + best * inner)))
        best = j;
    y[i] = best;
  }
}

// One thread per line: the lines exporters scan (position ids from masks) are short and many, so a
// scan within a line is not worth its synchronization.
__global__ void cumSumFloatKernel(ConstRef x, Ref y, int64_t lines, int64_t dim, int64_t inner, bool exclusive,
                                  bool reverse) {
  TEC_GRID_LOOP(line, lines) {
    const int64_t start = lineStart(line, dim, inner);
    cumSumLine<float>([&](int64_t j) { return load(x, start + j * inner); },
                      [&](int64_t j, float v) { store(y, start + j * inner, v); }, dim, exclusive, reverse);
  }
}

template <typename T>
__global__ void cumSumIntKernel(const T *x, T *y, int64_t lines, int64_t dim, int64_t inner, bool exclusive,
                                bool reverse) {
  TEC_GRID_LOOP(line, lines) {
    const int64_t start = lineStart(line, dim, inner);
    cumSumLine<int64_t>([&](int64_t j) { return static_cast<int64_t>(x[start + j * inner]); },
                        [&](int64_t j, int64_t v) { y[start + j * inner] = static_cast<T>(v); }, dim, exclusive,
                        reverse);
  }
}

template <typename Index>
__global__ void oneHotKernel(const Index *labels, int64_t n, int64_t depth, float *y, int *error) {
  TEC_GRID_LOOP(i, n * depth) {
    const int64_t row = i / depth, column = i % depth;
    const Index label = labels[row];
    if (column == 0 && (label < 0 || label >= depth))
      atomicExch(error, 1);
    y[i] = label == column ? 1.0f : 0.0f;
  }
}

/// Block-wide reductions over kThreads threads (every thread gets the result), in a fixed tree order.
template <typename Combine> __device__ float blockCombine(float v, float *shared, Combine combine) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}
__device__ float blockMax(float v, float *shared) {
  return blockCombine(v, shared, [](float a, float b) { return fmaxf(a, b); });
}

/// The block's values combined by a reduction kind, in a fixed tree order.
template <typename T> __device__ T blockReduce(ReduceKind kind, T v, T *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] = reduceCombine(kind, shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const T r = shared[0];
  __syncthreads();
  return r;
}

/// One block per (outer, inner) column of the softmax axis; the same exp as the CPU (expNonPositive).
__global__ void softmaxKernel(ConstRef x, Ref y, int64_t axis, int64_t inner, bool logSoftmax) {
  __shared__ float shared[kThreads];
  const int64_t o = blockIdx.x / inner, in = blockIdx.x % inner;
  const int64_t base = o * axis * inner + in;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < axis; j += blockDim.x)
    mx = fmaxf(mx, load(x, base + j * inner));
  mx = blockMax(mx, shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < axis; j += blockDim.x)
    sum += expNonPositive(load(x, base + j * inner) - mx);
  sum = blockSum(sum, shared);
  const float logSum = logf(sum), inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < axis; j += blockDim.x) {
    const float v = load(x, base + j * inner) - mx;
    store(y, base + j * inner, logSoftmax ? v - logSum : expNonPositive(v) * inv);
  }
}

/// Attention's score of key j for query row (b, h, i): scale q.k_j, masked (support/Attention.h).
__device__ float attentionScore(const AttentionShape &a, const float *q, ConstRef k, int64_t keyRow, ConstRef mask,
                                int64_t maskRow, int64_t j) {
  float s = 0.0f;
  for (int64_t d = 0; d < a.headDim; ++d)
    s += q[d] * load(k, (keyRow + j) * a.headDim + d);
  s *= a.scale;
  if (a.mask == AttentionMask::Additive)
    s = maskedScore(s, load(mask, maskRow + j * a.maskStrides[3]), true);
  else if (a.mask == AttentionMask::Boolean)
    s = maskedScore(s, 0.0f, static_cast<const bool *>(mask.data)[maskRow + j * a.maskStrides[3]]);
  return s;
}

/// The block's amax (NaN wins) folded into *target, a grid-wide max |x|, by one atomic; none without FP8.
__device__ void publishAmax(float *target, float local, float *shared) {
  const float amax = blockCombine(local, shared, [](float a, float b) { return maxAbsNanWins(a, b); });
  if (target && threadIdx.x == 0)
    atomicMaxAbs(target, amax);
}

/// FP8 attention's scale values, read from the device scalars in tec.attention_fp8's or
/// tec.attention_fp8_grad's order; all 1 (no rounding) for 16/32-bit attention.
__device__ AttentionFp8Scales readScales(const AttentionFp8Args &f, bool grad) {
  return f.scales[0] ? attentionFp8Scales(f.scales, grad, f.grads) : AttentionFp8Scales{};
}

/// acc[d] += sum over t < width of tile[t] * x[(first + t) * cols + d], each d by one thread: a tile of
/// probabilities (or score gradients) times the rows of V (or K, Q, dout) they weigh.
__device__ void accumulateTile(float *acc, const float *tile, int64_t width, ConstRef x, int64_t first, int64_t cols) {
  for (int64_t d = threadIdx.x; d < cols; d += blockDim.x) {
    float sum = 0.0f;
    for (int64_t t = 0; t < width; ++t)
      sum += tile[t] * load(x, (first + t) * cols + d);
    acc[d] += sum;
  }
}

/// One block per query row: the keys a block's width at a time, with the online softmax of the CPU kernel.
/// Shared: the query [D], the output accumulator [Dv], a tile of probabilities, the reduction scratch.
/// FP8 (`args` set) quantizes normalized probabilities, as the CPU kernel does: the online pass only finds
/// the row's logsumexp, a second one adds p = e^(s - lse) through E4M3 times V; operands are codes.
__global__ void attentionKernel(AttentionShape a, AttentionFp8Args args, ConstRef q, ConstRef k, ConstRef v,
                                ConstRef mask, Ref out, float *lse) {
  extern __shared__ float smem[];
  float *qRow = smem, *acc = qRow + a.headDim, *tile = acc + a.valueDim, *scratch = tile + blockDim.x;
  const AttentionFp8Scales f = readScales(args, false);
  const bool fp8 = args.scales[0] != nullptr;
  a.scale *= f.descaleQ * f.descaleK; // scores from the codes
  const int64_t row = blockIdx.x, b = row / (a.heads * a.queries), h = row / a.queries % a.heads, i = row % a.queries;
  const int64_t keyRow = (b * a.kvHeads + a.kvHeadOf(h)) * a.keys, maskRow = a.maskRow(b, h, i);
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x)
    qRow[d] = load(q, row * a.headDim + d);
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x)
    acc[d] = 0.0f;
  __syncthreads();
  float m = -INFINITY, l = 0.0f;
  const int64_t end = a.visibleKeys(i);
  for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x, width = min(int64_t(blockDim.x), end - j0);
    const float s = j < end ? attentionScore(a, qRow, k, keyRow, mask, maskRow, j) : -INFINITY;
    const float mNew = fmaxf(m, blockMax(s, scratch));
    const float p = mNew == -INFINITY ? 0.0f : expNonPositive(s - mNew);
    const float correction = mNew == -INFINITY ? 1.0f : expNonPositive(m - mNew);
    l = l * correction + blockSum(p, scratch);
    m = mNew;
    if (fp8)
      continue;
    tile[threadIdx.x] = p;
    __syncthreads();
    for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
      float sum = 0.0f;
      for (int64_t t = 0; t < width; ++t)
        sum += tile[t] * load(v, (keyRow + j0 + t) * a.valueDim + d);
      acc[d] = acc[d] * correction + sum;
    }
    __syncthreads();
  }
  const float rowLse = m + logf(l); // -inf for a row with every key hidden: NaN probabilities, as on the CPU
  if (threadIdx.x == 0)
    lse[row] = rowLse;
  if (!fp8) {
    for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x)
      store(out, row * a.valueDim + d, l == 0.0f ? NAN : acc[d] / l);
    return;
  }
  float probsAmax = 0.0f;
  for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x, width = min(int64_t(blockDim.x), end - j0);
    float p = 0.0f;
    if (j < end) {
      p = expNonPositive(attentionScore(a, qRow, k, keyRow, mask, maskRow, j) - rowLse);
      probsAmax = maxAbsNanWins(probsAmax, p);
      p = throughFp8(p, f.probsScale, f.probsDescale, Fp8Format::E4M3);
    }
    tile[threadIdx.x] = p;
    __syncthreads();
    accumulateTile(acc, tile, width, v, keyRow + j0, a.valueDim);
    __syncthreads();
  }
  float outAmax = 0.0f;
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    const float o = acc[d] * f.descaleV;
    outAmax = maxAbsNanWins(outAmax, o);
    store(out, row * a.valueDim + d, o * f.outScale);
  }
  publishAmax(args.amaxes[0], probsAmax, scratch);
  publishAmax(args.amaxes[1], outAmax, scratch);
}

/// dq for one query row, and its delta = dout . out (kept for attentionKeyGradKernel). With FP8 (`args`
/// set) the operands are codes scaled on the way, ds times the attention scale goes through FP8 before ds K
/// (cuDNN's dP), and dq is written
/// scaled, its amax and ds's published.
__global__ void attentionQueryGradKernel(AttentionShape a, AttentionFp8Args args, ConstRef dout, ConstRef q, ConstRef k,
                                         ConstRef v, ConstRef out, const float *lse, ConstRef mask, Ref dq,
                                         float *delta) {
  extern __shared__ float smem[];
  float *qRow = smem, *doRow = qRow + a.headDim, *acc = doRow + a.valueDim, *tile = acc + a.headDim,
        *scratch = tile + blockDim.x;
  const AttentionFp8Scales f = readScales(args, true);
  const bool fp8 = args.scales[0] != nullptr;
  AttentionShape codes = a; // scores from the codes
  codes.scale *= f.descaleQ * f.descaleK;
  const int64_t row = blockIdx.x, b = row / (a.heads * a.queries), h = row / a.queries % a.heads, i = row % a.queries;
  const int64_t keyRow = (b * a.kvHeads + a.kvHeadOf(h)) * a.keys, maskRow = a.maskRow(b, h, i);
  float dot = 0.0f;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    qRow[d] = load(q, row * a.headDim + d);
    acc[d] = 0.0f;
  }
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    doRow[d] = load(dout, row * a.valueDim + d) * f.descaleDout;
    dot += doRow[d] * load(out, row * a.valueDim + d) * f.descaleOut;
  }
  const float rowDelta = blockSum(dot, scratch), rowLse = lse[row];
  if (threadIdx.x == 0)
    delta[row] = rowDelta;
  float dsAmax = 0.0f;
  const int64_t end = a.visibleKeys(i);
  for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x, width = min(int64_t(blockDim.x), end - j0);
    float ds = 0.0f;
    if (j < end) {
      const float p = expNonPositive(attentionScore(codes, qRow, k, keyRow, mask, maskRow, j) - rowLse);
      float dp = 0.0f;
      for (int64_t d = 0; d < a.valueDim; ++d)
        dp += doRow[d] * load(v, (keyRow + j) * a.valueDim + d);
      ds = p * (dp * f.descaleV - rowDelta);
      if (fp8) {
        ds *= a.scale; // cuDNN's dP: the gradient of the unscaled Q K^T
        dsAmax = maxAbsNanWins(dsAmax, ds);
        ds = throughFp8(ds, f.dprobsScale, f.dprobsDescale, f.grads);
      }
    }
    tile[threadIdx.x] = ds;
    __syncthreads();
    accumulateTile(acc, tile, width, k, keyRow + j0, a.headDim);
    __syncthreads();
  }
  float dqAmax = 0.0f;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    const float g = (fp8 ? 1.0f : a.scale) * f.descaleK * acc[d];
    dqAmax = maxAbsNanWins(dqAmax, g);
    store(dq, row * a.headDim + d, g * f.dqScale);
  }
  publishAmax(args.amaxes[0], dqAmax, scratch);
  publishAmax(args.amaxes[3], dsAmax, scratch);
}

/// dk and dv for one key row, over every query head of its group that sees it; one block writes each row.
/// With FP8 as attentionQueryGradKernel: p goes through E4M3 before p^T dout, ds through FP8 before ds^T q.
__global__ void attentionKeyGradKernel(AttentionShape a, AttentionFp8Args args, ConstRef dout, ConstRef q, ConstRef k,
                                       ConstRef v, const float *lse, const float *delta, ConstRef mask, Ref dk, Ref dv) {
  extern __shared__ float smem[];
  float *kRow = smem, *vRow = kRow + a.headDim, *dkAcc = vRow + a.valueDim, *dvAcc = dkAcc + a.headDim,
        *pTile = dvAcc + a.valueDim, *dsTile = pTile + blockDim.x;
  const AttentionFp8Scales f = readScales(args, true);
  const bool fp8 = args.scales[0] != nullptr;
  const int64_t keyIndex = blockIdx.x, b = keyIndex / (a.kvHeads * a.keys), kvHead = keyIndex / a.keys % a.kvHeads,
                j = keyIndex % a.keys;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    kRow[d] = load(k, keyIndex * a.headDim + d) * f.descaleK;
    dkAcc[d] = 0.0f;
  }
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    vRow[d] = load(v, keyIndex * a.valueDim + d) * f.descaleV;
    dvAcc[d] = 0.0f;
  }
  __syncthreads();
  const int64_t group = a.heads / a.kvHeads, first = a.causal ? min(j, a.queries) : 0;
  for (int64_t h = kvHead * group; h < (kvHead + 1) * group; ++h)
    for (int64_t i0 = first; i0 < a.queries; i0 += blockDim.x) {
      const int64_t i = i0 + threadIdx.x, width = min(int64_t(blockDim.x), a.queries - i0);
      const int64_t row = (b * a.heads + h) * a.queries + i;
      float p = 0.0f, ds = 0.0f;
      if (i < a.queries) {
        float s = 0.0f, dp = 0.0f;
        for (int64_t d = 0; d < a.headDim; ++d)
          s += load(q, row * a.headDim + d) * kRow[d];
        s *= a.scale * f.descaleQ;
        const int64_t at = a.maskRow(b, h, i) + j * a.maskStrides[3];
        if (a.mask == AttentionMask::Additive)
          s = maskedScore(s, load(mask, at), true);
        else if (a.mask == AttentionMask::Boolean)
          s = maskedScore(s, 0.0f, static_cast<const bool *>(mask.data)[at]);
        if (a.causal && j > i)
          s = -INFINITY;
        p = expNonPositive(s - lse[row]);
        for (int64_t d = 0; d < a.valueDim; ++d)
          dp += load(dout, row * a.valueDim + d) * vRow[d];
        ds = p * (dp * f.descaleDout - delta[row]);
        if (fp8) {
          ds = throughFp8(ds * a.scale, f.dprobsScale, f.dprobsDescale, f.grads);
          p = throughFp8(p, f.probsScale, f.probsDescale, Fp8Format::E4M3);
        }
      }
      pTile[threadIdx.x] = p;
      dsTile[threadIdx.x] = ds;
      __syncthreads();
      const int64_t rows = (b * a.heads + h) * a.queries + i0;
      accumulateTile(dvAcc, pTile, width, dout, rows, a.valueDim);
      accumulateTile(dkAcc, dsTile, width, q, rows, a.headDim);
      __syncthreads();
    }
  float dkAmax = 0.0f, dvAmax = 0.0f;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    const float g = (fp8 ? 1.0f : a.scale) * f.descaleQ * dkAcc[d];
    dkAmax = maxAbsNanWins(dkAmax, g);
    store(dk, keyIndex * a.headDim + d, g * f.dkScale);
  }
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    const float g = dvAcc[d] * f.descaleDout;
    dvAmax = maxAbsNanWins(dvAmax, g);
    store(dv, keyIndex * a.valueDim + d, g * f.dvScale);
  }
  publishAmax(args.amaxes[1], dkAmax, pTile);
  publishAmax(args.amaxes[2], dvAmax, pTile);
}

/// One block per row; mean and variance accumulated in double, as on the CPU.
__global__ void layerNormKernel(ConstRef x, ConstRef scale, ConstRef bias, Ref y, Ref mean, Ref rstd, int64_t cols,
                                float epsilon, bool center) {
  __shared__ double shared[kThreads];
  const int64_t base = blockIdx.x * cols;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < cols && center; j += blockDim.x)
    sum += load(x, base + j);
  const double mu = center ? blockSum(sum, shared) / cols : 0.0;
  double sq = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double d = load(x, base + j) - mu;
    sq += d * d;
  }
  const float inv = static_cast<float>(1.0 / sqrt(blockSum(sq, shared) / cols + epsilon));
  const float m = static_cast<float>(mu);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    store(y, base + j, (load(x, base + j) - m) * inv * load(scale, j) + (bias.data ? load(bias, j) : 0.0f));
  if (threadIdx.x == 0) {
    if (mean.data)
      store(mean, blockIdx.x, m);
    if (rstd.data)
      store(rstd, blockIdx.x, inv);
  }
}

/// Reads element i as the accumulator type: double for float data (any of f32/f16/bf16), int64 for ints.
struct FloatRead {
  ConstRef x;
  __device__ double operator()(int64_t i) const { return load(x, i); }
};
template <typename T> struct IntRead {
  const T *x;
  __device__ int64_t operator()(int64_t i) const { return x[i]; }
};
struct FloatWrite {
  Ref y;
  __device__ void operator()(int64_t o, double v) const { store(y, o, static_cast<float>(v)); }
};
template <typename T> struct IntWrite {
  T *y;
  __device__ void operator()(int64_t o, int64_t v) const { y[o] = static_cast<T>(v); }
};

template <typename Acc> __device__ Acc finishReduction(ReduceKind kind, Acc sum, int64_t count) {
  return kind == ReduceKind::Mean ? (count ? sum / static_cast<Acc>(count) : Acc(0)) : sum;
}

/// Rows and General plans: block (o, s) sums part s of output o's reduced range, its threads striding.
template <typename Acc, typename Read, typename Write>
__global__ void reduceBlocksKernel(ReductionPlan p, ReduceKind kind, Read x, Extent kept, Strided keptStrides,
                                   Extent reduced, Strided reducedStrides, Write y, Acc *partials) {
  __shared__ Acc shared[kReduceThreads];
  const int64_t chunk = (p.reducedCount + p.splits - 1) / p.splits, begin = int64_t(blockIdx.y) * chunk;
  const int64_t end = min(begin + chunk, p.reducedCount);
  const bool rows = p.kind == ReductionPlan::Kind::Rows;
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const int64_t base = offsetOf(kept, keptStrides, o);
    Acc sum = reduceIdentity<Acc>(kind);
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x)
      sum = reduceCombine<Acc>(kind, sum, x(base + (rows ? reducedStrides.base + r : offsetOf(reduced, reducedStrides, r))));
    sum = blockReduce(kind, sum, shared);
    if (threadIdx.x == 0) {
      if (p.splits > 1)
        partials[o * p.splits + blockIdx.y] = sum;
      else
        y(o, finishReduction(kind, sum, p.reducedCount));
    }
  }
}

/// Columns plans: a thread per output, coalesced along the outputs; blocks along y take parts of the rows.
template <typename Acc, typename Read, typename Write>
__global__ void reduceColumnsKernel(ReductionPlan p, ReduceKind kind, Read x, int64_t base, Write y, Acc *partials) {
  const int64_t chunk = (p.reducedCount + p.splits - 1) / p.splits, begin = int64_t(blockIdx.y) * chunk;
  const int64_t end = min(begin + chunk, p.reducedCount);
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < p.outputs; o += int64_t(gridDim.x) * blockDim.x) {
    Acc sum = reduceIdentity<Acc>(kind);
    for (int64_t r = begin; r < end; ++r)
      sum = reduceCombine<Acc>(kind, sum, x(base + o + r * p.columnStride));
    if (p.splits > 1)
      partials[o * p.splits + blockIdx.y] = sum;
    else
      y(o, finishReduction(kind, sum, p.reducedCount));
  }
}

/// The second stage: each output's partial sums, added in split order (deterministic).
template <typename Acc, typename Write>
__global__ void reduceFinishKernel(const Acc *partials, int64_t outputs, int64_t splits, int64_t count, ReduceKind kind,
                                   Write y) {
  TEC_GRID_LOOP(o, outputs) {
    Acc sum = reduceIdentity<Acc>(kind);
    for (int64_t s = 0; s < splits; ++s)
      sum = reduceCombine<Acc>(kind, sum, partials[o * splits + s]);
    y(o, finishReduction(kind, sum, count));
  }
}

template <typename Acc, typename Read, typename Write>
void launchReduction(const ReductionPlan &p, ReduceKind kind, Read x, const Extent &kept, const Strided &keptStrides,
                     const Extent &reduced, const Strided &reducedStrides, Write y, void *partials,
                     cudaStream_t stream) {
  Acc *sums = static_cast<Acc *>(partials);
  const dim3 grid(p.gridX, p.gridY);
  if (p.kind == ReductionPlan::Kind::Columns)
    reduceColumnsKernel<Acc><<<grid, kReduceThreads, 0, stream>>>(p, kind, x, keptStrides.base + reducedStrides.base,
                                                                  y, sums);
  else
    reduceBlocksKernel<Acc><<<grid, kReduceThreads, 0, stream>>>(p, kind, x, kept, keptStrides, reduced,
                                                                 reducedStrides, y, sums);
  if (p.splits > 1)
    reduceFinishKernel<Acc><<<blocksFor(p.outputs), kThreads, 0, stream>>>(sums, p.outputs, p.splits, p.reducedCount,
                                                                           kind, y);
}

__global__ void biasActivationKernel(Ref y, ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue) {
  TEC_GRID_LOOP(i, rows * cols) {
    store(y, i, applyEpilogue(load(y, i) + (bias.data ? load(bias, i % cols) : 0.0f), epilogue));
  }
}

/// Non-negative floats order like their bits, so max |x| is an integer atomicMax; NaN's bits win.
__global__ void amaxKernel(ConstRef x, int64_t n, float *out) {
  __shared__ float shared[kThreads];
  float local = 0.0f;
  gridStrideByFour(n, [&](int64_t i) { return load(x, i); }, [&](int64_t, float v) { local = maxAbsNanWins(local, v); });
  shared[threadIdx.x] = local;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float a = shared[threadIdx.x], b = shared[threadIdx.x + stride];
      shared[threadIdx.x] = maxAbsNanWins(a, b);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicMax(reinterpret_cast<unsigned int *>(out), __float_as_uint(shared[0]));
}

__global__ void clearIfNotFiniteKernel(ConstRef x, int64_t n, uint8_t *flag) {
  TEC_GRID_LOOP(i, n) {
    if (!isfinite(load(x, i)))
      *flag = 0;
  }
}

__global__ void clipCoefficientKernel(const float *norm, float maxNorm, float *out) {
  *out = kernels::clipCoefficient(*norm, maxNorm);
}

__global__ void lossScaleUpdateKernel(const float *scale, const float *clean, const uint8_t *finite, float interval,
                                      float growth, float backoff, float *nextScale, float *nextClean) {
  kernels::updateLossScale(*scale, *clean, *finite != 0, interval, growth, backoff, nextScale, nextClean);
}

__global__ void learningRateKernel(int schedule, const float *lr, const float *step, float warmup, float total, float *out) {
  *out = kernels::learningRate(schedule, *lr, *step, warmup, total);
}

struct OptimizerBatch {
  OptimizerTensor tensors[kOptimizerTensorsPerLaunch];
};

/// blockIdx.y picks the parameter; the blocks along x stride over its elements.
__global__ void optimizerKernel(OptimizerParams params, const float *lr, const float *step, const float *clip,
                                const uint8_t *finite, OptimizerBatch batch) {
  const OptimizerTensor t = batch.tensors[blockIdx.y];
  const bool apply = !finite || *finite;
  float c1 = 1.0f, c2 = 1.0f;
  if (params.adamw)
    adamBiasCorrections(params, *step, &c1, &c2);
  const float rate = *lr, scale = clip ? *clip : 1.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n; i += int64_t(gridDim.x) * blockDim.x) {
    const float m = t.m ? t.m[i] : 0.0f, v = t.v ? t.v[i] : 0.0f;
    if (!apply) { // an overflowed step keeps every value
      t.newP[i] = t.p[i];
      if (t.newM)
        t.newM[i] = m;
      if (t.newV)
        t.newV[i] = v;
      continue;
    }
    float scratch;
    optimizerElement(params, rate, c1, c2, scale, t.p[i], t.g[i], m, v, &t.newP[i], t.newM ? &t.newM[i] : &scratch,
                     t.newV ? &t.newV[i] : &scratch);
  }
}

} // namespace

int currentMultiprocessors() {
  static const int count = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
    return value > 0 ? value : 1;
  }();
  return count;
}

void binary(BinaryKind kind, const void *a, Strided as, const void *b, Strided bs, void *out, const Extent &extent,
            ElementType type, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&as, &bs});
  const bool contiguous = isContiguous(e, as) && isContiguous(e, bs);
  auto launch = [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    if (type == ElementType::I32)
      binaryInt<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int32_t *>(a), as,
                                                                        static_cast<const int32_t *>(b), bs,
                                                                        static_cast<int32_t *>(out), e, n);
    else if (type == ElementType::I64)
      binaryInt<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int64_t *>(a), as,
                                                                        static_cast<const int64_t *>(b), bs,
                                                                        static_cast<int64_t *>(out), e, n);
    else
      binaryFloat<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, ConstRef{a, type}, as,
                                                                          ConstRef{b, type}, bs, Ref{out, type}, e, n);
  };
  if (contiguous)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

void compare(CompareKind kind, const void *a, Strided as, const void *b, Strided bs, bool *out,
             const Extent &extent, ElementType type, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&as, &bs});
  const bool contiguous = isContiguous(e, as) && isContiguous(e, bs);
  auto launch = [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    auto typed = [&](auto *pa) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(pa)>>;
      compareKernel<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          kind, static_cast<const T *>(a), as, static_cast<const T *>(b), bs, out, e, n);
    };
    if (type == ElementType::I32)
      typed(static_cast<const int32_t *>(nullptr));
    else if (type == ElementType::I64)
      typed(static_cast<const int64_t *>(nullptr));
    else if (type == ElementType::Bool)
      typed(static_cast<const bool *>(nullptr));
    else
      compareFloat<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, ConstRef{a, type}, as,
                                                                           ConstRef{b, type}, bs, out, e, n);
  };
  if (contiguous)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

void unary(UnaryKind kind, ConstRef x, Ref y, int64_t n, void *stream) {
  if (!n)
    return;
  if (x.type == ElementType::I32)
    intUnaryKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int32_t *>(x.data),
                                                                     static_cast<int32_t *>(y.data), n);
  else if (x.type == ElementType::I64)
    intUnaryKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int64_t *>(x.data),
                                                                     static_cast<int64_t *>(y.data), n);
  else
    unaryKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, x, y, n);
}

void activationGrad(ActivationGradKind kind, ConstRef dy, ConstRef x, Ref dx, int64_t n, void *stream) {
  if (n)
    activationGradKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, dy, x, dx, n);
}

void where(const bool *cond, Strided cs, const void *x, Strided xs, const void *y, Strided ys, void *out,
           const Extent &extent, size_t bytes, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&cs, &xs, &ys});
  const bool contiguous = isContiguous(e, cs) && isContiguous(e, xs) && isContiguous(e, ys);
  auto launch = [&](auto *typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    if (contiguous)
      whereKernel<true><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          cond, cs, static_cast<const T *>(x), xs, static_cast<const T *>(y), ys, static_cast<T *>(out), e, n);
    else
      whereKernel<false><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          cond, cs, static_cast<const T *>(x), xs, static_cast<const T *>(y), ys, static_cast<T *>(out), e, n);
  };
  switch (bytes) {
  case 1: return launch(static_cast<uint8_t *>(nullptr));
  case 2: return launch(static_cast<uint16_t *>(nullptr));
  case 4: return launch(static_cast<uint32_t *>(nullptr));
  default: return launch(static_cast<uint64_t *>(nullptr));
  }
}

void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n, void *stream) {
  if (n == 0)
    return;
  if (from == to)
    cudaMemcpyAsync(y, x, n * elementBytes(from), cudaMemcpyDeviceToDevice, asStream(stream));
  else
    castKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(x, from, y, to, n);
}

void stridedCopy(const void *src, Strided s, void *dst, Strided d, const Extent &extent, size_t bytes, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&s, &d});
  const char *from = static_cast<const char *>(src);
  char *to = static_cast<char *>(dst);
  if (isContiguous(e, s) && isContiguous(e, d)) { // a plain copy (a contiguous slice, concat piece or split)
    cudaMemcpyAsync(to + d.base * bytes, from + s.base * bytes, n * bytes, cudaMemcpyDeviceToDevice, asStream(stream));
    return;
  }
  // A 2-D transpose (dst row-major [D0, D1], src the row-major [D1, D0]): tiled, coalesced both ways.
  const bool transpose = e.rank == 2 && isContiguous(e, d) && s.strides[0] == 1 && s.strides[1] == e.dims[0];
  auto launch = [&](auto *typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    if (transpose) {
      const TileGrid g = transposeGrid(e.dims[1], e.dims[0]);
      transposeKernel<<<dim3(g.x, g.y), dim3(kTile, 8), 0, asStream(stream)>>>(
          reinterpret_cast<const T *>(from) + s.base, e.dims[1], e.dims[0], reinterpret_cast<T *>(to) + d.base);
      return;
    }
    stridedCopyKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(static_cast<const T *>(src), s,
                                                                       static_cast<T *>(dst), d, e, n);
  };
  switch (bytes) {
  case 1: return launch(static_cast<uint8_t *>(nullptr));
  case 2: return launch(static_cast<uint16_t *>(nullptr));
  case 4: return launch(static_cast<uint32_t *>(nullptr));
  default: return launch(static_cast<uint64_t *>(nullptr));
  }
}

/// Calls f(T *, I *) with null pointers of the unsigned type of `bytes`-wide elements and the index type:
/// the typed dispatch of the gather kernels, which move elements without reading them.
template <typename F> void byElementAndIndex(size_t bytes, bool indices64, F f) {
  auto withIndex = [&](auto *typed) {
    if (indices64)
      f(typed, static_cast<int64_t *>(nullptr));
    else
      f(typed, static_cast<int32_t *>(nullptr));
  };
  switch (bytes) {
  case 1: return withIndex(static_cast<uint8_t *>(nullptr));
  case 2: return withIndex(static_cast<uint16_t *>(nullptr));
  case 4: return withIndex(static_cast<uint32_t *>(nullptr));
  default: return withIndex(static_cast<uint64_t *>(nullptr));
  }
}

void argReduce(bool max, bool last, const void *x, ElementType type, int64_t outer, int64_t dim, int64_t inner,
               int64_t *y, void *stream) {
  const int64_t n = outer * inner;
  if (n == 0 || dim == 0)
    return;
  auto s = asStream(stream);
  if (type == ElementType::I32)
    argReduceKernel<<<blocksFor(n), kThreads, 0, s>>>(max, last, IntRead<int32_t>{static_cast<const int32_t *>(x)},
                                                      outer, dim, inner, y);
  else if (type == ElementType::I64)
    argReduceKernel<<<blocksFor(n), kThreads, 0, s>>>(max, last, IntRead<int64_t>{static_cast<const int64_t *>(x)},
                                                      outer, dim, inner, y);
  else
    argReduceKernel<<<blocksFor(n), kThreads, 0, s>>>(max, last, FloatRead{ConstRef{x, type}}, outer, dim, inner, y);
}

void cumSum(const void *x, void *y, ElementType type, int64_t outer, int64_t dim, int64_t inner, bool exclusive,
            bool reverse, void *stream) {
  const int64_t lines = outer * inner;
  if (lines == 0 || dim == 0)
    return;
  auto s = asStream(stream);
  if (type == ElementType::I32)
    cumSumIntKernel<<<blocksFor(lines), kThreads, 0, s>>>(static_cast<const int32_t *>(x), static_cast<int32_t *>(y),
                                                          lines, dim, inner, exclusive, reverse);
  else if (type == ElementType::I64)
    cumSumIntKernel<<<blocksFor(lines), kThreads, 0, s>>>(static_cast<const int64_t *>(x), static_cast<int64_t *>(y),
                                                          lines, dim, inner, exclusive, reverse);
  else
    cumSumFloatKernel<<<blocksFor(lines), kThreads, 0, s>>>(ConstRef{x, type}, Ref{y, type}, lines, dim, inner,
                                                            exclusive, reverse);
}

void window(WindowKind kind, const Window &w, ConstRef a, ConstRef b, ConstRef bias, Ref out, bool countIncludePad,
            void *stream) {
  auto s = asStream(stream);
  const int64_t images = w.batch * w.channels * w.height * w.width;
  switch (kind) {
  case WindowKind::Conv: {
    const int64_t n = w.batch * w.outChannels * w.outHeight * w.outWidth;
    if (n)
      convKernel<<<blocksFor(n), kThreads, 0, s>>>(w, a, b, bias, out);
    return;
  }
  case WindowKind::ConvInputGrad:
    if (images)
      convInputGradKernel<<<blocksFor(images), kThreads, 0, s>>>(w, a, b, out);
    return;
  case WindowKind::ConvWeightGrad: {
    const int64_t n = w.outChannels * w.groupChannels() * w.kernelH * w.kernelW;
    if (n)
      convWeightGradKernel<<<blocksFor(n), kThreads, 0, s>>>(w, a, b, out);
    return;
  }
  case WindowKind::MaxPool:
  case WindowKind::AvgPool: {
    const int64_t n = w.batch * w.channels * w.outHeight * w.outWidth;
    if (n)
      poolKernel<<<blocksFor(n), kThreads, 0, s>>>(w, kind == WindowKind::MaxPool, countIncludePad, a, out);
    return;
  }
  case WindowKind::MaxPoolGrad:
  case WindowKind::AvgPoolGrad:
    if (images)
      poolGradKernel<<<blocksFor(images), kThreads, 0, s>>>(w, kind == WindowKind::MaxPoolGrad, countIncludePad, a, b,
                                                            out);
    return;
  }
}

void gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                    bool indices64, int64_t picks, void *y, size_t bytes, int *error, void *stream) {
  const int64_t n = outer * picks * inner;
  if (n == 0)
    return;
  auto launch = [&](auto *typed, auto *index) {
    using T = std::remove_pointer_t<decltype(typed)>;
    using I = std::remove_pointer_t<decltype(index)>;
    gatherElementsKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
        static_cast<const T *>(data), outer, axisDim, inner, static_cast<const I *>(indices), picks,
        static_cast<T *>(y), error);
  };
  byElementAndIndex(bytes, indices64, launch);
}

void scatterAdd(ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
                int64_t picks, bool elements, Ref y, void *stream) {
  const int64_t n = outer * axisDim * inner;
  if (n == 0)
    return;
  auto launch = [&](auto *index) {
    using I = std::remove_pointer_t<decltype(index)>;
    if (elements)
      scatterAddElementsKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          updates, outer, axisDim, inner, static_cast<const I *>(indices), picks, y);
    else
      scatterAddRowsKernel<<<outer * axisDim, kThreads, 0, asStream(stream)>>>(
          updates, axisDim, inner, static_cast<const I *>(indices), picks, y);
  };
  if (indices64)
    launch(static_cast<int64_t *>(nullptr));
  else
    launch(static_cast<int32_t *>(nullptr));
}

void gather(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
            int64_t numIndices, void *y, size_t bytes, int *error, void *stream) {
  const int64_t n = outer * numIndices * inner;
  if (n == 0)
    return;
  auto launch = [&](auto *typed, auto *index) {
    using T = std::remove_pointer_t<decltype(typed)>;
    using I = std::remove_pointer_t<decltype(index)>;
    gatherKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(static_cast<const T *>(data), outer, axisDim, inner,
                                                                  static_cast<const I *>(indices), numIndices,
                                                                  static_cast<T *>(y), error);
  };
  byElementAndIndex(bytes, indices64, launch);
}

void oneHot(const void *labels, bool labels64, int64_t n, int64_t depth, float *y, int *error, void *stream) {
  if (n * depth == 0)
    return;
  if (labels64)
    oneHotKernel<<<blocksFor(n * depth), kThreads, 0, asStream(stream)>>>(static_cast<const int64_t *>(labels), n,
                                                                          depth, y, error);
  else
    oneHotKernel<<<blocksFor(n * depth), kThreads, 0, asStream(stream)>>>(static_cast<const int32_t *>(labels), n,
                                                                          depth, y, error);
}

void softmax(ConstRef x, Ref y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax, void *stream) {
  if (outer * inner * axis == 0)
    return;
  softmaxKernel<<<static_cast<unsigned>(outer * inner), kThreads, 0, asStream(stream)>>>(x, y, axis, inner, logSoftmax);
}

size_t attentionSharedBytes(const AttentionShape &a, bool grad) {
  const int64_t floats = grad ? 2 * (a.headDim + a.valueDim) + 3 * kThreads : a.headDim + a.valueDim + 2 * kThreads;
  return static_cast<size_t>(floats) * sizeof(float);
}

void attention(const AttentionShape &a, ConstRef q, ConstRef k, ConstRef v, ConstRef mask, Ref out, float *lse,
               void *stream) {
  attentionFp8(a, AttentionFp8Args{}, q, k, v, mask, out, lse, stream);
}

void attentionFp8Grad(const AttentionShape &a, const AttentionFp8Args &f, ConstRef dout, ConstRef q, ConstRef k,
                      ConstRef v, ConstRef out, const float *lse, ConstRef mask, Ref dq, Ref dk, Ref dv, float *delta,
                      void *stream) {
  const int64_t rows = a.batch * a.heads * a.queries, keyRows = a.batch * a.kvHeads * a.keys;
  if (rows == 0 || keyRows == 0)
    return;
  const size_t shared = attentionSharedBytes(a, true);
  attentionQueryGradKernel<<<static_cast<unsigned>(rows), kThreads, shared, asStream(stream)>>>(a, f, dout, q, k, v,
                                                                                               out, lse, mask, dq, delta);
  attentionKeyGradKernel<<<static_cast<unsigned>(keyRows), kThreads, shared, asStream(stream)>>>(a, f, dout, q, k, v,
                                                                                                lse, delta, mask, dk, dv);
}

void attentionGrad(const AttentionShape &a, ConstRef dout, ConstRef q, ConstRef k, ConstRef v, ConstRef out,
                   const float *lse, ConstRef mask, Ref dq, Ref dk, Ref dv, float *delta, void *stream) {
  attentionFp8Grad(a, AttentionFp8Args{}, dout, q, k, v, out, lse, mask, dq, dk, dv, delta, stream);
}

void attentionFp8(const AttentionShape &a, const AttentionFp8Args &f, ConstRef q, ConstRef k, ConstRef v, ConstRef mask,
                  Ref out, float *lse, void *stream) {
  const int64_t rows = a.batch * a.heads * a.queries;
  if (rows == 0)
    return;
  attentionKernel<<<static_cast<unsigned>(rows), kThreads, attentionSharedBytes(a, false), asStream(stream)>>>(
      a, f, q, k, v, mask, out, lse);
}

void layerNorm(ConstRef x, ConstRef scale, ConstRef bias, Ref y, Ref mean, Ref rstd, int64_t rows, int64_t cols,
               float epsilon, bool center, void *stream) {
  if (rows == 0 || cols == 0)
    return;
  layerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, asStream(stream)>>>(x, scale, bias, y, mean, rstd, cols,
                                                                                  epsilon, center);
}

void reduce(ReduceKind kind, const void *x, Extent kept, Strided keptStrides, Extent reduced, Strided reducedStrides,
            void *y, ElementType type, ElementType outType, void *partials, int multiprocessors, void *stream) {
  const ReductionPlan p = planReduction(kept, keptStrides, reduced, reducedStrides, multiprocessors);
  if (p.outputs == 0)
    return;
  auto s = asStream(stream);
  if (type == ElementType::I32)
    launchReduction<int64_t>(p, kind, IntRead<int32_t>{static_cast<const int32_t *>(x)}, kept, keptStrides, reduced,
                             reducedStrides, IntWrite<int32_t>{static_cast<int32_t *>(y)}, partials, s);
  else if (type == ElementType::I64)
    launchReduction<int64_t>(p, kind, IntRead<int64_t>{static_cast<const int64_t *>(x)}, kept, keptStrides, reduced,
                             reducedStrides, IntWrite<int64_t>{static_cast<int64_t *>(y)}, partials, s);
  else
    launchReduction<double>(p, kind, FloatRead{ConstRef{x, type}}, kept, keptStrides, reduced, reducedStrides,
                            FloatWrite{Ref{y, outType}}, partials, s);
}

void biasActivation(Ref y, ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue, void *stream) {
  if (rows * cols)
    biasActivationKernel<<<blocksFor(rows * cols), kThreads, 0, asStream(stream)>>>(y, bias, rows, cols, epilogue);
}

void amax(ConstRef x, int64_t n, float *out, void *stream) {
  cudaMemsetAsync(out, 0, sizeof(float), asStream(stream));
  if (n)
    amaxKernel<<<atomicGridBlocks(n, kThreads, currentMultiprocessors()), kThreads, 0, asStream(stream)>>>(x, n, out);
}

void setFlag(uint8_t *flag, void *stream) { cudaMemsetAsync(flag, 1, 1, asStream(stream)); }

void clearIfNotFinite(ConstRef x, int64_t n, uint8_t *flag, void *stream) {
  if (n)
    clearIfNotFiniteKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(x, n, flag);
}

void clipCoefficient(const float *norm, float maxNorm, float *out, void *stream) {
  clipCoefficientKernel<<<1, 1, 0, asStream(stream)>>>(norm, maxNorm, out);
}

void lossScaleUpdate(const float *scale, const float *clean, const uint8_t *finite, float interval, float growth,
                     float backoff, float *nextScale, float *nextClean, void *stream) {
  lossScaleUpdateKernel<<<1, 1, 0, asStream(stream)>>>(scale, clean, finite, interval, growth, backoff, nextScale,
                                                       nextClean);
}

void optimizerUpdate(const OptimizerParams &params, const float *lr, const float *step, const float *clip,
                     const uint8_t *finite, const std::vector<OptimizerTensor> &tensors, void *stream) {
  for (size_t first = 0; first < tensors.size(); first += kOptimizerTensorsPerLaunch) {
    OptimizerBatch batch;
    const size_t count = std::min<size_t>(kOptimizerTensorsPerLaunch, tensors.size() - first);
    int64_t largest = 0;
    for (size_t i = 0; i < count; ++i) {
      batch.tensors[i] = tensors[first + i];
      largest = std::max(largest, tensors[first + i].n);
    }
    const dim3 grid(std::min(blocksFor(largest), 1024), static_cast<unsigned>(count));
    optimizerKernel<<<grid, kThreads, 0, asStream(stream)>>>(params, lr, step, clip, finite, batch);
  }
}

void learningRate(int schedule, const float *lr, const float *step, float warmup, float total, float *out, void *stream) {
  learningRateKernel<<<1, 1, 0, asStream(stream)>>>(schedule, lr, step, warmup, total, out);
}

} // namespace tec::kernels::cuda
