// CUDA FP8 kernels: the GPU twins of kernels/cpu's quantize, dequantize, amax and delayed scaling, on the
// same per-element math (support). `stream` is a cudaStream_t; device pointers throughout.
#ifndef TEC_KERNELS_CUDA_FP8KERNELS_H
#define TEC_KERNELS_CUDA_FP8KERNELS_H

#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/Kernels.h"
#include "support/Activations.h"
#include "support/Fp8.h"
#include "support/Ops.h"

#include <cstdint>

namespace tec::kernels::cuda {

/// y = fp8(x * *scale) and *amax = max(*amax, max |x|) in one pass (NaN wins); *amax must start at 0.
/// x is f32, bf16 or f16 (`xType`: 16-bit activations quantize without widening first). A null `amax`
/// skips it. With `counts` (two device int64s, added to): the values that saturated and the nonzero
/// values that flushed to zero, as kernels/cpu's quantizeCounting.
/// With `activation` (tec.cast_fp8), y = fp8(act(x) * *scale) and the amax of act(x).
void quantizeWithAmax(const void *x, ElementType xType, const float *scale, uint8_t *y, float *amax, int64_t n,
                      Fp8Format format, void *stream, unsigned long long *counts = nullptr,
                      Epilogue activation = Epilogue::None);
/// Current scaling and its quantize in one launch: *scale = scaleFromAmax(*amax, ...) (support/Fp8.h), *scaleInv
/// = 1 / *scale, y = fp8(x * *scale); what currentScaling then quantizeWithAmax give, bit for bit.
void quantizeCurrentScaled(const void *x, ElementType xType, const float *amax, float fp8Max, bool pow2, float epsilon,
                           float *scale, float *scaleInv, uint8_t *y, int64_t n, Fp8Format format, void *stream,
                           unsigned long long *counts = nullptr);
/// tec.layer_norm_fp8 over rows x cols: LayerNorm (weight, bias of `affineType`; bias may be null) quantized
/// as it is computed, *amax the max |y| (it must start at 0), mean and rstd per row.
void layerNormQuantize(const void *x, ElementType xType, const void *weight, const void *bias, ElementType affineType,
                       const float *scale, uint8_t *y, float *amax, float *mean, float *rstd, int64_t rows,
                       int64_t cols, float epsilon, Fp8Format format, void *stream, unsigned long long *counts = nullptr);
/// The same over x[rows, cols] read transposed: y[cols, rows] = fp8(xᵀ * *scale), for the TN operands
/// of backward GEMMs (transpose and cast in one pass, through shared-memory tiles).
void quantizeTransposedWithAmax(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *scale,
                                uint8_t *y, float *amax, Fp8Format format, void *stream,
                                unsigned long long *counts = nullptr);
/// The same for the transposed quantize: current scaling and quantizeTransposedWithAmax in one launch.
void quantizeTransposedCurrentScaled(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *amax,
                                     float fp8Max, bool pow2, float epsilon, float *scale, float *scaleInv, uint8_t *y,
                                     Fp8Format format, void *stream, unsigned long long *counts = nullptr);
/// tec.cast_fp8_dbias over x [rows, cols]: y = fp8(x * *scale), *amax (it must start at 0) and dbias[c] the
/// sum of column c, in f64: a pass over row chunks writing `partials` (biasGradChunks(rows) x cols
/// doubles), then one summing them in chunk order (deterministic).
inline constexpr int64_t kBiasGradRows = 64;
inline int64_t biasGradChunks(int64_t rows) { return (rows + kBiasGradRows - 1) / kBiasGradRows; }
void quantizeWithBiasGrad(const void *x, ElementType xType, int64_t rows, int64_t cols, const float *scale, uint8_t *y,
                          float *amax, float *dbias, double *partials, Fp8Format format, void *stream,
                          unsigned long long *counts = nullptr);
void dequantize(const uint8_t *x, const float *scaleInv, float *y, int64_t n, Fp8Format format, void *stream);
/// Block-scaled quantize (kernels/cpu/CpuKernels.h's quantizeBlocks, bit for bit): one thread block per scaling
/// block, its amax reduced in shared memory, its scale from support/Fp8.h's blockScales. x is f32, bf16 or
/// f16; a [rows, cols] result, read from a [cols, rows] x where `transposed`.
void quantizeBlocks(const void *x, ElementType xType, uint8_t *y, float *scaleInv, int64_t rows, int64_t cols,
                    int64_t blockRows, int64_t blockCols, bool transposed, Fp8Format format, BlockScale kind,
                    float epsilon, void *stream);
/// y[m, n] = act(x · w + bias) of block-scaled FP8 operands (Transformer Engine's Float8BlockScaling and
/// MXFP8 GEMMs): x [m, k] and w [k, n] (or [n, k] where transposeB) each with one scale_inv per block of
/// its own [rows, cols]. Each output is the fused multiply-adds of its widened products in ascending k, then
/// the bias, then the activation: kernels/cpu's blockScaledGemm, bit for bit. A null bias.data adds none.
void fp8BlockGemm(const uint8_t *x, const float *xScaleInv, int64_t xBlockRows, int64_t xBlockCols, Fp8Format xFormat,
                  const uint8_t *w, const float *wScaleInv, int64_t wBlockRows, int64_t wBlockCols, Fp8Format wFormat,
                  bool transposeB, ConstRef bias, Ref y, int64_t m, int64_t n, int64_t k, Epilogue epilogue,
                  void *stream);
/// quantize_blocks' scale_inv of an operand stored [rows, K] (`kBlocks` blocks along K; rows: the 128-row
/// bands under Block128x128), row-major, moved into the layout cuBLASLt reads (cublasScaleIndex), its
/// padding zeroed: cublasScaleCount floats at `out`.
void toCublasBlockScales(const float *scaleInv, float *out, GemmScaling scaling, int64_t rows, int64_t kBlocks,
                         void *stream);
/// Transformer Engine's current scaling: scale and scale_inv from this step's amax (support/Fp8.h's
/// scaleFromAmax), one thread.
void currentScaling(const float *amax, float fp8Max, bool pow2, float epsilon, float *scale, float *scaleInv,
                    void *stream);
/// Transformer Engine's delayed scaling on device state (see kernels/cpu/CpuKernels.h). Histories up to
/// kMaxHistory slots; false (nothing launched) for a longer one.
inline constexpr int64_t kMaxHistory = 4096;
bool delayedScaling(const float *history, int64_t length, const float *scale, const float *amax, float fp8Max,
                    int64_t margin, bool mostRecent, float *newHistory, float *newScale, float *newScaleInv,
                    void *stream);

} // namespace tec::kernels::cuda

#endif
