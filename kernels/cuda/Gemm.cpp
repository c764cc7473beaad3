#include "kernels/cuda/Gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace tec::kernels::cuda {

namespace {

cudaDataType_t cudaType(ElementType t) {
  switch (t) {
  case ElementType::F16: return CUDA_R_16F;
  case ElementType::BF16: return CUDA_R_16BF;
  case ElementType::F8E4M3: return CUDA_R_8F_E4M3;
  case ElementType::F8E5M2: return CUDA_R_8F_E5M2;
  default: return CUDA_R_32F;
  }
}

cublasLtEpilogue_t epilogueOf(GemmEpilogue e) {
  switch (e) {
  case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
  case GemmEpilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
  case GemmEpilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
  case GemmEpilogue::Gelu: return CUBLASLT_EPILOGUE_GELU;
  case GemmEpilogue::GeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
  case GemmEpilogue::GeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
  case GemmEpilogue::GeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case GemmEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
  case GemmEpilogue::BGradB: return CUBLASLT_EPILOGUE_BGRADB;
  case GemmEpilogue::Default: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool usesBias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::ReluBias || e == GemmEpilogue::GeluBias ||
         e == GemmEpilogue::GeluAuxBias;
}

bool usesAux(GemmEpilogue e) {
  return e == GemmEpilogue::GeluAux || e == GemmEpilogue::GeluAuxBias || e == GemmEpilogue::DGelu;
}

bool isFp8(ElementType t) { return t == ElementType::F8E4M3 || t == ElementType::F8E5M2; }

cublasLtMatmulMatrixScale_t scaleModeOf(GemmScaling s) {
  switch (s) {
  case GemmScaling::Vec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  case GemmScaling::Block128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  case GemmScaling::Tensor: break;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

std::string statusText(cublasStatus_t s) { return "cuBLASLt status " + std::to_string(static_cast<int>(s)); }

template <typename T> cublasStatus_t setDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T &v) {
  return cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v));
}

} // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algorithms;
  size_t current = 0;
  ~Impl() {
    if (desc)
      cublasLtMatmulDescDestroy(desc);
    for (auto l : {a, b, d})
      if (l)
        cublasLtMatrixLayoutDestroy(l);
  }
};

Gemm::~Gemm() = default;

size_t Gemm::algorithmCount() const { return impl->algorithms.size(); }

size_t gemmWorkspaceBytes(int computeCapabilityMajor) {
  return computeCapabilityMajor >= 9 ? size_t(32) << 20 : size_t(4) << 20;
}

size_t cublasLtVersion() { return cublasLtGetVersion(); }

std::unique_ptr<Gemm> Gemm::create(void *ltHandle, const GemmSpec &spec, size_t workspaceBytes, std::string &error) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  gemm->spec_ = spec;
  gemm->impl = std::make_unique<Impl>();
  Impl &g = *gemm->impl;
  g.handle = static_cast<cublasLtHandle_t>(ltHandle);
  auto fail = [&](const std::string &what, cublasStatus_t s) {
    error = what + ": " + statusText(s);
    return nullptr;
  };
  const bool fp8 = isFp8(spec.a) || isFp8(spec.b);
  const bool tf32 = spec.allowTf32 && spec.a == ElementType::F32 && spec.b == ElementType::F32;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (auto s = cublasLtMatmulDescCreate(&g.desc, compute, CUDA_R_32F); s != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulDescCreate", s);
  // cuBLASLt's A is our B (the weight), its B our A; see the header.
  const cublasOperation_t transa = spec.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t transb = spec.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
  setDesc(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, transa);
  setDesc(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, transb);
  setDesc(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogueOf(spec.epilogue));
  if (usesBias(spec.epilogue) || spec.epilogue == GemmEpilogue::BGradB)
    if (auto s = setDesc(g.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cudaType(spec.bias)));
        s != CUBLAS_STATUS_SUCCESS)
      return fail("BIAS_DATA_TYPE", s);
  if (fp8)
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(spec.fastAccumulation ? 1 : 0));
  if (usesAux(spec.epilogue))
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(spec.n));
  // Placeholders for the pointer attributes, so that the heuristics see the real configuration.
  if (fp8) {
    static const float one = 1.0f;
    const void *p = &one;
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p);
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p);
  }
  if (spec.scalingA != GemmScaling::Tensor || spec.scalingB != GemmScaling::Tensor) {
    if (auto s = setDesc(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(scaleModeOf(spec.scalingB)));
        s != CUBLAS_STATUS_SUCCESS)
      return fail("A_SCALE_MODE", s);
    if (auto s = setDesc(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(scaleModeOf(spec.scalingA)));
        s != CUBLAS_STATUS_SUCCESS)
      return fail("B_SCALE_MODE", s);
  }

  auto layout = [&](cublasLtMatrixLayout_t &l, ElementType type, int64_t rows, int64_t cols, int64_t stride) {
    cublasStatus_t s = cublasLtMatrixLayoutCreate(&l, cudaType(type), rows, cols, rows);
    if (s == CUBLAS_STATUS_SUCCESS && spec.batch > 1) {
      const int32_t batch = static_cast<int32_t>(spec.batch);
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    }
    return s;
  };
  // Stored shapes, column-major: cuBLASLt A is k x m (T) or m x k (N) with m = N; B is k x n or n x k, n = M.
  if (auto s = layout(g.a, spec.b, spec.transposeB ? spec.k : spec.n, spec.transposeB ? spec.n : spec.k,
                      spec.batchStrideB);
      s != CUBLAS_STATUS_SUCCESS)
    return fail("layout of B", s);
  if (auto s = layout(g.b, spec.a, spec.transposeA ? spec.m : spec.k, spec.transposeA ? spec.k : spec.m,
                      spec.batchStrideA);
      s != CUBLAS_STATUS_SUCCESS)
    return fail("layout of A", s);
  if (auto s = layout(g.d, spec.d, spec.n, spec.m, spec.batchStrideD); s != CUBLAS_STATUS_SUCCESS)
    return fail("layout of D", s);

  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulPreferenceCreate(&preference);
  const uint64_t workspace = workspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  // The pointers' real alignment (cuBLASLt's A is our B; C is D), so that no algorithm needs more.
  const uint32_t alignA = spec.alignB, alignB = spec.alignA, alignD = spec.alignD;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignA, sizeof(alignA));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignB, sizeof(alignB));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignD, sizeof(alignD));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignD, sizeof(alignD));
  g.algorithms.resize(8);
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(g.handle, g.desc, g.a, g.b, g.d, g.d, preference,
                                                    static_cast<int>(g.algorithms.size()), g.algorithms.data(), &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulAlgoGetHeuristic", s);
  g.algorithms.resize(found);
  if (found == 0) {
    error = "cuBLASLt has no algorithm for this GEMM";
    return nullptr;
  }
  return gemm;
}

bool Gemm::run(const GemmOperands &o, void *workspace, void *stream, std::string &error) {
  Impl &g = *impl;
  if (isFp8(spec_.a) || isFp8(spec_.b)) {
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void *>(o.bScaleInv));
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void *>(o.aScaleInv));
  }
  if (usesBias(spec_.epilogue))
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, o.bias);
  if (spec_.epilogue == GemmEpilogue::BGradB)
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void *>(o.biasGrad));
  if (usesAux(spec_.epilogue))
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void *>(o.aux));
  if (spec_.amaxD)
    setDesc(g.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void *>(o.amaxD));
  const float alpha = spec_.alpha, beta = spec_.beta;
  cublasStatus_t last = CUBLAS_STATUS_SUCCESS;
  for (; g.current < g.algorithms.size(); ++g.current) {
    last = cublasLtMatmul(g.handle, g.desc, &alpha, o.b, g.a, o.a, g.b, &beta, o.d, g.d, o.d, g.d,
                          &g.algorithms[g.current].algo, workspace, g.algorithms[g.current].workspaceSize,
                          static_cast<cudaStream_t>(stream));
    if (last == CUBLAS_STATUS_SUCCESS)
      return true;
  }
  error = "every cuBLASLt algorithm failed: " + statusText(last);
  return false;
}

} // namespace tec::kernels::cuda
