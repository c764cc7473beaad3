// The CPU backend's step compilers: each turns a plan step into a closure over resolved pointers.
#include "runtime/CpuBackend.h"
#include "runtime/Collectives.h"
#include "support/Sharding.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace tec::cpubackend {

Status CpuBackend::binary(const plan::Step &s) {
  auto kind = binaryKind(s);
  int a = s.inputs(0), b = s.inputs(1), o = s.outputs(0);
  auto as = shape(a), bs = shape(b), os = shape(o);
  if (dtype(o) == plan::I32 || dtype(o) == plan::I64) {
    if (dtype(o) == plan::I32)
      emit([=, pa = ptr<int32_t>(a), pb = ptr<int32_t>(b), po = ptr<int32_t>(o)] {
        k::binary(kind, pa, as, pb, bs, po, os);
        return Status::success();
      });
    else
      emit([=, pa = ptr<int64_t>(a), pb = ptr<int64_t>(b), po = ptr<int64_t>(o)] {
        k::binary(kind, pa, as, pb, bs, po, os);
        return Status::success();
      });
    return Status::success();
  }
  float *pa = floatIn(a), *pb = floatIn(b), *po = floatOut(o);
  emit([=] {
    k::binary(kind, pa, as, pb, bs, po, os);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::unary(const plan::Step &s) {
  auto kind = unaryKind(s);
  int64_t n = count(s.outputs(0));
  if (dtype(s.outputs(0)) == plan::I32) {
    emit([=, x = ptr<int32_t>(s.inputs(0)), y = ptr<int32_t>(s.outputs(0))] {
      k::intUnary(kind, x, y, n);
      return Status::success();
    });
    return Status::success();
  }
  if (dtype(s.outputs(0)) == plan::I64) {
    emit([=, x = ptr<int64_t>(s.inputs(0)), y = ptr<int64_t>(s.outputs(0))] {
      k::intUnary(kind, x, y, n);
      return Status::success();
    });
    return Status::success();
  }
  float *x = floatIn(s.inputs(0)), *y = floatOut(s.outputs(0));
  emit([=] {
    k::unary(kind, x, y, n);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::oneHot(const plan::Step &s) {
  int64_t n = count(s.inputs(0)), depth = shape(s.outputs(0)).back();
  auto error = [depth] { return Status::badData("one_hot: a label is outside [0, " + std::to_string(depth) + ")"); };
  if (dtype(s.inputs(0)) == plan::I32)
    emit([=, l = ptr<int32_t>(s.inputs(0)), y = ptr<float>(s.outputs(0))] {
      return k::oneHot(l, n, depth, y) ? Status::success() : error();
    });
  else
    emit([=, l = ptr<int64_t>(s.inputs(0)), y = ptr<float>(s.outputs(0))] {
      return k::oneHot(l, n, depth, y) ? Status::success() : error();
    });
  return Status::success();
}

Status CpuBackend::clipCoefficient(const plan::Step &s) {
  float maxNorm = static_cast<float>(attrs::maxNorm(s));
  emit([=, norm = ptr<float>(s.inputs(0)), out = ptr<float>(s.outputs(0))] {
    *out = kernels::clipCoefficient(*norm, maxNorm);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::allFinite(const plan::Step &s) {
  std::vector<std::pair<const float *, int64_t>> inputs;
  for (int i : s.inputs())
    inputs.push_back({floatIn(i), count(i)});
  emit([=, out = ptr<uint8_t>(s.outputs(0))] {
    bool finite = true;
    for (auto [p, n] : inputs)
      for (int64_t j = 0; j < n && finite; ++j)
        finite = std::isfinite(p[j]);
    *out = finite;
    return Status::success();
  });
  return Status::success();
}

namespace {

/// A gradient of at least this many floats is all-reduced in place on its own rather than packed into its
/// bucket's message: copying it in and out (its size read and written twice) costs more than the latency of
/// one more collective (a few microseconds on one machine). The MLP's 1.6 MB bucket on 2 ranks: packing
/// and unpacking took as long as the all-reduce itself.
constexpr int64_t kAllReduceAloneFloats = int64_t(1) << 15;

} // namespace

Status CpuBackend::allReduce(const plan::Step &s) {
  auto joined = ProcessGroup::get();
  if (!joined.ok())
    return joined.error();
  ProcessGroup *group = *joined;
  const CollectiveOp op = collectiveOp(attrs::reduction(s));
  std::vector<std::tuple<const float *, float *, int64_t>> tensors;
  for (int i = 0; i < s.inputs_size(); ++i)
    tensors.push_back({floatIn(s.inputs(i)), floatOut(s.outputs(i)), count(s.outputs(i))});
  // The small tensors of a bucket travel as one message (one latency, not one per tensor), packed here; the
  // large ones in place, each a message of its own.
  std::vector<std::pair<float *, int64_t>> alone, small;
  for (auto [in, out, n] : tensors)
    if (n > 0)
      (n >= kAllReduceAloneFloats ? alone : small).push_back({out, n});
  if (small.size() == 1)
    alone.push_back(small.front()), small.clear();
  int64_t smallTotal = 0;
  for (auto [out, n] : small)
    smallTotal += n;
  auto packed = std::make_shared<std::vector<float>>(group->size() > 1 ? smallTotal : 0);
  auto tickets = std::make_shared<std::vector<int64_t>>();
  emit([=] {
    for (auto [in, out, n] : tensors)
      if (in != out)
        std::copy(in, in + n, out);
    tickets->clear();
    if (group->size() == 1)
      return Status::success();
    auto start = [&](float *data, int64_t n) {
      auto started = group->start(CollectiveKind::AllReduce, data, data, n, op);
      if (started.ok())
        tickets->push_back(*started);
      return started.ok() ? Status::success() : started.error();
    };
    if (!packed->empty()) {
      float *at = packed->data();
      for (auto [out, n] : small)
        at = std::copy(out, out + n, at);
      if (Status st = start(packed->data(), smallTotal); !st.ok())
        return st;
    }
    for (auto [out, n] : alone)
      if (Status st = start(out, n); !st.ok())
        return st;
    return Status::success();
  });
  endCollectiveBeforeReader(s, [=] {
    for (int64_t ticket : *tickets)
      if (Status st = group->wait(ticket); !st.ok())
        return st;
    const float *at = packed->data();
    if (!packed->empty())
      for (auto [out, n] : small)
        std::copy(at, at + n, out), at += n;
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::sharding(const plan::Step &s) {
  auto joined = ProcessGroup::get();
  if (!joined.ok())
    return joined.error();
  ProcessGroup *group = *joined;
  const int64_t ranks = attrs::ranks(s);
  if (ranks != group->size())
    return Status::error("this plan shards its optimizer state over " + std::to_string(ranks) +
                         " ranks (--shard-optimizer " + std::to_string(ranks) + "), but it runs on " +
                         std::to_string(group->size()) + ": start it with mpirun -np " + std::to_string(ranks) +
                         ", or compile it with --shard-optimizer " + std::to_string(group->size()) +
                         (group->size() == 1 ? " (or without it)" : ""));
  const std::string kernel = s.kernel();
  const bool gather = kernel == "all_gather";
  struct Tensor {
    const float *whole = nullptr;
    float *wholeOut = nullptr, *shard = nullptr;
    const float *shardIn = nullptr;
    int64_t elements = 0, offset = 0; // offset: in a rank's part of the packed bucket
  };
  std::vector<Tensor> tensors;
  int64_t perRank = 0;
  for (int i = 0; i < s.inputs_size(); ++i) {
    Tensor t;
    if (gather) {
      t.shardIn = floatIn(s.inputs(i)), t.wholeOut = floatOut(s.outputs(i));
      t.elements = count(s.outputs(i));
    } else {
      t.whole = floatIn(s.inputs(i)), t.shard = floatOut(s.outputs(i));
      t.elements = count(s.inputs(i));
    }
    t.offset = perRank;
    perRank += shardElements(t.elements, ranks);
    tensors.push_back(t);
  }
  const int rank = group->rank();
  if (kernel == "shard") {
    emit([t = tensors[0], ranks, rank] {
      takeShard(t.whole, t.elements, ranks, rank, t.shard);
      return Status::success();
    });
    return Status::success();
  }
  // A bucket travels as one message: rank q's part is the q-th shard of each tensor in turn.
  auto packed = std::make_shared<std::vector<float>>(perRank * (ranks + 1));
  auto ticket = std::make_shared<int64_t>(-1);
  emit([=] {
    float *all = packed->data(), *mine = all + perRank * ranks;
    if (gather)
      for (const Tensor &t : tensors)
        std::copy(t.shardIn, t.shardIn + shardElements(t.elements, ranks), mine + t.offset);
    else
      for (int64_t q = 0; q < ranks; ++q)
        for (const Tensor &t : tensors)
          takeShard(t.whole, t.elements, ranks, q, all + q * perRank + t.offset);
    // The reduce-scatter as an all-reduce of the whole bucket, of which each rank keeps its part: Open MPI's
    // MPI_Reduce_scatter_block (a reduce, then a scatter, by its fixed rules) took 0.84 ms for 1.6 MB on 2
    // ranks of one machine, its MPI_Allreduce 0.14 (ZeRO-1's MLP step spent 1.0 ms there, 0.36 unsharded).
    auto started = gather ? group->start(CollectiveKind::AllGather, mine, all, perRank)
                          : group->start(CollectiveKind::AllReduce, all, all, perRank * ranks);
    if (!started.ok())
      return started.error();
    *ticket = *started;
    return Status::success();
  });
  endCollectiveBeforeReader(s, [=] {
    if (Status st = group->wait(*ticket); !st.ok())
      return st;
    const float *all = packed->data(), *mine = all + perRank * (gather ? ranks : rank);
    for (const Tensor &t : tensors) {
      const int64_t k = shardElements(t.elements, ranks);
      if (gather)
        for (int64_t q = 0, done = 0; q < ranks && done < t.elements; ++q, done += k)
          std::copy_n(all + q * perRank + t.offset, std::min(k, t.elements - done), t.wholeOut + done);
      else
        std::copy_n(mine + t.offset, k, t.shard);
    }
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::worldSize(const plan::Step &s) {
  auto group = ProcessGroup::get();
  if (!group.ok())
    return group.error();
  emit([ranks = static_cast<float>((*group)->size()), out = ptr<float>(s.outputs(0))] {
    *out = ranks;
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::lossScaleUpdate(const plan::Step &s) {
  float interval = static_cast<float>(attrs::growthInterval(s));
  float growth = static_cast<float>(attrs::growthFactor(s)), backoff = static_cast<float>(attrs::backoffFactor(s));
  emit([=, scale = ptr<float>(s.inputs(0)), clean = ptr<float>(s.inputs(1)), finite = ptr<uint8_t>(s.inputs(2)),
        nextScale = ptr<float>(s.outputs(0)), nextClean = ptr<float>(s.outputs(1))] {
    kernels::updateLossScale(*scale, *clean, *finite, interval, growth, backoff, nextScale, nextClean);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::lrSchedule(const plan::Step &s) {
  int schedule = scheduleNumber(s);
  float warmup = static_cast<float>(attrs::warmupSteps(s)), total = static_cast<float>(attrs::totalSteps(s));
  emit([=, step = ptr<float>(s.inputs(0)), lr = ptr<float>(s.inputs(1)), out = ptr<float>(s.outputs(0))] {
    *out = kernels::learningRate(schedule, *lr, *step, warmup, total);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::activationGrad(const plan::Step &s) {
  auto kind = activationGradKind(s);
  int64_t n = count(s.outputs(0));
  float *dy = floatIn(s.inputs(0)), *x = floatIn(s.inputs(1)), *dx = floatOut(s.outputs(0));
  emit([=] {
    k::activationGrad(kind, dy, x, dx, n);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::where(const plan::Step &s) {
  int c = s.inputs(0), x = s.inputs(1), y = s.inputs(2), o = s.outputs(0);
  auto cs = shape(c), xs = shape(x), ys = shape(y), os = shape(o);
  size_t bytes = dtypeBytes(dtype(o));
  emit([=, pc = ptr<bool>(c), px = ptr(x), py = ptr(y), po = ptr(o)] {
    k::where(pc, cs, px, xs, py, ys, po, os, bytes);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::compare(const plan::Step &s) {
  auto kind = *compareKind(attrs::predicate(s)); // the plan contracts checked it
  int a = s.inputs(0), b = s.inputs(1), o = s.outputs(0);
  auto as = shape(a), bs = shape(b), os = shape(o);
  auto typed = [&](auto *pa, auto *pb) {
    emit([=, po = ptr<bool>(o)] {
      k::compare(kind, pa, as, pb, bs, po, os);
      return Status::success();
    });
    return Status::success();
  };
  switch (dtype(a)) {
  case plan::I32: return typed(ptr<int32_t>(a), ptr<int32_t>(b));
  case plan::I64: return typed(ptr<int64_t>(a), ptr<int64_t>(b));
  case plan::BOOL: return typed(ptr<bool>(a), ptr<bool>(b));
  default: return typed(floatIn(a), floatIn(b)); // f16/bf16 widen exactly
  }
}

Status CpuBackend::cast(const plan::Step &s) {
  int x = s.inputs(0), o = s.outputs(0);
  auto from = elementType(dtype(x)), to = elementType(dtype(o));
  int64_t n = count(o);
  emit([=, px = ptr(x), po = ptr(o)] {
    k::cast(px, from, po, to, n);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::softmax(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  bool log = s.kernel() == "log_softmax";
  float *x = floatIn(s.inputs(0)), *y = floatOut(s.outputs(0));
  emit([=] {
    k::softmax(x, y, outer, dim, inner, log);
    return Status::success();
  });
  return Status::success();
}

/// layer_norm (x, scale[, bias] -> y, mean, rstd) and rms_norm (x, scale -> y, rstd).
Status CpuBackend::layerNorm(const plan::Step &s) {
  const NormStep n = readNormStep(s, shape(s.inputs(0)));
  float *x = floatIn(n.x), *g = floatIn(n.weight), *b = n.bias >= 0 ? floatIn(n.bias) : nullptr;
  float *y = floatOut(n.y), *mean = n.mean >= 0 ? floatOut(n.mean) : nullptr, *rstd = floatOut(n.rstd);
  emit([=] {
    k::layerNorm(x, g, b, y, mean, rstd, n.rows, n.cols, n.epsilon, !n.rms);
    return Status::success();
  });
  return Status::success();
}

/// attention and attention_grad; a boolean mask is read as bytes, a float one widened like any input.
Status CpuBackend::attention(const plan::Step &s) {
  auto step = readAttentionStep(s, [&](int i) { return shape(i); }, [&](int i) { return dtype(i); });
  if (!step.ok())
    return Status::error("step '" + s.kernel() + "' (from " + s.source() + "): " + step.error().message());
  const AttentionStep a = *step;
  const void *mask = a.mask < 0 ? nullptr : dtype(a.mask) == plan::BOOL ? ptr(a.mask) : floatIn(a.mask);
  if (!a.grad && !a.fp8)
    return attentionInPlace(a, mask);
  float *q = floatIn(a.q), *k = floatIn(a.k), *v = floatIn(a.v), *lse = ptr<float>(a.lse);
  if (a.fp8) // FP8 codes widen to their values; outputs come back scaled and narrow to FP8 as they are written
    return attentionFp8(a, q, k, v, mask, lse);
  float *dout = floatIn(a.dout), *out = floatIn(a.out);
  float *dq = floatOut(a.dq), *dk = floatOut(a.dk), *dv = floatOut(a.dv);
  emit([=] {
    k::attentionGrad(a.shape, dout, q, k, v, out, lse, mask, dq, dk, dv);
    return Status::success();
  });
  return Status::success();
}

/// Forward attention: q, k, v where headViews says (else their own buffers), and out written through the head
/// transpose after it when that is its only reader and its storage is free until then (else its own buffer).
Status CpuBackend::attentionInPlace(const AttentionStep &a, const void *mask) {
  k::AttentionLayout layout = k::AttentionLayout::contiguous(a.shape);
  const float *operands[3];
  std::vector<int> read; // the storage q, k and v are read from
  int64_t(*strides[3])[3] = {&layout.q, &layout.k, &layout.v};
  const int inputs[3] = {a.q, a.k, a.v};
  for (int i = 0; i < 3; ++i) {
    const auto view = headViews.find(inputs[i]);
    if (view == headViews.end()) {
      operands[i] = floatIn(inputs[i]);
      read.push_back(inputs[i]);
      continue;
    }
    operands[i] = ptr<float>(view->second.buffer) + view->second.offset;
    std::copy(view->second.strides, view->second.strides + 3, *strides[i]);
    read.push_back(view->second.buffer);
  }
  float *out = nullptr;
  const int t = fuse ? graph->onlyReaderAfter(a.out, currentStep) : -1;
  if (t >= 0 && variant->steps(t).kernel() == "transpose" && variant->steps(t).outputs_size() == 1 &&
      attrs::perm(variant->steps(t)) == std::vector<int64_t>{0, 2, 1, 3} && dtype(a.out) == plan::F32 &&
      dtype(variant->steps(t).outputs(0)) == plan::F32 &&
      graph->writableEarly(variant->steps(t).outputs(0), currentStep, t) &&
      !graph->overlaps(a.lse, variant->steps(t).outputs(0)) && // written at once (an lse nothing reads is not live)
      std::none_of(read.begin(), read.end(), [&](int r) { return graph->overlaps(r, variant->steps(t).outputs(0)); })) {
    const int y = variant->steps(t).outputs(0); // [B, T, H, D]
    const k::Shape ys = shape(y);
    out = ptr<float>(y);
    layout.out[0] = ys[1] * ys[2] * ys[3], layout.out[1] = ys[3], layout.out[2] = ys[2] * ys[3];
    fold(t, currentStep, "the attention writes its output in the transposed layout");
  } else {
    out = floatOut(a.out);
  }
  float *lse = ptr<float>(a.lse);
  emit([=, q = operands[0], k = operands[1], v = operands[2]] {
    k::attention(a.shape, q, k, v, mask, out, lse, &layout);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::attentionFp8(const AttentionStep &a, const float *q, const float *k, const float *v,
                                const void *mask, float *lse) {
  std::vector<const float *> scales;
  for (int b : a.scales)
    scales.push_back(ptr<float>(b));
  std::vector<float *> amaxes;
  for (int b : a.amaxes)
    amaxes.push_back(ptr<float>(b));
  if (!a.grad) {
    float *out = floatOut(a.out);
    emit([=] {
      const auto f = kernels::attentionFp8Scales(scales.data(), false, kernels::Fp8Format::E5M2);
      const k::AttentionFp8Amaxes m = k::attentionFp8(a.shape, f, q, k, v, mask, out, lse);
      *amaxes[0] = m.probs, *amaxes[1] = m.out;
      return Status::success();
    });
    return Status::success();
  }
  float *dout = floatIn(a.dout), *out = floatIn(a.out);
  float *dq = floatOut(a.dq), *dk = floatOut(a.dk), *dv = floatOut(a.dv);
  const kernels::Fp8Format grads = fp8Format(dtype(a.dq));
  emit([=] {
    const auto f = kernels::attentionFp8Scales(scales.data(), true, grads);
    const k::AttentionFp8Amaxes m = k::attentionFp8Grad(a.shape, f, dout, q, k, v, out, lse, mask, dq, dk, dv);
    *amaxes[0] = m.dq, *amaxes[1] = m.dk, *amaxes[2] = m.dv, *amaxes[3] = m.dprobs;
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::reduce(const plan::Step &s) {
  auto kind = reduceKind(s);
  auto in = shape(s.inputs(0));
  auto axes = attrs::axes(s);
  int x = s.inputs(0), o = s.outputs(0);
  if (dtype(x) == plan::I32)
    emit([=, px = ptr<int32_t>(x), po = ptr<int32_t>(o)] {
      k::reduce(kind, px, in, axes, po);
      return Status::success();
    });
  else if (dtype(x) == plan::I64)
    emit([=, px = ptr<int64_t>(x), po = ptr<int64_t>(o)] {
      k::reduce(kind, px, in, axes, po);
      return Status::success();
    });
  else {
    float *px = floatIn(x), *po = floatOut(o);
    emit([=] {
      k::reduce(kind, px, in, axes, po);
      return Status::success();
    });
  }
  return Status::success();
}

Status CpuBackend::matmul(const plan::Step &s) {
  auto as = shape(s.inputs(0)), bs = shape(s.inputs(1)), os = shape(s.outputs(0));
  float *a = floatIn(s.inputs(0)), *b = floatIn(s.inputs(1)), *o = floatOut(s.outputs(0));
  emit([=] {
    k::matmul(a, as, b, bs, o, os);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::gemm(const plan::Step &s) {
  bool transA = attrs::transA(s), transB = attrs::transB(s);
  auto as = shape(s.inputs(0)), bs = shape(s.inputs(1));
  int64_t m = as[transA ? 1 : 0], kk = as[transA ? 0 : 1], n = bs[transB ? 0 : 1];
  float alpha = static_cast<float>(attrs::alpha(s)), beta = static_cast<float>(attrs::beta(s));
  float *a = floatIn(s.inputs(0)), *b = floatIn(s.inputs(1));
  float *c = s.inputs_size() > 2 ? floatIn(s.inputs(2)) : nullptr;
  k::Shape cs = s.inputs_size() > 2 ? shape(s.inputs(2)) : k::Shape{};
  float *y = floatOut(s.outputs(0));
  emit([=] {
    k::gemm(a, b, c, cs, y, m, n, kk, transA, transB, alpha, beta);
    return Status::success();
  });
  return Status::success();
}

/// A weight the plan never changes (a param of an inference variant, read from the file), f32.
bool CpuBackend::constantWeight(int i) const {
  const auto &b = buf(i).alias_of() >= 0 ? buf(buf(i).alias_of()) : buf(i);
  return (b.role() == plan::PARAM || b.role() == plan::CONSTANT) && b.dtype() == plan::F32;
}

Status CpuBackend::linear(const plan::Step &s) {
  bool transB = attrs::transposeB(s);
  auto ws = shape(s.inputs(1)), os = shape(s.outputs(0));
  int64_t n = os.back(), kk = transB ? ws[1] : ws[0], m = count(s.outputs(0)) / (n ? n : 1);
  auto e = epilogue(s);
  const auto folded = transposedInput.find(currentStep);
  const bool transA = folded != transposedInput.end();
  float *x = transA ? ptr<float>(folded->second) : floatIn(s.inputs(0)), *w = floatIn(s.inputs(1));
  float *b = s.inputs_size() > 2 ? floatIn(s.inputs(2)) : nullptr;
  const FoldedStep next = foldIntoEpilogue(s.outputs(0), e);
  if (next.activation != kernels::Epilogue::None)
    e = next.activation;
  float *r = next.residual >= 0 ? ptr<float>(next.residual) : nullptr;
  float *out = next.step >= 0 ? ptr<float>(next.out) : nullptr;
  float *y = floatOut(s.outputs(0));
  // The library, or B packed once for a constant weight, is measured now, at prepare, when the choice is new.
  // A weight packed as it lies needs no other copy.
  const bool constant = constantWeight(s.inputs(1)) && !transA;
  std::shared_ptr<k::PackedGemm> packed;
  // B packed for the kernel measured fastest for the GEMM `asTransB` (a constant's choice), where that is one,
  // its primitive applying what it can of the epilogue (a residual added in place stays tec's).
  const k::PackedGemm::Fused epilogueWanted{
      b != nullptr, e, r != nullptr && graph->rootOf(next.out) != graph->rootOf(next.residual)};
  auto packIfChosen = [&](bool asTransB, const k::PackedGemm::SourcePacked &sourcePacked) {
    if (!constant)
      return;
    if (const auto kernel = k::PackedGemm::ofChoice(k::gemmLibrary({transA, asTransB, m, n, kk, true})))
      packed = k::PackedGemm::create(*kernel, transB, m, n, kk, w, transB ? kk : n, sourcePacked, epilogueWanted);
  };
  // A weight only this GEMM reads leaves memory as it is packed or laid out, a piece at a time (the plan file
  // maps it): the mapped weight and its copy are never both resident.
  const bool soleReader = constant && graph->readers(s.inputs(1)) == 1;
  auto releaseSource = [&](const float *first, int64_t count) {
    if (soleReader)
      releaseData(reinterpret_cast<const char *>(first) - mappedData, count * static_cast<int64_t>(sizeof(float)));
  };
  packIfChosen(transB, releaseSource);
  // Else a constant [N, K] weight runs as a [K, N] one: OpenBLAS's NN GEMM runs 5-25% faster than its NT one
  // at the batch sizes of inference (no transposed panel to pack on every call). Not for one row, a GEMV:
  // its dot products read [N, K] rows contiguously (~20% faster than across [K, N]). Where the NN GEMM is
  // the packed one, the packing lays the weight out itself; else it is laid out once, at prepare.
  if (!packed && transB && constantWeight(s.inputs(1)) && ws.size() == 2 && m > 1) {
    packIfChosen(false, releaseSource);
    if (!packed) {
      auto &laidOut = scratch.emplace_back(ws[0] * ws[1]);
      const int64_t rows = ws[0], cols = ws[1], blockRows = 1024;
      std::vector<float> block(std::min(rows, blockRows) * cols);
      for (int64_t first = 0; first < rows; first += blockRows) {
        const int64_t count = std::min(blockRows, rows - first);
        k::transpose(w + first * cols, {count, cols}, {1, 0}, block.data(), sizeof(float)); // [cols, count]
        for (int64_t c = 0; c < cols; ++c)
          std::copy_n(block.data() + c * count, count, laidOut.data() + c * rows + first);
        releaseSource(w + first * cols, count * cols);
      }
      readsThroughCopy(s.inputs(1));
      w = laidOut.data();
      transB = false;
    }
  }
  if (packed)
    readsThroughCopy(s.inputs(1));
  if (packed)
    chosen[currentStep] = packed->description();
  else if (const int library = k::gemmLibrary({transA, transB, m, n, kk, false}); // planSgemm's choice, measured now
           k::blas().libraries.size() > 1)
    chosen[currentStep] = k::blas().libraries[library].name + " SGEMM";
  emit([=] {
    k::linear(x, w, b, y, m, n, kk, transA, transB, e, r, out, packed.get());
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::transpose(const plan::Step &s) {
  auto in = shape(s.inputs(0));
  auto perm = attrs::perm(s);
  if (perm.size() != in.size())
    return Status::error("transpose perm does not match the rank");
  if (perm == std::vector<int64_t>{1, 0} && foldTransposeIntoLinear(s.inputs(0), s.outputs(0)))
    return Status::success();
  if (perm == std::vector<int64_t>{0, 2, 1, 3} && foldHeadTranspose(s))
    return Status::success();
  size_t bytes = dtypeBytes(dtype(s.inputs(0)));
  emit([=, x = ptr(s.inputs(0)), y = ptr(s.outputs(0))] {
    k::transpose(x, in, perm, y, bytes);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::expand(const plan::Step &s) {
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  size_t bytes = dtypeBytes(dtype(s.inputs(0)));
  emit([=, x = ptr(s.inputs(0)), y = ptr(s.outputs(0))] {
    k::expand(x, in, y, out, bytes);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::concat(const plan::Step &s) {
  int64_t axis = attrs::axis(s);
  auto out = shape(s.outputs(0));
  size_t bytes = dtypeBytes(dtype(s.outputs(0)));
  int64_t offset = 0;
  for (int in : s.inputs()) {
    auto inShape = shape(in);
    emit([=, x = ptr(in), y = ptr(s.outputs(0))] {
      k::copyAlongAxis(x, inShape, y, out, axis, offset, bytes, /*split=*/false);
      return Status::success();
    });
    offset += inShape[axis];
  }
  return Status::success();
}

Status CpuBackend::split(const plan::Step &s) {
  if (foldHeadSplit(s))
    return Status::success();
  int64_t axis = attrs::axis(s);
  auto in = shape(s.inputs(0));
  size_t bytes = dtypeBytes(dtype(s.inputs(0)));
  int64_t offset = 0;
  for (int out : s.outputs()) {
    auto outShape = shape(out);
    emit([=, x = ptr(s.inputs(0)), y = ptr(out)] {
      k::copyAlongAxis(x, in, y, outShape, axis, offset, bytes, /*split=*/true);
      return Status::success();
    });
    offset += outShape[axis];
  }
  return Status::success();
}

Status CpuBackend::slice(const plan::Step &s) {
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  auto starts = attrs::starts(s), steps = attrs::sliceSteps(s);
  if (starts.size() != in.size() || steps.size() != in.size())
    return Status::error("slice attributes do not match the rank");
  size_t bytes = dtypeBytes(dtype(s.inputs(0)));
  emit([=, x = ptr(s.inputs(0)), y = ptr(s.outputs(0))] {
    k::slice(x, in, starts, steps, y, out, bytes);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::gather(const plan::Step &s) {
  auto data = shape(s.inputs(0));
  int64_t axis = attrs::axis(s), n = count(s.inputs(1));
  size_t bytes = dtypeBytes(dtype(s.inputs(0)));
  std::string where = s.source();
  auto error = [where, axis, dim = data[axis]] {
    return Status::badData("gather '" + where + "': an index is outside [-" + std::to_string(dim) + ", " +
                         std::to_string(dim) + ") along axis " + std::to_string(axis));
  };
  if (dtype(s.inputs(1)) == plan::I32)
    emit([=, x = ptr(s.inputs(0)), idx = ptr<int32_t>(s.inputs(1)), y = ptr(s.outputs(0))] {
      return k::gather(x, data, idx, n, axis, y, bytes) ? Status::success() : error();
    });
  else
    emit([=, x = ptr(s.inputs(0)), idx = ptr<int64_t>(s.inputs(1)), y = ptr(s.outputs(0))] {
      return k::gather(x, data, idx, n, axis, y, bytes) ? Status::success() : error();
    });
  return Status::success();
}

Status CpuBackend::gatherElements(const plan::Step &s) {
  auto axis = indexedAxis(s, shape(s.inputs(0)), shape(s.inputs(1)));
  if (!axis.ok())
    return axis.error();
  const int64_t outer = axis->full.outer, dim = axis->full.dim, inner = axis->full.inner;
  const int64_t picks = axis->picks;
  size_t bytes = dtypeBytes(dtype(s.inputs(0)));
  std::string error = "gather_elements '" + s.source() + "': an index is outside [-" + std::to_string(dim) + ", " +
                      std::to_string(dim) + ")";
  auto run = [&](auto *indices) {
    emit([=, x = ptr(s.inputs(0)), y = ptr(s.outputs(0))] {
      return k::gatherElements(x, outer, dim, inner, indices, picks, y, bytes) ? Status::success()
                                                                               : Status::badData(error);
    });
    return Status::success();
  };
  return dtype(s.inputs(1)) == plan::I32 ? run(ptr<int32_t>(s.inputs(1))) : run(ptr<int64_t>(s.inputs(1)));
}

Status CpuBackend::scatterAdd(const plan::Step &s) {
  auto axis = indexedAxis(s, shape(s.outputs(0)), shape(s.inputs(1)));
  if (!axis.ok())
    return axis.error();
  const int64_t outer = axis->full.outer, dim = axis->full.dim, inner = axis->full.inner;
  const int64_t picks = axis->picks;
  const bool elements = axis->elements;
  std::string error = "scatter_add '" + s.source() + "': an index is outside [-" + std::to_string(dim) + ", " +
                      std::to_string(dim) + ")";
  float *updates = floatIn(s.inputs(0)), *y = floatOut(s.outputs(0));
  auto run = [&](auto *indices) {
    emit([=] {
      return k::scatterAdd(updates, outer, dim, inner, indices, picks, elements, y) ? Status::success()
                                                                                    : Status::badData(error);
    });
    return Status::success();
  };
  return dtype(s.inputs(1)) == plan::I32 ? run(ptr<int32_t>(s.inputs(1))) : run(ptr<int64_t>(s.inputs(1)));
}

Status CpuBackend::window(const plan::Step &s) {
  auto read = readWindowStep(s, [&](int i) { return shape(i); });
  if (!read.ok())
    return read.error();
  const WindowStep w = *read;
  const k::Window g = w.window;
  const bool include = w.countIncludePad;
  float *a = floatIn(w.a), *b = w.b >= 0 ? floatIn(w.b) : nullptr, *bias = w.bias >= 0 ? floatIn(w.bias) : nullptr;
  float *out = floatOut(w.out);
  // A convolution runs where it runs fastest on this machine (oneDNN's kernels or tec's), measured now.
  std::shared_ptr<k::DnnlConv> dnnl;
  if (w.kind == k::WindowKind::Conv) {
    dnnl = k::DnnlConv::fastest(g, bias != nullptr, w.channelsLast);
    chosen[currentStep] = !dnnl ? "tec im2col + GEMM"
                          : "oneDNN " + dnnl->implementation() +
                                (dnnl->form() == k::DnnlConv::Form::Blocked ? ", blocked layout (reorders around it)" : "");
  }
  if (dnnl && constantWeight(w.b))
    dnnl->fixWeight(b);
  const auto tecConv = w.channelsLast ? k::convChannelsLast : k::conv;
  // A convolution's activation or residual add runs on each part of its output as it is written (in cache).
  const FoldedStep next = w.kind == k::WindowKind::Conv ? foldIntoEpilogue(w.out, kernels::Epilogue::None) : FoldedStep{};
  const float *residual = next.residual >= 0 ? ptr<float>(next.residual) : nullptr;
  float *folded = next.step >= 0 ? ptr<float>(next.out) : nullptr;
  const int64_t outCount = count(w.out);
  emit([=, kind = w.kind, channelsLast = w.channelsLast, activation = next.activation] {
    auto epilogue = [&](int64_t offset, int64_t rows, int64_t cols, int64_t stride) {
      k::epilogueRows(activation, out + offset, residual ? residual + offset : nullptr, folded + offset, rows, cols,
                      stride);
    };
    switch (kind) {
    case k::WindowKind::Conv:
      if (dnnl) {
        dnnl->run(a, b, bias, out, folded ? k::DnnlConv::OutputPart(epilogue) : k::DnnlConv::OutputPart());
      } else {
        tecConv(g, a, b, bias, out);
        if (folded)
          k::parallelFor(outCount, 1 << 14, [&](int64_t begin, int64_t end) { epilogue(begin, 1, end - begin, 0); });
      }
      break;
    case k::WindowKind::ConvInputGrad: k::convInputGrad(g, a, b, out); break;
    case k::WindowKind::ConvWeightGrad: k::convWeightGrad(g, a, b, out); break;
    case k::WindowKind::MaxPool:
    case k::WindowKind::AvgPool:
      (channelsLast ? k::poolChannelsLast : k::pool)(g, kind == k::WindowKind::MaxPool, include, a, out);
      break;
    case k::WindowKind::MaxPoolGrad:
    case k::WindowKind::AvgPoolGrad: k::poolGrad(g, kind == k::WindowKind::MaxPoolGrad, include, a, b, out); break;
    }
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::cumSum(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  const bool exclusive = attrs::exclusive(s) != 0, reverse = attrs::reverse(s) != 0;
  auto run = [&](auto *px, auto *py) {
    emit([=] {
      k::cumSum(px, outer, dim, inner, exclusive, reverse, py);
      return Status::success();
    });
    return Status::success();
  };
  const int x = s.inputs(0), y = s.outputs(0);
  switch (dtype(x)) {
  case plan::I32: return run(ptr<int32_t>(x), ptr<int32_t>(y));
  case plan::I64: return run(ptr<int64_t>(x), ptr<int64_t>(y));
  default: return run(floatIn(x), floatOut(y));
  }
}

Status CpuBackend::argReduce(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  const bool max = attrs::windowKind(s) == "max", last = attrs::selectLastIndex(s) != 0;
  int x = s.inputs(0);
  auto run = [&](auto *px) {
    emit([=, py = ptr<int64_t>(s.outputs(0))] {
      k::argReduce(max, last, px, outer, dim, inner, py);
      return Status::success();
    });
    return Status::success();
  };
  switch (dtype(x)) {
  case plan::I32: return run(ptr<int32_t>(x));
  case plan::I64: return run(ptr<int64_t>(x));
  default: return run(floatIn(x));
  }
}

Status CpuBackend::copy(const plan::Step &s) {
  int64_t bytes = buf(s.outputs(0)).bytes();
  emit([=, x = ptr(s.inputs(0)), y = ptr(s.outputs(0))] {
    std::memmove(y, x, bytes);
    return Status::success();
  });
  return Status::success();
}

/// y = fp8(x * scale) over n elements, counting FP8 health (per scale's tensor) when asked.
CpuBackend::Closure CpuBackend::quantizeInto(int scale, int y, const float *x, int64_t n) {
  auto format = fp8Format(dtype(y));
  if (countQuantized) {
    size_t index = stats.size();
    stats.push_back({quantizedTensor(buf(scale).name()), n, 0, 0});
    return [=, this, scale = ptr<float>(scale), y = ptr<uint8_t>(y)] {
      k::quantizeCounting(x, *scale, y, n, format, stats[index].saturated, stats[index].flushed);
      return Status::success();
    };
  }
  return [=, scale = ptr<float>(scale), y = ptr<uint8_t>(y)] {
    k::quantize(x, *scale, y, n, format);
    return Status::success();
  };
}

Status CpuBackend::quantize(const plan::Step &s) {
  int64_t n = count(s.outputs(0));
  float *x = floatIn(s.inputs(0));
  if (attrs::transposeInput(s)) { // read transposed: through f32 scratch, transposed before the quantize
    const auto in = shape(s.inputs(0));
    float *t = scratch.emplace_back(n).data(), *source = x;
    emit([=] {
      k::transpose(source, in, {1, 0}, t, sizeof(float));
      return Status::success();
    });
    x = t;
  }
  emit(quantizeInto(s.inputs(1), s.outputs(0), x, n));
  return Status::success();
}

/// cast_fp8: the activation into f32 scratch (the CUDA kernel's per-element function), its amax, its quantize.
Status CpuBackend::castFp8(const plan::Step &s) {
  const int64_t n = count(s.outputs(0));
  const auto activation = castActivation(s);
  const float *x = floatIn(s.inputs(0));
  float *a = scratch.emplace_back(n).data(), *amax = ptr<float>(s.outputs(1));
  Closure quantize = quantizeInto(s.inputs(1), s.outputs(0), a, n);
  emit([=] {
    if (activation == kernels::Epilogue::None)
      std::copy(x, x + n, a);
    else // the epilogue's function in the kernels' vectorized loop
      k::unary(activation == kernels::Epilogue::Gelu ? k::UnaryKind::Gelu : k::UnaryKind::GeluTanh, x, a, n);
    *amax = k::amax(a, n);
    return quantize();
  });
  return Status::success();
}

/// cast_fp8_dbias: the quantize and amax of dY, and its column sums in f64 in row order.
Status CpuBackend::castFp8BiasGrad(const plan::Step &s) {
  const int64_t n = count(s.inputs(0)), cols = shape(s.inputs(0)).back(), rows = cols ? n / cols : 0;
  const float *x = floatIn(s.inputs(0));
  float *amax = ptr<float>(s.outputs(1)), *dbias = ptr<float>(s.outputs(2));
  Closure quantize = quantizeInto(s.inputs(1), s.outputs(0), x, n);
  auto sums = std::make_shared<std::vector<double>>(cols);
  emit([=] {
    *amax = k::amax(x, n);
    std::fill(sums->begin(), sums->end(), 0.0);
    for (int64_t r = 0; r < rows; ++r) // along rows: each column's sum in row order
      for (int64_t c = 0; c < cols; ++c)
        (*sums)[c] += x[r * cols + c];
    for (int64_t c = 0; c < cols; ++c)
      dbias[c] = static_cast<float>((*sums)[c]);
    return quantize();
  });
  return Status::success();
}

/// layer_norm_fp8 (x, weight, bias?, scale -> q, amax, mean, rstd): the LayerNorm into f32 scratch, then
/// its amax and its quantize.
Status CpuBackend::layerNormFp8(const plan::Step &s) {
  const NormStep norm = readNormStep(s, shape(s.inputs(0)));
  const int64_t n = count(norm.x);
  float *x = floatIn(norm.x), *g = floatIn(norm.weight), *b = norm.bias >= 0 ? floatIn(norm.bias) : nullptr;
  float *y = scratch.emplace_back(n).data(), *amax = ptr<float>(norm.amax);
  float *mean = floatOut(norm.mean), *rstd = floatOut(norm.rstd);
  Closure quantize = quantizeInto(norm.scale, norm.y, y, n);
  emit([=] {
    k::layerNorm(x, g, b, y, mean, rstd, norm.rows, norm.cols, norm.epsilon, true);
    *amax = k::amax(y, n);
    return quantize();
  });
  return Status::success();
}

Status CpuBackend::dequantize(const plan::Step &s) {
  int64_t n = count(s.outputs(0));
  auto format = fp8Format(dtype(s.inputs(0)));
  float *y = floatOut(s.outputs(0));
  emit([=, x = ptr<uint8_t>(s.inputs(0)), scaleInv = ptr<float>(s.inputs(1))] {
    k::dequantize(x, *scaleInv, y, n, format);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::amax(const plan::Step &s) {
  int64_t n = count(s.inputs(0));
  if (const int next = quantizeAfterAmax(s); next >= 0) {
    const plan::Step &q = variant->steps(next);
    fold(next, currentStep, "the amax quantizes as it measures");
    const auto format = fp8Format(dtype(q.outputs(0)));
    const size_t index = stats.size(); // the quantize's health counts, where asked for
    if (countQuantized)
      stats.push_back({quantizedTensor(buf(q.inputs(1)).name()), n, 0, 0});
    emit([=, this, x = ptr<float>(s.inputs(0)), y = ptr<float>(s.outputs(0)), scale = ptr<float>(q.inputs(1)),
          codes = ptr<uint8_t>(q.outputs(0))] {
      *y = k::quantizeWithAmax(x, *scale, codes, n, format, countQuantized ? &stats[index].saturated : nullptr,
                               countQuantized ? &stats[index].flushed : nullptr);
      return Status::success();
    });
    return Status::success();
  }
  float *x = floatIn(s.inputs(0));
  emit([=, y = ptr<float>(s.outputs(0))] {
    *y = k::amax(x, n);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::fp8Gemm(const plan::Step &s) {
  // Emulation: widen both FP8 operands exactly (scale_inv applied), then an f32 GEMM.
  int xq = s.inputs(0), wq = s.inputs(1);
  auto &xs = scratch.emplace_back(count(xq));
  auto &ws = scratch.emplace_back(count(wq));
  auto xf = fp8Format(dtype(xq)), wf = fp8Format(dtype(wq));
  int64_t xn = count(xq), wn = count(wq);
  bool transB = attrs::transposeB(s);
  auto wShape = shape(wq), os = shape(s.outputs(0));
  int64_t n = os.back(), kk = transB ? wShape[1] : wShape[0], m = count(s.outputs(0)) / (n ? n : 1);
  auto e = epilogue(s);
  float *b = s.inputs_size() > 4 ? floatIn(s.inputs(4)) : nullptr;
  float *y = floatOut(s.outputs(0));
  emit([=, xp = ptr<uint8_t>(xq), wp = ptr<uint8_t>(wq), xsi = ptr<float>(s.inputs(2)),
        wsi = ptr<float>(s.inputs(3)), xd = xs.data(), wd = ws.data()] {
    k::dequantize(xp, *xsi, xd, xn, xf);
    k::dequantize(wp, *wsi, wd, wn, wf);
    k::linear(xd, wd, b, y, m, n, kk, /*transposeA=*/false, transB, e);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::currentScaling(const plan::Step &s) {
  const float fp8Max = static_cast<float>(attrs::fp8Max(s)), epsilon = static_cast<float>(attrs::amaxEpsilon(s));
  const bool pow2 = attrs::pow2Scales(s) != 0;
  emit([=, a = ptr<float>(s.inputs(0)), scale = ptr<float>(s.outputs(0)), scaleInv = ptr<float>(s.outputs(1))] {
    const float next = kernels::scaleFromAmax(*a, fp8Max, pow2, epsilon);
    *scale = next;
    *scaleInv = 1.0f / next;
    return Status::success();
  });
  return Status::success();
}

/// A block-scaled tensor as [rows, cols]: every dim but the last as rows.
static std::pair<int64_t, int64_t> blockMatrix(const std::vector<int64_t> &dims, int64_t count) {
  const int64_t cols = dims.empty() ? 1 : dims.back();
  return {cols ? count / cols : 0, cols};
}

Status CpuBackend::quantizeBlocks(const plan::Step &s) {
  const auto [rows, cols] = blockMatrix(shape(s.outputs(0)), count(s.outputs(0)));
  const auto block = attrs::block(s);
  const bool transposed = attrs::transposeInput(s) != 0;
  const auto format = fp8Format(dtype(s.outputs(0)));
  const auto kind = blockScaleKind(s);
  const float epsilon = static_cast<float>(attrs::amaxEpsilon(s));
  const int64_t blocks = count(s.outputs(1));
  if (countQuantized) { // FP8 health: the counts, and how far apart the blocks' scales lie
    const size_t index = stats.size();
    stats.push_back({buf(s.outputs(0)).name(), rows * cols, 0, 0, blocks});
    emit([=, this, x = floatIn(s.inputs(0)), y = ptr<uint8_t>(s.outputs(0)), scaleInv = ptr<float>(s.outputs(1))] {
      QuantizeStats &health = stats[index];
      k::quantizeBlocks(x, y, scaleInv, rows, cols, block[0], block[1], transposed, format, kind, epsilon,
                        &health.saturated, &health.flushed);
      health.smallestScaleInv = FLT_MAX, health.largestScaleInv = 0;
      for (int64_t b = 0; b < blocks; ++b)
        if (std::isfinite(scaleInv[b]))
          health.smallestScaleInv = std::min(health.smallestScaleInv, scaleInv[b]),
          health.largestScaleInv = std::max(health.largestScaleInv, scaleInv[b]);
      return Status::success();
    });
    return Status::success();
  }
  emit([=, x = floatIn(s.inputs(0)), y = ptr<uint8_t>(s.outputs(0)), scaleInv = ptr<float>(s.outputs(1))] {
    k::quantizeBlocks(x, y, scaleInv, rows, cols, block[0], block[1], transposed, format, kind, epsilon);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::fp8BlockGemm(const plan::Step &s) {
  // The GPU kernel's sums in its order (kernels/cpu's blockScaledGemm): the emulation equals it bit for bit.
  const int xq = s.inputs(0), wq = s.inputs(1);
  const auto wShape = shape(wq), os = shape(s.outputs(0));
  const auto xBlock = attrs::inputBlock(s), wBlock = attrs::weightBlock(s);
  const bool transB = attrs::transposeB(s);
  const int64_t n = os.back(), kk = transB ? wShape[1] : wShape[0], m = count(s.outputs(0)) / (n ? n : 1);
  const k::BlockScaledOperand x{ptr<uint8_t>(xq), ptr<float>(s.inputs(2)), xBlock[0], xBlock[1], fp8Format(dtype(xq))};
  const k::BlockScaledOperand w{ptr<uint8_t>(wq), ptr<float>(s.inputs(3)), wBlock[0], wBlock[1], fp8Format(dtype(wq))};
  const auto e = epilogue(s);
  float *b = s.inputs_size() > 4 ? floatIn(s.inputs(4)) : nullptr;
  float *y = floatOut(s.outputs(0));
  emit([=, wide = scratch.emplace_back(k::blockScaledGemmScratch(m, n, kk)).data()] {
    k::blockScaledGemm(x, w, transB, b, y, m, n, kk, e, wide);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::delayedScaling(const plan::Step &s) {
  int64_t length = count(s.inputs(0)), margin = attrs::margin(s);
  float fp8Max = static_cast<float>(attrs::fp8Max(s));
  bool mostRecent = attrs::algo(s) == "most_recent";
  emit([=, h = ptr<float>(s.inputs(0)), scale = ptr<float>(s.inputs(1)), a = ptr<float>(s.inputs(2)),
        nh = ptr<float>(s.outputs(0)), ns = ptr<float>(s.outputs(1)), nsi = ptr<float>(s.outputs(2))] {
    k::delayedScaling(h, length, *scale, *a, fp8Max, margin, mostRecent, nh, ns, nsi);
    return Status::success();
  });
  return Status::success();
}

Status CpuBackend::optimizerUpdate(const plan::Step &s) {
  auto o = readOptimizerStep(s);
  if (!o.ok())
    return o.error();
  const int64_t n = count(o->param);
  auto moment = [&](const std::vector<int> &list, size_t i) { return i < list.size() ? ptr<float>(list[i]) : nullptr; };
  float *g = floatIn(o->grad);
  emit([=, params = o->params, p = ptr<float>(o->param), m = moment(o->moments, 0), v = moment(o->moments, 1),
        newP = ptr<float>(o->newParam), newM = moment(o->newMoments, 0), newV = moment(o->newMoments, 1),
        lr = ptr<float>(o->lr), step = ptr<float>(o->step), clip = o->clip >= 0 ? ptr<float>(o->clip) : nullptr,
        finite = o->finite >= 0 ? ptr<uint8_t>(o->finite) : nullptr] {
    k::optimizerUpdate(params, *lr, *step, clip ? *clip : 1.0f, finite ? *finite != 0 : true, p, g, m, v, newP, newM,
                       newV, n);
    return Status::success();
  });
  return Status::success();
}

} // namespace tec::cpubackend
