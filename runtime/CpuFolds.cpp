// What the CPU backend takes into another step at load, each a plain rule over the plan (PlanGraph), named
// in the schedule (Backend::foldedAs): an activation or residual add into a GEMM's epilogue, a transpose
// into its GEMM, attention heads read in place, an amax into its quantize, elementwise chains in one pass.
#include "runtime/CpuBackend.h"

namespace tec::cpubackend {

bool CpuBackend::foldTransposeIntoLinear(int source, int transposed) {
  const int gemm = graph->onlyReaderAfter(transposed, currentStep);
  if (gemm < 0) // kept without fusion (--no-fusion): another GEMM form (transA) may round differently
    return false;
  const auto &g = variant->steps(gemm);
  if (g.kernel() != "linear" || g.inputs_size() < 2 || g.inputs(0) != transposed || g.inputs(1) == transposed ||
      dtype(source) != plan::F32 || dtype(g.outputs(0)) != plan::F32 || dtype(g.inputs(1)) != plan::F32 ||
      !graph->unchangedBetween(source, currentStep, gemm + 1)) // nor the GEMM's output, in the source's storage
    return false;
  transposedInput[gemm] = source;
  fold(currentStep, gemm, "the GEMM reads the untransposed input");
  return true;
}

/// The activation step `r` is, as a GEMM epilogue computing the same per-element function (the same bits).
std::optional<kernels::Epilogue> epilogueOf(const plan::Step &r) {
  if (r.kernel() == "relu")
    return kernels::Epilogue::Relu;
  if (r.kernel() == "gelu")
    return attrs::approximate(r) == "tanh" ? kernels::Epilogue::GeluTanh : kernels::Epilogue::Gelu;
  if (r.kernel() == "silu")
    return kernels::Epilogue::Silu;
  if (r.kernel() == "hard_swish")
    return kernels::Epilogue::HardSwish;
  return std::nullopt;
}

CpuBackend::FoldedStep CpuBackend::foldIntoEpilogue(int y, kernels::Epilogue own) {
  int j = -1; // the first step after this one that reads y's storage
  for (int i = currentStep + 1; i < variant->steps_size() && j < 0; ++i)
    for (int in : variant->steps(i).inputs())
      if (graph->rootOf(in) == graph->rootOf(y))
        j = i;
  if (!fuse || j < 0 || variant->steps(j).outputs_size() != 1)
    return {};
  const auto &r = variant->steps(j);
  FoldedStep f;
  f.step = j;
  f.out = r.outputs(0);
  int read = -1; // r's input that is y (maybe through a view of another shape: same storage, same elements)
  if (auto activation = epilogueOf(r); activation && r.inputs_size() == 1 && own == kernels::Epilogue::None) {
    f.activation = *activation;
    read = r.inputs(0);
  } else if (r.kernel() == "add" && r.inputs_size() == 2) {
    const bool first = graph->rootOf(r.inputs(0)) == graph->rootOf(y);
    read = first ? r.inputs(0) : r.inputs(1);
    f.residual = first ? r.inputs(1) : r.inputs(0);
    if (graph->rootOf(f.residual) == graph->rootOf(y) || shape(f.residual) != shape(f.out) ||
        dtype(f.residual) != plan::F32 || !graph->unchangedBetween(f.residual, currentStep - 1, j))
      return {};
  } else {
    return {};
  }
  if (shape(read) != shape(f.out) || count(f.out) != count(y) || dtype(f.out) != plan::F32 || dtype(y) != plan::F32)
    return {};
  // The result is written early, at this step: nothing in between may read its storage. It goes where the
  // step wrote it: in y's storage (in place: later readers of that storage saw the result anyway), in the
  // residual's (an in-place add), or elsewhere if that storage may be written now. Outside y's storage, y
  // keeps no value of its own (X · W, not the plan's), so the step must be y's only reader.
  const int outRoot = graph->rootOf(f.out);
  for (int i = currentStep; i < j; ++i)
    for (int in : variant->steps(i).inputs())
      if (graph->rootOf(in) == outRoot)
        return {};
  const bool inPlace = outRoot == graph->rootOf(y) || (f.residual >= 0 && outRoot == graph->rootOf(f.residual));
  if ((outRoot != graph->rootOf(y) && graph->onlyReaderAfter(y, currentStep) != j) ||
      (!inPlace && !graph->writableEarly(f.out, currentStep, j)))
    return {};
  fold(j, currentStep, f.residual >= 0 ? "its epilogue (a residual add)" : "its epilogue (the activation)");
  return f;
}

int CpuBackend::headTransposeReader(int step) const {
  const plan::Step &t = variant->steps(step);
  if (!fuse || t.kernel() != "transpose" || t.inputs_size() != 1 || t.outputs_size() != 1 ||
      attrs::perm(t) != std::vector<int64_t>{0, 2, 1, 3} || dtype(t.inputs(0)) != plan::F32)
    return -1;
  const int a = graph->onlyReaderAfter(t.outputs(0), step);
  if (a < 0 || variant->steps(a).kernel() != "attention" || variant->steps(a).inputs_size() < 3 ||
      dtype(t.outputs(0)) != plan::F32)
    return -1;
  const auto &in = variant->steps(a).inputs();
  return std::find(in.begin(), in.begin() + 3, t.outputs(0)) != in.begin() + 3 ? a : -1;
}

bool CpuBackend::unchangedOutside(int buffer, int from, int to, const std::vector<int> &skipped) const {
  for (int i = from + 1; i < to; ++i)
    if (std::find(skipped.begin(), skipped.end(), i) == skipped.end())
      for (int out : variant->steps(i).outputs())
        if (graph->overlaps(out, buffer))
          return false;
  return true;
}

/// A split along the last dim whose every part (through a [B,T,H*D] -> [B,T,H,D] view) goes only to a head
/// transpose into an attention: the attentions read the parts in the split's input, and neither runs.
bool CpuBackend::foldHeadSplit(const plan::Step &s) {
  const int z = s.inputs_size() == 1 ? s.inputs(0) : -1;
  if (!fuse || z < 0 || shape(z).size() != 3 || attrs::axis(s) != 2 || dtype(z) != plan::F32)
    return false;
  std::vector<int> transposes, readers, skipped{currentStep};
  for (int part : s.outputs()) {
    const int t = graph->onlyReaderAfter(part, currentStep);
    const int a = t < 0 ? -1 : headTransposeReader(t);
    if (a < 0 || dtype(part) != plan::F32)
      return false;
    const k::Shape x = shape(variant->steps(t).inputs(0)), p = shape(part); // x: [B, T, H, D] over [B, T, H*D]
    if (x.size() != 4 || p.size() != 3 || x[0] != p[0] || x[1] != p[1] || x[2] * x[3] != p[2])
      return false;
    transposes.push_back(t), readers.push_back(a), skipped.push_back(t);
  }
  // Read until the last attention: unchanged till then, nor written by the attentions themselves.
  const int last = *std::max_element(readers.begin(), readers.end());
  if (!unchangedOutside(z, currentStep, last + 1, skipped))
    return false;
  const k::Shape zs = shape(z);
  int64_t offset = 0;
  for (size_t p = 0; p < transposes.size(); ++p) {
    const plan::Step &t = variant->steps(transposes[p]);
    const k::Shape x = shape(t.inputs(0)); // [B, T, H, D], a view of the part
    HeadView view{z, offset, {zs[1] * zs[2], x[3], zs[2]}};
    headViews[t.outputs(0)] = view;
    fold(transposes[p], readers[p], "the attention reads the head transpose in place");
    offset += shape(s.outputs(static_cast<int>(p)))[2];
  }
  fold(currentStep, readers.front(), "the attentions read the split's parts in place");
  graph->extendLive(z, last);
  return true;
}

/// A head transpose of a contiguous [B,T,H,D] tensor into an attention: read in place.
bool CpuBackend::foldHeadTranspose(const plan::Step &s) {
  const int a = headTransposeReader(currentStep);
  const int x = s.inputs(0);
  if (a < 0 || shape(x).size() != 4 || !graph->unchangedBetween(x, currentStep, a + 1)) // nor by its outputs
    return false;
  const k::Shape xs = shape(x);
  headViews[s.outputs(0)] = HeadView{x, 0, {xs[1] * xs[2] * xs[3], xs[3], xs[2] * xs[3]}};
  fold(currentStep, a, "the attention reads the head transpose in place");
  graph->extendLive(x, a);
  return true;
}

/// The quantize right after an amax of the same tensor (delayed scaling's pair: the amax goes to the history,
/// the quantize uses the scale from before): one pass over the tensor for both.
int CpuBackend::quantizeAfterAmax(const plan::Step &s) const {
  const int next = currentStep + 1;
  if (!fuse || next >= variant->steps_size() || folded(next))
    return -1;
  const plan::Step &q = variant->steps(next);
  if (q.kernel() != "quantize" || q.inputs_size() != 2 || q.outputs_size() != 1 || attrs::transposeInput(q) ||
      q.inputs(0) != s.inputs(0) || dtype(s.inputs(0)) != plan::F32 || graph->overlaps(q.inputs(1), s.outputs(0)) ||
      !graph->writableEarly(q.outputs(0), currentStep, next))
    return -1;
  return next;
}

bool CpuBackend::chainOps(int first, int last, std::vector<ChainOp> &ops) const {
  const k::Shape chainShape = shape(variant->steps(first).outputs(0));
  std::map<int, int> valueOf;        // root buffer -> the chain op whose value it holds now
  std::vector<int> tensors, written; // buffers read from memory; buffers written
  ops.clear();
  for (int i = first; i <= last; ++i) {
    const plan::Step &s = variant->steps(i);
    ChainOp op;
    const auto compiler = stepCompilers<CpuBackend>().at(s.kernel());
    op.kind = compiler == &CpuBackend::binary ? ChainKind::Binary
              : compiler == &CpuBackend::unary ? ChainKind::Unary
                                               : ChainKind::ActivationGrad;
    op.unary = op.kind == ChainKind::Unary ? unaryKind(s) : op.unary;
    op.binary = op.kind == ChainKind::Binary ? binaryKind(s) : op.binary;
    op.grad = op.kind == ChainKind::ActivationGrad ? activationGradKind(s) : op.grad;
    for (int j = 0; j < s.inputs_size(); ++j) {
      const int in = s.inputs(j);
      const auto value = valueOf.find(graph->rootOf(in));
      if (value != valueOf.end() && shape(in) != chainShape)
        return false; // a value of the chain seen through another shape
      (j ? op.b : op.a) = value != valueOf.end() ? k::ElementwiseChain::Operand::value(value->second)
                                                   : k::ElementwiseChain::Operand::tensor(ptr<float>(in), shape(in));
      if (value == valueOf.end())
        tensors.push_back(in);
    }
    valueOf[graph->rootOf(s.outputs(0))] = static_cast<int>(ops.size());
    ops.push_back(op);
  }
  // A value is written when something after the chain reads its storage (or it is no temporary).
  for (const auto &[root, op] : valueOf) {
    int readsInside = 0;
    for (int i = first; i <= last; ++i)
      for (int in : variant->steps(i).inputs())
        readsInside += graph->rootOf(in) == root;
    if (graph->readers(root) > readsInside || buf(root).role() != plan::TEMP) {
      ops[op].out = ptr<float>(root);
      written.push_back(root);
    }
  }
  // Written early, span by span: a tensor still to be read may share that storage only element for element.
  for (size_t w = 0; w < written.size(); ++w) {
    for (size_t x = w + 1; x < written.size(); ++x)
      if (graph->overlaps(written[w], written[x]))
        return false;
    for (int t : tensors)
      if (graph->overlaps(written[w], t) &&
          (shape(t) != chainShape || buf(graph->rootOf(t)).offset() != buf(written[w]).offset()))
        return false;
  }
  return true;
}

int CpuBackend::chainEnd(int first) const {
  auto chainable = [&](int i) {
    const plan::Step &s = variant->steps(i);
    const auto compiler = stepCompilers<CpuBackend>().find(s.kernel());
    if (folded(i) || compiler == stepCompilers<CpuBackend>().end() ||
        (compiler->second != &CpuBackend::binary && compiler->second != &CpuBackend::unary &&
         compiler->second != &CpuBackend::activationGrad) ||
        s.outputs_size() != 1 || s.inputs_size() != (compiler->second == &CpuBackend::unary ? 1 : 2) ||
        shape(s.outputs(0)) != shape(variant->steps(first).outputs(0)) || dtype(s.outputs(0)) != plan::F32)
      return false;
    for (int in : s.inputs()) // unary ops and gradients read their shape; binary ones broadcast
      if (dtype(in) != plan::F32 || (compiler->second != &CpuBackend::binary && shape(in) != shape(s.outputs(0))))
        return false;
    return true;
  };
  if (!fuse || !chainable(first))
    return first;
  int last = first;
  while (last + 1 < variant->steps_size() && last + 1 - first < kMaxChain && chainable(last + 1))
    ++last;
  std::vector<ChainOp> ops;
  while (last > first && !chainOps(first, last, ops))
    --last;
  return last;
}

Status CpuBackend::elementwiseChain(int first, int last) {
  std::vector<ChainOp> ops;
  chainOps(first, last, ops);
  for (int i = first + 1; i <= last; ++i)
    fold(i, first, "an elementwise chain (one pass over memory)");
  auto chain = std::make_shared<k::ElementwiseChain>(shape(variant->steps(first).outputs(0)), std::move(ops));
  emit([chain] {
    chain->run();
    return Status::success();
  });
  return Status::success();
}

} // namespace tec::cpubackend
