// Reading plan steps, shared by the backends: attributes with defaults, element types, epilogues.
#ifndef TEC_RUNTIME_STEPS_H
#define TEC_RUNTIME_STEPS_H

#include "runtime/Status.h"
#include "runtime/plan.pb.h"

#include "kernels/common/Activations.h"
#include "kernels/common/Fp8.h"
#include "kernels/common/Ops.h"

#include <cstdint>
#include <string>
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
inline std::vector<int64_t> attrInts(const plan::Step &s, const char *name) {
  auto it = s.attrs().find(name);
  if (it == s.attrs().end())
    return {};
  return {it->second.ints().values().begin(), it->second.ints().values().end()};
}

inline kernels::Epilogue epilogue(const plan::Step &s) {
  const std::string e = attrS(s, "epilogue", "none");
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

inline kernels::BinaryKind binaryKind(const std::string &kernel) {
  if (kernel == "sub")
    return kernels::BinaryKind::Sub;
  if (kernel == "mul")
    return kernels::BinaryKind::Mul;
  if (kernel == "div")
    return kernels::BinaryKind::Div;
  if (kernel == "pow")
    return kernels::BinaryKind::Pow;
  return kernels::BinaryKind::Add;
}

inline kernels::UnaryKind unaryKind(const plan::Step &s) {
  const std::string &k = s.kernel();
  if (k == "relu")
    return kernels::UnaryKind::Relu;
  if (k == "tanh")
    return kernels::UnaryKind::Tanh;
  if (k == "sigmoid")
    return kernels::UnaryKind::Sigmoid;
  if (k == "erf")
    return kernels::UnaryKind::Erf;
  if (k == "sqrt")
    return kernels::UnaryKind::Sqrt;
  if (k == "exp")
    return kernels::UnaryKind::Exp;
  if (k == "abs")
    return kernels::UnaryKind::Abs;
  if (k == "sign")
    return kernels::UnaryKind::Sign;
  return attrS(s, "approximate", "none") == "tanh" ? kernels::UnaryKind::GeluTanh : kernels::UnaryKind::Gelu;
}

inline kernels::ActivationGradKind activationGradKind(const plan::Step &s) {
  if (s.kernel() == "relu_grad")
    return kernels::ActivationGradKind::Relu;
  return attrS(s, "approximate", "none") == "tanh" ? kernels::ActivationGradKind::GeluTanh
                                                   : kernels::ActivationGradKind::Gelu;
}

/// tec.lr_schedule's schedule attribute as kernels::learningRate's number.
inline int scheduleNumber(const plan::Step &s) {
  const std::string name = attrS(s, "schedule", "constant");
  return name == "cosine" ? 2 : name == "warmup" ? 1 : 0;
}

} // namespace tec::steps

#endif
