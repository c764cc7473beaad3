// A GEMM whose B operand is constant (a weight during inference), prepared once with one of oneDNN's
// primitives: B is reordered at prepare into the blocked layout its kernels read (the same size), so a run
// streams A and C only, where sgemm packs B again on every call; at a batch of 64 rows that packing is a
// third of the GEMM (MLAS and oneDNN prepack weights for the same reason). Two primitives run it: oneDNN's
// matmul, and its convolution of a 1 x m image (A's rows its pixels) by a 1x1 kernel (B), whose direct
// kernels (jit_1x1, brgconv_1x1) run the tall GEMMs of small k that pointwise convolutions make 10-20%
// faster than its sgemm or matmul (on an AVX2 EPYC: 784 x 40 x 240 in 0.17 ms to 0.22). The chunks of the
// split that sgemm would use (kernels/cpu/Blas.h) run over tec's pool as unpacked GEMMs do: one primitive
// and packed B per chunk of columns, or one for every chunk of rows of a height, all of them reading one
// packed B. Which form runs a plan's GEMM is measured per shape, as between libraries (GemmTable.h). The
// primitive also applies what of the GEMM's epilogue it can with the same bits (Fused): a separate pass over
// a C that has left L2 cost 20-35% of a pointwise convolution's GEMM (12544x96x16: 0.61 ms with the bias and
// ReLU in the primitive, 0.77-0.84 in a pass after each chunk).
#ifndef TEC_KERNELS_CPU_PACKEDGEMM_H
#define TEC_KERNELS_CPU_PACKEDGEMM_H

#include "kernels/cpu/Blas.h"
#include "support/Activations.h"

#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace tec::kernels::cpu {

/// What a packed GEMM's primitive applies to each element of C before it stores it, in the order of linear()'s
/// epilogue (kernels/cpu/CpuKernels.h) and with its bits: a bias per column, ReLU, then a residual of C's
/// shape added. Other activations stay tec's (oneDNN's round differently); a residual in the storage the
/// result goes to stays tec's too (oneDNN reads such a sum through its reference loops only).
struct FusedEpilogue {
  bool bias = false;
  Epilogue activation = Epilogue::None;
  bool residual = false;
};

class PackedGemm {
public:
  enum class Kernel { Matmul, Convolution };
  static constexpr Kernel kKernels[] = {Kernel::Matmul, Kernel::Convolution};
  /// How the summary and the GEMM table name the kernel ("oneDNN matmul, B packed once").
  static const char *name(Kernel kernel);
  /// Why no GEMM can be packed here (oneDNN 2 not loaded), or empty when one can.
  static const std::string &unavailable();
  /// The kernels the GEMM table measures: kKernels, or none where unavailable().
  static size_t kernelCount() { return unavailable().empty() ? std::size(kKernels) : 0; }
  /// The kernel that gemmLibrary's choice names (the choices past blas().libraries), or none: a library.
  static std::optional<Kernel> ofChoice(int choice);
  /// What create has packed and never reads again: `count` floats of B from `first` (with transB, each
  /// chunk's rows of a split by columns as soon as they are packed, all of B at the end of another), so that
  /// a caller may let their memory go while it packs.
  using SourcePacked = std::function<void(const float *first, int64_t count)>;
  using Fused = FusedEpilogue;
  /// C[m, n] = A[m, k] op(B), B (k x n, or n x k with transB) packed now for `kernel`, applying what of
  /// `wanted` the kernel takes (fused() says what); null where unavailable() or oneDNN has only its reference
  /// loops for the shape.
  static std::unique_ptr<PackedGemm> create(Kernel kernel, bool transB, int64_t m, int64_t n, int64_t k,
                                            const float *b, int64_t ldb, const SourcePacked &sourcePacked = {},
                                            const Fused &wanted = {});
  ~PackedGemm();
  PackedGemm(const PackedGemm &) = delete;
  PackedGemm &operator=(const PackedGemm &) = delete;

  /// C = A op(B) (A row-major with k columns, C with n) with fused()'s bias and residual (else unread), then
  /// `epilogue` on each chunk while it is in cache.
  void run(const float *a, float *c, const float *bias = nullptr, const float *residual = nullptr,
           const GemmChunkEpilogue &epilogue = {}) const;
  Kernel kernel() const { return kernel_; }
  /// What the primitive applies: all that create was asked, the bias alone, or nothing.
  const Fused &fused() const { return fused_; }
  /// The kernel's name and what its primitive applies ("oneDNN 1x1 convolution, B packed once, with the bias,
  /// ReLU and residual add"), for the schedule and the profile.
  std::string description() const;

private:
  struct Prepared;
  struct Chunk;
  PackedGemm() = default;
  Kernel kernel_ = Kernel::Matmul;
  Fused fused_;
  int64_t m = 0, n = 0, k = 0;
  GemmSplit split{GemmSplit::Whole, 1, 1};
  std::vector<std::unique_ptr<Prepared>> prepared;
  std::vector<std::unique_ptr<Chunk>> chunks;
};

} // namespace tec::kernels::cpu

#endif
