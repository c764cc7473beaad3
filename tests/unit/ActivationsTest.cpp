// The vectorized activations (support/Activations.h) through the CPU kernels' loop, against double
// precision libm, and bit for bit against the same function compiled for the baseline ISA (this file, which
// calls libm's fmaf where the kernels' AVX2/AVX-512 clones use the FMA instruction): a fused multiply-add is
// rounded once wherever it runs, so a GEMM epilogue, a folded constant and a GPU kernel agree.
#include "support/Ops.h"
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace tec::kernels;

namespace {

struct Activation {
  const char *name;
  UnaryKind kind;
  double (*reference)(double);
  double (*bound)(double x, double want); // the error allowed (besides 1e-30: underflow)
};

double sigmoidRef(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double siluRef(double x) { return x * sigmoidRef(x); }
double geluRef(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
/// x/2 (1 + tanh z) as x sigmoid(2z), the same function without 1 + tanh z cancelling (below z = -19 even
/// in double).
double geluTanhRef(double x) { return x * sigmoidRef(2 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)); }

/// A float argument's rounding (half an ulp of x) is a relative error of |x| / 2^24 in e^x: the condition of
/// exp, which no float implementation escapes.
double expCondition(double argument) { return std::abs(argument) * 0x1p-24; }

const Activation kActivations[] = {
    {"sigmoid", UnaryKind::Sigmoid, sigmoidRef, [](double x, double want) { return (4e-7 + expCondition(x)) * std::abs(want); }},
    {"silu", UnaryKind::Silu, siluRef, [](double x, double want) { return (4e-7 + expCondition(x)) * std::abs(want); }},
    // erf to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26): x/2 times that.
    {"gelu", UnaryKind::Gelu, geluRef, [](double x, double want) { return 4e-7 * std::abs(want) + 1e-7 * std::abs(x); }},
    // Its argument 2z = 2 sqrt(2/pi) (x + 0.044715 x^3) is rounded in float a few times: a few of those errors.
    {"gelu_tanh", UnaryKind::GeluTanh, geluTanhRef, [](double x, double want) {
       return (4e-7 + 4 * expCondition(1.5957691216 * (x + 0.044715 * x * x * x))) * std::abs(want);
     }},
};

/// -30 .. 30 in steps of 2^-10, and the values at the edges of the approximations' ranges.
std::vector<float> inputs() {
  std::vector<float> x;
  for (int i = -30 * 1024; i <= 30 * 1024; ++i)
    x.push_back(static_cast<float>(i) / 1024.0f);
  for (float v : {87.0f, 87.3f, 88.0f, 89.0f, 100.0f, 1e30f, std::numeric_limits<float>::denorm_min(), 1e-20f})
    x.push_back(v), x.push_back(-v);
  return x;
}

TEST(Activations, MatchDoublePrecisionAndTheBaselineBuildBitForBit) {
  const std::vector<float> x = inputs();
  std::vector<float> y(x.size());
  for (const Activation &a : kActivations) {
    cpu::unary(a.kind, x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    float worstAt = 0;
    int differingBits = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = a.reference(x[i]);
      const double excess = std::abs(y[i] - want) - (a.bound(x[i], want) + 1e-30);
      if (excess > worst)
        worst = excess, worstAt = x[i];
      const float baseline = applyUnary(a.kind, x[i]);
      differingBits += std::memcmp(&baseline, &y[i], sizeof(float)) != 0;
    }
    EXPECT_EQ(worst, 0.0) << a.name << " beyond its bound at x = " << worstAt;
    EXPECT_EQ(differingBits, 0) << a.name << ": the vectorized loop and the baseline build differ";
  }
}

// The softmaxes, attention and sigmoid call expNonPositive where expApprox's overflow compares cannot matter:
// it must be the same function there, so that their results keep their bits.
TEST(Activations, ExpNonPositiveIsExpApproxBitForBit) {
  int differing = 0;
  float firstAt = 0;
  for (uint64_t bits = 0x80000000u; bits <= 0xffffffffu; bits += 97) { // -0 to -NaN, every 97th float
    float x;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&x, &b, sizeof(x));
    const float want = expApprox(x), got = expNonPositive(x);
    if (std::memcmp(&want, &got, sizeof(float)) != 0 && !(std::isnan(want) && std::isnan(got)) && differing++ == 0)
      firstAt = x;
  }
  for (float x : {0.0f, -87.3f, std::nextafter(-87.3f, 0.0f), std::nextafter(-87.3f, -100.0f)})
    EXPECT_EQ(expApprox(x), expNonPositive(x)) << x;
  EXPECT_EQ(differing, 0) << "first at " << firstAt;
  EXPECT_EQ(expNonPositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(expNonPositive(std::nanf(""))));
}

TEST(Activations, KeepNanAndSaturateAtInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {std::nanf(""), inf, -inf};
  std::vector<float> y(x.size());
  cpu::unary(UnaryKind::Sigmoid, x.data(), y.data(), 3);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  cpu::unary(UnaryKind::Gelu, x.data(), y.data(), 3);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  cpu::unary(UnaryKind::Silu, x.data(), y.data(), 3);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
}

} // namespace
