// The CPU backend: each plan step becomes a closure over resolved pointers at prepare time. Kernels
// compute in f32; f16/bf16 buffers of float ops are widened into f32 scratch and narrowed back.
//
// This header is the backend's class, private to the runtime; its methods are spread by concern:
// CpuBackend.cpp (prepare, operand views), CpuSteps.cpp (the step compilers), CpuFolds.cpp (what the
// backend takes into another step at load: GEMM epilogues, transposes, head views, amax into quantize,
// elementwise chains; tec inspect --schedule prints them).
#ifndef TEC_RUNTIME_CPUBACKEND_H
#define TEC_RUNTIME_CPUBACKEND_H

#include "runtime/Backend.h"
#include "runtime/PlanFile.h"
#include "runtime/PlanGraph.h"
#include "runtime/Steps.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/ElementwiseChain.h"
#include "kernels/cpu/DnnlConv.h"
#include "kernels/cpu/PackedGemm.h"
#include "kernels/cpu/ThreadPool.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <memory>
#include <optional>
#include <unordered_map>


namespace tec::cpubackend {

namespace k = kernels::cpu;

using namespace steps;

struct AlignedFree {
  void operator()(char *p) const { std::free(p); }
};

class CpuBackend final : public Backend, steps::PlanBuffers {
public:
  CpuBackend(int threads, bool countQuantized, bool fuse) : fuse(fuse), threads(threads), countQuantized(countQuantized) {}
  const std::vector<QuantizeStats> &quantizeStats() const override { return stats; }
  const char *name() const override { return "cpu"; }
  int computedBy(int step) const override { return computingStep[step]; }
  std::string foldedAs(int step) const override { return foldedHow[step]; }
  std::string chosenKernel(int step) const override { return chosen[step]; }
  Status supports(const plan::Variant &variant, const plan::Step &step) const override;
  Status prepare(const plan::Variant &variant, const char *data) override;
  void *hostData(int buffer) override { return pointers[buffer]; }
  Status readBuffer(int buffer, void *destination) override {
    if (variant->buffers(buffer).bytes()) // an empty buffer may have no storage
      std::memcpy(destination, pointers[buffer], variant->buffers(buffer).bytes());
    return Status::success();
  }
  Status writeBuffer(int buffer, const void *source) override {
    if (variant->buffers(buffer).bytes())
      std::memcpy(pointers[buffer], source, variant->buffers(buffer).bytes());
    return Status::success();
  }
  Status run(std::vector<double> *stepMillis) override {
    for (size_t i = 0; i < program.size(); ++i) {
      auto start = stepMillis ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
      if (Status s = program[i](); !s.ok())
        return s;
      if (stepMillis)
        (*stepMillis)[programStep[i]] +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    return Status::success();
  }

private:
  using Closure = std::function<Status()>;
  template <class B>
  friend const std::unordered_map<std::string, Status (B::*)(const plan::Step &)> &steps::stepCompilers();

  // Buffer access while compiling a step (and steps::PlanBuffers').
  template <typename T = void> T *ptr(int i) const { return static_cast<T *>(pointers[i]); }
  /// f32 view of a float buffer: the buffer itself, or f32 scratch filled before the step runs.
  float *floatIn(int i);
  /// f32 view of a float output: the buffer itself, or scratch narrowed into it after the step.
  float *floatOut(int i);
  void emit(Closure body) {
    auto pre = std::move(pending.pre), post = std::move(pending.post);
    pending = {};
    programStep.push_back(currentStep);
    if (pre.empty() && post.empty()) {
      program.push_back(std::move(body));
      return;
    }
    program.push_back([pre, body, post]() {
      for (auto &c : pre)
        c();
      Status s = body();
      for (auto &c : post)
        c();
      return s;
    });
  }

  // The step compilers (runtime/StepCompilers.def), one per kind of kernel.
#define TEC_STEP_COMPILER(name) Status name(const plan::Step &s);
#include "runtime/StepCompilers.def"

  Status attentionFp8(const AttentionStep &a, const float *q, const float *k, const float *v, const void *mask,
                      float *lse);
  Status attentionInPlace(const AttentionStep &a, const void *mask);
  bool constantWeight(int buffer) const;
  Closure quantizeInto(int scale, int y, const float *x, int64_t n);
  int quantizeAfterAmax(const plan::Step &s) const;

  /// A 2-D transpose whose one reader is a linear step's input: the GEMM reads the source with transA
  /// instead (the weight gradient dW = dYᵀ·X of every backward pass). linear step -> the source.
  bool foldTransposeIntoLinear(int source, int transposed);
  std::map<int, int> transposedInput;
  /// The step that reads a linear step's output first, when the GEMM's epilogue can do its work: an
  /// activation (relu, gelu) after a GEMM without one, or an add of a residual. The epilogue writes where
  /// that step wrote, and the step is skipped.
  struct FoldedStep {
    int step = -1, out = -1, residual = -1;
    kernels::Epilogue activation = kernels::Epilogue::None;
  };
  FoldedStep foldIntoEpilogue(int y, kernels::Epilogue own);
  /// Per plan step, the step whose closure computes it: itself, or the GEMM or chain it was folded into.
  std::vector<int> computingStep;
  std::vector<const char *> foldedHow; // per step: how computingStep took it in ("" where it runs alone)
  std::vector<std::string> chosen;     // per step: the kernel measured fastest for it (Backend::chosenKernel)
  bool folded(int step) const { return computingStep[step] != step; }
  void fold(int step, int into, const char *how) {
    computingStep[step] = into;
    foldedHow[step] = how;
    if (into < step) // its reads happen now: a collective it waits for ends first
      emitCollectiveEndsThrough(step);
  }

  /// Collectives started and not yet ended (waited for, their results unpacked): the backward goes on while
  /// a bucket travels.
  PendingCollectives<Closure> collectiveEnds;
  /// Emits the ends of the collectives read by steps up to `step`, before the closure that reads them.
  void emitCollectiveEndsThrough(int step) {
    collectiveEnds.endThrough(step, [&](int started, Closure end) {
      program.push_back(std::move(end));
      programStep.push_back(started);
    });
  }
  /// Ends a collective step `s` started before the first later step that reads any of its outputs.
  void endCollectiveBeforeReader(const plan::Step &s, Closure end) {
    collectiveEnds.add(graph->firstReaderAfter(s, currentStep), currentStep, std::move(end));
  }

  /// Attention reads q, k and v where the plan's copies into place came from, and writes out where the copy
  /// after it puts it (kernels::cpu::AttentionLayout): a head transpose ([B,T,H,D] <-> [B,H,T,D]) whose only
  /// reader is the attention, and a split along the last dim before them (a fused QKV projection's).
  struct HeadView {
    int buffer = -1;    // the storage read
    int64_t offset = 0; // elements from its start
    int64_t strides[3] = {0, 0, 0};
  };
  std::map<int, HeadView> headViews; // an attention operand -> where it is read
  /// The attention that reads a head transpose's output as q, k or v, when it is the only reader; else -1.
  int headTransposeReader(int step) const;
  /// Whether `buffer` is unchanged over steps (from, to), but for the steps in `skipped` (folded: they do not run).
  bool unchangedOutside(int buffer, int from, int to, const std::vector<int> &skipped) const;
  bool foldHeadSplit(const plan::Step &s);
  bool foldHeadTranspose(const plan::Step &s);

  /// Elementwise chains: consecutive elementwise steps over one f32 shape run as one pass over memory
  /// (kernels/cpu/ElementwiseChain.h), their values in cache; those nothing after the chain reads are never
  /// written. chainOps builds the chain of steps [first, last] when it is one: false when a step reads a
  /// value of the chain through another shape, or what the chain writes early overlaps what it still reads.
  using ChainOp = kernels::cpu::ElementwiseChain::Op;
  using ChainKind = kernels::cpu::ElementwiseChain::Kind;
  bool chainOps(int first, int last, std::vector<ChainOp> &ops) const;
  /// The last step of the longest chain from `first` (at most kMaxChain steps); `first` when there is none.
  int chainEnd(int first) const;
  Status elementwiseChain(int first, int last);
  static constexpr int kMaxChain = 32;
  bool fuse = true;

  int threads;
  bool countQuantized;
  std::optional<PlanGraph> graph;
  std::vector<QuantizeStats> stats;
  std::unique_ptr<char, AlignedFree> arena;
  std::vector<void *> pointers;
  std::deque<std::vector<float>> scratch;
  /// Reads of a param or constant (by root buffer) served from a private copy made at prepare (a weight
  /// packed or laid out anew): once every read is, run() never touches its mapped bytes (releaseData).
  std::vector<int> readsOfCopy;
  const char *mappedData = nullptr; // prepare's `data`: params and constants, at their offsets
  void readsThroughCopy(int buffer) {
    const int root = graph->rootOf(buffer);
    if (++readsOfCopy[root] == graph->readers(root))
      releaseData(variant->buffers(root).offset(), variant->buffers(root).bytes());
  }
  struct {
    std::vector<std::function<void()>> pre, post;
  } pending;
  std::vector<Closure> program;
  /// The plan step each closure of `program` belongs to (concat and split emit several).
  std::vector<int> programStep;
  int currentStep = 0;
};

} // namespace tec::cpubackend

#endif
