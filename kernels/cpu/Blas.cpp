#include "kernels/cpu/Blas.h"
#include "support/LibraryLocations.h"
#include "kernels/cpu/PackedGemm.h"
#include "kernels/cpu/ThreadPool.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>

namespace tec::kernels::cpu {

namespace {

// The CBLAS ABI: enums as ints, as cblas.h declares them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
using SgemvFn = void (*)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

/// oneDNN's row-major SGEMM: transposes as 'N'/'T', dims as int64, a status (0: success) returned.
using DnnlSgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                            float, float *, int64_t);

/// One loaded library's SGEMM: a CBLAS one (with its SGEMV) or oneDNN's.
struct GemmFn {
  SgemmFn cblas = nullptr;
  SgemvFn cblasGemv = nullptr;
  DnnlSgemmFn dnnl = nullptr;
};

/// C = alpha op(A) op(B) + beta C as a matrix-vector product where C is a single row or column (a batch of
/// one through a Linear, a GEMV): the library's SGEMV streams the matrix once, where its SGEMM would pack
/// the whole matrix into panels for one row (a 1024x1000 classifier: 315 us packing, ~4x its SGEMV).
/// Returns false for any other shape.
bool callGemv(const GemmFn &g, bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!g.cblasGemv || (m != 1 && n != 1) || k == 0)
    return false;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  const int64_t length = m == 1 ? n : m, step = m == 1 ? 1 : ldc;
  if (beta == 0.0f) // BLAS may scale C by beta (NaN * 0 is NaN); C is only written here
    for (int64_t j = 0; j < length; ++j)
      c[j * step] = 0.0f;
  if (m == 1) // a row of A (stride lda when A is transposed) times op(B)
    g.cblasGemv(kRowMajor, transB ? kNoTrans : kTrans, i(transB ? n : k), i(transB ? k : n), alpha, b, i(ldb), a,
                i(transA ? lda : 1), beta, c, 1);
  else // op(A) times a column of op(B) (stride ldb unless B is transposed), into a column of C
    g.cblasGemv(kRowMajor, transA ? kTrans : kNoTrans, i(transA ? k : m), i(transA ? m : k), alpha, a, i(lda), b,
                i(transB ? 1 : ldb), beta, c, i(ldc));
  return true;
}

/// Each loaded library's SGEMM, in blas().libraries' order.
std::vector<GemmFn> sgemmFns;
void *oneDnn = nullptr;

/// C = alpha op(A) op(B) + beta C, row-major, with one library, on the calling thread alone.
void callGemm(const GemmFn &g, bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (callGemv(g, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  if (g.cblas) {
    g.cblas(kRowMajor, transA ? kTrans : kNoTrans, transB ? kTrans : kNoTrans, static_cast<int>(m),
            static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
            c, static_cast<int>(ldc));
    return;
  }
  // oneDNN parallelizes with OpenMP over as many threads as the caller's OpenMP setting allows: one here,
  // inside tec's pool (the setting is per thread; the caller's comes back after).
  const int previous = omp_get_max_threads();
  omp_set_num_threads(1);
  g.dnnl(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  omp_set_num_threads(previous);
}

/// The best OpenBLAS kernel family this CPU runs, by its features (the OS must save AVX-512 state too,
/// which __builtin_cpu_supports checks).
const char *coreTypeForThisCpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
  return nullptr;
}

/// Sets `name` to `value` (or unsets it) for the lifetime of the object, then restores what was there.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old, hadPrevious = true;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { hadPrevious ? setenv(name, previous.c_str(), 1) : unsetenv(name); }

private:
  const char *name;
  std::string previous;
  bool hadPrevious = false;
};

/// Where a wheel keeps the libraries tec loads with dlopen (which auditwheel cannot see): tec/cpu/.
constexpr const char *kBundleFolder = "cpu";

/// The folder of the binary this code is in (the Python extension, the tec executable).
std::string libraryFolder() { return kernels::folderOf(reinterpret_cast<const void *>(&libraryFolder)); }

/// The file a loaded library's `symbol` is in (what doctor reports), else the name it was loaded by.
template <typename Fn> std::string pathOf(Fn symbol, const std::string &name) {
  Dl_info info{};
  return dladdr(reinterpret_cast<const void *>(symbol), &info) && info.dli_fname ? info.dli_fname : name;
}

void loadOpenBlas(BlasInfo &info) {
  const char *forced = std::getenv("TEC_OPENBLAS_CORETYPE");
  const char *inherited = std::getenv("OPENBLAS_CORETYPE");
  const char *core = forced && *forced ? forced : coreTypeForThisCpu();
  if (inherited && !(forced && *forced) && (!core || std::string(inherited) != core))
    info.notes.push_back(std::string("OPENBLAS_CORETYPE=") + inherited +
                         " in the environment is not applied to tec's OpenBLAS (set TEC_OPENBLAS_CORETYPE to force "
                         "a kernel family)");
  // OpenBLAS reads both while it loads; the process's own values come back afterwards. Single-threaded
  // inside tec's pool: the pthreads build, with no threads of its own (the OpenMP build gives threads it
  // did not start fresh buffers on every call, ~10 ms for a 64x128x1024 GEMM).
  ScopedEnv coreType("OPENBLAS_CORETYPE", core);
  ScopedEnv threads("OPENBLAS_NUM_THREADS", "1");
  // A wheel's own copy (the pthreads build) first, then the system's.
  for (const std::string &path : kernels::bundledLibraryCandidates(
           libraryFolder(), kBundleFolder, "libopenblas.so.0",
           {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
            "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
            "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
            "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"})) {
    void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      continue;
    auto sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    if (!sgemm)
      continue;
    if (auto setThreads = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads")))
      setThreads(1); // tec's pool splits the GEMMs
    auto getConfig = reinterpret_cast<char *(*)()>(dlsym(lib, "openblas_get_config"));
    info.libraries.push_back({"OpenBLAS", pathOf(sgemm, path), getConfig ? getConfig() : "OpenBLAS"});
    sgemmFns.push_back({sgemm, reinterpret_cast<SgemvFn>(dlsym(lib, "cblas_sgemv")), nullptr});
    return;
  }
  info.notes.push_back("OpenBLAS not found (install libopenblas0-pthread or libopenblas0)");
}

/// Where to look for an optional library: the path in `variable`, if set, then `names` on the loader's path.
std::vector<std::string> candidatePaths(const char *variable, std::initializer_list<const char *> names) {
  std::vector<std::string> candidates;
  if (const char *path = std::getenv(variable); path && *path)
    candidates.push_back(path);
  candidates.insert(candidates.end(), names.begin(), names.end());
  return candidates;
}

/// MKL's single dynamic library, where one is installed: TEC_MKL (a path), the loader's search path, or the
/// active Python environment's lib folder (PyPI's `mkl`).
void loadMkl(BlasInfo &info) {
  std::vector<std::string> candidates = candidatePaths("TEC_MKL", {"libmkl_rt.so.2", "libmkl_rt.so.3", "libmkl_rt.so"});
  for (const char *prefix : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char *dir = std::getenv(prefix); dir && *dir)
      for (const char *name : {"/lib/libmkl_rt.so.2", "/lib/libmkl_rt.so.3"})
        candidates.push_back(std::string(dir) + name);
  for (const auto &path : candidates) {
    void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      continue;
    auto sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    auto setLayer = reinterpret_cast<int (*)(int)>(dlsym(lib, "MKL_Set_Threading_Layer"));
    if (!sgemm || !setLayer)
      continue;
    setLayer(1); // MKL_THREADING_SEQUENTIAL: tec's pool splits the GEMMs
    std::string config = "MKL";
    if (auto version = reinterpret_cast<void (*)(char *, int)>(dlsym(lib, "MKL_Get_Version_String"))) {
      char text[256] = {};
      version(text, sizeof(text) - 1);
      config = text;
    }
    info.libraries.push_back({"MKL", pathOf(sgemm, path), config});
    sgemmFns.push_back({sgemm, reinterpret_cast<SgemvFn>(dlsym(lib, "cblas_sgemv")), nullptr});
    return;
  }
  info.notes.push_back("MKL not found (optional: pip install mkl into the active environment, or TEC_MKL=path)");
}

/// oneDNN, where installed (Debian's libdnnl2 or 3, or TEC_ONEDNN=path): its JIT-compiled SGEMM for the
/// CPU's own ISA.
void loadOneDnn(BlasInfo &info) {
  std::vector<std::string> candidates = candidatePaths("TEC_ONEDNN", {});
  for (const char *soname : {"libdnnl.so.3", "libdnnl.so.2"}) // a wheel's copy, then the system's
    for (std::string &path : kernels::bundledLibraryCandidates(libraryFolder(), kBundleFolder, soname, {soname}))
      candidates.push_back(std::move(path));
  for (const auto &path : candidates) {
    void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      continue;
    auto sgemm = reinterpret_cast<DnnlSgemmFn>(dlsym(lib, "dnnl_sgemm"));
    if (!sgemm)
      continue;
    std::string config = "oneDNN";
    struct Version {
      int major, minor, patch;
      const char *hash;
      unsigned cpuRuntime, gpuRuntime;
    };
    if (auto version = reinterpret_cast<const Version *(*)()>(dlsym(lib, "dnnl_version")))
      if (const Version *v = version())
        config += " " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    info.libraries.push_back({"oneDNN", pathOf(sgemm, path), config});
    sgemmFns.push_back({nullptr, nullptr, sgemm});
    oneDnn = lib;
    return;
  }
  info.notes.push_back("oneDNN not found (optional: apt-get install libdnnl2, or TEC_ONEDNN=path)");
}

BlasInfo load() {
  BlasInfo info;
  const std::string only = std::getenv("TEC_BLAS") ? std::getenv("TEC_BLAS") : "";
  if (only.empty() || only == "openblas")
    loadOpenBlas(info);
  if (only.empty() || only == "onednn")
    loadOneDnn(info);
  if (only.empty() || only == "mkl")
    loadMkl(info);
  if (!only.empty() && only != "openblas" && only != "onednn" && only != "mkl")
    info.notes.push_back("TEC_BLAS=" + only + " is not one of openblas, onednn, mkl: no BLAS loaded");
  info.loaded = !info.libraries.empty();
  if (info.loaded) {
    info.library = info.libraries[0].file;
    info.config = info.libraries[0].config;
  } else {
    info.library = info.notes.empty() ? "no BLAS found" : info.notes.back();
  }
  return info;
}

/// This machine, for the table's name: the CPU's model and features.
std::string cpuIdentity() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, identity;
  while (std::getline(cpuinfo, line) && identity.size() < 4096)
    if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0) {
      if (identity.find(line) == std::string::npos)
        identity += line;
    }
  return identity;
}

/// The shape a measurement times for `shape`: itself, but with at most kMeasuredB elements of B (fewer of
/// its columns, a multiple of 16). A GEMM's B is a model's weight: timing a copy of a 256 MiB one (and its
/// packed copy) at prepare would double the memory a large model's weights take while it loads, and its
/// columns are independent work that the libraries run the same way.
GemmShape measuredShape(GemmShape shape) {
  constexpr int64_t kMeasuredB = int64_t(1) << 22;
  if (shape.k * shape.n > kMeasuredB)
    shape.n = std::min<int64_t>(shape.n, std::max<int64_t>(16, kMeasuredB / std::max<int64_t>(shape.k, 1) / 16 * 16));
  return shape;
}

/// Times each library on one GEMM of the shape (measuredShape's), alternating libraries over rounds (a busy
/// machine drifts); the fastest round of each counts. On this thread alone: the choice must not depend on
/// the thread count.
std::vector<double> measure(const GemmShape &shape) {
  SerialScope serial;
  const GemmShape s = measuredShape(shape);
  const size_t sizeA = s.m * s.k, sizeB = s.k * s.n, sizeC = s.m * s.n;
  std::vector<float> a(sizeA), b(sizeB), c(sizeC);
  for (size_t i = 0; i < sizeA; ++i)
    a[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
  for (size_t i = 0; i < sizeB; ++i)
    b[i] = static_cast<float>(i % 5) * 0.125f - 0.25f;
  const size_t libraries = sgemmFns.size(), kernels = PackedGemm::kernelCount();
  // B packed once by each of oneDNN's primitives, where it is constant: more candidates.
  std::vector<std::unique_ptr<PackedGemm>> packed(kernels);
  if (s.constantB && !s.transA)
    for (size_t i = 0; i < kernels; ++i)
      packed[i] = PackedGemm::create(PackedGemm::kKernels[i], s.transB, s.m, s.n, s.k, b.data(), s.transB ? s.k : s.n);
  std::vector<double> best(libraries + kernels, 1e300);
  for (size_t i = 0; i < kernels; ++i)
    if (!packed[i])
      best[libraries + i] = std::numeric_limits<double>::infinity();
  auto once = [&](size_t candidate) {
    auto start = std::chrono::steady_clock::now();
    if (candidate >= libraries)
      packed[candidate - libraries]->run(a.data(), c.data());
    else
      sgemm(static_cast<int>(candidate), s.transA, s.transB, s.m, s.n, s.k, 1.0f, a.data(), s.transA ? s.m : s.k,
            b.data(), s.transB ? s.k : s.n, 0.0f, c.data(), s.n);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  auto runs = [&](size_t candidate) { return candidate < libraries || packed[candidate - libraries]; };
  for (size_t candidate = 0; candidate < best.size(); ++candidate)
    if (runs(candidate))
      once(candidate); // warm: packing buffers, pages
  double spent = 0;
  for (int round = 0; round < 15 && (round < 3 || spent < 50.0); ++round)
    for (size_t candidate = 0; candidate < best.size(); ++candidate)
      if (runs(candidate)) {
        const double ms = once(candidate);
        best[candidate] = std::min(best[candidate], ms);
        spent += ms;
      }
  return best;
}

GemmTable &table() {
  static GemmTable instance = [] {
    const BlasInfo &info = blas();
    std::vector<std::string> names;
    for (const auto &l : info.libraries)
      names.push_back(l.name + " " + l.config);
    for (size_t i = 0; i < PackedGemm::kernelCount(); ++i)
      names.push_back(PackedGemm::name(PackedGemm::kKernels[i]));
    return GemmTable(names.size() > 1 ? machineTablePath("gemm", names) : "", names, measure);
  }();
  return instance;
}

} // namespace

const BlasInfo &blas() {
  static const BlasInfo info = load();
  return info;
}

std::string machineTablePath(const std::string &kind, const std::vector<std::string> &candidates) {
  if (cacheDirectory().empty())
    return "";
  uint64_t hash = 1469598103934665603ull; // FNV-1a of the machine and the candidates
  for (const std::string &part : {cpuIdentity(), std::accumulate(candidates.begin(), candidates.end(), std::string())})
    for (unsigned char ch : part)
      hash = (hash ^ ch) * 1099511628211ull;
  char name[64];
  std::snprintf(name, sizeof(name), "-%016llx.tsv", static_cast<unsigned long long>(hash));
  return cacheDirectory() + "/" + kind + name;
}

int gemmLibrary(const GemmShape &shape) {
  return blas().libraries.size() + PackedGemm::kernelCount() < 2 ? 0 : table().choose(shape);
}

void *oneDnnHandle() {
  blas();
  return oneDnn;
}

GemmSplit gemmSplit(int64_t m, int64_t n, int64_t k) {
  // A chunk pays for waking a helper and for its own call (~1 us, and a panel of the other operand packed
  // again) from ~2^20 multiply-adds on, each float read or written counting as 32 (a GEMV of few rows streams
  // B from memory: memory-bound, yet it splits). At most 8 chunks, measured on MobileNetV3 and EfficientNet at
  // 1 and 2 threads: 2^18 lost 10-15% at 1 thread, 2^21 left 2 threads idle. An even count of chunks within a
  // block of each other in size: 7 chunks of 96 columns (N = 672) or 3 left 2 threads at 4:3 or 2:1 (a
  // 14% or 33% longer step than an even split). At least 32 wide: 16 columns of a GEMM of 49 rows (the
  // BLAS's narrowest panel) ran 10% slower than 32.
  constexpr int64_t kChunkWork = int64_t(1) << 20, kMaxChunks = 8, kMinWidth = 32;
  const int64_t work = m * n * k + 32 * (m * k + k * n + m * n);
  const int64_t along = std::max(m, n);
  int64_t count = std::clamp<int64_t>(std::min(work / kChunkWork, along / kMinWidth), 1, kMaxChunks);
  count -= count > 1 ? count % 2 : 0;
  if (count == 1)
    return {GemmSplit::Whole, 1, std::max<int64_t>(n, 1)};
  return {n >= m ? GemmSplit::Columns : GemmSplit::Rows, count, along};
}

void runSplit(const GemmSplit &split, int64_t m, int64_t n, FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> call,
              const GemmChunkEpilogue &epilogue) {
  auto chunk = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const auto [i0, i1, j0, j1] = split.chunk(c, m, n);
      call(i0, i1, j0, j1);
      if (epilogue)
        epilogue(i0, i1, j0, j1);
    }
  };
  if (split.by != GemmSplit::Whole)
    return parallelFor(split.count, 1, chunk);
  call(0, m, 0, n);
  if (epilogue) // a small k can leave many rows
    parallelFor(m, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(n, 1)),
                [&](int64_t i0, int64_t i1) { epilogue(i0, i1, 0, n); });
}

std::string gemmTableDescription() {
  if (blas().libraries.size() + PackedGemm::kernelCount() < 2)
    return "one library: nothing to choose";
  if (!table().problem().empty())
    return table().problem();
  return table().path().empty() ? "kept in memory (no cache folder: set TEC_CACHE_DIR)"
                                : "measured per GEMM shape, kept in " + table().path();
}

void sgemm(int library, bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
           const GemmChunkEpilogue &epilogue) {
  blas(); // loads the libraries where no caller has yet (a kernel called directly, as a GPU test's reference)
  const GemmFn &fn = sgemmFns.at(library);
  auto call = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    callGemm(fn, transA, transB, i1 - i0, j1 - j0, k, alpha, a + (transA ? i0 : i0 * lda), lda,
             b + (transB ? j0 * ldb : j0), ldb, beta, c + i0 * ldc + j0, ldc);
  };
  runSplit(gemmSplit(m, n, k), m, n, call, epilogue);
}

} // namespace tec::kernels::cpu
