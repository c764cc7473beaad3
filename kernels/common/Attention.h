// Scaled dot-product attention's geometry and masking, shared by the CPU kernel and its CUDA twin so that
// both see the same scores: s[i, j] = scale * q_i . k_j, then the mask, then softmax over j.
#ifndef TEC_KERNELS_COMMON_ATTENTION_H
#define TEC_KERNELS_COMMON_ATTENTION_H

#include "kernels/common/HostDevice.h"

#include <cstdint>

namespace tec::kernels {

/// What masks the scores: nothing, an additive float mask, or a boolean one (true: the key takes part).
enum class AttentionMask { None, Additive, Boolean };

/// q [batch, heads, queries, headDim], k [batch, kvHeads, keys, headDim], v [batch, kvHeads, keys, valueDim],
/// output [batch, heads, queries, valueDim], logsumexp [batch, heads, queries] (f32). Query head h reads
/// K/V head h / (heads / kvHeads): grouped-query attention without repeating K and V. The mask broadcasts
/// to [batch, heads, queries, keys]: `maskStrides` are its element strides there, 0 along a broadcast dim.
struct AttentionShape {
  int64_t batch = 1, heads = 1, kvHeads = 1, queries = 1, keys = 1, headDim = 1, valueDim = 1;
  float scale = 1.0f;
  bool causal = false; // key j is visible to query i only when j <= i (PyTorch's is_causal)
  AttentionMask mask = AttentionMask::None;
  int64_t maskStrides[4] = {0, 0, 0, 0};

  TEC_HOST_DEVICE int64_t kvHeadOf(int64_t head) const { return head / (heads / kvHeads); }
  /// Where query row (b, h, i) starts in the mask; add j * maskStrides[3] for key j.
  TEC_HOST_DEVICE int64_t maskRow(int64_t b, int64_t h, int64_t i) const {
    return b * maskStrides[0] + h * maskStrides[1] + i * maskStrides[2];
  }
  /// The keys query i may see under the causal rule: [0, visibleKeys).
  TEC_HOST_DEVICE int64_t visibleKeys(int64_t i) const { return causal ? (i + 1 < keys ? i + 1 : keys) : keys; }
};

/// A score after masking: plus the additive mask's value, or -inf where a boolean mask hides the key.
TEC_HOST_DEVICE float maskedScore(float s, float additive, bool keep) {
  return keep ? s + additive : -__builtin_huge_valf();
}

} // namespace tec::kernels

#endif
