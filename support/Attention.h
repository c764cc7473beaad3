// Scaled dot-product attention's geometry and masking, shared by the CPU kernel and its CUDA twin so that
// both see the same scores: s[i, j] = scale * q_i . k_j, then the mask, then softmax over j.
#ifndef TEC_SUPPORT_ATTENTION_H
#define TEC_SUPPORT_ATTENTION_H

#include "support/Fp8.h"
#include "support/HostDevice.h"

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

/// FP8 attention's per-tensor scales, as cuDNN's FP8 fused attention takes them under delayed scaling:
/// q, k, v, out and dout hold FP8 codes, each worth code * its descale. The softmax probabilities go
/// through E4M3 with probsScale before they multiply V (forward) or dout (dv); the scores' gradient times
/// the attention scale (cuDNN's dP: d loss / d (Q K^T)) goes through `grads` with dprobsScale before it
/// multiplies K (dq) and Q (dk). Outputs are written
/// times their scale, for the cast to FP8 that follows.
struct AttentionFp8Scales {
  float descaleQ = 1, descaleK = 1, descaleV = 1, descaleOut = 1, descaleDout = 1;
  float probsScale = 1, probsDescale = 1, outScale = 1;
  float dprobsScale = 1, dprobsDescale = 1, dqScale = 1, dkScale = 1, dvScale = 1;
  Fp8Format grads = Fp8Format::E5M2;
};

/// The scales' values from their scalars (host or device pointers), in tec.attention_fp8's order (q, k, v
/// descales, the probabilities' scale and descale, out's scale) or tec.attention_fp8_grad's (q, k, v, out,
/// dout descales, the probabilities' scale and descale, dP's scale and descale, dq, dk, dv scales).
TEC_HOST_DEVICE AttentionFp8Scales attentionFp8Scales(const float *const *scales, bool grad, Fp8Format grads) {
  AttentionFp8Scales s;
  s.descaleQ = *scales[0], s.descaleK = *scales[1], s.descaleV = *scales[2];
  if (!grad) {
    s.probsScale = *scales[3], s.probsDescale = *scales[4], s.outScale = *scales[5];
    return s;
  }
  s.descaleOut = *scales[3], s.descaleDout = *scales[4], s.probsScale = *scales[5], s.probsDescale = *scales[6];
  s.dprobsScale = *scales[7], s.dprobsDescale = *scales[8];
  s.dqScale = *scales[9], s.dkScale = *scales[10], s.dvScale = *scales[11];
  s.grads = grads;
  return s;
}

/// The amaxes FP8 attention yields for the delayed scaling of what it quantizes: max p and max |out|
/// forward; max |dP| (ds times the attention scale), |dq|, |dk|, |dv| backward (each before its scale; NaN wins).
struct AttentionFp8Amaxes {
  float probs = 0, out = 0, dprobs = 0, dq = 0, dk = 0, dv = 0;
};

/// x as FP8 rounds it: the value of fp8(x * scale), saturated, times descale.
TEC_HOST_DEVICE float throughFp8(float x, float scale, float descale, Fp8Format format) {
  return fp8ToFloat(floatToFp8(x * scale, format), format) * descale;
}

} // namespace tec::kernels

#endif
