// The element types and op kinds the CPU and CUDA kernels share, and the per-element math of the
// elementwise ops where both backends compute it the same way.
#ifndef TEC_SUPPORT_OPS_H
#define TEC_SUPPORT_OPS_H

#include "support/Activations.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace tec::kernels {

/// Element types the data-movement and cast kernels handle.
enum class ElementType { F32, F16, BF16, I32, I64, Bool, F8E4M3, F8E5M2 };

TEC_HOST_DEVICE size_t elementBytes(ElementType type) {
  switch (type) {
  case ElementType::F32:
  case ElementType::I32: return 4;
  case ElementType::F16:
  case ElementType::BF16: return 2;
  case ElementType::I64: return 8;
  case ElementType::Bool:
  case ElementType::F8E4M3:
  case ElementType::F8E5M2: return 1;
  }
  return 0;
}

/// Arithmetic binary ops. Mod is Python's (the result takes the divisor's sign), FMod C's fmod (the
/// dividend's): ONNX Mod with fmod = 0 and 1. SwiGlu is silu(a) * b (floats only).
enum class BinaryKind { Add, Sub, Mul, Div, Pow, Max, Min, Mod, FMod, SwiGlu };
/// Binary ops with a bool result: comparisons of numbers, and the logical ops of bools.
enum class CompareKind { Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual, And, Or, Xor };
/// The float unary ops (support/UnaryOps.def); Abs, Neg and Sign take integers too (applyIntUnary).
enum class UnaryKind {
#define TEC_UNARY(Kind, kernel, expression) Kind,
#define TEC_UNARY_VARIANT(Kind, expression) Kind,
#include "support/UnaryOps.def"
};
/// dx = dy * act'(x) for the activations with a backward kernel.
enum class ActivationGradKind { Relu, Gelu, GeluTanh };
enum class ReduceKind { Sum, Mean, Max, Min, Prod };

/// A reduction's starting value for the accumulator type (double for floats, int64_t for integers):
/// what ONNX gives for an empty set (-inf or the type's minimum for Max).
template <typename Acc> TEC_HOST_DEVICE Acc reduceIdentity(ReduceKind kind) {
  constexpr bool isFloat = std::is_floating_point<Acc>::value;
  switch (kind) {
  case ReduceKind::Max: return isFloat ? Acc(-INFINITY) : Acc(INT64_MIN);
  case ReduceKind::Min: return isFloat ? Acc(INFINITY) : Acc(INT64_MAX);
  case ReduceKind::Prod: return Acc(1);
  default: return Acc(0);
  }
}

/// Folds one more value (or a partial result) into an accumulator; Max and Min propagate NaN.
template <typename Acc> TEC_HOST_DEVICE Acc reduceCombine(ReduceKind kind, Acc a, Acc b) {
  switch (kind) {
  case ReduceKind::Max: return (b > a || b != b) ? b : a;
  case ReduceKind::Min: return (b < a || b != b) ? b : a;
  case ReduceKind::Prod: return a * b;
  default: return a + b;
  }
}

TEC_HOST_DEVICE float applyUnary(UnaryKind kind, float v) {
  switch (kind) {
#define TEC_UNARY(Kind, kernel, expression)                                                                           \
  case UnaryKind::Kind: return expression;
#define TEC_UNARY_VARIANT(Kind, expression) TEC_UNARY(Kind, , expression)
#include "support/UnaryOps.def"
  }
  return v;
}

/// The unary kind of a plan kernel or op mnemonic ("hard_swish"); none for another name.
inline std::optional<UnaryKind> unaryKindNamed(std::string_view kernel) {
#define TEC_UNARY(Kind, name, expression)                                                                             \
  if (kernel == #name)                                                                                                 \
    return UnaryKind::Kind;
#include "support/UnaryOps.def"
  return std::nullopt;
}

/// The enumerator's own name ("HardSwish"), as generated source spells it.
inline const char *unaryKindName(UnaryKind kind) {
  switch (kind) {
#define TEC_UNARY(Kind, kernel, expression)                                                                           \
  case UnaryKind::Kind: return #Kind;
#define TEC_UNARY_VARIANT(Kind, expression) TEC_UNARY(Kind, , expression)
#include "support/UnaryOps.def"
  }
  return "";
}

TEC_HOST_DEVICE float applyActivationGrad(ActivationGradKind kind, float dy, float x) {
  switch (kind) {
  case ActivationGradKind::Relu: return reluGrad(dy, x);
  case ActivationGradKind::Gelu: return dy * geluGrad(x);
  case ActivationGradKind::GeluTanh: return dy * geluTanhGrad(x);
  }
  return dy;
}

/// Float binary ops; x*x for a power of 2 because powf need not be correctly rounded there. Max and Min
/// propagate NaN, as numpy's maximum/minimum and ONNX's reference do.
TEC_HOST_DEVICE float applyBinary(BinaryKind kind, float a, float b) {
  switch (kind) {
  case BinaryKind::Add: return a + b;
  case BinaryKind::Sub: return a - b;
  case BinaryKind::Mul: return a * b;
  case BinaryKind::Div: return a / b;
  case BinaryKind::Pow: return b == 2.0f ? a * a : powf(a, b);
  case BinaryKind::Max: return (a > b || a != a) ? a : b;
  case BinaryKind::Min: return (a < b || a != a) ? a : b;
  case BinaryKind::FMod: return fmodf(a, b);
  case BinaryKind::SwiGlu: return silu(a) * b;
  case BinaryKind::Mod: {
    const float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
  }
  }
  return a;
}

/// The unary ops integers take (exporters' position buckets and masks): |x|, -x and sign(x), wrapping at the
/// type's minimum as two's complement does (|INT64_MIN| = INT64_MIN, as numpy and torch give).
inline constexpr bool isIntUnary(UnaryKind kind) {
  return kind == UnaryKind::Abs || kind == UnaryKind::Neg || kind == UnaryKind::Sign;
}
template <typename T> TEC_HOST_DEVICE T applyIntUnary(UnaryKind kind, T x) {
  using U = typename std::make_unsigned<T>::type;
  const T negated = static_cast<T>(U(0) - static_cast<U>(x));
  switch (kind) {
  case UnaryKind::Abs: return x < 0 ? negated : x;
  case UnaryKind::Neg: return negated;
  case UnaryKind::Sign: return x > 0 ? T(1) : (x < 0 ? T(-1) : T(0));
  default: return x; // float-only: the verifier and the plan contracts refuse integers
  }
}

/// Integer binary ops. Division and remainder by 0 give 0 (undefined in ONNX: never trap), and so does
/// the one quotient that overflows (the type's minimum over -1) without trapping: it wraps.
template <typename T> TEC_HOST_DEVICE T applyIntBinary(BinaryKind kind, T x, T y) {
  using U = typename std::make_unsigned<T>::type;
  switch (kind) {
  case BinaryKind::Add: return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
  case BinaryKind::Sub: return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
  case BinaryKind::Mul: return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  case BinaryKind::Div: return y == 0 ? T(0) : y == -1 ? static_cast<T>(U(0) - static_cast<U>(x)) : T(x / y);
  case BinaryKind::Pow: return static_cast<T>(pow(static_cast<double>(x), static_cast<double>(y)));
  case BinaryKind::Max: return x > y ? x : y;
  case BinaryKind::Min: return x < y ? x : y;
  case BinaryKind::FMod: return (y == 0 || y == -1) ? T(0) : T(x % y);
  case BinaryKind::SwiGlu: break; // float-only: the verifier and the plan contracts refuse integers
  case BinaryKind::Mod: {
    if (y == 0 || y == -1)
      return T(0);
    const T r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? T(r + y) : r;
  }
  }
  return x;
}

/// ArgMax/ArgMin's scan: whether `candidate` replaces `best`. NaN wins over numbers and the first NaN
/// stays (numpy's argmax); ties go to the first index unless `last`.
template <typename T> TEC_HOST_DEVICE bool argBetter(bool max, bool last, T candidate, T best) {
  if (best != best)
    return false;
  if (candidate != candidate)
    return true;
  if (candidate == best)
    return last;
  return max ? candidate > best : candidate < best;
}

template <typename T> TEC_HOST_DEVICE bool applyCompare(CompareKind kind, T a, T b) {
  switch (kind) {
  case CompareKind::Equal: return a == b;
  case CompareKind::NotEqual: return !(a == b);
  case CompareKind::Less: return a < b;
  case CompareKind::LessEqual: return a <= b;
  case CompareKind::Greater: return a > b;
  case CompareKind::GreaterEqual: return a >= b;
  case CompareKind::And: return a && b;
  case CompareKind::Or: return a || b;
  case CompareKind::Xor: return !a != !b;
  }
  return false;
}

/// The loss-scale update of mixed-precision training (tec.loss_scale_update): grow after `interval`
/// clean steps, back off on a non-finite gradient.
TEC_HOST_DEVICE void updateLossScale(float scale, float clean, bool finite, float interval, float growth,
                                     float backoff, float *nextScale, float *nextClean) {
  if (finite) {
    clean += 1.0f;
    if (clean >= interval) {
      scale *= growth;
      clean = 0.0f;
    }
  } else {
    scale *= backoff;
    clean = 0.0f;
  }
  *nextScale = scale;
  *nextClean = clean;
}

/// The global-norm clipping coefficient: min(1, max_norm / (norm + 1e-6)).
TEC_HOST_DEVICE float clipCoefficient(float norm, float maxNorm) {
  const float c = maxNorm / (norm + 1e-6f);
  return c < 1.0f ? c : 1.0f;
}

/// tec.optimizer_update's hyperparameters (see its description), with (1 - beta) precomputed.
struct OptimizerParams {
  bool adamw = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 0.0f, momentum = 0.0f;
  bool nesterov = false;
};

/// The bias corrections 1 - beta^t of AdamW at t = step + 1 (once per step, not per element).
TEC_HOST_DEVICE void adamBiasCorrections(const OptimizerParams &o, float step, float *c1, float *c2) {
  const float t = step + 1.0f;
  *c1 = 1.0f - powf(o.beta1, t);
  *c2 = 1.0f - powf(o.beta2, t);
}

/// One element of one parameter's optimizer step: reads p, g and the moments (m: SGD momentum or Adam's
/// first moment, v: Adam's second), writes the new values through the out pointers (which may alias).
/// AdamW's step for one element (optimizerElement's AdamW branch; its own function so that a loop over it
/// vectorizes): the moments, then the param, the gradient already clipped.
TEC_HOST_DEVICE float adamwDirection(float beta1, float beta2, float eps, float weightDecay, float c1, float c2, float p,
                                     float g, float m, float v, float *newM, float *newV) {
  const float nextM = m * beta1 + g * (1.0f - beta1);
  const float nextV = v * beta2 + (g * g) * (1.0f - beta2);
  *newM = nextM;
  *newV = nextV;
  return (nextM / c1) / (sqrtf(nextV / c2) + eps) + p * weightDecay;
}

TEC_HOST_DEVICE void optimizerElement(const OptimizerParams &o, float lr, float c1, float c2, float clip, float p,
                                      float g, float m, float v, float *newP, float *newM, float *newV) {
  g = g * clip;
  float direction;
  if (o.adamw) {
    direction = adamwDirection(o.beta1, o.beta2, o.eps, o.weightDecay, c1, c2, p, g, m, v, newM, newV);
  } else {
    if (o.weightDecay != 0.0f) // L2 regularization, as torch.optim.SGD's weight_decay
      g = g + p * o.weightDecay;
    direction = g;
    if (o.momentum != 0.0f) {
      const float nextM = m * o.momentum + g;
      direction = o.nesterov ? g + nextM * o.momentum : nextM;
      *newM = nextM;
    }
  }
  *newP = p - direction * lr;
}

} // namespace tec::kernels

#endif
