// Per-element math shared by the CPU kernels and the CUDA kernels: one definition, two compilers.
#ifndef TEC_SUPPORT_HOSTDEVICE_H
#define TEC_SUPPORT_HOSTDEVICE_H

#if defined(__CUDACC__)
#define TEC_HOST_DEVICE __host__ __device__ __forceinline__
#else
// Forced as on the device: a CPU loop vectorizes only with the math inlined (GCC once kept erfApprox a call
// in one GEMM epilogue's loop, and a bias-less Linear + GELU ran 7x slower than one with a bias).
#define TEC_HOST_DEVICE inline __attribute__((always_inline))
#endif

#endif
