// CPU kernels: GEMMs through BLAS with the epilogue in the same pass over the output, the rest with
// OpenMP. Plain pointers and shapes in, nothing of the compiler or runtime: these are also the CPU
// twins the CUDA kernels are checked against.
#ifndef TEC_KERNELS_CPU_CPUKERNELS_H
#define TEC_KERNELS_CPU_CPUKERNELS_H

#include "support/Activations.h"
#include "support/Attention.h"
#include "support/Fp8.h"
#include "support/Ops.h"
#include "support/Window.h"
#include "kernels/cpu/ThreadPool.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tec::kernels::cpu {

using Shape = std::vector<int64_t>;
class PackedGemm;

int64_t numElements(const Shape &shape);

using kernels::ActivationGradKind;
using kernels::AttentionMask;
using kernels::AttentionFp8Amaxes;
using kernels::AttentionFp8Scales;
using kernels::AttentionShape;
using kernels::BinaryKind;
using kernels::CompareKind;
using kernels::ElementType;
using kernels::OptimizerParams;
using kernels::elementBytes;
using kernels::ReduceKind;
using kernels::UnaryKind;
using kernels::Window;
using kernels::WindowKind;

/// Below this many elements a parallel loop costs more than it saves.
constexpr int64_t kParallelThreshold = 1 << 14;

/// body(i) for i in [0, n) over tec's thread pool (kernels/cpu/ThreadPool.h), in chunks of about
/// kParallelThreshold of the loop's `work` (its total in elements or so): serial below that.
template <typename Body> void parallelLoop(int64_t n, int64_t work, Body &&body) {
  const int64_t grain = work > kParallelThreshold ? std::max<int64_t>(1, n * kParallelThreshold / work) : n;
  parallelFor(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      body(i);
  });
}

/// The thread pool's size, the caller included; 0: the CPUs this process may use (availableCpus()).
void setThreads(int threads);

// Elementwise with numpy broadcasting. T is float, int32_t or int64_t.
template <typename T>
void binary(BinaryKind kind, const T *a, const Shape &aShape, const T *b, const Shape &bShape, T *out,
            const Shape &outShape);

/// A comparison or logical op with a bool result; T is float, int32_t, int64_t or bool.
template <typename T>
void compare(CompareKind kind, const T *a, const Shape &aShape, const T *b, const Shape &bShape, bool *out,
             const Shape &outShape);

void unary(UnaryKind kind, const float *x, float *y, int64_t n);
/// Abs, Neg and Sign of int32_t or int64_t (isIntUnary kinds).
template <typename T> void intUnary(UnaryKind kind, const T *x, T *y, int64_t n);

void activationGrad(ActivationGradKind kind, const float *dy, const float *x, float *dx, int64_t n);

/// One span of binary(), unary() and activationGrad(), on the calling thread, each element computed exactly
/// as those compute it (the fused elementwise chains are built from these): a and b advance by sa and sb
/// elements (0: one value broadcast, 1: contiguous); out may be an input (in place).
void binarySpan(BinaryKind kind, const float *a, int64_t sa, const float *b, int64_t sb, float *out, int64_t n);
void unarySpan(UnaryKind kind, const float *x, float *y, int64_t n);
void activationGradSpan(ActivationGradKind kind, const float *dy, const float *x, float *dx, int64_t n);

/// Where(cond, x, y) with broadcasting, on elements of `bytes` bytes.
void where(const bool *cond, const Shape &condShape, const void *x, const Shape &xShape, const void *y,
           const Shape &yShape, void *out, const Shape &outShape, size_t bytes);

void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n);

/// One-hot rows of `depth` floats for `n` labels; returns false (writing nothing) on a label out of range.
template <typename Index> bool oneHot(const Index *labels, int64_t n, int64_t depth, float *y);

// Normalization and reductions over float.
void softmax(const float *x, float *y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax);
/// Normalizes each of `rows` rows of `cols` values; mean and rstd (one per row) may be null. Without
/// `center` it is RMSNorm: the mean is taken as 0, so rstd is 1 / sqrt(mean(x^2) + epsilon).
void layerNorm(const float *x, const float *scale, const float *bias, float *y, float *mean, float *rstd,
               int64_t rows, int64_t cols, float epsilon, bool center);
template <typename T>
void reduce(ReduceKind kind, const T *x, const Shape &shape, const std::vector<int64_t> &axes, T *y);

// Attention (support/Attention.h), tiled with an online softmax: memory per thread is one block
// of scores, never queries x keys. `mask` is null, f32 (additive) or bool, as the shape says.
/// out and lse [batch, heads, queries] (the softmax's log-normalizer, which the backward pass reuses).
/// With `layout`, q, k, v and out lie where it says (views of other tensors, read and written in place).
struct AttentionLayout {
  /// Per operand, the strides in elements of its batch, head and row dims; a row's elements are contiguous.
  int64_t q[3], k[3], v[3], out[3];
  /// Contiguous [batch, heads, rows, dim] tensors.
  static AttentionLayout contiguous(const AttentionShape &a);
};
void attention(const AttentionShape &shape, const float *q, const float *k, const float *v, const void *mask,
               float *out, float *lse, const AttentionLayout *layout = nullptr);
/// FlashAttention-2's backward: the probabilities recomputed from lse, dq over blocks of queries, then dk
/// and dv over blocks of keys (each written by one task: deterministic, no atomics).
void attentionGrad(const AttentionShape &shape, const float *dout, const float *q, const float *k, const float *v,
                   const float *out, const float *lse, const void *mask, float *dq, float *dk, float *dv);
/// FP8 attention (support/Attention.h's AttentionFp8Scales): q, k, v (and out, dout backward) are
/// the codes' values, unscaled; outputs are written times their scale, for the cast to FP8. The forward
/// quantizes normalized probabilities, so it takes two passes over the keys (logsumexp, then p . v).
AttentionFp8Amaxes attentionFp8(const AttentionShape &shape, const AttentionFp8Scales &scales, const float *q,
                                const float *k, const float *v, const void *mask, float *out, float *lse);
AttentionFp8Amaxes attentionFp8Grad(const AttentionShape &shape, const AttentionFp8Scales &scales, const float *dout,
                                    const float *q, const float *k, const float *v, const float *out, const float *lse,
                                    const void *mask, float *dq, float *dk, float *dv);

// GEMMs (row-major float).
/// numpy matmul with 1-D promotion and batch broadcasting.
void matmul(const float *a, const Shape &aShape, const float *b, const Shape &bShape, float *out,
            const Shape &outShape);
/// ONNX Gemm: y = alpha * op(A) op(B) + beta * C, C broadcast to MxN (may be null).
void gemm(const float *a, const float *b, const float *c, const Shape &cShape, float *y, int64_t m, int64_t n,
          int64_t k, bool transA, bool transB, float alpha, float beta);
/// y[M,N] = epilogue(X · W + bias) + residual, X = x[M,K] or x[K,M]ᵀ, W = weight[K,N] or weight[N,K]ᵀ; bias and
/// residual ([M,N]) may be null. With `out`, the result goes there and y keeps X · W; `out` may be y or the
/// residual itself. The bias, activation and residual add run on each chunk as the GEMM writes it (one pass
/// over memory, in cache). With `packed` (the same weight packed once, x not transposed), the GEMM runs on it.
void linear(const float *x, const float *weight, const float *bias, float *y, int64_t m, int64_t n, int64_t k,
            bool transposeA, bool transposeB, Epilogue epilogue, const float *residual = nullptr,
            float *out = nullptr, const PackedGemm *packed = nullptr);

/// out = epilogue(y) + residual on `rows` rows of `cols` floats, `stride` apart (each pointer at the rows' first
/// element; residual may be null, out may be y or the residual): the epilogue of the part of a convolution's
/// output just written, in cache, with the same per-element functions as the GEMMs' and the unary steps'.
void epilogueRows(Epilogue epilogue, const float *y, const float *residual, float *out, int64_t rows, int64_t cols,
                  int64_t stride);

// Data movement on elements of `bytes` bytes.
void transpose(const void *x, const Shape &inShape, const std::vector<int64_t> &perm, void *y, size_t bytes);
void expand(const void *x, const Shape &inShape, void *y, const Shape &outShape, size_t bytes);
void slice(const void *x, const Shape &inShape, const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, void *y, const Shape &outShape, size_t bytes);
/// Copies `x` (shape `inShape`) into `y` at `offset` along `axis` of `outShape` (concat), or the reverse
/// (split) when `gatherFromOut` is set.
void copyAlongAxis(const void *x, const Shape &inShape, void *y, const Shape &outShape, int64_t axis,
                   int64_t offset, size_t bytes, bool split);
/// Returns false (and writes nothing) when an index is out of range.
template <typename Index>
bool gather(const void *data, const Shape &dataShape, const Index *indices, int64_t numIndices, int64_t axis,
            void *y, size_t bytes);

/// GatherElements over data [outer, axisDim, inner] and indices [outer, picks, inner]: y has the indices'
/// layout. Returns false (and writes nothing) when an index is out of range.
template <typename Index>
bool gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const Index *indices,
                    int64_t picks, void *y, size_t bytes);
/// y [outer, axisDim, inner] = 0, then each update added at its index along the axis, in index order:
/// updates [outer, picks, inner] with `elements` (one index per update, GatherElements' gradient) or with
/// `picks` indices shared by every outer and inner position (Gather's gradient). False on a bad index.
template <typename Index>
bool scatterAdd(const float *updates, int64_t outer, int64_t axisDim, int64_t inner, const Index *indices,
                int64_t picks, bool elements, float *y);

// Convolutions ([N, C, H, W] with weight [M, C / groups, kH, kW]) and pools, over float.
void conv(const Window &w, const float *x, const float *weight, const float *bias, float *y);
/// conv() over x [N, H, W, C] into y [N, OH, OW, M] (tec.conv's channels_last).
void convChannelsLast(const Window &w, const float *x, const float *weight, const float *bias, float *y);
void convInputGrad(const Window &w, const float *dy, const float *weight, float *dx);
void convWeightGrad(const Window &w, const float *dy, const float *x, float *dweight);
/// ArgMax (max) or ArgMin along the middle dim of [outer, dim, inner] into int64 [outer, inner].
template <typename T>
void argReduce(bool max, bool last, const T *x, int64_t outer, int64_t dim, int64_t inner, int64_t *y);
/// The running sum along the middle dim of [outer, dim, inner] (tec.cumsum).
template <typename T>
void cumSum(const T *x, int64_t outer, int64_t dim, int64_t inner, bool exclusive, bool reverse, T *y);
/// Max pooling (padding never wins; NaN propagates) or average pooling.
void pool(const Window &w, bool max, bool countIncludePad, const float *x, float *y);
/// pool() over x [N, H, W, C] into y [N, OH, OW, C] (tec.pool's channels_last), with pool()'s bits.
void poolChannelsLast(const Window &w, bool max, bool countIncludePad, const float *x, float *y);
/// Max pooling's gradient goes to the first maximum of each window; average pooling's is spread evenly.
void poolGrad(const Window &w, bool max, bool countIncludePad, const float *dy, const float *x, float *dx);

/// One parameter's optimizer step over n elements (tec.optimizer_update): m and v may be null where the
/// optimizer keeps fewer moments; outputs may alias their inputs. `finite` false leaves all unchanged.
void optimizerUpdate(const OptimizerParams &params, float lr, float step, float clip, bool finite, const float *p,
                     const float *g, const float *m, const float *v, float *newP, float *newM, float *newV, int64_t n);

// FP8 emulation, bit-exact with the CUDA kernels.
void quantize(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format);
/// The same, also counting the values that saturated (|x * scale| beyond the format's largest finite
/// value) and the nonzero values that flushed to zero: FP8 health.
void quantizeCounting(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format, int64_t &saturated,
                      int64_t &flushed);
void dequantize(const uint8_t *x, float scaleInv, float *y, int64_t n, Fp8Format format);
/// max |x|; the canonical NaN (support/Fp8.h) if any element is NaN.
float amax(const float *x, int64_t n);
/// quantize (quantizeCounting with counts given) and, in the same pass over x, amax(x).
float quantizeWithAmax(const float *x, float scale, uint8_t *y, int64_t n, Fp8Format format,
                       int64_t *saturated = nullptr, int64_t *flushed = nullptr);
/// Block-scaled quantize (Transformer Engine's Float8BlockScaling, MXFP8): a [rows, cols] matrix, read from
/// a [cols, rows] source where `transposed`, in blocks of blockRows x blockCols (partial at the ends), each
/// quantized with its own scale from its own amax (support/Fp8.h's blockScales); scaleInv
/// [ceil(rows / blockRows), ceil(cols / blockCols)] receives each block's dequantization factor.
/// With `saturated` and `flushed`, also counts the values beyond the format's range after scaling and the
/// nonzero ones that became zero (FP8 health).
void quantizeBlocks(const float *x, uint8_t *y, float *scaleInv, int64_t rows, int64_t cols, int64_t blockRows,
                    int64_t blockCols, bool transposed, Fp8Format format, BlockScale kind, float epsilon,
                    int64_t *saturated = nullptr, int64_t *flushed = nullptr);
/// The inverse up to FP8 rounding: each code times its block's dequantization factor.
void dequantizeBlocks(const uint8_t *x, const float *scaleInv, float *y, int64_t rows, int64_t cols,
                      int64_t blockRows, int64_t blockCols, Fp8Format format);
/// A block-scaled FP8 operand: codes [rows, cols] row-major, one scale_inv per block of block[0] x block[1].
struct BlockScaledOperand {
  const uint8_t *codes;
  const float *scaleInv;
  int64_t blockRows, blockCols;
  Fp8Format format;
};
/// The f32 scratch blockScaledGemm needs: both operands widened and packed (x in 8-row tiles, w in 32-column
/// panels, each padded with zeros).
int64_t blockScaledGemmScratch(int64_t m, int64_t n, int64_t k);
/// y[m, n] = act(x · w + bias) of block-scaled FP8 operands, x [m, k] and w [k, n] (or [n, k] where transposeB):
/// each operand widened (the values dequantizeBlocks gives), then each output the fused multiply-adds of its products in
/// ascending k from 0, then the bias, then the activation: the sums of kernels/cuda's fp8BlockGemm, bit for bit,
/// whatever the thread count. `scratch` holds blockScaledGemmScratch floats; a null bias adds none.
void blockScaledGemm(const BlockScaledOperand &x, const BlockScaledOperand &w, bool transposeB, const float *bias,
                     float *y, int64_t m, int64_t n, int64_t k, Epilogue epilogue, float *scratch);
/// Transformer Engine's delayed scaling: reduce the history with this step's `amax` (max or most
/// recent), compute the new scale (keeping `scale` when the amax is 0/inf/NaN), then roll one slot; a
/// step whose amax is 0 leaves the history unrolled (TE's bulk update).
void delayedScaling(const float *history, int64_t length, float scale, float amax, float fp8Max, int64_t margin,
                    bool mostRecent, float *newHistory, float *newScale, float *newScaleInv);

} // namespace tec::kernels::cpu

#endif
