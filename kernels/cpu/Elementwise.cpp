// CPU kernels: broadcast binary ops and comparisons, unary ops, activation gradients, where, casts.
#include "kernels/cpu/CpuKernels.h"

#include "support/Cast.h"
#include "kernels/cpu/Clones.h"
#include "kernels/cpu/BroadcastRows.h"
#include "kernels/cpu/Dims.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
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

} // namespace tec::kernels::cpu
