// CPU kernels: softmax, one-hot, LayerNorm and RMSNorm.
#include "kernels/cpu/CpuKernels.h"

#include "kernels/cpu/Clones.h"
#include "kernels/cpu/Dims.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tec::kernels::cpu {

namespace {

/// Softmax of one contiguous row: one exponential per element (kept in `out`), then a scale.
TEC_CPU_CLONES void softmaxRow(const float *__restrict in, float *__restrict out, int64_t n, bool logSoftmax) {
  // The maximum in 16 independent lanes: one running maximum is a chain of dependent max instructions
  // (4 cycles each), which made a 32-wide attention row cost 3x its exponentials.
  constexpr int64_t kLanes = 16;
  float lanes[kLanes];
  for (int64_t k = 0; k < kLanes; ++k)
    lanes[k] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t k = 0; k < kLanes; ++k)
      lanes[k] = in[j + k] > lanes[k] ? in[j + k] : lanes[k];
  for (; j < n; ++j)
    lanes[0] = in[j] > lanes[0] ? in[j] : lanes[0];
  float mx = lanes[0];
  for (int64_t k = 1; k < kLanes; ++k)
    mx = lanes[k] > mx ? lanes[k] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    out[j] = expNonPositive(in[j] - mx);
    sum += out[j];
  }
  if (logSoftmax) {
    const float logSum = std::log(sum);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = in[j] - mx - logSum;
    return;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    out[j] *= inv;
}

} // namespace

template <typename Index> bool oneHot(const Index *labels, int64_t n, int64_t depth, float *y) {
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= depth)
      return false;
  std::fill(y, y + n * depth, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    y[i * depth + labels[i]] = 1.0f;
  return true;
}

template bool oneHot<int32_t>(const int32_t *, int64_t, int64_t, float *);
template bool oneHot<int64_t>(const int64_t *, int64_t, int64_t, float *);

void softmax(const float *x, float *y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax) {
  if (inner == 1) {
    parallelLoop(outer, outer * axis, [&](int64_t o) {
      softmaxRow(x + o * axis, y + o * axis, axis, logSoftmax);
    });
    return;
  }
  // A strided axis: gather each (outer, inner) column into a contiguous row first.
  parallelLoop(outer * inner, outer * axis * inner, [&](int64_t r) {
    const int64_t o = r / inner, i = r % inner;
    thread_local std::vector<float> column, result; // grown once per thread, not per row
    column.resize(axis), result.resize(axis);
    for (int64_t j = 0; j < axis; ++j)
      column[j] = x[(o * axis + j) * inner + i];
    softmaxRow(column.data(), result.data(), axis, logSoftmax);
    for (int64_t j = 0; j < axis; ++j)
      y[(o * axis + j) * inner + i] = result[j];
  });
}

namespace {

/// Rows shorter than this are summed in 8 fixed lanes (sumIn8Lanes), longer ones by `omp simd`.
constexpr int64_t kShortRow = 256;

/// term(0) + ... + term(cols - 1) in double, in 8 lanes added pairwise at the end, the rest after: GCC makes
/// the fixed inner loop one vector with nothing left over, where `omp simd` over a row of 40 floats ran a
/// vector loop and then scalar remainders, at twice the time (ConvNeXt's first stage normalizes 40 channels
/// per pixel). Inlined into the cloned caller, so that it is built for the caller's ISA.
template <typename Term> TEC_PER_ELEMENT inline double sumIn8Lanes(int64_t cols, Term term) {
  double lane[8] = {};
  const int64_t whole = cols / 8 * 8;
  for (int64_t j = 0; j < whole; j += 8)
    for (int k = 0; k < 8; ++k)
      lane[k] += term(j + k);
  double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (int64_t j = whole; j < cols; ++j)
    sum += term(j);
  return sum;
}

/// One row of LayerNorm (or RMSNorm without `center`): statistics accumulated in double, in vector
/// lanes, then one pass that writes the row. The summation order depends on the row's length alone.
TEC_CPU_CLONES void normalizeRow(const float *__restrict in, const float *__restrict scale, const float *bias,
                                 float *__restrict out, int64_t cols, float epsilon, bool center, float &mean,
                                 float &rstd) {
  const bool isShort = cols < kShortRow;
  double sum = 0;
  if (center && isShort) {
    sum = sumIn8Lanes(cols, [&](int64_t j) TEC_PER_ELEMENT { return static_cast<double>(in[j]); });
  } else if (center) {
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j)
      sum += in[j];
  }
  const double mu = sum / cols;
  double sq = 0;
  if (isShort) {
    sq = sumIn8Lanes(cols, [&](int64_t j) TEC_PER_ELEMENT { return (in[j] - mu) * (in[j] - mu); });
  } else {
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < cols; ++j)
      sq += (in[j] - mu) * (in[j] - mu);
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / cols + epsilon));
  const float m = static_cast<float>(mu);
  if (bias) {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
      out[j] = (in[j] - m) * inv * scale[j] + bias[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
      out[j] = (in[j] - m) * inv * scale[j];
  }
  mean = m;
  rstd = inv;
}

} // namespace

void layerNorm(const float *x, const float *scale, const float *bias, float *y, float *mean, float *rstd, int64_t rows,
               int64_t cols, float epsilon, bool center) {
  parallelLoop(rows, rows * cols, [&](int64_t r) {
    float m, inv;
    normalizeRow(x + r * cols, scale, bias, y + r * cols, cols, epsilon, center, m, inv);
    if (mean)
      mean[r] = m;
    if (rstd)
      rstd[r] = inv;
  });
}

} // namespace tec::kernels::cpu
