// The CUDA backend's GEMMs through cuBLASLt (linear, gemm, matmul, fp8_gemm) and what they take in: bias and
// GELU epilogues, a wgrad's bias gradient (BGRADB), transposes read in place.
#include "runtime/cuda/CudaBackend.h"

namespace tec::cudabackend {

// ---- GEMMs ----------------------------------------------------------------------------------------------

/// The epilogue a Linear's bias and activation fuse into, Default where they stay in a kernel:
/// cuBLASLt's GELU is the tanh form, so the erf GELU runs as a kernel after; and its RELU is reported to
/// turn NaN into 0 where ONNX's Relu (and tec's kernels) keep NaN, which would hide an overflow from loss
/// scaling's all_finite and make the GPU disagree with the CPU, so a ReLU runs in tec's bias-activation
/// kernel (bias and ReLU in one pass after the plain GEMM).
kc::GemmEpilogue fusedEpilogue(kernels::Epilogue e, bool bias) {
  switch (e) {
  case kernels::Epilogue::GeluTanh: return bias ? kc::GemmEpilogue::GeluBias : kc::GemmEpilogue::Gelu;
  case kernels::Epilogue::None: return bias ? kc::GemmEpilogue::Bias : kc::GemmEpilogue::Default;
  default: return kc::GemmEpilogue::Default;
  }
}

bool isFp8Type(ElementType t) { return t == ElementType::F8E4M3 || t == ElementType::F8E5M2; }

Status CudaBackend::emitLinear(const plan::Step &s, kc::GemmSpec spec, Slot x, Slot w, Slot bias, int biasBuffer,
                               Slot y, kernels::Epilogue epilogue, Slot xScaleInv, Slot wScaleInv,
                               GeluFusion gelu) {
  const bool hasBias = !bias.null();
  const auto biasType = hasBias ? type(biasBuffer) : ElementType::F32;
  spec.allowTf32 = options.allowTf32;
  spec.alignA = alignmentOfSlot(x);
  spec.alignB = alignmentOfSlot(w);
  spec.alignD = std::min(alignmentOfSlot(y), gelu.step >= 0 ? alignmentOfSlot(gelu.out) : 256);
  // The plain GEMM, with bias and activation in a kernel after it, always exists; the fused one is
  // preferred and kept only where cuBLASLt has it.
  std::string why;
  const int plain = makeGemm(spec, why);
  if (plain < 0)
    return unsupported(s, why);
  // With FP8 inputs cuBLASLt takes a BF16 bias for an f32 or bf16 output (F16 for f16), as Transformer
  // Engine keeps its bias: an f32 bias is rounded into step scratch first (N values) for the fused GEMM.
  Slot fusedBias = bias;
  kc::GemmSpec withEpilogue = spec;
  withEpilogue.bias = biasType;
  if (hasBias && isFp8Type(spec.a) && biasType != kc::fp8BiasType(spec.d)) {
    withEpilogue.bias = kc::fp8BiasType(spec.d);
    fusedBias = stepScratch(spec.n * 2);
  }
  const bool castBias = fusedBias.offset != bias.offset || fusedBias.inStepScratch != bias.inStepScratch;
  int fused = -1;
  const bool withGelu = gelu.step >= 0 && epilogue == kernels::Epilogue::None && (gelu.forward || !hasBias);
  if (withGelu) {
    withEpilogue.epilogue = !gelu.forward ? kc::GemmEpilogue::DGelu
                            : hasBias     ? kc::GemmEpilogue::GeluAuxBias
                                          : kc::GemmEpilogue::GeluAux;
    fused = makeFusedGemm(s, withEpilogue);
    foldedGelu.resize(variant->steps_size(), false);
    foldedGelu[gelu.step] = true;
    fold(gelu.step, currentStep, gelu.forward ? "its epilogue (cuBLASLt's GELU_AUX)" : "its epilogue (cuBLASLt's DGELU)");
  } else if ((withEpilogue.epilogue = fusedEpilogue(epilogue, hasBias)) != kc::GemmEpilogue::Default) {
    fused = makeFusedGemm(s, withEpilogue);
  }
  const bool needsKernel = hasBias || epilogue != kernels::Epilogue::None;
  const auto yType = spec.d, fusedBiasType = withEpilogue.bias;
  const int64_t rows = spec.m * spec.batch, cols = spec.n;
  auto prepareBias = [=](const Context &c) {
    if (fused >= 0 && castBias)
      c.k->launch(TEC_KC(cast), c.at(bias), biasType, c.at(fusedBias), fusedBiasType, cols, Stream{});
  };
  if (withGelu) {
    emit([=](const Context &c) {
      prepareBias(c);
      kc::GemmOperands o;
      o.a = c.at(x);
      o.b = c.at(w);
      o.bias = c.at(fusedBias);
      o.aScaleInv = c.at<float>(xScaleInv);
      o.bScaleInv = c.at<float>(wScaleInv);
      // Forward: D is the GELU's output, the aux matrix the GEMM's result; backward: D is the gradient.
      o.d = c.at(gelu.out);
      o.aux = gelu.forward ? c.at(y) : c.at(gelu.aux);
      std::string error;
      if (fused >= 0 && c.k->gemm(fused, o, error))
        return Status::success();
      // Unfused: the GEMM's result, then the bias and the GELU (or its gradient) as kernels.
      o.d = c.at(y);
      o.aux = nullptr;
      o.bias = nullptr;
      if (!c.k->gemm(plain, o, error))
        return unsupported(s, error);
      if (hasBias)
        c.k->launch(TEC_KC(biasActivation), kc::Ref{c.at(y), yType}, kc::ConstRef{c.at(bias), biasType}, rows, cols, kernels::Epilogue::None, Stream{});
      if (gelu.forward)
        c.k->launch(TEC_KC(unary), kernels::UnaryKind::GeluTanh, kc::ConstRef{c.at(y), yType}, kc::Ref{c.at(gelu.out), yType}, rows * cols, Stream{});
      else
        c.k->launch(TEC_KC(activationGrad), kernels::ActivationGradKind::GeluTanh, kc::ConstRef{c.at(y), ElementType::F32},
                    kc::ConstRef{c.at(gelu.aux), ElementType::F32}, kc::Ref{c.at(gelu.out), ElementType::F32}, rows * cols,
                    Stream{});
      return Status::success();
    });
    return Status::success();
  }
  emit([=](const Context &c) {
    prepareBias(c);
    kc::GemmOperands o;
    o.a = c.at(x);
    o.b = c.at(w);
    o.d = c.at(y);
    o.bias = c.at(fusedBias);
    o.aScaleInv = c.at<float>(xScaleInv);
    o.bScaleInv = c.at<float>(wScaleInv);
    std::string error;
    if (fused >= 0 && c.k->gemm(fused, o, error))
      return Status::success();
    if (!c.k->gemm(plain, o, error))
      return unsupported(s, error);
    if (needsKernel)
      c.k->launch(TEC_KC(biasActivation), kc::Ref{c.at(y), yType}, kc::ConstRef{c.at(bias), biasType}, rows, cols, epilogue, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::linear(const plan::Step &s) {
  int x = s.inputs(0), w = s.inputs(1), b = s.inputs_size() > 2 ? s.inputs(2) : -1, y = s.outputs(0);
  kc::GemmSpec spec;
  spec.transposeB = attrs::transposeB(s);
  auto ws = shape(w);
  spec.n = shape(y).back();
  spec.k = spec.transposeB ? ws[1] : ws[0];
  spec.m = spec.n ? count(y) / spec.n : 0;
  spec.a = spec.b = type(x);
  spec.d = type(y);
  // x is a transpose the GEMM reads untransposed, from storage in the source's layout ([K, M]).
  if (auto folded = transposedOperand.find(currentStep); folded != transposedOperand.end()) {
    spec.transposeA = true;
    x = folded->second.second;
  }
  if (b < 0 && epilogue(s) == kernels::Epilogue::None)
    if (auto grad = biasGradAlongside(); grad.step >= 0)
      return emitWeightGradWithBiasGrad(s, spec, x, w, y, grad);
  return emitLinear(s, spec, slot(x), slot(w), b >= 0 ? slot(b) : Slot{}, b, slot(y), epilogue(s), {}, {},
                    geluAfter(y));
}

/// A wgrad GEMM dW = dYᵀ·X that reads dY through transposeA (a folded transpose) where a later
/// reduce_sum over dY's rows is the bias gradient: cuBLASLt's BGRADB epilogue sums the same operand while
/// it multiplies, writing the bias gradient early where its storage is free until then.
BiasGradFusion CudaBackend::biasGradAlongside() const {
  const auto folded = transposedOperand.find(currentStep);
  if (folded == transposedOperand.end())
    return {};
  const int dy = folded->second.first;
  if (shape(dy).size() != 2 || dtype(dy) != plan::F32)
    return {};
  for (int j = currentStep + 1; j < variant->steps_size(); ++j) {
    const auto &r = variant->steps(j);
    if (r.kernel() != "reduce_sum" || r.inputs(0) != dy || attrs::axes(r) != std::vector<int64_t>{0} ||
        count(r.outputs(0)) != shape(dy)[1] || dtype(r.outputs(0)) != plan::F32)
      continue;
    const int out = r.outputs(0);
    if (writtenBetween(dy, currentStep, j) || !writableEarly(out, currentStep, j))
      return {};
    return {j, slot(out), dy, shape(dy)[0], shape(dy)[1]};
  }
  return {};
}

Status CudaBackend::emitWeightGradWithBiasGrad(const plan::Step &s, kc::GemmSpec spec, int x, int w, int y,
                                               BiasGradFusion grad) {
  spec.allowTf32 = options.allowTf32;
  spec.alignA = alignmentOfSlot(slot(x));
  spec.alignB = alignmentOfSlot(slot(w));
  spec.alignD = alignmentOfSlot(slot(y));
  std::string why;
  const int plain = makeGemm(spec, why);
  if (plain < 0)
    return unsupported(s, why);
  // cuBLASLt's bias gradient has the GEMM's output type: a bf16 one goes through step scratch to the f32
  // gradient (Transformer Engine's bias gradients are bf16 too).
  kc::GemmSpec withGrad = spec;
  withGrad.epilogue = kc::GemmEpilogue::BGradB;
  withGrad.bias = spec.d;
  const int fused = makeFusedGemm(s, withGrad);
  const Slot gradOut = spec.d == ElementType::F32 ? grad.out : stepScratch(grad.cols * 4);
  const auto gradType = spec.d;
  foldedReduce.resize(variant->steps_size(), false);
  foldedReduce[grad.step] = true;
  fold(grad.step, currentStep, "its epilogue (cuBLASLt's BGRADB: the bias gradient)");
  // The unfused bias gradient: dY [rows, cols] summed over its rows.
  kc::Extent kept, reduced;
  kc::makeExtent({grad.cols}, kept);
  kc::makeExtent({grad.rows}, reduced);
  kc::Strided keptStrides, reducedStrides;
  keptStrides.strides[0] = 1;
  reducedStrides.strides[0] = grad.cols;
  const Slot partials = reductionPartials(kept, keptStrides, reduced, reducedStrides);
  const int sms = multiprocessors;
  emit([=](const Context &c) {
    kc::GemmOperands o;
    o.a = c.at(slot(x));
    o.b = c.at(slot(w));
    o.d = c.at(slot(y));
    o.biasGrad = c.at(gradOut);
    std::string error;
    if (fused >= 0 && c.k->gemm(fused, o, error)) {
      if (gradType != ElementType::F32)
        c.k->launch(TEC_KC(cast), c.at(gradOut), gradType, c.at(grad.out), ElementType::F32, grad.cols, Stream{});
      return Status::success();
    }
    o.biasGrad = nullptr;
    if (!c.k->gemm(plain, o, error))
      return unsupported(s, error);
    c.k->launch(TEC_KC(reduce), kernels::ReduceKind::Sum, c.at(slot(grad.source)), kept, keptStrides, reduced, reducedStrides,
                c.at(grad.out), ElementType::F32, ElementType::F32, c.at(partials), sms, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::gemm(const plan::Step &s) {
  int a = s.inputs(0), b = s.inputs(1), cIn = s.inputs_size() > 2 ? s.inputs(2) : -1, y = s.outputs(0);
  kc::GemmSpec spec;
  spec.transposeA = attrs::transA(s);
  spec.transposeB = attrs::transB(s);
  auto as = shape(a), bs = shape(b);
  spec.m = as[spec.transposeA ? 1 : 0];
  spec.k = as[spec.transposeA ? 0 : 1];
  spec.n = bs[spec.transposeB ? 0 : 1];
  spec.a = spec.b = spec.d = type(y);
  spec.alpha = static_cast<float>(attrs::alpha(s));
  float beta = static_cast<float>(attrs::beta(s));
  if (cIn >= 0 && beta != 0.0f) {
    // C (broadcast to M x N) is copied into Y first, and the GEMM accumulates onto it.
    if (Status st = emitCopy(s, cIn, kc::broadcastOperand(shape(cIn), shape(y)), y, kc::contiguous(shape(y)), shape(y));
        !st.ok())
      return st;
    spec.beta = beta;
  }
  return emitLinear(s, spec, slot(a), slot(b), Slot{}, -1, slot(y), kernels::Epilogue::None);
}

Status CudaBackend::matmul(const plan::Step &s) {
  int a = s.inputs(0), b = s.inputs(1), y = s.outputs(0);
  kc::Shape lhs = shape(a), rhs = shape(b), out = shape(y);
  if (lhs.size() == 1)
    lhs.insert(lhs.begin(), 1);
  if (rhs.size() == 1)
    rhs.push_back(1);
  kc::GemmSpec spec;
  spec.m = lhs[lhs.size() - 2];
  spec.k = lhs.back();
  spec.n = rhs.back();
  spec.a = spec.b = spec.d = type(y);
  kc::Shape aBatch(lhs.begin(), lhs.end() - 2), bBatch(rhs.begin(), rhs.end() - 2);
  auto numel = [](const kc::Shape &v) { return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>()); };
  if (spec.m == 0 || spec.n == 0)
    return Status::success();
  if (spec.k == 0) {
    int64_t bytes = buf(y).bytes();
    emit([=](const Context &c) {
      c.k->memset(c.at(slot(y)), 0, bytes);
      return Status::success();
    });
    return Status::success();
  }
  if (numel(bBatch) == 1) { // one weight: fold A's batch into M
    spec.m *= numel(aBatch);
    return emitLinear(s, spec, slot(a), slot(b), Slot{}, -1, slot(y), kernels::Epilogue::None);
  }
  kc::Shape batch(out.begin(), out.end() - (shape(a).size() > 1 ? 1 : 0) - (shape(b).size() > 1 ? 1 : 0));
  if (aBatch == batch && bBatch == batch) { // strided batches
    spec.batch = numel(batch);
    spec.batchStrideA = spec.m * spec.k;
    spec.batchStrideB = spec.k * spec.n;
    spec.batchStrideD = spec.m * spec.n;
    return emitLinear(s, spec, slot(a), slot(b), Slot{}, -1, slot(y), kernels::Epilogue::None);
  }
  // Broadcast batches: one GEMM per output batch, operands offset by their broadcast strides.
  kc::Extent extent;
  if (Status st = extentOf(s, batch, extent); !st.ok())
    return st;
  auto aStrides = kc::broadcastOperand(aBatch, batch), bStrides = kc::broadcastOperand(bBatch, batch);
  const int64_t elem = bytesOf(dtype(y)), batches = numel(batch);
  for (int64_t i = 0; i < batches; ++i) {
    int64_t aOff = 0, bOff = 0, rest = i;
    for (int d = extent.rank - 1; d >= 0; --d) {
      int64_t coord = rest % batch[d];
      rest /= batch[d];
      aOff += coord * aStrides.strides[d];
      bOff += coord * bStrides.strides[d];
    }
    Slot ai{slot(a).offset + aOff * spec.m * spec.k * elem}, bi{slot(b).offset + bOff * spec.k * spec.n * elem},
        yi{slot(y).offset + i * spec.m * spec.n * elem};
    if (Status st = emitLinear(s, spec, ai, bi, Slot{}, -1, yi, kernels::Epilogue::None); !st.ok())
      return st;
  }
  return Status::success();
}

Status CudaBackend::fp8Gemm(const plan::Step &s) {
  int xq = s.inputs(0), wq = s.inputs(1), xsi = s.inputs(2), wsi = s.inputs(3);
  int b = s.inputs_size() > 4 ? s.inputs(4) : -1, y = s.outputs(0);
  bool transB = attrs::transposeB(s);
  auto wShape = shape(wq);
  kc::GemmSpec spec;
  spec.n = shape(y).back();
  spec.k = transB ? wShape[1] : wShape[0];
  spec.m = spec.n ? count(y) / spec.n : 0;
  spec.d = type(y);
  Slot bias = b >= 0 ? slot(b) : Slot{};
  if (fp8Gemms) {
    const size_t launchesBefore = program.size();
    // FP8 tensor cores take only TN: a weight stored [K,N] is transposed (as bytes) into scratch first.
    Slot weight = slot(wq);
    if (!transB) {
      weight = stepScratch(spec.k * spec.n);
      kc::Extent extent;
      kc::makeExtent({spec.n, spec.k}, extent);
      kc::Strided src, dst = kc::contiguous({spec.n, spec.k});
      src.strides[0] = 1;
      src.strides[1] = spec.n;
      emit([=](const Context &c) {
        c.k->launch(TEC_KC(stridedCopy), c.at(slot(wq)), src, c.at(weight), dst, extent, 1, Stream{});
        return Status::success();
      });
    }
    spec.transposeB = true;
    spec.a = type(xq);
    spec.b = type(wq);
    // Transformer Engine: fast accumulation for forward GEMMs, full-precision accumulation for gradients.
    spec.fastAccumulation = attrs::gemmRole(s).empty();
    Status fp8 = emitLinear(s, spec, slot(xq), weight, bias, b, slot(y), epilogue(s), slot(xsi), slot(wsi),
                            geluAfter(y));
    if (fp8.ok())
      return Status::success();
    program.resize(launchesBefore); // not the weight's transpose either
    programStep.resize(launchesBefore);
    note(stepName(s) + ": no FP8 GEMM (" + fp8.message() + "); the operands are widened and an FP32 GEMM runs");
  }
  // No FP8 GEMMs here (before sm_89, or cuBLASLt refused): widen both operands exactly, then an f32 GEMM.
  Slot xf = stepScratch(count(xq) * 4), wf = stepScratch(count(wq) * 4);
  auto xFormat = fp8Format(dtype(xq)), wFormat = fp8Format(dtype(wq));
  int64_t xn = count(xq), wn = count(wq);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(dequantize), c.at<uint8_t>(slot(xq)), c.at<float>(slot(xsi)), c.at<float>(xf), xn, xFormat, Stream{});
    c.k->launch(TEC_KC(dequantize), c.at<uint8_t>(slot(wq)), c.at<float>(slot(wsi)), c.at<float>(wf), wn, wFormat, Stream{});
    return Status::success();
  });
  kc::GemmSpec wide;
  wide.m = spec.m;
  wide.n = spec.n;
  wide.k = spec.k;
  wide.transposeB = transB;
  wide.a = wide.b = wide.d = ElementType::F32;
  // An f16/bf16 output is computed in f32 scratch and narrowed after.
  const Slot yWide = spec.d == ElementType::F32 ? slot(y) : stepScratch(count(y) * 4);
  if (Status st = emitLinear(s, wide, xf, wf, bias, b, yWide, epilogue(s), {}, {},
                             spec.d == ElementType::F32 ? geluAfter(y) : GeluFusion{});
      !st.ok())
    return st;
  if (spec.d != ElementType::F32) {
    const int64_t n = count(y);
    const auto to = spec.d;
    emit([=](const Context &c) {
      c.k->launch(TEC_KC(cast), c.at(yWide), ElementType::F32, c.at(slot(y)), to, n, Stream{});
      return Status::success();
    });
  }
  return Status::success();
}

} // namespace tec::cudabackend
