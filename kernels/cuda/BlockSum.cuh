// Reductions shared by the CUDA kernels: a block-wide sum in a fixed tree order (deterministic, every
// thread gets it), a grid-wide max |x| by atomics, and the grid-stride loop of the kernels that end in one.
#ifndef TEC_KERNELS_CUDA_BLOCKSUM_CUH
#define TEC_KERNELS_CUDA_BLOCKSUM_CUH

#include <cstdint>

namespace tec::kernels::cuda {

/// `shared` holds one T per thread of the block.
template <typename T> __device__ T blockSum(T v, T *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const T r = shared[0];
  __syncthreads();
  return r;
}

/// Non-negative floats order like their bits, so a max over |x| is an integer atomicMax; a NaN (whose bits
/// are above +inf) wins, as on the CPU.
__device__ inline void atomicMaxAbs(float *target, float value) {
  atomicMax(reinterpret_cast<unsigned int *>(target), __float_as_uint(fabsf(value)));
}

/// use(i, load(i)) for each i < n of this thread's grid-stride loop, four at a time: the four loads are
/// issued together, so a grid capped for its atomics (atomicGridBlocks) still keeps enough bytes in flight.
template <typename Load, typename Use> __device__ void gridStrideByFour(int64_t n, Load load, Use use) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      v[u] = load(i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u)
      use(i + u * stride, v[u]);
  }
  for (; i < n; i += stride)
    use(i, load(i));
}

/// The multiprocessors of the current device (read once per process).
int currentMultiprocessors();

} // namespace tec::kernels::cuda

#endif
