// Activations shared by the CPU and CUDA kernels and the GEMM epilogues.
#ifndef TEC_KERNELS_COMMON_ACTIVATIONS_H
#define TEC_KERNELS_COMMON_ACTIVATIONS_H

#include "kernels/common/HostDevice.h"

#include <cmath>

namespace tec::kernels {

/// The epilogues of a fused GEMM, as cuBLASLt names them.
enum class Epilogue { None, Relu, Gelu, GeluTanh };

/// NaN stays NaN (as numpy.maximum and cuBLASLt do); written so that compilers emit a vector max.
TEC_HOST_DEVICE float relu(float x) { return x < 0.0f ? 0.0f : x; }

/// Exact GELU: x/2 * (1 + erf(x/sqrt(2))).
TEC_HOST_DEVICE float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

/// cuBLASLt's GELU epilogue: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
TEC_HOST_DEVICE float geluTanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}

TEC_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

TEC_HOST_DEVICE float applyEpilogue(float x, Epilogue e) {
  switch (e) {
  case Epilogue::Relu: return relu(x);
  case Epilogue::Gelu: return gelu(x);
  case Epilogue::GeluTanh: return geluTanh(x);
  case Epilogue::None: break;
  }
  return x;
}

} // namespace tec::kernels

#endif
