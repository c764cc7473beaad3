// Attention on the CPU, tiled as FlashAttention is on GPUs: a block of queries walks the keys a block
// at a time with an online softmax, so a step holds one block of scores per thread, never the
// queries x keys matrix. The block products are BLAS GEMMs.
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/Clones.h"
#include "kernels/cpu/CpuKernels.h"

#include "support/Activations.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tec::kernels::cpu {

namespace {

constexpr int64_t kQueryBlock = 64, kKeyBlock = 128;
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

int64_t blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

/// The rows of one (batch, head) in q/out/lse, and of its K/V head in k/v: row indices of contiguous
/// tensors, and where a row lies under the layout (q and k are read through it).
struct Head {
  const AttentionShape &a;
  int64_t b, h;
  const AttentionLayout &l;
  int64_t queryRow(int64_t i) const { return (b * a.heads + h) * a.queries + i; }
  int64_t keyRow(int64_t j) const { return (b * a.kvHeads + a.kvHeadOf(h)) * a.keys + j; }
  template <typename T> T *at(T *base, const int64_t (&strides)[3], int64_t head, int64_t row) const {
    return base + b * strides[0] + head * strides[1] + row * strides[2];
  }
  const float *q(const float *base, int64_t i) const { return at(base, l.q, h, i); }
  const float *k(const float *base, int64_t j) const { return at(base, l.k, a.kvHeadOf(h), j); }
  const float *v(const float *base, int64_t j) const { return at(base, l.v, a.kvHeadOf(h), j); }
  float *out(float *base, int64_t i) const { return at(base, l.out, h, i); }
};

/// Keys [j0, j0 + nk) for queries [i0, i0 + nq): s[r * kKeyBlock + c] = scale q.k, masked.
void blockScores(const Head &hd, const float *q, const float *k, const void *mask, int64_t i0, int64_t nq, int64_t j0,
                 int64_t nk, float *s) {
  const AttentionShape &a = hd.a;
  sgemm(false, true, nq, nk, a.headDim, a.scale, hd.q(q, i0), hd.l.q[2], hd.k(k, j0), hd.l.k[2], 0.0f, s, kKeyBlock);
  const int64_t ms = a.maskStrides[3];
  for (int64_t r = 0; r < nq; ++r) {
    float *row = s + r * kKeyBlock;
    const int64_t i = i0 + r, first = a.maskRow(hd.b, hd.h, i) + j0 * ms;
    if (a.mask == AttentionMask::Additive) {
      const float *m = static_cast<const float *>(mask) + first;
      for (int64_t c = 0; c < nk; ++c)
        row[c] = maskedScore(row[c], m[c * ms], true);
    } else if (a.mask == AttentionMask::Boolean) {
      const bool *m = static_cast<const bool *>(mask) + first;
      for (int64_t c = 0; c < nk; ++c)
        row[c] = maskedScore(row[c], 0.0f, m[c * ms]);
    }
    for (int64_t c = std::max<int64_t>(0, a.visibleKeys(i) - j0); c < nk; ++c)
      row[c] = kMinusInf;
  }
}

/// The keys a block of queries [i0, i0 + nq) can see: all, or under the causal rule those up to its last row.
int64_t keysSeen(const AttentionShape &a, int64_t i0, int64_t nq) { return a.visibleKeys(i0 + nq - 1); }

/// p = e^(s - lse) in place (0 where s is -inf), for a block whose rows' lse are known.
TEC_CPU_CLONES void probabilities(float *s, const float *lse, int64_t nq, int64_t nk) {
  for (int64_t r = 0; r < nq; ++r) {
    float *row = s + r * kKeyBlock;
    const float shift = lse[r];
#pragma omp simd
    for (int64_t c = 0; c < nk; ++c)
      row[c] = expNonPositive(row[c] - shift);
  }
}

/// delta[r] = dout_r . out_r: the softmax backward's row term.
void rowDots(const float *dout, const float *out, int64_t nq, int64_t width, float *delta) {
  for (int64_t r = 0; r < nq; ++r) {
    float sum = 0.0f;
    for (int64_t d = 0; d < width; ++d)
      sum += dout[r * width + d] * out[r * width + d];
    delta[r] = sum;
  }
}

/// ds = p * (dp - delta) in place over dp.
TEC_CPU_CLONES void scoreGradients(const float *p, float *dp, const float *delta, int64_t nq, int64_t nk) {
  for (int64_t r = 0; r < nq; ++r)
#pragma omp simd
    for (int64_t c = 0; c < nk; ++c)
      dp[r * kKeyBlock + c] = p[r * kKeyBlock + c] * (dp[r * kKeyBlock + c] - delta[r]);
}

/// The largest entry (NaN wins) of a block, each row nk wide.
float blockAmax(const float *s, int64_t nq, int64_t nk, float amax) {
  for (int64_t r = 0; r < nq; ++r)
    for (int64_t c = 0; c < nk; ++c)
      amax = maxAbsNanWins(amax, s[r * kKeyBlock + c]);
  return amax;
}

/// A block rounded in place through FP8 as the fused kernels round it (throughFp8).
void roundBlock(float *s, int64_t nq, int64_t nk, float scale, float descale, Fp8Format format) {
  for (int64_t r = 0; r < nq; ++r)
    for (int64_t c = 0; c < nk; ++c)
      s[r * kKeyBlock + c] = throughFp8(s[r * kKeyBlock + c], scale, descale, format);
}

/// The amax of x (NaN wins), then x times scale in place: an FP8 output ready for its cast.
float scaleForFp8(float *x, int64_t n, float scale) {
  const float a = amax(x, n);
  for (int64_t i = 0; i < n; ++i)
    x[i] *= scale;
  return a;
}

/// The largest of the tasks' amaxes, NaN winning.
float largest(const std::vector<float> &amaxes) {
  float a = 0.0f;
  for (float x : amaxes)
    a = maxAbsNanWins(a, x);
  return a;
}

/// The largest of a row's scores and `init` (a NaN score never wins).
TEC_CPU_CLONES float rowMax(const float *row, int64_t n, float init) {
  float mx = init;
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < n; ++c)
    mx = row[c] > mx ? row[c] : mx;
  return mx;
}

/// The sum of x in one order on every CPU: 16 running partial sums (a vector register's lanes), then a tree;
/// a plain reduction ends in a serial pass over the lanes, the longest part of a short row's softmax.
TEC_CPU_CLONES float laneSum(const float *x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float partial[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t lane = 0; lane < kLanes; ++lane)
      partial[lane] += x[c + lane];
  for (int64_t lane = 0; c < n; ++c, ++lane)
    partial[lane] += x[c];
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t lane = 0; lane < width; ++lane)
      partial[lane] += partial[lane + width];
  return partial[0];
}

/// The running max m and sum l of e^(s - m) of each row take in a block of scores (left as they are), in
/// key order.
TEC_CPU_CLONES void runningLogSumExp(const float *s, int64_t nq, int64_t nk, float *m, float *l) {
  for (int64_t r = 0; r < nq; ++r) {
    const float *row = s + r * kKeyBlock;
    float mx = m[r];
    for (int64_t c = 0; c < nk; ++c)
      mx = row[c] > mx ? row[c] : mx;
    if (mx == kMinusInf)
      continue;
    float sum = 0.0f;
    for (int64_t c = 0; c < nk; ++c)
      sum += expNonPositive(row[c] - mx);
    l[r] = l[r] * expNonPositive(m[r] - mx) + sum;
    m[r] = mx;
  }
}

/// One key block of the online softmax, row by row: the running max m and sum l take in the block's
/// scores, which become e^(s - m) in place, and the output accumulated so far is rescaled to the new max.
TEC_CPU_CLONES void onlineSoftmaxBlock(float *s, int64_t nq, int64_t nk, float *m, float *l, float *o,
                                       int64_t valueDim, int64_t ldo) {
  for (int64_t r = 0; r < nq; ++r) {
    float *row = s + r * kKeyBlock;
    const float mx = rowMax(row, nk, m[r]);
    if (mx == kMinusInf) { // every key so far hidden: nothing to add
      std::fill(row, row + nk, 0.0f);
      continue;
    }
    const float correction = expNonPositive(m[r] - mx);
#pragma omp simd
    for (int64_t c = 0; c < nk; ++c)
      row[c] = expNonPositive(row[c] - mx);
    l[r] = l[r] * correction + laneSum(row, nk);
    m[r] = mx;
    if (correction != 1.0f)
#pragma omp simd
      for (int64_t d = 0; d < valueDim; ++d)
        o[r * ldo + d] *= correction;
  }
}

/// The output rows (ldo apart) divided by their sums, and each row's logsumexp.
TEC_CPU_CLONES void normalizeRows(float *o, int64_t nq, int64_t valueDim, int64_t ldo, const float *m, const float *l,
                                  float *lse) {
  for (int64_t r = 0; r < nq; ++r) {
    const float inv = 1.0f / l[r]; // a row with every key hidden is 0/0: NaN, as the decomposed softmax gives
#pragma omp simd
    for (int64_t d = 0; d < valueDim; ++d)
      o[r * ldo + d] = l[r] == 0.0f ? std::numeric_limits<float>::quiet_NaN() : o[r * ldo + d] * inv;
    lse[r] = m[r] + std::log(l[r]);
  }
}

bool worthThreads(const AttentionShape &a) {
  return a.batch * a.heads * a.queries * a.keys * (a.headDim + a.valueDim) > kParallelThreshold;
}

} // namespace

AttentionLayout AttentionLayout::contiguous(const AttentionShape &a) {
  return {{a.heads * a.queries * a.headDim, a.queries * a.headDim, a.headDim},
          {a.kvHeads * a.keys * a.headDim, a.keys * a.headDim, a.headDim},
          {a.kvHeads * a.keys * a.valueDim, a.keys * a.valueDim, a.valueDim},
          {a.heads * a.queries * a.valueDim, a.queries * a.valueDim, a.valueDim}};
}

void attention(const AttentionShape &a, const float *q, const float *k, const float *v, const void *mask, float *out,
               float *lse, const AttentionLayout *layout) {
  const AttentionLayout l = layout ? *layout : AttentionLayout::contiguous(a);
  const int64_t queryBlocks = blocks(a.queries, kQueryBlock), tasks = a.batch * a.heads * queryBlocks;
  parallelLoop(tasks, worthThreads(a) ? kParallelThreshold * (tasks) : 0, [&](int64_t t) {
    const Head hd{a, t / queryBlocks / a.heads, t / queryBlocks % a.heads, l};
    const int64_t i0 = t % queryBlocks * kQueryBlock, nq = std::min(kQueryBlock, a.queries - i0);
    float *s = threadScratch(kQueryBlock * kKeyBlock + 2 * kQueryBlock), *m = s + kQueryBlock * kKeyBlock,
          *ls = m + kQueryBlock;
    float *o = hd.out(out, i0); // accumulates the unnormalized output
    const int64_t ldo = l.out[2];
    for (int64_t r = 0; r < nq; ++r)
      std::fill(o + r * ldo, o + r * ldo + a.valueDim, 0.0f);
    std::fill(m, m + nq, kMinusInf);
    std::fill(ls, ls + nq, 0.0f);
    for (int64_t j0 = 0, end = keysSeen(a, i0, nq); j0 < end; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, end - j0);
      blockScores(hd, q, k, mask, i0, nq, j0, nk, s);
      onlineSoftmaxBlock(s, nq, nk, m, ls, o, a.valueDim, ldo);
      sgemm(false, false, nq, a.valueDim, nk, 1.0f, s, kKeyBlock, hd.v(v, j0), l.v[2], 1.0f, o, ldo);
    }
    normalizeRows(o, nq, a.valueDim, ldo, m, ls, lse + hd.queryRow(i0));
  });
}

AttentionFp8Amaxes attentionFp8(const AttentionShape &a, const AttentionFp8Scales &f, const float *q, const float *k, const float *v,
                   const void *mask, float *out, float *lse) {
  // Scores from the codes: the descales of q and k fold into the scale.
  AttentionShape codes = a;
  codes.scale = a.scale * f.descaleQ * f.descaleK;
  const AttentionLayout layout = AttentionLayout::contiguous(a);
  const int64_t queryBlocks = blocks(a.queries, kQueryBlock), tasks = a.batch * a.heads * queryBlocks;
  std::vector<float> probsAmax(tasks, 0.0f);
  parallelLoop(tasks, worthThreads(a) ? kParallelThreshold * (tasks) : 0, [&](int64_t t) {
    const Head hd{codes, t / queryBlocks / a.heads, t / queryBlocks % a.heads, layout};
    const int64_t i0 = t % queryBlocks * kQueryBlock, nq = std::min(kQueryBlock, a.queries - i0);
    float *s = threadScratch(kQueryBlock * kKeyBlock + 2 * kQueryBlock), *m = s + kQueryBlock * kKeyBlock,
          *l = m + kQueryBlock, *rowLse = lse + hd.queryRow(i0);
    // The probabilities are quantized normalized (FP8 needs their final range): the row logsumexps first,
    // then p = e^(s - lse) a block at a time.
    std::fill(m, m + nq, kMinusInf);
    std::fill(l, l + nq, 0.0f);
    const int64_t end = keysSeen(a, i0, nq);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, end - j0);
      blockScores(hd, q, k, mask, i0, nq, j0, nk, s);
      runningLogSumExp(s, nq, nk, m, l);
    }
    for (int64_t r = 0; r < nq; ++r) // a row with every key hidden: -inf, and NaN probabilities below
      rowLse[r] = m[r] + std::log(l[r]);
    float *o = out + hd.queryRow(i0) * a.valueDim;
    std::fill(o, o + nq * a.valueDim, 0.0f);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, end - j0);
      blockScores(hd, q, k, mask, i0, nq, j0, nk, s);
      probabilities(s, rowLse, nq, nk);
      probsAmax[t] = blockAmax(s, nq, nk, probsAmax[t]);
      roundBlock(s, nq, nk, f.probsScale, f.probsDescale, Fp8Format::E4M3);
      sgemm(false, false, nq, a.valueDim, nk, f.descaleV, s, kKeyBlock, v + hd.keyRow(j0) * a.valueDim, a.valueDim,
            1.0f, o, a.valueDim);
    }
  });
  AttentionFp8Amaxes amaxes;
  amaxes.probs = largest(probsAmax);
  amaxes.out = scaleForFp8(out, a.batch * a.heads * a.queries * a.valueDim, f.outScale);
  return amaxes;
}

namespace {

/// attentionGrad, and with `fp8` attentionFp8Grad: q, k, v, out and dout are then codes, and p and ds go
/// through FP8 before the products that read them (ds times the attention scale). Returns that quantity's amax
/// (0 without `fp8`).
float attentionGradImpl(const AttentionShape &plain, const AttentionFp8Scales *fp8, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse, const void *mask,
                        float *dq, float *dk, float *dv) {
  const AttentionFp8Scales f = fp8 ? *fp8 : AttentionFp8Scales{};
  AttentionShape a = plain; // scores from the codes: the descales of q and k fold into the scale
  a.scale = plain.scale * f.descaleQ * f.descaleK;
  const float dpScale = f.descaleDout * f.descaleV, deltaScale = f.descaleDout * f.descaleOut;
  // FP8 quantizes ds times the attention scale (cuDNN's dP, the gradient of the unscaled Q K^T), so its amax
  // and scale mean what cuDNN's do; the products that read it then take no further scale.
  const float dsScale = fp8 ? 1.0f : plain.scale;
  auto roundProbs = [&](float *p, int64_t nq, int64_t nk) {
    if (fp8)
      roundBlock(p, nq, nk, f.probsScale, f.probsDescale, Fp8Format::E4M3);
  };
  auto roundScoreGradients = [&](float *ds, int64_t nq, int64_t nk) {
    if (fp8)
      roundBlock(ds, nq, nk, f.dprobsScale, f.dprobsDescale, f.grads);
  };
  auto scaleRows = [](float *x, int64_t n, float scale) {
    if (scale != 1.0f)
      for (int64_t i = 0; i < n; ++i)
        x[i] *= scale;
  };
  const int64_t scratchFloats = 2 * kQueryBlock * kKeyBlock + kQueryBlock;
  // One pass per (batch, K/V head): the task owns the dq rows of its group's query heads and its dk, dv rows,
  // so each (query block, key block) pair's probabilities and dS are made once and feed all three (a pass for
  // dq and another for dk, dv would make them twice). Every row sums its blocks in the same order as then.
  const int64_t group = a.heads / a.kvHeads, tasks = a.batch * a.kvHeads;
  const AttentionLayout layout = AttentionLayout::contiguous(a);
  std::vector<float> dprobsAmax(fp8 ? tasks : 0, 0.0f);
  parallelLoop(tasks, worthThreads(a) ? kParallelThreshold * tasks : 0, [&](int64_t t) {
    const int64_t b = t / a.kvHeads, kvHead = t % a.kvHeads;
    float *p = threadScratch(scratchFloats), *ds = p + kQueryBlock * kKeyBlock, *delta = ds + kQueryBlock * kKeyBlock;
    const Head kv{a, b, kvHead * group, layout};
    for (int64_t h = kvHead * group; h < (kvHead + 1) * group; ++h) {
      float *dqh = dq + Head{a, b, h, layout}.queryRow(0) * a.headDim;
      std::fill(dqh, dqh + a.queries * a.headDim, 0.0f);
    }
    std::fill(dk + kv.keyRow(0) * a.headDim, dk + kv.keyRow(a.keys) * a.headDim, 0.0f);
    std::fill(dv + kv.keyRow(0) * a.valueDim, dv + kv.keyRow(a.keys) * a.valueDim, 0.0f);
    for (int64_t j0 = 0; j0 < a.keys; j0 += kKeyBlock) {
      float *dkb = dk + kv.keyRow(j0) * a.headDim, *dvb = dv + kv.keyRow(j0) * a.valueDim;
      // Under the causal rule, queries before j0 see none of these keys.
      const int64_t firstQuery = a.causal ? std::min(j0, a.queries) / kQueryBlock * kQueryBlock : 0;
      for (int64_t h = kvHead * group; h < (kvHead + 1) * group; ++h) {
        const Head hd{a, b, h, layout};
        for (int64_t i0 = firstQuery; i0 < a.queries; i0 += kQueryBlock) {
          const int64_t nq = std::min(kQueryBlock, a.queries - i0);
          const int64_t nk = std::min(kKeyBlock, keysSeen(a, i0, nq) - j0); // the keys past it are hidden
          if (nk <= 0)
            continue;
          const float *dob = dout + hd.queryRow(i0) * a.valueDim;
          blockScores(hd, q, k, mask, i0, nq, j0, nk, p);
          probabilities(p, lse + hd.queryRow(i0), nq, nk);
          rowDots(dob, out + hd.queryRow(i0) * a.valueDim, nq, a.valueDim, delta);
          scaleRows(delta, nq, deltaScale);
          sgemm(false, true, nq, nk, a.valueDim, dpScale, dob, a.valueDim, v + hd.keyRow(j0) * a.valueDim,
                a.valueDim, 0.0f, ds, kKeyBlock);
          scoreGradients(p, ds, delta, nq, nk);
          if (fp8) {
            for (int64_t r = 0; r < nq; ++r)
              scaleRows(ds + r * kKeyBlock, nk, plain.scale);
            dprobsAmax[t] = blockAmax(ds, nq, nk, dprobsAmax[t]);
          }
          roundScoreGradients(ds, nq, nk);
          sgemm(false, false, nq, a.headDim, nk, dsScale * f.descaleK, ds, kKeyBlock,
                k + hd.keyRow(j0) * a.headDim, a.headDim, 1.0f, dq + hd.queryRow(i0) * a.headDim, a.headDim);
          sgemm(true, false, nk, a.headDim, nq, dsScale * f.descaleQ, ds, kKeyBlock,
                q + hd.queryRow(i0) * a.headDim, a.headDim, 1.0f, dkb, a.headDim);
          roundProbs(p, nq, nk);
          sgemm(true, false, nk, a.valueDim, nq, f.descaleDout, p, kKeyBlock, dob, a.valueDim, 1.0f, dvb, a.valueDim);
        }
      }
    }
  });
  return largest(dprobsAmax);
}

} // namespace

void attentionGrad(const AttentionShape &a, const float *dout, const float *q, const float *k, const float *v,
                   const float *out, const float *lse, const void *mask, float *dq, float *dk, float *dv) {
  attentionGradImpl(a, nullptr, dout, q, k, v, out, lse, mask, dq, dk, dv);
}

AttentionFp8Amaxes attentionFp8Grad(const AttentionShape &a, const AttentionFp8Scales &f, const float *dout,
                                    const float *q, const float *k, const float *v, const float *out, const float *lse,
                                    const void *mask, float *dq, float *dk, float *dv) {
  AttentionFp8Amaxes amaxes;
  amaxes.dprobs = attentionGradImpl(a, &f, dout, q, k, v, out, lse, mask, dq, dk, dv);
  amaxes.dq = scaleForFp8(dq, a.batch * a.heads * a.queries * a.headDim, f.dqScale);
  amaxes.dk = scaleForFp8(dk, a.batch * a.kvHeads * a.keys * a.headDim, f.dkScale);
  amaxes.dv = scaleForFp8(dv, a.batch * a.kvHeads * a.keys * a.valueDim, f.dvScale);
  return amaxes;
}

} // namespace tec::kernels::cpu
