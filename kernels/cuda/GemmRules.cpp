// cuBLASLt's type rules for epilogues and tec's alignment bookkeeping: plain C++ (no CUDA), so that the
// CUDA backend's fusion decisions are unit-tested on machines without a GPU (tests/unit/LaunchShapesTest).
#include "kernels/cuda/Gemm.h"

#include <string>

namespace tec::kernels::cuda {

namespace {

bool isFp8(ElementType t) { return t == ElementType::F8E4M3 || t == ElementType::F8E5M2; }

const char *typeName(ElementType t) {
  static const char *names[] = {"f32", "f16", "bf16", "i32", "i64", "bool", "e4m3", "e5m2"};
  return names[static_cast<int>(t)];
}

bool takesBias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::ReluBias || e == GemmEpilogue::GeluBias ||
         e == GemmEpilogue::GeluAuxBias;
}

} // namespace

const char *epilogueName(GemmEpilogue e) {
  static const char *names[] = {"DEFAULT", "BIAS",          "RELU",  "RELU_BIAS", "GELU",
                                "GELU_BIAS", "GELU_AUX", "GELU_AUX_BIAS", "DGELU", "BGRADB"};
  return names[static_cast<int>(e)];
}

ElementType fp8BiasType(ElementType d) { return d == ElementType::F16 ? ElementType::F16 : ElementType::BF16; }

bool cublasLtSupports(const GemmSpec &spec, std::string &why) {
  const bool fp8 = isFp8(spec.a) || isFp8(spec.b);
  const std::string types = std::string(typeName(spec.a)) + " x " + typeName(spec.b) + " -> " + typeName(spec.d);
  if (fp8 && (spec.transposeA || !spec.transposeB)) {
    why = "FP8 tensor cores take only the TN layout";
    return false;
  }
  if (fp8 && (spec.m % 16 || spec.n % 16 || spec.k % 16)) {
    why = "FP8 tensor cores need m, n and k multiples of 16, not " + std::to_string(spec.m) + "x" +
          std::to_string(spec.n) + "x" + std::to_string(spec.k);
    return false;
  }
  if (fp8 && spec.d != ElementType::F32 && spec.d != ElementType::BF16 && spec.d != ElementType::F16) {
    why = "an FP8 GEMM writes f32, bf16 or f16, not " + std::string(typeName(spec.d));
    return false;
  }
  const bool blocks = spec.scalingA != GemmScaling::Tensor || spec.scalingB != GemmScaling::Tensor;
  if (blocks && !fp8) {
    why = "block scales need FP8 inputs, not " + types;
    return false;
  }
  if (blocks) {
    if (spec.scalingA == GemmScaling::Tensor || spec.scalingB == GemmScaling::Tensor) {
      why = "cuBLASLt scales both operands per block or neither";
      return false;
    }
    if (spec.scalingA == GemmScaling::Block128x128 && spec.scalingB == GemmScaling::Block128x128) {
      why = "cuBLASLt has no 128x128 x 128x128 block-scaled GEMM";
      return false;
    }
    if (spec.k % 128) {
      why = "cuBLASLt's block scales take whole 128-blocks along K, not k = " + std::to_string(spec.k);
      return false;
    }
    if (spec.fastAccumulation) {
      why = "cuBLASLt has no fast accumulation with block scales";
      return false;
    }
    if (spec.epilogue != GemmEpilogue::Default && spec.epilogue != GemmEpilogue::Bias) {
      why = "cuBLASLt's block-scaled GEMMs take a plain or bias epilogue, not " + std::string(epilogueName(spec.epilogue));
      return false;
    }
    if (spec.batch != 1) {
      why = "block-scaled GEMMs are not batched";
      return false;
    }
  }
  if (takesBias(spec.epilogue)) {
    const ElementType wanted = fp8 ? fp8BiasType(spec.d) : spec.d;
    if (spec.bias != wanted) {
      why = "cuBLASLt takes a " + std::string(typeName(wanted)) + " bias for " + types + ", not " + typeName(spec.bias);
      return false;
    }
  }
  if (spec.epilogue == GemmEpilogue::BGradB) {
    if (fp8) {
      why = "cuBLASLt has no bias-gradient epilogue for FP8 inputs";
      return false;
    }
    if (spec.bias != spec.d) {
      why = "cuBLASLt's bias gradient has the output's type (" + std::string(typeName(spec.d)) + "), not " +
            typeName(spec.bias);
      return false;
    }
  }
  return true;
}

bool cublasBlockScaling(std::array<int64_t, 2> xBlock, std::array<int64_t, 2> wBlock, bool transposeB, GemmScaling &x,
                        GemmScaling &w, std::string &why) {
  const std::array<int64_t, 2> vector{1, 128}, tile{128, 128}, column{128, 1}; // column: a [K, N] weight's
  if (xBlock != vector || (wBlock != vector && wBlock != tile && wBlock != column)) {
    why = "cuBLASLt's block scales are 1x128 and 128x128 (MXFP8's VEC32_UE8M0 is not wired yet), not " +
          std::to_string(xBlock[0]) + "x" + std::to_string(xBlock[1]) + " x " + std::to_string(wBlock[0]) + "x" +
          std::to_string(wBlock[1]);
    return false;
  }
  if (!transposeB) {
    why = "the weight is stored [K, N] and cuBLASLt's block scales take K-major operands";
    return false;
  }
  x = GemmScaling::Vec128;
  w = wBlock == tile ? GemmScaling::Block128x128 : GemmScaling::Vec128;
  return true;
}

int alignmentOf(int64_t byteOffset) {
  int alignment = 256;
  while (alignment > 1 && byteOffset % alignment != 0)
    alignment /= 2;
  return alignment;
}

} // namespace tec::kernels::cuda
