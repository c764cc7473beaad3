#include "kernels/cuda/CudnnAttention.h"

namespace tec::kernels::cuda {

namespace {

/// cuDNN's FP8 attention on Hopper: E4M3 in and out, head sizes multiples of 16 up to 256 forward and 128
/// backward (exactly 128 there on sm_90, which cuDNN checks as it builds), no mask but the causal one.
bool cudnnFp8AttentionTakes(const AttentionSpec &spec, std::string &why) {
  const AttentionShape &a = spec.shape;
  const int64_t largest = spec.grad ? 128 : 256;
  for (int64_t d : {a.headDim, a.valueDim})
    if (d % 16 || d > largest) {
      why = "cuDNN's FP8 attention takes head sizes that are multiples of 16 up to " + std::to_string(largest) +
            ", not " + std::to_string(d);
      return false;
    }
  if (a.mask != AttentionMask::None) {
    why = "cuDNN's FP8 attention takes no mask but the causal one";
    return false;
  }
  return true;
}

} // namespace

bool cudnnAttentionTakes(const AttentionSpec &spec, std::string &why) {
  const AttentionShape &a = spec.shape;
  if (spec.fp8)
    return cudnnFp8AttentionTakes(spec, why);
  if (spec.type != ElementType::BF16 && spec.type != ElementType::F16) {
    why = "cuDNN's fused attention takes bf16 or f16, not f32";
    return false;
  }
  const int64_t largest = spec.grad ? 128 : 256;
  for (int64_t d : {a.headDim, a.valueDim})
    if (d % 8 || d > largest) {
      why = "cuDNN's fused attention takes head sizes that are multiples of 8 up to " + std::to_string(largest) +
            ", not " + std::to_string(d);
      return false;
    }
  if (a.mask == AttentionMask::Boolean) {
    why = "cuDNN's fused attention takes no boolean mask";
    return false;
  }
  if (a.mask == AttentionMask::Additive && ((a.queries > 1 && !a.maskStrides[2]) || (a.keys > 1 && !a.maskStrides[3]))) {
    why = "cuDNN's attention bias spans queries and keys; this mask broadcasts along one of them";
    return false;
  }
  return true;
}

} // namespace tec::kernels::cuda
