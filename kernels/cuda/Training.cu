// The training step's small kernels: amax, finiteness, clipping, loss scaling, learning-rate schedules,
// the optimizers; and the device's multiprocessor count.
#include "kernels/cuda/Common.cuh"

namespace tec::kernels::cuda {

namespace {

/// Non-negative floats order like their bits, so max |x| is an integer atomicMax; NaN's bits win.
__global__ void amaxKernel(ConstRef x, int64_t n, float *out) {
  __shared__ float shared[kThreads];
  float local = 0.0f;
  gridStrideByFour(n, [&](int64_t i) { return load(x, i); }, [&](int64_t, float v) { local = maxAbsNanWins(local, v); });
  shared[threadIdx.x] = local;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float a = shared[threadIdx.x], b = shared[threadIdx.x + stride];
      shared[threadIdx.x] = maxAbsNanWins(a, b);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicMax(reinterpret_cast<unsigned int *>(out), __float_as_uint(shared[0]));
}

__global__ void clearIfNotFiniteKernel(ConstRef x, int64_t n, uint8_t *flag) {
  TEC_GRID_LOOP(i, n) {
    if (!isfinite(load(x, i)))
      *flag = 0;
  }
}

__global__ void setScalarKernel(float *out, float value) { *out = value; }

__global__ void clipCoefficientKernel(const float *norm, float maxNorm, float *out) {
  *out = kernels::clipCoefficient(*norm, maxNorm);
}

__global__ void lossScaleUpdateKernel(const float *scale, const float *clean, const uint8_t *finite, float interval,
                                      float growth, float backoff, float *nextScale, float *nextClean) {
  kernels::updateLossScale(*scale, *clean, *finite != 0, interval, growth, backoff, nextScale, nextClean);
}

__global__ void learningRateKernel(int schedule, const float *lr, const float *step, float warmup, float total, float *out) {
  *out = kernels::learningRate(schedule, *lr, *step, warmup, total);
}

struct OptimizerBatch {
  OptimizerTensor tensors[kOptimizerTensorsPerLaunch];
};

/// blockIdx.y picks the parameter; the blocks along x stride over its elements.
__global__ void optimizerKernel(OptimizerParams params, const float *lr, const float *step, const float *clip,
                                const uint8_t *finite, OptimizerBatch batch) {
  const OptimizerTensor t = batch.tensors[blockIdx.y];
  const bool apply = !finite || *finite;
  float c1 = 1.0f, c2 = 1.0f;
  if (params.adamw)
    adamBiasCorrections(params, *step, &c1, &c2);
  const float rate = *lr, scale = clip ? *clip : 1.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n; i += int64_t(gridDim.x) * blockDim.x) {
    const float m = t.m ? t.m[i] : 0.0f, v = t.v ? t.v[i] : 0.0f;
    if (!apply) { // an overflowed step keeps every value
      t.newP[i] = t.p[i];
      if (t.newM)
        t.newM[i] = m;
      if (t.newV)
        t.newV[i] = v;
      continue;
    }
    float scratch;
    optimizerElement(params, rate, c1, c2, scale, t.p[i], t.g[i], m, v, &t.newP[i], t.newM ? &t.newM[i] : &scratch,
                     t.newV ? &t.newV[i] : &scratch);
  }
}

} // namespace

int currentMultiprocessors() {
  static const int count = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
    return value > 0 ? value : 1;
  }();
  return count;
}

void amax(ConstRef x, int64_t n, float *out, void *stream) {
  cudaMemsetAsync(out, 0, sizeof(float), asStream(stream));
  if (n)
    amaxKernel<<<atomicGridBlocks(n, kThreads, currentMultiprocessors()), kThreads, 0, asStream(stream)>>>(x, n, out);
}

void setFlag(uint8_t *flag, void *stream) { cudaMemsetAsync(flag, 1, 1, asStream(stream)); }

void setScalar(float *out, float value, void *stream) { setScalarKernel<<<1, 1, 0, asStream(stream)>>>(out, value); }

void clearIfNotFinite(ConstRef x, int64_t n, uint8_t *flag, void *stream) {
  if (n)
    clearIfNotFiniteKernel<<<blocksFor(n), kThreads, 0, asStream(stream)>>>(x, n, flag);
}

void clipCoefficient(const float *norm, float maxNorm, float *out, void *stream) {
  clipCoefficientKernel<<<1, 1, 0, asStream(stream)>>>(norm, maxNorm, out);
}

void lossScaleUpdate(const float *scale, const float *clean, const uint8_t *finite, float interval, float growth,
                     float backoff, float *nextScale, float *nextClean, void *stream) {
  lossScaleUpdateKernel<<<1, 1, 0, asStream(stream)>>>(scale, clean, finite, interval, growth, backoff, nextScale,
                                                       nextClean);
}

void optimizerUpdate(const OptimizerParams &params, const float *lr, const float *step, const float *clip,
                     const uint8_t *finite, const std::vector<OptimizerTensor> &tensors, void *stream) {
  for (size_t first = 0; first < tensors.size(); first += kOptimizerTensorsPerLaunch) {
    OptimizerBatch batch;
    const size_t count = std::min<size_t>(kOptimizerTensorsPerLaunch, tensors.size() - first);
    int64_t largest = 0;
    for (size_t i = 0; i < count; ++i) {
      batch.tensors[i] = tensors[first + i];
      largest = std::max(largest, tensors[first + i].n);
    }
    const dim3 grid(std::min(blocksFor(largest), 1024), static_cast<unsigned>(count));
    optimizerKernel<<<grid, kThreads, 0, asStream(stream)>>>(params, lr, step, clip, finite, batch);
  }
}

void learningRate(int schedule, const float *lr, const float *step, float warmup, float total, float *out, void *stream) {
  learningRateKernel<<<1, 1, 0, asStream(stream)>>>(schedule, lr, step, warmup, total, out);
}

} // namespace tec::kernels::cuda
