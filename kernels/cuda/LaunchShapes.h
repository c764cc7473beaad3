// How the CUDA kernels address memory and how they are launched, decided on the host in plain C++ (no
// CUDA needed), so that every launch shape is unit-tested on machines without a GPU: iteration spaces
// and operand strides, dimension coalescing (the contiguous fast paths), the two-stage reductions'
// grids and the transposes' tile grids.
#ifndef TEC_KERNELS_CUDA_LAUNCHSHAPES_H
#define TEC_KERNELS_CUDA_LAUNCHSHAPES_H

#include "support/HostDevice.h"

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace tec::kernels::cuda {

using Shape = std::vector<int64_t>;

inline constexpr int kMaxRank = 8;

/// An iteration space of up to kMaxRank dims.
struct Extent {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
};

/// How one operand is addressed over an Extent: element offset = base + sum(index[d] * strides[d]).
struct Strided {
  int64_t base = 0;
  int64_t strides[kMaxRank] = {};
};

/// Element offset of linear index `i` of `extent` in an operand addressed by `s` (the kernels' strided
/// and broadcast addressing). The loop runs over kMaxRank with constant indices: one bounded by the rank
/// would index the kernel's parameters at run time, and a GPU copies such a parameter to each thread's
/// local memory first (on an H200 a scalar-times-tensor multiply took 1.85 ms that way, 0.28 ms this way).
TEC_HOST_DEVICE int64_t offsetOf(const Extent &extent, const Strided &s, int64_t i) {
  int64_t offset = s.base;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int k = 0; k < kMaxRank; ++k) {
    const int d = kMaxRank - 1 - k; // the last dim first: it varies fastest
    if (d >= extent.rank)
      continue;
    const int64_t dim = extent.dims[d];
    if ((i | dim) >> 32 == 0) { // a 32-bit division where both fit: a fraction of a 64-bit one's instructions
      const uint32_t q = uint32_t(i) / uint32_t(dim);
      offset += (int64_t(uint32_t(i) - q * uint32_t(dim))) * s.strides[d];
      i = q;
    } else {
      offset += (i % dim) * s.strides[d];
      i /= dim;
    }
  }
  return offset;
}

/// False when the rank is beyond kMaxRank.
bool makeExtent(const Shape &shape, Extent &extent);
/// Row-major strides of `shape` broadcast (numpy rules, right-aligned) to `out`: 0 along broadcast dims.
Strided broadcastOperand(const Shape &shape, const Shape &out);
/// Row-major strides of `shape`.
Strided contiguous(const Shape &shape);
int64_t count(const Extent &extent);

/// Drops unit dims and merges neighbouring dims that every operand walks as one (stride[d] ==
/// stride[d+1] * dims[d+1]), so that kernels pay div/mod for as few dims as the layout needs; the
/// addresses of every index stay the same.
void coalesce(Extent &extent, std::initializer_list<Strided *> operands);
/// Whether `s` addresses the extent's linear index i at s.base + i (no div/mod needed).
bool isContiguous(const Extent &extent, const Strided &s);

/// A reduction's launch. Rows: each output sums a contiguous run (x[base(o) + r]). Columns: outputs are
/// contiguous and the reduced dim strides over them (a bias gradient, the sum of a matrix's rows):
/// threads walk the outputs, coalesced. General: any strides. `splits` > 1 cuts each output's reduced
/// range over that many blocks (a full reduction fills the GPU, not one SM) whose partial sums
/// (`partials` of them, 8 bytes each: double or int64) a second kernel adds in a fixed order, so the
/// result does not depend on timing.
struct ReductionPlan {
  enum class Kind { Rows, Columns, General } kind = Kind::General;
  int64_t outputs = 0, reducedCount = 0;
  int64_t splits = 1;
  int64_t columnStride = 0; // Columns: the reduced dim's stride
  unsigned gridX = 1, gridY = 1;
  int64_t partials = 0;
};
inline constexpr int kReduceThreads = 256;
/// At most this many blocks per SM are worth launching for a reduction; each block takes at least
/// kMinPerBlock elements of one output.
inline constexpr int64_t kReduceBlocksPerSm = 4, kMinPerBlock = 4096;
/// `kept`/`reduced` and their strides after coalescing (done here); `multiprocessors` of the GPU.
ReductionPlan planReduction(Extent &kept, Strided &keptStrides, Extent &reduced, Strided &reducedStrides,
                            int multiprocessors);

/// Blocks of `threads` for a grid-stride kernel that ends each block with one atomic on one address (an
/// amax): as many as the GPU holds at once (2048 threads per multiprocessor), fewer where the elements
/// need fewer. More only queue on that address: on an H200 a 16M-element quantize took 0.197 ms with
/// 65,535 blocks, 0.069 ms with these.
int atomicGridBlocks(int64_t n, int threads, int multiprocessors);

/// The grid over [rows, cols] in square tiles of `tile`: the long dimension (rows, which can be millions
/// of tokens) on x, whose limit is 2^31-1; column tiles on y, capped at 65,535 and walked by a
/// grid-stride loop beyond that.
struct TileGrid {
  unsigned x = 1, y = 1;
};
TileGrid tileGrid(int64_t rows, int64_t cols, int tile);
/// A 2-D transpose of x[rows, cols] in 32x32 tiles.
inline constexpr int kTile = 32;
inline TileGrid transposeGrid(int64_t rows, int64_t cols) { return tileGrid(rows, cols, kTile); }
/// tec's block-scaled FP8 GEMM: y[m, n] in 64x64 output tiles of 16x16 threads, each thread 4x4 outputs.
inline constexpr int kBlockGemmTile = 64, kBlockGemmThreads = 16;
inline TileGrid blockGemmGrid(int64_t m, int64_t n) { return tileGrid(m, n, kBlockGemmTile); }

} // namespace tec::kernels::cuda

#endif
