// The geometry of 2-D convolutions and pools over [N, C, H, W] (1-D ones are H = 1), shared by the CPU
// and CUDA kernels so both walk the same windows.
#ifndef TEC_SUPPORT_WINDOW_H
#define TEC_SUPPORT_WINDOW_H

#include "support/HostDevice.h"

#include <cstdint>

namespace tec::kernels {

/// A sliding window: input [batch, channels, height, width] to output [batch, outChannels, outHeight,
/// outWidth], with zero (or -inf, for max pooling) padding around the input.
struct Window {
  int64_t batch = 1, channels = 1, height = 1, width = 1;
  int64_t outChannels = 1, outHeight = 1, outWidth = 1;
  int64_t kernelH = 1, kernelW = 1, strideH = 1, strideW = 1, padTop = 0, padLeft = 0, padBottom = 0, padRight = 0,
          dilationH = 1, dilationW = 1;
  int64_t groups = 1; // convolutions: channels and outChannels split into this many groups

  TEC_HOST_DEVICE int64_t inputRow(int64_t oy, int64_t ky) const { return oy * strideH - padTop + ky * dilationH; }
  TEC_HOST_DEVICE int64_t inputCol(int64_t ox, int64_t kx) const { return ox * strideW - padLeft + kx * dilationW; }
  TEC_HOST_DEVICE bool inside(int64_t iy, int64_t ix) const { return iy >= 0 && iy < height && ix >= 0 && ix < width; }
  /// Input channels per group: the weight's dim 1.
  TEC_HOST_DEVICE int64_t groupChannels() const { return channels / groups; }
  TEC_HOST_DEVICE int64_t groupOutChannels() const { return outChannels / groups; }
};

/// The window kernels: convolution forward and gradients, pools forward and gradients.
enum class WindowKind { Conv, ConvInputGrad, ConvWeightGrad, MaxPool, AvgPool, MaxPoolGrad, AvgPoolGrad };

/// The output length of one spatial dim (ONNX and PyTorch's rule): with ceil_mode a last window must
/// still start inside the input or its leading pad.
inline int64_t windowOutput(int64_t in, int64_t kernel, int64_t stride, int64_t padBegin, int64_t padEnd,
                            int64_t dilation, bool ceilMode) {
  const int64_t span = in + padBegin + padEnd - dilation * (kernel - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

/// Average pooling's divisor for one output: the window's cells inside the input, or (count_include_pad)
/// inside the input and its pads, never counting the overhang ceil_mode adds past the pads.
TEC_HOST_DEVICE int64_t averageDivisor(const Window &w, int64_t oy, int64_t ox, bool countIncludePad) {
  int64_t count = 0;
  for (int64_t ky = 0; ky < w.kernelH; ++ky)
    for (int64_t kx = 0; kx < w.kernelW; ++kx) {
      const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
      if (countIncludePad ? (iy >= -w.padTop && iy < w.height + w.padBottom && ix >= -w.padLeft && ix < w.width + w.padRight)
                          : w.inside(iy, ix))
        ++count;
    }
  return count;
}

} // namespace tec::kernels

#endif
