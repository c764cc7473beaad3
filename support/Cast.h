// Per-element casts between any two element types (ONNX Cast), shared by the CPU and CUDA kernels:
// through double, so every f32/f16/bf16/fp8/int32 value is exact on the way; float-to-int saturates
// (C++ leaves out-of-range conversions undefined) and NaN becomes 0.
#ifndef TEC_SUPPORT_CAST_H
#define TEC_SUPPORT_CAST_H

#include "support/Half.h"
#include "support/Ops.h"

#include <cmath>
#include <cstdint>

namespace tec::kernels {

TEC_HOST_DEVICE bool isIntegerType(ElementType t) {
  return t == ElementType::I32 || t == ElementType::I64 || t == ElementType::Bool;
}

TEC_HOST_DEVICE double loadAsDouble(const void *p, ElementType t, int64_t i) {
  switch (t) {
  case ElementType::F32: return static_cast<const float *>(p)[i];
  case ElementType::F16: return f16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case ElementType::BF16: return bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case ElementType::I32: return static_cast<const int32_t *>(p)[i];
  case ElementType::I64: return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case ElementType::Bool: return static_cast<const uint8_t *>(p)[i] ? 1.0 : 0.0;
  case ElementType::F8E4M3: return fp8ToFloat(static_cast<const uint8_t *>(p)[i], Fp8Format::E4M3);
  case ElementType::F8E5M2: return fp8ToFloat(static_cast<const uint8_t *>(p)[i], Fp8Format::E5M2);
  }
  return 0;
}

/// Truncates toward zero into [lo, hi] (the integer type's range as doubles; hi may round up to 2^63).
template <typename I> TEC_HOST_DEVICE I saturatingInt(double v, double lo, double hi, I min, I max) {
  if (v != v)
    return 0;
  v = trunc(v);
  return v <= lo ? min : v >= hi ? max : static_cast<I>(v);
}

TEC_HOST_DEVICE void storeFromDouble(void *p, ElementType t, int64_t i, double v) {
  switch (t) {
  case ElementType::F32: static_cast<float *>(p)[i] = static_cast<float>(v); return;
  case ElementType::F16: static_cast<uint16_t *>(p)[i] = floatToF16(static_cast<float>(v)); return;
  case ElementType::BF16: static_cast<uint16_t *>(p)[i] = floatToBf16(static_cast<float>(v)); return;
  case ElementType::I32:
    static_cast<int32_t *>(p)[i] = saturatingInt<int32_t>(v, -2147483648.0, 2147483647.0, INT32_MIN, INT32_MAX);
    return;
  case ElementType::I64:
    static_cast<int64_t *>(p)[i] =
        saturatingInt<int64_t>(v, -9223372036854775808.0, 9223372036854775807.0, INT64_MIN, INT64_MAX);
    return;
  case ElementType::Bool: static_cast<uint8_t *>(p)[i] = v != 0.0; return;
  case ElementType::F8E4M3: static_cast<uint8_t *>(p)[i] = floatToFp8(static_cast<float>(v), Fp8Format::E4M3); return;
  case ElementType::F8E5M2: static_cast<uint8_t *>(p)[i] = floatToFp8(static_cast<float>(v), Fp8Format::E5M2); return;
  }
}

TEC_HOST_DEVICE int64_t loadInt(const void *p, ElementType t, int64_t i) {
  switch (t) {
  case ElementType::I32: return static_cast<const int32_t *>(p)[i];
  case ElementType::I64: return static_cast<const int64_t *>(p)[i];
  default: return static_cast<const uint8_t *>(p)[i] != 0;
  }
}

/// Element i of x (type `from`) into y (type `to`); integer-to-integer exactly, also past 2^53.
TEC_HOST_DEVICE void castElement(const void *x, ElementType from, void *y, ElementType to, int64_t i) {
  if (isIntegerType(from) && isIntegerType(to)) {
    const int64_t v = loadInt(x, from, i);
    if (to == ElementType::I32)
      static_cast<int32_t *>(y)[i] = static_cast<int32_t>(v);
    else if (to == ElementType::I64)
      static_cast<int64_t *>(y)[i] = v;
    else
      static_cast<uint8_t *>(y)[i] = v != 0;
    return;
  }
  storeFromDouble(y, to, i, loadAsDouble(x, from, i));
}

} // namespace tec::kernels

#endif
