#include "kernels/cuda/CudnnAttention.h"

namespace tec::kernels::cuda {

namespace {

/// cuDNN's FP8 attention (Hopper and newer): E4M3 in and out, head sizes multiples of 16 up to 256 forward;
/// backward exactly 128 on Hopper, multiples of 16 up to 128 (or Q/K 192 with V 128) on Blackwell and newer;
/// no mask but the causal one.
bool cudnnFp8AttentionTakes(const AttentionSpec &spec, std::string &why) {
  const AttentionShape &a = spec.shape;
  const std::string arch = "sm_" + std::to_string(spec.sm);
  if (spec.sm < 90) {
    why = "cuDNN's FP8 attention needs Hopper (sm_90) or newer, not " + arch;
    return false;
  }
  if (spec.grad && spec.sm < 100) {
    if (a.headDim != 128 || a.valueDim != 128) {
      why = "cuDNN's FP8 attention backward on " + arch + " takes head size 128 only, not " +
            std::to_string(a.headDim) + (a.valueDim != a.headDim ? "/" + std::to_string(a.valueDim) : "");
      return false;
    }
  } else {
    const bool wideKeys = spec.grad && a.headDim == 192 && a.valueDim == 128;
    const int64_t largest = spec.grad ? 128 : 256;
    for (int64_t d : {a.headDim, a.valueDim})
      if (d % 16 || (d > largest && !wideKeys)) {
        why = "cuDNN's FP8 attention " + std::string(spec.grad ? "backward" : "forward") + " on " + arch +
              " takes head sizes that are multiples of 16 up to " + std::to_string(largest) + ", not " +
              std::to_string(d);
        return false;
      }
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
