// The CPU GEMM: OpenBLAS, loaded by tec at first use rather than at program start, and run single-threaded
// inside the chunks of tec's thread pool (kernels/cpu/ThreadPool.h): OpenBLAS's own threads would wait at
// a barrier for one another, which a busy machine turns into a time slice per GEMM. Loading it ourselves
// also names the kernels for a CPU that the OpenBLAS build predates: Debian's 0.3.21 does not know
// Sapphire/Emerald Rapids and would run its generic SSE3 "Prescott" kernels there, about 4x slower.
// OPENBLAS_CORETYPE, when the user sets it, always wins.
#ifndef TEC_KERNELS_CPU_BLAS_H
#define TEC_KERNELS_CPU_BLAS_H

#include <cstdint>
#include <string>

namespace tec::kernels::cpu {

struct BlasInfo {
  bool loaded = false;
  std::string library; // the file loaded, or why none could be
  std::string config;  // openblas_get_config(): version and the kernels in use
};

/// Loads the BLAS on first call; later calls return the same answer.
const BlasInfo &blas();

/// Row-major C = alpha op(A) op(B) + beta C. The BLAS must be loaded (blas().loaded). Large GEMMs split the
/// longer of C's dims into chunks fixed by the shape (not the thread count), one BLAS call each, over the
/// pool: a GEMM of 64 rows (a small batch) splits over its columns.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
           const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

} // namespace tec::kernels::cpu

#endif
