// IEEE half and bfloat16 storage types with round-to-nearest-even conversions from float.
#ifndef TEC_SUPPORT_HALF_H
#define TEC_SUPPORT_HALF_H

#include "support/Fp8.h"

#include <cstdint>

namespace tec::kernels {

TEC_HOST_DEVICE float bf16ToFloat(uint16_t v) { return bitsToFloat(static_cast<uint32_t>(v) << 16); }

TEC_HOST_DEVICE uint16_t floatToBf16(float x) {
  uint32_t b = floatBits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((b >> 16) | 0x40); // quiet NaN
  b += 0x7FFFu + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

TEC_HOST_DEVICE float f16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * bitsToFloat(0x33800000u); // 2^-24
    return bitsToFloat(sign | floatBits(magnitude));
  }
  if (exponent == 31)
    return bitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

TEC_HOST_DEVICE uint16_t floatToF16(float x) {
  const uint32_t b = floatBits(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t abs = b & 0x7FFFFFFFu;
  if (abs > 0x7F800000u)
    return static_cast<uint16_t>(sign | 0x7E00); // NaN
  if (abs >= 0x477FF000u)                        // rounds to 65536 or more: inf
    return static_cast<uint16_t>(sign | 0x7C00);
  if (abs < 0x38800000u) { // below 2^-14: denormal, rounded at 2^-24
    // Adding 0.5 (2^-1) aligns the 2^-24 ulp at float's last mantissa bit and rounds to nearest even.
    float shifted = bitsToFloat(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (floatBits(shifted) - 0x3F000000u));
  }
  uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

} // namespace tec::kernels

#endif
