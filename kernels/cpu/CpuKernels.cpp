#include "kernels/cpu/CpuKernels.h"

#include "support/Cast.h"
#include "support/Half.h"
#include "support/Scan.h"
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/Clones.h"
#include "kernels/cpu/Dims.h"
#include "kernels/cpu/PackedGemm.h"

#include <atomic>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace tec::kernels::cpu {

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

void setThreads(int threads) { setPoolThreads(threads); }

namespace {

int64_t numElements(const Dims &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

} // namespace

namespace {

/// Calls f(row, offsets...) for each row of `out` (its last dim), with each operand's element offset
/// at the row's start; operands advance along the row by their last stride. Rows go in chunks of about
/// 16K elements: one division walk per chunk, then an odometer step per row (short rows are common:
/// attention heads).
template <size_t N, typename F>
void forEachBroadcastRow(const Dims &out, const std::array<Dims, N> &strides, F f) {
  const int64_t rank = out.size();
  const int64_t inner = rank ? out.back() : 1;
  const int64_t rows = inner ? numElements(out) / inner : 0;
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(inner, 1));
  const int64_t chunks = (rows + chunk - 1) / chunk;
  parallelLoop(chunks, rows * inner, [&](int64_t c) {
    const int64_t begin = c * chunk, end = std::min(rows, begin + chunk);
    Dims coord(std::max<int64_t>(rank - 1, 0));
    std::array<int64_t, N> offsets{};
    int64_t rest = begin;
    for (int64_t d = rank - 2; d >= 0; --d) {
      coord[d] = rest % out[d];
      rest /= out[d];
      for (size_t k = 0; k < N; ++k)
        offsets[k] += coord[d] * strides[k][d];
    }
    for (int64_t row = begin; row < end; ++row) {
      f(row * inner, offsets);
      for (int64_t d = rank - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k)
          offsets[k] += strides[k][d];
        if (++coord[d] < out[d])
          break;
        for (size_t k = 0; k < N; ++k)
          offsets[k] -= strides[k][d] * out[d];
        coord[d] = 0;
      }
    }
  });
}

/// One row of a broadcast binary op; a plain function so the loop vectorizes.
template <typename T, typename R, typename Op>
TEC_CPU_CLONES void binaryRow(const T *a, int64_t sa, const T *b, int64_t sb, R *out, int64_t n, Op op) {
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = op(a[j], b[j]);
  } else if (sa == 1 && sb == 0) {
    const T s = b[0];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = op(a[j], s);
  } else if (sa == 0 && sb == 1) {
    const T s = a[0];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = op(s, b[j]);
  } else {
    for (int64_t j = 0; j < n; ++j)
      out[j] = op(a[j * sa], b[j * sb]);
  }
}

template <typename T, typename R, typename Op>
void binaryLoop(const T *a, const Shape &aShape, const T *b, const Shape &bShape, R *out, const Shape &outShape, Op op) {
  const int64_t n = numElements(outShape);
  if (aShape == outShape && (bShape == outShape || numElements(bShape) == 1)) {
    const int64_t sb = bShape == outShape ? 1 : 0;
    const int64_t chunk = 1 << 14, chunks = (n + chunk - 1) / chunk;
    parallelLoop(chunks, n, [&](int64_t c) {
      const int64_t begin = c * chunk, len = std::min(chunk, n - begin);
      binaryRow(a + begin, 1, b + begin * sb, sb, out + begin, len, op);
    });
    return;
  }
  std::array<Dims, 2> strides{broadcastStrides(aShape, outShape), broadcastStrides(bShape, outShape)};
  const int64_t inner = outShape.empty() ? 1 : outShape.back();
  const int64_t sa = outShape.empty() ? 0 : strides[0].back(), sb = outShape.empty() ? 0 : strides[1].back();
  forEachBroadcastRow(outShape, strides, [=](int64_t start, const std::array<int64_t, 2> &off) {
    binaryRow(a + off[0], sa, b + off[1], sb, out + start, inner, op);
  });
}

} // namespace

namespace {

/// f(op) with the per-element function of a binary kind: one specialized function per common kind (so that
/// its loops vectorize), the rest through the shared math. Every loop over a kind takes its op from here.
template <typename T, typename F> void withBinaryOp(BinaryKind kind, F &&f) {
  auto apply = [kind](T x, T y) {
    if constexpr (std::is_integral_v<T>)
      return applyIntBinary(kind, x, y);
    else
      return applyBinary(kind, x, y);
  };
  switch (kind) {
  case BinaryKind::Add: return f([](T x, T y) TEC_PER_ELEMENT { return T(x + y); });
  case BinaryKind::Sub: return f([](T x, T y) TEC_PER_ELEMENT { return T(x - y); });
  case BinaryKind::Mul: return f([](T x, T y) TEC_PER_ELEMENT { return T(x * y); });
  case BinaryKind::Div:
    if constexpr (std::is_integral_v<T>)
      return f(apply);
    else
      return f([](T x, T y) TEC_PER_ELEMENT { return T(x / y); });
  case BinaryKind::SwiGlu: // Llama's MLP: a function of its own so the sigmoid vectorizes
    if constexpr (std::is_floating_point_v<T>)
      return f([](T x, T y) TEC_PER_ELEMENT { return silu(x) * y; });
    else
      return f(apply);
  default: return f(apply);
  }
}

} // namespace

template <typename T>
void binary(BinaryKind kind, const T *a, const Shape &aShape, const T *b, const Shape &bShape, T *out,
            const Shape &outShape) {
  withBinaryOp<T>(kind, [&](auto op) { binaryLoop(a, aShape, b, bShape, out, outShape, op); });
}

void binarySpan(BinaryKind kind, const float *a, int64_t sa, const float *b, int64_t sb, float *out, int64_t n) {
  withBinaryOp<float>(kind, [&](auto op) { binaryRow(a, sa, b, sb, out, n, op); });
}

template <typename T>
void compare(CompareKind kind, const T *a, const Shape &aShape, const T *b, const Shape &bShape, bool *out,
             const Shape &outShape) {
  binaryLoop(a, aShape, b, bShape, out, outShape, [kind](T x, T y) { return applyCompare(kind, x, y); });
}

template void compare<float>(CompareKind, const float *, const Shape &, const float *, const Shape &, bool *,
                             const Shape &);
template void compare<int32_t>(CompareKind, const int32_t *, const Shape &, const int32_t *, const Shape &, bool *,
                               const Shape &);
template void compare<int64_t>(CompareKind, const int64_t *, const Shape &, const int64_t *, const Shape &, bool *,
                               const Shape &);
template void compare<bool>(CompareKind, const bool *, const Shape &, const bool *, const Shape &, bool *,
                            const Shape &);

template void binary<float>(BinaryKind, const float *, const Shape &, const float *, const Shape &, float *, const Shape &);
template void binary<int32_t>(BinaryKind, const int32_t *, const Shape &, const int32_t *, const Shape &, int32_t *,
                              const Shape &);
template void binary<int64_t>(BinaryKind, const int64_t *, const Shape &, const int64_t *, const Shape &, int64_t *,
                              const Shape &);

namespace {

/// y[i] = op(x[i]) over one chunk: a plain function, outside the OpenMP region, so the compiler keeps
/// the pointers in registers and vectorizes the loop (x may equal y: in place).
template <typename Op> TEC_CPU_CLONES void mapChunk(const float *x, float *y, int64_t n, Op op) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = op(x[i]);
}

template <typename Op> void mapUnary(const float *x, float *y, int64_t n, Op op) {
  const int64_t chunk = 1 << 14, chunks = (n + chunk - 1) / chunk;
  parallelLoop(chunks, n, [&](int64_t c) {
    mapChunk(x + c * chunk, y + c * chunk, std::min(chunk, n - c * chunk), op);
  });
}

} // namespace

namespace {

/// f(op) with the per-element function of a unary kind.
template <typename F> void withUnaryOp(UnaryKind kind, F &&f) {
  switch (kind) {
#define TEC_UNARY(Kind, kernel, expression)                                                                           \
  case UnaryKind::Kind: return f([](float v) TEC_PER_ELEMENT { return expression; });
#define TEC_UNARY_VARIANT(Kind, expression) TEC_UNARY(Kind, , expression)
#include "support/UnaryOps.def"
  }
}

} // namespace

void unary(UnaryKind kind, const float *x, float *y, int64_t n) {
  withUnaryOp(kind, [&](auto op) { mapUnary(x, y, n, op); });
}

void unarySpan(UnaryKind kind, const float *x, float *y, int64_t n) {
  withUnaryOp(kind, [&](auto op) { mapChunk(x, y, n, op); });
}

template <typename T> void intUnary(UnaryKind kind, const T *x, T *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) // index math on small tensors: no threads
    y[i] = applyIntUnary(kind, x[i]);
}
template void intUnary(UnaryKind, const int32_t *, int32_t *, int64_t);
template void intUnary(UnaryKind, const int64_t *, int64_t *, int64_t);

namespace {

template <typename T>
void whereTyped(const bool *cond, const std::array<Dims, 3> &strides, const T *x, const T *y, T *out,
                const Shape &outShape) {
  const int64_t inner = outShape.empty() ? 1 : outShape.back();
  std::array<int64_t, 3> last{};
  for (int k = 0; k < 3; ++k)
    last[k] = outShape.empty() ? 0 : strides[k].back();
  forEachBroadcastRow(outShape, strides, [=](int64_t start, const std::array<int64_t, 3> &off) {
    const bool *c = cond + off[0];
    const T *xs = x + off[1], *ys = y + off[2];
    T *o = out + start;
    for (int64_t j = 0; j < inner; ++j)
      o[j] = c[j * last[0]] ? xs[j * last[1]] : ys[j * last[2]];
  });
}

} // namespace

namespace {

template <typename Op> TEC_CPU_CLONES void gradChunk(const float *dy, const float *x, float *dx, int64_t n, Op op) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    dx[i] = op(dy[i], x[i]);
}

template <typename Op> void mapGrad(const float *dy, const float *x, float *dx, int64_t n, Op op) {
  const int64_t chunk = 1 << 14, chunks = (n + chunk - 1) / chunk;
  parallelLoop(chunks, n, [&](int64_t c) {
    gradChunk(dy + c * chunk, x + c * chunk, dx + c * chunk, std::min(chunk, n - c * chunk), op);
  });
}

} // namespace

namespace {

/// f(op) with the per-element function of an activation's gradient: op(dy, x) = dy * act'(x).
template <typename F> void withActivationGradOp(ActivationGradKind kind, F &&f) {
  switch (kind) {
  case ActivationGradKind::Relu: return f([](float g, float v) TEC_PER_ELEMENT { return reluGrad(g, v); });
  case ActivationGradKind::Gelu: return f([](float g, float v) TEC_PER_ELEMENT { return g * geluGrad(v); });
  case ActivationGradKind::GeluTanh: return f([](float g, float v) TEC_PER_ELEMENT { return g * geluTanhGrad(v); });
  }
}

} // namespace

void activationGrad(ActivationGradKind kind, const float *dy, const float *x, float *dx, int64_t n) {
  withActivationGradOp(kind, [&](auto op) { mapGrad(dy, x, dx, n, op); });
}

void activationGradSpan(ActivationGradKind kind, const float *dy, const float *x, float *dx, int64_t n) {
  withActivationGradOp(kind, [&](auto op) { gradChunk(dy, x, dx, n, op); });
}

void where(const bool *cond, const Shape &condShape, const void *x, const Shape &xShape, const void *y,
           const Shape &yShape, void *out, const Shape &outShape, size_t bytes) {
  std::array<Dims, 3> strides{broadcastStrides(condShape, outShape), broadcastStrides(xShape, outShape),
                                              broadcastStrides(yShape, outShape)};
  switch (bytes) {
  case 1: return whereTyped(cond, strides, static_cast<const uint8_t *>(x), static_cast<const uint8_t *>(y),
                            static_cast<uint8_t *>(out), outShape);
  case 2: return whereTyped(cond, strides, static_cast<const uint16_t *>(x), static_cast<const uint16_t *>(y),
                            static_cast<uint16_t *>(out), outShape);
  case 4: return whereTyped(cond, strides, static_cast<const uint32_t *>(x), static_cast<const uint32_t *>(y),
                            static_cast<uint32_t *>(out), outShape);
  default: return whereTyped(cond, strides, static_cast<const uint64_t *>(x), static_cast<const uint64_t *>(y),
                             static_cast<uint64_t *>(out), outShape);
  }
}

void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n) {
  if (from == to) {
    std::memcpy(y, x, n * elementBytes(from));
    return;
  }
  parallelLoop(n, n, [&](int64_t i) {
    castElement(x, from, y, to, i);
  });
}

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

/// One row of LayerNorm (or RMSNorm without `center`): statistics accumulated in double, in vector
/// lanes, then one pass that writes the row.
TEC_CPU_CLONES void normalizeRow(const float *__restrict in, const float *__restrict scale, const float *bias,
                                 float *__restrict out, int64_t cols, float epsilon, bool center, float &mean,
                                 float &rstd) {
  double sum = 0;
  if (center) {
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j)
      sum += in[j];
  }
  const double mu = sum / cols;
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < cols; ++j)
    sq += (in[j] - mu) * (in[j] - mu);
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

namespace {

/// The sum of x in double, in one order: 8 running partial sums (vector lanes), then a tree.
template <typename T> TEC_CPU_CLONES double laneSumDouble(const T *x, int64_t n) {
  constexpr int64_t kLanes = 8;
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t lane = 0; lane < kLanes; ++lane)
      partial[lane] += static_cast<double>(x[i + lane]);
  for (int64_t lane = 0; i < n; ++i, ++lane)
    partial[lane] += static_cast<double>(x[i]);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t lane = 0; lane < width; ++lane)
      partial[lane] += partial[lane + width];
  return partial[0];
}

/// The most columns addRows sums at once.
constexpr int64_t kSumColumns = 256;

/// sums[c] = the double sum of x[r * stride + c] over rows r in order, for c < width (<= kSumColumns).
TEC_CPU_CLONES void addRows(const float *x, int64_t rows, int64_t stride, int64_t width, double *sums) {
  double acc[kSumColumns] = {}; // on the stack: apart from x and sums, so the loop vectorizes
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * stride;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c)
      acc[c] += row[c];
  }
  std::copy(acc, acc + width, sums);
}

} // namespace

template <typename T>
void reduce(ReduceKind kind, const T *x, const Shape &shape, const std::vector<int64_t> &axes, T *y) {
  const int64_t rank = shape.size();
  Dims strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  // Over the trailing dims (a loss's mean, a row's sum): each output's elements are contiguous, read in order.
  // Float sums go into 8 running partial sums then a tree: a fixed order on every CPU and thread count.
  const int64_t reduced = static_cast<int64_t>(axes.size());
  bool trailing = reduced > 0;
  for (int64_t i = 0; i < reduced && trailing; ++i)
    trailing = std::count(axes.begin(), axes.end(), rank - reduced + i) == 1;
  if (trailing) {
    int64_t count = 1, outCount = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < rank - reduced ? outCount : count) *= shape[d];
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    parallelLoop(outCount, outCount * count, [&](int64_t o) {
      const T *row = x + o * count;
      Acc sum = kernels::reduceIdentity<Acc>(kind);
      if constexpr (std::is_floating_point_v<T>)
        if (kind == ReduceKind::Sum || kind == ReduceKind::Mean)
          sum = laneSumDouble(row, count);
      if (!std::is_floating_point_v<T> || (kind != ReduceKind::Sum && kind != ReduceKind::Mean))
        for (int64_t i = 0; i < count; ++i)
          sum = kernels::reduceCombine<Acc>(kind, sum, row[i]);
      y[o] = kind == ReduceKind::Mean ? static_cast<T>(count ? sum / static_cast<Acc>(count) : 0) : static_cast<T>(sum);
    });
    return;
  }
  // A sum over middle dims (a bias gradient: [rows, cols] -> [cols]; global pooling of an NHWC image:
  // [N, H*W, C] -> [N, C]): rows added in order into a block of double column accumulators, reading x row by
  // row instead of down each column; a long one in bands of rows over the pool, whose partial sums are then
  // added in band order. The bands depend on the shape alone: the same sums at any thread count.
  Dims merged; // unit dims dropped, adjacent dims alike (reduced or kept) merged: [rows, cols] or [outer, rows, cols]
  std::vector<bool> mergedReduced;
  for (int64_t d = 0; d < rank; ++d) {
    const bool r = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (shape[d] == 1)
      continue;
    if (!merged.empty() && mergedReduced.back() == r)
      merged.back() *= shape[d];
    else
      merged.push_back(shape[d]), mergedReduced.push_back(r);
  }
  const bool middle = std::is_same_v<T, float> && (kind == ReduceKind::Sum || kind == ReduceKind::Mean) &&
                      numElements(shape) > 0 &&
                      (mergedReduced == std::vector<bool>{true, false} ||
                       mergedReduced == std::vector<bool>{false, true, false});
  if (middle) {
    const int64_t cols = merged.back(), rows = merged[merged.size() - 2], outer = merged.size() == 3 ? merged[0] : 1;
    const int64_t blocks = (cols + kSumColumns - 1) / kSumColumns;
    const int64_t bandRows = std::max<int64_t>(64, kParallelThreshold / cols), bands = (rows + bandRows - 1) / bandRows;
    thread_local std::vector<double> partial;
    partial.assign(outer * bands * cols, 0.0);
    double *sums = partial.data(); // [outer, band, cols]
    parallelFor(outer * blocks * bands, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / (blocks * bands), c0 = t / bands % blocks * kSumColumns, c1 = std::min(cols, c0 + kSumColumns);
        const int64_t band = t % bands, r1 = std::min(rows, (band + 1) * bandRows);
        if constexpr (std::is_same_v<T, float>)
          addRows(x + (o * rows + band * bandRows) * cols + c0, r1 - band * bandRows, cols, c1 - c0,
                  sums + (o * bands + band) * cols + c0);
      }
    });
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < cols; ++c) {
        double sum = 0;
        for (int64_t band = 0; band < bands; ++band)
          sum += sums[(o * bands + band) * cols + c];
        y[o * cols + c] = static_cast<T>(kind == ReduceKind::Mean ? sum / static_cast<double>(rows) : sum);
      }
    return;
  }
  Dims keptDims, keptStrides;
  // Each reduced element's offset from its output's first, kept per thread across calls (no allocation
  // once the largest reduction has run).
  thread_local std::vector<int64_t> reducedOffsets, next;
  reducedOffsets.assign(1, 0);
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      keptDims.push_back(shape[d]);
      keptStrides.push_back(strides[d]);
      continue;
    }
    next.clear();
    for (int64_t base : reducedOffsets)
      for (int64_t i = 0; i < shape[d]; ++i)
        next.push_back(base + i * strides[d]);
    reducedOffsets.swap(next);
  }
  const int64_t outCount = numElements(keptDims), count = reducedOffsets.size();
  parallelLoop(outCount, outCount * count, [&](int64_t o) {
    int64_t base = 0, rest = o;
    for (int64_t d = static_cast<int64_t>(keptDims.size()) - 1; d >= 0; --d) {
      base += (rest % keptDims[d]) * keptStrides[d];
      rest /= keptDims[d];
    }
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    Acc sum = kernels::reduceIdentity<Acc>(kind);
    for (int64_t off : reducedOffsets)
      sum = kernels::reduceCombine<Acc>(kind, sum, x[base + off]);
    y[o] = kind == ReduceKind::Mean ? static_cast<T>(count ? sum / static_cast<Acc>(count) : 0) : static_cast<T>(sum);
  });
}

template void reduce<float>(ReduceKind, const float *, const Shape &, const std::vector<int64_t> &, float *);
template void reduce<int32_t>(ReduceKind, const int32_t *, const Shape &, const std::vector<int64_t> &, int32_t *);
template void reduce<int64_t>(ReduceKind, const int64_t *, const Shape &, const std::vector<int64_t> &, int64_t *);

void matmul(const float *a, const Shape &aShape, const float *b, const Shape &bShape, float *out, const Shape &outShape) {
  Dims lhs = aShape, rhs = bShape;
  if (lhs.size() == 1)
    lhs = Dims{1, lhs[0]};
  if (rhs.size() == 1)
    rhs.push_back(1);
  const int64_t m = lhs[lhs.size() - 2], k = lhs.back(), n = rhs.back();
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill(out, out + numElements(outShape), 0.0f);
    return;
  }
  Dims aBatch(lhs.begin(), lhs.end() - 2), bBatch(rhs.begin(), rhs.end() - 2);
  // A weight without batch dims: fold A's batch into M for one large GEMM.
  if (numElements(bBatch) == 1) {
    planSgemm(false, false, numElements(aBatch) * m, n, k, 1.0f, a, k, b, n, 0.0f, out, n);
    return;
  }
  Dims batch(outShape.begin(), outShape.end() - (aShape.size() > 1 ? 1 : 0) - (bShape.size() > 1 ? 1 : 0));
  auto aStrides = broadcastStrides(aBatch, batch), bStrides = broadcastStrides(bBatch, batch);
  const int64_t batches = numElements(batch);
  const int library = gemmLibrary({false, false, m, n, k});
  for (int64_t i = 0; i < batches; ++i) {
    int64_t ao = 0, bo = 0, rest = i;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t c = rest % batch[d];
      rest /= batch[d];
      ao += c * aStrides[d];
      bo += c * bStrides[d];
    }
    sgemm(library, false, false, m, n, k, 1.0f, a + ao * m * k, k, b + bo * k * n, n, 0.0f, out + i * m * n, n);
  }
}

void gemm(const float *a, const float *b, const float *c, const Shape &cShape, float *y, int64_t m, int64_t n,
          int64_t k, bool transA, bool transB, float alpha, float beta) {
  float betaForBlas = 0.0f;
  if (c && beta != 0.0f) {
    std::array<Dims, 1> strides{broadcastStrides(cShape, Dims{m, n})};
    forEachBroadcastRow(Dims{m, n}, strides, [&](int64_t start, const std::array<int64_t, 1> &off) {
      for (int64_t j = 0; j < n; ++j)
        y[start + j] = beta * c[off[0] + j * strides[0][1]];
    });
    betaForBlas = 1.0f;
  }
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    if (betaForBlas == 0.0f)
      std::fill(y, y + m * n, 0.0f);
    return;
  }
  planSgemm(transA, transB, m, n, k, alpha, a, transA ? m : k, b, transB ? k : n, betaForBlas, y, n);
}

namespace {

/// One row of a GEMM epilogue: a plain function so that the loop vectorizes. `out` may be `row` or
/// `residual` (the same elements: each is read before it is written).
template <typename Act>
TEC_CPU_CLONES void epilogueRow(const float *row, const float *bias, const float *residual, float *out, int64_t n,
                                Act act) {
  if (bias && residual) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = act(row[j] + bias[j]) + residual[j];
  } else if (bias) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = act(row[j] + bias[j]);
  } else if (residual) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = act(row[j]) + residual[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j] = act(row[j]);
  }
}

/// f(act) with the per-element function of an epilogue.
template <typename F> void withEpilogueOp(Epilogue epilogue, F &&f) {
  switch (epilogue) {
  case Epilogue::None: return f([](float v) TEC_PER_ELEMENT { return v; });
  case Epilogue::Relu: return f([](float v) TEC_PER_ELEMENT { return relu(v); });
  case Epilogue::Gelu: return f([](float v) TEC_PER_ELEMENT { return gelu(v); });
  case Epilogue::GeluTanh: return f([](float v) TEC_PER_ELEMENT { return geluTanh(v); });
  case Epilogue::Silu: return f([](float v) TEC_PER_ELEMENT { return silu(v); });
  case Epilogue::HardSwish: return f([](float v) TEC_PER_ELEMENT { return hardSwish(v); });
  }
}

} // namespace

void epilogueRows(Epilogue epilogue, const float *y, const float *residual, float *out, int64_t rows, int64_t cols,
                  int64_t stride) {
  withEpilogueOp(epilogue, [&](auto act) {
    for (int64_t r = 0; r < rows; ++r)
      epilogueRow(y + r * stride, nullptr, residual ? residual + r * stride : nullptr, out + r * stride, cols, act);
  });
}

void linear(const float *x, const float *weight, const float *bias, float *y, int64_t m, int64_t n, int64_t k,
            bool transposeA, bool transposeB, Epilogue epilogue, const float *residual, float *out,
            const PackedGemm *packed) {
  if (m == 0 || n == 0)
    return;
  auto withActivation = [&](auto act) {
    auto chunk = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      for (int64_t i = i0; i < i1; ++i)
        epilogueRow(y + i * n + j0, bias ? bias + j0 : nullptr, residual ? residual + i * n + j0 : nullptr,
                    (out ? out : y) + i * n + j0, j1 - j0, act);
    };
    if (k == 0) {
      std::fill(y, y + m * n, 0.0f);
      parallelLoop(m, m * n, [&](int64_t i) { chunk(i, i + 1, 0, n); });
    } else {
      const bool epilogueWork = bias || residual || out || epilogue != Epilogue::None;
      if (packed)
        packed->run(x, y, epilogueWork ? GemmChunkEpilogue(chunk) : GemmChunkEpilogue());
      else
        planSgemm(transposeA, transposeB, m, n, k, 1.0f, x, transposeA ? m : k, weight, transposeB ? k : n, 0.0f, y,
                  n, epilogueWork ? GemmChunkEpilogue(chunk) : GemmChunkEpilogue());
    }
  };
  withEpilogueOp(epilogue, withActivation);
}

namespace {

template <typename E> void copyRow(E *__restrict dst, const E *__restrict src, int64_t n, int64_t stride) {
  if (stride == 1)
    std::copy(src, src + n, dst);
  else
    for (int64_t j = 0; j < n; ++j)
      dst[j] = src[j * stride];
}

/// out[i...] = in[offset + sum(i_d * inStrides[d])] for every output element (elements of E). Dims of
/// size 1 are dropped and neighbours the input walks contiguously are merged first, so a head
/// transpose copies rows of head_dim elements instead of single ones.
template <typename E>
void stridedCopyOf(const E *in, int64_t offset, const Dims &inStrides, E *out, const Dims &outShape) {
  Dims shape, strides;
  for (size_t d = 0; d < outShape.size(); ++d) {
    if (outShape[d] == 1)
      continue;
    if (!shape.empty() && strides.back() == inStrides[d] * outShape[d]) {
      shape.back() *= outShape[d];
      strides.back() = inStrides[d];
      continue;
    }
    shape.push_back(outShape[d]);
    strides.push_back(inStrides[d]);
  }
  if (numElements(outShape) == 0)
    return;
  const int64_t inner = shape.empty() ? 1 : shape.back(), innerStride = shape.empty() ? 0 : strides.back();
  std::array<Dims, 1> operandStrides{strides};
  forEachBroadcastRow(shape, operandStrides, [&](int64_t start, const std::array<int64_t, 1> &off) {
    copyRow(out + start, in + offset + off[0], inner, innerStride);
  });
}

void stridedCopy(const char *in, int64_t offset, const Dims &inStrides, char *out, const Dims &outShape,
                 size_t bytes) {
  switch (bytes) {
  case 1: return stridedCopyOf(reinterpret_cast<const uint8_t *>(in), offset, inStrides, reinterpret_cast<uint8_t *>(out), outShape);
  case 2: return stridedCopyOf(reinterpret_cast<const uint16_t *>(in), offset, inStrides, reinterpret_cast<uint16_t *>(out), outShape);
  case 4: return stridedCopyOf(reinterpret_cast<const uint32_t *>(in), offset, inStrides, reinterpret_cast<uint32_t *>(out), outShape);
  default: return stridedCopyOf(reinterpret_cast<const uint64_t *>(in), offset, inStrides, reinterpret_cast<uint64_t *>(out), outShape);
  }
}

Dims contiguousStrides(const Dims &shape) {
  Dims strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

} // namespace

namespace {

/// A transpose that moves the input's last dim away from the end (a GEMM operand's [R, C] -> [C, R], the
/// heads of attention): each output row would read the input down a column, a cache line per element.
/// Instead 32 x 32 tiles of the two dims, the input's contiguous one (a) and the output's (b), a tile's
/// input lines staying in cache while its output lines are written; the other dims in an outer loop.
template <typename E>
void tiledTranspose(const E *in, const Dims &outShape, const Dims &inStrides, int64_t a, E *out) {
  const int64_t rank = static_cast<int64_t>(outShape.size()), b = rank - 1;
  const Dims outStrides = contiguousStrides(outShape);
  const int64_t na = outShape[a], nb = outShape[b], inB = inStrides[b], outA = outStrides[a];
  const int64_t planes = numElements(outShape) / (na * nb);
  constexpr int64_t kTile = 32;
  // A short output line is written kTile x kTile elements at a time all the same: longer runs of a.
  const int64_t tileA = nb < kTile ? kTile * kTile / std::max<int64_t>(nb, 1) : kTile;
  const int64_t tilesA = (na + tileA - 1) / tileA;
  parallelLoop(planes * tilesA, numElements(outShape), [&](int64_t task) {
    // The plane's offsets: its index over the other dims, last fastest.
    int64_t rest = task / tilesA, inOffset = 0, outOffset = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (d == a || d == b)
        continue;
      inOffset += rest % outShape[d] * inStrides[d];
      outOffset += rest % outShape[d] * outStrides[d];
      rest /= outShape[d];
    }
    const int64_t i0 = task % tilesA * tileA, i1 = std::min(na, i0 + tileA);
    if (nb < kTile) { // a short output line (an image's few channels): each input line's run read in order
      for (int64_t j = 0; j < nb; ++j)
        for (int64_t i = i0; i < i1; ++i)
          out[outOffset + i * outA + j] = in[inOffset + i + j * inB];
      return;
    }
    for (int64_t j0 = 0; j0 < nb; j0 += kTile)
      for (int64_t i = i0, j1 = std::min(nb, j0 + kTile); i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          out[outOffset + i * outA + j] = in[inOffset + i + j * inB];
  });
}

} // namespace

void transpose(const void *x, const Shape &inShape, const std::vector<int64_t> &perm, void *y, size_t bytes) {
  auto inStrides = contiguousStrides(inShape);
  Dims outShape, strides;
  for (int64_t p : perm) {
    outShape.push_back(inShape[p]);
    strides.push_back(inStrides[p]);
  }
  // Where the input's last dim (stride 1) lands in the output, if not last: the tiled path.
  const int64_t rank = static_cast<int64_t>(perm.size());
  const int64_t a = rank ? std::find(perm.begin(), perm.end(), rank - 1) - perm.begin() : 0;
  const bool tiled = rank >= 2 && a != rank - 1 && inShape[rank - 1] > 1 && outShape[rank - 1] > 1 &&
                     numElements(outShape) > 4096;
  if (tiled && bytes == 4)
    return tiledTranspose(static_cast<const uint32_t *>(x), outShape, strides, a, static_cast<uint32_t *>(y));
  if (tiled && bytes == 2)
    return tiledTranspose(static_cast<const uint16_t *>(x), outShape, strides, a, static_cast<uint16_t *>(y));
  if (tiled && bytes == 1)
    return tiledTranspose(static_cast<const uint8_t *>(x), outShape, strides, a, static_cast<uint8_t *>(y));
  stridedCopy(static_cast<const char *>(x), 0, strides, static_cast<char *>(y), outShape, bytes);
}

void expand(const void *x, const Shape &inShape, void *y, const Shape &outShape, size_t bytes) {
  stridedCopy(static_cast<const char *>(x), 0, broadcastStrides(inShape, outShape), static_cast<char *>(y), outShape,
              bytes);
}

void slice(const void *x, const Shape &inShape, const std::vector<int64_t> &starts, const std::vector<int64_t> &steps,
           void *y, const Shape &outShape, size_t bytes) {
  if (numElements(outShape) == 0)
    return;
  auto inStrides = contiguousStrides(inShape);
  int64_t offset = 0;
  Dims strides(inShape.size());
  for (size_t d = 0; d < inShape.size(); ++d) {
    offset += starts[d] * inStrides[d];
    strides[d] = steps[d] * inStrides[d];
  }
  stridedCopy(static_cast<const char *>(x), offset, strides, static_cast<char *>(y), outShape, bytes);
}

void copyAlongAxis(const void *x, const Shape &inShape, void *y, const Shape &outShape, int64_t axis, int64_t offset,
                   size_t bytes, bool split) {
  // `small` is the piece (concat input, split output); `big` the whole along `axis`.
  const Shape &small = split ? outShape : inShape;
  const Shape &big = split ? inShape : outShape;
  int64_t outer = 1, innerElems = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= small[d];
  for (size_t d = axis + 1; d < small.size(); ++d)
    innerElems *= small[d];
  const int64_t chunk = small[axis] * innerElems * bytes, bigRow = big[axis] * innerElems * bytes;
  const int64_t start = offset * innerElems * bytes;
  auto *src = static_cast<const char *>(x);
  auto *dst = static_cast<char *>(y);
  for (int64_t o = 0; o < outer; ++o) {
    if (split)
      std::memcpy(dst + o * chunk, src + o * bigRow + start, chunk);
    else
      std::memcpy(dst + o * bigRow + start, src + o * chunk, chunk);
  }
}

template <typename Index>
bool gather(const void *data, const Shape &dataShape, const Index *indices, int64_t numIndices, int64_t axis, void *y,
            size_t bytes) {
  const int64_t axisDim = dataShape[axis];
  for (int64_t j = 0; j < numIndices; ++j)
    if (indices[j] < -axisDim || indices[j] >= axisDim)
      return false;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= dataShape[d];
  for (size_t d = axis + 1; d < dataShape.size(); ++d)
    inner *= dataShape[d];
  const int64_t block = inner * bytes;
  auto *src = static_cast<const char *>(data);
  auto *dst = static_cast<char *>(y);
  parallelLoop(outer, outer * numIndices * inner, [&](int64_t o) {
    for (int64_t j = 0; j < numIndices; ++j) {
      int64_t idx = indices[j] < 0 ? indices[j] + axisDim : indices[j];
      std::memcpy(dst + (o * numIndices + j) * block, src + (o * axisDim + idx) * block, block);
    }
  });
  return true;
}

template bool gather<int32_t>(const void *, const Shape &, const int32_t *, int64_t, int64_t, void *, size_t);
template bool gather<int64_t>(const void *, const Shape &, const int64_t *, int64_t, int64_t, void *, size_t);

template <typename T>
void argReduce(bool max, bool last, const T *x, int64_t outer, int64_t dim, int64_t inner, int64_t *y) {
  parallelLoop(outer, outer * dim * inner, [&](int64_t o) {
    for (int64_t in = 0; in < inner; ++in) {
      const T *column = x + o * dim * inner + in;
      int64_t best = 0;
      for (int64_t j = 1; j < dim; ++j)
        if (kernels::argBetter(max, last, column[j * inner], column[best * inner]))
          best = j;
      y[o * inner + in] = best;
    }
  });
}

template void argReduce<float>(bool, bool, const float *, int64_t, int64_t, int64_t, int64_t *);
template void argReduce<int32_t>(bool, bool, const int32_t *, int64_t, int64_t, int64_t, int64_t *);
template void argReduce<int64_t>(bool, bool, const int64_t *, int64_t, int64_t, int64_t, int64_t *);

template <typename T>
void cumSum(const T *x, int64_t outer, int64_t dim, int64_t inner, bool exclusive, bool reverse, T *y) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, float, int64_t>;
  const int64_t lines = outer * inner;
  parallelLoop(lines, lines * dim, [&](int64_t line) {
    const int64_t start = kernels::lineStart(line, dim, inner);
    kernels::cumSumLine<Acc>([&](int64_t j) { return static_cast<Acc>(x[start + j * inner]); },
                             [&](int64_t j, Acc v) { y[start + j * inner] = static_cast<T>(v); }, dim, exclusive,
                             reverse);
  });
}

template void cumSum<float>(const float *, int64_t, int64_t, int64_t, bool, bool, float *);
template void cumSum<int32_t>(const int32_t *, int64_t, int64_t, int64_t, bool, bool, int32_t *);
template void cumSum<int64_t>(const int64_t *, int64_t, int64_t, int64_t, bool, bool, int64_t *);

template <typename Index>
bool gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const Index *indices,
                    int64_t picks, void *y, size_t bytes) {
  const int64_t n = outer * picks * inner;
  for (int64_t i = 0; i < n; ++i)
    if (indices[i] < -axisDim || indices[i] >= axisDim)
      return false;
  auto *src = static_cast<const char *>(data);
  auto *dst = static_cast<char *>(y);
  parallelLoop(outer, n, [&](int64_t o) {
    for (int64_t j = 0; j < picks; ++j)
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t i = (o * picks + j) * inner + in;
        const int64_t index = indices[i] < 0 ? indices[i] + axisDim : indices[i];
        std::memcpy(dst + i * bytes, src + ((o * axisDim + index) * inner + in) * bytes, bytes);
      }
  });
  return true;
}

template <typename Index>
bool scatterAdd(const float *updates, int64_t outer, int64_t axisDim, int64_t inner, const Index *indices,
                int64_t picks, bool elements, float *y) {
  const int64_t numIndices = elements ? outer * picks * inner : picks;
  for (int64_t i = 0; i < numIndices; ++i)
    if (indices[i] < -axisDim || indices[i] >= axisDim)
      return false;
  std::fill(y, y + outer * axisDim * inner, 0.0f);
  // Each outer slice is one thread's, its updates added in index order: the same sums every run.
  parallelLoop(outer, outer * picks * inner, [&](int64_t o) {
    for (int64_t j = 0; j < picks; ++j)
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t u = (o * picks + j) * inner + in;
        int64_t index = indices[elements ? u : j];
        index = index < 0 ? index + axisDim : index;
        y[(o * axisDim + index) * inner + in] += updates[u];
      }
  });
  return true;
}

template bool gatherElements<int32_t>(const void *, int64_t, int64_t, int64_t, const int32_t *, int64_t, void *, size_t);
template bool gatherElements<int64_t>(const void *, int64_t, int64_t, int64_t, const int64_t *, int64_t, void *, size_t);
template bool scatterAdd<int32_t>(const float *, int64_t, int64_t, int64_t, const int32_t *, int64_t, bool, float *);
template bool scatterAdd<int64_t>(const float *, int64_t, int64_t, int64_t, const int64_t *, int64_t, bool, float *);

namespace {

/// AdamW over one chunk, every operand present: a plain loop the compiler vectorizes (vector sqrt and
/// division round as the scalar ones do), the same per-element math as the general loop.
TEC_CPU_CLONES void adamwChunk(const OptimizerParams &o, float lr, float c1, float c2, float clip, const float *p,
                               const float *g, const float *m, const float *v, float *newP, float *newM, float *newV,
                               int64_t n) {
  const float beta1 = o.beta1, beta2 = o.beta2, eps = o.eps, weightDecay = o.weightDecay;
  // Each element is read before it is written, so outputs that alias their inputs do not stop the vectors
  // (without the pragma GCC keeps the loop scalar: seven pointers may overlap).
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float param = p[i];
    newP[i] = param - adamwDirection(beta1, beta2, eps, weightDecay, c1, c2, param, g[i] * clip, m[i], v[i], &newM[i],
                                     &newV[i]) * lr;
  }
}

} // namespace

void optimizerUpdate(const OptimizerParams &params, float lr, float step, float clip, bool finite, const float *p,
                     const float *g, const float *m, const float *v, float *newP, float *newM, float *newV, int64_t n) {
  if (!finite) { // an overflowed step: everything stays (copies only where the outputs are elsewhere)
    for (auto [from, to] : {std::pair{p, newP}, std::pair{m, newM}, std::pair{v, newV}})
      if (from && to != from)
        std::memcpy(to, from, n * sizeof(float));
    return;
  }
  float c1 = 1.0f, c2 = 1.0f;
  if (params.adamw)
    adamBiasCorrections(params, step, &c1, &c2);
  if (params.adamw && m && v && newM && newV) {
    parallelFor(n, kParallelThreshold, [&](int64_t begin, int64_t end) {
      adamwChunk(params, lr, c1, c2, clip, p + begin, g + begin, m + begin, v + begin, newP + begin, newM + begin,
                 newV + begin, end - begin);
    });
    return;
  }
  parallelLoop(n, n, [&](int64_t i) {
    float scratch;
    optimizerElement(params, lr, c1, c2, clip, p[i], g[i], m ? m[i] : 0.0f, v ? v[i] : 0.0f, &newP[i],
                     newM ? &newM[i] : &scratch, newV ? &newV[i] : &scratch);
  });
}

namespace {

/// The quantize of one chunk, counting saturated and flushed values when asked; one instance per format so
/// that the branch-free conversion vectorizes.
template <Fp8Format F, bool Count>
TEC_CPU_CLONES void quantizeChunk(const float *x, float scale, uint8_t *y, int64_t n, int64_t &saturated,
                                  int64_t &flushed) {
  if constexpr (!Count) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = floatToFp8Branchless(x[i] * scale, F);
  } else {
    const float limit = fp8Max(F);
    int32_t s = 0, f = 0; // a chunk is far below 2^31 elements
#pragma omp simd reduction(+ : s, f)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i] * scale;
      const uint8_t code = floatToFp8Branchless(v, F);
      y[i] = code;
      s += std::fabs(v) > limit && std::fabs(v) <= FLT_MAX;
      f += v != 0.0f && (code & 0x7F) == 0;
    }
    saturated += s, flushed += f;
  }
}

/// The largest |x| of a chunk as the bits of a non-negative float (a NaN's are above +inf's): an unsigned max,
/// which vectorizes and is exact in any order.
TEC_CPU_CLONES uint32_t amaxBits(const float *x, int64_t n) {
  uint32_t largest = 0;
#pragma omp simd reduction(max : largest)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = floatBits(x[i]) & 0x7FFFFFFFu;
    largest = bits > largest ? bits : largest;
  }
  return largest;
}

/// Folds a chunk's amax bits into the running one.
void foldAmax(std::atomic<uint32_t> &largest, uint32_t bits) {
  for (uint32_t seen = largest.load(); bits > seen && !largest.compare_exchange_weak(seen, bits);) {
  }
}

/// The amax from its bits: any NaN as the canonical one.
float amaxFromBits(uint32_t bits) { return bits > 0x7F800000u ? canonicalNan() : bitsToFloat(bits); }

/// The quantize, with its counts when asked and with x's amax when `amax` is set, each chunk's amax read
/// right after its quantize, while the chunk is in cache.
template <bool Count>
void quantizeImpl(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format, int64_t &saturated,
                  int64_t &flushed, float *amax = nullptr) {
  std::atomic<int64_t> sat{0}, flush{0};
  std::atomic<uint32_t> largest{0};
  parallelFor(n, kParallelThreshold, [&](int64_t begin, int64_t end) {
    int64_t s = 0, f = 0;
    if (format == Fp8Format::E4M3)
      quantizeChunk<Fp8Format::E4M3, Count>(x + begin, scale, y + begin, end - begin, s, f);
    else
      quantizeChunk<Fp8Format::E5M2, Count>(x + begin, scale, y + begin, end - begin, s, f);
    sat += s, flush += f; // counts: the order of the sums does not matter
    if (amax)
      foldAmax(largest, amaxBits(x + begin, end - begin));
  });
  saturated = sat;
  flushed = flush;
  if (amax)
    *amax = amaxFromBits(largest.load());
}

template <Fp8Format F> TEC_CPU_CLONES void dequantizeChunk(const uint8_t *x, float scaleInv, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = fp8ToFloatBranchless(x[i], F) * scaleInv;
}

} // namespace

void quantize(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format) {
  int64_t unusedSaturated, unusedFlushed;
  quantizeImpl<false>(x, scale, y, n, format, unusedSaturated, unusedFlushed);
}

void quantizeCounting(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format, int64_t &saturated,
                      int64_t &flushed) {
  quantizeImpl<true>(x, scale, y, n, format, saturated, flushed);
}

float quantizeWithAmax(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format, int64_t *saturated,
                       int64_t *flushed) {
  float amax = 0.0f;
  int64_t unusedSaturated, unusedFlushed;
  if (saturated && flushed)
    quantizeImpl<true>(x, scale, y, n, format, *saturated, *flushed, &amax);
  else
    quantizeImpl<false>(x, scale, y, n, format, unusedSaturated, unusedFlushed, &amax);
  return amax;
}

void dequantize(const uint8_t *x, float scaleInv, float *y, int64_t n, Fp8Format format) {
  parallelFor(n, kParallelThreshold, [&](int64_t begin, int64_t end) {
    if (format == Fp8Format::E4M3)
      dequantizeChunk<Fp8Format::E4M3>(x + begin, scaleInv, y + begin, end - begin);
    else
      dequantizeChunk<Fp8Format::E5M2>(x + begin, scaleInv, y + begin, end - begin);
  });
}

float amax(const float *x, int64_t n) {
  // Per chunk, then folded into one atomic: non-negative floats order like their bits, and a max is exact
  // in any order, so the same every run.
  std::atomic<uint32_t> largest{0};
  parallelFor(n, kParallelThreshold, [&](int64_t begin, int64_t end) { foldAmax(largest, amaxBits(x + begin, end - begin)); });
  return amaxFromBits(largest.load());
}

void delayedScaling(const float *history, int64_t length, float scale, float amaxValue, float fp8Max, int64_t margin,
                    bool mostRecent, float *newHistory, float *newScale, float *newScaleInv) {
  // A step whose amax is 0 (the tensor saw nothing) leaves the history and the scale as they are, as
  // Transformer Engine's bulk update does.
  const bool roll = amaxValue != 0.0f;
  float a = amaxValue;
  if (!mostRecent && roll)
    for (int64_t i = 1; i < length; ++i)
      a = maxAbsNanWins(a, history[i]);
  *newScale = delayedScale(a, scale, fp8Max, static_cast<int>(margin));
  *newScaleInv = 1.0f / *newScale;
  if (!roll) {
    std::memmove(newHistory, history, length * sizeof(float));
    return;
  }
  // torch.roll(history, -1) then history[0] = 0, as Transformer Engine does: this step's amax moves to the
  // last slot and slot 0, which held the oldest amax, is cleared to stage the next step's.
  std::vector<float> rolled(length);
  for (int64_t i = 0; i < length; ++i)
    rolled[i] = i == 0 ? 0.0f : (i + 1) % length == 0 ? amaxValue : history[i + 1];
  std::copy(rolled.begin(), rolled.end(), newHistory);
}

} // namespace tec::kernels::cpu
