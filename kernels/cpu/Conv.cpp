// Convolutions as im2col + BLAS GEMMs per image and group (forward, and both gradients: the input's as
// GEMM + col2im, the weight's accumulated over the batch); pools as direct loops over their windows.
#include "kernels/cpu/CpuKernels.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/Clones.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tec::kernels::cpu {

namespace {

/// Rows (group channel, ky, kx) by columns (oy, ox) of one image's group: the patches a GEMM multiplies.
void im2col(const Window &w, const float *image, float *col) {
  const int64_t columns = w.outHeight * w.outWidth;
  for (int64_t c = 0; c < w.groupChannels(); ++c)
    for (int64_t ky = 0; ky < w.kernelH; ++ky)
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        float *row = col + ((c * w.kernelH + ky) * w.kernelW + kx) * columns;
        for (int64_t oy = 0; oy < w.outHeight; ++oy)
          for (int64_t ox = 0; ox < w.outWidth; ++ox) {
            const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
            row[oy * w.outWidth + ox] = w.inside(iy, ix) ? image[(c * w.height + iy) * w.width + ix] : 0.0f;
          }
      }
}

/// The adjoint of im2col: each patch value added back where it was read.
void col2im(const Window &w, const float *col, float *image) {
  const int64_t columns = w.outHeight * w.outWidth;
  for (int64_t c = 0; c < w.groupChannels(); ++c)
    for (int64_t ky = 0; ky < w.kernelH; ++ky)
      for (int64_t kx = 0; kx < w.kernelW; ++kx) {
        const float *row = col + ((c * w.kernelH + ky) * w.kernelW + kx) * columns;
        for (int64_t oy = 0; oy < w.outHeight; ++oy)
          for (int64_t ox = 0; ox < w.outWidth; ++ox) {
            const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
            if (w.inside(iy, ix))
              image[(c * w.height + iy) * w.width + ix] += row[oy * w.outWidth + ox];
          }
      }
}

struct GroupView {
  int64_t patch, columns, inStride, outStride, weightStride;
};

GroupView groupView(const Window &w) {
  const int64_t patch = w.groupChannels() * w.kernelH * w.kernelW, columns = w.outHeight * w.outWidth;
  return {patch, columns, w.groupChannels() * w.height * w.width, w.groupOutChannels() * columns,
          w.groupOutChannels() * patch};
}

std::vector<float> &scratch(size_t n) {
  thread_local std::vector<float> buffer; // grows to the largest patch matrix, then is reused
  if (buffer.size() < n)
    buffer.resize(n);
  return buffer;
}

} // namespace

void conv(const Window &w, const float *x, const float *weight, const float *bias, float *y) {
  const GroupView v = groupView(w);
  float *col = scratch(v.patch * v.columns).data();
  for (int64_t n = 0; n < w.batch; ++n)
    for (int64_t g = 0; g < w.groups; ++g) {
      im2col(w, x + (n * w.groups + g) * v.inStride, col);
      float *out = y + (n * w.groups + g) * v.outStride;
      sgemm(false, false, w.groupOutChannels(), v.columns, v.patch, 1.0f, weight + g * v.weightStride, v.patch, col,
            v.columns, 0.0f, out, v.columns);
      if (bias)
        for (int64_t m = 0; m < w.groupOutChannels(); ++m)
          for (int64_t i = 0; i < v.columns; ++i)
            out[m * v.columns + i] += bias[g * w.groupOutChannels() + m];
    }
}

void convChannelsLast(const Window &w, const float *x, const float *weight, const float *bias, float *y) {
  // The NCHW kernel between two transposes: the fallback where oneDNN's direct kernels cannot run.
  thread_local std::vector<float> in, out;
  in.resize(w.batch * w.channels * w.height * w.width);
  out.resize(w.batch * w.outChannels * w.outHeight * w.outWidth);
  transpose(x, {w.batch, w.height, w.width, w.channels}, {0, 3, 1, 2}, in.data(), sizeof(float));
  conv(w, in.data(), weight, bias, out.data());
  transpose(out.data(), {w.batch, w.outChannels, w.outHeight, w.outWidth}, {0, 2, 3, 1}, y, sizeof(float));
}

void convInputGrad(const Window &w, const float *dy, const float *weight, float *dx) {
  const GroupView v = groupView(w);
  float *col = scratch(v.patch * v.columns).data();
  std::fill(dx, dx + w.batch * w.channels * w.height * w.width, 0.0f);
  for (int64_t n = 0; n < w.batch; ++n)
    for (int64_t g = 0; g < w.groups; ++g) {
      sgemm(true, false, v.patch, v.columns, w.groupOutChannels(), 1.0f, weight + g * v.weightStride, v.patch,
            dy + (n * w.groups + g) * v.outStride, v.columns, 0.0f, col, v.columns);
      col2im(w, col, dx + (n * w.groups + g) * v.inStride);
    }
}

void convWeightGrad(const Window &w, const float *dy, const float *x, float *dweight) {
  const GroupView v = groupView(w);
  float *col = scratch(v.patch * v.columns).data();
  std::fill(dweight, dweight + w.outChannels * v.patch, 0.0f);
  // Images in order: the batch sum is the same every run.
  for (int64_t n = 0; n < w.batch; ++n)
    for (int64_t g = 0; g < w.groups; ++g) {
      im2col(w, x + (n * w.groups + g) * v.inStride, col);
      sgemm(false, true, w.groupOutChannels(), v.patch, v.columns, 1.0f, dy + (n * w.groups + g) * v.outStride,
            v.columns, col, v.columns, 1.0f, dweight + g * v.weightStride, v.patch);
    }
}

void pool(const Window &w, bool max, bool countIncludePad, const float *x, float *y) {
  const int64_t planes = w.batch * w.channels;
  parallelLoop(planes, planes * w.outHeight * w.outWidth, [&](int64_t p) {
    const float *plane = x + p * w.height * w.width;
    for (int64_t oy = 0; oy < w.outHeight; ++oy)
      for (int64_t ox = 0; ox < w.outWidth; ++ox) {
        float acc = max ? -INFINITY : 0.0f;
        for (int64_t ky = 0; ky < w.kernelH; ++ky)
          for (int64_t kx = 0; kx < w.kernelW; ++kx) {
            const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
            if (!w.inside(iy, ix))
              continue;
            const float v = plane[iy * w.width + ix];
            acc = max ? ((v > acc || v != v) ? v : acc) : acc + v;
          }
        if (!max)
          acc /= static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
        y[(p * w.outHeight + oy) * w.outWidth + ox] = acc;
      }
  });
}

namespace {

/// One window cell of every channel into the accumulators, as pool() does per plane (NaN wins a max).
TEC_CPU_CLONES void poolCell(float *acc, const float *cell, int64_t channels, bool max) {
  if (max) {
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c)
      acc[c] = (cell[c] > acc[c] || cell[c] != cell[c]) ? cell[c] : acc[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c)
      acc[c] += cell[c];
  }
}

} // namespace

void poolChannelsLast(const Window &w, bool max, bool countIncludePad, const float *x, float *y) {
  // Each output pixel's channels are contiguous: the window's cells are added a vector of channels at a time,
  // in pool()'s order, so the result has pool()'s bits.
  const int64_t channels = w.channels, rows = w.batch * w.outHeight;
  parallelLoop(rows, rows * w.outWidth * channels * w.kernelH * w.kernelW, [&](int64_t row) {
    const int64_t n = row / w.outHeight, oy = row % w.outHeight;
    const float *image = x + n * w.height * w.width * channels;
    for (int64_t ox = 0; ox < w.outWidth; ++ox) {
      float *acc = y + (row * w.outWidth + ox) * channels;
      std::fill(acc, acc + channels, max ? -INFINITY : 0.0f);
      for (int64_t ky = 0; ky < w.kernelH; ++ky)
        for (int64_t kx = 0; kx < w.kernelW; ++kx) {
          const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
          if (w.inside(iy, ix))
            poolCell(acc, image + (iy * w.width + ix) * channels, channels, max);
        }
      if (!max) {
        const float divisor = static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
        for (int64_t c = 0; c < channels; ++c)
          acc[c] /= divisor;
      }
    }
  });
}

void poolGrad(const Window &w, bool max, bool countIncludePad, const float *dy, const float *x, float *dx) {
  const int64_t planes = w.batch * w.channels;
  std::fill(dx, dx + planes * w.height * w.width, 0.0f);
  parallelLoop(planes, planes * w.outHeight * w.outWidth, [&](int64_t p) {
    const float *plane = x + p * w.height * w.width;
    float *grad = dx + p * w.height * w.width;
    for (int64_t oy = 0; oy < w.outHeight; ++oy)
      for (int64_t ox = 0; ox < w.outWidth; ++ox) {
        const float g = dy[(p * w.outHeight + oy) * w.outWidth + ox];
        if (max) { // to the first maximum, as PyTorch's max_pool2d backward
          int64_t best = -1;
          float bestValue = -INFINITY;
          for (int64_t ky = 0; ky < w.kernelH; ++ky)
            for (int64_t kx = 0; kx < w.kernelW; ++kx) {
              const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
              if (!w.inside(iy, ix))
                continue;
              const float v = plane[iy * w.width + ix];
              if (best < 0 || v > bestValue || (v != v && bestValue == bestValue)) {
                best = iy * w.width + ix;
                bestValue = v;
              }
            }
          if (best >= 0)
            grad[best] += g;
          continue;
        }
        const float share = g / static_cast<float>(averageDivisor(w, oy, ox, countIncludePad));
        for (int64_t ky = 0; ky < w.kernelH; ++ky)
          for (int64_t kx = 0; kx < w.kernelW; ++kx) {
            const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
            if (w.inside(iy, ix))
              grad[iy * w.width + ix] += share;
          }
      }
  });
}

} // namespace tec::kernels::cpu
