// Reading plan steps, shared by the backends: attributes with defaults, element types, epilogues.
#ifndef TEC_RUNTIME_STEPS_H
#define TEC_RUNTIME_STEPS_H

#include "support/Status.h"
#include "runtime/plan.pb.h"

#include "support/Activations.h"
#include "support/Attention.h"
#include "support/Fp8.h"
#include "support/Ops.h"
#include "support/Window.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tec::steps {

inline kernels::ElementType elementType(plan::DType t) {
  switch (t) {
  case plan::F32: return kernels::ElementType::F32;
  case plan::F16: return kernels::ElementType::F16;
  case plan::BF16: return kernels::ElementType::BF16;
  case plan::I32: return kernels::ElementType::I32;
  case plan::I64: return kernels::ElementType::I64;
  case plan::BOOL: return kernels::ElementType::Bool;
  case plan::F8E4M3FN: return kernels::ElementType::F8E4M3;
  default: return kernels::ElementType::F8E5M2;
  }
}

inline bool isFloat(plan::DType t) { return t == plan::F32 || t == plan::F16 || t == plan::BF16; }

inline kernels::Fp8Format fp8Format(plan::DType t) {
  return t == plan::F8E5M2 ? kernels::Fp8Format::E5M2 : kernels::Fp8Format::E4M3;
}

/// A step attribute by name, or `dflt` where the step has none: read through the typed accessors below.
inline int64_t attrI(const plan::Step &s, const char *name, int64_t dflt = 0) {
  auto it = s.attrs().find(name);
  return it == s.attrs().end() ? dflt : it->second.i();
}
inline double attrF(const plan::Step &s, const char *name, double dflt = 0) {
  auto it = s.attrs().find(name);
  return it == s.attrs().end() ? dflt : it->second.f();
}
inline std::string attrS(const plan::Step &s, const char *name, const char *dflt = "") {
  auto it = s.attrs().find(name);
  return it == s.attrs().end() ? dflt : it->second.s();
}
inline std::vector<int64_t> attrInts(const plan::Step &s, const char *name, std::vector<int64_t> dflt = {}) {
  auto it = s.attrs().find(name);
  if (it == s.attrs().end())
    return dflt;
  return {it->second.ints().values().begin(), it->second.ints().values().end()};
}

/// Typed accessors of the step attributes, one per line of runtime/StepAttrs.def: attrs::axis(step).
namespace attrs {
#define TEC_STEP_ATTR(accessor, Kind, name, dflt)                                                                    \
  inline auto accessor(const plan::Step &s) { return attr##Kind(s, name, dflt); }
#include "runtime/StepAttrs.def"
} // namespace attrs

inline kernels::Epilogue epilogue(const plan::Step &s) {
  const std::string e = attrs::epilogue(s);
  if (e == "relu")
    return kernels::Epilogue::Relu;
  if (e == "gelu")
    return kernels::Epilogue::Gelu;
  if (e == "gelu_tanh")
    return kernels::Epilogue::GeluTanh;
  return kernels::Epilogue::None;
}

inline Status expectArity(const plan::Step &s, int minIn, int maxIn, int outs) {
  if (s.inputs_size() < minIn || s.inputs_size() > maxIn || s.outputs_size() != outs)
    return Status::error("step '" + s.kernel() + "' (from " + s.source() + ") has the wrong number of operands");
  return Status::success();
}

inline kernels::BinaryKind binaryKind(const plan::Step &s) {
  const std::string &k = s.kernel();
  if (k == "sub")
    return kernels::BinaryKind::Sub;
  if (k == "mul")
    return kernels::BinaryKind::Mul;
  if (k == "div")
    return kernels::BinaryKind::Div;
  if (k == "pow")
    return kernels::BinaryKind::Pow;
  if (k == "max")
    return kernels::BinaryKind::Max;
  if (k == "min")
    return kernels::BinaryKind::Min;
  if (k == "swiglu")
    return kernels::BinaryKind::SwiGlu;
  if (k == "mod")
    return attrs::fmod(s) ? kernels::BinaryKind::FMod : kernels::BinaryKind::Mod;
  return kernels::BinaryKind::Add;
}

/// tec.compare's predicate; nullopt for an unknown one (the plan contracts refuse it).
inline std::optional<kernels::CompareKind> compareKind(const std::string &predicate) {
  static const std::unordered_map<std::string, kernels::CompareKind> kinds = {
      {"eq", kernels::CompareKind::Equal},   {"ne", kernels::CompareKind::NotEqual},
      {"lt", kernels::CompareKind::Less},    {"le", kernels::CompareKind::LessEqual},
      {"gt", kernels::CompareKind::Greater}, {"ge", kernels::CompareKind::GreaterEqual},
      {"and", kernels::CompareKind::And},    {"or", kernels::CompareKind::Or},
      {"xor", kernels::CompareKind::Xor}};
  auto it = kinds.find(predicate);
  return it == kinds.end() ? std::nullopt : std::optional(it->second);
}

/// A unary step's kind (the plan contracts checked its kernel is one); gelu's form is its `approximate`.
inline kernels::UnaryKind unaryKind(const plan::Step &s) {
  if (s.kernel() == "gelu" && attrs::approximate(s) == "tanh")
    return kernels::UnaryKind::GeluTanh;
  return kernels::unaryKindNamed(s.kernel()).value_or(kernels::UnaryKind::Gelu);
}

/// The quantized tensor an FP8 scale state belongs to ("fc1/input/scale" -> "fc1/input"): FP8 health's name.
inline std::string quantizedTensor(const std::string &scaleName) {
  const std::string suffix = "/scale";
  const bool tagged = scaleName.size() > suffix.size() &&
                      scaleName.compare(scaleName.size() - suffix.size(), suffix.size(), suffix) == 0;
  return tagged ? scaleName.substr(0, scaleName.size() - suffix.size()) : scaleName;
}

/// A quantize_blocks step's scale kind from its `scale_type` (the contract checked it is one of these).
inline kernels::BlockScale blockScaleKind(const plan::Step &s) {
  const std::string type = attrs::scaleType(s);
  return type == "e8m0" ? kernels::BlockScale::E8M0 : type == "pow2" ? kernels::BlockScale::Pow2 : kernels::BlockScale::F32;
}

/// tec.cast_fp8's activation as a GEMM epilogue's (the same per-element functions).
inline kernels::Epilogue castActivation(const plan::Step &s) {
  const std::string a = attrs::activation(s);
  return a == "gelu" ? kernels::Epilogue::Gelu : a == "gelu_tanh" ? kernels::Epilogue::GeluTanh : kernels::Epilogue::None;
}

inline kernels::ActivationGradKind activationGradKind(const plan::Step &s) {
  if (s.kernel() == "relu_grad")
    return kernels::ActivationGradKind::Relu;
  return attrs::approximate(s) == "tanh" ? kernels::ActivationGradKind::GeluTanh
                                                   : kernels::ActivationGradKind::Gelu;
}

/// The plan's buffers as a backend reads them while it prepares steps (both backends derive from this).
class PlanBuffers {
protected:
  const plan::Variant *variant = nullptr; // set by prepare
  const plan::Buffer &buf(int i) const { return variant->buffers(i); }
  std::vector<int64_t> shape(int i) const { return {buf(i).shape().begin(), buf(i).shape().end()}; }
  int64_t count(int i) const {
    int64_t n = 1;
    for (int64_t d : buf(i).shape())
      n *= d;
    return n;
  }
  plan::DType dtype(int i) const { return buf(i).dtype(); }
  kernels::ElementType type(int i) const { return elementType(dtype(i)); }
};

/// Every plan kernel and the member of backend B that compiles it (runtime/Kernels.def): one table for all
/// backends, so that a kernel added to one is a compile error in the other until it is there too. B
/// befriends this.
template <class B> const std::unordered_map<std::string, Status (B::*)(const plan::Step &)> &stepCompilers() {
  static const std::unordered_map<std::string, Status (B::*)(const plan::Step &)> table = {
#define TEC_KERNEL(name, contract, compiler) {#name, &B::compiler},
#include "runtime/Kernels.def"
  };
  return table;
}

inline kernels::ReduceKind reduceKind(const plan::Step &s) {
  const std::string &k = s.kernel();
  return k == "reduce_mean"  ? kernels::ReduceKind::Mean
         : k == "reduce_max" ? kernels::ReduceKind::Max
         : k == "reduce_min" ? kernels::ReduceKind::Min
         : k == "reduce_prod" ? kernels::ReduceKind::Prod
                              : kernels::ReduceKind::Sum;
}

/// A normalization's rows (the dims before `axis`) and columns (from `axis` on), as element counts.
inline std::pair<int64_t, int64_t> rowsAndCols(const std::vector<int64_t> &shape, int64_t axis) {
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    (d < axis ? rows : cols) *= shape[d];
  return {rows, cols};
}

/// layer_norm (x, scale, bias? -> y, mean, rstd), rms_norm (x, scale -> y, rstd) and layer_norm_fp8 (x, weight,
/// bias?, scale -> q, amax, mean, rstd): operands (-1 when absent) and the rows and columns `axis` makes of x.
/// The plan contracts check the axis and the counts against it; the backends read the same definition.
struct NormStep {
  bool rms = false, fp8 = false;
  int x = -1, weight = -1, bias = -1, scale = -1, y = -1, amax = -1, mean = -1, rstd = -1;
  int64_t axis = 0, rows = 1, cols = 1;
  float epsilon = 1e-5f;
};
inline NormStep readNormStep(const plan::Step &s, const std::vector<int64_t> &inputShape) {
  NormStep r;
  r.rms = s.kernel() == "rms_norm";
  r.fp8 = s.kernel() == "layer_norm_fp8";
  const int tensors = s.inputs_size() - (r.fp8 ? 1 : 0); // x, weight, bias?
  r.x = s.inputs(0), r.weight = s.inputs(1), r.bias = tensors > 2 ? s.inputs(2) : -1;
  r.scale = r.fp8 ? s.inputs(s.inputs_size() - 1) : -1;
  int at = 0;
  r.y = s.outputs(at++);
  r.amax = r.fp8 ? s.outputs(at++) : -1;
  r.mean = r.rms ? -1 : s.outputs(at++);
  r.rstd = s.outputs(at);
  r.axis = attrs::axis(s);
  std::tie(r.rows, r.cols) = rowsAndCols(inputShape, r.axis);
  r.epsilon = static_cast<float>(attrs::epsilon(s));
  return r;
}

/// A shape split at `axis` into (outer, the axis, inner) element counts: softmax's rows and columns.
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};
inline Result<AxisSplit> splitAtAxis(const plan::Step &s, const std::vector<int64_t> &shape, int64_t axis) {
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
    return Status::error("step '" + s.kernel() + "' (from " + s.source() + "): axis " + std::to_string(axis) +
                         " out of range for rank " + std::to_string(shape.size()));
  AxisSplit split;
  for (int64_t d = 0; d < axis; ++d)
    split.outer *= shape[d];
  split.dim = shape[axis];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    split.inner *= shape[d];
  return split;
}

/// A one-input, one-output step along its `axis` attribute (softmax, log_softmax, cumsum, arg_reduce): its
/// input split there.
inline Result<AxisSplit> unaryAlongAxis(const plan::Step &s,
                                        const std::function<std::vector<int64_t>(int)> &shapeOf) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  return splitAtAxis(s, shapeOf(s.inputs(0)), attrs::axis(s));
}

/// gather_elements' and scatter_add's operands as [outer, axisDim, inner] (the data's, or the result's)
/// and the picks along the axis (the indices' dim there; for scatter_add of a gather, all its indices).
struct IndexedAxis {
  AxisSplit full;
  int64_t picks = 0;
  bool elements = true;
};
inline Result<IndexedAxis> indexedAxis(const plan::Step &s, const std::vector<int64_t> &full,
                                       const std::vector<int64_t> &indices) {
  auto split = splitAtAxis(s, full, attrs::axis(s));
  if (!split.ok())
    return split.error();
  IndexedAxis r{*split, 1, s.kernel() == "gather_elements" || attrs::elements(s)};
  if (r.elements)
    r.picks = indices[attrs::axis(s)];
  else
    for (int64_t d : indices)
      r.picks *= d;
  return r;
}

/// A window step (conv, its gradients, pool, pool_grad): the kind, the operands' roles, and the geometry
/// from the buffers' shapes and the step's attributes (the plan contracts checked them).
struct WindowStep {
  kernels::WindowKind kind;
  int a = -1, b = -1, bias = -1, out = -1; // conv: x, weight; input grad: dy, weight; weight grad: dy, x; pools: x / dy, x
  kernels::Window window;
  bool countIncludePad = false;
  bool channelsLast = false; // conv, pool: x [N, H, W, C] and y [N, OH, OW, M] (the window reads them as NCHW)
};
inline Result<WindowStep> readWindowStep(const plan::Step &s,
                                         const std::function<std::vector<int64_t>(int)> &shapeOf) {
  WindowStep r;
  if (s.inputs_size() < 1 || s.outputs_size() != 1)
    return Status::error("step '" + s.kernel() + "' (from " + s.source() + ") has the wrong number of operands");
  const std::string &k = s.kernel();
  const bool pool = k == "pool" || k == "pool_grad", avg = attrs::windowKind(s) == "avg";
  r.kind = k == "conv"               ? kernels::WindowKind::Conv
           : k == "conv_input_grad"  ? kernels::WindowKind::ConvInputGrad
           : k == "conv_weight_grad" ? kernels::WindowKind::ConvWeightGrad
           : k == "pool"             ? (avg ? kernels::WindowKind::AvgPool : kernels::WindowKind::MaxPool)
                                     : (avg ? kernels::WindowKind::AvgPoolGrad : kernels::WindowKind::MaxPoolGrad);
  r.a = s.inputs(0);
  r.b = s.inputs_size() > 1 ? s.inputs(1) : -1;
  r.bias = k == "conv" && s.inputs_size() > 2 ? s.inputs(2) : -1;
  r.out = s.outputs(0);
  r.countIncludePad = attrs::countIncludePad(s) != 0;
  // The image side and the window side of the step: (input, output) of the forward op.
  std::vector<int64_t> input, output, kernel;
  if (k == "conv") {
    input = shapeOf(r.a), output = shapeOf(r.out);
    auto w = r.b >= 0 ? shapeOf(r.b) : std::vector<int64_t>{};
    kernel = w.size() == 4 ? std::vector<int64_t>{w[2], w[3]} : std::vector<int64_t>{};
  } else if (k == "conv_input_grad") {
    input = shapeOf(r.out), output = shapeOf(r.a);
    auto w = shapeOf(r.b);
    kernel = w.size() == 4 ? std::vector<int64_t>{w[2], w[3]} : std::vector<int64_t>{};
  } else if (k == "conv_weight_grad") {
    if (r.b < 0)
      return Status::error("step 'conv_weight_grad' (from " + s.source() + ") needs dy and x");
    input = shapeOf(r.b), output = shapeOf(r.a);
    kernel = attrs::kernel(s);
  } else {
    if (k == "pool_grad" && r.b < 0)
      return Status::error("step 'pool_grad' (from " + s.source() + ") needs dy and x");
    input = shapeOf(pool && k == "pool" ? r.a : r.b), output = shapeOf(k == "pool" ? r.out : r.a);
    kernel = attrs::kernel(s);
  }
  r.channelsLast = (k == "conv" || k == "pool") && attrs::channelsLast(s) != 0;
  if (r.channelsLast && input.size() == 4 && output.size() == 4) // read as NCHW
    for (auto *dims : {&input, &output})
      *dims = {(*dims)[0], (*dims)[3], (*dims)[1], (*dims)[2]};
  auto strides = attrs::strides(s), pads = attrs::pads(s), dilations = attrs::dilations(s);
  if (input.size() != 4 || output.size() != 4 || kernel.size() != 2 || strides.size() != 2 || pads.size() != 4 ||
      dilations.size() != 2)
    return Status::error("step '" + s.kernel() + "' (from " + s.source() +
                         ") needs 4-D operands, 2 kernel dims, 2 strides, 4 pads and 2 dilations");
  kernels::Window &w = r.window;
  w.batch = input[0], w.channels = input[1], w.height = input[2], w.width = input[3];
  w.outChannels = output[1], w.outHeight = output[2], w.outWidth = output[3];
  w.kernelH = kernel[0], w.kernelW = kernel[1], w.strideH = strides[0], w.strideW = strides[1];
  w.padTop = pads[0], w.padLeft = pads[1], w.padBottom = pads[2], w.padRight = pads[3];
  w.dilationH = dilations[0], w.dilationW = dilations[1];
  w.groups = pool ? 1 : attrs::group(s);
  return r;
}

/// A tec.attention step (q, k, v, mask? -> out, lse) or tec.attention_grad (dout, q, k, v, out, lse, mask?
/// -> dq, dk, dv): buffer indices (-1 when absent) and the geometry, every shape checked against it, so
/// the plan contracts and both backends read one definition. Errors say what is wrong, not which step.
/// Their FP8 forms (attention_fp8, attention_fp8_grad) take f32 scalar scales after the tensors, in
/// tec.attention_fp8's and tec.attention_fp8_grad's order, and yield amaxes after them.
struct AttentionStep {
  kernels::AttentionShape shape;
  bool grad = false, fp8 = false;
  int q = -1, k = -1, v = -1, mask = -1, out = -1, lse = -1, dout = -1, dq = -1, dk = -1, dv = -1;
  std::vector<int> scales, amaxes;
};
/// The scales an FP8 attention step takes and the amaxes it yields.
inline int attentionFp8Scales(bool grad) { return grad ? 12 : 6; }
inline int attentionFp8Amaxes(bool grad) { return grad ? 4 : 2; }
inline Result<AttentionStep> readAttentionStep(const plan::Step &s,
                                               const std::function<std::vector<int64_t>(int)> &shapeOf,
                                               const std::function<plan::DType(int)> &dtypeOf) {
  AttentionStep r;
  r.grad = s.kernel() == "attention_grad" || s.kernel() == "attention_fp8_grad";
  r.fp8 = s.kernel() == "attention_fp8" || s.kernel() == "attention_fp8_grad";
  auto bad = [](const std::string &why) { return Status::error(why); }; // the caller names the step
  const int scales = r.fp8 ? attentionFp8Scales(r.grad) : 0, amaxes = r.fp8 ? attentionFp8Amaxes(r.grad) : 0;
  const int inputs = (r.grad ? 6 : 3) + scales;
  if (s.inputs_size() < inputs || s.inputs_size() > inputs + 1 || s.outputs_size() != (r.grad ? 3 : 2) + amaxes)
    return bad("has the wrong number of operands");
  int at = 0;
  if (r.grad)
    r.dout = s.inputs(at++);
  r.q = s.inputs(at++), r.k = s.inputs(at++), r.v = s.inputs(at++);
  if (r.grad)
    r.out = s.inputs(at++), r.lse = s.inputs(at++);
  for (int i = 0; i < scales; ++i)
    r.scales.push_back(s.inputs(at++));
  r.mask = at < s.inputs_size() ? s.inputs(at) : -1;
  if (r.grad)
    r.dq = s.outputs(0), r.dk = s.outputs(1), r.dv = s.outputs(2);
  else
    r.out = s.outputs(0), r.lse = s.outputs(1);
  for (int i = s.outputs_size() - amaxes; i < s.outputs_size(); ++i)
    r.amaxes.push_back(s.outputs(i));
  auto q = shapeOf(r.q), k = shapeOf(r.k), v = shapeOf(r.v), o = shapeOf(r.out), lse = shapeOf(r.lse);
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return bad("expected 4-D query, key and value");
  kernels::AttentionShape &a = r.shape;
  a.batch = q[0], a.heads = q[1], a.queries = q[2], a.headDim = q[3];
  a.kvHeads = k[1], a.keys = k[2], a.valueDim = v[3];
  if (k[0] != a.batch || v[0] != a.batch || v[1] != a.kvHeads || v[2] != a.keys || k[3] != a.headDim ||
      a.kvHeads <= 0 || a.heads % a.kvHeads != 0)
    return bad("key and value do not fit the query's batch, heads and head size");
  if (o != std::vector<int64_t>{a.batch, a.heads, a.queries, a.valueDim} ||
      lse != std::vector<int64_t>{a.batch, a.heads, a.queries})
    return bad("the output or logsumexp does not fit the query and value");
  if (r.grad && (shapeOf(r.dout) != o || shapeOf(r.dq) != q || shapeOf(r.dk) != k || shapeOf(r.dv) != v))
    return bad("a gradient does not fit its operand");
  const plan::DType type = dtypeOf(r.q);
  auto isFp8 = [](plan::DType t) { return t == plan::F8E4M3FN || t == plan::F8E5M2; };
  if (r.fp8) { // E4M3 query, key, value and output; a gradient and gradients in FP8, each set of one format
    for (int b : {r.k, r.v, r.out})
      if (dtypeOf(b) != plan::F8E4M3FN || type != plan::F8E4M3FN)
        return bad("expected E4M3 query, key, value and output");
    if (r.grad && (!isFp8(dtypeOf(r.dout)) || !isFp8(dtypeOf(r.dq)) || dtypeOf(r.dk) != dtypeOf(r.dq) ||
                   dtypeOf(r.dv) != dtypeOf(r.dq)))
      return bad("expected an FP8 output gradient and gradients of one FP8 format");
    for (int b : r.scales)
      if (dtypeOf(b) != plan::F32 || !shapeOf(b).empty())
        return bad("expected f32 scalar scales");
    for (int b : r.amaxes)
      if (dtypeOf(b) != plan::F32 || !shapeOf(b).empty())
        return bad("expected f32 scalar amaxes");
  } else {
    for (int b : {r.k, r.v, r.out, r.dout, r.dq, r.dk, r.dv})
      if (b >= 0 && dtypeOf(b) != type)
        return bad("expected one float type for query, key, value, output and gradients");
    if (!isFloat(type))
      return bad("expected float operands");
  }
  if (dtypeOf(r.lse) != plan::F32)
    return bad("expected an f32 logsumexp");
  a.scale = static_cast<float>(attrs::scale(s));
  a.causal = attrs::causal(s) != 0;
  if (r.mask >= 0) {
    auto m = shapeOf(r.mask);
    const int64_t scores[] = {a.batch, a.heads, a.queries, a.keys};
    if (m.size() != 4)
      return bad("expected a 4-D mask");
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      if (m[d] != 1 && m[d] != scores[d])
        return bad("the mask does not broadcast to the scores");
      a.maskStrides[d] = m[d] == 1 ? 0 : stride;
      stride *= m[d];
    }
    const plan::DType mt = dtypeOf(r.mask);
    if (mt != plan::BOOL && mt != type && !(r.fp8 && isFloat(mt)))
      return bad("expected a boolean mask or one of the query's type");
    a.mask = mt == plan::BOOL ? kernels::AttentionMask::Boolean : kernels::AttentionMask::Additive;
  }
  return r;
}

/// A tec.optimizer_update step's operands by role (buffer indices; -1 when absent) and hyperparameters.
struct OptimizerStep {
  kernels::OptimizerParams params;
  int param = -1, grad = -1, lr = -1, step = -1, clip = -1, finite = -1;
  std::vector<int> moments, newMoments;
  int newParam = -1;
};
inline Result<OptimizerStep> readOptimizerStep(const plan::Step &s) {
  // Operand groups: param, grad, moments..., lr, step, clip?, finite? (operandSegmentSizes).
  auto segments = attrs::operandSegmentSizes(s);
  auto bad = [&](const std::string &why) {
    return Status::error("step 'optimizer_update' (from " + s.source() + "): " + why);
  };
  if (segments.size() != 7 || segments[0] != 1 || segments[1] != 1 || segments[3] != 1 || segments[4] != 1)
    return bad("expected operand segments param, grad, moments, lr, step, clip, finite");
  int64_t total = 0;
  for (int64_t n : segments)
    total += n;
  if (total != s.inputs_size() || s.outputs_size() != 1 + segments[2])
    return bad("operands do not match their segments");
  OptimizerStep o;
  int at = 0;
  o.param = s.inputs(at++);
  o.grad = s.inputs(at++);
  for (int64_t i = 0; i < segments[2]; ++i)
    o.moments.push_back(s.inputs(at++));
  o.lr = s.inputs(at++);
  o.step = s.inputs(at++);
  if (segments[5])
    o.clip = s.inputs(at++);
  if (segments[6])
    o.finite = s.inputs(at++);
  o.newParam = s.outputs(0);
  for (int i = 1; i < s.outputs_size(); ++i)
    o.newMoments.push_back(s.outputs(i));
  const std::string kind = attrs::optimizer(s);
  o.params.adamw = kind == "adamw";
  o.params.beta1 = static_cast<float>(attrs::beta1(s));
  o.params.beta2 = static_cast<float>(attrs::beta2(s));
  o.params.eps = static_cast<float>(attrs::eps(s));
  o.params.weightDecay = static_cast<float>(attrs::weightDecay(s));
  o.params.momentum = static_cast<float>(attrs::momentum(s));
  o.params.nesterov = attrs::nesterov(s) != 0;
  if (o.moments.size() != (o.params.adamw ? 2u : o.params.momentum != 0.0f ? 1u : 0u))
    return bad("expected " + std::string(o.params.adamw ? "2 moments" : "the momentum's moment") + " for " + kind);
  return o;
}

/// tec.lr_schedule's schedule attribute as kernels::learningRate's number.
inline int scheduleNumber(const plan::Step &s) {
  const std::string name = attrs::schedule(s);
  return name == "cosine" ? 2 : name == "warmup" ? 1 : 0;
}

} // namespace tec::steps

#endif
