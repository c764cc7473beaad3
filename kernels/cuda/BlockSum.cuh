// Reductions shared by the CUDA kernels: a block-wide sum in a fixed tree order (deterministic, every
// thread gets it), and a grid-wide max |x| by atomics.
#ifndef TEC_KERNELS_CUDA_BLOCKSUM_CUH
#define TEC_KERNELS_CUDA_BLOCKSUM_CUH

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

} // namespace tec::kernels::cuda

#endif
