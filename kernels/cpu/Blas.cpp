#include "kernels/cpu/Blas.h"
#include "kernels/cpu/ThreadPool.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace tec::kernels::cpu {

namespace {

// The CBLAS ABI: enums as ints, as cblas.h declares them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
using SetThreadsFn = void (*)(int);
using GetConfigFn = char *(*)();

SgemmFn sgemmFn = nullptr;
SetThreadsFn setThreadsFn = nullptr;

/// The best OpenBLAS kernel family this CPU runs, by its features (not its model number).
const char *coreTypeForThisCpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
  return nullptr;
}

BlasInfo load() {
  BlasInfo info;
  if (!std::getenv("OPENBLAS_CORETYPE"))
    if (const char *core = coreTypeForThisCpu())
      setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
  // Single-threaded inside tec's pool: the pthreads build, with no threads of its own (the OpenMP build
  // gives threads it did not start fresh buffers on every call, ~10 ms for a 64x128x1024 GEMM).
  setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1);
  for (const char *path : {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                           "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
                           "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
                           "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"}) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      continue;
    sgemmFn = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    setThreadsFn = reinterpret_cast<SetThreadsFn>(dlsym(lib, "openblas_set_num_threads"));
    auto getConfig = reinterpret_cast<GetConfigFn>(dlsym(lib, "openblas_get_config"));
    if (!sgemmFn)
      continue;
    if (setThreadsFn)
      setThreadsFn(1); // tec's pool splits the GEMMs
    info.loaded = true;
    info.library = path;
    info.config = getConfig ? getConfig() : "";
    return info;
  }
  info.library = "OpenBLAS not found (install libopenblas0-openmp or libopenblas0)";
  return info;
}

} // namespace

const BlasInfo &blas() {
  static const BlasInfo info = load();
  return info;
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
           const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  auto call = [&](int64_t rows, int64_t cols, const float *a, const float *b, float *c) {
    sgemmFn(kRowMajor, transA ? kTrans : kNoTrans, transB ? kTrans : kNoTrans, static_cast<int>(rows),
            static_cast<int>(cols), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
            beta, c, static_cast<int>(ldc));
  };
  // Below ~2^20 multiply-adds a split costs more than it saves. Chunks of at least 128 rows or columns,
  // and at most 8 of them: each call packs its own panel of the other operand.
  constexpr int64_t kSplitWork = int64_t(1) << 20;
  auto chunk = [](int64_t dim) { return std::max<int64_t>(128, (dim / 8 + 63) / 64 * 64); };
  if (m * n * k < kSplitWork) {
    call(m, n, a, b, c);
  } else if (n >= m) {
    parallelFor(n, chunk(n), [&](int64_t j0, int64_t j1) { call(m, j1 - j0, a, b + (transB ? j0 * ldb : j0), c + j0); });
  } else {
    parallelFor(m, chunk(m), [&](int64_t i0, int64_t i1) { call(i1 - i0, n, a + (transA ? i0 : i0 * lda), b, c + i0 * ldc); });
  }
}

} // namespace tec::kernels::cpu
