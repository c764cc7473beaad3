// FP8 conversions, bit for bit CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...): round to nearest
// even, saturate to the largest finite value, NaN -> 0x7F. Written on float bits (float -> double is
// exact, so this equals CUDA's double-based host path); tested against it over all 2^32 inputs.
#ifndef TEC_SUPPORT_FP8_H
#define TEC_SUPPORT_FP8_H

#include "support/HostDevice.h"

#include <cstdint>
#include <cstring>

namespace tec::kernels {

enum class Fp8Format { E4M3, E5M2 };

/// Largest finite values: E4M3 448 (S.1111.110), E5M2 57344 (S.11110.11).
inline constexpr float kE4M3Max = 448.0f, kE5M2Max = 57344.0f;

TEC_HOST_DEVICE uint32_t floatBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

TEC_HOST_DEVICE float bitsToFloat(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

TEC_HOST_DEVICE uint8_t floatToFp8(float x, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::E4M3;
  const int mantissaBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t maxNorm = e4m3 ? 0x7E : 0x7B;
  // |x| above these rounds past the largest finite value: E4M3 448 + half an ulp (464, a tie that
  // rounds to even 448, so strictly above); E5M2 57344 + half an ulp (61440, whose tie rounds up).
  const uint32_t bits = floatBits(x);
  const uint32_t absBits = bits & 0x7FFFFFFFu;
  const uint8_t sign = static_cast<uint8_t>((bits >> 31) << 7);
  if (absBits > 0x7F800000u)
    return 0x7F; // NaN, canonical positive
  const uint32_t minDenormHalf = e4m3 ? 0x3A800000u : 0x37000000u; // 2^-10, 2^-17
  const uint32_t minNorm = e4m3 ? 0x3C800000u : 0x38800000u;       // 2^-6, 2^-14
  if (absBits <= minDenormHalf)
    return sign; // zero or underflow, keeping the sign
  const bool overflow = e4m3 ? absBits > 0x43E80000u /*464*/ : absBits >= 0x47700000u /*61440*/;
  if (overflow)
    return static_cast<uint8_t>(maxNorm | sign);
  const int exponent = static_cast<int>((absBits >> 23) & 0xFF) - 127 + bias;
  const uint32_t halfUlp = 1u << (23 - mantissaBits - 1);
  uint32_t mantissa = (absBits >> (23 - mantissaBits)) & ((1u << mantissaBits) - 1);
  uint32_t result;
  if (absBits >= minNorm) {
    result = (static_cast<uint32_t>(exponent) << mantissaBits) | mantissa;
    const uint32_t rounded = absBits & ((halfUlp << 1) - 1);
    if (rounded > halfUlp || (rounded == halfUlp && (mantissa & 1)))
      ++result;
  } else {
    const int shift = 1 - exponent;
    mantissa |= 1u << mantissaBits; // the implicit leading bit
    result = mantissa >> shift;
    const uint32_t rounded = (absBits | (1u << 23)) & ((halfUlp << (shift + 1)) - 1);
    if (rounded > (halfUlp << shift) || (rounded == (halfUlp << shift) && (result & 1)))
      ++result;
  }
  return static_cast<uint8_t>(result | sign);
}

/// floatToFp8's bits without a branch, so that CPU loops over it vectorize (the emulated quantize at memory
/// speed). Everything above the largest finite value saturates to it, so it is clamped first; a normal
/// result rounds the float's own mantissa to nearest even in the bits (a carry moves the exponent); a
/// subnormal one is the multiple of the smallest subnormal, rounded to nearest even by adding and removing
/// 2^23. Tested equal to floatToFp8 over all 2^32 inputs.
TEC_HOST_DEVICE uint8_t floatToFp8Branchless(float x, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::E4M3;
  const uint32_t mantissaBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, drop = 23 - mantissaBits;
  const uint32_t bits = floatBits(x), absBits = bits & 0x7FFFFFFFu;
  const uint32_t maxBits = e4m3 ? 0x43E00000u /*448*/ : 0x47600000u /*57344*/;
  const uint32_t minNorm = e4m3 ? 0x3C800000u : 0x38800000u; // 2^-6, 2^-14
  const uint32_t clamped = absBits < maxBits ? absBits : maxBits;
  const uint32_t rounded = clamped + ((1u << (drop - 1)) - 1) + ((clamped >> drop) & 1);
  const uint32_t normal = (rounded >> drop) - ((127 - bias) << mantissaBits);
  // In units of the smallest subnormal (2^-9, 2^-16), at most 2^mantissaBits: exact, and a small int.
  const float units = bitsToFloat(clamped < minNorm ? clamped : minNorm) * (e4m3 ? 512.0f : 65536.0f);
  const uint32_t subnormal = static_cast<uint32_t>(static_cast<int32_t>((units + 8388608.0f) - 8388608.0f));
  const uint32_t code = (clamped >= minNorm ? normal : subnormal) | ((bits >> 24) & 0x80u);
  return static_cast<uint8_t>(absBits > 0x7F800000u ? 0x7Fu : code);
}

TEC_HOST_DEVICE float fp8ToFloat(uint8_t v, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::E4M3;
  const int mantissaBits = e4m3 ? 3 : 2, exponentBits = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(v >> 7) << 31;
  const uint32_t exponent = (v >> mantissaBits) & ((1u << exponentBits) - 1);
  const uint32_t mantissa = v & ((1u << mantissaBits) - 1);
  if (e4m3 && exponent == 15 && mantissa == 7)
    return bitsToFloat(sign | 0x7FC00000u);
  if (!e4m3 && exponent == 31)
    return bitsToFloat(sign | (mantissa ? 0x7FC00000u : 0x7F800000u));
  if (exponent == 0) {
    // Denormal: mantissa * 2^(1 - bias - mantissaBits), exact in float.
    float magnitude = static_cast<float>(mantissa) * bitsToFloat(static_cast<uint32_t>(127 + 1 - bias - mantissaBits) << 23);
    return bitsToFloat(sign | floatBits(magnitude));
  }
  return bitsToFloat(sign | ((exponent - bias + 127) << 23) | (mantissa << (23 - mantissaBits)));
}

/// fp8ToFloat without a branch, so that CPU loops over it vectorize: a normal code's exponent and mantissa
/// move into the float's fields and rebias; a subnormal one is its mantissa times the smallest subnormal;
/// E4M3's S.1111.111 and E5M2's S.11111.xx are NaN and infinity as fp8ToFloat gives them.
TEC_HOST_DEVICE float fp8ToFloatBranchless(uint8_t v, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::E4M3;
  const uint32_t mantissaBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t code = v, magnitude = code & 0x7Fu, sign = (code >> 7) << 31;
  const uint32_t normal = (magnitude << (23 - mantissaBits)) + ((127 - bias) << 23);
  const float subnormal = static_cast<float>(static_cast<int32_t>(magnitude & ((1u << mantissaBits) - 1))) *
                          (e4m3 ? 1.0f / 512.0f : 1.0f / 65536.0f);
  const bool isSubnormal = magnitude < (1u << mantissaBits);
  const uint32_t special = e4m3 ? (magnitude == 0x7Fu ? 0x7FC00000u : 0u)
                                : (magnitude > 0x7Cu ? 0x7FC00000u : (magnitude == 0x7Cu ? 0x7F800000u : 0u));
  const uint32_t bits = special ? special : (isSubnormal ? floatBits(subnormal) : normal);
  return bitsToFloat(bits | sign);
}

/// The one NaN that amax and delayed scaling produce on the CPU and the GPU alike (positive, quiet), so
/// that their states compare bit for bit.
TEC_HOST_DEVICE float canonicalNan() { return bitsToFloat(0x7FC00000u); }

/// max(a, |v|) for a running amax (a >= 0 or NaN): a NaN on either side wins, as the canonical NaN.
TEC_HOST_DEVICE float maxAbsNanWins(float a, float v) {
  const float m = v < 0 ? -v : v;
  return (a != a || v != v) ? canonicalNan() : (m > a ? m : a);
}

/// Transformer Engine's scale from a reduced amax: (fp8Max / amax) / 2^margin, the previous scale where
/// the amax is 0, inf or NaN, and FLT_MAX where the quotient overflows (a tiny amax).
TEC_HOST_DEVICE float delayedScale(float amax, float previous, float fp8Max, int margin) {
  if (!(amax > 0.0f) || amax - amax != 0.0f) // 0, NaN or inf
    return previous;
  const float s = (fp8Max / amax) / bitsToFloat(static_cast<uint32_t>(127 + margin) << 23);
  return s - s != 0.0f ? 3.40282347e+38f : s;
}

TEC_HOST_DEVICE float fp8Max(Fp8Format format) { return format == Fp8Format::E4M3 ? kE4M3Max : kE5M2Max; }

/// Transformer Engine 2.x's scale from a tensor's or a block's own amax (current and block scaling, TE's
/// compute_scale_from_amax): fp8Max / max(amax, epsilon); 1 where that amax is 0 or infinite; FLT_MAX where
/// the quotient overflows; with pow2, rounded down to a power of two (its mantissa dropped) so that scaling
/// is exact. A NaN amax gives a NaN scale: its tensor or block quantizes to NaN, as it holds one.
TEC_HOST_DEVICE float scaleFromAmax(float amax, float fp8Max, bool pow2, float epsilon) {
  if (amax != amax)
    return canonicalNan();
  if (amax < epsilon)
    amax = epsilon;
  if (amax == 0.0f || amax - amax != 0.0f)
    return 1.0f;
  float s = fp8Max / amax;
  if (s - s != 0.0f)
    s = 3.40282347e+38f;
  return pow2 ? bitsToFloat(floatBits(s) & 0xFF800000u) : s;
}

/// MXFP8's shared block scale as Transformer Engine makes it: the smallest power of two 2^e with
/// amax / 2^e <= fp8Max (no value of the block saturates; the OCP spec's floor(log2 amax) - emax may
/// saturate the largest), e within E8M0's [-127, 127]. Returns E8M0's code e + 127; 0xFF (NaN) for a block
/// holding a NaN, 0 (2^-127) for an all-zero one. Exact: amax's exponent and mantissa against fp8Max's.
TEC_HOST_DEVICE uint8_t e8m0FromAmax(float amax, float fp8Max) {
  if (amax != amax)
    return 0xFF;
  if (amax == 0.0f)
    return 0;
  int shift = 0;
  if (amax < 1.17549435e-38f) { // subnormal: normalized exactly by 2^64
    amax *= 18446744073709551616.0f;
    shift = 64;
  }
  const uint32_t a = floatBits(amax), m = floatBits(fp8Max);
  if ((a & 0x7F800000u) == 0x7F800000u)
    return 0xFE; // infinite: the largest scale
  int e = static_cast<int>(a >> 23) - static_cast<int>(m >> 23) - shift;
  if ((a & 0x7FFFFFu) > (m & 0x7FFFFFu))
    ++e;
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint8_t>(e + 127);
}

/// An E8M0 code's value 2^(code - 127) as a float (2^-127 is a float subnormal, exact); 0xFF is NaN.
TEC_HOST_DEVICE float e8m0ToFloat(uint8_t code) {
  if (code == 0xFF)
    return canonicalNan();
  return code == 0 ? bitsToFloat(0x00400000u) : bitsToFloat(static_cast<uint32_t>(code) << 23);
}

/// How a block-scaled quantize scales each block: TE's FP32 scale, that scale rounded down to a power of
/// two (TE's Float8BlockScaling default), or MXFP8's E8M0 power of two.
enum class BlockScale { F32, Pow2, E8M0 };

/// One block's quantization factor (what values are multiplied by before the cast) and dequantization
/// factor (what codes are multiplied by after), from the block's amax.
struct BlockScales {
  float scale, scaleInv;
};
TEC_HOST_DEVICE BlockScales blockScales(float amax, float fp8Max, BlockScale kind, float epsilon) {
  if (kind == BlockScale::E8M0) {
    const uint8_t code = e8m0FromAmax(amax, fp8Max);
    // 2^-e, the reciprocal of an exact power of two: exact (2^127 at most, for e = -127).
    const float scale = code == 0xFF ? canonicalNan() : e8m0ToFloat(static_cast<uint8_t>(254 - code));
    return {scale, e8m0ToFloat(code)};
  }
  const float s = scaleFromAmax(amax, fp8Max, kind == BlockScale::Pow2, epsilon);
  return {s, 1.0f / s};
}

} // namespace tec::kernels

#endif
