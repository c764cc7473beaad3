// CUDA kernels: the GPU twins of kernels/cpu (elementwise, normalization, reductions, data movement,
// training scalars), on the per-element math of support. Device pointers throughout; `stream`
// is a cudaStream_t. Launches only: nothing allocates or synchronizes, so a whole step can be captured
// into a CUDA Graph. Where an input can be invalid (a label or index out of range) the kernel sets
// `*error` (a device int) and the caller reports it after the step.
#ifndef TEC_KERNELS_CUDA_KERNELS_H
#define TEC_KERNELS_CUDA_KERNELS_H

#include "support/Activations.h"
#include "support/Attention.h"
#include "support/Ops.h"
#include "support/Window.h"
#include "kernels/cuda/LaunchShapes.h"

#include <cstdint>
#include <vector>

namespace tec::kernels::cuda {

/// A float-typed operand (f32, f16 or bf16; kernels compute in f32).
struct Ref {
  void *data = nullptr;
  ElementType type = ElementType::F32;
};
struct ConstRef {
  const void *data = nullptr;
  ElementType type = ElementType::F32;
  ConstRef() = default;
  TEC_HOST_DEVICE ConstRef(const void *data, ElementType type) : data(data), type(type) {}
  TEC_HOST_DEVICE ConstRef(Ref r) : data(r.data), type(r.type) {}
};

/// out = a (op) b over `extent`. Float types compute in f32; I32/I64 in their own type.
void binary(BinaryKind kind, const void *a, Strided as, const void *b, Strided bs, void *out, const Extent &extent,
            ElementType type, void *stream);
/// out = a (op) b as bools over `extent`; `type` is the operands' (float types compare in f32).
void compare(CompareKind kind, const void *a, Strided as, const void *b, Strided bs, bool *out, const Extent &extent,
             ElementType type, void *stream);
/// y = op(x); I32/I64 for the isIntUnary kinds, computed in their own type.
void unary(UnaryKind kind, ConstRef x, Ref y, int64_t n, void *stream);
void activationGrad(ActivationGradKind kind, ConstRef dy, ConstRef x, Ref dx, int64_t n, void *stream);
void where(const bool *cond, Strided cs, const void *x, Strided xs, const void *y, Strided ys, void *out,
           const Extent &extent, size_t bytes, void *stream);
void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n, void *stream);
/// dst[d(index)] = src[s(index)] over `extent`, elements of `bytes` bytes: transpose, expand, slice,
/// concat, split and the FP8 transposes of TN GEMM operands are all this.
void stridedCopy(const void *src, Strided s, void *dst, Strided d, const Extent &extent, size_t bytes, void *stream);
/// y[o, j, i] = data[o, indices[j], i]; negative indices count from the end.
void gather(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
            int64_t numIndices, void *y, size_t bytes, int *error, void *stream);
/// Convolutions and their gradients, pools and theirs (a, b: x and weight; dy and weight; dy and x; x; dy
/// and x, as kernels/cpu's functions of the same kinds take them).
void window(WindowKind kind, const Window &w, ConstRef a, ConstRef b, ConstRef bias, Ref out, bool countIncludePad,
            void *stream);
/// ArgMax (max) or ArgMin along the middle dim of [outer, dim, inner] into int64 [outer, inner].
void argReduce(bool max, bool last, const void *x, ElementType type, int64_t outer, int64_t dim, int64_t inner,
               int64_t *y, void *stream);
/// The running sum along the middle dim of [outer, dim, inner] (tec.cumsum), x and y of one type.
void cumSum(const void *x, void *y, ElementType type, int64_t outer, int64_t dim, int64_t inner, bool exclusive,
            bool reverse, void *stream);
/// GatherElements over data [outer, axisDim, inner] with indices [outer, picks, inner].
void gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                    bool indices64, int64_t picks, void *y, size_t bytes, int *error, void *stream);
/// The gradient of gather (elements false: `picks` indices shared by all rows) and gather_elements (one
/// index per update), deterministic (see kernels/cpu's scatterAdd).
void scatterAdd(ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
                int64_t picks, bool elements, Ref y, void *stream);
void oneHot(const void *labels, bool labels64, int64_t n, int64_t depth, float *y, int *error, void *stream);

void softmax(ConstRef x, Ref y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax, void *stream);
/// Dynamic shared memory one attention block needs: the kernels refuse none, the backend checks the
/// device limit (kMaxAttentionSharedBytes) before it launches.
size_t attentionSharedBytes(const AttentionShape &shape, bool grad);
inline constexpr size_t kMaxAttentionSharedBytes = 48 * 1024;
/// tec's own attention (support/Attention.h): one block per query row walking the keys with an
/// online softmax, as the CPU kernel does; lse [batch, heads, queries]. The fallback where cuDNN has none.
void attention(const AttentionShape &shape, ConstRef q, ConstRef k, ConstRef v, ConstRef mask, Ref out, float *lse,
               void *stream);
/// Its backward: dq and delta = dout . out per query row, then dk and dv per key row; `delta` is f32
/// scratch of lse's size.
void attentionGrad(const AttentionShape &shape, ConstRef dout, ConstRef q, ConstRef k, ConstRef v, ConstRef out,
                   const float *lse, ConstRef mask, Ref dq, Ref dk, Ref dv, float *delta, void *stream);
/// FP8 attention's scales and amaxes: device pointers to f32 scalars, in tec.attention_fp8's (6 scales,
/// 2 amaxes) or tec.attention_fp8_grad's order (12, 4; see support/Attention.h). The amaxes must
/// start at 0 (grid-wide maxima, as quantizeWithAmax's). All null: 16/32-bit attention.
struct AttentionFp8Args {
  const float *scales[12] = {};
  float *amaxes[4] = {};
  Fp8Format grads = Fp8Format::E5M2;
};
/// tec's FP8 attention, the CPU kernel's numerics (q, k, v E4M3 codes; out written as E4M3 codes).
void attentionFp8(const AttentionShape &shape, const AttentionFp8Args &fp8, ConstRef q, ConstRef k, ConstRef v,
                  ConstRef mask, Ref out, float *lse, void *stream);
void attentionFp8Grad(const AttentionShape &shape, const AttentionFp8Args &fp8, ConstRef dout, ConstRef q, ConstRef k,
                      ConstRef v, ConstRef out, const float *lse, ConstRef mask, Ref dq, Ref dk, Ref dv, float *delta,
                      void *stream);
/// mean and rstd (one per row) may have null data; without `center`, RMSNorm (see kernels/cpu's layerNorm).
void layerNorm(ConstRef x, ConstRef scale, ConstRef bias, Ref y, Ref mean, Ref rstd, int64_t rows, int64_t cols,
               float epsilon, bool center, void *stream);
/// Sums (or averages) x over `reduced` for each index of `kept`; `type` is x's (float or I32/I64), `outType`
/// y's: the same, or f32 for a 16-bit float x (the sums are f32 or wider inside).
/// Launched as planReduction(..., multiprocessors) says; `partials` holds its plan's partial sums (8 bytes
/// each; may be null when the plan has none).
void reduce(ReduceKind kind, const void *x, Extent kept, Strided keptStrides, Extent reduced, Strided reducedStrides,
            void *y, ElementType type, ElementType outType, void *partials, int multiprocessors, void *stream);
/// y[r, c] = epilogue(y[r, c] + bias[c]): the bias and activation where a GEMM could not fuse them.
void biasActivation(Ref y, ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue, void *stream);
/// max |x| into *out (NaN wins), for an x that is not quantized in the same pass.
void amax(ConstRef x, int64_t n, float *out, void *stream);

// Training scalars, one thread each: the same functions the CPU backend calls.
/// *flag = 1, then every call clears it on a non-finite value of x.
void setFlag(uint8_t *flag, void *stream);
/// *out = value.
void setScalar(float *out, float value, void *stream);
void clearIfNotFinite(ConstRef x, int64_t n, uint8_t *flag, void *stream);
void clipCoefficient(const float *norm, float maxNorm, float *out, void *stream);
void lossScaleUpdate(const float *scale, const float *clean, const uint8_t *finite, float interval, float growth,
                     float backoff, float *nextScale, float *nextClean, void *stream);
void learningRate(int schedule, const float *lr, const float *step, float warmup, float total, float *out, void *stream);

/// One parameter of a fused optimizer launch (tec.optimizer_update): null moments where the optimizer
/// keeps fewer; outputs may alias inputs.
struct OptimizerTensor {
  const float *p = nullptr, *g = nullptr, *m = nullptr, *v = nullptr;
  float *newP = nullptr, *newM = nullptr, *newV = nullptr;
  int64_t n = 0;
};
/// Every parameter's update in as few launches as kernel parameters allow (kOptimizerTensorsPerLaunch
/// each); lr, step, clip (may be null: 1) and finite (may be null: true) are device scalars.
inline constexpr int kOptimizerTensorsPerLaunch = 24;
void optimizerUpdate(const OptimizerParams &params, const float *lr, const float *step, const float *clip,
                     const uint8_t *finite, const std::vector<OptimizerTensor> &tensors, void *stream);

} // namespace tec::kernels::cuda

#endif
