// A block-wide sum shared by the CUDA kernels: a fixed tree order (deterministic), every thread gets it.
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

} // namespace tec::kernels::cuda

#endif
