// Optimizer sharding (ZeRO stage 1): how a tensor is split over the ranks, in one place for the IR's
// verifiers, the train-step builder, both backends and checkpoints. A tensor of `elements` values is one
// flat vector, zero-padded to `ranks * k` with `k = shardElements(elements, ranks)`; rank r holds
// `[r k, (r + 1) k)`.
#ifndef TEC_SUPPORT_SHARDING_H
#define TEC_SUPPORT_SHARDING_H

#include <algorithm>
#include <cstdint>

namespace tec {

inline int64_t shardElements(int64_t elements, int64_t ranks) { return (elements + ranks - 1) / ranks; }

/// Rank `rank`'s shard of `whole` (its padding zeros included) into `shard`.
inline void takeShard(const float *whole, int64_t elements, int64_t ranks, int64_t rank, float *shard) {
  const int64_t k = shardElements(elements, ranks), begin = std::min(rank * k, elements);
  const int64_t end = std::min(begin + k, elements);
  std::fill(std::copy(whole + begin, whole + end, shard), shard + k, 0.0f);
}

} // namespace tec

#endif // TEC_SUPPORT_SHARDING_H
