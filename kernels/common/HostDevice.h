// Per-element math shared by the CPU kernels and the CUDA kernels: one definition, two compilers.
#ifndef TEC_KERNELS_COMMON_HOSTDEVICE_H
#define TEC_KERNELS_COMMON_HOSTDEVICE_H

#if defined(__CUDACC__)
#define TEC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TEC_HOST_DEVICE inline
#endif

#endif
