// What a CUDA step closure can enqueue. Two implementations: DeviceLauncher enqueues on a stream, and
// SourceWriter (--emit=cuda) writes the same calls as C++ source, so that the generated program is the
// backend's own launch sequence, not a second rendering of the plan that could drift from it.
#ifndef TEC_RUNTIME_CUDA_LAUNCHER_H
#define TEC_RUNTIME_CUDA_LAUNCHER_H

#include "kernels/cuda/Cudnn.h"
#include "kernels/cuda/CudnnAttention.h"
#include "kernels/cuda/Fp8Kernels.h"
#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/Kernels.h"

#include <memory>
#include <string>
#include <vector>

namespace tec::cuda {

namespace kc = kernels::cuda;
using kernels::ActivationGradKind;
using kernels::BinaryKind;
using kernels::CompareKind;
using kernels::ElementType;
using kernels::Epilogue;
using kernels::Fp8Format;
using kernels::ReduceKind;
using kernels::UnaryKind;
using kernels::Window;
using kernels::WindowKind;

class Launcher {
public:
  virtual ~Launcher() = default;
  virtual void binary(BinaryKind kind, const void *a, kc::Strided as, const void *b, kc::Strided bs, void *out,
                      const kc::Extent &extent, ElementType type) = 0;
  virtual void compare(CompareKind kind, const void *a, kc::Strided as, const void *b, kc::Strided bs, bool *out,
                       const kc::Extent &extent, ElementType type) = 0;
  virtual void unary(UnaryKind kind, kc::ConstRef x, kc::Ref y, int64_t n) = 0;
  virtual void activationGrad(ActivationGradKind kind, kc::ConstRef dy, kc::ConstRef x, kc::Ref dx, int64_t n) = 0;
  virtual void where(const bool *cond, kc::Strided cs, const void *x, kc::Strided xs, const void *y, kc::Strided ys,
                     void *out, const kc::Extent &extent, size_t bytes) = 0;
  virtual void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n) = 0;
  virtual void stridedCopy(const void *src, kc::Strided s, void *dst, kc::Strided d, const kc::Extent &extent,
                           size_t bytes) = 0;
  virtual void gather(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                      bool indices64, int64_t numIndices, void *y, size_t bytes, int *error) = 0;
  virtual void argReduce(bool max, bool last, const void *x, ElementType type, int64_t outer, int64_t dim,
                         int64_t inner, int64_t *y) = 0;
  virtual void cumSum(const void *x, void *y, ElementType type, int64_t outer, int64_t dim, int64_t inner,
                      bool exclusive, bool reverse) = 0;
  virtual void window(WindowKind kind, const Window &w, kc::ConstRef a, kc::ConstRef b, kc::ConstRef bias, kc::Ref out,
                      bool countIncludePad) = 0;
  virtual void gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                              bool indices64, int64_t picks, void *y, size_t bytes, int *error) = 0;
  virtual void scatterAdd(kc::ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                          bool indices64, int64_t picks, bool elements, kc::Ref y) = 0;
  virtual void oneHot(const void *labels, bool labels64, int64_t n, int64_t depth, float *y, int *error) = 0;
  virtual void softmax(kc::ConstRef x, kc::Ref y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax) = 0;
  virtual void layerNorm(kc::ConstRef x, kc::ConstRef scale, kc::ConstRef bias, kc::Ref y, kc::Ref mean, kc::Ref rstd,
                         int64_t rows, int64_t cols, float epsilon, bool center) = 0;
  virtual void attention(const kernels::AttentionShape &shape, kc::ConstRef q, kc::ConstRef k, kc::ConstRef v,
                         kc::ConstRef mask, kc::Ref out, float *lse) = 0;
  virtual void attentionGrad(const kernels::AttentionShape &shape, kc::ConstRef dout, kc::ConstRef q, kc::ConstRef k,
                             kc::ConstRef v, kc::ConstRef out, const float *lse, kc::ConstRef mask, kc::Ref dq,
                             kc::Ref dk, kc::Ref dv, float *delta) = 0;
  virtual void attentionFp8(const kernels::AttentionShape &shape, const kc::AttentionFp8Args &fp8, kc::ConstRef q,
                            kc::ConstRef k, kc::ConstRef v, kc::ConstRef mask, kc::Ref out, float *lse) = 0;
  virtual void attentionFp8Grad(const kernels::AttentionShape &shape, const kc::AttentionFp8Args &fp8, kc::ConstRef dout,
                                kc::ConstRef q, kc::ConstRef k, kc::ConstRef v, kc::ConstRef out, const float *lse,
                                kc::ConstRef mask, kc::Ref dq, kc::Ref dk, kc::Ref dv, float *delta) = 0;
  virtual void reduce(ReduceKind kind, const void *x, const kc::Extent &kept, kc::Strided keptStrides,
                      const kc::Extent &reduced, kc::Strided reducedStrides, void *y, ElementType type,
                      ElementType outType, void *partials, int multiprocessors) = 0;
  virtual void biasActivation(kc::Ref y, kc::ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue) = 0;
  virtual void amax(kc::ConstRef x, int64_t n, float *out) = 0;
  virtual void setFlag(uint8_t *flag) = 0;
  virtual void clearIfNotFinite(kc::ConstRef x, int64_t n, uint8_t *flag) = 0;
  virtual void clipCoefficient(const float *norm, float maxNorm, float *out) = 0;
  virtual void lossScaleUpdate(const float *scale, const float *clean, const uint8_t *finite, float interval,
                               float growth, float backoff, float *nextScale, float *nextClean) = 0;
  virtual void learningRate(int schedule, const float *lr, const float *step, float warmup, float total, float *out) = 0;
  virtual void quantize(kc::ConstRef x, const float *scale, uint8_t *y, float *amax, int64_t n, Fp8Format format,
                        unsigned long long *counts) = 0;
  virtual void quantizeTransposed(kc::ConstRef x, int64_t rows, int64_t cols, const float *scale, uint8_t *y,
                                  float *amax, Fp8Format format, unsigned long long *counts) = 0;
  virtual void castFp8(kc::ConstRef x, Epilogue activation, const float *scale, uint8_t *y, float *amax, int64_t n,
                       Fp8Format format, unsigned long long *counts) = 0;
  virtual void castFp8BiasGrad(kc::ConstRef x, int64_t rows, int64_t cols, const float *scale, uint8_t *y, float *amax,
                               float *dbias, double *partials, Fp8Format format, unsigned long long *counts) = 0;
  virtual void layerNormFp8(kc::ConstRef x, kc::ConstRef weight, kc::ConstRef bias, const float *scale, uint8_t *y,
                            float *amax, float *mean, float *rstd, int64_t rows, int64_t cols, float epsilon,
                            Fp8Format format, unsigned long long *counts) = 0;
  virtual void dequantize(const uint8_t *x, const float *scaleInv, float *y, int64_t n, Fp8Format format) = 0;
  virtual void delayedScaling(const float *history, int64_t length, const float *scale, const float *amax,
                              float fp8Max, int64_t margin, bool mostRecent, float *newHistory, float *newScale,
                              float *newScaleInv) = 0;
  virtual void optimizerUpdate(const kernels::OptimizerParams &params, const float *lr, const float *step,
                               const float *clip, const uint8_t *finite,
                               const std::vector<kc::OptimizerTensor> &tensors) = 0;
  virtual void memset(void *p, int value, size_t bytes) = 0;
  virtual void copy(void *dst, const void *src, size_t bytes) = 0;
  /// GEMM number `gemm` of the backend's table; false with `error` when every algorithm failed.
  virtual bool gemm(int gemm, const kc::GemmOperands &operands, std::string &error) = 0;
  /// Convolution number `conv` of the backend's cuDNN table (see kc::Convolution::run for a, b, out);
  /// false with `error` when cuDNN fails.
  virtual bool convolution(int conv, const void *a, const void *b, void *out, void *workspace, std::string &error) = 0;
  /// Attention number `index` of the backend's cuDNN table; false with `error` when cuDNN fails.
  virtual bool cudnnAttention(int index, const kc::AttentionOperands &operands, void *workspace,
                              std::string &error) = 0;
};

/// Enqueues on `stream`; GEMMs run from `gemms` with the cuBLASLt workspace at `workspace`, convolutions
/// from `convolutions` (on the cuDNN handle's stream, the same one).
std::unique_ptr<Launcher> deviceLauncher(void *stream, const std::vector<std::shared_ptr<kc::Gemm>> &gemms,
                                         const std::vector<std::shared_ptr<kc::Convolution>> &convolutions,
                                         const std::vector<std::shared_ptr<kc::CudnnAttention>> &attentions,
                                         void *workspace);

/// Writes each call as a line of C++ (pointers as P(arena offset), relative to `base`) into `lines`.
std::unique_ptr<Launcher> sourceWriter(const char *base, std::vector<std::string> &lines);
/// A GemmSpec as a C++ initializer (for the generated program's setup).
std::string gemmSpecSource(const kc::GemmSpec &spec);

} // namespace tec::cuda

#endif
