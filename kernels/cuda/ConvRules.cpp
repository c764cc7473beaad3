// Which convolutions cuDNN's convolution API takes: plain C++ (no CUDA), so the CUDA backend's choice
// between cuDNN and tec's window kernels is unit-tested without a GPU (tests/unit/LaunchShapesTest).
#include "kernels/cuda/Cudnn.h"

namespace tec::kernels::cuda {

bool cudnnTakes(const ConvSpec &spec, std::string &why) {
  const Window &w = spec.window;
  if (spec.kind != WindowKind::Conv && spec.kind != WindowKind::ConvInputGrad &&
      spec.kind != WindowKind::ConvWeightGrad) {
    why = "not a convolution";
    return false;
  }
  if (spec.type != ElementType::F32 && spec.type != ElementType::F16 && spec.type != ElementType::BF16) {
    why = "cuDNN convolutions take f32, f16 or bf16";
    return false;
  }
  if (w.padTop != w.padBottom || w.padLeft != w.padRight) {
    why = "pads differ between the two sides of a dim (cuDNN's convolution API has one pad per dim)";
    return false;
  }
  if (w.groups < 1 || w.channels % w.groups || w.outChannels % w.groups) {
    why = "channels do not split into the groups";
    return false;
  }
  if (w.batch * w.channels * w.height * w.width == 0 || w.outHeight * w.outWidth == 0) {
    why = "an empty tensor";
    return false;
  }
  return true;
}

} // namespace tec::kernels::cuda
