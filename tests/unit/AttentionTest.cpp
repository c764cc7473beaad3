// The CPU attention kernel and its backward against the textbook formulas in double precision: the
// [Tq, Tk] scores materialized, softmax, P V; dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = s dS K,
// dK = s dS^T Q, dV = P^T dO. Sizes cross the kernel's 64-query and 128-key blocks and end inside one.
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace tec::kernels;

namespace {

struct Case {
  const char *name;
  AttentionShape shape;
  AttentionMask mask;
  int64_t maskDims[4]; // broadcast to [B, H, Tq, Tk]
};

AttentionShape geometry(int64_t b, int64_t h, int64_t hk, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal) {
  AttentionShape a;
  a.batch = b, a.heads = h, a.kvHeads = hk, a.queries = tq, a.keys = tk, a.headDim = d, a.valueDim = dv;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  a.causal = causal;
  return a;
}

struct Reference {
  std::vector<double> out, dq, dk, dv;
};

/// The decomposed computation, one (batch, head) at a time, every score kept.
Reference reference(const AttentionShape &a, const std::vector<float> &q, const std::vector<float> &k,
                    const std::vector<float> &v, const std::vector<float> &additive, const std::vector<char> &keep,
                    const std::vector<float> &dout) {
  Reference r;
  r.out.assign(a.batch * a.heads * a.queries * a.valueDim, 0.0);
  r.dq.assign(q.size(), 0.0), r.dk.assign(k.size(), 0.0), r.dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t kvh = h / (a.heads / a.kvHeads), qRow = (b * a.heads + h) * a.queries,
                    kRow = (b * a.kvHeads + kvh) * a.keys;
      std::vector<double> p(a.queries * a.keys);
      for (int64_t i = 0; i < a.queries; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < a.keys; ++j) {
          double s = 0;
          for (int64_t d = 0; d < a.headDim; ++d)
            s += double(q[(qRow + i) * a.headDim + d]) * k[(kRow + j) * a.headDim + d];
          s *= a.scale;
          const int64_t m = a.maskRow(b, h, i) + j * a.maskStrides[3];
          if (a.mask == AttentionMask::Additive)
            s += additive[m];
          if ((a.mask == AttentionMask::Boolean && !keep[m]) || (a.causal && j > i))
            s = -INFINITY;
          p[i * a.keys + j] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < a.keys; ++j)
          sum += p[i * a.keys + j] = std::exp(p[i * a.keys + j] - mx);
        for (int64_t j = 0; j < a.keys; ++j)
          p[i * a.keys + j] /= sum;
      }
      for (int64_t i = 0; i < a.queries; ++i) {
        std::vector<double> dp(a.keys);
        double rowSum = 0;
        for (int64_t j = 0; j < a.keys; ++j) {
          const double pij = p[i * a.keys + j];
          for (int64_t d = 0; d < a.valueDim; ++d) {
            r.out[(qRow + i) * a.valueDim + d] += pij * v[(kRow + j) * a.valueDim + d];
            dp[j] += double(dout[(qRow + i) * a.valueDim + d]) * v[(kRow + j) * a.valueDim + d];
            r.dv[(kRow + j) * a.valueDim + d] += pij * dout[(qRow + i) * a.valueDim + d];
          }
          rowSum += dp[j] * pij;
        }
        for (int64_t j = 0; j < a.keys; ++j) {
          const double ds = p[i * a.keys + j] * (dp[j] - rowSum) * a.scale;
          for (int64_t d = 0; d < a.headDim; ++d) {
            r.dq[(qRow + i) * a.headDim + d] += ds * k[(kRow + j) * a.headDim + d];
            r.dk[(kRow + j) * a.headDim + d] += ds * q[(qRow + i) * a.headDim + d];
          }
        }
      }
    }
  return r;
}

/// Agreement within 1e-5 of the tensor's largest magnitude (float accumulation over up to 300 keys).
void expectClose(const std::vector<float> &got, const std::vector<double> &want, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 1e-30, worst = 0;
  for (double w : want)
    scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, 1e-5 * scale) << what << ": largest difference " << worst << " of a largest value " << scale;
}

class Attention : public ::testing::TestWithParam<Case> {};

TEST_P(Attention, MatchesTheDecomposedFormForwardAndBackward) {
  ASSERT_TRUE(cpu::blas().loaded) << cpu::blas().library;
  const Case &c = GetParam();
  AttentionShape a = c.shape;
  a.mask = c.mask;
  const int64_t scores[] = {a.batch, a.heads, a.queries, a.keys};
  int64_t maskSize = 1;
  for (int d = 3; d >= 0; --d) {
    a.maskStrides[d] = c.maskDims[d] == 1 ? 0 : maskSize;
    maskSize *= c.maskDims[d];
    ASSERT_TRUE(c.maskDims[d] == 1 || c.maskDims[d] == scores[d]);
  }
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto draw = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = normal(rng);
    return x;
  };
  auto q = draw(a.batch * a.heads * a.queries * a.headDim), k = draw(a.batch * a.kvHeads * a.keys * a.headDim),
       v = draw(a.batch * a.kvHeads * a.keys * a.valueDim), dout = draw(a.batch * a.heads * a.queries * a.valueDim);
  std::vector<float> additive = draw(maskSize);
  std::vector<char> keep(maskSize);
  for (int64_t i = 0; i < maskSize; ++i)
    keep[i] = i % 5 != 2 && i % a.keys != 3 ? 1 : 0; // never a fully hidden row: key 0 is kept
  for (int64_t i = 0; i < maskSize; i += a.keys)
    keep[i] = 1;
  const void *mask = a.mask == AttentionMask::Additive ? static_cast<const void *>(additive.data())
                     : a.mask == AttentionMask::Boolean ? static_cast<const void *>(keep.data())
                                                       : nullptr;
  std::vector<float> out(dout.size()), lse(a.batch * a.heads * a.queries), dq(q.size()), dk(k.size()), dv(v.size());
  cpu::attention(a, q.data(), k.data(), v.data(), mask, out.data(), lse.data());
  cpu::attentionGrad(a, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), mask, dq.data(), dk.data(),
                     dv.data());
  Reference r = reference(a, q, k, v, additive, keep, dout);
  expectClose(out, r.out, "output");
  expectClose(dq, r.dq, "dq");
  expectClose(dk, r.dk, "dk");
  expectClose(dv, r.dv, "dv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Attention,
    ::testing::Values(Case{"tiny", geometry(1, 1, 1, 3, 5, 4, 4, false), AttentionMask::None, {1, 1, 1, 1}},
                      Case{"causal_blocks", geometry(2, 2, 2, 150, 150, 16, 16, true), AttentionMask::None, {1, 1, 1, 1}},
                      Case{"grouped_causal", geometry(1, 6, 2, 70, 70, 8, 12, true), AttentionMask::None, {1, 1, 1, 1}},
                      Case{"padding_mask", geometry(2, 3, 3, 65, 300, 8, 8, false), AttentionMask::Additive, {2, 1, 1, 300}},
                      Case{"full_additive_mask", geometry(1, 2, 1, 40, 130, 4, 6, false), AttentionMask::Additive,
                           {1, 2, 40, 130}},
                      Case{"boolean_causal", geometry(2, 4, 2, 129, 129, 8, 8, true), AttentionMask::Boolean,
                           {2, 1, 129, 129}}),
    [](const auto &info) { return std::string(info.param.name); });

/// A row with every key hidden is NaN, as the decomposed softmax gives (0/0), not an average of V.
TEST(AttentionMasking, AFullyHiddenRowIsNaN) {
  ASSERT_TRUE(cpu::blas().loaded) << cpu::blas().library;
  AttentionShape a = geometry(1, 1, 1, 2, 3, 2, 2, false);
  a.mask = AttentionMask::Boolean;
  a.maskStrides[2] = 3, a.maskStrides[3] = 1;
  const bool keep[] = {false, false, false, true, false, true};
  std::vector<float> q(4, 1.0f), k(6, 0.5f), v = {1, 2, 3, 4, 5, 6}, out(4), lse(2);
  cpu::attention(a, q.data(), k.data(), v.data(), keep, out.data(), lse.data());
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_FLOAT_EQ(out[2], 3.0f); // keys 0 and 2 equally likely: the mean of their values
  EXPECT_FLOAT_EQ(out[3], 4.0f);
}

/// q, k and v read where a fused QKV projection left them ([B, T, 3, H, D]: the split and the head transposes a
/// plan has before attention, folded) and out written as [B, T, H, D] give the same bits as contiguous tensors.
TEST(AttentionLayout, ReadsAndWritesViewsOfOtherTensors) {
  ASSERT_TRUE(cpu::blas().loaded) << cpu::blas().library;
  const AttentionShape a = geometry(2, 3, 3, 70, 70, 8, 8, true);
  const int64_t B = 2, T = 70, H = 3, D = 8, row = 3 * H * D;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> qkv(B * T * row);
  for (float &x : qkv)
    x = normal(rng);
  std::vector<float> q(B * H * T * D), k(q.size()), v(q.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t at = ((b * H + h) * T + t) * D + d, from = b * T * row + t * row + h * D + d;
          q[at] = qkv[from], k[at] = qkv[from + H * D], v[at] = qkv[from + 2 * H * D];
        }
  std::vector<float> out(q.size()), lse(B * H * T), viewOut(q.size(), NAN), viewLse(lse.size());
  cpu::attention(a, q.data(), k.data(), v.data(), nullptr, out.data(), lse.data());
  const cpu::AttentionLayout layout{{T * row, D, row}, {T * row, D, row}, {T * row, D, row}, {T * H * D, D, H * D}};
  cpu::attention(a, qkv.data(), qkv.data() + H * D, qkv.data() + 2 * H * D, nullptr, viewOut.data(), viewLse.data(),
                 &layout);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(viewOut[((b * T + t) * H + h) * D + d], out[((b * H + h) * T + t) * D + d]) << b << h << t << d;
  EXPECT_EQ(viewLse, lse);
}

/// FP8 attention against the decomposed form in double with the same FP8 roundings (the probabilities
/// through E4M3 before P V and P^T dO, the scores' gradient through E5M2 before dS K and dS^T Q). A value
/// within float rounding of an FP8 rounding boundary may round the other way in the kernel, moving the
/// outputs that read it by one FP8 step of one probability: so nearly every output matches to 1e-4, and
/// none is off by more than such a step. Without the roundings every output would differ.
struct Fp8Case {
  const char *name;
  AttentionShape shape;
};

class AttentionFp8 : public ::testing::TestWithParam<Fp8Case> {};

/// x on an FP8 grid: the codes' values for `scale` (what the kernel reads) and their descale.
std::vector<float> fp8Codes(std::vector<float> x, float scale, Fp8Format format) {
  for (float &e : x)
    e = fp8ToFloat(floatToFp8(e * scale, format), format);
  return x;
}

void expectMostlyExact(const std::vector<float> &got, float gotScale, const std::vector<double> &want, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 1e-30, worst = 0;
  for (double w : want)
    scale = std::max(scale, std::fabs(w));
  int64_t off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] / gotScale - want[i]);
    worst = std::max(worst, d);
    off += d > 1e-4 * scale;
  }
  EXPECT_LE(off, static_cast<int64_t>(got.size() / 50)) << what << ": " << off << " of " << got.size() << " off by > 1e-4";
  EXPECT_LE(worst, 0.02 * scale) << what << ": largest difference " << worst << " of a largest value " << scale;
}

TEST_P(AttentionFp8, MatchesTheDecomposedFormWithItsRoundings) {
  ASSERT_TRUE(cpu::blas().loaded) << cpu::blas().library;
  const AttentionShape a = GetParam().shape;
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto draw = [&](int64_t n, float sigma) {
    std::vector<float> x(n);
    for (float &e : x)
      e = sigma * normal(rng);
    return x;
  };
  AttentionFp8Scales f; // scales as delayed scaling would set them: fp8_max / amax
  f.descaleQ = 1 / 64.0f, f.descaleK = 1 / 32.0f, f.descaleV = 1 / 100.0f, f.descaleDout = 1 / 4096.0f;
  f.probsScale = 448.0f, f.probsDescale = 1 / 448.0f, f.outScale = 96.0f;
  f.dprobsScale = 8192.0f, f.dprobsDescale = 1 / 8192.0f, f.dqScale = 2048.0f, f.dkScale = 1024.0f, f.dvScale = 512.0f;
  auto q = fp8Codes(draw(a.batch * a.heads * a.queries * a.headDim, 1.5f), 1 / f.descaleQ, Fp8Format::E4M3);
  auto k = fp8Codes(draw(a.batch * a.kvHeads * a.keys * a.headDim, 1.5f), 1 / f.descaleK, Fp8Format::E4M3);
  auto v = fp8Codes(draw(a.batch * a.kvHeads * a.keys * a.valueDim, 1.0f), 1 / f.descaleV, Fp8Format::E4M3);
  auto dout = fp8Codes(draw(a.batch * a.heads * a.queries * a.valueDim, 1e-2f), 1 / f.descaleDout, Fp8Format::E5M2);
  auto values = [](std::vector<float> codes, float descale) {
    for (float &e : codes)
      e *= descale;
    return codes;
  };
  const auto qv = values(q, f.descaleQ), kv = values(k, f.descaleK), vv = values(v, f.descaleV),
             dov = values(dout, f.descaleDout);

  std::vector<float> out(dout.size()), lse(a.batch * a.heads * a.queries);
  const AttentionFp8Amaxes fwd = cpu::attentionFp8(a, f, q.data(), k.data(), v.data(), nullptr, out.data(), lse.data());
  // The output as the plan keeps it: E4M3 codes of out * outScale, worth code / outScale.
  std::vector<float> outCodes = out;
  for (float &e : outCodes)
    e = fp8ToFloat(floatToFp8(e, Fp8Format::E4M3), Fp8Format::E4M3);
  f.descaleOut = 1 / f.outScale;
  f.grads = Fp8Format::E5M2;
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  const AttentionFp8Amaxes bwd = cpu::attentionFp8Grad(a, f, dout.data(), q.data(), k.data(), v.data(), outCodes.data(),
                                                       lse.data(), nullptr, dq.data(), dk.data(), dv.data());

  // The reference: every score kept, in double; the FP8 roundings where the fused kernels make them.
  const auto ov = values(outCodes, f.descaleOut);
  std::vector<double> rOut(out.size(), 0.0), rDq(q.size(), 0.0), rDk(k.size(), 0.0), rDv(v.size(), 0.0);
  double probsAmax = 0, outAmax = 0, dsAmax = 0;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t kvh = h / (a.heads / a.kvHeads), qRow = (b * a.heads + h) * a.queries,
                    kRow = (b * a.kvHeads + kvh) * a.keys;
      for (int64_t i = 0; i < a.queries; ++i) {
        std::vector<double> p(a.keys, 0.0), dp(a.keys, 0.0);
        double mx = -INFINITY, sum = 0, delta = 0;
        const int64_t seen = a.visibleKeys(i);
        for (int64_t j = 0; j < seen; ++j) {
          for (int64_t d = 0; d < a.headDim; ++d)
            p[j] += double(qv[(qRow + i) * a.headDim + d]) * kv[(kRow + j) * a.headDim + d];
          p[j] *= a.scale;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j < seen; ++j)
          sum += p[j] = std::exp(p[j] - mx);
        for (int64_t d = 0; d < a.valueDim; ++d)
          delta += double(dov[(qRow + i) * a.valueDim + d]) * ov[(qRow + i) * a.valueDim + d];
        for (int64_t j = 0; j < seen; ++j) {
          p[j] /= sum;
          probsAmax = std::max(probsAmax, p[j]);
          const double pq = throughFp8(float(p[j]), f.probsScale, f.probsDescale, Fp8Format::E4M3);
          for (int64_t d = 0; d < a.valueDim; ++d) {
            rOut[(qRow + i) * a.valueDim + d] += pq * vv[(kRow + j) * a.valueDim + d];
            dp[j] += double(dov[(qRow + i) * a.valueDim + d]) * vv[(kRow + j) * a.valueDim + d];
            rDv[(kRow + j) * a.valueDim + d] += pq * dov[(qRow + i) * a.valueDim + d];
          }
          const double ds = a.scale * p[j] * (dp[j] - delta); // cuDNN's dP: d loss / d (Q K^T)
          dsAmax = std::max(dsAmax, std::fabs(ds));
          const double dsq = throughFp8(float(ds), f.dprobsScale, f.dprobsDescale, Fp8Format::E5M2);
          for (int64_t d = 0; d < a.headDim; ++d) {
            rDq[(qRow + i) * a.headDim + d] += dsq * kv[(kRow + j) * a.headDim + d];
            rDk[(kRow + j) * a.headDim + d] += dsq * qv[(qRow + i) * a.headDim + d];
          }
        }
        for (int64_t d = 0; d < a.valueDim; ++d)
          outAmax = std::max(outAmax, std::fabs(rOut[(qRow + i) * a.valueDim + d]));
      }
    }
  expectMostlyExact(out, f.outScale, rOut, "output");
  expectMostlyExact(dq, f.dqScale, rDq, "dq");
  expectMostlyExact(dk, f.dkScale, rDk, "dk");
  expectMostlyExact(dv, f.dvScale, rDv, "dv");
  EXPECT_NEAR(fwd.probs, probsAmax, 1e-6);
  EXPECT_NEAR(fwd.out, outAmax, 1e-2 * outAmax);
  EXPECT_NEAR(bwd.dprobs, dsAmax, 1e-4 * dsAmax);
  double dqAmax = 0;
  for (double x : rDq)
    dqAmax = std::max(dqAmax, std::fabs(x));
  EXPECT_NEAR(bwd.dq, dqAmax, 2e-2 * dqAmax);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionFp8,
                         ::testing::Values(Fp8Case{"blocks", geometry(1, 2, 2, 100, 150, 16, 16, false)},
                                           Fp8Case{"grouped_causal", geometry(2, 4, 2, 70, 70, 16, 8, true)}),
                         [](const auto &info) { return std::string(info.param.name); });

} // namespace
