// What every CUDA kernel file shares (one file per op family, as ggml-cuda's): the launch width, the
// grid-stride loop, typed loads and stores of float operands, strided addressing, block-wide combines.
#ifndef TEC_KERNELS_CUDA_COMMON_CUH
#define TEC_KERNELS_CUDA_COMMON_CUH

#include "kernels/cuda/BlockSum.cuh"
#include "kernels/cuda/Kernels.h"

#include "support/Fp8.h"
#include "support/Half.h"

#include <cuda_runtime.h>

namespace tec::kernels::cuda {

constexpr int kThreads = 256;

inline cudaStream_t asStream(void *stream) { return static_cast<cudaStream_t>(stream); }

inline int blocksFor(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)));
}

#define TEC_GRID_LOOP(i, n)                                                                                        \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

/// A float operand's element as f32; FP8 operands give their codes' values (FP8 attention scales them).
__device__ inline float load(ConstRef r, int64_t i) {
  switch (r.type) {
  case ElementType::F16: return f16ToFloat(static_cast<const uint16_t *>(r.data)[i]);
  case ElementType::BF16: return bf16ToFloat(static_cast<const uint16_t *>(r.data)[i]);
  case ElementType::F8E4M3: return fp8ToFloat(static_cast<const uint8_t *>(r.data)[i], Fp8Format::E4M3);
  case ElementType::F8E5M2: return fp8ToFloat(static_cast<const uint8_t *>(r.data)[i], Fp8Format::E5M2);
  default: return static_cast<const float *>(r.data)[i];
  }
}

__device__ inline void store(Ref r, int64_t i, float v) {
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
__device__ inline float blockMax(float v, float *shared) {
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

} // namespace tec::kernels::cuda

#endif
