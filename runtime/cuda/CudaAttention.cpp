// The CUDA backend's attention steps: cuDNN's fused attention (16-bit and FP8) where it takes the step,
// tec's own kernels otherwise, with a note saying which.
#include "runtime/cuda/CudaBackend.h"

namespace tec::cudabackend {

/// attention and attention_grad, and their FP8 forms: cuDNN's fused attention where it takes the step
/// (16-bit or FP8, see kc::cudnnAttentionTakes), else tec's own kernels (one block per query row; dk, dv
/// one per key row).
Status CudaBackend::attention(const plan::Step &s) {
  auto step = readAttentionStep(s, [&](int i) { return shape(i); }, [&](int i) { return dtype(i); });
  if (!step.ok())
    return unsupported(s, step.error().message());
  const AttentionStep a = *step;
  const int mask = a.mask;
  kc::AttentionSpec spec{a.shape, type(a.q), a.grad, a.fp8};
  spec.sm = major * 10 + minor;
  if (a.fp8 && a.grad)
    spec.doutType = type(a.dout), spec.gradType = type(a.dq);
  // FP8's scale and amax scalars, resolved at run time like every buffer.
  const kernels::Fp8Format grads = a.fp8 && a.grad ? fp8Format(dtype(a.dq)) : kernels::Fp8Format::E5M2;
  auto fp8Args = [a, grads, this](const Context &c) {
    kc::AttentionFp8Args f;
    for (size_t i = 0; i < a.scales.size(); ++i)
      f.scales[i] = c.at<float>(slot(a.scales[i]));
    for (size_t i = 0; i < a.amaxes.size(); ++i)
      f.amaxes[i] = c.at<float>(slot(a.amaxes[i]));
    f.grads = grads;
    return f;
  };
  if (const int index = makeAttention(s, spec); index >= 0) {
    const Slot workspace = stepScratch(static_cast<int64_t>(attentions[index]->workspaceBytes()));
    const std::string name = stepName(s);
    emit([=](const Context &c) {
      kc::AttentionOperands o;
      o.q = c.at(slot(a.q)), o.k = c.at(slot(a.k)), o.v = c.at(slot(a.v)), o.out = c.at(slot(a.out));
      o.lse = c.at<float>(slot(a.lse));
      o.mask = mask >= 0 ? c.at(slot(mask)) : nullptr;
      if (a.grad)
        o.dout = c.at(slot(a.dout)), o.dq = c.at(slot(a.dq)), o.dk = c.at(slot(a.dk)), o.dv = c.at(slot(a.dv));
      const kc::AttentionFp8Args f = fp8Args(c);
      std::copy(std::begin(f.scales), std::end(f.scales), o.scales);
      std::copy(std::begin(f.amaxes), std::end(f.amaxes), o.amaxes);
      std::string error;
      if (!c.k->cudnnAttention(index, o, c.at(workspace), error))
        return Status::error(name + ": cuDNN's fused attention failed: " + error);
      return Status::success();
    });
    return Status::success();
  }
  // tec's FP8 kernels fold their amaxes in with atomics: from 0 (cuDNN writes its own).
  auto zeroAmaxes = [a, this](const Context &c) {
    for (int amax : a.amaxes)
      c.k->memset(c.at(slot(amax)), 0, sizeof(float));
  };
  if (!a.grad) {
    emit([=](const Context &c) {
      const kc::ConstRef m = mask >= 0 ? cref(c, mask) : kc::ConstRef{};
      zeroAmaxes(c);
      if (a.fp8)
        c.k->launch(TEC_KC(attentionFp8), a.shape, fp8Args(c), cref(c, a.q), cref(c, a.k), cref(c, a.v), m, ref(c, a.out),
                          c.at<float>(slot(a.lse)), Stream{});
      else
        c.k->launch(TEC_KC(attention), a.shape, cref(c, a.q), cref(c, a.k), cref(c, a.v), m, ref(c, a.out), c.at<float>(slot(a.lse)), Stream{});
      return Status::success();
    });
    return Status::success();
  }
  const Slot delta = stepScratch(count(a.lse) * 4);
  emit([=](const Context &c) {
    const kc::ConstRef m = mask >= 0 ? cref(c, mask) : kc::ConstRef{};
    zeroAmaxes(c);
    if (a.fp8)
      c.k->launch(TEC_KC(attentionFp8Grad), a.shape, fp8Args(c), cref(c, a.dout), cref(c, a.q), cref(c, a.k), cref(c, a.v),
                            cref(c, a.out), c.at<float>(slot(a.lse)), m, ref(c, a.dq), ref(c, a.dk), ref(c, a.dv),
                            c.at<float>(delta), Stream{});
    else
      c.k->launch(TEC_KC(attentionGrad), a.shape, cref(c, a.dout), cref(c, a.q), cref(c, a.k), cref(c, a.v), cref(c, a.out),
                         c.at<float>(slot(a.lse)), m, ref(c, a.dq), ref(c, a.dk), ref(c, a.dv), c.at<float>(delta), Stream{});
    return Status::success();
  });
  return Status::success();
}

} // namespace tec::cudabackend
