#include "runtime/cuda/Launcher.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace tec::cuda {

Launcher::Launcher(void *stream, const std::vector<std::shared_ptr<kc::Gemm>> &gemms,
                   const std::vector<std::shared_ptr<kc::Convolution>> &convolutions,
                   const std::vector<std::shared_ptr<kc::CudnnAttention>> &attentions, void *workspace)
    : stream(stream), gemms(&gemms), convolutions(&convolutions), attentions(&attentions), workspace(workspace) {}

Launcher::Launcher(const char *base, std::vector<std::string> &lines) : base(base), lines(&lines) {}

void Launcher::memset(void *p, int value, size_t bytes) {
  if (lines)
    call("CHECK_CUDA(cudaMemsetAsync", {text(static_cast<const void *>(p)), text(value), text(bytes), "stream)"});
  else
    cudaMemsetAsync(p, value, bytes, static_cast<cudaStream_t>(stream));
}

void Launcher::copy(void *dst, const void *src, size_t bytes) {
  if (lines)
    call("CHECK_CUDA(cudaMemcpyAsync", {text(static_cast<const void *>(dst)), text(src), text(bytes),
                                        "cudaMemcpyDeviceToDevice", "stream)"});
  else
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
}

bool Launcher::gemm(int gemm, const kc::GemmOperands &o, std::string &error) {
  if (!lines)
    return (*gemms)[gemm]->run(o, workspace, stream, error);
  lines->push_back("  runGemm(*gemms[" + std::to_string(gemm) + "], {" + text(o.a) + ", " + text(o.b) + ", " +
                   text(o.d) + ", " + text(o.bias) + ", " + text(o.aScaleInv) + ", " + text(o.bScaleInv) + ", " +
                   text(o.amaxD) + ", " + text(o.aux) + ", " + text(o.biasGrad) + "});");
  return true;
}

void Launcher::setCollectives(kc::NcclComm *ncclComm, void *ncclStream, void *const *collectiveEvents) {
  comm = ncclComm, commStream = ncclStream, events = collectiveEvents;
}

void Launcher::record(int event, bool onComm) {
  if (lines)
    call("CHECK_CUDA(cudaEventRecord", {"events[" + text(event) + "]", onComm ? "commStream)" : "stream)"});
  else
    cudaEventRecord(static_cast<cudaEvent_t>(events[event]), static_cast<cudaStream_t>(onComm ? commStream : stream));
}

void Launcher::await(int event, bool onComm) {
  if (lines)
    call("CHECK_CUDA(cudaStreamWaitEvent", {onComm ? "commStream" : "stream", "events[" + text(event) + "]", "0)"});
  else
    cudaStreamWaitEvent(static_cast<cudaStream_t>(onComm ? commStream : stream),
                        static_cast<cudaEvent_t>(events[event]), 0);
}

bool Launcher::allReduce(const std::vector<std::pair<float *, int64_t>> &tensors, kc::NcclReduction reduction,
                         std::string &error) {
  if (!lines)
    return comm->allReduce(tensors, reduction, commStream, error);
  static const char *const ops[] = {"ncclSum", "ncclMax", "ncclAvg"};
  call("CHECK_NCCL(ncclGroupStart", {")"});
  for (const auto &[data, count] : tensors)
    if (count > 0)
      call("CHECK_NCCL(ncclAllReduce", {text(data), text(data), text(count), "ncclFloat",
                                        ops[static_cast<int>(reduction)], "comm", "commStream)"});
  call("CHECK_NCCL(ncclGroupEnd", {")"});
  return true;
}

/// Written source runs convolutions and attention on tec's kernels (it has no cuDNN handle): never called.
bool Launcher::convolution(int conv, const void *a, const void *b, void *out, void *convWorkspace,
                           std::string &error) {
  if (!lines)
    return (*convolutions)[conv]->run(a, b, out, convWorkspace, error);
  error = "--emit=cuda programs run convolutions on tec's kernels";
  return false;
}

bool Launcher::cudnnAttention(int index, const kc::AttentionOperands &operands, void *attentionWorkspace,
                              std::string &error) {
  if (!lines)
    return (*attentions)[index]->run(operands, attentionWorkspace, error);
  error = "--emit=cuda programs run attention on tec's kernels";
  return false;
}

// ---- source rendering -------------------------------------------------------------------------------------

namespace {

template <typename E, size_t N> std::string enumerator(const char *type, const char *(&names)[N], E v) {
  return std::string(type) + "::" + names[static_cast<int>(v)];
}

std::string list(const int64_t *v, int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

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

} // namespace

std::string Launcher::text(const void *p) const {
  return p ? "P(" + std::to_string(static_cast<const char *>(p) - base) + ")" : "nullptr";
}
std::string Launcher::text(bool v) { return v ? "true" : "false"; }
std::string Launcher::text(int v) { return std::to_string(v); }
std::string Launcher::text(int64_t v) { return std::to_string(v); }
std::string Launcher::text(size_t v) { return std::to_string(v); }
std::string Launcher::text(float v) { return floatLiteral(v); }
std::string Launcher::text(ElementType t) { return std::string("ElementType::") + name(t); }
std::string Launcher::text(Fp8Format f) { return f == Fp8Format::E4M3 ? "Fp8Format::E4M3" : "Fp8Format::E5M2"; }
std::string Launcher::text(kernels::BlockScale s) {
  return s == kernels::BlockScale::E8M0 ? "BlockScale::E8M0" : s == kernels::BlockScale::Pow2 ? "BlockScale::Pow2" : "BlockScale::F32";
}
std::string Launcher::text(kc::GemmScaling s) {
  return s == kc::GemmScaling::Vec128 ? "kc::GemmScaling::Vec128" : s == kc::GemmScaling::Block128x128 ? "kc::GemmScaling::Block128x128" : "kc::GemmScaling::Tensor";
}
std::string Launcher::text(UnaryKind k) { return std::string("UnaryKind::") + kernels::unaryKindName(k); }

std::string Launcher::text(BinaryKind k) {
  static const char *kinds[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "FMod", "SwiGlu"};
  return enumerator("BinaryKind", kinds, k);
}

std::string Launcher::text(CompareKind k) {
  static const char *kinds[] = {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "And", "Or", "Xor"};
  return enumerator("CompareKind", kinds, k);
}

std::string Launcher::text(ActivationGradKind k) {
  static const char *kinds[] = {"Relu", "Gelu", "GeluTanh"};
  return enumerator("ActivationGradKind", kinds, k);
}

std::string Launcher::text(ReduceKind k) {
  static const char *kinds[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  return enumerator("ReduceKind", kinds, k);
}

std::string Launcher::text(WindowKind k) {
  static const char *kinds[] = {"Conv", "ConvInputGrad", "ConvWeightGrad", "MaxPool", "AvgPool", "MaxPoolGrad",
                                "AvgPoolGrad"};
  return enumerator("WindowKind", kinds, k);
}

std::string Launcher::text(Epilogue e) {
  static const char *kinds[] = {"None", "Relu", "Gelu", "GeluTanh", "Silu", "HardSwish"};
  return enumerator("Epilogue", kinds, e);
}

std::string Launcher::text(const kc::Extent &e) { return "extent(" + list(e.dims, e.rank) + ")"; }

/// Strides past the last nonzero one are zeros the generated helper fills in itself.
std::string Launcher::text(const kc::Strided &s) {
  int rank = kc::kMaxRank;
  while (rank > 0 && s.strides[rank - 1] == 0)
    --rank;
  return "strided(" + std::to_string(s.base) + ", " + list(s.strides, rank) + ")";
}

std::string Launcher::text(const Window &w) {
  const int64_t fields[] = {w.batch,    w.channels, w.height,  w.width,     w.outChannels, w.outHeight,
                            w.outWidth, w.kernelH,  w.kernelW, w.strideH,   w.strideW,     w.padTop,
                            w.padLeft,  w.padBottom, w.padRight, w.dilationH, w.dilationW, w.groups};
  return "Window" + list(fields, 18);
}

std::string Launcher::text(const kernels::AttentionShape &a) {
  static const char *masks[] = {"None", "Additive", "Boolean"};
  std::string fields;
  for (int64_t d : {a.batch, a.heads, a.kvHeads, a.queries, a.keys, a.headDim, a.valueDim})
    fields += std::to_string(d) + ", ";
  return "AttentionShape{" + fields + floatLiteral(a.scale) + ", " + text(a.causal) + ", " +
         enumerator("AttentionMask", masks, a.mask) + ", " + list(a.maskStrides, 4) + "}";
}

std::string Launcher::text(const kernels::OptimizerParams &o) {
  return "OptimizerParams{" + text(o.adamw) + ", " + floatLiteral(o.beta1) + ", " + floatLiteral(o.beta2) + ", " +
         floatLiteral(o.eps) + ", " + floatLiteral(o.weightDecay) + ", " + floatLiteral(o.momentum) + ", " +
         text(o.nesterov) + "}";
}

std::string Launcher::text(kc::ConstRef r) const {
  return r.data ? "{" + text(r.data) + ", " + text(r.type) + "}" : "{}";
}

std::string Launcher::text(const kc::AttentionFp8Args &a) const {
  std::string scales, amaxes;
  for (const float *s : a.scales)
    scales += (scales.empty() ? "" : ", ") + text(s);
  for (float *m : a.amaxes)
    amaxes += (amaxes.empty() ? "" : ", ") + text(m);
  return "kc::AttentionFp8Args{{" + scales + "}, {" + amaxes + "}, " + text(a.grads) + "}";
}

std::string Launcher::text(const std::vector<kc::OptimizerTensor> &tensors) const {
  std::string list = "{";
  for (const auto &t : tensors)
    list += std::string(list.size() > 1 ? ",\n      " : "") + "{" + text(t.p) + ", " + text(t.g) + ", " + text(t.m) +
            ", " + text(t.v) + ", " + text(t.newP) + ", " + text(t.newM) + ", " + text(t.newV) + ", " + text(t.n) + "}";
  return list + "}";
}

void Launcher::call(const std::string &function, const std::vector<std::string> &args) {
  std::string line = "  " + function + "(";
  for (size_t i = 0; i < args.size(); ++i)
    line += (i ? ", " : "") + args[i];
  lines->push_back(line + ");");
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
