// Data movement: strided copies and tiled transposes, gathers and their scatter-add gradients, one-hot,
// arg-reductions and cumulative sums.
#include "kernels/cuda/Common.cuh"

#include "support/Scan.h"

#include <type_traits>

namespace tec::kernels::cuda {

namespace {

template <typename T>
__global__ void stridedCopyKernel(const T *src, Strided s, T *dst, Strided d, Extent extent, int64_t n) {
  TEC_GRID_LOOP(i, n) { dst[offsetOf(extent, d, i)] = src[offsetOf(extent, s, i)]; }
}

/// y[c, r] = x[r, c] through 32x32 shared-memory tiles, reads and writes coalesced; row tiles on x.
template <typename T> __global__ void transposeKernel(const T *x, int64_t rows, int64_t cols, T *y) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.x) * kTile;
  for (int64_t c0 = int64_t(blockIdx.y) * kTile; c0 < cols; c0 += int64_t(gridDim.y) * kTile) {
    for (int i = threadIdx.y; i < kTile; i += blockDim.y)
      if (r0 + i < rows && c0 + threadIdx.x < cols)
        tile[i][threadIdx.x] = x[(r0 + i) * cols + c0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y)
      if (c0 + i < cols && r0 + threadIdx.x < rows)
        y[(c0 + i) * rows + r0 + threadIdx.x] = tile[threadIdx.x][i];
    __syncthreads();
  }
}

template <typename T, typename Index>
__global__ void gatherKernel(const T *data, int64_t outer, int64_t axisDim, int64_t inner, const Index *indices,
                             int64_t numIndices, T *y, int *error) {
  const int64_t n = outer * numIndices * inner;
  TEC_GRID_LOOP(i, n) {
    const int64_t in = i % inner, j = (i / inner) % numIndices, o = i / (inner * numIndices);
    int64_t index = indices[j];
    if (index < 0)
      index += axisDim;
    if (index < 0 || index >= axisDim) {
      atomicExch(error, 1);
      y[i] = T(0);
      continue;
    }
    y[i] = data[(o * axisDim + index) * inner + in];
  }
}

template <typename T, typename Index>
__global__ void gatherElementsKernel(const T *data, int64_t outer, int64_t axisDim, int64_t inner,
                                     const Index *indices, int64_t picks, T *y, int *error) {
  const int64_t n = outer * picks * inner;
  TEC_GRID_LOOP(i, n) {
    const int64_t in = i % inner, o = i / (inner * picks);
    int64_t index = indices[i];
    if (index < 0)
      index += axisDim;
    if (index < 0 || index >= axisDim) {
      atomicExch(error, 1);
      y[i] = T(0);
      continue;
    }
    y[i] = data[(o * axisDim + index) * inner + in];
  }
}

/// GatherElements' gradient: one thread per output element sums, in index order, the updates picked
/// from it (picks along the axis are few: a class per label).
template <typename Index>
__global__ void scatterAddElementsKernel(ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner,
                                         const Index *indices, int64_t picks, Ref y) {
  const int64_t n = outer * axisDim * inner;
  TEC_GRID_LOOP(i, n) {
    const int64_t in = i % inner, row = (i / inner) % axisDim, o = i / (inner * axisDim);
    float sum = 0.0f;
    for (int64_t j = 0; j < picks; ++j) {
      const int64_t u = (o * picks + j) * inner + in;
      const int64_t index = indices[u] < 0 ? indices[u] + axisDim : indices[u];
      if (index == row)
        sum += load(updates, u);
    }
    store(y, i, sum);
  }
}

/// Gather's gradient (an embedding table's): one block per output row scans the indices a tile at a
/// time and its threads add the matching update rows in index order, so repeated tokens sum the same
/// way every run without atomics.
template <typename Index>
__global__ void scatterAddRowsKernel(ConstRef updates, int64_t axisDim, int64_t inner, const Index *indices,
                                     int64_t picks, Ref y) {
  __shared__ bool match[kThreads];
  const int64_t row = blockIdx.x % axisDim, o = blockIdx.x / axisDim;
  for (int64_t in = threadIdx.x; in < inner; in += blockDim.x)
    store(y, (o * axisDim + row) * inner + in, 0.0f);
  for (int64_t tile = 0; tile < picks; tile += blockDim.x) {
    const int64_t j = tile + threadIdx.x;
    int64_t index = j < picks ? indices[j] : -1;
    if (index < 0 && j < picks)
      index += axisDim;
    match[threadIdx.x] = j < picks && index == row;
    __syncthreads();
    for (int t = 0; t < blockDim.x && tile + t < picks; ++t)
      if (match[t])
        for (int64_t in = threadIdx.x; in < inner; in += blockDim.x) {
          const int64_t out = (o * axisDim + row) * inner + in;
          store(y, out, load(ConstRef(y), out) + load(updates, (o * picks + tile + t) * inner + in));
        }
    __syncthreads();
  }
}

template <typename Read>
__global__ void argReduceKernel(bool max, bool last, Read x, int64_t outer, int64_t dim, int64_t inner, int64_t *y) {
  TEC_GRID_LOOP(i, outer * inner) {
    const int64_t base = (i / inner) * dim * inner + i % inner;
    int64_t best = 0;
    for (int64_t j = 1; j < dim; ++j)
      if (argBetter(max, last, x(base + j * inner), x(base + best * inner)))
        best = j;
    y[i] = best;
  }
}

// One thread per line: the lines exporters scan (position ids from masks) are short and many, so a
// scan within a line is not worth its synchronization.
__global__ void cumSumFloatKernel(ConstRef x, Ref y, int64_t lines, int64_t dim, int64_t inner, bool exclusive,
                                  bool reverse) {
  TEC_GRID_LOOP(line, lines) {
    const int64_t start = lineStart(line, dim, inner);
    cumSumLine<float>([&](int64_t j) { return load(x, start + j * inner); },
                      [&](int64_t j, float v) { store(y, start + j * inner, v); }, dim, exclusive, reverse);
  }
}

template <typename T>
__global__ void cumSumIntKernel(const T *x, T *y, int64_t lines, int64_t dim, int64_t inner, bool exclusive,
                                bool reverse) {
  TEC_GRID_LOOP(line, lines) {
    const int64_t start = lineStart(line, dim, inner);
    cumSumLine<int64_t>([&](int64_t j) { return static_cast<int64_t>(x[start + j * inner]); },
                        [&](int64_t j, int64_t v) { y[start + j * inner] = static_cast<T>(v); }, dim, exclusive,
                        reverse);
  }
}

template <typename Index>
__global__ void oneHotKernel(const Index *labels, int64_t n, int64_t depth, float *y, int *error) {
  TEC_GRID_LOOP(i, n * depth) {
    const int64_t row = i / depth, column = i % depth;
    const Index label = labels[row];
    if (column == 0 && (label < 0 || label >= depth))
      atomicExch(error, 1);
    y[i] = label == column ? 1.0f : 0.0f;
  }
}

} // namespace

void stridedCopy(const void *src, Strided s, void *dst, Strided d, const Extent &extent, size_t bytes, void *stream) {
  const int64_t n = count(extent);
  if (n == 0)
    return;
  Extent e = extent;
  coalesce(e, {&s, &d});
  const char *from = static_cast<const char *>(src);
  char *to = static_cast<char *>(dst);
  if (isContiguous(e, s) && isContiguous(e, d)) { // a plain copy (a contiguous slice, concat piece or split)
    cudaMemcpyAsync(to + d.base * bytes, from + s.base * bytes, n * bytes, cudaMemcpyDeviceToDevice, asStream(stream));
    return;
  }
  // A 2-D transpose (dst row-major [D0, D1], src the row-major [D1, D0]): tiled, coalesced both ways.
  const bool transpose = e.rank == 2 && isContiguous(e, d) && s.strides[0] == 1 && s.strides[1] == e.dims[0];
  auto launch = [&](auto *typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    if (transpose) {
      const TileGrid g = transposeGrid(e.dims[1], e.dims[0]);
      transposeKernel<<<dim3(g.x, g.y), dim3(kTile, 8), 0, asStream(stream)>>>(
          reinterpret_cast<const T *>(from) + s.base, e.dims[1], e.dims[0], reinterpret_cast<T *>(to) + d.base);
      return;
    }
    stridedCopyKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(static_cast<const T *>(src), s,
                                                                       static_cast<T *>(dst), d, e, n);
  };
  switch (bytes) {
  case 1: return launch(static_cast<uint8_t *>(nullptr));
  case 2: return launch(static_cast<uint16_t *>(nullptr));
  case 4: return launch(static_cast<uint32_t *>(nullptr));
  default: return launch(static_cast<uint64_t *>(nullptr));
  }
}

/// Calls f(T *, I *) with null pointers of the unsigned type of `bytes`-wide elements and the index type:
/// the typed dispatch of the gather kernels, which move elements without reading them.
template <typename F> void byElementAndIndex(size_t bytes, bool indices64, F f) {
  auto withIndex = [&](auto *typed) {
    if (indices64)
      f(typed, static_cast<int64_t *>(nullptr));
    else
      f(typed, static_cast<int32_t *>(nullptr));
  };
  switch (bytes) {
  case 1: return withIndex(static_cast<uint8_t *>(nullptr));
  case 2: return withIndex(static_cast<uint16_t *>(nullptr));
  case 4: return withIndex(static_cast<uint32_t *>(nullptr));
  default: return withIndex(static_cast<uint64_t *>(nullptr));
  }
}

void argReduce(bool max, bool last, const void *x, ElementType type, int64_t outer, int64_t dim, int64_t inner,
               int64_t *y, void *stream) {
  const int64_t n = outer * inner;
  if (n == 0 || dim == 0)
    return;
  auto s = asStream(stream);
  if (type == ElementType::I32)
    argReduceKernel<<<blocksFor(n), kThreads, 0, s>>>(max, last, IntRead<int32_t>{static_cast<const int32_t *>(x)},
                                                      outer, dim, inner, y);
  else if (type == ElementType::I64)
    argReduceKernel<<<blocksFor(n), kThreads, 0, s>>>(max, last, IntRead<int64_t>{static_cast<const int64_t *>(x)},
                                                      outer, dim, inner, y);
  else
    argReduceKernel<<<blocksFor(n), kThreads, 0, s>>>(max, last, FloatRead{ConstRef{x, type}}, outer, dim, inner, y);
}

void cumSum(const void *x, void *y, ElementType type, int64_t outer, int64_t dim, int64_t inner, bool exclusive,
            bool reverse, void *stream) {
  const int64_t lines = outer * inner;
  if (lines == 0 || dim == 0)
    return;
  auto s = asStream(stream);
  if (type == ElementType::I32)
    cumSumIntKernel<<<blocksFor(lines), kThreads, 0, s>>>(static_cast<const int32_t *>(x), static_cast<int32_t *>(y),
                                                          lines, dim, inner, exclusive, reverse);
  else if (type == ElementType::I64)
    cumSumIntKernel<<<blocksFor(lines), kThreads, 0, s>>>(static_cast<const int64_t *>(x), static_cast<int64_t *>(y),
                                                          lines, dim, inner, exclusive, reverse);
  else
    cumSumFloatKernel<<<blocksFor(lines), kThreads, 0, s>>>(ConstRef{x, type}, Ref{y, type}, lines, dim, inner,
                                                            exclusive, reverse);
}

void gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                    bool indices64, int64_t picks, void *y, size_t bytes, int *error, void *stream) {
  const int64_t n = outer * picks * inner;
  if (n == 0)
    return;
  auto launch = [&](auto *typed, auto *index) {
    using T = std::remove_pointer_t<decltype(typed)>;
    using I = std::remove_pointer_t<decltype(index)>;
    gatherElementsKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
        static_cast<const T *>(data), outer, axisDim, inner, static_cast<const I *>(indices), picks,
        static_cast<T *>(y), error);
  };
  byElementAndIndex(bytes, indices64, launch);
}

void scatterAdd(ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
                int64_t picks, bool elements, Ref y, void *stream) {
  const int64_t n = outer * axisDim * inner;
  if (n == 0)
    return;
  auto launch = [&](auto *index) {
    using I = std::remove_pointer_t<decltype(index)>;
    if (elements)
      scatterAddElementsKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(
          updates, outer, axisDim, inner, static_cast<const I *>(indices), picks, y);
    else
      scatterAddRowsKernel<<<outer * axisDim, kThreads, 0, asStream(stream)>>>(
          updates, axisDim, inner, static_cast<const I *>(indices), picks, y);
  };
  if (indices64)
    launch(static_cast<int64_t *>(nullptr));
  else
    launch(static_cast<int32_t *>(nullptr));
}

void gather(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
            int64_t numIndices, void *y, size_t bytes, int *error, void *stream) {
  const int64_t n = outer * numIndices * inner;
  if (n == 0)
    return;
  auto launch = [&](auto *typed, auto *index) {
    using T = std::remove_pointer_t<decltype(typed)>;
    using I = std::remove_pointer_t<decltype(index)>;
    gatherKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(static_cast<const T *>(data), outer, axisDim, inner,
                                                                  static_cast<const I *>(indices), numIndices,
                                                                  static_cast<T *>(y), error);
  };
  byElementAndIndex(bytes, indices64, launch);
}

void oneHot(const void *labels, bool labels64, int64_t n, int64_t depth, float *y, int *error, void *stream) {
  if (n * depth == 0)
    return;
  if (labels64)
    oneHotKernel<<<blocksFor(n * depth), kThreads, 0, asStream(stream)>>>(static_cast<const int64_t *>(labels), n,
                                                                          depth, y, error);
  else
    oneHotKernel<<<blocksFor(n * depth), kThreads, 0, asStream(stream)>>>(static_cast<const int32_t *>(labels), n,
                                                                          depth, y, error);
}

} // namespace tec::kernels::cuda
