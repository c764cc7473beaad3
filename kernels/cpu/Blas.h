// The CPU GEMM: OpenBLAS, and oneDNN and MKL where they are installed, loaded by tec at first use rather than
// at program start, and run single-threaded inside the chunks of tec's thread pool (kernels/cpu/ThreadPool.h):
// a BLAS's own threads would wait at a barrier for one another, which a busy machine turns into a time slice
// per GEMM.
//
// OpenBLAS's kernels are chosen from the CPU's features, not its model number: Debian's 0.3.21 does not
// know Zen 4 or Sapphire Rapids and runs AVX2 (or generic SSE3) kernels there, half the speed of its
// AVX-512 ones. An OPENBLAS_CORETYPE inherited from the environment is meant for the programs that link
// OpenBLAS (numpy pinned to one kernel family, say) and is not applied to tec's private copy;
// TEC_OPENBLAS_CORETYPE forces tec's.
//
// With several libraries loaded, each GEMM shape a plan runs goes to the fastest, measured once per
// machine (kernels/cpu/GemmTable.h); TEC_BLAS=openblas|onednn|mkl forces one.
#ifndef TEC_KERNELS_CPU_BLAS_H
#define TEC_KERNELS_CPU_BLAS_H

#include "kernels/cpu/FunctionRef.h"
#include "kernels/cpu/GemmTable.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tec::kernels::cpu {

struct BlasLibrary {
  std::string name;   // "OpenBLAS", "oneDNN", "MKL"
  std::string file;   // the file loaded
  std::string config; // its version and kernels
};

struct BlasInfo {
  bool loaded = false;
  std::string library; // the first library's file, or why none could be loaded
  std::string config;  // the first library's version and kernels
  /// Every library loaded, the default (OpenBLAS) first.
  std::vector<BlasLibrary> libraries;
  /// How the libraries were set up or chosen, for `tec doctor`: the kernels and why, libraries looked for.
  std::vector<std::string> notes;
};

/// Loads the BLAS libraries on first call; later calls return the same answer.
const BlasInfo &blas();

/// The library for a GEMM of this shape (an index into blas().libraries): the measured table's choice.
int gemmLibrary(const GemmShape &shape);
/// Where the measured choices are kept, or why they are not (one library, or a path that cannot be written).
std::string gemmTableDescription();

/// Called on each chunk of C right after the BLAS wrote it, while it is in cache: rows [i0, i1), columns
/// [j0, j1) (a GEMM epilogue: bias, activation).
using GemmChunkEpilogue = FunctionRef<void(int64_t i0, int64_t i1, int64_t j0, int64_t j1)>;

/// How a GEMM spreads over tec's pool: whole below the work a split pays back, else `count` chunks of C's
/// columns (a GEMM of few rows: a small batch) or rows, each a whole number of 16-element blocks but the
/// last, their sizes within a block of each other. Fixed by the shape, not the thread count.
struct GemmSplit {
  static constexpr int64_t kAlign = 16; // a vector of floats; packed B's panels
  enum By { Whole, Columns, Rows } by;
  int64_t count;
  int64_t along; // the split dim's length (n where Whole)
  /// Where chunk c starts along the split dim (c = count: its end).
  int64_t start(int64_t c) const {
    const int64_t blocks = (along + kAlign - 1) / kAlign;
    return std::min(along, blocks * c / count * kAlign);
  }
  /// Chunk c of an m x n C: rows [i0, i1), columns [j0, j1).
  struct Bounds {
    int64_t i0, i1, j0, j1;
  };
  Bounds chunk(int64_t c, int64_t m, int64_t n) const {
    if (by == Whole)
      return {0, m, 0, n};
    const int64_t begin = start(c), end = start(c + 1);
    return by == Columns ? Bounds{0, m, begin, end} : Bounds{begin, end, 0, n};
  }
};
GemmSplit gemmSplit(int64_t m, int64_t n, int64_t k);
/// call(i0, i1, j0, j1) on each chunk of C the split makes, over the pool, each followed by `epilogue`.
void runSplit(const GemmSplit &split, int64_t m, int64_t n, FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> call,
              const GemmChunkEpilogue &epilogue);
/// Where choices measured on this machine among `candidates` are kept (ChoiceTable): a file of the cache
/// folder named for `kind`, the processor and the candidates; empty without a cache folder.
std::string machineTablePath(const std::string &kind, const std::vector<std::string> &candidates);
/// The oneDNN library tec loaded (dlopen's handle), or null.
void *oneDnnHandle();

/// Row-major C = alpha op(A) op(B) + beta C with `library` (blas().libraries). Large GEMMs split the longer of
/// C's dims into chunks fixed by the shape (not the thread count), one BLAS call each, over the pool: a GEMM
/// of 64 rows (a small batch) splits over its columns. `epilogue`, when set, runs on each chunk.
void sgemm(int library, bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
           const GemmChunkEpilogue &epilogue = {});

/// The same with the default library: the small GEMMs inside attention and convolution blocks.
inline void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  sgemm(0, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// A plan's GEMM: with the library the measured table chooses for its shape.
inline void planSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                      const GemmChunkEpilogue &epilogue = {}) {
  sgemm(gemmLibrary({transA, transB, m, n, k}), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
        epilogue);
}

} // namespace tec::kernels::cpu

#endif
