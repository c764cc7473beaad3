// tec's own convolutions and pools with their gradients (where cuDNN is not used).
#include "kernels/cuda/Common.cuh"

namespace tec::kernels::cuda {

namespace {

/// Convolutions and pools, one thread per output element of each kernel (direct loops: tec's own kernels,
/// where cuDNN is not used).
__global__ void convKernel(Window w, ConstRef x, ConstRef weight, ConstRef bias, Ref y) {
  const int64_t n = w.batch * w.outChannels * w.outHeight * w.outWidth;
  TEC_GRID_LOOP(i, n) {
    const int64_t ox = i % w.outWidth, oy = (i / w.outWidth) % w.outHeight, m = (i / (w.outWidth * w.outHeight)) % w.outChannels,
                  b = i / (w.outWidth * w.outHeight * w.outChannels);
    const int64_t g = m / w.groupOutChannels();
    float sum = bias.data ? load(bias, m) : 0.0f;
    for (int64_t c = 0; c < w.groupChannels(); ++c)
      for (int64_t ky = 0; ky < w.kernelH; ++ky)
        for (int64_t kx = 0; kx < w.kernelW; ++kx) {
          const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
          if (w.inside(iy, ix))
            sum += load(x, ((b * w.channels + g * w.groupChannels() + c) * w.height + iy) * w.width + ix) *
                   load(weight, ((m * w.groupChannels() + c) * w.kernelH + ky) * w.kernelW + kx);
        }
    store(y, i, sum);
  }
}

/// The output position whose window puts kernel tap k on input coordinate `in`, or -1.
__device__ int64_t windowOrigin(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation, int64_t outSize) {
  const int64_t t = in + pad - k * dilation;
  if (t < 0 || t % stride)
    return -1;
  return t / stride < outSize ? t / stride : -1;
}

__global__ void convInputGradKernel(Window w, ConstRef dy, ConstRef weight, Ref dx) {
  const int64_t n = w.batch * w.channels * w.height * w.width;
  TEC_GRID_LOOP(i, n) {
    const int64_t ix = i % w.width, iy = (i / w.width) % w.height, c = (i / (w.width * w.height)) % w.channels,
                  b = i / (w.width * w.height * w.channels);
    const int64_t g = c / w.groupChannels(), cg = c % w.groupChannels();
    float sum = 0.0f;
    for (int64_t ky = 0; ky < w.kernelH; ++ky) {
      const int64_t oy = windowOrigin(iy, ky, w.strideH, w.padTop, w.dilationH, w.outHeight);
      if (oy < 0)
        continue;
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const int64_t ox = windowOrigin(ix, kx, w.strideW, w.padLeft, w.dilationW, w.outWidth);
        if (ox < 0)
          continue;
        for (int64_t mg = 0; mg < w.groupOutChannels(); ++mg) {
          const int64_t m = g * w.groupOutChannels() + mg;
          sum += load(dy, ((b * w.outChannels + m) * w.outHeight + oy) * w.outWidth + ox) *
                 load(weight, ((m * w.groupChannels() + cg) * w.kernelH + ky) * w.kernelW + kx);
        }
      }
    }
    store(dx, i, sum);
  }
}

/// One thread per weight element sums over the batch and positions in order (deterministic).
__global__ void convWeightGradKernel(Window w, ConstRef dy, ConstRef x, Ref dweight) {
  const int64_t n = w.outChannels * w.groupChannels() * w.kernelH * w.kernelW;
  TEC_GRID_LOOP(i, n) {
    const int64_t kx = i % w.kernelW, ky = (i / w.kernelW) % w.kernelH, cg = (i / (w.kernelW * w.kernelH)) % w.groupChannels(),
                  m = i / (w.kernelW * w.kernelH * w.groupChannels());
    const int64_t c = (m / w.groupOutChannels()) * w.groupChannels() + cg;
    float sum = 0.0f;
    for (int64_t b = 0; b < w.batch; ++b)
      for (int64_t oy = 0; oy < w.outHeight; ++oy)
        for (int64_t ox = 0; ox < w.outWidth; ++ox) {
          const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
          if (w.inside(iy, ix))
            sum += load(dy, ((b * w.outChannels + m) * w.outHeight + oy) * w.outWidth + ox) *
                   load(x, ((b * w.channels + c) * w.height + iy) * w.width + ix);
        }
    store(dweight, i, sum);
  }
}

/// The first maximum of one pool window (as the CPU's), as an input offset within its plane; -1 if empty.
__device__ int64_t windowArgmax(const Window &w, ConstRef x, int64_t plane, int64_t oy, int64_t ox) {
  int64_t best = -1;
  float bestValue = -INFINITY;
  for (int64_t ky = 0; ky < w.kernelH; ++ky)
    for (int64_t kx = 0; kx < w.kernelW; ++kx) {
      const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
      if (!w.inside(iy, ix))
        continue;
      const float v = load(x, plane + iy * w.width + ix);
      if (best < 0 || v > bestValue || (v != v && bestValue == bestValue)) {
        best = iy * w.width + ix;
        bestValue = v;
      }
    }
  return best;
}

__global__ void poolKernel(Window w, bool max, bool countIncludePad, ConstRef x, Ref y) {
  const int64_t n = w.batch * w.channels * w.outHeight * w.outWidth;
  TEC_GRID_LOOP(i, n) {
    const int64_t ox = i % w.outWidth, oy = (i / w.outWidth) % w.outHeight, p = i / (w.outWidth * w.outHeight);
    const int64_t plane = p * w.height * w.width;
    float acc = max ? -INFINITY : 0.0f;
    for (int64_t ky = 0; ky < w.kernelH; ++ky)
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
        if (!w.inside(iy, ix))
          continue;
        const float v = load(x, plane + iy * w.width + ix);
        acc = max ? ((v > acc || v != v) ? v : acc) : acc + v;
      }
    if (!max)
      acc /= static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
    store(y, i, acc);
  }
}

/// One thread per input element gathers from the windows that cover it (no atomics).
__global__ void poolGradKernel(Window w, bool max, bool countIncludePad, ConstRef dy, ConstRef x, Ref dx) {
  const int64_t n = w.batch * w.channels * w.height * w.width;
  TEC_GRID_LOOP(i, n) {
    const int64_t ix = i % w.width, iy = (i / w.width) % w.height, p = i / (w.width * w.height);
    const int64_t plane = p * w.height * w.width;
    float sum = 0.0f;
    for (int64_t ky = 0; ky < w.kernelH; ++ky) {
      const int64_t oy = windowOrigin(iy, ky, w.strideH, w.padTop, w.dilationH, w.outHeight);
      if (oy < 0)
        continue;
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const int64_t ox = windowOrigin(ix, kx, w.strideW, w.padLeft, w.dilationW, w.outWidth);
        if (ox < 0)
          continue;
        const float g = load(dy, (p * w.outHeight + oy) * w.outWidth + ox);
        if (max)
          sum += windowArgmax(w, x, plane, oy, ox) == iy * w.width + ix ? g : 0.0f;
        else
          sum += g / static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
      }
    }
    store(dx, i, sum);
  }
}

} // namespace

void window(WindowKind kind, const Window &w, ConstRef a, ConstRef b, ConstRef bias, Ref out, bool countIncludePad,
            void *stream) {
  auto s = asStream(stream);
  const int64_t images = w.batch * w.channels * w.height * w.width;
  switch (kind) {
  case WindowKind::Conv: {
    const int64_t n = w.batch * w.outChannels * w.outHeight * w.outWidth;
    if (n)
      convKernel<<<blocksFor(n), kThreads, 0, s>>>(w, a, b, bias, out);
    return;
  }
  case WindowKind::ConvInputGrad:
    if (images)
      convInputGradKernel<<<blocksFor(images), kThreads, 0, s>>>(w, a, b, out);
    return;
  case WindowKind::ConvWeightGrad: {
    const int64_t n = w.outChannels * w.groupChannels() * w.kernelH * w.kernelW;
    if (n)
      convWeightGradKernel<<<blocksFor(n), kThreads, 0, s>>>(w, a, b, out);
    return;
  }
  case WindowKind::MaxPool:
  case WindowKind::AvgPool: {
    const int64_t n = w.batch * w.channels * w.outHeight * w.outWidth;
    if (n)
      poolKernel<<<blocksFor(n), kThreads, 0, s>>>(w, kind == WindowKind::MaxPool, countIncludePad, a, out);
    return;
  }
  case WindowKind::MaxPoolGrad:
  case WindowKind::AvgPoolGrad:
    if (images)
      poolGradKernel<<<blocksFor(images), kThreads, 0, s>>>(w, kind == WindowKind::MaxPoolGrad, countIncludePad, a, b,
                                                            out);
    return;
  }
}

} // namespace tec::kernels::cuda
