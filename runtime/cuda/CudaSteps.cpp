// The CUDA backend's step compilers, GEMMs and attention aside (CudaGemms.cpp, CudaAttention.cpp): each
// turns a plan step into launch closures over arena offsets.
#include "runtime/cuda/CudaBackend.h"
#include "runtime/Collectives.h"

namespace tec::cudabackend {

// ---- elementwise ----------------------------------------------------------------------------------------

Status CudaBackend::binary(const plan::Step &s) {
  int a = s.inputs(0), b = s.inputs(1), o = s.outputs(0);
  if (dtype(a) != dtype(o) || dtype(b) != dtype(o))
    return unsupported(s, "operands of different element types");
  kc::Extent extent;
  if (Status st = extentOf(s, shape(o), extent); !st.ok())
    return st;
  auto as = kc::broadcastOperand(shape(a), shape(o)), bs = kc::broadcastOperand(shape(b), shape(o));
  auto kind = binaryKind(s);
  auto t = type(o);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(binary), kind, c.at(slot(a)), as, c.at(slot(b)), bs, c.at(slot(o)), extent, t, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::compare(const plan::Step &s) {
  int a = s.inputs(0), b = s.inputs(1), o = s.outputs(0);
  kc::Extent extent;
  if (Status st = extentOf(s, shape(o), extent); !st.ok())
    return st;
  auto as = kc::broadcastOperand(shape(a), shape(o)), bs = kc::broadcastOperand(shape(b), shape(o));
  auto kind = *compareKind(attrs::predicate(s)); // the plan contracts checked it
  auto t = type(a);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(compare), kind, c.at(slot(a)), as, c.at(slot(b)), bs, static_cast<bool *>(c.at(slot(o))), extent, t, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::unary(const plan::Step &s) {
  if (static_cast<size_t>(currentStep) < foldedGelu.size() && foldedGelu[currentStep])
    return Status::success(); // in the GEMM before it (GELU_AUX)
  auto kind = unaryKind(s);
  int x = s.inputs(0), y = s.outputs(0);
  int64_t n = count(y);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(unary), kind, cref(c, x), ref(c, y), n, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::activationGrad(const plan::Step &s) {
  if (static_cast<size_t>(currentStep) < foldedGelu.size() && foldedGelu[currentStep])
    return Status::success(); // in the GEMM before it (DGELU)
  auto kind = activationGradKind(s);
  int dy = s.inputs(0), x = s.inputs(1), dx = s.outputs(0);
  int64_t n = count(dx);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(activationGrad), kind, cref(c, dy), cref(c, x), ref(c, dx), n, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::where(const plan::Step &s) {
  int cnd = s.inputs(0), x = s.inputs(1), y = s.inputs(2), o = s.outputs(0);
  kc::Extent extent;
  if (Status st = extentOf(s, shape(o), extent); !st.ok())
    return st;
  auto cs = kc::broadcastOperand(shape(cnd), shape(o)), xs = kc::broadcastOperand(shape(x), shape(o)),
       ys = kc::broadcastOperand(shape(y), shape(o));
  size_t bytes = bytesOf(dtype(o));
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(where), c.at<bool>(slot(cnd)), cs, c.at(slot(x)), xs, c.at(slot(y)), ys, c.at(slot(o)), extent, bytes, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::cast(const plan::Step &s) {
  int x = s.inputs(0), o = s.outputs(0);
  if (auto folded = castOfSource.find(currentStep); folded != castOfSource.end())
    x = folded->second; // a folded transpose's source, cast in its own layout
  auto from = type(x), to = type(o);
  int64_t n = count(o);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(cast), c.at(slot(x)), from, c.at(slot(o)), to, n, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::oneHot(const plan::Step &s) {
  int l = s.inputs(0), y = s.outputs(0);
  int64_t n = count(l), depth = shape(y).back();
  bool labels64 = dtype(l) == plan::I64;
  int flag = errorFlag("one_hot: a label is outside [0, " + std::to_string(depth) + ")");
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(oneHot), c.at(slot(l)), labels64, n, depth, c.at<float>(slot(y)), errorPointer(c, flag), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::allFinite(const plan::Step &s) {
  std::vector<std::pair<int, int64_t>> inputs;
  for (int i : s.inputs())
    inputs.push_back({i, count(i)});
  int o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(setFlag), c.at<uint8_t>(slot(o)), Stream{});
    for (auto [i, n] : inputs)
      c.k->launch(TEC_KC(clearIfNotFinite), cref(c, i), n, c.at<uint8_t>(slot(o)), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::allReduce(const plan::Step &s) {
  for (int i = 0; i < s.inputs_size(); ++i) // a copy where not in place; one process: that is all
    if (slot(s.inputs(i)).offset != slot(s.outputs(i)).offset || slot(s.inputs(i)).inStepScratch)
      if (Status st = emitCopy(s, s.inputs(i), kc::contiguous(shape(s.inputs(i))), s.outputs(i),
                               kc::contiguous(shape(s.outputs(i))), shape(s.outputs(i)));
          !st.ok())
        return st;
  if (!collectivesOnNccl())
    return Status::success();
  static_assert(int(kc::NcclReduction::Max) == int(CollectiveOp::Max) && int(kc::NcclReduction::Mean) == int(CollectiveOp::Mean));
  const auto how = static_cast<kc::NcclReduction>(collectiveOp(attrs::reduction(s)));
  std::vector<std::pair<int, int64_t>> tensors;
  for (int o : s.outputs())
    tensors.push_back({o, count(o)});
  const auto [started, ended] = collectiveEventPair();
  const std::string name = stepName(s);
  emit([=](const Context &c) {
    c.k->record(started, false);
    c.k->await(started, true);
    std::vector<std::pair<float *, int64_t>> data;
    for (auto [buffer, n] : tensors)
      data.push_back({c.at<float>(slot(buffer)), n});
    std::string why;
    if (!c.k->allReduce(data, how, why))
      return Status::error(name + ": " + why);
    c.k->record(ended, true);
    return Status::success();
  });
  endCollectiveBeforeReader(s, [ended = ended](const Context &c) {
    c.k->await(ended, false);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::sharding(const plan::Step &s) {
  if (attrs::ranks(s) > 1 || options.ranks > 1)
    return unsupported(s, "optimizer sharding (--shard-optimizer) is not on the GPU yet; sharded plans train on "
                          "the cpu backend (--device cpu)");
  for (int i = 0; i < s.inputs_size(); ++i) { // one rank: a shard is the whole tensor, flat
    const kc::Shape flat{count(s.outputs(i))};
    if (Status st = emitCopy(s, s.inputs(i), kc::contiguous(flat), s.outputs(i), kc::contiguous(flat), flat); !st.ok())
      return st;
  }
  return Status::success();
}

Status CudaBackend::worldSize(const plan::Step &s) {
  const float ranks = static_cast<float>(options.ranks);
  int o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(setScalar), c.at<float>(slot(o)), ranks, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::clipCoefficient(const plan::Step &s) {
  float maxNorm = static_cast<float>(attrs::maxNorm(s));
  int norm = s.inputs(0), o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(clipCoefficient), c.at<float>(slot(norm)), maxNorm, c.at<float>(slot(o)), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::lossScaleUpdate(const plan::Step &s) {
  float interval = static_cast<float>(attrs::growthInterval(s));
  float growth = static_cast<float>(attrs::growthFactor(s)), backoff = static_cast<float>(attrs::backoffFactor(s));
  int scale = s.inputs(0), clean = s.inputs(1), finite = s.inputs(2), nextScale = s.outputs(0), nextClean = s.outputs(1);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(lossScaleUpdate), c.at<float>(slot(scale)), c.at<float>(slot(clean)), c.at<uint8_t>(slot(finite)), interval,
                        growth, backoff, c.at<float>(slot(nextScale)), c.at<float>(slot(nextClean)), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::lrSchedule(const plan::Step &s) {
  int schedule = scheduleNumber(s);
  float warmup = static_cast<float>(attrs::warmupSteps(s)), total = static_cast<float>(attrs::totalSteps(s));
  int step = s.inputs(0), lr = s.inputs(1), o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(learningRate), schedule, c.at<float>(slot(lr)), c.at<float>(slot(step)), warmup, total, c.at<float>(slot(o)), Stream{});
    return Status::success();
  });
  return Status::success();
}

// ---- normalization and reductions -------------------------------------------------------------------------

Status CudaBackend::softmax(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  bool log = s.kernel() == "log_softmax";
  int x = s.inputs(0), y = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(softmax), cref(c, x), ref(c, y), outer, dim, inner, log, Stream{});
    return Status::success();
  });
  return Status::success();
}

/// layer_norm (x, scale[, bias] -> y, mean, rstd) and rms_norm (x, scale -> y, rstd).
Status CudaBackend::layerNorm(const plan::Step &s) {
  const NormStep n = readNormStep(s, shape(s.inputs(0)));
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(layerNorm), cref(c, n.x), cref(c, n.weight), n.bias >= 0 ? cref(c, n.bias) : kc::ConstRef{},
                ref(c, n.y), n.mean >= 0 ? ref(c, n.mean) : kc::Ref{}, ref(c, n.rstd), n.rows, n.cols, n.epsilon, !n.rms,
                Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::reduce(const plan::Step &s) {
  if (static_cast<size_t>(currentStep) < foldedReduce.size() && foldedReduce[currentStep])
    return Status::success(); // in the wgrad GEMM before it (BGRADB)
  auto kind = reduceKind(s);
  auto in = shape(s.inputs(0));
  auto axes = attrs::axes(s);
  auto strides = kc::contiguous(in);
  kc::Shape keptDims, reducedDims;
  kc::Strided kept, reduced;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool isReduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    auto &dims = isReduced ? reducedDims : keptDims;
    (isReduced ? reduced : kept).strides[dims.size()] = strides.strides[d];
    dims.push_back(in[d]);
  }
  kc::Extent keptExtent, reducedExtent;
  if (Status st = extentOf(s, in, keptExtent); !st.ok())
    return st;
  kc::makeExtent(keptDims, keptExtent);
  kc::makeExtent(reducedDims, reducedExtent);
  int x = s.inputs(0), o = s.outputs(0);
  auto t = type(x), outType = type(o);
  const Slot partials = reductionPartials(keptExtent, kept, reducedExtent, reduced);
  const int sms = multiprocessors;
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(reduce), kind, c.at(slot(x)), keptExtent, kept, reducedExtent, reduced, c.at(slot(o)), t, outType,
                c.at(partials), sms, Stream{});
    return Status::success();
  });
  return Status::success();
}

// ---- data movement ---------------------------------------------------------------------------------------

Status CudaBackend::emitCopy(const plan::Step &s, int x, kc::Strided src, int y, kc::Strided dst,
                             const kc::Shape &iteration) {
  kc::Extent extent;
  if (Status st = extentOf(s, iteration, extent); !st.ok())
    return st;
  size_t bytes = bytesOf(dtype(x));
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(stridedCopy), c.at(slot(x)), src, c.at(slot(y)), dst, extent, bytes, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::transpose(const plan::Step &s) {
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  auto perm = attrs::perm(s);
  if (perm.size() != in.size() || in.size() > kc::kMaxRank)
    return unsupported(s, "perm does not match the rank");
  // A 2-D f32 transpose that only feeds an FP8 quantize (the TN operand of a backward GEMM, its amax
  // maybe in between) is not materialized: the quantize reads the source transposed.
  const int x = s.inputs(0), t = s.outputs(0);
  int quantizeStep = currentStep + 1;
  if (quantizeStep < variant->steps_size() && variant->steps(quantizeStep).kernel() == "amax" &&
      variant->steps(quantizeStep).inputs(0) == t)
    ++quantizeStep;
  if (perm == std::vector<int64_t>{1, 0} && isFloat(dtype(x)) && quantizeStep < variant->steps_size() &&
      variant->steps(quantizeStep).kernel() == "quantize" && variant->steps(quantizeStep).inputs(0) == t &&
      readers(t) == quantizeStep - currentStep) {
    transposedQuantize[quantizeStep] = {x, in[0], in[1]};
    fold(currentStep, quantizeStep, "the quantize reads the untransposed source");
    return Status::success();
  }
  if (perm == std::vector<int64_t>{1, 0} && foldTransposeIntoGemm(x, t))
    return Status::success();
  auto inStrides = kc::contiguous(in);
  kc::Strided src;
  for (size_t d = 0; d < perm.size(); ++d)
    src.strides[d] = inStrides.strides[perm[d]];
  return emitCopy(s, x, src, t, kc::contiguous(out), out);
}

/// A 2-D transpose whose one reader is a Linear's input, maybe through a cast whose one reader that is
/// (the wgrad dW = dYᵀ·X of every backward pass): not materialized. The GEMM reads the source with
/// transposeA (cuBLASLt's transb), and the cast, if any, casts the source instead, in the source's layout.
/// The source must stay unchanged until it is read; its storage is then kept live that long.
bool CudaBackend::foldTransposeIntoGemm(int source, int transposed) {
  auto onlyReader = [&](int buffer) { return planGraph->onlyReaderAfter(buffer, currentStep); };
  int gemm = onlyReader(transposed), cast = -1;
  if (gemm < 0)
    return false;
  if (variant->steps(gemm).kernel() == "cast" && variant->steps(gemm).outputs_size() == 1) {
    cast = gemm;
    gemm = onlyReader(variant->steps(cast).outputs(0));
    if (gemm < 0)
      return false;
  }
  const auto &g = variant->steps(gemm);
  const int operand = cast >= 0 ? variant->steps(cast).outputs(0) : transposed;
  if (g.kernel() != "linear" || g.inputs_size() < 2 || g.inputs(0) != operand || g.inputs(1) == operand ||
      shape(operand).size() != 2 || !planGraph->unchangedBetween(source, currentStep, (cast >= 0 ? cast : gemm) + 1))
    return false;
  transposedOperand[gemm] = {source, cast >= 0 ? operand : source};
  fold(currentStep, gemm, "the GEMM reads the untransposed input");
  if (cast >= 0)
    castOfSource[cast] = source;
  planGraph->extendLive(source, cast >= 0 ? cast : gemm);
  return true;
}

Status CudaBackend::expand(const plan::Step &s) {
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  return emitCopy(s, s.inputs(0), kc::broadcastOperand(in, out), s.outputs(0), kc::contiguous(out), out);
}

Status CudaBackend::slice(const plan::Step &s) {
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  auto starts = attrs::starts(s), stepsAttr = attrs::sliceSteps(s);
  if (starts.size() != in.size() || stepsAttr.size() != in.size() || in.size() > kc::kMaxRank)
    return unsupported(s, "attributes do not match the rank");
  auto inStrides = kc::contiguous(in);
  kc::Strided src;
  for (size_t d = 0; d < in.size(); ++d) {
    src.base += starts[d] * inStrides.strides[d];
    src.strides[d] = stepsAttr[d] * inStrides.strides[d];
  }
  return emitCopy(s, s.inputs(0), src, s.outputs(0), kc::contiguous(out), out);
}

/// Concat and split: each piece is a strided copy at its offset along the axis of the whole.
Status CudaBackend::concat(const plan::Step &s) {
  int64_t axis = attrs::axis(s), offset = 0;
  auto whole = kc::contiguous(shape(s.outputs(0)));
  for (int in : s.inputs()) {
    auto piece = shape(in);
    auto dst = whole;
    dst.base = offset * whole.strides[axis];
    if (Status st = emitCopy(s, in, kc::contiguous(piece), s.outputs(0), dst, piece); !st.ok())
      return st;
    offset += piece[axis];
  }
  return Status::success();
}

Status CudaBackend::split(const plan::Step &s) {
  int64_t axis = attrs::axis(s), offset = 0;
  auto whole = kc::contiguous(shape(s.inputs(0)));
  for (int out : s.outputs()) {
    auto piece = shape(out);
    auto src = whole;
    src.base = offset * whole.strides[axis];
    if (Status st = emitCopy(s, s.inputs(0), src, out, kc::contiguous(piece), piece); !st.ok())
      return st;
    offset += piece[axis];
  }
  return Status::success();
}

Status CudaBackend::gather(const plan::Step &s) {
  auto data = shape(s.inputs(0));
  int64_t axis = attrs::axis(s), n = count(s.inputs(1));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= data[d];
  for (size_t d = axis + 1; d < data.size(); ++d)
    inner *= data[d];
  int64_t dim = data[axis];
  size_t bytes = bytesOf(dtype(s.inputs(0)));
  bool indices64 = dtype(s.inputs(1)) == plan::I64;
  int flag = errorFlag("gather '" + s.source() + "': an index is outside [-" + std::to_string(dim) + ", " +
                        std::to_string(dim) + ") along axis " + std::to_string(axis));
  int x = s.inputs(0), idx = s.inputs(1), y = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(gather), c.at(slot(x)), outer, dim, inner, c.at(slot(idx)), indices64, n, c.at(slot(y)), bytes,
               errorPointer(c, flag), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::gatherElements(const plan::Step &s) {
  auto axis = indexedAxis(s, shape(s.inputs(0)), shape(s.inputs(1)));
  if (!axis.ok())
    return axis.error();
  const int64_t outer = axis->full.outer, dim = axis->full.dim, inner = axis->full.inner;
  const int64_t picks = axis->picks;
  size_t bytes = bytesOf(dtype(s.inputs(0)));
  bool indices64 = dtype(s.inputs(1)) == plan::I64;
  int flag = errorFlag("gather_elements '" + s.source() + "': an index is outside [-" + std::to_string(dim) + ", " +
                       std::to_string(dim) + ")");
  int x = s.inputs(0), idx = s.inputs(1), y = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(gatherElements), c.at(slot(x)), outer, dim, inner, c.at(slot(idx)), indices64, picks, c.at(slot(y)), bytes,
                        errorPointer(c, flag), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::scatterAdd(const plan::Step &s) {
  auto axis = indexedAxis(s, shape(s.outputs(0)), shape(s.inputs(1)));
  if (!axis.ok())
    return axis.error();
  const int64_t outer = axis->full.outer, dim = axis->full.dim, inner = axis->full.inner;
  const int64_t picks = axis->picks;
  const bool elements = axis->elements, indices64 = dtype(s.inputs(1)) == plan::I64;
  int u = s.inputs(0), idx = s.inputs(1), y = s.outputs(0);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(scatterAdd), cref(c, u), outer, dim, inner, c.at(slot(idx)), indices64, picks, elements, ref(c, y), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::window(const plan::Step &s) {
  auto read = readWindowStep(s, [&](int i) { return shape(i); });
  if (!read.ok())
    return read.error();
  const WindowStep w = *read;
  if (w.channelsLast) // tec-channels-last lays out the cpu target's convolutions only
    return Status::error("step '" + s.kernel() + "' (from " + s.source() +
                         ") is channels-last, which the cuda backend does not run");
  const bool convolution = w.kind == WindowKind::Conv || w.kind == WindowKind::ConvInputGrad ||
                           w.kind == WindowKind::ConvWeightGrad;
  if (const int conv = convolution ? makeConvolution(s, {w.kind, w.window, type(w.out), options.allowTf32}) : -1;
      conv >= 0) {
    const Slot convWorkspace = stepScratch(static_cast<int64_t>(convolutions[conv]->workspaceBytes()));
    // cuDNN's convolution API adds no bias: a broadcasting add over [1, C, 1, 1] follows, in place.
    kc::Extent extent;
    kc::Strided outStrides, biasStrides;
    if (w.bias >= 0) {
      if (Status st = extentOf(s, shape(w.out), extent); !st.ok())
        return st;
      outStrides = kc::broadcastOperand(shape(w.out), shape(w.out));
      biasStrides = kc::broadcastOperand({1, w.window.outChannels, 1, 1}, shape(w.out));
    }
    const std::string name = stepName(s);
    const auto t = type(w.out);
    emit([=](const Context &c) {
      std::string error;
      if (!c.k->convolution(conv, c.at(slot(w.a)), c.at(slot(w.b)), c.at(slot(w.out)), c.at(convWorkspace), error))
        return Status::error(name + ": cuDNN failed: " + error);
      if (w.bias >= 0)
        c.k->launch(TEC_KC(binary), BinaryKind::Add, c.at(slot(w.out)), outStrides, c.at(slot(w.bias)), biasStrides, c.at(slot(w.out)),
                    extent, t, Stream{});
      return Status::success();
    });
    return Status::success();
  }
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(window), w.kind, w.window, cref(c, w.a), w.b >= 0 ? cref(c, w.b) : kc::ConstRef(),
                w.bias >= 0 ? cref(c, w.bias) : kc::ConstRef(), ref(c, w.out), w.countIncludePad, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::argReduce(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  const bool max = attrs::windowKind(s) == "max", last = attrs::selectLastIndex(s) != 0;
  int x = s.inputs(0), y = s.outputs(0);
  auto t = type(x);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(argReduce), max, last, c.at(slot(x)), t, outer, dim, inner, static_cast<int64_t *>(c.at(slot(y))), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::cumSum(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  const bool exclusive = attrs::exclusive(s) != 0, reverse = attrs::reverse(s) != 0;
  int x = s.inputs(0), y = s.outputs(0);
  auto t = type(x);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(cumSum), c.at(slot(x)), c.at(slot(y)), t, outer, dim, inner, exclusive, reverse, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::copy(const plan::Step &s) {
  int64_t bytes = buf(s.outputs(0)).bytes();
  int x = s.inputs(0), y = s.outputs(0);
  emit([=](const Context &c) {
    if (c.at(slot(x)) != c.at(slot(y)))
      c.k->copy(c.at(slot(y)), c.at(slot(x)), bytes);
    return Status::success();
  });
  return Status::success();
}

// ---- FP8 ------------------------------------------------------------------------------------------------

Status CudaBackend::amax(const plan::Step &s) {
  int x = s.inputs(0), o = s.outputs(0);
  // Folded into the quantize right after it, when that one reads the same f32 tensor: one pass, not two.
  if (currentStep + 1 < variant->steps_size()) {
    const auto &next = variant->steps(currentStep + 1);
    if (next.kernel() == "quantize" && next.inputs_size() == 2 && next.inputs(0) == x && isFloat(dtype(x)) &&
        next.inputs(1) != o) {
      fusedAmax[currentStep + 1] = o;
      fold(currentStep, currentStep + 1, "the quantize takes the amax in the same pass");
      return Status::success();
    }
  }
  int64_t n = count(x);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(amax), cref(c, x), n, c.at<float>(slot(o)), Stream{});
    return Status::success();
  });
  return Status::success();
}

int64_t CudaBackend::healthCounter(int scale, int64_t n) {
  if (!options.quantizeStats)
    return -1;
  stats.push_back({quantizedTensor(buf(scale).name()), n, 0, 0});
  return static_cast<int64_t>(stats.size()) - 1;
}

/// cast_fp8: the activation, its amax and its quantize in one kernel.
Status CudaBackend::castFp8(const plan::Step &s) {
  const int x = s.inputs(0), scale = s.inputs(1), y = s.outputs(0), amax = s.outputs(1);
  const int64_t n = count(y), counter = healthCounter(scale, n);
  const auto format = fp8Format(dtype(y));
  const auto activation = castActivation(s);
  emit([=](const Context &c) {
    c.k->memset(c.at(slot(amax)), 0, sizeof(float));
    const kc::ConstRef in = cref(c, x);
    c.k->launch(TEC_KC(quantizeWithAmax), in.data, in.type, c.at<float>(slot(scale)), c.at<uint8_t>(slot(y)),
                c.at<float>(slot(amax)), n, format, Stream{},
                counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr, activation);
    return Status::success();
  });
  return Status::success();
}

/// cast_fp8_dbias: dY's quantize, amax and column sums in one pass (and one over the partial sums).
Status CudaBackend::castFp8BiasGrad(const plan::Step &s) {
  const int x = s.inputs(0), scale = s.inputs(1), y = s.outputs(0), amax = s.outputs(1), dbias = s.outputs(2);
  const int64_t n = count(x), cols = shape(x).back(), rows = cols ? n / cols : 0, counter = healthCounter(scale, n);
  const auto format = fp8Format(dtype(y));
  const Slot partials = stepScratch(kc::biasGradChunks(rows) * cols * 8);
  emit([=](const Context &c) {
    c.k->memset(c.at(slot(amax)), 0, sizeof(float));
    const kc::ConstRef in = cref(c, x);
    c.k->launch(TEC_KC(quantizeWithBiasGrad), in.data, in.type, rows, cols, c.at<float>(slot(scale)),
                c.at<uint8_t>(slot(y)), c.at<float>(slot(amax)), c.at<float>(slot(dbias)), c.at<double>(partials),
                format, Stream{}, counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
    return Status::success();
  });
  return Status::success();
}

/// layer_norm_fp8 (x, weight, bias?, scale -> q, amax, mean, rstd) in one kernel.
Status CudaBackend::layerNormFp8(const plan::Step &s) {
  const NormStep n = readNormStep(s, shape(s.inputs(0)));
  const int64_t counter = healthCounter(n.scale, count(n.y));
  const auto format = fp8Format(dtype(n.y));
  emit([=](const Context &c) {
    c.k->memset(c.at(slot(n.amax)), 0, sizeof(float));
    const kc::ConstRef in = cref(c, n.x), weight = cref(c, n.weight), bias = n.bias >= 0 ? cref(c, n.bias) : kc::ConstRef{};
    c.k->launch(TEC_KC(layerNormQuantize), in.data, in.type, weight.data, bias.data, weight.type,
                c.at<float>(slot(n.scale)), c.at<uint8_t>(slot(n.y)), c.at<float>(slot(n.amax)),
                c.at<float>(slot(n.mean)), c.at<float>(slot(n.rstd)), n.rows, n.cols, n.epsilon, format, Stream{},
                counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::quantize(const plan::Step &s) {
  int x = s.inputs(0), scale = s.inputs(1), y = s.outputs(0);
  int64_t n = count(y);
  auto format = fp8Format(dtype(y));
  Slot amaxOut = fusedAmax.count(currentStep) ? slot(fusedAmax[currentStep]) : Slot{};
  const int64_t counter = healthCounter(scale, n);
  // Current scaling taken in (currentScalingFoldsIntoQuantize): the scale made from its amax in this launch.
  const auto current = currentScaledQuantize.count(currentStep)
                           ? std::optional<CurrentScaledQuantize>(currentScaledQuantize.at(currentStep))
                           : std::nullopt;
  auto counts = [=](const Context &c) {
    return counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr;
  };
  auto fold = transposedQuantize.find(currentStep);
  if (fold != transposedQuantize.end() || attrs::transposeInput(s)) {
    const bool own = fold == transposedQuantize.end(); // the quantize reads its own input transposed
    const int source = own ? x : std::get<0>(fold->second);
    const int64_t rows = own ? shape(x)[0] : std::get<1>(fold->second), cols = own ? shape(x)[1] : std::get<2>(fold->second);
    emit([=](const Context &c) {
      const kc::ConstRef in = cref(c, source);
      if (current) {
        c.k->launch(TEC_KC(quantizeTransposedCurrentScaled), in.data, in.type, rows, cols, c.at<float>(slot(current->amax)),
                    current->fp8Max, current->pow2, current->epsilon, c.at<float>(slot(scale)),
                    c.at<float>(slot(current->scaleInv)), c.at<uint8_t>(slot(y)), format, Stream{}, counts(c));
        return Status::success();
      }
      if (!amaxOut.null())
        c.k->memset(c.at(amaxOut), 0, sizeof(float));
      c.k->launch(TEC_KC(quantizeTransposedWithAmax), in.data, in.type, rows, cols, c.at<float>(slot(scale)),
                  c.at<uint8_t>(slot(y)), c.at<float>(amaxOut), format, Stream{}, counts(c));
      return Status::success();
    });
    return Status::success();
  }
  emit([=](const Context &c) {
    const kc::ConstRef in = cref(c, x);
    if (current) {
      c.k->launch(TEC_KC(quantizeCurrentScaled), in.data, in.type, c.at<float>(slot(current->amax)), current->fp8Max,
                  current->pow2, current->epsilon, c.at<float>(slot(scale)), c.at<float>(slot(current->scaleInv)),
                  c.at<uint8_t>(slot(y)), n, format, Stream{}, counts(c));
      return Status::success();
    }
    if (!amaxOut.null())
      c.k->memset(c.at(amaxOut), 0, sizeof(float));
    c.k->launch(TEC_KC(quantizeWithAmax), in.data, in.type, c.at<float>(slot(scale)), c.at<uint8_t>(slot(y)),
                c.at<float>(amaxOut), n, format, Stream{}, counts(c), Epilogue::None);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::dequantize(const plan::Step &s) {
  int x = s.inputs(0), scaleInv = s.inputs(1), y = s.outputs(0);
  int64_t n = count(y);
  auto format = fp8Format(dtype(x));
  Slot out = dtype(y) == plan::F32 ? slot(y) : stepScratch(n * 4);
  auto to = type(y);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(dequantize), c.at<uint8_t>(slot(x)), c.at<float>(slot(scaleInv)), c.at<float>(out), n, format, Stream{});
    if (to != ElementType::F32)
      c.k->launch(TEC_KC(cast), c.at(out), ElementType::F32, c.at(slot(y)), to, n, Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::delayedScaling(const plan::Step &s) {
  int64_t length = count(s.inputs(0)), margin = attrs::margin(s);
  float fp8Max = static_cast<float>(attrs::fp8Max(s));
  bool mostRecent = attrs::algo(s) == "most_recent";
  int h = s.inputs(0), scale = s.inputs(1), a = s.inputs(2), nh = s.outputs(0), ns = s.outputs(1), nsi = s.outputs(2);
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(delayedScaling), c.at<float>(slot(h)), length, c.at<float>(slot(scale)), c.at<float>(slot(a)), fp8Max, margin,
                       mostRecent, c.at<float>(slot(nh)), c.at<float>(slot(ns)), c.at<float>(slot(nsi)), Stream{});
    return Status::success();
  });
  return Status::success();
}

/// Whether the current_scaling step `s` can run inside the quantize right after it: that quantize alone reads
/// the scale, takes no amax of its own, and its output does not overlap the amax it reads (codegen keeps the
/// amax alive through the quantize, so that it does not).
bool CudaBackend::currentScalingFoldsIntoQuantize(const plan::Step &s) const {
  if (currentStep + 1 >= variant->steps_size())
    return false;
  const plan::Step &q = variant->steps(currentStep + 1);
  const int next = currentStep + 1;
  return q.kernel() == "quantize" && q.inputs_size() == 2 && q.inputs(1) == s.outputs(0) &&
         readers(s.outputs(0)) == 1 && !fusedAmax.count(next) && !planGraph->overlaps(q.outputs(0), s.inputs(0));
}

Status CudaBackend::currentScaling(const plan::Step &s) {
  const float fp8Max = static_cast<float>(attrs::fp8Max(s)), epsilon = static_cast<float>(attrs::amaxEpsilon(s));
  const bool pow2 = attrs::pow2Scales(s) != 0;
  int a = s.inputs(0), scale = s.outputs(0), scaleInv = s.outputs(1);
  if (currentScalingFoldsIntoQuantize(s)) {
    currentScaledQuantize[currentStep + 1] = {a, scaleInv, fp8Max, epsilon, pow2};
    fold(currentStep, currentStep + 1, "the quantize computes the scale from the amax in the same launch");
    return Status::success();
  }
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(currentScaling), c.at<float>(slot(a)), fp8Max, pow2, epsilon, c.at<float>(slot(scale)),
                c.at<float>(slot(scaleInv)), Stream{});
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::quantizeBlocks(const plan::Step &s) {
  const int x = s.inputs(0), y = s.outputs(0), scaleInv = s.outputs(1);
  const auto dims = shape(y);
  const int64_t cols = dims.empty() ? 1 : dims.back(), rows = cols ? count(y) / cols : 0;
  const auto block = attrs::block(s);
  const bool transposed = attrs::transposeInput(s) != 0;
  const auto format = fp8Format(dtype(y));
  const auto kind = blockScaleKind(s);
  const float epsilon = static_cast<float>(attrs::amaxEpsilon(s));
  emit([=](const Context &c) {
    const kc::ConstRef in = cref(c, x);
    c.k->launch(TEC_KC(quantizeBlocks), in.data, in.type, c.at<uint8_t>(slot(y)), c.at<float>(slot(scaleInv)), rows, cols,
                block[0], block[1], transposed, format, kind, epsilon, Stream{});
    return Status::success();
  });
  return Status::success();
}

/// cuBLASLt's block-scaled GEMM for this step where it runs it (cublasBlockGemm), else tec's kernel, said in
/// a note. cuBLASLt writes x · wᵀ; the bias and activation follow as tec's kernel after it.
Status CudaBackend::fp8BlockGemm(const plan::Step &s) {
  const int xq = s.inputs(0), wq = s.inputs(1), xsi = s.inputs(2), wsi = s.inputs(3), y = s.outputs(0);
  const int bias = s.inputs_size() > 4 ? s.inputs(4) : -1;
  const auto wShape = shape(wq), os = shape(y);
  const auto xBlock = attrs::inputBlock(s), wBlock = attrs::weightBlock(s);
  const auto xf = fp8Format(dtype(xq)), wf = fp8Format(dtype(wq));
  const bool transB = attrs::transposeB(s);
  const int64_t n = os.back(), k = transB ? wShape[1] : wShape[0], m = n ? count(y) / n : 0;
  const Epilogue e = epilogue(s);
  auto onKernel = [=](const Context &c) {
    c.k->launch(TEC_KC(fp8BlockGemm), c.at<uint8_t>(slot(xq)), c.at<float>(slot(xsi)), xBlock[0], xBlock[1], xf,
                c.at<uint8_t>(slot(wq)), c.at<float>(slot(wsi)), wBlock[0], wBlock[1], wf, transB,
                bias >= 0 ? cref(c, bias) : kc::ConstRef{}, ref(c, y), m, n, k, e, Stream{});
  };
  std::string why;
  const int gemm = cublasBlockGemm(s, why);
  if (gemm < 0) {
    note(stepName(s) + ": block-scaled FP8 GEMM on tec's kernel (CUDA cores): " + why);
    emit([=](const Context &c) {
      onKernel(c);
      return Status::success();
    });
    return Status::success();
  }
  const kc::GemmScaling xs = gemmSpecs[gemm].scalingA, ws = gemmSpecs[gemm].scalingB;
  const int64_t kBlocks = (k + 127) / 128, wRows = ws == kc::GemmScaling::Block128x128 ? (n + 127) / 128 : n;
  const Slot xScales = stepScratch(kc::cublasScaleCount(xs, m, kBlocks) * 4);
  const Slot wScales = stepScratch(kc::cublasScaleCount(ws, wRows, kBlocks) * 4);
  const bool after = bias >= 0 || e != Epilogue::None;
  emit([=](const Context &c) {
    c.k->launch(TEC_KC(toCublasBlockScales), c.at<float>(slot(xsi)), c.at<float>(xScales), xs, m, kBlocks, Stream{});
    c.k->launch(TEC_KC(toCublasBlockScales), c.at<float>(slot(wsi)), c.at<float>(wScales), ws, wRows, kBlocks, Stream{});
    kc::GemmOperands o;
    o.a = c.at(slot(xq));
    o.b = c.at(slot(wq));
    o.d = c.at(slot(y));
    o.aScaleInv = c.at<float>(xScales);
    o.bScaleInv = c.at<float>(wScales);
    std::string error;
    if (!c.k->gemm(gemm, o, error)) { // every algorithm failed at run time: the same product on tec's kernel
      onKernel(c);
      return Status::success();
    }
    if (after)
      c.k->launch(TEC_KC(biasActivation), ref(c, y), bias >= 0 ? cref(c, bias) : kc::ConstRef{}, m, n, e, Stream{});
    return Status::success();
  });
  return Status::success();
}

/// The GEMM table's cuBLASLt block-scaled GEMM for an fp8_block_gemm step, or -1 with why not: block scale
/// modes on this GPU and cuBLASLt (blockScaleModes), blocks and layout cuBLASLt takes (kc::cublasBlockScaling),
/// its rules (kc::cublasLtSupports) and its heuristics. Compiling for --emit=cuda, programs run tec's kernel.
int CudaBackend::cublasBlockGemm(const plan::Step &s, std::string &why) {
  if (recording) {
    why = "--emit=cuda programs run tec's kernel";
    return -1;
  }
  if (!blockScaleModes) {
    why = "cuBLASLt's block scale modes need Hopper (sm_90) and cuBLASLt 12.9, this is sm_" + std::to_string(major) +
          std::to_string(minor) + " with cuBLASLt " + std::to_string(kc::cublasLtVersion());
    return -1;
  }
  const auto xBlock = attrs::inputBlock(s), wBlock = attrs::weightBlock(s);
  kc::GemmSpec spec;
  if (xBlock.size() != 2 || wBlock.size() != 2 ||
      !kc::cublasBlockScaling({xBlock[0], xBlock[1]}, {wBlock[0], wBlock[1]}, attrs::transposeB(s), spec.scalingA,
                              spec.scalingB, why))
    return -1;
  const int xq = s.inputs(0), wq = s.inputs(1), y = s.outputs(0);
  spec.transposeB = true;
  spec.n = shape(y).back();
  spec.k = shape(wq)[1];
  spec.m = spec.n ? count(y) / spec.n : 0;
  spec.a = type(xq);
  spec.b = type(wq);
  spec.d = type(y);
  spec.alignA = alignmentOfSlot(slot(xq));
  spec.alignB = alignmentOfSlot(slot(wq));
  spec.alignD = alignmentOfSlot(slot(y));
  return makeGemm(spec, why);
}

Status CudaBackend::optimizerUpdate(const plan::Step &s) {
  if (foldedOptimizerSteps.size() > static_cast<size_t>(currentStep) && foldedOptimizerSteps[currentStep])
    return Status::success();
  auto first = readOptimizerStep(s);
  if (!first.ok())
    return first.error();
  // This step and the optimizer steps right after it with the same hyperparameters and scalars: one
  // multi-tensor launch for all of them (every parameter's update of a training step, usually).
  foldedOptimizerSteps.resize(variant->steps_size(), false);
  std::vector<OptimizerStep> group{*first};
  for (int next = currentStep + 1; next < variant->steps_size() && variant->steps(next).kernel() == "optimizer_update";
       ++next) {
    auto o = readOptimizerStep(variant->steps(next));
    if (!o.ok())
      return o.error();
    const auto &a = o->params, &b = first->params;
    if (a.adamw != b.adamw || a.beta1 != b.beta1 || a.beta2 != b.beta2 || a.eps != b.eps ||
        a.weightDecay != b.weightDecay || a.momentum != b.momentum || a.nesterov != b.nesterov || o->lr != first->lr ||
        o->step != first->step || o->clip != first->clip || o->finite != first->finite)
      break;
    group.push_back(*o);
    foldedOptimizerSteps[next] = true;
    fold(next, currentStep, "one multi-tensor optimizer launch");
  }
  auto maybe = [](const std::vector<int> &list, size_t i) { return i < list.size() ? list[i] : -1; };
  const OptimizerStep head = group.front();
  emit([=](const Context &c) {
    auto at = [&](int buffer) { return buffer >= 0 ? c.at<float>(slot(buffer)) : nullptr; };
    std::vector<kc::OptimizerTensor> tensors;
    for (const auto &o : group)
      tensors.push_back({at(o.param), at(o.grad), at(maybe(o.moments, 0)), at(maybe(o.moments, 1)), at(o.newParam),
                         at(maybe(o.newMoments, 0)), at(maybe(o.newMoments, 1)), count(o.param)});
    c.k->launch(TEC_KC(optimizerUpdate), head.params, at(head.lr), at(head.step), at(head.clip),
                         head.finite >= 0 ? c.at<uint8_t>(slot(head.finite)) : nullptr, tensors, Stream{});
    return Status::success();
  });
  return Status::success();
}

} // namespace tec::cudabackend
