// Softmax, layer norm and the reductions (two-stage where an output spans the GPU).
#include "kernels/cuda/Common.cuh"

#include <cfloat>

namespace tec::kernels::cuda {

namespace {

/// One block per (outer, inner) column of the softmax axis; the same exp as the CPU (expNonPositive).
__global__ void softmaxKernel(ConstRef x, Ref y, int64_t axis, int64_t inner, bool logSoftmax) {
  __shared__ float shared[kThreads];
  const int64_t o = blockIdx.x / inner, in = blockIdx.x % inner;
  const int64_t base = o * axis * inner + in;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < axis; j += blockDim.x)
    mx = fmaxf(mx, load(x, base + j * inner));
  mx = blockMax(mx, shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < axis; j += blockDim.x)
    sum += expNonPositive(load(x, base + j * inner) - mx);
  sum = blockSum(sum, shared);
  const float logSum = logf(sum), inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < axis; j += blockDim.x) {
    const float v = load(x, base + j * inner) - mx;
    store(y, base + j * inner, logSoftmax ? v - logSum : expNonPositive(v) * inv);
  }
}

/// One block per row; mean and variance accumulated in double, as on the CPU.
__global__ void layerNormKernel(ConstRef x, ConstRef scale, ConstRef bias, Ref y, Ref mean, Ref rstd, int64_t cols,
                                float epsilon, bool center) {
  __shared__ double shared[kThreads];
  const int64_t base = blockIdx.x * cols;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < cols && center; j += blockDim.x)
    sum += load(x, base + j);
  const double mu = center ? blockSum(sum, shared) / cols : 0.0;
  double sq = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double d = load(x, base + j) - mu;
    sq += d * d;
  }
  const float inv = static_cast<float>(1.0 / sqrt(blockSum(sq, shared) / cols + epsilon));
  const float m = static_cast<float>(mu);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    store(y, base + j, (load(x, base + j) - m) * inv * load(scale, j) + (bias.data ? load(bias, j) : 0.0f));
  if (threadIdx.x == 0) {
    if (mean.data)
      store(mean, blockIdx.x, m);
    if (rstd.data)
      store(rstd, blockIdx.x, inv);
  }
}

template <typename Acc> __device__ Acc finishReduction(ReduceKind kind, Acc sum, int64_t count) {
  return kind == ReduceKind::Mean ? (count ? sum / static_cast<Acc>(count) : Acc(0)) : sum;
}

/// Rows and General plans: block (o, s) sums part s of output o's reduced range, its threads striding.
template <typename Acc, typename Read, typename Write>
__global__ void reduceBlocksKernel(ReductionPlan p, ReduceKind kind, Read x, Extent kept, Strided keptStrides,
                                   Extent reduced, Strided reducedStrides, Write y, Acc *partials) {
  __shared__ Acc shared[kReduceThreads];
  const int64_t chunk = (p.reducedCount + p.splits - 1) / p.splits, begin = int64_t(blockIdx.y) * chunk;
  const int64_t end = min(begin + chunk, p.reducedCount);
  const bool rows = p.kind == ReductionPlan::Kind::Rows;
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const int64_t base = offsetOf(kept, keptStrides, o);
    Acc sum = reduceIdentity<Acc>(kind);
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x)
      sum = reduceCombine<Acc>(kind, sum, x(base + (rows ? reducedStrides.base + r : offsetOf(reduced, reducedStrides, r))));
    sum = blockReduce(kind, sum, shared);
    if (threadIdx.x == 0) {
      if (p.splits > 1)
        partials[o * p.splits + blockIdx.y] = sum;
      else
        y(o, finishReduction(kind, sum, p.reducedCount));
    }
  }
}

/// Columns plans: a thread per output, coalesced along the outputs; blocks along y take parts of the rows.
template <typename Acc, typename Read, typename Write>
__global__ void reduceColumnsKernel(ReductionPlan p, ReduceKind kind, Read x, int64_t base, Write y, Acc *partials) {
  const int64_t chunk = (p.reducedCount + p.splits - 1) / p.splits, begin = int64_t(blockIdx.y) * chunk;
  const int64_t end = min(begin + chunk, p.reducedCount);
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < p.outputs; o += int64_t(gridDim.x) * blockDim.x) {
    Acc sum = reduceIdentity<Acc>(kind);
    for (int64_t r = begin; r < end; ++r)
      sum = reduceCombine<Acc>(kind, sum, x(base + o + r * p.columnStride));
    if (p.splits > 1)
      partials[o * p.splits + blockIdx.y] = sum;
    else
      y(o, finishReduction(kind, sum, p.reducedCount));
  }
}

/// The second stage: each output's partial sums, added in split order (deterministic).
template <typename Acc, typename Write>
__global__ void reduceFinishKernel(const Acc *partials, int64_t outputs, int64_t splits, int64_t count, ReduceKind kind,
                                   Write y) {
  TEC_GRID_LOOP(o, outputs) {
    Acc sum = reduceIdentity<Acc>(kind);
    for (int64_t s = 0; s < splits; ++s)
      sum = reduceCombine<Acc>(kind, sum, partials[o * splits + s]);
    y(o, finishReduction(kind, sum, count));
  }
}

template <typename Acc, typename Read, typename Write>
void launchReduction(const ReductionPlan &p, ReduceKind kind, Read x, const Extent &kept, const Strided &keptStrides,
                     const Extent &reduced, const Strided &reducedStrides, Write y, void *partials,
                     cudaStream_t stream) {
  Acc *sums = static_cast<Acc *>(partials);
  const dim3 grid(p.gridX, p.gridY);
  if (p.kind == ReductionPlan::Kind::Columns)
    reduceColumnsKernel<Acc><<<grid, kReduceThreads, 0, stream>>>(p, kind, x, keptStrides.base + reducedStrides.base,
                                                                  y, sums);
  else
    reduceBlocksKernel<Acc><<<grid, kReduceThreads, 0, stream>>>(p, kind, x, kept, keptStrides, reduced,
                                                                 reducedStrides, y, sums);
  if (p.splits > 1)
    reduceFinishKernel<Acc><<<blocksFor(p.outputs), kThreads, 0, stream>>>(sums, p.outputs, p.splits, p.reducedCount,
                                                                           kind, y);
}

} // namespace

void softmax(ConstRef x, Ref y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax, void *stream) {
  if (outer * inner * axis == 0)
    return;
  softmaxKernel<<<static_cast<unsigned>(outer * inner), kThreads, 0, asStream(stream)>>>(x, y, axis, inner, logSoftmax);
}

void layerNorm(ConstRef x, ConstRef scale, ConstRef bias, Ref y, Ref mean, Ref rstd, int64_t rows, int64_t cols,
               float epsilon, bool center, void *stream) {
  if (rows == 0 || cols == 0)
    return;
  layerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, asStream(stream)>>>(x, scale, bias, y, mean, rstd, cols,
                                                                                  epsilon, center);
}

void reduce(ReduceKind kind, const void *x, Extent kept, Strided keptStrides, Extent reduced, Strided reducedStrides,
            void *y, ElementType type, ElementType outType, void *partials, int multiprocessors, void *stream) {
  const ReductionPlan p = planReduction(kept, keptStrides, reduced, reducedStrides, multiprocessors);
  if (p.outputs == 0)
    return;
  auto s = asStream(stream);
  if (type == ElementType::I32)
    launchReduction<int64_t>(p, kind, IntRead<int32_t>{static_cast<const int32_t *>(x)}, kept, keptStrides, reduced,
                             reducedStrides, IntWrite<int32_t>{static_cast<int32_t *>(y)}, partials, s);
  else if (type == ElementType::I64)
    launchReduction<int64_t>(p, kind, IntRead<int64_t>{static_cast<const int64_t *>(x)}, kept, keptStrides, reduced,
                             reducedStrides, IntWrite<int64_t>{static_cast<int64_t *>(y)}, partials, s);
  else
    launchReduction<double>(p, kind, FloatRead{ConstRef{x, type}}, kept, keptStrides, reduced, reducedStrides,
                            FloatWrite{Ref{y, outType}}, partials, s);
}

} // namespace tec::kernels::cuda
