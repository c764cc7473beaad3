// CPU kernels: the optimizer update.
#include "kernels/cpu/CpuKernels.h"

#include "kernels/cpu/Clones.h"

#include <cstring>
#include <utility>

namespace tec::kernels::cpu {

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

} // namespace tec::kernels::cpu
