// Backend parity in the style of ggml's test-backend-ops: every kernel and fused op of a plan, run as a
// one-step variant on the CPU backend (the reference) and the CUDA backend on the same seeded inputs.
// Float results compare by normalized mean squared error, with a threshold per precision; the FP8
// kernels (quantize, dequantize, amax, delayed scaling) must match bit for bit. Skipped, visibly, where
// there is no CUDA device or the plugin does not load.
#include "support/Fp8.h"
#include "support/Half.h"
#include "runtime/CudaPlugin.h"
#include "runtime/PlanFile.h"
#include "runtime/Session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <random>

using namespace tec;

namespace {

using Shape = std::vector<int64_t>;

/// A one-step variant: buffers laid out back to back in the arena, inputs and outputs in order.
class Builder {
public:
  explicit Builder(std::string kernel) {
    variant.set_target("cpu");
    variant.set_precision("fp32");
    step = variant.add_steps();
    step->set_kernel(std::move(kernel));
    step->set_source("parity");
  }
  Builder &in(plan::DType t, Shape shape, std::string fill = "normal") {
    step->add_inputs(add(t, shape, plan::INPUT));
    variant.add_inputs(step->inputs(step->inputs_size() - 1));
    fills.push_back(std::move(fill));
    return *this;
  }
  /// Starts the next step of a multi-step case (the backends fuse across steps).
  Builder &then(std::string kernel) {
    step = variant.add_steps();
    step->set_kernel(std::move(kernel));
    step->set_source("parity");
    return *this;
  }
  /// An earlier step's output as this step's input.
  Builder &use(int buffer) {
    step->add_inputs(buffer);
    return *this;
  }
  /// An output only later steps read (a temporary), remembered as `last`.
  Builder &temp(plan::DType t, Shape shape) {
    last = add(t, shape, plan::TEMP);
    step->add_outputs(last);
    return *this;
  }
  int last = -1;
  Builder &out(plan::DType t, Shape shape) {
    step->add_outputs(add(t, shape, plan::OUTPUT));
    variant.add_outputs(step->outputs(step->outputs_size() - 1));
    return *this;
  }
  Builder &i(const char *name, int64_t v) {
    (*step->mutable_attrs())[name].set_i(v);
    return *this;
  }
  Builder &f(const char *name, double v) {
    (*step->mutable_attrs())[name].set_f(v);
    return *this;
  }
  Builder &s(const char *name, std::string v) {
    (*step->mutable_attrs())[name].set_s(std::move(v));
    return *this;
  }
  Builder &ints(const char *name, Shape v) {
    for (int64_t x : v)
      (*step->mutable_attrs())[name].mutable_ints()->add_values(x);
    return *this;
  }
  plan::Variant variant;
  std::vector<std::string> fills;

private:
  int add(plan::DType t, const Shape &shape, plan::Role role) {
    auto *b = variant.add_buffers();
    b->set_name("t" + std::to_string(variant.buffers_size() - 1));
    b->set_dtype(t);
    b->set_role(role);
    b->set_alias_of(-1);
    int64_t n = 1;
    for (int64_t d : shape) {
      b->add_shape(d);
      n *= d;
    }
    b->set_bytes(n * dtypeBytes(t));
    b->set_offset(variant.arena_bytes());
    variant.set_arena_bytes(variant.arena_bytes() + (b->bytes() + 255) / 256 * 256);
    return variant.buffers_size() - 1;
  }
  plan::Step *step;
};

struct Case {
  std::string name;
  plan::Variant variant;
  std::vector<std::string> fills;
  double maxError; // normalized MSE; 0: bit-exact
  /// Looser bounds for some outputs (by buffer name), where an earlier step's rounding differences reach them.
  std::map<std::string, double> looser = {};
};

std::vector<Case> &cases() {
  static std::vector<Case> all;
  return all;
}

void add(std::string name, Builder b, double maxError, std::map<std::string, double> looser = {}) {
  cases().push_back({std::move(name), std::move(b.variant), std::move(b.fills), maxError, std::move(looser)});
}

// Thresholds from each operation's known error (normalized MSE, so a relative error r everywhere gives
// r²): a failure means a bug, not rounding.
// Elementwise f32: a few ulps of libm differences (2^-24 each) at most; 1e-10 leaves four orders.
constexpr double kF32 = 1e-10, kHalf = 1e-5, kExact = 0;
/// A GEMM of depth k accumulating with unit roundoff u: worst-case relative error k·u per output.
constexpr double gemmBound(int64_t k, double u) { return 4.0 * (k * u) * (k * u); }
constexpr double kF32Unit = 1.0 / (1 << 24);
constexpr double kGemm = gemmBound(128, kF32Unit); // FP32 GEMMs here have k <= 128 (TF32 off)
/// cuBLASLt's GELU epilogues compute tanh approximately (tanh.approx.f32: relative error below 2^-11),
/// which the GELU and its derivative carry through: r <= 2^-11 (forward), 2^-10 (DGELU's sech²).
constexpr double kGeluEpilogue = 2.0 * (1.0 / (1 << 11)) * (1.0 / (1 << 11));
constexpr double kDGeluEpilogue = 2.0 * (1.0 / (1 << 10)) * (1.0 / (1 << 10));
/// FP8 GEMMs with fast accumulation (forward) keep about 14 bits while accumulating on Hopper; the
/// error of k such additions is random, so its mean square is about k·u² (16x margin), plus the BF16
/// bias cuBLASLt takes (2^-9 relative on the bias).
constexpr double fp8FastAccumBound(int64_t k) {
  return 16.0 * k * (1.0 / (1 << 14)) * (1.0 / (1 << 14)) + (1.0 / (1 << 9)) * (1.0 / (1 << 9));
}
using plan::BF16;
using plan::BOOL;
using plan::F16;
using plan::F32;
using plan::F8E4M3FN;
using plan::F8E5M2;
using plan::I32;
using plan::I64;

void buildCases() {
  if (!cases().empty())
    return;
  for (const char *op : {"add", "sub", "mul", "div"}) {
    add(std::string(op) + "_broadcast", Builder(op).in(F32, {4, 1, 33}).in(F32, {5, 33}).out(F32, {4, 5, 33}), kF32);
    add(std::string(op) + "_bf16", Builder(op).in(BF16, {64, 32}).in(BF16, {32}).out(BF16, {64, 32}), kHalf);
  }
  add("pow", Builder("pow").in(F32, {300}, "positive").in(F32, {300}).out(F32, {300}), kF32);
  add("pow_square", Builder("pow").in(F32, {300}).in(F32, {1}, "two").out(F32, {300}), kF32);
  add("add_i32", Builder("add").in(I32, {7, 9}, "labels").in(I32, {9}, "labels").out(I32, {7, 9}), kExact);
  add("div_i64", Builder("div").in(I64, {50}, "labels").in(I64, {50}, "labels").out(I64, {50}), kExact);
  for (const char *op : {"max", "min"})
    add(std::string(op) + "_broadcast", Builder(op).in(F32, {4, 1, 33}).in(F32, {5, 33}).out(F32, {4, 5, 33}), kF32);
  add("max_i64", Builder("max").in(I64, {7, 9}, "labels").in(I64, {9}, "labels").out(I64, {7, 9}), kExact);
  add("fmod", Builder("mod").in(F32, {300}, "wide").in(F32, {300}, "positive").out(F32, {300}).i("fmod", 1), kF32);
  add("mod_i32", Builder("mod").in(I32, {50}, "signed").in(I32, {50}, "signed").out(I32, {50}), kExact);
  for (const char *predicate : {"eq", "ne", "lt", "le", "gt", "ge"})
    add(std::string("compare_") + predicate,
        Builder("compare").in(F32, {6, 1, 33}, "integers").in(F32, {5, 33}, "integers").out(BOOL, {6, 5, 33})
            .s("predicate", predicate),
        kExact);
  add("compare_i64", Builder("compare").in(I64, {40}, "labels").in(I64, {}, "labels").out(BOOL, {40})
                         .s("predicate", "lt"), kExact);
  add("compare_bf16", Builder("compare").in(BF16, {64}).in(BF16, {64}).out(BOOL, {64}).s("predicate", "gt"), kExact);
  for (const char *predicate : {"and", "or", "xor"})
    add(std::string("logical_") + predicate,
        Builder("compare").in(BOOL, {8, 16}, "bool").in(BOOL, {16}, "bool").out(BOOL, {8, 16}).s("predicate", predicate),
        kExact);
  add("arg_max", Builder("arg_reduce").in(F32, {6, 50, 7}, "integers").out(I64, {6, 7}).s("kind", "max").i("axis", 1)
                     .i("keepdims", 0), kExact);
  add("cumsum_f32", Builder("cumsum").in(F32, {6, 300, 5}).out(F32, {6, 300, 5}).i("axis", 1), kF32);
  add("cumsum_i64_exclusive_reverse", Builder("cumsum").in(I64, {4, 33}, "signed").out(I64, {4, 33}).i("axis", 1)
                                          .i("exclusive", 1).i("reverse", 1), kExact);
  add("arg_min_last", Builder("arg_reduce").in(I32, {40, 9}, "signed").out(I64, {40, 1}).s("kind", "min").i("axis", 1)
                          .i("keepdims", 1).i("select_last_index", 1), kExact);
  add("gather_elements", Builder("gather_elements").in(F32, {6, 7, 5}).in(I64, {6, 3, 5}, "labels").out(F32, {6, 3, 5})
                             .i("axis", 1), kExact);
  // Labels 1..5 repeat: each output sums several updates, in index order on both backends.
  add("scatter_add_elements", Builder("scatter_add").in(F32, {6, 3, 5}).in(I64, {6, 3, 5}, "labels")
                                  .out(F32, {6, 7, 5}).i("axis", 1).i("elements", 1), kF32);
  add("scatter_add_rows", Builder("scatter_add").in(F32, {3, 700, 24}).in(I32, {700}, "labels").out(F32, {3, 6, 24})
                              .i("axis", 1).i("elements", 0), kF32);
  auto window = [](Builder &b, Shape strides, Shape pads, Shape dilations) -> Builder & {
    return b.ints("strides", strides).ints("pads", pads).ints("dilations", dilations);
  };
  // A ResNet stem (7x7, stride 2) and a grouped, dilated, asymmetric one; their gradients; pools.
  add("conv_stem", window(Builder("conv").in(F32, {2, 3, 32, 32}).in(F32, {8, 3, 7, 7}).in(F32, {8})
                              .out(F32, {2, 8, 16, 16}).i("group", 1), {2, 2}, {3, 3, 3, 3}, {1, 1}), kGemm);
  add("conv_grouped", window(Builder("conv").in(F32, {2, 4, 9, 8}).in(F32, {6, 2, 3, 2}).out(F32, {2, 6, 4, 7})
                                 .i("group", 2), {2, 1}, {1, 0, 0, 1}, {1, 2}), kGemm);
  add("conv_input_grad", window(Builder("conv_input_grad").in(F32, {2, 6, 4, 7}).in(F32, {6, 2, 3, 2})
                                    .out(F32, {2, 4, 9, 8}).i("group", 2), {2, 1}, {1, 0, 0, 1}, {1, 2}), kGemm);
  add("conv_weight_grad", window(Builder("conv_weight_grad").in(F32, {2, 6, 4, 7}).in(F32, {2, 4, 9, 8})
                                     .out(F32, {6, 2, 3, 2}).ints("kernel", {3, 2}).i("group", 2), {2, 1}, {1, 0, 0, 1},
                                 {1, 2}), kGemm);
  // The same with pads equal on both sides: cuDNN's convolution API runs these where cuDNN loads.
  add("conv_grouped_cudnn", window(Builder("conv").in(F32, {2, 4, 9, 8}).in(F32, {6, 2, 3, 2}).in(F32, {6})
                                       .out(F32, {2, 6, 5, 8}).i("group", 2), {2, 1}, {1, 1, 1, 1}, {1, 2}), kGemm);
  add("conv_input_grad_cudnn", window(Builder("conv_input_grad").in(F32, {2, 6, 5, 8}).in(F32, {6, 2, 3, 2})
                                          .out(F32, {2, 4, 9, 8}).i("group", 2), {2, 1}, {1, 1, 1, 1}, {1, 2}), kGemm);
  add("conv_weight_grad_cudnn", window(Builder("conv_weight_grad").in(F32, {2, 6, 5, 8}).in(F32, {2, 4, 9, 8})
                                           .out(F32, {6, 2, 3, 2}).ints("kernel", {3, 2}).i("group", 2), {2, 1},
                                       {1, 1, 1, 1}, {1, 2}), kGemm);
  add("conv_bf16_cudnn", window(Builder("conv").in(BF16, {2, 3, 16, 16}).in(BF16, {8, 3, 3, 3}).in(BF16, {8})
                                    .out(BF16, {2, 8, 16, 16}).i("group", 1), {1, 1}, {1, 1, 1, 1}, {1, 1}), kHalf);
  for (const char *kind : {"max", "avg"}) {
    add(std::string(kind) + "_pool", window(Builder("pool").in(F32, {2, 5, 9, 9}).out(F32, {2, 5, 5, 5})
                                                .s("kind", kind).ints("kernel", {3, 3}).i("count_include_pad", 1),
                                            {2, 2}, {1, 1, 1, 1}, {1, 1}), kF32);
    add(std::string(kind) + "_pool_grad",
        window(Builder("pool_grad").in(F32, {2, 5, 5, 5}).in(F32, {2, 5, 9, 9}).out(F32, {2, 5, 9, 9}).s("kind", kind)
                   .ints("kernel", {3, 3}), {2, 2}, {1, 1, 1, 1}, {1, 1}), kF32);
  }
  for (const char *op : {"relu", "tanh", "sigmoid", "erf", "exp", "abs", "sign", "gelu", "neg", "sin", "cos", "softplus", "floor", "ceil", "silu",
                         "hard_swish", "round", "tan", "atan", "sinh", "cosh", "asinh", "softsign"})
    add(op, Builder(op).in(F32, {1000}).out(F32, {1000}), kF32);
  for (const char *op : {"asin", "acos", "atanh"})
    add(op, Builder(op).in(F32, {1000}, "unit").out(F32, {1000}), kF32);
  add("acosh", Builder("acosh").in(F32, {1000}, "positive").out(F32, {1000}), kF32); // NaN below 1, on both
  for (const char *op : {"abs", "neg", "sign"}) // integers: position buckets
    for (auto type : {I32, I64})
      add(std::string(op) + (type == I32 ? "_i32" : "_i64"), Builder(op).in(type, {513}, "labels").out(type, {513}), kExact);
  for (const char *op : {"log", "reciprocal"})
    add(op, Builder(op).in(F32, {1000}, "positive").out(F32, {1000}), kF32);
  add("sqrt", Builder("sqrt").in(F32, {1000}, "positive").out(F32, {1000}), kF32);
  add("gelu_tanh", Builder("gelu").in(F32, {1000}).out(F32, {1000}).s("approximate", "tanh"), kF32);
  add("gelu_f16", Builder("gelu").in(F16, {1000}).out(F16, {1000}), kHalf);
  add("relu_grad", Builder("relu_grad").in(F32, {777}).in(F32, {777}).out(F32, {777}), kF32);
  add("gelu_grad", Builder("gelu_grad").in(F32, {777}).in(F32, {777}).out(F32, {777}), kF32);
  add("gelu_grad_tanh",
      Builder("gelu_grad").in(F32, {777}).in(F32, {777}).out(F32, {777}).s("approximate", "tanh"), kF32);
  add("where", Builder("where").in(BOOL, {6, 1}, "bool").in(F32, {6, 10}).in(F32, {10}).out(F32, {6, 10}), kExact);
  add("cast_f32_bf16", Builder("cast").in(F32, {513}).out(BF16, {513}), kExact);
  add("cast_f32_i32", Builder("cast").in(F32, {513}, "wide").out(I32, {513}), kExact);
  add("cast_i64_f32", Builder("cast").in(I64, {513}, "labels").out(F32, {513}), kExact);
  add("cast_f32_e4m3", Builder("cast").in(F32, {513}, "wide").out(F8E4M3FN, {513}), kExact);
  add("cast_f16_f32", Builder("cast").in(F16, {513}).out(F32, {513}), kExact);
  add("softmax_rows", Builder("softmax").in(F32, {32, 1000}).out(F32, {32, 1000}).i("axis", 1), kF32);
  add("softmax_strided", Builder("softmax").in(F32, {4, 17, 6}).out(F32, {4, 17, 6}).i("axis", 1), kF32);
  add("log_softmax", Builder("log_softmax").in(F32, {8, 100}).out(F32, {8, 100}).i("axis", 1), kF32);
  // Attention: the CPU's blocked BLAS products against the CUDA kernels' per-row sums, across the CPU's
  // 64-query and 128-key blocks; the backward from the forward's own output and logsumexp.
  add("attention_causal_grouped",
      Builder("attention").in(F32, {2, 4, 70, 16}).in(F32, {2, 2, 130, 16}).in(F32, {2, 2, 130, 24})
          .out(F32, {2, 4, 70, 24}).out(F32, {2, 4, 70}).i("causal", 1).f("scale", 0.25),
      gemmBound(130, kF32Unit));
  add("attention_padding_bf16",
      Builder("attention").in(BF16, {2, 2, 33, 8}).in(BF16, {2, 2, 33, 8}).in(BF16, {2, 2, 33, 8})
          .in(BF16, {2, 1, 1, 33}).out(BF16, {2, 2, 33, 8}).out(F32, {2, 2, 33}).f("scale", 0.35),
      kHalf);
  {
    Builder b("attention");
    b.in(F32, {1, 4, 66, 8}).in(F32, {1, 2, 66, 8}).in(F32, {1, 2, 66, 8}).in(F32, {1, 1, 66, 66});
    const int q = b.variant.inputs(0), k = b.variant.inputs(1), v = b.variant.inputs(2), mask = b.variant.inputs(3);
    b.temp(F32, {1, 4, 66, 8});
    const int out = b.last;
    b.temp(F32, {1, 4, 66}).f("scale", 0.3);
    const int lse = b.last;
    b.then("attention_grad").in(F32, {1, 4, 66, 8}).use(q).use(k).use(v).use(out).use(lse).use(mask)
        .out(F32, {1, 4, 66, 8}).out(F32, {1, 2, 66, 8}).out(F32, {1, 2, 66, 8}).f("scale", 0.3);
    add("attention_grad_masked", std::move(b), gemmBound(4 * 66, kF32Unit));
  }
  // The same in bf16, where cuDNN's fused attention runs (kc::cudnnAttentionTakes): forward, and the
  // backward from the forward's output (bf16 rounding on both sides: normalized MSE ~ 2^-16).
  add("attention_bf16_cudnn",
      Builder("attention").in(BF16, {2, 4, 128, 64}).in(BF16, {2, 2, 128, 64}).in(BF16, {2, 2, 128, 64})
          .out(BF16, {2, 4, 128, 64}).out(F32, {2, 4, 128}).i("causal", 1).f("scale", 0.125),
      kHalf);
  {
    Builder b("attention");
    b.in(BF16, {1, 4, 96, 64}).in(BF16, {1, 4, 96, 64}).in(BF16, {1, 4, 96, 64});
    const int q = b.variant.inputs(0), k = b.variant.inputs(1), v = b.variant.inputs(2);
    b.temp(BF16, {1, 4, 96, 64});
    const int out = b.last;
    b.temp(F32, {1, 4, 96}).f("scale", 0.125).i("causal", 1);
    const int lse = b.last;
    b.then("attention_grad").in(BF16, {1, 4, 96, 64}).use(q).use(k).use(v).use(out).use(lse)
        .out(BF16, {1, 4, 96, 64}).out(BF16, {1, 4, 96, 64}).out(BF16, {1, 4, 96, 64}).f("scale", 0.125).i("causal", 1);
    add("attention_grad_bf16_cudnn", std::move(b), 4 * kHalf);
  }
  // FP8 attention (tec.attention_fp8 and its gradient), forward then backward from the forward's own FP8
  // output: tec's kernels where cuDNN declines (a mask, head size 16), cuDNN's FP8 attention at head size
  // 128, causal. Both sides round p and ds through FP8; an element within float rounding of an FP8
  // boundary may round the other way (one FP8 step of 2^-3), hence the bounds.
  auto fp8Attention = [](const Shape &q, const Shape &kv, bool masked, bool causal) {
    Builder b("attention_fp8");
    b.in(F8E4M3FN, q, "fp8").in(F8E4M3FN, kv, "fp8").in(F8E4M3FN, kv, "fp8");
    const int qb = b.variant.inputs(0), kb = b.variant.inputs(1), vb = b.variant.inputs(2);
    b.in(F32, {}, "quarter").in(F32, {}, "quarter").in(F32, {}, "quarter");
    const int qsi = b.variant.inputs(3), ksi = b.variant.inputs(4), vsi = b.variant.inputs(5);
    b.in(F32, {}, "probs_scale").in(F32, {}, "probs_scale_inv").in(F32, {}, "scale");
    const int ps = b.variant.inputs(6), psi = b.variant.inputs(7);
    int mask = -1;
    if (masked) {
      b.in(BOOL, {q[0], 1, q[2], kv[2]}, "true");
      mask = b.variant.inputs(9);
    }
    b.temp(F8E4M3FN, q);
    const int out = b.last;
    b.temp(F32, {q[0], q[1], q[2]});
    const int lse = b.last;
    b.out(F32, {}).out(F32, {}).f("scale", 0.125).i("causal", causal);
    b.then("attention_fp8_grad").in(F8E5M2, q, "fp8").use(qb).use(kb).use(vb).use(out).use(lse).use(qsi).use(ksi)
        .use(vsi).in(F32, {}, "scale").in(F32, {}, "quarter").use(ps).use(psi).in(F32, {}, "scale")
        .in(F32, {}, "scale").in(F32, {}, "scale").in(F32, {}, "scale").in(F32, {}, "scale");
    if (masked)
      b.use(mask);
    b.out(F8E5M2, q).out(F8E5M2, kv).out(F8E5M2, kv).out(F32, {}).out(F32, {}).out(F32, {}).out(F32, {})
        .f("scale", 0.125).i("causal", causal);
    return b;
  };
  add("attention_fp8_masked_tec", fp8Attention({2, 4, 70, 16}, {2, 2, 70, 16}, true, false), 1e-4);
  // Each backward here reads its own forward's FP8 output: cuDNN's differs from the CPU's by about one E4M3
  // step in some elements (normalized MSE 0.0019-0.0022 on an H200), and through delta = rowsum(dout * out)
  // that moves dS across E5M2 boundaries, so dq and dk differ more (0.0044-0.0088) than the backward does on
  // the same forward (below 3e-4: CudnnFp8AttentionHalvesMatchTheCpuOnTheSameInputs holds it to 4e-3).
  auto cudnnCase = [&](const char *name, Builder b) {
    const auto &v = b.variant; // outputs: the forward's two amaxes, then dq, dk, dv and four amaxes
    std::map<std::string, double> chainedGrads = {{v.buffers(v.outputs(2)).name(), 2e-2},
                                                  {v.buffers(v.outputs(3)).name(), 2e-2}};
    add(name, std::move(b), 4e-3, std::move(chainedGrads));
  };
  cudnnCase("attention_fp8_cudnn", fp8Attention({1, 4, 128, 128}, {1, 4, 128, 128}, false, true));
  // Not causal: with a causal mask the first query's p is 1 on both sides, which hides a difference in what
  // the amax of S measures.
  cudnnCase("attention_fp8_noncausal_cudnn", fp8Attention({1, 4, 128, 128}, {1, 4, 128, 128}, false, false));
  // Transformer Engine's GPT layer: batch 2, 32 heads, sequence 2048, head 128.
  cudnnCase("attention_fp8_te_layer_cudnn", fp8Attention({2, 32, 2048, 128}, {2, 32, 2048, 128}, false, true));
  add("layer_norm",
      Builder("layer_norm").in(F32, {3, 5, 256}).in(F32, {256}).in(F32, {256}).out(F32, {3, 5, 256})
          .out(F32, {3, 5, 1}).out(F32, {3, 5, 1}).i("axis", 2).f("epsilon", 1e-5),
      kF32);
  add("layer_norm_no_bias",
      Builder("layer_norm").in(F32, {16, 96}).in(F32, {96}).out(F32, {16, 96}).out(F32, {16, 1}).out(F32, {16, 1})
          .i("axis", 1),
      kF32);
  add("rms_norm",
      Builder("rms_norm").in(F32, {3, 5, 256}).in(F32, {256}).out(F32, {3, 5, 256}).out(F32, {3, 5, 1})
          .i("axis", 2).f("epsilon", 1e-6),
      kF32);
  add("swiglu", Builder("swiglu").in(F32, {7, 130}).in(F32, {7, 130}).out(F32, {7, 130}), kF32);
  add("reduce_sum_rows", Builder("reduce_sum").in(F32, {64, 300}).out(F32, {64, 1}).ints("axes", {1}), kF32);
  add("reduce_sum_bias_grad", Builder("reduce_sum").in(F32, {256, 48}).out(F32, {1, 48}).ints("axes", {0}), kF32);
  add("reduce_mean_all", Builder("reduce_mean").in(F32, {7, 9, 11}).out(F32, {}).ints("axes", {0, 1, 2}), kF32);
  add("reduce_mean_middle", Builder("reduce_mean").in(F32, {5, 6, 7}).out(F32, {5, 7}).ints("axes", {1}), kF32);
  for (const char *op : {"reduce_max", "reduce_min", "reduce_prod"}) {
    add(std::string(op) + "_middle", Builder(op).in(F32, {5, 60, 7}).out(F32, {5, 7}).ints("axes", {1}), kF32);
    add(std::string(op) + "_i32", Builder(op).in(I32, {9, 4}, "signed").out(I32, {9}).ints("axes", {1}), kExact);
  }
  add("reduce_max_nan", Builder("reduce_max").in(F32, {4, 33}, "nan").out(F32, {4}).ints("axes", {1}), kExact);
  add("reduce_max_large", Builder("reduce_max").in(F32, {1024, 4099}).out(F32, {}).ints("axes", {0, 1}), kExact);
  add("reduce_sum_i64", Builder("reduce_sum").in(I64, {5, 6}, "labels").out(I64, {5}).ints("axes", {1}), kExact);
  // Two-stage reductions: a full one over 4M values (the MSE loss), column sums over 20,000 rows (a bias
  // gradient), an integer one split over blocks.
  add("reduce_mean_all_large", Builder("reduce_mean").in(F32, {1024, 4099}).out(F32, {}).ints("axes", {0, 1}), kF32);
  add("reduce_sum_columns_large", Builder("reduce_sum").in(F32, {20000, 48}).out(F32, {48}).ints("axes", {0}), kF32);
  add("reduce_sum_i32_large", Builder("reduce_sum").in(I32, {300000}, "labels").out(I32, {}).ints("axes", {0}),
      kExact);
  add("matmul_2d", Builder("matmul").in(F32, {64, 96}).in(F32, {96, 80}).out(F32, {64, 80}), kGemm);
  add("matmul_folded_batch", Builder("matmul").in(F32, {2, 3, 16, 32}).in(F32, {32, 24}).out(F32, {2, 3, 16, 24}), kGemm);
  add("matmul_batched", Builder("matmul").in(F32, {4, 16, 32}).in(F32, {4, 32, 8}).out(F32, {4, 16, 8}), kGemm);
  add("matmul_broadcast", Builder("matmul").in(F32, {1, 16, 32}).in(F32, {3, 32, 8}).out(F32, {3, 16, 8}), kGemm);
  add("matmul_vector", Builder("matmul").in(F32, {32}).in(F32, {32, 8}).out(F32, {8}), kGemm);
  add("gemm_trans_c", Builder("gemm").in(F32, {40, 24}).in(F32, {56, 40}).in(F32, {56}).out(F32, {24, 56})
                          .i("trans_a", 1).i("trans_b", 1).f("alpha", 0.5).f("beta", 2.0),
      kGemm);
  for (const char *e : {"none", "relu", "gelu", "gelu_tanh"}) {
    add(std::string("linear_") + e,
        Builder("linear").in(F32, {2, 32, 64}).in(F32, {48, 64}).in(F32, {48}).out(F32, {2, 32, 48})
            .i("transpose_b", 1).s("epilogue", e),
        std::string(e) == "gelu_tanh" ? kGemm + kGeluEpilogue : kGemm);
  }
  // A NaN reaching a ReLU stays NaN on both backends (ONNX's Relu; loss scaling's all_finite needs it).
  add("linear_relu_nan", Builder("linear").in(F32, {16, 32}, "nan").in(F32, {48, 32}).in(F32, {48})
                             .out(F32, {16, 48}).i("transpose_b", 1).s("epilogue", "relu"),
      kGemm);
  // Per-batch GEMMs at offsets that are only 4-byte aligned: the heuristics must be told.
  add("matmul_broadcast_odd", Builder("matmul").in(F32, {1, 6, 5}).in(F32, {3, 5, 7}).out(F32, {3, 6, 7}), kGemm);
  add("linear_kn_no_bias", Builder("linear").in(F32, {32, 64}).in(F32, {64, 48}).out(F32, {32, 48}), kGemm);
  add("linear_bf16_gelu", Builder("linear").in(BF16, {64, 128}).in(BF16, {96, 128}).in(BF16, {96})
                              .out(BF16, {64, 96}).i("transpose_b", 1).s("epilogue", "gelu_tanh"),
      1e-4);
  add("linear_f16_relu", Builder("linear").in(F16, {64, 128}).in(F16, {96, 128}).in(F16, {96}).out(F16, {64, 96})
                             .i("transpose_b", 1).s("epilogue", "relu"),
      1e-5);
  add("transpose", Builder("transpose").in(F32, {3, 4, 5, 6}).out(F32, {6, 3, 5, 4}).ints("perm", {3, 0, 2, 1}), kExact);
  add("transpose_2d_tiled", Builder("transpose").in(F32, {70, 33}).out(F32, {33, 70}).ints("perm", {1, 0}), kExact);
  add("transpose_batched_2d", Builder("transpose").in(F16, {3, 40, 50}).out(F16, {3, 50, 40}).ints("perm", {0, 2, 1}),
      kExact);
  add("transpose_e4m3", Builder("transpose").in(F8E4M3FN, {33, 65}, "bytes").out(F8E4M3FN, {65, 33}).ints("perm", {1, 0}),
      kExact);
  add("expand", Builder("expand").in(F32, {3, 1, 5}).out(F32, {2, 3, 4, 5}), kExact);
  add("concat", Builder("concat").in(F32, {2, 3, 4}).in(F32, {2, 5, 4}).out(F32, {2, 8, 4}).i("axis", 1), kExact);
  add("split", Builder("split").in(F32, {6, 10}).out(F32, {6, 3}).out(F32, {6, 7}).i("axis", 1), kExact);
  add("slice", Builder("slice").in(F32, {10, 12}).out(F32, {3, 5}).ints("starts", {1, 11}).ints("steps", {3, -2}), kExact);
  add("gather_rows", Builder("gather").in(F32, {50, 16}).in(I64, {7, 3}, "labels").out(F32, {7, 3, 16}).i("axis", 0),
      kExact);
  add("gather_axis1_i32", Builder("gather").in(F32, {4, 50, 3}).in(I32, {5}, "labels").out(F32, {4, 5, 3}).i("axis", 1),
      kExact);
  add("copy", Builder("copy").in(F32, {100}).out(F32, {100}), kExact);
  add("one_hot", Builder("one_hot").in(I64, {20}, "labels").out(F32, {20, 50}), kExact);
  add("all_finite", Builder("all_finite").in(F32, {100}).in(F32, {7}, "nan").out(BOOL, {}), kExact);
  add("clip_coefficient", Builder("clip_coefficient").in(F32, {}, "positive").out(F32, {}).f("max_norm", 0.25), kF32);
  add("loss_scale_update", Builder("loss_scale_update").in(F32, {}, "positive").in(F32, {}, "zero").in(BOOL, {}, "bool")
                               .out(F32, {}).out(F32, {}).i("growth_interval", 1),
      kExact);
  add("lr_schedule", Builder("lr_schedule").in(F32, {}, "step").in(F32, {}, "positive").out(F32, {}).s("schedule", "cosine")
                         .i("warmup_steps", 3).i("total_steps", 100),
      kF32);
  for (auto [name, format] : {std::pair{"e4m3", F8E4M3FN}, std::pair{"e5m2", F8E5M2}}) {
    add(std::string("quantize_") + name, Builder("quantize").in(F32, {4097}, "wide").in(F32, {}, "scale").out(format, {4097}),
        kExact);
    add(std::string("dequantize_") + name, Builder("dequantize").in(format, {4097}, "bytes").in(F32, {}, "positive")
                                               .out(F32, {4097}),
        kExact);
  }
  add("amax", Builder("amax").in(F32, {100003}, "wide").out(F32, {}), kExact);
  // tec-fuse-quantize's fused ops: GELU + amax + quantize, LayerNorm + amax + quantize, from bf16 inputs
  // (a value on an FP8 rounding boundary may round to the neighbouring code where the GPU's f32 differs
  // in its last bit: 2^-4 relative, on a few elements).
  add("cast_fp8_gelu",
      Builder("cast_fp8").in(BF16, {64, 256}).in(F32, {}, "scale").out(F8E4M3FN, {64, 256}).out(F32, {})
          .s("activation", "gelu"),
      1e-3);
  add("layer_norm_fp8",
      Builder("layer_norm_fp8").in(BF16, {32, 512}).in(BF16, {512}).in(BF16, {512}).in(F32, {}, "scale")
          .out(F8E4M3FN, {32, 512}).out(F32, {}).out(F32, {32, 1}).out(F32, {32, 1}).i("axis", 1).f("epsilon", 1e-5),
      1e-3);
  add("cast_fp8_dbias",
      Builder("cast_fp8_dbias").in(BF16, {300, 96}).in(F32, {}, "scale").out(F8E5M2, {300, 96}).out(F32, {})
          .out(F32, {96}),
      1e-3);
  add("quantize_bf16_input", Builder("quantize").in(BF16, {999}).in(F32, {}, "scale").out(F8E4M3FN, {999}), kExact);
  // Block scaling (1x128 of a [10, 300] activation: partial blocks at the end) and its columnwise copy read
  // transposed, 128x128 weight tiles, MXFP8's 1x32 E8M0 blocks of a bf16 tensor; current scaling's scale.
  add("quantize_blocks_1x128", Builder("quantize_blocks").in(F32, {10, 300}).out(F8E4M3FN, {10, 300}).out(F32, {10, 3})
                                   .ints("block", {1, 128}).s("scale_type", "pow2"), kExact);
  add("quantize_blocks_columnwise", Builder("quantize_blocks").in(F32, {300, 10}).out(F8E4M3FN, {10, 300})
                                        .out(F32, {10, 3}).ints("block", {1, 128}).s("scale_type", "f32").i("transpose_input", 1),
      kExact);
  add("quantize_blocks_128x128", Builder("quantize_blocks").in(F32, {200, 256}).out(F8E4M3FN, {200, 256})
                                     .out(F32, {2, 2}).ints("block", {128, 128}).s("scale_type", "pow2"), kExact);
  add("quantize_blocks_mxfp8_bf16", Builder("quantize_blocks").in(BF16, {33, 96}).out(F8E4M3FN, {33, 96})
                                        .out(F32, {33, 3}).ints("block", {1, 32}).s("scale_type", "e8m0"), kExact);
  add("current_scaling", Builder("current_scaling").in(F32, {}, "positive").out(F32, {}).out(F32, {})
                             .f("fp8_max", 57344.0).i("pow2_scales", 1), kExact);
  add("delayed_scaling", Builder("delayed_scaling").in(F32, {16}, "positive").in(F32, {}, "positive").in(F32, {}, "positive")
                             .out(F32, {16}).out(F32, {}).out(F32, {}).i("margin", 1).f("fp8_max", 448.0),
      kExact);
  add("delayed_scaling_recent", Builder("delayed_scaling").in(F32, {1024}, "positive").in(F32, {}, "positive")
                                    .in(F32, {}, "positive").out(F32, {1024}).out(F32, {}).out(F32, {})
                                    .s("algo", "most_recent").f("fp8_max", 57344.0),
      kExact);
  // The fused optimizer: AdamW with clipping and loss-scaling's finite flag, SGD with Nesterov momentum.
  add("optimizer_adamw",
      Builder("optimizer_update").in(F32, {3000}).in(F32, {3000}).in(F32, {3000}).in(F32, {3000}, "positive")
          .in(F32, {}, "positive").in(F32, {}, "step").in(F32, {}, "positive").in(BOOL, {}, "true")
          .out(F32, {3000}).out(F32, {3000}).out(F32, {3000}).s("optimizer", "adamw").f("weight_decay", 0.01)
          .ints("operandSegmentSizes", {1, 1, 2, 1, 1, 1, 1}),
      kF32);
  add("optimizer_sgd_nesterov",
      Builder("optimizer_update").in(F32, {77}).in(F32, {77}).in(F32, {77}).in(F32, {}, "positive")
          .in(F32, {}, "step").out(F32, {77}).out(F32, {77}).s("optimizer", "sgd").f("momentum", 0.9)
          .i("nesterov", 1).ints("operandSegmentSizes", {1, 1, 1, 1, 1, 0, 0}),
      kF32);
  // The dgrad of a Linear + tanh GELU: the GEMM and the GELU gradient as one cuBLASLt DGELU GEMM.
  {
    Builder b("linear");
    b.in(F32, {64, 96}).in(F32, {128, 96}).temp(F32, {64, 128}).i("transpose_b", 1);
    int d = b.last;
    b.then("gelu_grad").use(d).in(F32, {64, 128}).out(F32, {64, 128}).s("approximate", "tanh");
    add("linear_dgelu", std::move(b), kGemm + kDGeluEpilogue);
  }
  {
    // The same with another step in between (as wgrad GEMMs sit between a dgrad and its GELU gradient).
    Builder b("linear");
    b.in(F32, {32, 64}).in(F32, {48, 64}).temp(F32, {32, 48}).i("transpose_b", 1);
    int d = b.last;
    b.then("relu").in(F32, {500}).out(F32, {500});
    b.then("gelu_grad").use(d).in(F32, {32, 48}).out(F32, {32, 48}).s("approximate", "tanh");
    add("linear_dgelu_later", std::move(b), kGemm + kDGeluEpilogue);
  }
  // The forward Linear + tanh GELU of a training step, the pre-activation kept for the backward pass:
  // one GELU_AUX_BIAS GEMM writing both.
  {
    Builder b("linear");
    b.in(F32, {64, 96}).in(F32, {128, 96}).in(F32, {128}).out(F32, {64, 128}).i("transpose_b", 1);
    int h = b.variant.outputs(0);
    b.then("gelu").use(h).out(F32, {64, 128}).s("approximate", "tanh");
    add("linear_gelu_aux_bias", std::move(b), kGemm + kGeluEpilogue);
  }
  // A wgrad GEMM dW = dYᵀ·X and the bias gradient, the sum of dY's rows: one BGRADB GEMM.
  {
    Builder b("transpose");
    b.in(F32, {64, 48}).temp(F32, {48, 64}).ints("perm", {1, 0});
    int dy = b.variant.inputs(0), dyT = b.last;
    b.then("linear").use(dyT).in(F32, {64, 32}).out(F32, {48, 32});
    b.then("reduce_sum").use(dy).out(F32, {48}).ints("axes", {0});
    add("wgrad_bgradb", std::move(b), kGemm);
  }
  // The same in a BF16 variant (dYᵀ cast to bf16 for the GEMM): cuBLASLt's bias gradient is bf16 there.
  {
    Builder b("transpose");
    b.in(F32, {64, 48}).temp(F32, {48, 64}).ints("perm", {1, 0});
    int dy = b.variant.inputs(0), dyT = b.last;
    b.then("cast").use(dyT).temp(BF16, {48, 64});
    int dyT16 = b.last;
    b.then("linear").use(dyT16).in(BF16, {64, 32}).out(BF16, {48, 32});
    b.then("reduce_sum").use(dy).out(F32, {48}).ints("axes", {0});
    add("wgrad_bgradb_bf16", std::move(b), 1e-4);
  }
  // A backward GEMM's TN operand: transpose, amax, quantize, which the CUDA backend runs as one pass.
  {
    Builder b("transpose");
    b.in(F32, {200, 96}, "wide").temp(F32, {96, 200}).ints("perm", {1, 0});
    int t = b.last;
    b.then("amax").use(t).out(F32, {}).then("quantize").use(t).in(F32, {}, "scale").out(F8E5M2, {96, 200});
    add("transpose_amax_quantize", std::move(b), kExact);
  }
  // Current scaling: the tensor's amax, its scale, its quantize, which the CUDA backend runs as the amax and
  // one quantize launch computing the scale; the same scale, scale_inv and codes.
  {
    Builder b("amax");
    b.in(F32, {5000}, "wide").temp(F32, {});
    const int x = 0, amax = b.last;
    b.then("current_scaling").use(amax).temp(F32, {}).out(F32, {}).f("fp8_max", 448.0).i("pow2_scales", 1);
    const int scale = b.last;
    b.then("quantize").use(x).use(scale).out(F8E4M3FN, {5000});
    add("current_scaling_quantize", std::move(b), kExact);
  }
  {
    Builder b("amax");
    b.in(BF16, {96, 200}).temp(F32, {});
    const int x = 0, amax = b.last;
    b.then("current_scaling").use(amax).temp(F32, {}).out(F32, {}).f("fp8_max", 57344.0);
    const int scale = b.last;
    b.then("quantize").use(x).use(scale).out(F8E5M2, {200, 96}).i("transpose_input", 1);
    add("current_scaling_quantize_transposed", std::move(b), kExact);
  }
  // FP8 GEMMs: both sides multiply the same FP8 values; the GPU accumulates in another order.
  add("fp8_gemm_forward", Builder("fp8_gemm").in(F8E4M3FN, {64, 128}, "fp8").in(F8E4M3FN, {96, 128}, "fp8")
                              .in(F32, {}, "positive").in(F32, {}, "positive").in(F32, {96}).out(F32, {64, 96})
                              .i("transpose_b", 1).s("epilogue", "gelu_tanh"),
      fp8FastAccumBound(128) + kGeluEpilogue);
  // Not multiples of 16: no FP8 tensor-core GEMM; widened exactly, FP32 GEMM, narrowed to bf16.
  add("fp8_gemm_odd_shape_bf16", Builder("fp8_gemm").in(F8E4M3FN, {10, 24}, "fp8").in(F8E4M3FN, {7, 24}, "fp8")
                                     .in(F32, {}, "positive").in(F32, {}, "positive").in(BF16, {7}).out(BF16, {10, 7})
                                     .i("transpose_b", 1).s("epilogue", "relu"),
      1e-4);
  add("fp8_gemm_dgrad_kn", Builder("fp8_gemm").in(F8E5M2, {64, 96}, "fp8").in(F8E4M3FN, {96, 128}, "fp8")
                               .in(F32, {}, "positive").in(F32, {}, "positive").out(F32, {64, 128})
                               .s("tec.gemm_role", "dgrad"),
      1e-8);
  // Block-scaled FP8 GEMMs (tec's kernel and its cpu twin): the same sums in the same order, bit for bit;
  // partial blocks and tiles at every edge. Block scaling's 1x128 activation x 128x128 weight tiles (read
  // transposed), and MXFP8's 1x32 x 32x1 of a [K, N] weight into bf16.
  add("fp8_block_gemm_1x128_128x128",
      Builder("fp8_block_gemm").in(F8E4M3FN, {130, 300}, "fp8").in(F8E4M3FN, {200, 300}, "fp8")
          .in(F32, {130, 3}, "positive").in(F32, {2, 3}, "positive").in(F32, {200}).out(F32, {130, 200})
          .ints("input_block", {1, 128}).ints("weight_block", {128, 128}).i("transpose_b", 1).s("epilogue", "relu"),
      kExact);
  // The same on cuBLASLt's block scale modes (Hopper, cuBLASLt 12.9): whole K blocks, both operands K-major.
  // cuBLASLt sums each 128-block on the tensor cores and promotes it: no fast accumulation's error over k.
  add("fp8_block_gemm_1x128_128x128_cublaslt",
      Builder("fp8_block_gemm").in(F8E4M3FN, {256, 512}, "fp8").in(F8E4M3FN, {384, 512}, "fp8")
          .in(F32, {256, 4}, "positive").in(F32, {3, 4}, "positive").in(F32, {384}).out(F32, {256, 384})
          .ints("input_block", {1, 128}).ints("weight_block", {128, 128}).i("transpose_b", 1).s("epilogue", "relu"),
      fp8FastAccumBound(128));
  add("fp8_block_gemm_1x128_1x128_bf16_cublaslt",
      Builder("fp8_block_gemm").in(F8E4M3FN, {128, 256}, "fp8").in(F8E4M3FN, {64, 256}, "fp8")
          .in(F32, {128, 2}, "positive").in(F32, {64, 2}, "positive").out(BF16, {128, 64})
          .ints("input_block", {1, 128}).ints("weight_block", {1, 128}).i("transpose_b", 1),
      fp8FastAccumBound(128));
  add("fp8_block_gemm_mxfp8_bf16",
      Builder("fp8_block_gemm").in(F8E4M3FN, {33, 96}, "fp8").in(F8E5M2, {96, 40}, "fp8")
          .in(F32, {33, 3}, "positive").in(F32, {3, 40}, "positive").in(BF16, {40}).out(BF16, {33, 40})
          .ints("input_block", {1, 32}).ints("weight_block", {32, 1}),
      kExact);
}

// The CUDA backend's fusion decisions, read from its own launch sequence (--emit=cuda's source, made
// without a GPU, with cuBLASLt's type rules standing in for cuBLASLt): each multi-step case must become
// the fused launch it exists to test, and what must not fuse must not.
struct FusionExpectation {
  std::string name, present, absent;
};
const std::vector<FusionExpectation> &fusionExpectations() {
  static const std::vector<FusionExpectation> all = {
      {"linear_dgelu", "kc::GemmEpilogue::DGelu", "kc::activationGrad"},
      {"linear_dgelu_later", "kc::GemmEpilogue::DGelu", "kc::activationGrad"},
      {"linear_gelu_aux_bias", "kc::GemmEpilogue::GeluAuxBias", "kc::unary"},
      // dW = dYᵀ·X reads dY through transposeA (no transpose launched) and sums the bias gradient.
      {"wgrad_bgradb", "true, false, ElementType::F32, ElementType::F32, ElementType::F32, ElementType::F32, "
                       "kc::GemmEpilogue::BGradB",
       "kc::stridedCopy"},
      {"wgrad_bgradb_bf16", "ElementType::BF16, ElementType::BF16, ElementType::BF16, ElementType::BF16, "
                            "kc::GemmEpilogue::BGradB",
       "kc::stridedCopy"},
      {"transpose_amax_quantize", "kc::quantizeTransposedWithAmax", "kc::stridedCopy"},
      {"current_scaling_quantize", "kc::quantizeCurrentScaled", "kc::currentScaling"},
      {"current_scaling_quantize_transposed", "kc::quantizeTransposedCurrentScaled", "kc::currentScaling"},
      {"linear_gelu_tanh", "kc::GemmEpilogue::GeluBias", "kc::biasActivation"},
      // ReLU stays in tec's kernel (NaN), after the plain GEMM.
      {"linear_relu", "Epilogue::Relu", "kc::GemmEpilogue::ReluBias"},
      // TN FP8, fused epilogue with cuBLASLt's BF16 bias (rounded from the plan's f32), fast accumulation.
      {"fp8_gemm_forward", "ElementType::F8E4M3, ElementType::F8E4M3, ElementType::F32, ElementType::BF16, "
                           "kc::GemmEpilogue::GeluBias, true",
       "kc::biasActivation"},
      {"fp8_gemm_dgrad_kn", "ElementType::F8E5M2, ElementType::F8E4M3, ElementType::F32, ElementType::F32, "
                            "kc::GemmEpilogue::Default, false", // no fast accumulation for gradients
       ""},
      {"fp8_block_gemm_1x128_128x128", "kc::fp8BlockGemm", "runGemm(*gemms"},
      // The second batch's B sits 140 bytes in, C 168: 4- and 8-byte alignment, told to the heuristics.
      {"matmul_broadcast_odd", ", 256, 4, 8)", ""},
  };
  return all;
}

void fill(const std::string &how, const plan::Buffer &b, void *data, std::mt19937 &rng) {
  const int64_t n = b.bytes() / dtypeBytes(b.dtype());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), label(0, 4);
  auto value = [&](int64_t i) -> float {
    if (how == "positive")
      return std::fabs(normal(rng)) + 0.1f;
    if (how == "unit") // inside asin's and atanh's domain
      return 0.95f * std::tanh(normal(rng));
    if (how == "two")
      return 2.0f;
    if (how == "zero")
      return 0.0f;
    if (how == "wide")
      return normal(rng) * 300.0f;
    if (how == "scale")
      return 3.5f;
    if (how == "quarter") // an FP8 tensor's scale_inv
      return 0.25f;
    if (how == "probs_scale") // the softmax probabilities' FP8 scale and its inverse (amax 1: 448 / 1)
      return 448.0f;
    if (how == "probs_scale_inv")
      return 1.0f / 448.0f;
    if (how == "step")
      return 42.0f;
    if (how == "true")
      return 1.0f;
    if (how == "nan")
      return i == n / 2 ? NAN : normal(rng);
    if (how == "integers") // ties for comparisons
      return static_cast<float>(label(rng) - 2);
    return normal(rng);
  };
  // Integers are small positive labels, or "signed": -2..2 (remainders of both signs, and by zero).
  auto integer = [&] { return how == "signed" ? label(rng) - 2 : label(rng) + 1; };
  for (int64_t i = 0; i < n; ++i) {
    switch (b.dtype()) {
    case plan::F32: static_cast<float *>(data)[i] = value(i); break;
    case plan::F16: static_cast<uint16_t *>(data)[i] = kernels::floatToF16(value(i)); break;
    case plan::BF16: static_cast<uint16_t *>(data)[i] = kernels::floatToBf16(value(i)); break;
    case plan::I32: static_cast<int32_t *>(data)[i] = integer(); break;
    case plan::I64: static_cast<int64_t *>(data)[i] = integer(); break;
    case plan::BOOL: static_cast<uint8_t *>(data)[i] = how == "true" ? 1 : byte(rng) & 1; break;
    default: {
      // FP8 operands: any byte but NaN codes; "fp8" keeps them moderate so products stay finite.
      uint8_t v;
      do
        v = static_cast<uint8_t>(byte(rng));
      while ((v & 0x7F) == 0x7F || (b.dtype() == plan::F8E5M2 && (v & 0x7C) == 0x7C));
      if (how == "fp8")
        v = kernels::floatToFp8(normal(rng), b.dtype() == plan::F8E5M2 ? kernels::Fp8Format::E5M2
                                                                         : kernels::Fp8Format::E4M3);
      static_cast<uint8_t *>(data)[i] = v;
    }
    }
  }
}

double toDouble(plan::DType t, const void *p, int64_t i) {
  switch (t) {
  case plan::F32: return static_cast<const float *>(p)[i];
  case plan::F16: return kernels::f16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case plan::BF16: return kernels::bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case plan::I32: return static_cast<const int32_t *>(p)[i];
  case plan::I64: return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case plan::F8E4M3FN: return kernels::fp8ToFloat(static_cast<const uint8_t *>(p)[i], kernels::Fp8Format::E4M3);
  case plan::F8E5M2: return kernels::fp8ToFloat(static_cast<const uint8_t *>(p)[i], kernels::Fp8Format::E5M2);
  default: return static_cast<const uint8_t *>(p)[i];
  }
}

/// Normalized MSE of `actual` against `expected` (both NaN counts as equal).
double nmse(plan::DType t, const void *expected, const void *actual, int64_t n) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    double e = toDouble(t, expected, i), a = toDouble(t, actual, i);
    if (std::isnan(e) && std::isnan(a))
      continue;
    err += (e - a) * (e - a);
    ref += e * e;
  }
  return std::isnan(err) ? INFINITY : err / std::max(ref, 1e-30);
}

class BackendParity : public ::testing::TestWithParam<size_t> {};

/// The CUDA backend, or why there is none (the test is then skipped).
Result<std::unique_ptr<Backend>> cudaBackend(bool useGraphs = true) {
  CudaBackendOptions options;
  options.useGraphs = useGraphs;
  return createCudaBackend(options);
}

TEST_P(BackendParity, CudaMatchesTheCpu) {
  buildCases();
  const Case &c = cases()[GetParam()];
  auto cuda = cudaBackend();
  if (!cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  auto cpu = createCpuBackend(0); // every core: the same bits at any thread count, and TE's shapes are large
  static const char noData[256] = {};
  ASSERT_TRUE(cpu->prepare(c.variant, noData).ok());
  Status prepared = (*cuda)->prepare(c.variant, noData);
  ASSERT_TRUE(prepared.ok()) << prepared.message();
  std::mt19937 rng(1234);
  for (int i = 0; i < c.variant.inputs_size(); ++i) {
    int b = c.variant.inputs(i);
    fill(c.fills[i], c.variant.buffers(b), cpu->hostData(b), rng);
    std::memcpy((*cuda)->hostData(b), cpu->hostData(b), c.variant.buffers(b).bytes());
  }
  Status cpuRun = cpu->run(), cudaRun = (*cuda)->run();
  ASSERT_TRUE(cpuRun.ok()) << cpuRun.message();
  ASSERT_TRUE(cudaRun.ok()) << cudaRun.message();
  // A fusion the rules promise must really happen on this GPU; cuBLASLt refusing one means the rules are wrong.
  const bool mustFuse = std::any_of(fusionExpectations().begin(), fusionExpectations().end(),
                                    [&](const FusionExpectation &e) { return e.name == c.name; });
  // A case named for cuDNN or cuBLASLt measures that library: tec's fallback kernels running it (a note
  // saying so) fail it.
  auto namedFor = [&](const std::string &suffix) {
    return c.name.size() > suffix.size() && c.name.compare(c.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const char *library = namedFor("_cudnn") ? "cuDNN" : namedFor("_cublaslt") ? "cuBLASLt" : nullptr;
  for (const std::string &line : (*cuda)->notes()) {
    EXPECT_EQ(line.find("refused"), std::string::npos) << c.name << ": " << line;
    EXPECT_FALSE(mustFuse) << c.name << " did not fuse: " << line;
    EXPECT_FALSE(library && line.find("tec's") != std::string::npos)
        << c.name << " is a " << library << " case, but " << library << " did not run it: " << line;
  }
  for (int o : c.variant.outputs()) {
    const auto &b = c.variant.buffers(o);
    const void *expected = cpu->hostData(o), *actual = (*cuda)->hostData(o);
    if (c.maxError == 0) {
      EXPECT_EQ(std::memcmp(expected, actual, b.bytes()), 0) << c.name << ": output " << b.name() << " differs";
    } else {
      double error = nmse(b.dtype(), expected, actual, b.bytes() / dtypeBytes(b.dtype()));
      const auto looser = c.looser.find(b.name());
      EXPECT_LE(error, looser == c.looser.end() ? c.maxError : looser->second) << c.name << ": output " << b.name();
    }
  }
}

// Every case is a valid plan step: the reference side runs it (this part needs no GPU). Transformer Engine's
// layer shapes are not among these (minutes on a small machine's CPU): CudaMatchesTheCpu runs them, where a
// GPU is; a skip here would read, on a GPU machine, as a GPU check that did not run.
class ReferenceRuns : public ::testing::TestWithParam<size_t> {};

TEST_P(ReferenceRuns, TheCpuRunsIt) {
  buildCases();
  const Case &c = cases()[GetParam()];
  auto cpu = createCpuBackend(1);
  static const char noData[256] = {};
  Status prepared = cpu->prepare(c.variant, noData);
  ASSERT_TRUE(prepared.ok()) << prepared.message();
  std::mt19937 rng(1234);
  for (int i = 0; i < c.variant.inputs_size(); ++i)
    fill(c.fills[i], c.variant.buffers(c.variant.inputs(i)), cpu->hostData(c.variant.inputs(i)), rng);
  Status ran = cpu->run();
  EXPECT_TRUE(ran.ok()) << ran.message();
}

// (Checked without a GPU from the launch sequence; on a GPU, CudaMatchesTheCpu checks the notes.)
TEST(CudaFusions, EachFusedCaseBecomesOneFusedLaunch) {
  buildCases();
  for (const auto &e : fusionExpectations()) {
    auto it = std::find_if(cases().begin(), cases().end(), [&](const Case &c) { return c.name == e.name; });
    ASSERT_NE(it, cases().end()) << e.name;
    plan::Variant v = it->variant;
    v.set_target("sm_90");
    auto source = cudaProgramSource(v, e.name);
    if (!source.ok())
      GTEST_SKIP() << "no CUDA plugin here: " << source.error().message();
    EXPECT_NE(source->find(e.present), std::string::npos) << e.name << ": expected " << e.present << " in\n" << *source;
    if (!e.absent.empty())
      EXPECT_EQ(source->find(e.absent), std::string::npos) << e.name << ": expected no " << e.absent << " in\n"
                                                           << *source;
  }
}

/// The cases' indices: all, or those the CPU runs in seconds (not Transformer Engine's layer shapes).
// The CUDA backend's schedule (Backend::computedBy, foldedAs; tec inspect --schedule on a GPU machine) names
// each fold its launch sequence makes, as the program --emit=cuda writes says (checked without a GPU).
TEST(CudaFusions, TheScheduleNamesEachFold) {
  buildCases();
  const std::pair<const char *, const char *> folds[] = {
      {"linear_gelu_aux_bias", "in step 0: its epilogue (cuBLASLt's GELU_AUX)"},
      {"linear_dgelu", "in step 0: its epilogue (cuBLASLt's DGELU)"},
      {"wgrad_bgradb", "its epilogue (cuBLASLt's BGRADB: the bias gradient)"},
      {"wgrad_bgradb", "step 0: transpose (parity), in step 1: the GEMM reads the untransposed input"},
      {"transpose_amax_quantize", "step 0: transpose (parity), in step 2: the quantize reads the untransposed source"},
      {"transpose_amax_quantize", "step 1: amax (parity), in step 2: the quantize takes the amax in the same pass"}};
  for (const auto &[name, fold] : folds) {
    auto it = std::find_if(cases().begin(), cases().end(), [&](const Case &c) { return c.name == name; });
    ASSERT_NE(it, cases().end()) << name;
    plan::Variant v = it->variant;
    v.set_target("sm_90");
    auto source = cudaProgramSource(v, name);
    if (!source.ok())
      GTEST_SKIP() << "no CUDA plugin here: " << source.error().message();
    EXPECT_NE(source->find(fold), std::string::npos) << name << ": expected '" << fold << "' in\n" << *source;
  }
}

std::vector<size_t> caseIndices(bool quickOnCpu) {
  buildCases();
  std::vector<size_t> v;
  for (size_t i = 0; i < cases().size(); ++i)
    if (!quickOnCpu || cases()[i].name.find("te_layer") == std::string::npos)
      v.push_back(i);
  return v;
}

std::string caseName(const ::testing::TestParamInfo<size_t> &info) { return cases()[info.param].name; }

INSTANTIATE_TEST_SUITE_P(EveryOp, BackendParity, ::testing::ValuesIn(caseIndices(false)), caseName);
INSTANTIATE_TEST_SUITE_P(EveryOp, ReferenceRuns, ::testing::ValuesIn(caseIndices(true)), caseName);

TEST(CudaBackend, GraphReplayEqualsStepByStepLaunches) {
  buildCases();
  auto graphs = cudaBackend(true), eager = cudaBackend(false);
  if (!graphs.ok())
    GTEST_SKIP() << "no CUDA backend here: " << graphs.error().message();
  const Case &c = cases().front();
  static const char noData[256] = {};
  ASSERT_TRUE((*graphs)->prepare(c.variant, noData).ok());
  ASSERT_TRUE((*eager)->prepare(c.variant, noData).ok());
  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) { // eager, captured, then replayed on new inputs
    for (int i = 0; i < c.variant.inputs_size(); ++i) {
      int b = c.variant.inputs(i);
      fill(c.fills[i], c.variant.buffers(b), (*graphs)->hostData(b), rng);
      std::memcpy((*eager)->hostData(b), (*graphs)->hostData(b), c.variant.buffers(b).bytes());
    }
    ASSERT_TRUE((*graphs)->run().ok());
    ASSERT_TRUE((*eager)->run().ok());
    int o = c.variant.outputs(0);
    EXPECT_EQ(std::memcmp((*graphs)->hostData(o), (*eager)->hostData(o), c.variant.buffers(o).bytes()), 0);
  }
  for (const std::string &line : (*graphs)->notes())
    ADD_FAILURE() << "the graph was not captured: " << line;
}

// A launch that fails inside the graph capture ends the capture, marks the graph failed with a note, and the
// run (and every later one) goes on step by step with the right results (TEC_TEST_FAIL_IN_CAPTURE fails the
// middle launch of the step while it is being captured).
TEST(CudaBackend, AFailureInsideTheCaptureFallsBackToStepByStep) {
  buildCases();
  auto graphs = cudaBackend(true), eager = cudaBackend(false);
  if (!graphs.ok())
    GTEST_SKIP() << "no CUDA backend here: " << graphs.error().message();
  setenv("TEC_TEST_FAIL_IN_CAPTURE", "1", 1);
  const Case &c = cases().front();
  static const char noData[256] = {};
  ASSERT_TRUE((*graphs)->prepare(c.variant, noData).ok());
  ASSERT_TRUE((*eager)->prepare(c.variant, noData).ok());
  std::mt19937 rng(11);
  for (int round = 0; round < 4; ++round) { // eager, the failed capture, then step by step
    for (int i = 0; i < c.variant.inputs_size(); ++i) {
      int b = c.variant.inputs(i);
      fill(c.fills[i], c.variant.buffers(b), (*graphs)->hostData(b), rng);
      std::memcpy((*eager)->hostData(b), (*graphs)->hostData(b), c.variant.buffers(b).bytes());
    }
    Status run = (*graphs)->run();
    ASSERT_TRUE(run.ok()) << "round " << round << ": " << run.message();
    ASSERT_TRUE((*eager)->run().ok());
    int o = c.variant.outputs(0);
    EXPECT_EQ(std::memcmp((*graphs)->hostData(o), (*eager)->hostData(o), c.variant.buffers(o).bytes()), 0);
  }
  unsetenv("TEC_TEST_FAIL_IN_CAPTURE");
  const auto &notes = (*graphs)->notes();
  EXPECT_EQ(std::count_if(notes.begin(), notes.end(),
                          [](const std::string &n) { return n.find("TEC_TEST_FAIL_IN_CAPTURE") != std::string::npos; }),
            1)
      << "expected one note of the failed capture";
}

// cuDNN frontend 1.x selects a deterministic FP8 attention backward only on compute capability 10: on this GPU
// the backward must still give the same dQ, dK, dV and amaxes on every run (training is reproducible).
TEST(CudaBackend, CudnnFp8AttentionBackwardIsDeterministic) {
  buildCases();
  auto cuda = cudaBackend();
  if (!cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  auto it = std::find_if(cases().begin(), cases().end(),
                         [](const Case &c) { return c.name == "attention_fp8_noncausal_cudnn"; });
  ASSERT_NE(it, cases().end());
  static const char noData[256] = {};
  ASSERT_TRUE((*cuda)->prepare(it->variant, noData).ok());
  std::mt19937 rng(5);
  for (int i = 0; i < it->variant.inputs_size(); ++i)
    fill(it->fills[i], it->variant.buffers(it->variant.inputs(i)), (*cuda)->hostData(it->variant.inputs(i)), rng);
  std::vector<std::vector<char>> first;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*cuda)->run().ok());
    for (int k = 0; k < it->variant.outputs_size(); ++k) {
      const int o = it->variant.outputs(k);
      const char *bytes = static_cast<const char *>((*cuda)->hostData(o));
      std::vector<char> now(bytes, bytes + it->variant.buffers(o).bytes());
      if (round == 0)
        first.push_back(std::move(now));
      else
        EXPECT_TRUE(now == first[k]) << "output " << it->variant.buffers(o).name() << " differs on run " << round + 1;
    }
  }
}

/// cuDNN's FP8 attention forward alone, then its backward alone on the CPU forward's own output and
/// logsumexp: the chained cases above feed each backend's backward its own forward, so a difference there
/// may come from either half; here each half is measured on the same inputs. Every output's normalized
/// error is printed (the GPU check's log keeps it), failing or not.
TEST(CudaBackend, CudnnFp8AttentionHalvesMatchTheCpuOnTheSameInputs) {
  if (auto cuda = cudaBackend(); !cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  for (bool causal : {true, false}) {
    const Shape q{1, 4, 128, 128}, stats{1, 4, 128};
    Builder fwd("attention_fp8");
    fwd.in(F8E4M3FN, q, "fp8").in(F8E4M3FN, q, "fp8").in(F8E4M3FN, q, "fp8");
    fwd.in(F32, {}, "quarter").in(F32, {}, "quarter").in(F32, {}, "quarter");
    fwd.in(F32, {}, "probs_scale").in(F32, {}, "probs_scale_inv").in(F32, {}, "scale");
    fwd.out(F8E4M3FN, q).out(F32, stats).out(F32, {}).out(F32, {}).f("scale", 0.125).i("causal", causal);
    Builder bwd("attention_fp8_grad");
    bwd.in(F8E5M2, q, "fp8").in(F8E4M3FN, q, "fp8").in(F8E4M3FN, q, "fp8").in(F8E4M3FN, q, "fp8");
    bwd.in(F8E4M3FN, q, "fp8").in(F32, stats); // the forward's out and logsumexp, from the CPU below
    bwd.in(F32, {}, "quarter").in(F32, {}, "quarter").in(F32, {}, "quarter").in(F32, {}, "scale");
    bwd.in(F32, {}, "quarter").in(F32, {}, "probs_scale").in(F32, {}, "probs_scale_inv").in(F32, {}, "scale");
    bwd.in(F32, {}, "scale").in(F32, {}, "scale").in(F32, {}, "scale").in(F32, {}, "scale");
    bwd.out(F8E5M2, q).out(F8E5M2, q).out(F8E5M2, q).out(F32, {}).out(F32, {}).out(F32, {}).out(F32, {});
    bwd.f("scale", 0.125).i("causal", causal);
    static const char noData[256] = {};
    std::mt19937 rng(1234);
    auto cpuFwd = createCpuBackend(0), cpuBwd = createCpuBackend(0);
    auto cuda = cudaBackend(), cudaBwd = cudaBackend();
    ASSERT_TRUE(cuda.ok() && cudaBwd.ok());
    ASSERT_TRUE(cpuFwd->prepare(fwd.variant, noData).ok());
    ASSERT_TRUE((*cuda)->prepare(fwd.variant, noData).ok());
    ASSERT_TRUE(cpuBwd->prepare(bwd.variant, noData).ok());
    ASSERT_TRUE((*cudaBwd)->prepare(bwd.variant, noData).ok());
    auto copyInput = [](Backend &from, Backend &to, const plan::Variant &v, int i) {
      std::memcpy(to.hostData(v.inputs(i)), from.hostData(v.inputs(i)), v.buffers(v.inputs(i)).bytes());
    };
    for (int i = 0; i < fwd.variant.inputs_size(); ++i) {
      fill(fwd.fills[i], fwd.variant.buffers(fwd.variant.inputs(i)), cpuFwd->hostData(fwd.variant.inputs(i)), rng);
      copyInput(*cpuFwd, **cuda, fwd.variant, i);
    }
    ASSERT_TRUE(cpuFwd->run().ok());
    ASSERT_TRUE((*cuda)->run().ok());
    const std::string name = causal ? "causal" : "not causal";
    auto compare = [&](Backend &cpu, Backend &gpu, const plan::Variant &v, const char *half, const char *names[]) {
      for (int k = 0; k < v.outputs_size(); ++k) {
        const auto &b = v.buffers(v.outputs(k));
        const double error = nmse(b.dtype(), cpu.hostData(v.outputs(k)), gpu.hostData(v.outputs(k)),
                                  b.bytes() / dtypeBytes(b.dtype()));
        std::printf("cuDNN FP8 attention %s (%s): %s normalized MSE %.3g\n", half, name.c_str(), names[k], error);
        EXPECT_LE(error, 4e-3) << half << " (" << name << "): " << names[k];
      }
    };
    const char *forwardNames[] = {"out", "logsumexp", "amax of p", "amax of out"};
    compare(*cpuFwd, **cuda, fwd.variant, "forward", forwardNames);
    // The backward's inputs: the forward's q, k, v and scales, its CPU out and logsumexp, a seeded dout.
    const int fromForward[][2] = {{1, 0}, {2, 1}, {3, 2}, {6, 3}, {7, 4}, {8, 5}, {11, 6}, {12, 7}};
    for (int i = 0; i < bwd.variant.inputs_size(); ++i)
      fill(bwd.fills[i], bwd.variant.buffers(bwd.variant.inputs(i)), cpuBwd->hostData(bwd.variant.inputs(i)), rng);
    for (const auto &pair : fromForward)
      std::memcpy(cpuBwd->hostData(bwd.variant.inputs(pair[0])), cpuFwd->hostData(fwd.variant.inputs(pair[1])),
                  bwd.variant.buffers(bwd.variant.inputs(pair[0])).bytes());
    for (int k = 0; k < 2; ++k) // out, logsumexp
      std::memcpy(cpuBwd->hostData(bwd.variant.inputs(4 + k)), cpuFwd->hostData(fwd.variant.outputs(k)),
                  bwd.variant.buffers(bwd.variant.inputs(4 + k)).bytes());
    for (int i = 0; i < bwd.variant.inputs_size(); ++i)
      copyInput(*cpuBwd, **cudaBwd, bwd.variant, i);
    ASSERT_TRUE(cpuBwd->run().ok());
    ASSERT_TRUE((*cudaBwd)->run().ok());
    for (const std::string &line : (*cudaBwd)->notes())
      EXPECT_EQ(line.find("tec's"), std::string::npos) << "cuDNN did not run the backward: " << line;
    const char *backwardNames[] = {"dq", "dk", "dv", "amax of dq", "amax of dk", "amax of dv", "amax of dP"};
    compare(*cpuBwd, **cudaBwd, bwd.variant, "backward", backwardNames);
  }
}

/// A one-step plan copying a 64 MiB state buffer (initialized from the plan's data) to an output.
plan::Variant stateCopyVariant(int64_t values) {
  plan::Variant v;
  v.set_target("cpu");
  v.set_precision("fp32");
  for (auto role : {plan::STATE, plan::OUTPUT}) {
    auto *b = v.add_buffers();
    b->set_name(role == plan::STATE ? "state" : "out");
    b->set_dtype(plan::F32);
    b->set_role(role);
    b->set_alias_of(-1);
    b->add_shape(values);
    b->set_bytes(values * 4);
    b->set_offset(role == plan::STATE ? 0 : values * 4);
    b->set_init_offset(0);
  }
  v.set_arena_bytes(2 * values * 4);
  auto *step = v.add_steps();
  step->set_kernel("copy");
  step->set_source("parity");
  step->add_inputs(0);
  step->add_outputs(1);
  v.add_outputs(1);
  return v;
}

// Params and state go up on the work stream and are there before the first step reads them; so does a
// state written between runs (checkpoint restore). Large enough that an unordered copy would show.
TEST(CudaBackend, UploadsAreOrderedBeforeTheStepsThatReadThem) {
  auto cuda = cudaBackend();
  if (!cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  const int64_t n = 16 << 20;
  plan::Variant v = stateCopyVariant(n);
  std::vector<float> data(n), restored(n);
  for (int64_t i = 0; i < n; ++i)
    data[i] = static_cast<float>(i % 1000003), restored[i] = -data[i];
  ASSERT_TRUE((*cuda)->prepare(v, reinterpret_cast<const char *>(data.data())).ok());
  ASSERT_TRUE((*cuda)->run().ok());
  EXPECT_EQ(std::memcmp((*cuda)->hostData(1), data.data(), n * 4), 0) << "the state's initial upload";
  ASSERT_TRUE((*cuda)->writeBuffer(0, restored.data()).ok());
  ASSERT_TRUE((*cuda)->run().ok());
  EXPECT_EQ(std::memcmp((*cuda)->hostData(1), restored.data(), n * 4), 0) << "a state written between runs";
}

// An input goes up when its storage was asked for since its last upload, and only then: unchanged
// inputs stay on the device (a benchmark times the step, as PyTorch's, not the copies).
TEST(CudaBackend, InputsGoUpOnlyWhenAskedFor) {
  auto cuda = cudaBackend();
  if (!cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  Builder b("copy");
  b.in(F32, {1000}).out(F32, {1000});
  static const char noData[256] = {};
  ASSERT_TRUE((*cuda)->prepare(b.variant, noData).ok());
  const int in = b.variant.inputs(0), out = b.variant.outputs(0);
  auto *x = static_cast<float *>((*cuda)->hostData(in));
  std::fill(x, x + 1000, 1.0f);
  ASSERT_TRUE((*cuda)->run().ok());
  EXPECT_EQ(static_cast<const float *>((*cuda)->hostData(out))[7], 1.0f);
  std::fill(x, x + 1000, 2.0f); // written through the old pointer, not asked for again: not uploaded
  ASSERT_TRUE((*cuda)->run().ok());
  EXPECT_EQ(static_cast<const float *>((*cuda)->hostData(out))[7], 1.0f);
  x = static_cast<float *>((*cuda)->hostData(in));
  std::fill(x, x + 1000, 3.0f);
  ASSERT_TRUE((*cuda)->run().ok());
  EXPECT_EQ(static_cast<const float *>((*cuda)->hostData(out))[7], 3.0f);
}

TEST(CudaBackend, AnOutOfRangeIndexIsAnErrorNotGarbage) {
  auto cuda = cudaBackend();
  if (!cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  Builder b("gather");
  b.in(F32, {5, 4}).in(I64, {3}, "labels").out(F32, {3, 4}).i("axis", 0);
  static const char noData[256] = {};
  ASSERT_TRUE((*cuda)->prepare(b.variant, noData).ok());
  auto *indices = static_cast<int64_t *>((*cuda)->hostData(b.variant.inputs(1)));
  indices[0] = 1, indices[1] = 9, indices[2] = 0;
  Status s = (*cuda)->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("an index is outside [-5, 5)"), std::string::npos) << s.message();
}

// Whole plans: the test models compiled for sm_90 (FP8), sm_80 (BF16) and the cpu (FP32), inference
// and three training steps, each variant on the CUDA backend against the same variant emulated on the
// CPU backend (same inputs, same state carried from step to step).
class ModelParity : public ::testing::TestWithParam<const char *> {};
constexpr const char *kModelPlanFlags = "--target sm_90,sm_80,cpu --train --loss mse"; // as tests/gpu/bundle.sh

/// The test model's plan (kModelPlanFlags): from TEC_TEST_PLANS, a folder of them compiled elsewhere
/// (tests/gpu/bundle.sh, for GPU machines without the compiler), else compiled here; empty if that failed.
std::string modelPlan(const std::string &model) {
  if (const char *plans = std::getenv("TEC_TEST_PLANS"); plans && *plans)
    return std::string(plans) + "/" + model + ".tecplan";
  const std::string plan = ::testing::TempDir() + "/" + model + ".tecplan";
  const std::string command = std::string(TEC_BINARY) + " " + TEC_MODELS_DIR + "/" + model + ".onnx " +
                              kModelPlanFlags + " -o " + plan + " > /dev/null";
  return std::system(command.c_str()) == 0 ? plan : "";
}

TEST_P(ModelParity, EveryVariantMatchesItsCpuEmulation) {
  if (auto cuda = cudaBackend(); !cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  const std::string model = GetParam();
  const std::string plan = modelPlan(model);
  ASSERT_FALSE(plan.empty()) << model;
  for (const char *target : {"sm_90", "sm_80", "cpu"}) {
    for (const char *kind : {"inference", "train"}) {
      SessionOptions onGpu, onCpu;
      onGpu.variant = onCpu.variant = target;
      onGpu.kind = onCpu.kind = kind;
      onGpu.device = "cuda";
      onCpu.device = "cpu";
      auto gpu = Session::open(plan, onGpu), cpu = Session::open(plan, onCpu);
      ASSERT_TRUE(gpu.ok()) << gpu.error().message();
      ASSERT_TRUE(cpu.ok()) << cpu.error().message();
      ASSERT_EQ((*gpu)->backendName(), "cuda");
      const std::string precision = (*gpu)->variant().precision();
      const double threshold = precision == "fp32" ? 1e-9 : precision == "fp8" ? 1e-3 : 1e-4;
      std::mt19937_64 rng(5);
      for (size_t i = 0; i < (*cpu)->inputs().size(); ++i) {
        fillRandom((*cpu)->inputData(i), (*cpu)->inputs()[i], rng);
        std::memcpy((*gpu)->inputData(i), (*cpu)->inputData(i), (*cpu)->inputs()[i].bytes);
      }
      for (int step = 0; step < (std::string(kind) == "train" ? 3 : 1); ++step) {
        Status g = (*gpu)->run(), c = (*cpu)->run();
        ASSERT_TRUE(g.ok()) << g.message();
        ASSERT_TRUE(c.ok()) << c.message();
        for (size_t o = 0; o < (*cpu)->outputs().size(); ++o) {
          const auto &info = (*cpu)->outputs()[o];
          double error = nmse(info.dtype, (*cpu)->outputData(o), (*gpu)->outputData(o),
                              info.bytes / dtypeBytes(info.dtype));
          EXPECT_LE(error, threshold) << model << " " << target << " " << kind << " step " << step << " output "
                                      << info.name;
        }
      }
      // cuBLASLt refusing what its rules allow, or a step that could not become a CUDA graph, is a bug here.
      for (const std::string &line : (*gpu)->notes())
        EXPECT_TRUE(line.find("refused") == std::string::npos && line.find("CUDA graph") == std::string::npos)
            << model << " " << target << " " << kind << ": " << line;
    }
  }
}

// Data parallelism's GPU path over one rank (TEC_NCCL=1): NCCL's all-reduces on their own stream, ordered
// by events and captured in the step's graph, give the training step bit for bit what the plain copies give.
TEST(CudaBackend, NcclOverOneRankEqualsTheCopies) {
  if (auto cuda = cudaBackend(); !cuda.ok())
    GTEST_SKIP() << "no CUDA backend here: " << cuda.error().message();
  const std::string plan = modelPlan("mlp");
  ASSERT_FALSE(plan.empty());
  for (const char *target : {"sm_90", "sm_80"}) {
    SessionOptions options;
    options.variant = target;
    options.kind = "train";
    options.device = "cuda";
    auto copies = Session::open(plan, options);
    setenv("TEC_NCCL", "1", 1);
    auto nccl = Session::open(plan, options);
    unsetenv("TEC_NCCL");
    ASSERT_TRUE(copies.ok()) << copies.error().message();
    ASSERT_TRUE(nccl.ok()) << nccl.error().message();
    const auto &notes = (*nccl)->notes();
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(),
                            [](const std::string &n) { return n.find("collectives: NCCL") != std::string::npos; }))
        << target << ": the session does not say NCCL carries its collectives";
    std::mt19937_64 rng(9);
    for (int step = 0; step < 4; ++step) { // step by step, captured, then replayed twice
      for (size_t i = 0; i < (*copies)->inputs().size(); ++i) {
        fillRandom((*copies)->inputData(i), (*copies)->inputs()[i], rng);
        std::memcpy((*nccl)->inputData(i), (*copies)->inputData(i), (*copies)->inputs()[i].bytes);
      }
      Status a = (*copies)->run(), b = (*nccl)->run();
      ASSERT_TRUE(a.ok()) << a.message();
      ASSERT_TRUE(b.ok()) << b.message();
      for (size_t o = 0; o < (*copies)->outputs().size(); ++o)
        EXPECT_EQ(std::memcmp((*copies)->outputData(o), (*nccl)->outputData(o), (*copies)->outputs()[o].bytes), 0)
            << target << " step " << step << " output " << (*copies)->outputs()[o].name;
    }
    for (const std::string &line : (*nccl)->notes())
      EXPECT_EQ(line.find("CUDA graph"), std::string::npos) << target << ": " << line;
  }
}

INSTANTIATE_TEST_SUITE_P(TestModels, ModelParity, ::testing::Values("mlp", "gpt_block", "gpt_block_decomposed"));

} // namespace
