// CPU kernels: FP8 quantize, dequantize and amax.
#include "kernels/cpu/CpuKernels.h"

#include "kernels/cpu/Clones.h"

#include <atomic>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

namespace tec::kernels::cpu {

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

void quantizeBlocks(const float *x, uint8_t *y, float *scaleInv, int64_t rows, int64_t cols, int64_t blockRows,
                    int64_t blockCols, bool transposed, Fp8Format format, BlockScale kind, float epsilon,
                    int64_t *saturated, int64_t *flushed) {
  const int64_t bands = (rows + blockRows - 1) / blockRows, blocksPerBand = (cols + blockCols - 1) / blockCols;
  const float limit = fp8Max(format);
  std::atomic<int64_t> saturatedCount{0}, flushedCount{0};
  // Tasks of whole bands (at least 64 rows): a transposed source is read a slab at a time along its rows
  // into the result's layout; then each block's amax and its values, row segment by row segment, with the
  // vectorized amax and quantize of the per-tensor path.
  parallelFor(bands, std::max<int64_t>(1, 64 / blockRows), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * blockRows, last = std::min(rows, end * blockRows);
    std::vector<float> slab;
    const float *source = x + first * cols;
    if (transposed) {
      slab.resize((last - first) * cols);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = first; r < last; ++r)
          slab[(r - first) * cols + c] = x[c * rows + r];
      source = slab.data();
    }
    int64_t sat = 0, flush = 0;
    for (int64_t band = begin; band < end; ++band) {
      const int64_t r0 = band * blockRows, r1 = std::min(rows, r0 + blockRows);
      for (int64_t block = 0; block < blocksPerBand; ++block) {
        const int64_t c0 = block * blockCols, width = std::min(cols, c0 + blockCols) - c0;
        uint32_t largest = 0;
        for (int64_t r = r0; r < r1; ++r)
          largest = std::max(largest, amaxBits(source + (r - first) * cols + c0, width));
        const BlockScales s = blockScales(amaxFromBits(largest), limit, kind, epsilon);
        scaleInv[band * blocksPerBand + block] = s.scaleInv;
        for (int64_t r = r0; r < r1; ++r) {
          const float *in = source + (r - first) * cols + c0;
          uint8_t *out = y + r * cols + c0;
          if (format == Fp8Format::E4M3)
            saturated ? quantizeChunk<Fp8Format::E4M3, true>(in, s.scale, out, width, sat, flush)
                      : quantizeChunk<Fp8Format::E4M3, false>(in, s.scale, out, width, sat, flush);
          else
            saturated ? quantizeChunk<Fp8Format::E5M2, true>(in, s.scale, out, width, sat, flush)
                      : quantizeChunk<Fp8Format::E5M2, false>(in, s.scale, out, width, sat, flush);
        }
      }
    }
    saturatedCount += sat, flushedCount += flush;
  });
  if (saturated && flushed)
    *saturated = saturatedCount, *flushed = flushedCount;
}

void dequantizeBlocks(const uint8_t *x, const float *scaleInv, float *y, int64_t rows, int64_t cols,
                      int64_t blockRows, int64_t blockCols, Fp8Format format) {
  const int64_t blocksPerBand = (cols + blockCols - 1) / blockCols;
  parallelFor(rows, std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *s = scaleInv + (r / blockRows) * blocksPerBand;
      for (int64_t c0 = 0, block = 0; c0 < cols; c0 += blockCols, ++block) // a block's run of columns at once
        for (int64_t c = c0; c < std::min(cols, c0 + blockCols); ++c)
          y[r * cols + c] = fp8ToFloatBranchless(x[r * cols + c], format) * s[block];
    }
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
