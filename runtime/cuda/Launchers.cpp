#include "runtime/cuda/Launcher.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace tec::cuda {

namespace {

class DeviceLauncher final : public Launcher {
public:
  DeviceLauncher(void *stream, const std::vector<std::shared_ptr<kc::Gemm>> &gemms,
                 const std::vector<std::shared_ptr<kc::Convolution>> &convolutions,
                 const std::vector<std::shared_ptr<kc::CudnnAttention>> &attentions, void *workspace)
      : stream(stream), gemms(gemms), convolutions(convolutions), attentions(attentions), workspace(workspace) {}
  void binary(BinaryKind kind, const void *a, kc::Strided as, const void *b, kc::Strided bs, void *out,
              const kc::Extent &extent, ElementType type) override {
    kc::binary(kind, a, as, b, bs, out, extent, type, stream);
  }
  void compare(CompareKind kind, const void *a, kc::Strided as, const void *b, kc::Strided bs, bool *out,
               const kc::Extent &extent, ElementType type) override {
    kc::compare(kind, a, as, b, bs, out, extent, type, stream);
  }
  void unary(UnaryKind kind, kc::ConstRef x, kc::Ref y, int64_t n) override { kc::unary(kind, x, y, n, stream); }
  void activationGrad(ActivationGradKind kind, kc::ConstRef dy, kc::ConstRef x, kc::Ref dx, int64_t n) override {
    kc::activationGrad(kind, dy, x, dx, n, stream);
  }
  void where(const bool *cond, kc::Strided cs, const void *x, kc::Strided xs, const void *y, kc::Strided ys, void *out,
             const kc::Extent &extent, size_t bytes) override {
    kc::where(cond, cs, x, xs, y, ys, out, extent, bytes, stream);
  }
  void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n) override {
    kc::cast(x, from, y, to, n, stream);
  }
  void stridedCopy(const void *src, kc::Strided s, void *dst, kc::Strided d, const kc::Extent &extent,
                   size_t bytes) override {
    kc::stridedCopy(src, s, dst, d, extent, bytes, stream);
  }
  void gather(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
              int64_t numIndices, void *y, size_t bytes, int *error) override {
    kc::gather(data, outer, axisDim, inner, indices, indices64, numIndices, y, bytes, error, stream);
  }
  void argReduce(bool max, bool last, const void *x, ElementType type, int64_t outer, int64_t dim, int64_t inner,
                 int64_t *y) override {
    kc::argReduce(max, last, x, type, outer, dim, inner, y, stream);
  }
  void cumSum(const void *x, void *y, ElementType type, int64_t outer, int64_t dim, int64_t inner, bool exclusive,
              bool reverse) override {
    kc::cumSum(x, y, type, outer, dim, inner, exclusive, reverse, stream);
  }
  void window(WindowKind kind, const Window &w, kc::ConstRef a, kc::ConstRef b, kc::ConstRef bias, kc::Ref out,
              bool countIncludePad) override {
    kc::window(kind, w, a, b, bias, out, countIncludePad, stream);
  }
  void gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                      bool indices64, int64_t picks, void *y, size_t bytes, int *error) override {
    kc::gatherElements(data, outer, axisDim, inner, indices, indices64, picks, y, bytes, error, stream);
  }
  void scatterAdd(kc::ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                  bool indices64, int64_t picks, bool elements, kc::Ref y) override {
    kc::scatterAdd(updates, outer, axisDim, inner, indices, indices64, picks, elements, y, stream);
  }
  void oneHot(const void *labels, bool labels64, int64_t n, int64_t depth, float *y, int *error) override {
    kc::oneHot(labels, labels64, n, depth, y, error, stream);
  }
  void softmax(kc::ConstRef x, kc::Ref y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax) override {
    kc::softmax(x, y, outer, axis, inner, logSoftmax, stream);
  }
  void layerNorm(kc::ConstRef x, kc::ConstRef scale, kc::ConstRef bias, kc::Ref y, kc::Ref mean, kc::Ref rstd,
                 int64_t rows, int64_t cols, float epsilon, bool center) override {
    kc::layerNorm(x, scale, bias, y, mean, rstd, rows, cols, epsilon, center, stream);
  }
  void attention(const kernels::AttentionShape &shape, kc::ConstRef q, kc::ConstRef k, kc::ConstRef v, kc::ConstRef mask,
                 kc::Ref out, float *lse) override {
    kc::attention(shape, q, k, v, mask, out, lse, stream);
  }
  void attentionGrad(const kernels::AttentionShape &shape, kc::ConstRef dout, kc::ConstRef q, kc::ConstRef k,
                     kc::ConstRef v, kc::ConstRef out, const float *lse, kc::ConstRef mask, kc::Ref dq, kc::Ref dk,
                     kc::Ref dv, float *delta) override {
    kc::attentionGrad(shape, dout, q, k, v, out, lse, mask, dq, dk, dv, delta, stream);
  }
  void attentionFp8(const kernels::AttentionShape &shape, const kc::AttentionFp8Args &fp8, kc::ConstRef q,
                    kc::ConstRef k, kc::ConstRef v, kc::ConstRef mask, kc::Ref out, float *lse) override {
    kc::attentionFp8(shape, fp8, q, k, v, mask, out, lse, stream);
  }
  void attentionFp8Grad(const kernels::AttentionShape &shape, const kc::AttentionFp8Args &fp8, kc::ConstRef dout,
                        kc::ConstRef q, kc::ConstRef k, kc::ConstRef v, kc::ConstRef out, const float *lse,
                        kc::ConstRef mask, kc::Ref dq, kc::Ref dk, kc::Ref dv, float *delta) override {
    kc::attentionFp8Grad(shape, fp8, dout, q, k, v, out, lse, mask, dq, dk, dv, delta, stream);
  }
  void reduce(ReduceKind kind, const void *x, const kc::Extent &kept, kc::Strided keptStrides,
              const kc::Extent &reduced, kc::Strided reducedStrides, void *y, ElementType type, ElementType outType,
              void *partials, int multiprocessors) override {
    kc::reduce(kind, x, kept, keptStrides, reduced, reducedStrides, y, type, outType, partials, multiprocessors,
               stream);
  }
  void biasActivation(kc::Ref y, kc::ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue) override {
    kc::biasActivation(y, bias, rows, cols, epilogue, stream);
  }
  void amax(kc::ConstRef x, int64_t n, float *out) override { kc::amax(x, n, out, stream); }
  void setFlag(uint8_t *flag) override { kc::setFlag(flag, stream); }
  void clearIfNotFinite(kc::ConstRef x, int64_t n, uint8_t *flag) override { kc::clearIfNotFinite(x, n, flag, stream); }
  void clipCoefficient(const float *norm, float maxNorm, float *out) override {
    kc::clipCoefficient(norm, maxNorm, out, stream);
  }
  void lossScaleUpdate(const float *scale, const float *clean, const uint8_t *finite, float interval, float growth,
                       float backoff, float *nextScale, float *nextClean) override {
    kc::lossScaleUpdate(scale, clean, finite, interval, growth, backoff, nextScale, nextClean, stream);
  }
  void learningRate(int schedule, const float *lr, const float *step, float warmup, float total, float *out) override {
    kc::learningRate(schedule, lr, step, warmup, total, out, stream);
  }
  void quantize(kc::ConstRef x, const float *scale, uint8_t *y, float *amax, int64_t n, Fp8Format format,
                unsigned long long *counts) override {
    kc::quantizeWithAmax(x.data, x.type, scale, y, amax, n, format, stream, counts);
  }
  void quantizeTransposed(kc::ConstRef x, int64_t rows, int64_t cols, const float *scale, uint8_t *y, float *amax,
                          Fp8Format format, unsigned long long *counts) override {
    kc::quantizeTransposedWithAmax(x.data, x.type, rows, cols, scale, y, amax, format, stream, counts);
  }
  void castFp8(kc::ConstRef x, Epilogue activation, const float *scale, uint8_t *y, float *amax, int64_t n,
               Fp8Format format, unsigned long long *counts) override {
    kc::quantizeWithAmax(x.data, x.type, scale, y, amax, n, format, stream, counts, activation);
  }
  void castFp8BiasGrad(kc::ConstRef x, int64_t rows, int64_t cols, const float *scale, uint8_t *y, float *amax,
                       float *dbias, double *partials, Fp8Format format, unsigned long long *counts) override {
    kc::quantizeWithBiasGrad(x.data, x.type, rows, cols, scale, y, amax, dbias, partials, format, stream, counts);
  }
  void layerNormFp8(kc::ConstRef x, kc::ConstRef weight, kc::ConstRef bias, const float *scale, uint8_t *y,
                    float *amax, float *mean, float *rstd, int64_t rows, int64_t cols, float epsilon, Fp8Format format,
                    unsigned long long *counts) override {
    kc::layerNormQuantize(x.data, x.type, weight.data, bias.data, weight.type, scale, y, amax, mean, rstd, rows, cols,
                          epsilon, format, stream, counts);
  }
  void dequantize(const uint8_t *x, const float *scaleInv, float *y, int64_t n, Fp8Format format) override {
    kc::dequantize(x, scaleInv, y, n, format, stream);
  }
  void delayedScaling(const float *history, int64_t length, const float *scale, const float *amax, float fp8Max,
                      int64_t margin, bool mostRecent, float *newHistory, float *newScale, float *newScaleInv) override {
    kc::delayedScaling(history, length, scale, amax, fp8Max, margin, mostRecent, newHistory, newScale, newScaleInv,
                       stream);
  }
  void optimizerUpdate(const kernels::OptimizerParams &params, const float *lr, const float *step, const float *clip,
                       const uint8_t *finite, const std::vector<kc::OptimizerTensor> &tensors) override {
    kc::optimizerUpdate(params, lr, step, clip, finite, tensors, stream);
  }
  void memset(void *p, int value, size_t bytes) override {
    cudaMemsetAsync(p, value, bytes, static_cast<cudaStream_t>(stream));
  }
  void copy(void *dst, const void *src, size_t bytes) override {
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
  }
  bool gemm(int gemm, const kc::GemmOperands &operands, std::string &error) override {
    return gemms[gemm]->run(operands, workspace, stream, error);
  }
  bool convolution(int conv, const void *a, const void *b, void *out, void *convWorkspace,
                   std::string &error) override {
    return convolutions[conv]->run(a, b, out, convWorkspace, error);
  }
  bool cudnnAttention(int index, const kc::AttentionOperands &operands, void *attentionWorkspace,
                      std::string &error) override {
    return attentions[index]->run(operands, attentionWorkspace, error);
  }

private:
  void *stream;
  const std::vector<std::shared_ptr<kc::Gemm>> &gemms;
  const std::vector<std::shared_ptr<kc::Convolution>> &convolutions;
  const std::vector<std::shared_ptr<kc::CudnnAttention>> &attentions;
  void *workspace;
};

// ---- source rendering -------------------------------------------------------------------------------------

const char *name(ElementType t) {
  static const char *names[] = {"F32", "F16", "BF16", "I32", "I64", "Bool", "F8E4M3", "F8E5M2"};
  return names[static_cast<int>(t)];
}

std::string floatLiteral(double v) {
  if (std::isnan(v))
    return "NAN";
  if (std::isinf(v))
    return v > 0 ? "INFINITY" : "-INFINITY";
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", v); // 9 significant digits round-trip a float
  std::string literal = text;
  if (literal.find_first_of(".e") == std::string::npos)
    literal += ".0";
  return literal + "f";
}

class SourceWriter final : public Launcher {
public:
  SourceWriter(const char *base, std::vector<std::string> &lines) : base(base), lines(lines) {}

  void binary(BinaryKind kind, const void *a, kc::Strided as, const void *b, kc::Strided bs, void *out,
              const kc::Extent &extent, ElementType type) override {
    static const char *kinds[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "FMod", "SwiGlu"};
    call("kc::binary", {enumValue("BinaryKind", kinds, kind), ptr(a), strided(as, extent), ptr(b), strided(bs, extent),
                        ptr(out), extentText(extent), elementType(type)});
  }
  void compare(CompareKind kind, const void *a, kc::Strided as, const void *b, kc::Strided bs, bool *out,
               const kc::Extent &extent, ElementType type) override {
    static const char *kinds[] = {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "And", "Or",
                                  "Xor"};
    call("kc::compare", {enumValue("CompareKind", kinds, kind), ptr(a), strided(as, extent), ptr(b),
                         strided(bs, extent), "(bool *)" + ptr(out), extentText(extent), elementType(type)});
  }
  void unary(UnaryKind kind, kc::ConstRef x, kc::Ref y, int64_t n) override {
    call("kc::unary", {std::string("UnaryKind::") + kernels::unaryKindName(kind), ref(x), ref(y), num(n)});
  }
  void activationGrad(ActivationGradKind kind, kc::ConstRef dy, kc::ConstRef x, kc::Ref dx, int64_t n) override {
    static const char *kinds[] = {"Relu", "Gelu", "GeluTanh"};
    call("kc::activationGrad", {enumValue("ActivationGradKind", kinds, kind), ref(dy), ref(x), ref(dx), num(n)});
  }
  void where(const bool *cond, kc::Strided cs, const void *x, kc::Strided xs, const void *y, kc::Strided ys, void *out,
             const kc::Extent &extent, size_t bytes) override {
    call("kc::where", {"(const bool *)" + ptr(cond), strided(cs, extent), ptr(x), strided(xs, extent), ptr(y),
                       strided(ys, extent), ptr(out), extentText(extent), num(bytes)});
  }
  void cast(const void *x, ElementType from, void *y, ElementType to, int64_t n) override {
    call("kc::cast", {ptr(x), elementType(from), ptr(y), elementType(to), num(n)});
  }
  void stridedCopy(const void *src, kc::Strided s, void *dst, kc::Strided d, const kc::Extent &extent,
                   size_t bytes) override {
    call("kc::stridedCopy", {ptr(src), strided(s, extent), ptr(dst), strided(d, extent), extentText(extent), num(bytes)});
  }
  void gather(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices, bool indices64,
              int64_t numIndices, void *y, size_t bytes, int *error) override {
    call("kc::gather", {ptr(data), num(outer), num(axisDim), num(inner), ptr(indices), boolean(indices64),
                        num(numIndices), ptr(y), num(bytes), "(int *)" + ptr(error)});
  }
  void argReduce(bool max, bool last, const void *x, ElementType type, int64_t outer, int64_t dim, int64_t inner,
                 int64_t *y) override {
    call("kc::argReduce", {boolean(max), boolean(last), ptr(x), elementType(type), num(outer), num(dim), num(inner),
                           "(int64_t *)" + ptr(y)});
  }
  void cumSum(const void *x, void *y, ElementType type, int64_t outer, int64_t dim, int64_t inner, bool exclusive,
              bool reverse) override {
    call("kc::cumSum", {ptr(x), ptr(y), elementType(type), num(outer), num(dim), num(inner), boolean(exclusive),
                        boolean(reverse)});
  }
  void window(WindowKind kind, const Window &w, kc::ConstRef a, kc::ConstRef b, kc::ConstRef bias, kc::Ref out,
              bool countIncludePad) override {
    static const char *kinds[] = {"Conv", "ConvInputGrad", "ConvWeightGrad", "MaxPool", "AvgPool", "MaxPoolGrad",
                                  "AvgPoolGrad"};
    const int64_t fields[] = {w.batch, w.channels, w.height, w.width, w.outChannels, w.outHeight, w.outWidth,
                              w.kernelH, w.kernelW, w.strideH, w.strideW, w.padTop, w.padLeft, w.padBottom,
                              w.padRight, w.dilationH, w.dilationW, w.groups};
    call("kc::window", {enumValue("WindowKind", kinds, kind), "Window" + list(fields, 18), ref(a), ref(b),
                        ref(bias), ref(out), boolean(countIncludePad)});
  }
  void gatherElements(const void *data, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                      bool indices64, int64_t picks, void *y, size_t bytes, int *error) override {
    call("kc::gatherElements", {ptr(data), num(outer), num(axisDim), num(inner), ptr(indices), boolean(indices64),
                                num(picks), ptr(y), num(bytes), "(int *)" + ptr(error)});
  }
  void scatterAdd(kc::ConstRef updates, int64_t outer, int64_t axisDim, int64_t inner, const void *indices,
                  bool indices64, int64_t picks, bool elements, kc::Ref y) override {
    call("kc::scatterAdd", {ref(updates), num(outer), num(axisDim), num(inner), ptr(indices), boolean(indices64),
                            num(picks), boolean(elements), ref(y)});
  }
  void oneHot(const void *labels, bool labels64, int64_t n, int64_t depth, float *y, int *error) override {
    call("kc::oneHot", {ptr(labels), boolean(labels64), num(n), num(depth), f32(y), "(int *)" + ptr(error)});
  }
  void softmax(kc::ConstRef x, kc::Ref y, int64_t outer, int64_t axis, int64_t inner, bool logSoftmax) override {
    call("kc::softmax", {ref(x), ref(y), num(outer), num(axis), num(inner), boolean(logSoftmax)});
  }
  void layerNorm(kc::ConstRef x, kc::ConstRef scale, kc::ConstRef bias, kc::Ref y, kc::Ref mean, kc::Ref rstd,
                 int64_t rows, int64_t cols, float epsilon, bool center) override {
    call("kc::layerNorm", {ref(x), ref(scale), ref(bias), ref(y), ref(mean), ref(rstd), num(rows), num(cols),
                           floatLiteral(epsilon), boolean(center)});
  }
  void attention(const kernels::AttentionShape &shape, kc::ConstRef q, kc::ConstRef k, kc::ConstRef v, kc::ConstRef mask,
                 kc::Ref out, float *lse) override {
    call("kc::attention", {attentionShape(shape), ref(q), ref(k), ref(v), ref(mask), ref(out), f32(lse)});
  }
  void attentionGrad(const kernels::AttentionShape &shape, kc::ConstRef dout, kc::ConstRef q, kc::ConstRef k,
                     kc::ConstRef v, kc::ConstRef out, const float *lse, kc::ConstRef mask, kc::Ref dq, kc::Ref dk,
                     kc::Ref dv, float *delta) override {
    call("kc::attentionGrad", {attentionShape(shape), ref(dout), ref(q), ref(k), ref(v), ref(out), f32(lse), ref(mask),
                               ref(dq), ref(dk), ref(dv), f32(delta)});
  }
  void attentionFp8(const kernels::AttentionShape &shape, const kc::AttentionFp8Args &a, kc::ConstRef q, kc::ConstRef k,
                    kc::ConstRef v, kc::ConstRef mask, kc::Ref out, float *lse) override {
    call("kc::attentionFp8", {attentionShape(shape), fp8Args(a), ref(q), ref(k), ref(v), ref(mask), ref(out), f32(lse)});
  }
  void attentionFp8Grad(const kernels::AttentionShape &shape, const kc::AttentionFp8Args &a, kc::ConstRef dout,
                        kc::ConstRef q, kc::ConstRef k, kc::ConstRef v, kc::ConstRef out, const float *lse,
                        kc::ConstRef mask, kc::Ref dq, kc::Ref dk, kc::Ref dv, float *delta) override {
    call("kc::attentionFp8Grad", {attentionShape(shape), fp8Args(a), ref(dout), ref(q), ref(k), ref(v), ref(out),
                                  f32(lse), ref(mask), ref(dq), ref(dk), ref(dv), f32(delta)});
  }
  void reduce(ReduceKind kind, const void *x, const kc::Extent &kept, kc::Strided keptStrides,
              const kc::Extent &reduced, kc::Strided reducedStrides, void *y, ElementType type, ElementType outType,
              void *partials, int multiprocessors) override {
    static const char *kinds[] = {"Sum", "Mean", "Max", "Min", "Prod"};
    call("kc::reduce", {enumValue("ReduceKind", kinds, kind), ptr(x), extentText(kept), strided(keptStrides, kept),
                        extentText(reduced), strided(reducedStrides, reduced), ptr(y), elementType(type),
                        elementType(outType), ptr(partials), num(multiprocessors)});
  }
  void biasActivation(kc::Ref y, kc::ConstRef bias, int64_t rows, int64_t cols, Epilogue epilogue) override {
    static const char *kinds[] = {"None", "Relu", "Gelu", "GeluTanh", "Silu", "HardSwish"};
    call("kc::biasActivation", {ref(y), ref(bias), num(rows), num(cols), enumValue("Epilogue", kinds, epilogue)});
  }
  void amax(kc::ConstRef x, int64_t n, float *out) override { call("kc::amax", {ref(x), num(n), f32(out)}); }
  void setFlag(uint8_t *flag) override { call("kc::setFlag", {u8(flag)}); }
  void clearIfNotFinite(kc::ConstRef x, int64_t n, uint8_t *flag) override {
    call("kc::clearIfNotFinite", {ref(x), num(n), u8(flag)});
  }
  void clipCoefficient(const float *norm, float maxNorm, float *out) override {
    call("kc::clipCoefficient", {f32(norm), floatLiteral(maxNorm), f32(out)});
  }
  void lossScaleUpdate(const float *scale, const float *clean, const uint8_t *finite, float interval, float growth,
                       float backoff, float *nextScale, float *nextClean) override {
    call("kc::lossScaleUpdate", {f32(scale), f32(clean), u8(finite), floatLiteral(interval), floatLiteral(growth),
                                 floatLiteral(backoff), f32(nextScale), f32(nextClean)});
  }
  void learningRate(int schedule, const float *lr, const float *step, float warmup, float total, float *out) override {
    call("kc::learningRate", {num(schedule), f32(lr), f32(step), floatLiteral(warmup), floatLiteral(total),
                              f32(out)});
  }
  void quantize(kc::ConstRef x, const float *scale, uint8_t *y, float *amax, int64_t n, Fp8Format format,
                unsigned long long *counts) override {
    call("kc::quantizeWithAmax", {ptr(x.data), elementType(x.type), f32(scale), u8(y), f32(amax), num(n), fp8(format), "stream",
                                  "(unsigned long long *)" + ptr(counts)},
         /*stream=*/false);
  }
  void quantizeTransposed(kc::ConstRef x, int64_t rows, int64_t cols, const float *scale, uint8_t *y, float *amax,
                          Fp8Format format, unsigned long long *counts) override {
    call("kc::quantizeTransposedWithAmax", {ptr(x.data), elementType(x.type), num(rows), num(cols), f32(scale), u8(y), f32(amax), fp8(format),
                                            "stream", "(unsigned long long *)" + ptr(counts)},
         /*stream=*/false);
  }
  void castFp8(kc::ConstRef x, Epilogue activation, const float *scale, uint8_t *y, float *amax, int64_t n,
               Fp8Format format, unsigned long long *counts) override {
    static const char *kinds[] = {"None", "Relu", "Gelu", "GeluTanh", "Silu", "HardSwish"};
    call("kc::quantizeWithAmax", {ptr(x.data), elementType(x.type), f32(scale), u8(y), f32(amax), num(n), fp8(format),
                                  "stream", "(unsigned long long *)" + ptr(counts), enumValue("Epilogue", kinds, activation)},
         /*stream=*/false);
  }
  void castFp8BiasGrad(kc::ConstRef x, int64_t rows, int64_t cols, const float *scale, uint8_t *y, float *amax,
                       float *dbias, double *partials, Fp8Format format, unsigned long long *counts) override {
    call("kc::quantizeWithBiasGrad", {ptr(x.data), elementType(x.type), num(rows), num(cols), f32(scale), u8(y), f32(amax),
                                      f32(dbias), "(double *)" + ptr(partials), fp8(format), "stream",
                                      "(unsigned long long *)" + ptr(counts)},
         /*stream=*/false);
  }
  void layerNormFp8(kc::ConstRef x, kc::ConstRef weight, kc::ConstRef bias, const float *scale, uint8_t *y,
                    float *amax, float *mean, float *rstd, int64_t rows, int64_t cols, float epsilon, Fp8Format format,
                    unsigned long long *counts) override {
    call("kc::layerNormQuantize", {ptr(x.data), elementType(x.type), ptr(weight.data), ptr(bias.data),
                                   elementType(weight.type), f32(scale), u8(y), f32(amax), f32(mean), f32(rstd),
                                   num(rows), num(cols), floatLiteral(epsilon), fp8(format), "stream",
                                   "(unsigned long long *)" + ptr(counts)},
         /*stream=*/false);
  }
  void dequantize(const uint8_t *x, const float *scaleInv, float *y, int64_t n, Fp8Format format) override {
    call("kc::dequantize", {u8(x), f32(scaleInv), f32(y), num(n), fp8(format)});
  }
  void delayedScaling(const float *history, int64_t length, const float *scale, const float *amax, float fp8Max,
                      int64_t margin, bool mostRecent, float *newHistory, float *newScale, float *newScaleInv) override {
    call("kc::delayedScaling", {f32(history), num(length), f32(scale), f32(amax), floatLiteral(fp8Max), num(margin),
                                boolean(mostRecent), f32(newHistory), f32(newScale), f32(newScaleInv)});
  }
  void optimizerUpdate(const kernels::OptimizerParams &o, const float *lr, const float *step, const float *clip,
                       const uint8_t *finite, const std::vector<kc::OptimizerTensor> &tensors) override {
    std::string list = "{";
    for (const auto &t : tensors)
      list += std::string(list.size() > 1 ? ",\n      " : "") + "{" + f32(t.p) + ", " + f32(t.g) + ", " + f32(t.m) +
              ", " + f32(t.v) + ", " + f32(t.newP) + ", " + f32(t.newM) + ", " + f32(t.newV) + ", " + num(t.n) + "}";
    call("kc::optimizerUpdate",
         {"OptimizerParams{" + boolean(o.adamw) + ", " + floatLiteral(o.beta1) + ", " + floatLiteral(o.beta2) + ", " +
              floatLiteral(o.eps) + ", " + floatLiteral(o.weightDecay) + ", " + floatLiteral(o.momentum) + ", " +
              boolean(o.nesterov) + "}",
          f32(lr), f32(step), f32(clip), u8(finite), list + "}"});
  }
  void memset(void *p, int value, size_t bytes) override {
    call("CHECK_CUDA(cudaMemsetAsync", {ptr(p), num(value), num(bytes), "stream)"}, false);
  }
  void copy(void *dst, const void *src, size_t bytes) override {
    call("CHECK_CUDA(cudaMemcpyAsync", {ptr(dst), ptr(src), num(bytes), "cudaMemcpyDeviceToDevice", "stream)"}, false);
  }
  bool gemm(int gemm, const kc::GemmOperands &o, std::string &) override {
    lines.push_back("  runGemm(*gemms[" + std::to_string(gemm) + "], {" + ptr(o.a) + ", " + ptr(o.b) + ", " + ptr(o.d) +
                    ", " + ptr(o.bias) + ", " + f32(o.aScaleInv) + ", " + f32(o.bScaleInv) + ", " + f32(o.amaxD) +
                    ", " + ptr(o.aux) + ", " + ptr(o.biasGrad) + "});");
    return true;
  }
  /// A recording backend has no cuDNN handle, so its convolutions are tec's window kernels: never called.
  bool cudnnAttention(int, const kc::AttentionOperands &, void *, std::string &error) override {
    error = "--emit=cuda programs run attention on tec's kernels";
    return false;
  }
  bool convolution(int, const void *, const void *, void *, void *, std::string &error) override {
    error = "--emit=cuda programs run convolutions on tec's kernels";
    return false;
  }

private:
  std::string ptr(const void *p) const {
    return p ? "P(" + std::to_string(static_cast<const char *>(p) - base) + ")" : "nullptr";
  }
  std::string f32(const void *p) const { return p ? "(float *)" + ptr(p) : "nullptr"; }
  std::string u8(const void *p) const { return p ? "(uint8_t *)" + ptr(p) : "nullptr"; }
  static std::string num(int64_t v) { return std::to_string(v); }
  static std::string boolean(bool v) { return v ? "true" : "false"; }
  static std::string elementType(ElementType t) { return std::string("ElementType::") + name(t); }
  static std::string fp8(Fp8Format f) { return f == Fp8Format::E4M3 ? "Fp8Format::E4M3" : "Fp8Format::E5M2"; }
  template <typename E, size_t N> static std::string enumValue(const char *type, const char *(&names)[N], E v) {
    return std::string(type) + "::" + names[static_cast<int>(v)];
  }
  std::string ref(kc::ConstRef r) const {
    return r.data ? "{" + ptr(r.data) + ", " + elementType(r.type) + "}" : "{}";
  }
  static std::string list(const int64_t *v, int n) {
    std::string s = "{";
    for (int i = 0; i < n; ++i)
      s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "}";
  }
  std::string fp8Args(const kc::AttentionFp8Args &a) const {
    std::string scales, amaxes;
    for (const float *s : a.scales)
      scales += (scales.empty() ? "" : ", ") + f32(s);
    for (float *m : a.amaxes)
      amaxes += (amaxes.empty() ? "" : ", ") + f32(m);
    return "kc::AttentionFp8Args{{" + scales + "}, {" + amaxes + "}, " + fp8(a.grads) + "}";
  }
  static std::string attentionShape(const kernels::AttentionShape &a) {
    static const char *masks[] = {"None", "Additive", "Boolean"};
    std::string fields;
    for (int64_t d : {a.batch, a.heads, a.kvHeads, a.queries, a.keys, a.headDim, a.valueDim})
      fields += num(d) + ", ";
    return "AttentionShape{" + fields + floatLiteral(a.scale) + ", " + boolean(a.causal) + ", " +
           enumValue("AttentionMask", masks, a.mask) + ", " + list(a.maskStrides, 4) + "}";
  }
  static std::string extentText(const kc::Extent &e) { return "extent(" + list(e.dims, e.rank) + ")"; }
  static std::string strided(const kc::Strided &s, const kc::Extent &e) {
    return "strided(" + std::to_string(s.base) + ", " + list(s.strides, e.rank) + ")";
  }
  void call(const std::string &function, const std::vector<std::string> &args, bool stream = true) {
    std::string line = "  " + function + "(";
    for (size_t i = 0; i < args.size(); ++i)
      line += (i ? ", " : "") + args[i];
    lines.push_back(line + (stream ? ", stream);" : ");"));
  }
  const char *base;
  std::vector<std::string> &lines;
};

} // namespace

std::unique_ptr<Launcher> deviceLauncher(void *stream, const std::vector<std::shared_ptr<kc::Gemm>> &gemms,
                                         const std::vector<std::shared_ptr<kc::Convolution>> &convolutions,
                                         const std::vector<std::shared_ptr<kc::CudnnAttention>> &attentions,
                                         void *workspace) {
  return std::make_unique<DeviceLauncher>(stream, gemms, convolutions, attentions, workspace);
}

std::unique_ptr<Launcher> sourceWriter(const char *base, std::vector<std::string> &lines) {
  return std::make_unique<SourceWriter>(base, lines);
}

std::string gemmSpecSource(const kc::GemmSpec &s) {
  static const char *epilogues[] = {"Default", "Bias",        "Relu",  "ReluBias", "Gelu",
                                    "GeluBias", "GeluAux", "GeluAuxBias", "DGelu", "BGradB"}; // enumerator names
  std::ostringstream out;
  out << "gemmSpec(" << s.m << ", " << s.n << ", " << s.k << ", " << (s.transposeA ? "true" : "false") << ", "
      << (s.transposeB ? "true" : "false") << ", ElementType::" << name(s.a) << ", ElementType::" << name(s.b)
      << ", ElementType::" << name(s.d) << ", ElementType::" << name(s.bias)
      << ", kc::GemmEpilogue::" << epilogues[static_cast<int>(s.epilogue)] << ", "
      << (s.fastAccumulation ? "true" : "false") << ", " << floatLiteral(s.alpha) << ", " << floatLiteral(s.beta)
      << ", " << s.batch << ", " << s.batchStrideA << ", " << s.batchStrideB << ", " << s.batchStrideD << ", "
      << s.alignA << ", " << s.alignB << ", " << s.alignD << ")";
  return out.str();
}

} // namespace tec::cuda
