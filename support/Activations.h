// Activations shared by the CPU and CUDA kernels and the GEMM epilogues.
#ifndef TEC_SUPPORT_ACTIVATIONS_H
#define TEC_SUPPORT_ACTIVATIONS_H

#include "support/HostDevice.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tec::kernels {

/// The epilogues of a fused GEMM, as cuBLASLt names them.
enum class Epilogue { None, Relu, Gelu, GeluTanh, Silu, HardSwish };

/// NaN stays NaN (as numpy.maximum and cuBLASLt do); written so that compilers emit a vector max.
TEC_HOST_DEVICE float relu(float x) { return x < 0.0f ? 0.0f : x; }

/// ln(1 + e^x), without overflow for large x or cancellation for very negative x.
/// ONNX HardSwish: x * max(0, min(1, x / 6 + 1/2)), in that order (MobileNetV3's activation).
/// Compares, not fminf (whose NaN rule the compiler keeps as a call per element): NaN in x stays NaN.
TEC_HOST_DEVICE float hardSwish(float x) {
  float gate = x * (1.0f / 6.0f) + 0.5f;
  gate = gate < 1.0f ? gate : 1.0f;
  return x * (gate > 0.0f ? gate : 0.0f);
}

TEC_HOST_DEVICE float softplus(float x) { return (x > 0.0f ? x : 0.0f) + log1pf(expf(x > 0.0f ? -x : x)); }

// The polynomials below are written with fmaf, a multiply-add rounded once: the same bits wherever it runs
// (the CPU kernels' AVX2 and AVX-512 clones, where it is one instruction and these functions run ~1.5x
// faster than as a multiply and an add, and the GPU), as contraction is off for the CPU kernels. Only their
// baseline clone, for CPUs without FMA, calls libm for it: every CPU loop over these functions is cloned
// (TEC_CPU_CLONES).

/// e^x for x in [-88, 88.3763], branch-free so that CPU loops vectorize: x = n ln2 + r (Cody-Waite), a
/// degree-5 polynomial for e^r on |r| <= ln2/2 fitted for relative error (1.05e-7 at most, as the degree-6
/// Taylor polynomial's truncation, with one multiply-add less), times 2^n built in the exponent bits. Below
/// about -87.68 (n = -127) those bits are 0 and so is the result: e^x there is subnormal or less.
/// Estrin's scheme for the polynomial, not Horner's: three dependent multiply-adds instead of five, and no
/// float-to-int conversion, since n + 127 already lies in the low bits of the rounding sum. The dependency
/// chain, not the instruction count alone, bounds a vectorized loop here (a SiLU epilogue ran 13% faster).
/// NaN stays NaN (it flows through the arithmetic; the exponent bits are then irrelevant).
TEC_HOST_DEVICE float expInRange(float x) {
  // Round x / ln2 to nearest by adding and removing 1.5 * 2^23 (no floorf: a library call without SSE4.1),
  // with the exponent's bias 127 added at once: the sum's low 9 bits are then n + 127.
  constexpr float kRoundAndBias = 12582912.0f + 127.0f;
  const float biased = fmaf(x, 1.44269504088896341f, kRoundAndBias);
  const float n = biased - kRoundAndBias;
  const float r = fmaf(-n, -2.12194440e-4f, fmaf(-n, 0.693359375f, x));
  const float r2 = r * r;
  const float high = fmaf(r2, fmaf(0.00831252523f, r, 0.0418901145f), fmaf(0.166671142f, r, 0.499992311f));
  const float p = fmaf(r2, high, r + 1.0f);
  uint32_t bits;
  memcpy(&bits, &biased, sizeof(bits));
  bits <<= 23; // n + 127 into the exponent field; the bits above it fall off
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

/// e^x within 2 ulp. Below -87.68 (where e^x leaves the normal floats) the result is 0, past 88.7228 (where it
/// leaves the floats) infinity, so that 1 / (1 + e^-x) of a large negative x is 0; in between, past
/// 127.5 ln2 = 88.376 (where 2^n would not be a float), e^88.376 (the one range off by up to 1.41x). The
/// clamps let NaN through (a compare with NaN is false), and it stays NaN.
TEC_HOST_DEVICE float expApprox(float x) {
  const float clamped = x > 88.3762626f ? 88.3762626f : (x < -88.0f ? -88.0f : x);
  return x > 88.7228391f ? INFINITY : expInRange(clamped);
}

/// expApprox for the arguments that cannot overflow (x <= 0: a softmax's x - max, sigmoid's -|x|), bit for
/// bit, without its overflow compares.
TEC_HOST_DEVICE float expNonPositive(float x) { return expInRange(x < -88.0f ? -88.0f : x); }

/// x * sigmoid(s) from e = e^-|s|, which never overflows: x / (1 + e) for s >= 0 and x e / (1 + e) below, so
/// that it keeps its relative precision for negative s down to e^-87.68 (0 below). One division and no
/// multiply by a rounded quotient: the quotient's rounding is the last. With expApprox's polynomial rather
/// than libm's expf, so that the CPU loops of Sigmoid, SiLU, SwiGLU and the tanh GELU vectorize.
TEC_HOST_DEVICE float timesSigmoid(float x, float s) {
  const float e = expNonPositive(-fabsf(s));
  return (s < 0.0f ? x * e : x) / (1.0f + e);
}

/// 1 / (1 + e^-x): NaN stays NaN (e^-|NaN| is NaN).
TEC_HOST_DEVICE float sigmoid(float x) { return timesSigmoid(1.0f, x); }

/// erf within 1.5e-7 absolute (Abramowitz & Stegun 7.1.26), branch-free for vectorized GELU.
TEC_HOST_DEVICE float erfApprox(float x) {
  const float a = fabsf(x);
  const float t = 1.0f / fmaf(0.3275911f, a, 1.0f);
  float p = 1.061405429f;
  p = fmaf(p, t, -1.453152027f);
  p = fmaf(p, t, 1.421413741f);
  p = fmaf(p, t, -0.284496736f);
  p = fmaf(p, t, 0.254829592f);
  const float y = fmaf(-p * t, expNonPositive(-a * a), 1.0f);
  return x < 0.0f ? -y : y;
}

/// GELU in the erf form: x/2 * (1 + erf(x/sqrt(2))), the "exact" GELU (erf to float precision).
TEC_HOST_DEVICE float gelu(float x) { return 0.5f * x * (1.0f + erfApprox(x * 0.70710678118654752440f)); }

/// cuBLASLt's GELU epilogue: x/2 * (1 + tanh(z)), z = sqrt(2/pi) * (x + 0.044715 x^3), computed as
/// x * sigmoid(2z) (the same function: 1 + tanh(z) = 2 sigmoid(2z)) with expApprox, so that CPU loops
/// vectorize (libm's tanhf does not: it made GPT-2's GELU 5x slower than the erf form) and without the
/// cancellation of 1 + tanh(z) for negative x.
TEC_HOST_DEVICE float geluTanhArgument(float x) { return 0.79788456080286535588f * (x + 0.044715f * x * x * x); }

TEC_HOST_DEVICE float geluTanh(float x) { return timesSigmoid(x, 2.0f * geluTanhArgument(x)); }

/// d/dx of the erf GELU: 0.5 (1 + erf(x/sqrt2)) + x phi(x), phi the standard normal density.
TEC_HOST_DEVICE float geluGrad(float x) {
  const float cdf = 0.5f * (1.0f + erfApprox(x * 0.70710678118654752440f));
  return cdf + x * 0.39894228040143267794f * expNonPositive(-0.5f * x * x);
}

/// d/dx of the tanh GELU: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2) with t = tanh(z), written
/// with s = sigmoid(2z) = (1 + t) / 2, so 1 - t^2 = 4 s (1 - s).
TEC_HOST_DEVICE float geluTanhGrad(float x) {
  const float s = sigmoid(2.0f * geluTanhArgument(x));
  return s + 2.0f * x * s * (1.0f - s) * 0.79788456080286535588f * (1.0f + 3.0f * 0.044715f * x * x);
}

/// The ReLU gradient passes dy where x > 0.
TEC_HOST_DEVICE float reluGrad(float dy, float x) { return x > 0.0f ? dy : 0.0f; }

/// SiLU (swish): x * sigmoid(x), Llama's and SwiGLU's activation.
TEC_HOST_DEVICE float silu(float x) { return timesSigmoid(x, x); }

TEC_HOST_DEVICE float applyEpilogue(float x, Epilogue e) {
  switch (e) {
  case Epilogue::Relu: return relu(x);
  case Epilogue::Gelu: return gelu(x);
  case Epilogue::GeluTanh: return geluTanh(x);
  case Epilogue::Silu: return silu(x);
  case Epilogue::HardSwish: return hardSwish(x);
  case Epilogue::None: break;
  }
  return x;
}

/// Learning-rate schedules (see tec.lr_schedule): 0 constant, 1 linear warm-up, 2 warm-up then cosine.
TEC_HOST_DEVICE float learningRate(int schedule, float lr, float step, float warmup, float total) {
  float rate = lr;
  if (schedule != 0 && warmup > 0 && step + 1 < warmup)
    rate = lr * (step + 1) / warmup;
  if (schedule == 2 && step >= warmup) {
    float progress = (step - warmup) / (total - warmup);
    progress = progress > 1.0f ? 1.0f : progress;
    rate = lr * 0.5f * (1.0f + cosf(3.14159265358979323846f * progress));
  }
  return rate;
}

} // namespace tec::kernels

#endif
