// GEMMs through cuBLASLt, in tec's row-major terms. A row-major D[M,N] = A[M,K] · B (B = [N,K]ᵀ or
// [K,N]) is cuBLASLt's column-major Dᵀ = op(B)·op(A): the weight is cuBLASLt's "A", so Y = X·Wᵀ maps
// to transa=T, transb=N, m=N, n=M, k=K, the TN layout FP8 tensor cores require.
#ifndef TEC_KERNELS_CUDA_GEMM_H
#define TEC_KERNELS_CUDA_GEMM_H

#include "support/HostDevice.h"
#include "support/Ops.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tec::kernels::cuda {

/// cuBLASLt's epilogues (by their names), the ones tec's plans use.
enum class GemmEpilogue { Default, Bias, Relu, ReluBias, Gelu, GeluBias, GeluAux, GeluAuxBias, DGelu, BGradB };

/// How an FP8 operand's scale_inv applies (cuBLASLt's scale modes, from cuBLASLt 12.9 on Hopper): one for
/// the tensor, or one per 1x128 block (VEC128_32F) or 128x128 block (BLK128x128_32F) of its K-major
/// storage, laid out as cublasScaleIndex says.
enum class GemmScaling { Tensor, Vec128, Block128x128 };

/// Where cuBLASLt reads the scale of block (row, kBlock) of an operand stored [rows, K] with `kBlocks`
/// blocks along K (row: the 128-row band under Block128x128), in floats: Transformer Engine's "GEMM-ready"
/// format. VEC128_32F's scales run along the rows, K block by K block, each run padded to a multiple of 4;
/// BLK128x128_32F's along K, band by band, likewise padded. tec's quantize_blocks writes (row, kBlock)
/// row-major, unpadded: kernels/cuda's toCublasBlockScales moves them.
TEC_HOST_DEVICE int64_t cublasScaleStride(GemmScaling s, int64_t rows, int64_t kBlocks) {
  return ((s == GemmScaling::Vec128 ? rows : kBlocks) + 3) / 4 * 4;
}
TEC_HOST_DEVICE int64_t cublasScaleIndex(GemmScaling s, int64_t row, int64_t kBlock, int64_t rows, int64_t kBlocks) {
  const int64_t stride = cublasScaleStride(s, rows, kBlocks);
  return s == GemmScaling::Vec128 ? kBlock * stride + row : row * stride + kBlock;
}
/// The floats cuBLASLt's layout of those scales spans.
TEC_HOST_DEVICE int64_t cublasScaleCount(GemmScaling s, int64_t rows, int64_t kBlocks) {
  return cublasScaleStride(s, rows, kBlocks) * (s == GemmScaling::Vec128 ? kBlocks : rows);
}

struct GemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool transposeA = false; // A stored [K,M]
  bool transposeB = false; // B stored [N,K]
  ElementType a = ElementType::F32, b = ElementType::F32, d = ElementType::F32;
  ElementType bias = ElementType::F32; // BIAS_DATA_TYPE, set explicitly
  GemmEpilogue epilogue = GemmEpilogue::Default;
  /// FP8: Transformer Engine's choice, on for forward GEMMs and off for backward ones.
  bool fastAccumulation = false;
  /// FP32 GEMMs may use TF32 tensor cores only when asked.
  bool allowTf32 = false;
  float alpha = 1.0f, beta = 0.0f; // beta != 0 accumulates into D (C = D)
  bool amaxD = false;              // AMAX_D_POINTER: max |D| written by the GEMM
  /// FP8 operands' scale modes; blocks need the TN layout (both K-major).
  GemmScaling scalingA = GemmScaling::Tensor, scalingB = GemmScaling::Tensor;
  /// Strided batches (0 stride: the operand is shared by every batch), in elements.
  int64_t batch = 1, batchStrideA = 0, batchStrideB = 0, batchStrideD = 0;
  /// The alignment (bytes, a power of two up to 256) every pointer to A, B and D will have: the
  /// heuristics assume 256 unless told, and an algorithm that needs more than the pointers have fails.
  int alignA = 256, alignB = 256, alignD = 256;
};

/// Whether cuBLASLt runs `spec` with its epilogue (its documented rules), and if not, why. FP8 inputs:
/// the TN layout with m, n and k multiples of 16; an output of FP32, BF16 or FP16; a bias of BF16 with
/// an FP32 or BF16 output, FP16 with FP16; no bias-gradient epilogue. Other types: a bias or bias
/// gradient of the output's type.
/// Plain C++, so that fusion decisions are tested without a GPU; on a GPU, a fused GEMM these rules
/// accept and cuBLASLt refuses is reported (the rules are then wrong).
/// Block scales (cuBLASLt 12.9): E4M3 or E5M2 inputs, both operands per block with at most one of them in
/// 128x128 tiles, whole 128-blocks along K, no fast accumulation (cuBLASLt promotes every block), a plain
/// or bias epilogue, one batch.
bool cublasLtSupports(const GemmSpec &spec, std::string &why);
/// The scale modes cuBLASLt takes for a block-scaled FP8 GEMM y = x · wᵀ (x [M, K], w [N, K]) with these
/// blocks (Transformer Engine's Float8BlockScaling: 1x128 activations and gradients, 128x128 or 1x128
/// weights), or false with why not (MXFP8's 1x32, a weight stored [K, N]).
bool cublasBlockScaling(std::array<int64_t, 2> xBlock, std::array<int64_t, 2> wBlock, bool transposeB, GemmScaling &x,
                        GemmScaling &w, std::string &why);
/// cuBLASLt's name of an epilogue, without the CUBLASLT_EPILOGUE_ prefix ("GELU_AUX_BIAS").
const char *epilogueName(GemmEpilogue e);
/// The bias type cuBLASLt takes with FP8 inputs and output type `d`.
ElementType fp8BiasType(ElementType d);
/// The largest power of two, at most 256, that divides `byteOffset` (from a 256-byte-aligned base).
int alignmentOf(int64_t byteOffset);

struct GemmOperands {
  const void *a = nullptr, *b = nullptr;
  void *d = nullptr;
  const void *bias = nullptr;   // [N]
  const float *aScaleInv = nullptr, *bScaleInv = nullptr; // FP8 operands
  float *amaxD = nullptr;
  void *aux = nullptr;          // GELU_AUX(_BIAS) / DGELU: the pre-activation, [M,N] like D
  void *biasGrad = nullptr;     // BGRADB: [N]
};

/// The workspace tec gives cuBLASLt: 32 MiB on Hopper (sm_90), 4 MiB elsewhere.
size_t gemmWorkspaceBytes(int computeCapabilityMajor);

/// One GEMM shape with its descriptors and the algorithms cuBLASLt's heuristics returned, queried once
/// (at plan load) and kept.
class Gemm {
public:
  ~Gemm();
  /// Null with `error` set when cuBLASLt rejects the description or has no algorithm for it.
  static std::unique_ptr<Gemm> create(void *ltHandle, const GemmSpec &spec, size_t workspaceBytes,
                                      std::string &error);
  /// Enqueues the GEMM on `stream`; when an algorithm fails it tries the next one and keeps that.
  bool run(const GemmOperands &operands, void *workspace, void *stream, std::string &error);
  const GemmSpec &spec() const { return spec_; }
  size_t algorithmCount() const;

private:
  Gemm() = default;
  struct Impl;
  GemmSpec spec_;
  std::unique_ptr<Impl> impl;
};

/// The cuBLASLt library's version as a number (e.g. 130100), 0 when it cannot say.
size_t cublasLtVersion();

} // namespace tec::kernels::cuda

#endif
