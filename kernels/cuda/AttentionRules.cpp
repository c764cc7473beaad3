#include "kernels/cuda/CudnnAttention.h"

namespace tec::kernels::cuda {

bool cudnnAttentionTakes(const AttentionSpec &spec, std::string &why) {
  const AttentionShape &a = spec.shape;
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
