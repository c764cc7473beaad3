// Broadcasting elementwise ops, comparisons, where, casts, and the bias-activation epilogue.
#include "kernels/cuda/Common.cuh"

#include "support/Cast.h"

#include <type_traits>

namespace tec::kernels::cuda {

namespace {

template <bool Contiguous>
__global__ void binaryFloat(BinaryKind kind, ConstRef a, Strided as, ConstRef b, Strided bs, Ref out, Extent extent,
                            int64_t n) {
  TEC_GRID_LOOP(i, n) {
    store(out, i, applyBinary(kind, load(a, at<Contiguous>(extent, as, i)), load(b, at<Contiguous>(extent, bs, i))));
  }
}

template <bool Contiguous, typename T>
__global__ void binaryInt(BinaryKind kind, const T *a, Strided as, const T *b, Strided bs, T *out, Extent extent,
                          int64_t n) {
  TEC_GRID_LOOP(i, n) { out[i] = applyIntBinary(kind, a[at<Contiguous>(extent, as, i)], b[at<Contiguous>(extent, bs, i)]); }
}

template <bool Contiguous, typename T>
__global__ void compareKernel(CompareKind kind, const T *a, Strided as, const T *b, Strided bs, bool *out,
                              Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) { out[i] = applyCompare(kind, a[at<Contiguous>(extent, as, i)], b[at<Contiguous>(extent, bs, i)]); }
}

/// Comparisons of f16/bf16 widen to f32 (exact), so one float instance serves all float types.
template <bool Contiguous>
__global__ void compareFloat(CompareKind kind, ConstRef a, Strided as, ConstRef b, Strided bs, bool *out,
                             Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) {
    out[i] = applyCompare(kind, load(a, at<Contiguous>(extent, as, i)), load(b, at<Contiguous>(extent, bs, i)));
  }
}

__global__ void unaryKernel(UnaryKind kind, ConstRef x, Ref y, int64_t n) {
  TEC_GRID_LOOP(i, n) { store(y, i, applyUnary(kind, load(x, i))); }
}

template <typename T> __global__ void intUnaryKernel(UnaryKind kind, const T *x, T *y, int64_t n) {
  TEC_GRID_LOOP(i, n) { y[i] = applyIntUnary(kind, x[i]); }
}

__global__ void activationGradKernel(ActivationGradKind kind, ConstRef dy, ConstRef x, Ref dx, int64_t n) {
  TEC_GRID_LOOP(i, n) { store(dx, i, applyActivationGrad(kind, load(dy, i), load(x, i))); }
}

template <bool Contiguous, typename T>
__global__ void whereKernel(const bool *cond, Strided cs, const T *x, Strided xs, const T *y, Strided ys, T *out,
                            Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) {
    out[i] = cond[at<Contiguous>(extent, cs, i)] ? x[at<Contiguous>(extent, xs, i)] : y[at<Contiguous>(extent, ys, i)];
  }
}

__global__ void castKernel(const void *x, ElementType from, void *y, ElementType to, int64_t n) {
  TEC_GRID_LOOP(i, n) { castElement(x, from, y, to, i); }
}

__global__ void biasActivationKernel(Ref y, ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue) {
  TEC_GRID_LOOP(i, rows * cols) {
    store(y, i, applyEpilogue(load(y, i) + (bias.data ? load(bias, i % cols) : 0.0f), epilogue));
  }
}

} // namespace

void binary(BinaryKind kind, const void *a, Strided as, const void *b, Strided bs, void *out, const Extent &extent,
            ElementType type, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&as, &bs});
  const bool contiguous = isContiguous(e, as) && isContiguous(e, bs);
  auto launch = [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    if (type == ElementType::I32)
      binaryInt<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int32_t *>(a), as,
                                                                        static_cast<const int32_t *>(b), bs,
                                                                        static_cast<int32_t *>(out), e, n);
    else if (type == ElementType::I64)
      binaryInt<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int64_t *>(a), as,
                                                                        static_cast<const int64_t *>(b), bs,
                                                                        static_cast<int64_t *>(out), e, n);
    else
      binaryFloat<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, ConstRef{a, type}, as,
                                                                          ConstRef{b, type}, bs, Ref{out, type}, e, n);
  };
  if (contiguous)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

void compare(CompareKind kind, const void *a, Strided as, const void *b, Strided bs, bool *out,
             const Extent &extent, ElementType type, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&as, &bs});
  const bool contiguous = isContiguous(e, as) && isContiguous(e, bs);
  auto launch = [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    auto typed = [&](auto *pa) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(pa)>>;
      compareKernel<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          kind, static_cast<const T *>(a), as, static_cast<const T *>(b), bs, out, e, n);
    };
    if (type == ElementType::I32)
      typed(static_cast<const int32_t *>(nullptr));
    else if (type == ElementType::I64)
      typed(static_cast<const int64_t *>(nullptr));
    else if (type == ElementType::Bool)
      typed(static_cast<const bool *>(nullptr));
    else
      compareFloat<kFlat><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, ConstRef{a, type}, as,
                                                                           ConstRef{b, type}, bs, out, e, n);
  };
  if (contiguous)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

void unary(UnaryKind kind, ConstRef x, Ref y, int64_t n, void *stream) {
  if (!n)
    return;
  if (x.type == ElementType::I32)
    intUnaryKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int32_t *>(x.data),
                                                                     static_cast<int32_t *>(y.data), n);
  else if (x.type == ElementType::I64)
    intUnaryKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, static_cast<const int64_t *>(x.data),
                                                                     static_cast<int64_t *>(y.data), n);
  else
    unaryKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, x, y, n);
}

void activationGrad(ActivationGradKind kind, ConstRef dy, ConstRef x, Ref dx, int64_t n, void *stream) {
  if (n)
    activationGradKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(kind, dy, x, dx, n);
}

void where(const bool *cond, Strided cs, const void *x, Strided xs, const void *y, Strided ys, void *out,
           const Extent &extent, size_t bytes, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&cs, &xs, &ys});
  const bool contiguous = isContiguous(e, cs) && isContiguous(e, xs) && isContiguous(e, ys);
  auto launch = [&](auto *typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    if (contiguous)
      whereKernel<true><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          cond, cs, static_cast<const T *>(x), xs, static_cast<const T *>(y), ys, static_cast<T *>(out), e, n);
    else
      whereKernel<false><<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          cond, cs, static_cast<const T *>(x), xs, static_cast<const T *>(y), ys, static_cast<T *>(out), e, n);
  };
  switch (bytes) {
  case 1: return launch(static_cast<uint8_t *>(nullptr));
  case 2: return launch(static_cast<uint16_t *>(nullptr));
  case 4: return launch(static_cast<uint32_t *>(nullptr));
  default: return launch(static_cast<uint64_t *>(nullptr));
  }
}

void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n, void *stream) {
  if (n == 0)
    return;
  if (from == to)
    cudaMemcpyAsync(y, x, n * elementBytes(from), cudaMemcpyDeviceToDevice, asStream(stream));
  else
    castKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(x, from, y, to, n);
}

void biasActivation(Ref y, ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue, void *stream) {
  if (rows * cols)
    biasActivationKernel<<<blocksFor(rows * cols), kThreads, 0, asStream(stream)>>>(y, bias, rows, cols, epilogue);
}

} // namespace tec::kernels::cuda
