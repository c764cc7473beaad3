#include "kernels/cpu/Blas.h"

#include <dlfcn.h>

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
  for (const char *path : {"/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
                           "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"}) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      continue;
    sgemmFn = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    setThreadsFn = reinterpret_cast<SetThreadsFn>(dlsym(lib, "openblas_set_num_threads"));
    auto getConfig = reinterpret_cast<GetConfigFn>(dlsym(lib, "openblas_get_config"));
    if (!sgemmFn)
      continue;
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
  sgemmFn(kRowMajor, transA ? kTrans : kNoTrans, transB ? kTrans : kNoTrans, static_cast<int>(m),
          static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
          static_cast<int>(ldc));
}

void setBlasThreads(int threads) {
  if (blas().loaded && setThreadsFn)
    setThreadsFn(threads);
}

} // namespace tec::kernels::cpu
