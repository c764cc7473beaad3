// FP8, FP16 and BF16 conversions against NVIDIA's own host conversions in cuda_fp8.h / cuda_fp16.h /
// cuda_bf16.h: every one of the 2^32 float bit patterns, both FP8 formats. Without the CUDA headers
// these tests are reported skipped.
#include "support/Half.h"
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#if __has_include(<cuda_fp8.h>)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define TEC_HAVE_CUDA_HEADERS 1
#endif

using namespace tec::kernels;

namespace {

/// Runs `check(bits)` over all 2^32 patterns in parallel; returns the first mismatching pattern, if any.
template <typename Check> std::optional<uint32_t> firstMismatch(Check check) {
  std::atomic<uint64_t> first{UINT64_MAX};
#pragma omp parallel for schedule(static)
  for (int64_t hi = 0; hi < (int64_t(1) << 16); ++hi) {
    for (uint32_t lo = 0; lo < (1u << 16); ++lo) {
      uint32_t bits = static_cast<uint32_t>(hi) << 16 | lo;
      if (!check(bits)) {
        uint64_t expected = first.load();
        while (bits < expected && !first.compare_exchange_weak(expected, bits)) {
        }
      }
    }
  }
  if (first.load() == UINT64_MAX)
    return std::nullopt;
  return static_cast<uint32_t>(first.load());
}

} // namespace

#ifdef TEC_HAVE_CUDA_HEADERS

TEST(Fp8Exhaustive, E4M3MatchesCudaOnAllFloats) {
  auto bad = firstMismatch([](uint32_t bits) {
    float x = bitsToFloat(bits);
    return floatToFp8(x, Fp8Format::E4M3) == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  });
  EXPECT_FALSE(bad.has_value()) << "first mismatch at float bits 0x" << std::hex << *bad;
}

TEST(Fp8Exhaustive, E5M2MatchesCudaOnAllFloats) {
  auto bad = firstMismatch([](uint32_t bits) {
    float x = bitsToFloat(bits);
    return floatToFp8(x, Fp8Format::E5M2) == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
  });
  EXPECT_FALSE(bad.has_value()) << "first mismatch at float bits 0x" << std::hex << *bad;
}

// MXFP8's block scale for every amax: the smallest power of two 2^e with amax / 2^e <= fp8_max is E8M0's
// encoding of amax / fp8_max rounded toward +inf (NVIDIA's __nv_cvt_float_to_e8m0 with cudaRoundPosInf,
// saturating to 2^127). The quotient in double keeps which side of a power of two it lies on; one that
// would be a float subnormal (its rounding could land on 2^-127 itself) is taken 2^64 larger and its code
// 64 smaller, E8M0's smallest code, 2^-127, the floor.
TEST(Fp8Exhaustive, Mxfp8ScaleMatchesCudaOnAllAmaxes) {
  for (float fp8Max : {kE4M3Max, kE5M2Max}) {
    auto bad = firstMismatch([fp8Max](uint32_t bits) {
      if (bits >> 31)
        return true; // an amax is never negative
      const float amax = bitsToFloat(bits);
      const double ratio = static_cast<double>(amax) / fp8Max;
      int expected;
      if (ratio < 0x1p-120) {
        const int scaled = __nv_cvt_float_to_e8m0(static_cast<float>(ratio * 0x1p64), __NV_SATFINITE, cudaRoundPosInf);
        expected = amax == 0.0f ? 0 : std::max(0, scaled - 64);
      } else {
        expected = __nv_cvt_float_to_e8m0(static_cast<float>(ratio), __NV_SATFINITE, cudaRoundPosInf);
      }
      return e8m0FromAmax(amax, fp8Max) == expected;
    });
    EXPECT_FALSE(bad.has_value()) << "fp8_max " << fp8Max << ": first mismatch at amax bits 0x" << std::hex << *bad;
  }
}

TEST(Fp8Exhaustive, DecodingMatchesCudaForEveryCode) {
  for (int code = 0; code < 256; ++code)
    for (auto [format, cuda] : {std::pair{Fp8Format::E4M3, __NV_E4M3}, std::pair{Fp8Format::E5M2, __NV_E5M2}}) {
      __half_raw raw = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), cuda);
      float expected = __half2float(__half(raw));
      float got = fp8ToFloat(static_cast<uint8_t>(code), format);
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(got)) << "code " << code;
      else
        EXPECT_EQ(floatBits(got), floatBits(expected)) << "code " << code;
    }
}

TEST(HalfExhaustive, F16AndBf16MatchCudaOnAllFloats) {
  auto bad = firstMismatch([](uint32_t bits) {
    float x = bitsToFloat(bits);
    __half h = __float2half_rn(x);
    __nv_bfloat16 b = __float2bfloat16_rn(x);
    uint16_t hBits, bBits;
    std::memcpy(&hBits, &h, 2);
    std::memcpy(&bBits, &b, 2);
    bool nan = std::isnan(x);
    // NaN payloads differ between implementations; both must stay NaN.
    bool f16 = nan ? std::isnan(f16ToFloat(floatToF16(x))) : floatToF16(x) == hBits;
    bool bf16 = nan ? std::isnan(bf16ToFloat(floatToBf16(x))) : floatToBf16(x) == bBits;
    return f16 && bf16 && (nan || f16ToFloat(hBits) == __half2float(h));
  });
  EXPECT_FALSE(bad.has_value()) << "first mismatch at float bits 0x" << std::hex << *bad;
}

#else

TEST(Fp8Exhaustive, E4M3MatchesCudaOnAllFloats) { GTEST_SKIP() << "cuda_fp8.h not found: no oracle"; }
TEST(Fp8Exhaustive, E5M2MatchesCudaOnAllFloats) { GTEST_SKIP() << "cuda_fp8.h not found: no oracle"; }
TEST(Fp8Exhaustive, DecodingMatchesCudaForEveryCode) { GTEST_SKIP() << "cuda_fp8.h not found: no oracle"; }
TEST(Fp8Exhaustive, Mxfp8ScaleMatchesCudaOnAllAmaxes) { GTEST_SKIP() << "cuda_fp8.h not found: no oracle"; }
TEST(HalfExhaustive, F16AndBf16MatchCudaOnAllFloats) { GTEST_SKIP() << "cuda_fp16.h not found: no oracle"; }

#endif

// The formats' defining points, from the OCP FP8 specification (independent of CUDA's headers).
TEST(Fp8, SpecificationPoints) {
  EXPECT_EQ(floatToFp8(448.0f, Fp8Format::E4M3), 0x7E);
  EXPECT_EQ(floatToFp8(1e9f, Fp8Format::E4M3), 0x7E);    // saturates
  EXPECT_EQ(floatToFp8(-1e9f, Fp8Format::E4M3), 0xFE);
  EXPECT_EQ(floatToFp8(INFINITY, Fp8Format::E5M2), 0x7B); // satfinite: no inf
  EXPECT_EQ(floatToFp8(57344.0f, Fp8Format::E5M2), 0x7B);
  EXPECT_EQ(floatToFp8(NAN, Fp8Format::E4M3), 0x7F);
  EXPECT_EQ(fp8ToFloat(0x01, Fp8Format::E4M3), std::ldexp(1.0f, -9)); // smallest denormal
  EXPECT_EQ(fp8ToFloat(0x01, Fp8Format::E5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(floatToFp8(1.0f, Fp8Format::E4M3), 0x38);
  EXPECT_EQ(floatToFp8(-0.0f, Fp8Format::E5M2), 0x80);
}

/// The CPU quantize kernel converts without branches (so that it vectorizes): the same bits as floatToFp8,
/// which the tests above hold to CUDA's conversion, on every one of the 2^32 float patterns, both formats.
TEST(Fp8Kernels, VectorizedQuantizeMatchesTheScalarConversionOnAllFloats) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    std::atomic<uint64_t> first{UINT64_MAX};
#pragma omp parallel for schedule(static)
    for (int64_t hi = 0; hi < (int64_t(1) << 16); ++hi) {
      std::vector<float> x(1 << 16);
      std::vector<uint8_t> q(x.size());
      for (uint32_t lo = 0; lo < (1u << 16); ++lo)
        x[lo] = bitsToFloat(static_cast<uint32_t>(hi) << 16 | lo);
      cpu::quantize(x.data(), 1.0f, q.data(), static_cast<int64_t>(x.size()), format);
      for (uint32_t lo = 0; lo < (1u << 16); ++lo)
        if (q[lo] != floatToFp8(x[lo], format)) {
          uint64_t bits = static_cast<uint32_t>(hi) << 16 | lo, expected = first.load();
          while (bits < expected && !first.compare_exchange_weak(expected, bits)) {
          }
          break;
        }
    }
    EXPECT_EQ(first.load(), UINT64_MAX) << (format == Fp8Format::E4M3 ? "E4M3" : "E5M2")
                                        << ": first mismatch at float bits 0x" << std::hex << first.load();
  }
}

/// Dequantizing by table: every code's value times the scale's inverse, as fp8ToFloat gives it.
TEST(Fp8Kernels, DequantizeGivesEveryCodesValue) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c)
      codes[c] = static_cast<uint8_t>(c);
    std::vector<float> y(256);
    cpu::dequantize(codes.data(), 0.375f, y.data(), 256, format);
    for (int c = 0; c < 256; ++c) {
      const float expected = fp8ToFloat(static_cast<uint8_t>(c), format) * 0.375f;
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(y[c])) << c;
      else
        EXPECT_EQ(y[c], expected) << c;
    }
  }
}

TEST(Fp8Kernels, QuantizeScalesBeforeTheCastAndDequantizeInverts) {
  std::vector<float> x = {0.5f, -3.0f, 200.0f, 25.0f};
  std::vector<uint8_t> q(x.size());
  cpu::quantize(x.data(), 4.0f, q.data(), x.size(), Fp8Format::E4M3);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(q[i], floatToFp8(x[i] * 4.0f, Fp8Format::E4M3));
  std::vector<float> back(x.size());
  cpu::dequantize(q.data(), 0.25f, back.data(), x.size(), Fp8Format::E4M3);
  EXPECT_EQ(back[0], 0.5f);
  EXPECT_EQ(back[1], -3.0f);
  EXPECT_EQ(back[2], 112.0f); // 800 saturates to 448, / 4
  EXPECT_EQ(back[3], 24.0f);  // 100 is a tie between 96 and 104: to even, 96, / 4
}

TEST(Fp8Kernels, QuantizeCountsSaturatedAndFlushedValues) {
  // With scale 2: 300 -> 600 saturates E4M3 (> 448); 1e-4 -> 2e-4 is below half the smallest subnormal
  // (2^-10) and flushes to zero; exact zeros count as neither.
  std::vector<float> x = {300.0f, -250.0f, 1e-4f, -1e-4f, 0.0f, 1.0f, 100.0f};
  std::vector<uint8_t> q(x.size());
  int64_t saturated = -1, flushed = -1;
  cpu::quantizeCounting(x.data(), 2.0f, q.data(), x.size(), Fp8Format::E4M3, saturated, flushed);
  EXPECT_EQ(saturated, 2);
  EXPECT_EQ(flushed, 2);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(q[i], floatToFp8(x[i] * 2.0f, Fp8Format::E4M3));
}

TEST(Fp8Kernels, AmaxIsTheLargestMagnitudeAndPropagatesNan) {
  std::vector<float> x(100000, 0.25f);
  x[77777] = -9.5f;
  EXPECT_EQ(cpu::amax(x.data(), x.size()), 9.5f);
  x[5] = -std::numeric_limits<float>::signaling_NaN();
  // Any NaN becomes the one canonical NaN, the bits the GPU's amax writes too.
  EXPECT_EQ(floatBits(cpu::amax(x.data(), x.size())), 0x7FC00000u);
}

// Transformer Engine's DelayedScaling, step by step: amax_history[0] = amax; a = max(history) or
// history[0]; scale = (fp8_max / a) / 2^margin unless a is 0/inf/NaN; history = roll(history, -1);
// history[0] = 0.
TEST(Fp8Kernels, DelayedScalingFollowsTransformerEngine) {
  std::vector<float> history = {0.0f, 3.0f, 10.0f, 1.0f};
  std::vector<float> next(4);
  float scale, scaleInv;
  cpu::delayedScaling(history.data(), 4, 1.0f, 2.0f, kE4M3Max, 0, /*mostRecent=*/false, next.data(), &scale, &scaleInv);
  EXPECT_EQ(scale, 448.0f / 10.0f);
  EXPECT_EQ(scaleInv, 1.0f / (448.0f / 10.0f));
  EXPECT_EQ(next, (std::vector<float>{0.0f, 10.0f, 1.0f, 2.0f}));

  cpu::delayedScaling(history.data(), 4, 1.0f, 2.0f, kE5M2Max, 1, /*mostRecent=*/true, next.data(), &scale, &scaleInv);
  EXPECT_EQ(scale, 57344.0f / 2.0f / 2.0f);

  for (float bad : {0.0f, INFINITY, NAN}) {
    std::vector<float> zeros(4, 0.0f);
    cpu::delayedScaling(zeros.data(), 4, 3.5f, bad, kE4M3Max, 0, true, next.data(), &scale, &scaleInv);
    EXPECT_EQ(scale, 3.5f) << "amax " << bad << " keeps the previous scale";
  }
  std::vector<float> tiny = {0.0f};
  cpu::delayedScaling(tiny.data(), 1, 1.0f, 1e-45f, kE4M3Max, 0, false, next.data(), &scale, &scaleInv);
  EXPECT_EQ(scale, FLT_MAX) << "an overflowing scale is clamped";
}

// Transformer Engine's bulk update (amax_and_scale_update_after_reduction): a step whose amax is 0 (the
// tensor took no part) neither rolls the history nor moves the scale, so an idle step does not push the
// history's real amaxes out early.
TEST(Fp8Kernels, DelayedScalingLeavesTheHistoryAloneWhenTheAmaxIsZero) {
  std::vector<float> history = {0.0f, 3.0f, 10.0f, 1.0f}, next(4);
  float scale, scaleInv;
  cpu::delayedScaling(history.data(), 4, 7.0f, 0.0f, kE4M3Max, 0, /*mostRecent=*/false, next.data(), &scale, &scaleInv);
  EXPECT_EQ(next, history);
  EXPECT_EQ(scale, 7.0f);
  EXPECT_EQ(scaleInv, 1.0f / 7.0f);
  // In place too (the plan writes the next history over the history).
  cpu::delayedScaling(history.data(), 4, 7.0f, 0.0f, kE4M3Max, 0, false, history.data(), &scale, &scaleInv);
  EXPECT_EQ(history, (std::vector<float>{0.0f, 3.0f, 10.0f, 1.0f}));
  // A NaN amax rolls in as the canonical NaN and wins the max.
  cpu::delayedScaling(history.data(), 4, 7.0f, NAN, kE4M3Max, 0, false, next.data(), &scale, &scaleInv);
  EXPECT_EQ(floatBits(next[3]), floatBits(NAN));
  EXPECT_EQ(scale, 7.0f);
}
