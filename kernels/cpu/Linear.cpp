// CPU kernels: matmul, Gemm and Linear with their epilogues.
#include "kernels/cpu/CpuKernels.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/Clones.h"
#include "kernels/cpu/BroadcastRows.h"
#include "kernels/cpu/Dims.h"
#include "kernels/cpu/PackedGemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace tec::kernels::cpu {

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

/// Rows of a GEMM epilogue, `stride` apart in `rows`, `residual` and `out`: a plain function so that the
/// loops vectorize, with the row loop inside it, since a call per row (through the clones' dispatch) cost
/// as much as the arithmetic on rows of 16 to 96 floats (EfficientNet's 112x112 expansion: 12,544 rows).
/// Rows without a bias that lie end to end are one loop. `out` may be `y` or `residual` (the same
/// elements: each is read before it is written).
template <typename Act>
TEC_CPU_CLONES void epilogueBlock(const float *y, const float *bias, const float *residual, float *out, int64_t rows,
                                  int64_t n, int64_t stride, Act act) {
  if (!bias && stride == n) {
    n *= rows;
    rows = 1;
  }
  for (int64_t r = 0; r < rows; ++r, y += stride, out += stride, residual = residual ? residual + stride : nullptr) {
    if (bias && residual) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        out[j] = act(y[j] + bias[j]) + residual[j];
    } else if (bias) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        out[j] = act(y[j] + bias[j]);
    } else if (residual) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        out[j] = act(y[j]) + residual[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        out[j] = act(y[j]);
    }
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
  withEpilogueOp(epilogue, [&](auto act) { epilogueBlock(y, nullptr, residual, out, rows, cols, stride, act); });
}

void linear(const float *x, const float *weight, const float *bias, float *y, int64_t m, int64_t n, int64_t k,
            bool transposeA, bool transposeB, Epilogue epilogue, const float *residual, float *out,
            const PackedGemm *packed) {
  if (m == 0 || n == 0)
    return;
  // What the packed GEMM's primitive applies as it stores C is not applied again; where that is all of the
  // epilogue, the result goes straight to its place.
  const float *fusedBias = nullptr, *fusedResidual = nullptr;
  if (packed && k > 0) {
    const PackedGemm::Fused &f = packed->fused();
    if (f.bias)
      std::swap(fusedBias, bias);
    if (f.activation != Epilogue::None)
      epilogue = Epilogue::None;
    if (f.residual)
      std::swap(fusedResidual, residual);
    if (out && !bias && !residual && epilogue == Epilogue::None)
      y = std::exchange(out, nullptr);
  }
  auto withActivation = [&](auto act) {
    auto chunk = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      const int64_t at = i0 * n + j0;
      epilogueBlock(y + at, bias ? bias + j0 : nullptr, residual ? residual + at : nullptr, (out ? out : y) + at,
                    i1 - i0, j1 - j0, n, act);
    };
    if (k == 0) {
      std::fill(y, y + m * n, 0.0f);
      parallelLoop(m, m * n, [&](int64_t i) { chunk(i, i + 1, 0, n); });
    } else {
      const bool epilogueWork = bias || residual || out || epilogue != Epilogue::None;
      if (packed)
        packed->run(x, y, fusedBias, fusedResidual, epilogueWork ? GemmChunkEpilogue(chunk) : GemmChunkEpilogue());
      else
        planSgemm(transposeA, transposeB, m, n, k, 1.0f, x, transposeA ? m : k, weight, transposeB ? k : n, 0.0f, y,
                  n, epilogueWork ? GemmChunkEpilogue(chunk) : GemmChunkEpilogue());
    }
  };
  withEpilogueOp(epilogue, withActivation);
}

} // namespace tec::kernels::cpu
