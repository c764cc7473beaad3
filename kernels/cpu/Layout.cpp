// CPU kernels: data movement: strided copies, transposes, expand, gathers, scatters, arg-reductions, cumulative sums.
#include "kernels/cpu/CpuKernels.h"

#include "support/Scan.h"
#include "kernels/cpu/Clones.h"
#include "kernels/cpu/BroadcastRows.h"
#include "kernels/cpu/Dims.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

namespace tec::kernels::cpu {

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

/// out[i * C + j] = in[i + j * inStride] for i in [i0, i1), j < C: an image's few channels interleaved into
/// channels-last pixels. C fixed, so that the vectorizer interleaves whole vectors with permutes (an RGB
/// image's transpose 2.6x faster than storing at a stride of C).
template <int C, typename E>
TEC_CPU_CLONES void interleaveLines(const E *__restrict in, int64_t inStride, E *__restrict out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i)
    for (int j = 0; j < C; ++j)
      out[i * C + j] = in[i + j * inStride];
}

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
    if ((nb == 3 || nb == 4) && outA == nb) // an image's channels (RGB, RGBA) into its pixels
      return nb == 3 ? interleaveLines<3>(in + inOffset, inB, out + outOffset, i0, i1)
                     : interleaveLines<4>(in + inOffset, inB, out + outOffset, i0, i1);
    if (nb < kTile) { // a short output line (a few channels): each input line's run read in order
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

} // namespace tec::kernels::cpu
