// A GEMM whose B operand is constant (a weight during inference), prepared once with oneDNN's matmul
// primitive: B is reordered at prepare into the blocked layout oneDNN's kernels read (the same size), so a
// run streams A and C only, where sgemm packs B again on every call; at a batch of 64 rows that packing is
// a third of the GEMM (MLAS and oneDNN prepack weights for the same reason). One primitive per chunk of the
// split that sgemm would use (kernels/cpu/Blas.h), so chunks run over tec's pool as unpacked GEMMs do. Which
// form runs a plan's GEMM is measured per shape, as between libraries (GemmTable.h).
#ifndef TEC_KERNELS_CPU_PACKEDGEMM_H
#define TEC_KERNELS_CPU_PACKEDGEMM_H

#include "kernels/cpu/Blas.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tec::kernels::cpu {

class PackedGemm {
public:
  /// Why no GEMM can be packed here (oneDNN 2's matmul primitive not loaded), or empty when one can.
  static const std::string &unavailable();
  /// What create has packed and never reads again: `count` floats of B from `first` (with transB, each
  /// chunk's rows as soon as they are packed), so that a caller may let their memory go while it packs.
  using SourcePacked = std::function<void(const float *first, int64_t count)>;
  /// C[m, n] = A[m, k] op(B), B (k x n, or n x k with transB) packed now; null where unavailable() or the
  /// shape splits by rows (a large m pays the per-call packing back).
  static std::unique_ptr<PackedGemm> create(bool transB, int64_t m, int64_t n, int64_t k, const float *b, int64_t ldb,
                                            const SourcePacked &sourcePacked = {});
  ~PackedGemm();
  PackedGemm(const PackedGemm &) = delete;
  PackedGemm &operator=(const PackedGemm &) = delete;

  /// C = A op(B) (A row-major with k columns, C with n), then `epilogue` on each chunk while it is in cache.
  void run(const float *a, float *c, const GemmChunkEpilogue &epilogue = {}) const;

private:
  struct Chunk;
  PackedGemm() = default;
  int64_t m = 0;
  GemmSplit split{GemmSplit::Whole, 1, 1};
  std::vector<std::unique_ptr<Chunk>> chunks;
};

} // namespace tec::kernels::cpu

#endif
