// The CUDA backend (built as the plugin libtec_cuda.so). prepare() lays out one device arena (the plan's
// buffers, the params and constants, and scratch: the cuBLASLt workspace, error flags, FP8 counters, and
// one region that every step reuses for its temporaries: widened operands, FP8 transposes, reduction
// partials), creates every GEMM's descriptors and queries its algorithms, uploads params and state on
// the work stream, and turns each step into a launch closure. The first run() launches eagerly (lazy
// module loading and cuBLASLt's first-use setup happen outside any capture); the second captures the
// step (launches and output downloads) as a CUDA Graph, which later runs replay. Inputs are uploaded
// before the step only when the caller asked for their host storage since the last upload. Closures
// address memory by arena offset, so nothing is allocated or decided after prepare().
//
// This header is the backend's class, private to the plugin; its methods are spread by concern:
// CudaBackend.cpp (creation, prepare, run, graphs, buffers), CudaSteps.cpp (the step compilers but GEMMs and
// attention), CudaGemms.cpp (cuBLASLt GEMMs and the folds into their epilogues), CudaAttention.cpp,
// CudaProgramSource.cpp (--emit=cuda).
#ifndef TEC_RUNTIME_CUDA_CUDABACKEND_H
#define TEC_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/CudaPlugin.h"
#include "runtime/PlanGraph.h"
#include "runtime/Steps.h"

#include "runtime/cuda/Launcher.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <tuple>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>

namespace tec::cudabackend {


using namespace cuda;
using namespace steps;

inline std::string cudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

inline size_t bytesOf(plan::DType t) { return kernels::elementBytes(elementType(t)); }

inline int64_t align(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

/// Where a closure's operand lives: an arena offset (or one in the step scratch region, which every step
/// reuses), turned into a pointer when the closure runs.
struct Slot {
  int64_t offset = -1;
  bool inStepScratch = false;
  bool null() const { return offset < 0; }
};

/// A tanh GELU (forward) or its gradient (backward) applied to a GEMM's result by a later step, done in
/// the GEMM's cuBLASLt epilogue instead: forward GELU_AUX(_BIAS) writes the GELU's output to `out` and
/// keeps the GEMM's result (the pre-activation the backward pass needs) as the aux matrix; backward
/// DGELU reads the pre-activation `aux` and writes the gradient to `out`.
struct GeluFusion {
  bool forward = false;
  int step = -1; // the GELU or GELU-gradient step, folded into the GEMM
  Slot aux, out;
};

/// A bias gradient (a reduce_sum of dY over its rows) taken by the wgrad GEMM that multiplies dYᵀ:
/// cuBLASLt's BGRADB epilogue. `out` is the bias gradient, `source` dY [rows, cols].
struct BiasGradFusion {
  int step = -1; // the reduce_sum step, folded into the GEMM
  Slot out;
  int source = -1;
  int64_t rows = 0, cols = 0;
};

class CudaBackend final : public Backend, steps::PlanBuffers {
public:
  explicit CudaBackend(const CudaBackendOptions &options) : options(options) {}
  /// For --emit=cuda: compiles `variant` without a device, as a GPU of `target` would run it, and
  /// returns the launch sequence as C++ source.
  static Result<std::string> programSource(const plan::Variant &variant, const std::string &planName);
  ~CudaBackend() override;
  const char *name() const override { return "cuda"; }
  int computedBy(int step) const override { return computingStep[step]; }
  std::string foldedAs(int step) const override { return foldedHow[step]; }
  Status init();
  Status supports(const plan::Variant &variant, const plan::Step &step) const override;
  Status prepare(const plan::Variant &variant, const char *data) override;
  void *hostData(int buffer) override;
  Status readBuffer(int buffer, void *destination) override;
  Status writeBuffer(int buffer, const void *source) override;
  void *deviceData(int buffer) override { return arena + slots[buffer].offset; }
  Status writeBufferFromDevice(int buffer, const void *source) override;
  /// A buffer's bytes from host or device memory, synchronously.
  Status copyIntoBuffer(int buffer, const void *source, cudaMemcpyKind kind);
  Status run(std::vector<double> *stepMillis) override;
  const std::vector<QuantizeStats> &quantizeStats() const override { return stats; }
  std::vector<std::string> notes() const override { return notes_; }

private:
  struct Context {
    char *base;
    Launcher *k;
    int64_t stepScratchBase;
    template <typename T = void> T *at(Slot s) const {
      return s.null() ? nullptr : reinterpret_cast<T *>(base + s.offset + (s.inStepScratch ? stepScratchBase : 0));
    }
  };
  using Launch = std::function<Status(const Context &)>;
  template <class B>
  friend const std::unordered_map<std::string, Status (B::*)(const plan::Step &)> &steps::stepCompilers();

  Slot slot(int i) const { return slots[i]; }
  /// Scratch in the arena for the whole run, 256-byte aligned (cuBLASLt's and vector loads' preference).
  Slot scratch(int64_t bytes) {
    Slot s{align(arenaBytes, 256)};
    arenaBytes = s.offset + std::max<int64_t>(bytes, 1);
    return s;
  }
  /// Scratch for the current step only: every step reuses the same region, as large as the most any
  /// step takes.
  Slot stepScratch(int64_t bytes) {
    Slot s{align(stepScratchUsed, 256), true};
    stepScratchUsed = s.offset + std::max<int64_t>(bytes, 1);
    stepScratchBytes = std::max(stepScratchBytes, stepScratchUsed);
    return s;
  }
  /// The alignment a slot's pointers will have (the arena is 256-byte aligned, and so is the scratch region).
  static int alignmentOfSlot(Slot s) { return kc::alignmentOf(s.offset); }
  /// Says once, for the user, what ran instead of the faster path and why.
  void note(const std::string &line) {
    if (std::find(notes_.begin(), notes_.end(), line) == notes_.end())
      notes_.push_back(line);
  }
  std::string stepName(const plan::Step &s) const {
    return "step " + std::to_string(currentStep) + " " + s.kernel() + " (from " + s.source() + ")";
  }
  /// A device int set by a kernel when its step's input is invalid; `message` is reported after the run.
  int errorFlag(std::string message) {
    errorMessages.push_back(std::move(message));
    return static_cast<int>(errorMessages.size() - 1);
  }
  int *errorPointer(const Context &c, int flag) const { return c.at<int>(errorsSlot) + flag; }
  void emit(Launch launch) {
    program.push_back(std::move(launch));
    programStep.push_back(currentStep);
  }
  kc::ConstRef cref(const Context &c, int i) const { return {c.at(slot(i)), type(i)}; }
  kc::Ref ref(const Context &c, int i) const { return {c.at(slot(i)), type(i)}; }
  Status unsupported(const plan::Step &s, const std::string &why) const {
    return Status::error("step '" + s.kernel() + "' (from " + s.source() + "): " + why);
  }
  Status extentOf(const plan::Step &s, const kc::Shape &shape, kc::Extent &e) const {
    return kc::makeExtent(shape, e) ? Status::success() : unsupported(s, "rank above " + std::to_string(kc::kMaxRank));
  }
  /// A GEMM for `spec` in the GEMM table, its descriptors and algorithms made now; -1 with `why` when
  /// cuBLASLt's type rules (kc::cublasLtSupports) or cuBLASLt itself have none. (Recording for
  /// --emit=cuda, every GEMM the rules accept is taken to exist.)
  int makeGemm(const kc::GemmSpec &spec, std::string &why) {
    if (!kc::cublasLtSupports(spec, why))
      return -1;
    std::shared_ptr<kc::Gemm> g;
    if (!recording && !(g = kc::Gemm::create(lt, spec, workspaceBytes, why))) {
      why = "cuBLASLt refused a GEMM its rules allow: " + why;
      return -1;
    }
    gemms.push_back(std::move(g));
    gemmSpecs.push_back(spec);
    return static_cast<int>(gemms.size() - 1);
  }
  int cublasBlockGemm(const plan::Step &s, std::string &why);
  /// The cuDNN handle, made with the first step that wants one: plans without any never pay for cuDNN.
  bool loadCudnnHandle() {
    if (!cudnn && cudnnMissing.empty())
      if (const kc::CudnnApi *api = kc::loadCudnn(cudnnMissing))
        cudnn = kc::CudnnHandle::create(*api, stream, cudnnMissing);
    return cudnn != nullptr;
  }
  /// An attention in the cuDNN table with its graph and plan built now, or -1 with a note saying why tec's
  /// attention kernels run instead. Recording for --emit=cuda has no cuDNN.
  int makeAttention(const plan::Step &s, const kc::AttentionSpec &spec) {
    std::string why;
    if (!kc::cudnnAttentionTakes(spec, why)) {
      note(stepName(s) + ": " + why + "; tec's attention kernel runs");
      return -1;
    }
    if (recording)
      return -1;
    if (!loadCudnnHandle()) {
      note("cuDNN unavailable (" + cudnnMissing + "): attention runs on tec's kernels");
      return -1;
    }
    auto attention = kc::CudnnAttention::create(*cudnn, spec, why);
    if (!attention) {
      note(stepName(s) + ": cuDNN's fused attention declined (" + why + "); tec's attention kernel runs");
      return -1;
    }
    attentions.push_back(std::move(attention));
    return static_cast<int>(attentions.size() - 1);
  }
  /// A convolution in the cuDNN table with its descriptors and algorithm chosen now, or -1 with a note
  /// saying why tec's window kernel runs instead (no cuDNN, a shape it cannot express, no deterministic
  /// algorithm). Recording for --emit=cuda has no cuDNN: the program runs tec's kernels.
  int makeConvolution(const plan::Step &s, const kc::ConvSpec &spec) {
    std::string why;
    if (!kc::cudnnTakes(spec, why)) {
      note(stepName(s) + ": " + why + "; tec's convolution kernel runs");
      return -1;
    }
    if (recording)
      return -1;
    if (!loadCudnnHandle()) {
      note("cuDNN unavailable (" + cudnnMissing + "): convolutions run on tec's kernels");
      return -1;
    }
    auto conv = kc::Convolution::create(*cudnn, spec, why);
    if (!conv) {
      note(stepName(s) + ": cuDNN declined (" + why + "); tec's convolution kernel runs");
      return -1;
    }
    convolutions.push_back(std::move(conv));
    return static_cast<int>(convolutions.size() - 1);
  }
  /// The fused twin of a GEMM, or -1 with a note saying why there is none (the GEMM and a kernel run).
  int makeFusedGemm(const plan::Step &s, const kc::GemmSpec &spec) {
    std::string why;
    const int g = makeGemm(spec, why);
    if (g < 0)
      note(stepName(s) + ": no fused " + kc::epilogueName(spec.epilogue) + " epilogue (" + why +
           "); the GEMM and a kernel run");
    return g;
  }
  /// The GELU fusion for a GEMM writing `y` in the current step: the first later step reading y is a
  /// tanh `gelu` of it (forward), or the only one is a tanh `gelu_grad` of it (backward, f32); and the
  /// fused step's output is free from here to there (the GEMM writes it that much earlier).
  GeluFusion geluAfter(int y) const {
    for (int j = currentStep + 1; j < variant->steps_size(); ++j) {
      const auto &g = variant->steps(j);
      if (std::find(g.inputs().begin(), g.inputs().end(), y) == g.inputs().end())
        continue;
      if (attrs::approximate(g) != "tanh" || g.inputs(0) != y || g.outputs_size() != 1)
        return {};
      GeluFusion f;
      f.step = j;
      f.out = slot(g.outputs(0));
      if (g.kernel() == "gelu" && dtype(g.outputs(0)) == dtype(y) && isFloat(dtype(y))) {
        f.forward = true;
      } else if (g.kernel() == "gelu_grad" && g.inputs_size() == 2 && g.inputs(1) != y && readers(y) == 1 &&
                 dtype(y) == plan::F32 && dtype(g.inputs(1)) == plan::F32 && dtype(g.outputs(0)) == plan::F32 &&
                 !writtenBetween(g.inputs(1), currentStep, j) && rootOf(g.outputs(0)) != rootOf(g.inputs(1))) {
        f.aux = slot(g.inputs(1));
      } else {
        return {};
      }
      if (rootOf(g.outputs(0)) == rootOf(y) || !writableEarly(g.outputs(0), currentStep, j))
        return {};
      return f;
    }
    return {};
  }
  /// Readers, liveness and overlaps of the variant's buffers (made before the steps are compiled).
  std::optional<PlanGraph> planGraph;
  int rootOf(int b) const { return planGraph->rootOf(b); }
  bool writtenBetween(int buffer, int from, int to) const { return planGraph->writtenBetween(buffer, from, to); }
  bool writableEarly(int buffer, int from, int to) const { return planGraph->writableEarly(buffer, from, to); }
  std::vector<bool> foldedGelu;
  BiasGradFusion biasGradAlongside() const;
  /// Linear steps whose A operand is a folded 2-D transpose: step -> (the transpose's source, the buffer
  /// the GEMM reads through transposeA: the source, or a cast of it); and cast steps that cast that
  /// source instead of the transpose: step -> source.
  std::map<int, std::pair<int, int>> transposedOperand;
  std::map<int, int> castOfSource;
  bool foldTransposeIntoGemm(int source, int transposed);
  /// Step scratch for a reduction's partial sums, as its launch plan needs.
  Slot reductionPartials(kc::Extent kept, kc::Strided keptStrides, kc::Extent reduced, kc::Strided reducedStrides) {
    const auto p = kc::planReduction(kept, keptStrides, reduced, reducedStrides, multiprocessors);
    return p.partials ? stepScratch(p.partials * 8) : Slot{};
  }
  Status emitWeightGradWithBiasGrad(const plan::Step &s, kc::GemmSpec spec, int x, int w, int y, BiasGradFusion grad);
  std::vector<bool> foldedReduce;
  /// Emits one GEMM y = epilogue(x · w + bias) with the epilogue fused when cuBLASLt can, else in a kernel.
  Status emitLinear(const plan::Step &s, kc::GemmSpec spec, Slot x, Slot w, Slot bias, int biasBuffer, Slot y,
                    kernels::Epilogue epilogue, Slot xScaleInv = {}, Slot wScaleInv = {},
                    GeluFusion gelu = {});

  /// One strided copy from x to y over `iteration` (transpose, expand, slice, concat, split).
  Status emitCopy(const plan::Step &s, int x, kc::Strided src, int y, kc::Strided dst, const kc::Shape &iteration);

  // The step compilers (runtime/StepCompilers.def), one per kind of kernel.
#define TEC_STEP_COMPILER(name) Status name(const plan::Step &s);
#include "runtime/StepCompilers.def"

  /// The FP8 health counter of a quantize with this scale (-1 when not counting).
  int64_t healthCounter(int scale, int64_t n);

  /// Lays out the arena and turns every step into launches; no device memory yet.
  Status compile(const plan::Variant &variant);
  Status enqueueStep(const Context &c, std::vector<double> *stepMillis);
  Status checkErrors();

  CudaBackendOptions options;
  bool recording = false; // compiling for --emit=cuda: no device calls
  std::vector<std::shared_ptr<kc::Gemm>> gemms;
  std::vector<kc::GemmSpec> gemmSpecs;
  std::unique_ptr<kc::CudnnHandle> cudnn; // null: convolutions run on tec's window kernels
  std::string cudnnMissing;               // why cudnn is null, once it was tried
  std::vector<std::shared_ptr<kc::Convolution>> convolutions; // destroyed before the handle
  std::vector<std::shared_ptr<kc::CudnnAttention>> attentions; // likewise
  std::vector<int> firstLaunchOfStep; // program index where each plan step starts (for comments)
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  int major = 0, minor = 0;
  bool fp8Gemms = false;     // this GPU and cuBLASLt run FP8 GEMMs
  bool blockScaleModes = false; // cuBLASLt has block scale modes (12.9+) and this GPU FP8 from Hopper on
  size_t workspaceBytes = 0;
  Slot workspace;

  int64_t arenaBytes = 0, dataBase = 0, dataEnd = 0;
  char *arena = nullptr;
  std::vector<Slot> slots;
  std::map<int, void *> staging; // pinned host copies of input and output roots
  std::vector<int> inputRoots, outputRoots;

  std::vector<std::string> errorMessages;
  Slot errorsSlot, countsSlot;
  int *hostErrors = nullptr;
  unsigned long long *hostCounts = nullptr;
  std::vector<QuantizeStats> stats;
  /// amax steps folded into the quantize that follows them: quantize step -> the amax output.
  std::map<int, int> fusedAmax;
  /// quantize steps that read a transpose's source instead of the transpose: step -> (source, rows, cols).
  std::map<int, std::tuple<int, int64_t, int64_t>> transposedQuantize;
  /// current_scaling steps run by the quantize right after them: quantize step -> what the scale is made of.
  struct CurrentScaledQuantize {
    int amax, scaleInv;
    float fp8Max, epsilon;
    bool pow2;
  };
  std::map<int, CurrentScaledQuantize> currentScaledQuantize;
  bool currentScalingFoldsIntoQuantize(const plan::Step &s) const;
  int readers(int buffer) const { return planGraph->readers(buffer); }
  /// optimizer_update steps run by an earlier step's fused launch.
  std::vector<bool> foldedOptimizerSteps;

  std::vector<Launch> program;
  std::vector<int> programStep;
  int currentStep = 0;
  /// The schedule (Backend::computedBy, foldedAs): the step whose launch computes each plan step, and how
  /// it took the step in ("" where the step runs its own launches).
  std::vector<int> computingStep;
  std::vector<std::string> foldedHow;
  void fold(int step, int into, const char *how) {
    computingStep[step] = into;
    foldedHow[step] = how;
    if (into < step) // its reads happen now: a collective it waits for ends first
      emitCollectiveEndsThrough(step);
  }

  // Data parallelism: NCCL runs each collective on its own stream, ordered by events: the work stream
  // records where the plan puts the collective (a bucket right after its last gradient), the collectives'
  // stream waits for that, runs it and records its end, and the work stream waits for the end only before
  // the first step that reads the result, so that the rest of the backward overlaps it.
  bool collectivesOnNccl() const { return recording || options.nccl || options.ranks > 1; }
  /// Collectives started and not yet ended (the work stream's wait for them).
  PendingCollectives<Launch> collectiveEnds;
  void emitCollectiveEndsThrough(int step) {
    collectiveEnds.endThrough(step, [&](int started, Launch end) {
      program.push_back(std::move(end));
      programStep.push_back(started);
    });
  }
  /// Ends the collective step `s` started before the first later step that reads any of its outputs.
  void endCollectiveBeforeReader(const plan::Step &s, Launch end) {
    collectiveEnds.add(planGraph->firstReaderAfter(s, currentStep), currentStep, std::move(end));
  }
  /// The event pair (start, end) of a new collective.
  std::pair<int, int> collectiveEventPair() {
    collectiveEventCount += 2;
    return {collectiveEventCount - 2, collectiveEventCount - 1};
  }
  /// NCCL, the collectives' stream and events (prepare, when the plan has collectives); the communicator
  /// joins the other ranks at the first run, once every rank has prepared (the Session agrees on that).
  Status prepareCollectives();
  Status joinCollectives();
  const kc::NcclApi *ncclApi = nullptr;
  /// Waits for the step's launches; with NCCL, at most the collective timeout, else the communicator is
  /// aborted (a rank hung or died) and the step fails.
  Status finishStep();
  std::unique_ptr<kc::NcclComm> nccl;
  cudaStream_t commStream = nullptr;
  std::vector<cudaEvent_t> collectiveEvents;
  int collectiveEventCount = 0;
  cudaGraphExec_t graph = nullptr;
  bool graphFailed = false;
  bool capturing = false; // enqueueStep is recording into a graph
  int64_t runs = 0;
  std::set<int> staleInputs; // input roots to upload before the next run
  int64_t stepScratchUsed = 0, stepScratchBytes = 0;
  Slot stepScratchSlot;
  int multiprocessors = 132; // the GPU's; an H100/H200's when compiling for --emit=cuda
  std::vector<std::string> notes_;
};

} // namespace tec::cudabackend

#endif
