// The CUDA backend (built as the plugin libtec_cuda.so). prepare() lays out one device arena (the plan's
// buffers, the params and constants, and scratch: the cuBLASLt workspace, error flags, FP8 counters, and
// one region that every step reuses for its temporaries: widened operands, FP8 transposes, reduction
// partials), creates every GEMM's descriptors and queries its algorithms, uploads params and state on
// the work stream, and turns each step into a launch closure. The first run() launches eagerly (lazy
// module loading and cuBLASLt's first-use setup happen outside any capture); the second captures the
// step (launches and output downloads) as a CUDA Graph, which later runs replay. Inputs are uploaded
// before the step only when the caller asked for their host storage since the last upload. Closures
// address memory by arena offset, so nothing is allocated or decided after prepare().
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

namespace tec {

namespace {

using namespace cuda;
using namespace steps;

std::string cudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

size_t bytesOf(plan::DType t) { return kernels::elementBytes(elementType(t)); }

int64_t align(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

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
  Status init();
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
      if (attrS(g, "approximate", "none") != "tanh" || g.inputs(0) != y || g.outputs_size() != 1)
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
  int readers(int buffer) const { return planGraph->readers(buffer); }
  /// optimizer_update steps run by an earlier step's fused launch.
  std::vector<bool> foldedOptimizerSteps;

  std::vector<Launch> program;
  std::vector<int> programStep;
  int currentStep = 0;
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

CudaBackend::~CudaBackend() {
  if (stream)
    cudaStreamSynchronize(stream);
  if (graph)
    cudaGraphExecDestroy(graph);
  for (auto &[root, host] : staging)
    cudaFreeHost(host);
  if (hostErrors)
    cudaFreeHost(hostErrors);
  if (hostCounts)
    cudaFreeHost(hostCounts);
  if (arena)
    cudaFree(arena);
  // What holds the handles and the stream goes first: cuDNN's graphs and plans, then the handle bound to
  // the stream, cuBLASLt's GEMMs before their handle; the members would otherwise outlive the stream.
  attentions.clear();
  convolutions.clear();
  cudnn.reset();
  gemms.clear();
  if (lt)
    cublasLtDestroy(lt);
  if (stream)
    cudaStreamDestroy(stream);
}

Status CudaBackend::init() {
  // cuDNN frontend loads a CUDA runtime of its own choosing, 12's before 13's: the one this plugin links,
  // or two runtimes would share the process (the user's setting wins).
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", ("libcudart.so." + std::to_string(CUDART_VERSION / 1000)).c_str(), 0);
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess)
    return Status::error("no usable CUDA device (" + cudaText(e) + ")");
  if (options.device >= devices)
    return Status::error("no CUDA device " + std::to_string(options.device) + " (" + std::to_string(devices) + " found)");
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess)
    return Status::error("cannot use CUDA device " + std::to_string(options.device) + ": " + cudaText(e));
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options.device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, options.device);
  cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, options.device);
  // FP8 tensor cores from sm_89; on Ada cuBLASLt runs FP8 GEMMs from 12.1.3 on.
  const bool ada = major == 8 && minor == 9;
  fp8Gemms = (major > 8 || ada) && (!ada || kc::cublasLtVersion() >= 120103);
  workspaceBytes = kc::gemmWorkspaceBytes(major);
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return Status::error("cannot create a CUDA stream: " + cudaText(e));
  if (cublasStatus_t s = cublasLtCreate(&lt); s != CUBLAS_STATUS_SUCCESS)
    return Status::error("cannot initialize cuBLASLt (status " + std::to_string(static_cast<int>(s)) + ")");
  return Status::success();
}

// ---- elementwise ----------------------------------------------------------------------------------------

Status CudaBackend::binary(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
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
    c.k->binary(kind, c.at(slot(a)), as, c.at(slot(b)), bs, c.at(slot(o)), extent, t);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::compare(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  int a = s.inputs(0), b = s.inputs(1), o = s.outputs(0);
  kc::Extent extent;
  if (Status st = extentOf(s, shape(o), extent); !st.ok())
    return st;
  auto as = kc::broadcastOperand(shape(a), shape(o)), bs = kc::broadcastOperand(shape(b), shape(o));
  auto kind = *compareKind(attrS(s, "predicate", "")); // the plan contracts checked it
  auto t = type(a);
  emit([=](const Context &c) {
    c.k->compare(kind, c.at(slot(a)), as, c.at(slot(b)), bs, static_cast<bool *>(c.at(slot(o))), extent, t);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::unary(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  if (static_cast<size_t>(currentStep) < foldedGelu.size() && foldedGelu[currentStep])
    return Status::success(); // in the GEMM before it (GELU_AUX)
  auto kind = unaryKind(s);
  int x = s.inputs(0), y = s.outputs(0);
  int64_t n = count(y);
  emit([=](const Context &c) {
    c.k->unary(kind, cref(c, x), ref(c, y), n);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::activationGrad(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  if (static_cast<size_t>(currentStep) < foldedGelu.size() && foldedGelu[currentStep])
    return Status::success(); // in the GEMM before it (DGELU)
  auto kind = activationGradKind(s);
  int dy = s.inputs(0), x = s.inputs(1), dx = s.outputs(0);
  int64_t n = count(dx);
  emit([=](const Context &c) {
    c.k->activationGrad(kind, cref(c, dy), cref(c, x), ref(c, dx), n);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::where(const plan::Step &s) {
  if (Status st = expectArity(s, 3, 3, 1); !st.ok())
    return st;
  int cnd = s.inputs(0), x = s.inputs(1), y = s.inputs(2), o = s.outputs(0);
  kc::Extent extent;
  if (Status st = extentOf(s, shape(o), extent); !st.ok())
    return st;
  auto cs = kc::broadcastOperand(shape(cnd), shape(o)), xs = kc::broadcastOperand(shape(x), shape(o)),
       ys = kc::broadcastOperand(shape(y), shape(o));
  size_t bytes = bytesOf(dtype(o));
  emit([=](const Context &c) {
    c.k->where(c.at<bool>(slot(cnd)), cs, c.at(slot(x)), xs, c.at(slot(y)), ys, c.at(slot(o)), extent, bytes);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::cast(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  int x = s.inputs(0), o = s.outputs(0);
  if (auto folded = castOfSource.find(currentStep); folded != castOfSource.end())
    x = folded->second; // a folded transpose's source, cast in its own layout
  auto from = type(x), to = type(o);
  int64_t n = count(o);
  emit([=](const Context &c) {
    c.k->cast(c.at(slot(x)), from, c.at(slot(o)), to, n);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::oneHot(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  int l = s.inputs(0), y = s.outputs(0);
  int64_t n = count(l), depth = shape(y).back();
  bool labels64 = dtype(l) == plan::I64;
  int flag = errorFlag("one_hot: a label is outside [0, " + std::to_string(depth) + ")");
  emit([=](const Context &c) {
    c.k->oneHot(c.at(slot(l)), labels64, n, depth, c.at<float>(slot(y)), errorPointer(c, flag));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::allFinite(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1 << 20, 1); !st.ok())
    return st;
  std::vector<std::pair<int, int64_t>> inputs;
  for (int i : s.inputs())
    inputs.push_back({i, count(i)});
  int o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->setFlag(c.at<uint8_t>(slot(o)));
    for (auto [i, n] : inputs)
      c.k->clearIfNotFinite(cref(c, i), n, c.at<uint8_t>(slot(o)));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::clipCoefficient(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  float maxNorm = static_cast<float>(attrF(s, "max_norm", 1.0));
  int norm = s.inputs(0), o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->clipCoefficient(c.at<float>(slot(norm)), maxNorm, c.at<float>(slot(o)));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::lossScaleUpdate(const plan::Step &s) {
  if (Status st = expectArity(s, 3, 3, 2); !st.ok())
    return st;
  float interval = static_cast<float>(attrI(s, "growth_interval", 2000));
  float growth = static_cast<float>(attrF(s, "growth_factor", 2.0)), backoff = static_cast<float>(attrF(s, "backoff_factor", 0.5));
  int scale = s.inputs(0), clean = s.inputs(1), finite = s.inputs(2), nextScale = s.outputs(0), nextClean = s.outputs(1);
  emit([=](const Context &c) {
    c.k->lossScaleUpdate(c.at<float>(slot(scale)), c.at<float>(slot(clean)), c.at<uint8_t>(slot(finite)), interval,
                        growth, backoff, c.at<float>(slot(nextScale)), c.at<float>(slot(nextClean)));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::lrSchedule(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  int schedule = scheduleNumber(s);
  float warmup = static_cast<float>(attrI(s, "warmup_steps")), total = static_cast<float>(attrI(s, "total_steps"));
  int step = s.inputs(0), lr = s.inputs(1), o = s.outputs(0);
  emit([=](const Context &c) {
    c.k->learningRate(schedule, c.at<float>(slot(lr)), c.at<float>(slot(step)), warmup, total, c.at<float>(slot(o)));
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
    c.k->softmax(cref(c, x), ref(c, y), outer, dim, inner, log);
    return Status::success();
  });
  return Status::success();
}

/// layer_norm (x, scale[, bias] -> y, mean, rstd) and rms_norm (x, scale -> y, rstd).
Status CudaBackend::layerNorm(const plan::Step &s) {
  const bool rms = s.kernel() == "rms_norm";
  if (Status st = rms ? expectArity(s, 2, 2, 2) : expectArity(s, 2, 3, 3); !st.ok())
    return st;
  auto in = shape(s.inputs(0));
  int64_t axis = attrI(s, "axis");
  if (axis < 0 || axis >= static_cast<int64_t>(in.size()))
    return unsupported(s, "axis out of range");
  const auto [rows, cols] = rowsAndCols(in, axis);
  float eps = static_cast<float>(attrF(s, "epsilon", 1e-5));
  int x = s.inputs(0), g = s.inputs(1), b = s.inputs_size() > 2 ? s.inputs(2) : -1;
  int y = s.outputs(0), mean = rms ? -1 : s.outputs(1), rstd = s.outputs(rms ? 1 : 2);
  emit([=](const Context &c) {
    c.k->layerNorm(cref(c, x), cref(c, g), b >= 0 ? cref(c, b) : kc::ConstRef{}, ref(c, y),
                   mean >= 0 ? ref(c, mean) : kc::Ref{}, ref(c, rstd), rows, cols, eps, !rms);
    return Status::success();
  });
  return Status::success();
}

/// attention and attention_grad, and their FP8 forms: cuDNN's fused attention where it takes the step
/// (16-bit or FP8, see kc::cudnnAttentionTakes), else tec's own kernels (one block per query row; dk, dv
/// one per key row).
Status CudaBackend::attention(const plan::Step &s) {
  auto step = readAttentionStep(s, [&](int i) { return shape(i); }, [&](int i) { return dtype(i); });
  if (!step.ok())
    return unsupported(s, step.error().message());
  const AttentionStep a = *step;
  if (kc::attentionSharedBytes(a.shape, a.grad) > kc::kMaxAttentionSharedBytes)
    return unsupported(s, "head sizes " + std::to_string(a.shape.headDim) + " and " + std::to_string(a.shape.valueDim) +
                              " need more shared memory than tec's attention kernel has");
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
        c.k->attentionFp8(a.shape, fp8Args(c), cref(c, a.q), cref(c, a.k), cref(c, a.v), m, ref(c, a.out),
                          c.at<float>(slot(a.lse)));
      else
        c.k->attention(a.shape, cref(c, a.q), cref(c, a.k), cref(c, a.v), m, ref(c, a.out), c.at<float>(slot(a.lse)));
      return Status::success();
    });
    return Status::success();
  }
  const Slot delta = stepScratch(count(a.lse) * 4);
  emit([=](const Context &c) {
    const kc::ConstRef m = mask >= 0 ? cref(c, mask) : kc::ConstRef{};
    zeroAmaxes(c);
    if (a.fp8)
      c.k->attentionFp8Grad(a.shape, fp8Args(c), cref(c, a.dout), cref(c, a.q), cref(c, a.k), cref(c, a.v),
                            cref(c, a.out), c.at<float>(slot(a.lse)), m, ref(c, a.dq), ref(c, a.dk), ref(c, a.dv),
                            c.at<float>(delta));
    else
      c.k->attentionGrad(a.shape, cref(c, a.dout), cref(c, a.q), cref(c, a.k), cref(c, a.v), cref(c, a.out),
                         c.at<float>(slot(a.lse)), m, ref(c, a.dq), ref(c, a.dk), ref(c, a.dv), c.at<float>(delta));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::reduce(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  if (static_cast<size_t>(currentStep) < foldedReduce.size() && foldedReduce[currentStep])
    return Status::success(); // in the wgrad GEMM before it (BGRADB)
  auto kind = reduceKind(s);
  auto in = shape(s.inputs(0));
  auto axes = attrInts(s, "axes");
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
    c.k->reduce(kind, c.at(slot(x)), keptExtent, kept, reducedExtent, reduced, c.at(slot(o)), t, outType,
                c.at(partials), sms);
    return Status::success();
  });
  return Status::success();
}

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
  } else if ((withEpilogue.epilogue = fusedEpilogue(epilogue, hasBias)) != kc::GemmEpilogue::Default) {
    fused = makeFusedGemm(s, withEpilogue);
  }
  const bool needsKernel = hasBias || epilogue != kernels::Epilogue::None;
  const auto yType = spec.d, fusedBiasType = withEpilogue.bias;
  const int64_t rows = spec.m * spec.batch, cols = spec.n;
  auto prepareBias = [=](const Context &c) {
    if (fused >= 0 && castBias)
      c.k->cast(c.at(bias), biasType, c.at(fusedBias), fusedBiasType, cols);
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
        c.k->biasActivation({c.at(y), yType}, {c.at(bias), biasType}, rows, cols, kernels::Epilogue::None);
      if (gelu.forward)
        c.k->unary(kernels::UnaryKind::GeluTanh, {c.at(y), yType}, {c.at(gelu.out), yType}, rows * cols);
      else
        c.k->activationGrad(kernels::ActivationGradKind::GeluTanh, {c.at(y), ElementType::F32},
                            {c.at(gelu.aux), ElementType::F32}, {c.at(gelu.out), ElementType::F32}, rows * cols);
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
      c.k->biasActivation({c.at(y), yType}, {c.at(bias), biasType}, rows, cols, epilogue);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::linear(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 3, 1); !st.ok())
    return st;
  int x = s.inputs(0), w = s.inputs(1), b = s.inputs_size() > 2 ? s.inputs(2) : -1, y = s.outputs(0);
  // 16-bit operands may write f32 without a bias (a weight gradient for the optimizer: cuBLASLt's D type).
  const bool widens = b < 0 && dtype(y) == plan::F32 && (dtype(x) == plan::BF16 || dtype(x) == plan::F16);
  if (dtype(w) != dtype(x) || (dtype(x) != dtype(y) && !widens))
    return unsupported(s, "operands of different element types");
  kc::GemmSpec spec;
  spec.transposeB = attrI(s, "transpose_b");
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
    if (r.kernel() != "reduce_sum" || r.inputs(0) != dy || attrInts(r, "axes") != std::vector<int64_t>{0} ||
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
        c.k->cast(c.at(gradOut), gradType, c.at(grad.out), ElementType::F32, grad.cols);
      return Status::success();
    }
    o.biasGrad = nullptr;
    if (!c.k->gemm(plain, o, error))
      return unsupported(s, error);
    c.k->reduce(kernels::ReduceKind::Sum, c.at(slot(grad.source)), kept, keptStrides, reduced, reducedStrides,
                c.at(grad.out), ElementType::F32, ElementType::F32, c.at(partials), sms);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::gemm(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 3, 1); !st.ok())
    return st;
  int a = s.inputs(0), b = s.inputs(1), cIn = s.inputs_size() > 2 ? s.inputs(2) : -1, y = s.outputs(0);
  if (dtype(a) != dtype(y) || dtype(b) != dtype(y) || (cIn >= 0 && dtype(cIn) != dtype(y)))
    return unsupported(s, "operands of different element types");
  kc::GemmSpec spec;
  spec.transposeA = attrI(s, "trans_a");
  spec.transposeB = attrI(s, "trans_b");
  auto as = shape(a), bs = shape(b);
  spec.m = as[spec.transposeA ? 1 : 0];
  spec.k = as[spec.transposeA ? 0 : 1];
  spec.n = bs[spec.transposeB ? 0 : 1];
  spec.a = spec.b = spec.d = type(y);
  spec.alpha = static_cast<float>(attrF(s, "alpha", 1.0));
  float beta = static_cast<float>(attrF(s, "beta", 1.0));
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
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  int a = s.inputs(0), b = s.inputs(1), y = s.outputs(0);
  if (dtype(a) != dtype(y) || dtype(b) != dtype(y))
    return unsupported(s, "operands of different element types");
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

// ---- data movement ---------------------------------------------------------------------------------------

Status CudaBackend::emitCopy(const plan::Step &s, int x, kc::Strided src, int y, kc::Strided dst,
                             const kc::Shape &iteration) {
  kc::Extent extent;
  if (Status st = extentOf(s, iteration, extent); !st.ok())
    return st;
  size_t bytes = bytesOf(dtype(x));
  emit([=](const Context &c) {
    c.k->stridedCopy(c.at(slot(x)), src, c.at(slot(y)), dst, extent, bytes);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::transpose(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  auto perm = attrInts(s, "perm");
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
  if (cast >= 0)
    castOfSource[cast] = source;
  planGraph->extendLive(source, cast >= 0 ? cast : gemm);
  return true;
}

Status CudaBackend::expand(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  return emitCopy(s, s.inputs(0), kc::broadcastOperand(in, out), s.outputs(0), kc::contiguous(out), out);
}

Status CudaBackend::slice(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  auto in = shape(s.inputs(0)), out = shape(s.outputs(0));
  auto starts = attrInts(s, "starts"), stepsAttr = attrInts(s, "steps");
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
  if (Status st = expectArity(s, 1, 1 << 20, 1); !st.ok())
    return st;
  int64_t axis = attrI(s, "axis"), offset = 0;
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
  if (Status st = expectArity(s, 1, 1, s.outputs_size()); !st.ok())
    return st;
  int64_t axis = attrI(s, "axis"), offset = 0;
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
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  auto data = shape(s.inputs(0));
  int64_t axis = attrI(s, "axis"), n = count(s.inputs(1));
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
    c.k->gather(c.at(slot(x)), outer, dim, inner, c.at(slot(idx)), indices64, n, c.at(slot(y)), bytes,
               errorPointer(c, flag));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::gatherElements(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
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
    c.k->gatherElements(c.at(slot(x)), outer, dim, inner, c.at(slot(idx)), indices64, picks, c.at(slot(y)), bytes,
                        errorPointer(c, flag));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::scatterAdd(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  auto axis = indexedAxis(s, shape(s.outputs(0)), shape(s.inputs(1)));
  if (!axis.ok())
    return axis.error();
  const int64_t outer = axis->full.outer, dim = axis->full.dim, inner = axis->full.inner;
  const int64_t picks = axis->picks;
  const bool elements = axis->elements, indices64 = dtype(s.inputs(1)) == plan::I64;
  int u = s.inputs(0), idx = s.inputs(1), y = s.outputs(0);
  emit([=](const Context &c) {
    c.k->scatterAdd(cref(c, u), outer, dim, inner, c.at(slot(idx)), indices64, picks, elements, ref(c, y));
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
        c.k->binary(BinaryKind::Add, c.at(slot(w.out)), outStrides, c.at(slot(w.bias)), biasStrides, c.at(slot(w.out)),
                    extent, t);
      return Status::success();
    });
    return Status::success();
  }
  emit([=](const Context &c) {
    c.k->window(w.kind, w.window, cref(c, w.a), w.b >= 0 ? cref(c, w.b) : kc::ConstRef(),
                w.bias >= 0 ? cref(c, w.bias) : kc::ConstRef(), ref(c, w.out), w.countIncludePad);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::argReduce(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  const bool max = attrS(s, "kind", "max") == "max", last = attrI(s, "select_last_index", 0) != 0;
  int x = s.inputs(0), y = s.outputs(0);
  auto t = type(x);
  emit([=](const Context &c) {
    c.k->argReduce(max, last, c.at(slot(x)), t, outer, dim, inner, static_cast<int64_t *>(c.at(slot(y))));
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::cumSum(const plan::Step &s) {
  auto split = unaryAlongAxis(s, [&](int i) { return shape(i); });
  if (!split.ok())
    return split.error();
  const int64_t outer = split->outer, dim = split->dim, inner = split->inner;
  const bool exclusive = attrI(s, "exclusive", 0) != 0, reverse = attrI(s, "reverse", 0) != 0;
  int x = s.inputs(0), y = s.outputs(0);
  auto t = type(x);
  emit([=](const Context &c) {
    c.k->cumSum(c.at(slot(x)), c.at(slot(y)), t, outer, dim, inner, exclusive, reverse);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::copy(const plan::Step &s) {
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
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
  if (Status st = expectArity(s, 1, 1, 1); !st.ok())
    return st;
  int x = s.inputs(0), o = s.outputs(0);
  // Folded into the quantize right after it, when that one reads the same f32 tensor: one pass, not two.
  if (currentStep + 1 < variant->steps_size()) {
    const auto &next = variant->steps(currentStep + 1);
    if (next.kernel() == "quantize" && next.inputs_size() == 2 && next.inputs(0) == x && isFloat(dtype(x)) &&
        next.inputs(1) != o) {
      fusedAmax[currentStep + 1] = o;
      return Status::success();
    }
  }
  int64_t n = count(x);
  emit([=](const Context &c) {
    c.k->amax(cref(c, x), n, c.at<float>(slot(o)));
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
  if (Status st = expectArity(s, 2, 2, 2); !st.ok())
    return st;
  const int x = s.inputs(0), scale = s.inputs(1), y = s.outputs(0), amax = s.outputs(1);
  const int64_t n = count(y), counter = healthCounter(scale, n);
  const auto format = fp8Format(dtype(y));
  const auto activation = castActivation(s);
  emit([=](const Context &c) {
    c.k->memset(c.at(slot(amax)), 0, sizeof(float));
    c.k->castFp8(cref(c, x), activation, c.at<float>(slot(scale)), c.at<uint8_t>(slot(y)), c.at<float>(slot(amax)), n,
                 format, counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
    return Status::success();
  });
  return Status::success();
}

/// cast_fp8_dbias: dY's quantize, amax and column sums in one pass (and one over the partial sums).
Status CudaBackend::castFp8BiasGrad(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 3); !st.ok())
    return st;
  const int x = s.inputs(0), scale = s.inputs(1), y = s.outputs(0), amax = s.outputs(1), dbias = s.outputs(2);
  const int64_t n = count(x), cols = shape(x).back(), rows = cols ? n / cols : 0, counter = healthCounter(scale, n);
  const auto format = fp8Format(dtype(y));
  const Slot partials = stepScratch(kc::biasGradChunks(rows) * cols * 8);
  emit([=](const Context &c) {
    c.k->memset(c.at(slot(amax)), 0, sizeof(float));
    c.k->castFp8BiasGrad(cref(c, x), rows, cols, c.at<float>(slot(scale)), c.at<uint8_t>(slot(y)),
                         c.at<float>(slot(amax)), c.at<float>(slot(dbias)), c.at<double>(partials), format,
                         counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
    return Status::success();
  });
  return Status::success();
}

/// layer_norm_fp8 (x, weight, bias?, scale -> q, amax, mean, rstd) in one kernel.
Status CudaBackend::layerNormFp8(const plan::Step &s) {
  if (Status st = expectArity(s, 3, 4, 4); !st.ok())
    return st;
  auto in = shape(s.inputs(0));
  const int64_t axis = attrI(s, "axis");
  if (axis < 0 || axis >= static_cast<int64_t>(in.size()))
    return unsupported(s, "axis out of range");
  const auto [rows, cols] = rowsAndCols(in, axis);
  const float eps = static_cast<float>(attrF(s, "epsilon", 1e-5));
  const int x = s.inputs(0), g = s.inputs(1), b = s.inputs_size() == 4 ? s.inputs(2) : -1,
            scale = s.inputs(s.inputs_size() - 1);
  const int y = s.outputs(0), amax = s.outputs(1), mean = s.outputs(2), rstd = s.outputs(3);
  if (b >= 0 && dtype(b) != dtype(g))
    return unsupported(s, "weight and bias of different element types");
  const int64_t counter = healthCounter(scale, count(y));
  const auto format = fp8Format(dtype(y));
  emit([=](const Context &c) {
    c.k->memset(c.at(slot(amax)), 0, sizeof(float));
    c.k->layerNormFp8(cref(c, x), cref(c, g), b >= 0 ? cref(c, b) : kc::ConstRef{}, c.at<float>(slot(scale)),
                      c.at<uint8_t>(slot(y)), c.at<float>(slot(amax)), c.at<float>(slot(mean)), c.at<float>(slot(rstd)),
                      rows, cols, eps, format, counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::quantize(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  int x = s.inputs(0), scale = s.inputs(1), y = s.outputs(0);
  int64_t n = count(y);
  auto format = fp8Format(dtype(y));
  if (!isFloat(dtype(x)))
    return unsupported(s, "expected an f32, bf16 or f16 input to quantize");
  Slot amaxOut = fusedAmax.count(currentStep) ? slot(fusedAmax[currentStep]) : Slot{};
  const int64_t counter = healthCounter(scale, n);
  auto fold = transposedQuantize.find(currentStep);
  if (fold != transposedQuantize.end() || attrI(s, "transpose_input")) {
    const bool own = fold == transposedQuantize.end(); // the quantize reads its own input transposed
    const int source = own ? x : std::get<0>(fold->second);
    const int64_t rows = own ? shape(x)[0] : std::get<1>(fold->second), cols = own ? shape(x)[1] : std::get<2>(fold->second);
    emit([=](const Context &c) {
      if (!amaxOut.null())
        c.k->memset(c.at(amaxOut), 0, sizeof(float));
      c.k->quantizeTransposed(cref(c, source), rows, cols, c.at<float>(slot(scale)), c.at<uint8_t>(slot(y)),
                              c.at<float>(amaxOut), format,
                              counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
      return Status::success();
    });
    return Status::success();
  }
  emit([=](const Context &c) {
    if (!amaxOut.null())
      c.k->memset(c.at(amaxOut), 0, sizeof(float));
    c.k->quantize(cref(c, x), c.at<float>(slot(scale)), c.at<uint8_t>(slot(y)), c.at<float>(amaxOut), n, format,
                  counter >= 0 ? c.at<unsigned long long>(countsSlot) + 2 * counter : nullptr);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::dequantize(const plan::Step &s) {
  if (Status st = expectArity(s, 2, 2, 1); !st.ok())
    return st;
  int x = s.inputs(0), scaleInv = s.inputs(1), y = s.outputs(0);
  int64_t n = count(y);
  auto format = fp8Format(dtype(x));
  Slot out = dtype(y) == plan::F32 ? slot(y) : stepScratch(n * 4);
  auto to = type(y);
  emit([=](const Context &c) {
    c.k->dequantize(c.at<uint8_t>(slot(x)), c.at<float>(slot(scaleInv)), c.at<float>(out), n, format);
    if (to != ElementType::F32)
      c.k->cast(c.at(out), ElementType::F32, c.at(slot(y)), to, n);
    return Status::success();
  });
  return Status::success();
}

Status CudaBackend::fp8Gemm(const plan::Step &s) {
  if (Status st = expectArity(s, 4, 5, 1); !st.ok())
    return st;
  int xq = s.inputs(0), wq = s.inputs(1), xsi = s.inputs(2), wsi = s.inputs(3);
  int b = s.inputs_size() > 4 ? s.inputs(4) : -1, y = s.outputs(0);
  bool transB = attrI(s, "transpose_b");
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
        c.k->stridedCopy(c.at(slot(wq)), src, c.at(weight), dst, extent, 1);
        return Status::success();
      });
    }
    spec.transposeB = true;
    spec.a = type(xq);
    spec.b = type(wq);
    // Transformer Engine: fast accumulation for forward GEMMs, full-precision accumulation for gradients.
    spec.fastAccumulation = attrS(s, "tec.gemm_role").empty();
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
    c.k->dequantize(c.at<uint8_t>(slot(xq)), c.at<float>(slot(xsi)), c.at<float>(xf), xn, xFormat);
    c.k->dequantize(c.at<uint8_t>(slot(wq)), c.at<float>(slot(wsi)), c.at<float>(wf), wn, wFormat);
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
      c.k->cast(c.at(yWide), ElementType::F32, c.at(slot(y)), to, n);
      return Status::success();
    });
  }
  return Status::success();
}

Status CudaBackend::delayedScaling(const plan::Step &s) {
  if (Status st = expectArity(s, 3, 3, 3); !st.ok())
    return st;
  int64_t length = count(s.inputs(0)), margin = attrI(s, "margin");
  if (length > kc::kMaxHistory)
    return unsupported(s, "amax history longer than " + std::to_string(kc::kMaxHistory));
  float fp8Max = static_cast<float>(attrF(s, "fp8_max", kernels::kE4M3Max));
  bool mostRecent = attrS(s, "algo", "max") == "most_recent";
  int h = s.inputs(0), scale = s.inputs(1), a = s.inputs(2), nh = s.outputs(0), ns = s.outputs(1), nsi = s.outputs(2);
  emit([=](const Context &c) {
    c.k->delayedScaling(c.at<float>(slot(h)), length, c.at<float>(slot(scale)), c.at<float>(slot(a)), fp8Max, margin,
                       mostRecent, c.at<float>(slot(nh)), c.at<float>(slot(ns)), c.at<float>(slot(nsi)));
    return Status::success();
  });
  return Status::success();
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
  }
  auto maybe = [](const std::vector<int> &list, size_t i) { return i < list.size() ? list[i] : -1; };
  const OptimizerStep head = group.front();
  emit([=](const Context &c) {
    auto at = [&](int buffer) { return buffer >= 0 ? c.at<float>(slot(buffer)) : nullptr; };
    std::vector<kc::OptimizerTensor> tensors;
    for (const auto &o : group)
      tensors.push_back({at(o.param), at(o.grad), at(maybe(o.moments, 0)), at(maybe(o.moments, 1)), at(o.newParam),
                         at(maybe(o.newMoments, 0)), at(maybe(o.newMoments, 1)), count(o.param)});
    c.k->optimizerUpdate(head.params, at(head.lr), at(head.step), at(head.clip),
                         head.finite >= 0 ? c.at<uint8_t>(slot(head.finite)) : nullptr, tensors);
    return Status::success();
  });
  return Status::success();
}

// ---- prepare and run ------------------------------------------------------------------------------------

Status CudaBackend::compile(const plan::Variant &v) {
  variant = &v;
  // Arena layout: the plan's arena, then params and constants (the data section), then scratch.
  arenaBytes = align(v.arena_bytes(), 256);
  dataEnd = 0;
  for (const auto &b : v.buffers())
    if (b.alias_of() < 0 && (b.role() == plan::PARAM || b.role() == plan::CONSTANT))
      dataEnd = std::max(dataEnd, b.offset() + b.bytes());
  dataBase = arenaBytes;
  arenaBytes += align(dataEnd, 256);
  planGraph.emplace(v);
  slots.assign(v.buffers_size(), Slot{});
  for (int i = 0; i < v.buffers_size(); ++i) {
    const auto &root = v.buffers(i).alias_of() >= 0 ? v.buffers(v.buffers(i).alias_of()) : v.buffers(i);
    bool inData = root.role() == plan::PARAM || root.role() == plan::CONSTANT;
    slots[i] = Slot{(inData ? dataBase : 0) + root.offset()};
  }
  workspace = scratch(static_cast<int64_t>(workspaceBytes));
  for (currentStep = 0; currentStep < v.steps_size(); ++currentStep) {
    const plan::Step &step = v.steps(currentStep);
    firstLaunchOfStep.push_back(static_cast<int>(program.size()));
    stepScratchUsed = 0;
    auto it = stepCompilers<CudaBackend>().find(step.kernel());
    if (it == stepCompilers<CudaBackend>().end())
      return Status::error("the cuda backend has no kernel '" + step.kernel() + "' (step from " + step.source() + ")");
    if (Status s = (this->*(it->second))(step); !s.ok())
      return s;
  }
  errorsSlot = scratch(sizeof(int) * std::max<size_t>(1, errorMessages.size()));
  countsSlot = scratch(2 * sizeof(unsigned long long) * std::max<size_t>(1, stats.size()));
  stepScratchSlot = scratch(stepScratchBytes);
  return Status::success();
}

Status CudaBackend::prepare(const plan::Variant &v, const char *data) {
  if (variant) // the launches made for the first plan point into its arena: a second plan needs a new backend
    return Status::error("the cuda backend is already prepared for a plan: create another backend for another plan");
  if (Status s = compile(v); !s.ok())
    return s;

  if (cudaError_t e = cudaMalloc(&arena, arenaBytes); e != cudaSuccess)
    return Status::error("cannot allocate the " + std::to_string(arenaBytes) + "-byte device arena: " + cudaText(e));
  // Uploads go on the work stream, which is not ordered after the legacy stream, and complete before
  // prepare returns (the plan's data is pageable and mapped).
  if (cudaError_t e = cudaMemcpyAsync(arena + dataBase, data, dataEnd, cudaMemcpyHostToDevice, stream); e != cudaSuccess)
    return Status::error("cannot upload the params: " + cudaText(e));
  // State starts from its initial value in the plan (stored, or a fill made here) and then carries over
  // from run to run. The fills stay alive until the stream synchronizes below.
  std::vector<std::vector<float>> fills;
  for (int i = 0; i < v.buffers_size(); ++i) {
    const auto &b = v.buffers(i);
    if (b.role() != plan::STATE || b.alias_of() >= 0)
      continue;
    const char *source = data + b.init_offset();
    if (b.has_init_fill())
      source = reinterpret_cast<const char *>(fills.emplace_back(b.bytes() / sizeof(float), b.init_fill()).data());
    if (cudaError_t e = cudaMemcpyAsync(arena + slots[i].offset, source, b.bytes(), cudaMemcpyHostToDevice, stream);
        e != cudaSuccess)
      return Status::error("cannot upload the state: " + cudaText(e));
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return Status::error("cannot upload the params and state: " + cudaText(e));
  auto rootOf = [&](int b) { return v.buffers(b).alias_of() >= 0 ? v.buffers(b).alias_of() : b; };
  for (int i : v.inputs())
    inputRoots.push_back(rootOf(i));
  for (int o : v.outputs())
    outputRoots.push_back(rootOf(o));
  for (int root : inputRoots)
    if (!staging.count(root) && cudaMallocHost(&staging[root], std::max<int64_t>(1, v.buffers(root).bytes())) != cudaSuccess)
      return Status::error("cannot allocate pinned memory for '" + v.buffers(root).name() + "'");
  for (int root : outputRoots)
    if (!staging.count(root) && cudaMallocHost(&staging[root], std::max<int64_t>(1, v.buffers(root).bytes())) != cudaSuccess)
      return Status::error("cannot allocate pinned memory for '" + v.buffers(root).name() + "'");
  if (cudaMallocHost(&hostErrors, sizeof(int) * std::max<size_t>(1, errorMessages.size())) != cudaSuccess ||
      cudaMallocHost(&hostCounts, 2 * sizeof(unsigned long long) * std::max<size_t>(1, stats.size())) != cudaSuccess)
    return Status::error("cannot allocate pinned memory");
  staleInputs = std::set<int>(inputRoots.begin(), inputRoots.end());
  return Status::success();
}

void *CudaBackend::hostData(int buffer) {
  int root = variant->buffers(buffer).alias_of() >= 0 ? variant->buffers(buffer).alias_of() : buffer;
  auto it = staging.find(root);
  if (it == staging.end())
    return nullptr;
  // The caller may write an input through this pointer: it goes up before the next run.
  if (std::find(inputRoots.begin(), inputRoots.end(), root) != inputRoots.end())
    staleInputs.insert(root);
  return it->second;
}

Status CudaBackend::readBuffer(int buffer, void *destination) {
  cudaError_t e = cudaMemcpyAsync(destination, arena + slots[buffer].offset, variant->buffers(buffer).bytes(),
                                  cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess)
    return Status::error("cannot read '" + variant->buffers(buffer).name() + "' from the GPU: " + cudaText(e));
  return Status::success();
}

Status CudaBackend::copyIntoBuffer(int buffer, const void *source, cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(arena + slots[buffer].offset, source, variant->buffers(buffer).bytes(), kind, stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess)
    return Status::error("cannot copy '" + variant->buffers(buffer).name() + "' to the GPU from " +
                         (kind == cudaMemcpyHostToDevice ? "host" : "device") + " memory: " + cudaText(e));
  return Status::success();
}

Status CudaBackend::writeBuffer(int buffer, const void *source) {
  return copyIntoBuffer(buffer, source, cudaMemcpyHostToDevice);
}

Status CudaBackend::writeBufferFromDevice(int buffer, const void *source) {
  if (Status s = copyIntoBuffer(buffer, source, cudaMemcpyDeviceToDevice); !s.ok())
    return s;
  // The device copy is the input now: its host staging must not overwrite it at the next run.
  staleInputs.erase(variant->buffers(buffer).alias_of() >= 0 ? variant->buffers(buffer).alias_of() : buffer);
  return Status::success();
}

/// One whole step on `stream`: every launch (timed per plan step when asked), then the downloads.
Status CudaBackend::enqueueStep(const Context &c, std::vector<double> *stepMillis) {
  c.k->memset(c.at(errorsSlot), 0, sizeof(int) * std::max<size_t>(1, errorMessages.size()));
  if (!stats.empty())
    c.k->memset(c.at(countsSlot), 0, 2 * sizeof(unsigned long long) * stats.size());
  std::vector<cudaEvent_t> events;
  if (stepMillis) {
    events.resize(program.size() + 1);
    for (auto &e : events)
      cudaEventCreate(&e);
    cudaEventRecord(events[0], stream);
  }
  for (size_t i = 0; i < program.size(); ++i) {
    if (capturing && i == program.size() / 2 && std::getenv("TEC_TEST_FAIL_IN_CAPTURE"))
      return Status::error("a launch failed inside the capture (TEC_TEST_FAIL_IN_CAPTURE)");
    if (Status s = program[i](c); !s.ok())
      return s;
    if (stepMillis)
      cudaEventRecord(events[i + 1], stream);
  }
  for (int root : outputRoots)
    cudaMemcpyAsync(staging[root], c.base + slots[root].offset, variant->buffers(root).bytes(), cudaMemcpyDeviceToHost,
                    stream);
  cudaMemcpyAsync(hostErrors, c.at(errorsSlot), sizeof(int) * std::max<size_t>(1, errorMessages.size()),
                  cudaMemcpyDeviceToHost, stream);
  if (!stats.empty())
    cudaMemcpyAsync(hostCounts, c.at(countsSlot), 2 * sizeof(unsigned long long) * stats.size(),
                    cudaMemcpyDeviceToHost, stream);
  if (stepMillis) {
    cudaStreamSynchronize(stream);
    for (size_t i = 0; i < program.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events[i], events[i + 1]);
      (*stepMillis)[programStep[i]] += ms;
    }
    for (auto &e : events)
      cudaEventDestroy(e);
  }
  return Status::success();
}

Status CudaBackend::checkErrors() {
  for (size_t i = 0; i < errorMessages.size(); ++i)
    if (hostErrors[i])
      return Status::badData(errorMessages[i]);
  for (size_t i = 0; i < stats.size(); ++i) {
    stats[i].saturated = static_cast<int64_t>(hostCounts[2 * i]);
    stats[i].flushed = static_cast<int64_t>(hostCounts[2 * i + 1]);
  }
  return Status::success();
}

Status CudaBackend::run(std::vector<double> *stepMillis) {
  auto launcher = deviceLauncher(stream, gemms, convolutions, attentions, arena + workspace.offset);
  Context c{arena, launcher.get(), stepScratchSlot.offset};
  // Inputs the caller may have changed since they last went up; unchanged ones stay on the device.
  for (int root : staleInputs)
    if (cudaError_t e = cudaMemcpyAsync(arena + slots[root].offset, staging[root], variant->buffers(root).bytes(),
                                        cudaMemcpyHostToDevice, stream);
        e != cudaSuccess)
      return Status::error("cannot upload '" + variant->buffers(root).name() + "': " + cudaText(e));
  staleInputs.clear();
  // The first run launches step by step (lazy module loading and cuBLASLt's first-use setup happen
  // there, not inside a capture); the second captures the step as a CUDA Graph, later runs replay it.
  // Profiling, graph-less runs and a failed capture launch step by step.
  ++runs;
  if (stepMillis || !options.useGraphs || graphFailed || runs == 1) {
    if (Status s = enqueueStep(c, stepMillis); !s.ok())
      return s;
  } else {
    if (!graph) {
      // Whatever fails from here to the instantiated graph (a launch inside the capture included) ends the
      // capture, marks the graph failed with a note, and the step launches step by step from now on: a real
      // error then shows there, uncaptured, and a capture problem costs the graph, not every later run.
      cudaGraph_t captured = nullptr;
      std::string why;
      if (cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
        why = cudaText(e);
      } else {
        capturing = true;
        Status s = enqueueStep(c, nullptr);
        capturing = false;
        e = cudaStreamEndCapture(stream, &captured); // always: a failed launch must not leave the stream capturing
        if (!s.ok())
          why = s.message();
        else if (e != cudaSuccess || (e = cudaGraphInstantiate(&graph, captured, 0)) != cudaSuccess)
          why = cudaText(e);
      }
      if (captured)
        cudaGraphDestroy(captured);
      if (!why.empty()) {
        graphFailed = true;
        graph = nullptr;
        note("the step could not be captured as a CUDA graph (" + why + "); it launches step by step");
        cudaGetLastError();
        return run(stepMillis);
      }
    }
    if (cudaError_t e = cudaGraphLaunch(graph, stream); e != cudaSuccess)
      return Status::error("cannot launch the CUDA graph: " + cudaText(e));
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return Status::error("the GPU step failed: " + cudaText(e));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error("a kernel launch failed: " + cudaText(e));
  return checkErrors();
}

Result<std::string> CudaBackend::programSource(const plan::Variant &v, const std::string &planName) {
  CudaBackend b(CudaBackendOptions{});
  b.recording = true;
  // Compiled as a GPU of the variant's target runs it (a cpu variant as on Hopper).
  int sm = v.target().rfind("sm_", 0) == 0 ? std::atoi(v.target().c_str() + 3) : 90;
  b.major = sm / 10;
  b.minor = sm % 10;
  b.fp8Gemms = sm >= 89;
  b.workspaceBytes = kc::gemmWorkspaceBytes(b.major);
  if (Status s = b.compile(v); !s.ok())
    return s;
  // The closures run once against a source writer: the program is the backend's own launch sequence.
  char *fakeBase = reinterpret_cast<char *>(uintptr_t(1) << 40);
  std::vector<std::string> launches;
  auto writer = sourceWriter(fakeBase, launches);
  Context c{fakeBase, writer.get(), b.stepScratchSlot.offset};
  std::vector<std::string> body;
  for (size_t i = 0, step = 0; i < b.program.size(); ++i) {
    for (; step < b.firstLaunchOfStep.size() && b.firstLaunchOfStep[step] <= static_cast<int>(i); ++step) {
      const auto &st = v.steps(static_cast<int>(step));
      bool hasLaunches =
          step + 1 >= b.firstLaunchOfStep.size() || b.firstLaunchOfStep[step + 1] > static_cast<int>(i);
      body.push_back("  // step " + std::to_string(step) + ": " + st.kernel() + " (" + st.source() + ")" +
                     (hasLaunches ? "" : ", fused into a neighbour's launch"));
    }
    launches.clear();
    if (Status s = b.program[i](c); !s.ok())
      return s;
    body.insert(body.end(), launches.begin(), launches.end());
  }
  auto q = [](const std::string &text) {
    std::string out = "\"";
    for (char ch : text)
      out += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    return out + "\"";
  };
  std::ostringstream o;
  o << "// Generated by `tec --emit=cuda` from " << planName << ": variant " << v.target() << " (" << v.precision()
    << "), " << v.steps_size() << " steps as " << b.program.size() << " launch groups.\n"
    << "// The launch sequence of tec's CUDA backend for this plan, as a standalone host program over tec's\n"
    << "// kernels library. Build (from tec's source root):\n"
    << "//   nvcc -std=c++17 -I. prog.cu -Lbuild/release/kernels -lTecKernelsCuda -lTecLaunchShapes -lcublasLt -o prog\n"
    << "// Run: ./prog " << planName << " [input files, raw bytes, in input order; zeros otherwise]\n"
    << "#include \"kernels/cuda/Fp8Kernels.h\"\n#include \"kernels/cuda/Gemm.h\"\n#include \"kernels/cuda/Kernels.h\"\n\n"
    << "#include <cublasLt.h>\n#include <cuda_runtime.h>\n\n"
    << "#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <fstream>\n"
    << "#include <initializer_list>\n#include <iterator>\n#include <memory>\n#include <string>\n#include <vector>\n\n"
    << "using namespace tec::kernels;\nnamespace kc = tec::kernels::cuda;\n\n"
    << "#define CHECK_CUDA(call)                                                                  \\\n"
    << "  do {                                                                                    \\\n"
    << "    cudaError_t e_ = (call);                                                              \\\n"
    << "    if (e_ != cudaSuccess) {                                                              \\\n"
    << "      std::fprintf(stderr, \"%s:%d: %s\\n\", __FILE__, __LINE__, cudaGetErrorString(e_));   \\\n"
    << "      std::exit(1);                                                                       \\\n"
    << "    }                                                                                     \\\n"
    << "  } while (0)\n\n"
    << "static char *arena;                  // one device allocation: plan arena, params, scratch\n"
    << "#define P(offset) (arena + (offset)) // a buffer by its arena offset\n"
    << "static cudaStream_t stream;\nstatic void *workspace;\n\n"
    << "static kc::Extent extent(std::initializer_list<int64_t> dims) {\n  kc::Extent e;\n"
    << "  for (int64_t d : dims)\n    e.dims[e.rank++] = d;\n  return e;\n}\n\n"
    << "static kc::Strided strided(int64_t base, std::initializer_list<int64_t> strides) {\n  kc::Strided s;\n"
    << "  s.base = base;\n  int i = 0;\n  for (int64_t v : strides)\n    s.strides[i++] = v;\n  return s;\n}\n\n"
    << "static kc::GemmSpec gemmSpec(int64_t m, int64_t n, int64_t k, bool ta, bool tb, ElementType a, ElementType b,\n"
    << "                             ElementType d, ElementType bias, kc::GemmEpilogue epilogue, bool fast, float alpha,\n"
    << "                             float beta, int64_t batch, int64_t sa, int64_t sb, int64_t sd, int alignA,\n"
    << "                             int alignB, int alignD) {\n"
    << "  kc::GemmSpec s;\n  s.m = m, s.n = n, s.k = k, s.transposeA = ta, s.transposeB = tb, s.a = a, s.b = b, s.d = d;\n"
    << "  s.bias = bias, s.epilogue = epilogue, s.fastAccumulation = fast, s.alpha = alpha, s.beta = beta;\n"
    << "  s.batch = batch, s.batchStrideA = sa, s.batchStrideB = sb, s.batchStrideD = sd;\n"
    << "  s.alignA = alignA, s.alignB = alignB, s.alignD = alignD;\n  return s;\n}\n\n"
    << "static void runGemm(kc::Gemm &g, kc::GemmOperands o) {\n  std::string error;\n"
    << "  if (!g.run(o, workspace, stream, error)) {\n    std::fprintf(stderr, \"GEMM failed: %s\\n\", error.c_str());\n"
    << "    std::exit(1);\n  }\n}\n\n"
    << "struct Tensor {\n  const char *name;\n  int64_t offset, bytes;\n};\n\n";
  auto tensorList = [&](const char *name, const google::protobuf::RepeatedField<int32_t> &buffers,
                        const google::protobuf::RepeatedPtrField<std::string> &names) {
    o << "static const Tensor " << name << "[] = {\n";
    for (int i = 0; i < buffers.size(); ++i) {
      int buffer = buffers.Get(i);
      o << "    {" << q(i < names.size() ? names.Get(i) : v.buffers(buffer).name()) << ", "
        << b.slots[buffer].offset << ", " << v.buffers(buffer).bytes() << "},\n";
    }
    o << "    {nullptr, 0, 0}};\n";
  };
  tensorList("kInputs", v.inputs(), v.input_names());
  tensorList("kOutputs", v.outputs(), v.output_names());
  o << "// State stored in the plan (trained params): arena offset, offset in the data section, bytes.\n"
    << "static const int64_t kState[][3] = {\n";
  for (int i = 0; i < v.buffers_size(); ++i)
    if (v.buffers(i).role() == plan::STATE && v.buffers(i).alias_of() < 0 && !v.buffers(i).has_init_fill())
      o << "    {" << b.slots[i].offset << ", " << v.buffers(i).init_offset() << ", " << v.buffers(i).bytes() << "},\n";
  o << "    {-1, 0, 0}};\n"
    << "// State that starts as one value (FP8 scales and histories, optimizer moments): arena offset, floats.\n"
    << "static const struct { int64_t offset, count; float value; } kFilledState[] = {\n";
  for (int i = 0; i < v.buffers_size(); ++i)
    if (v.buffers(i).role() == plan::STATE && v.buffers(i).alias_of() < 0 && v.buffers(i).has_init_fill())
      o << "    {" << b.slots[i].offset << ", " << v.buffers(i).bytes() / 4 << ", " << std::hexfloat
        << v.buffers(i).init_fill() << std::defaultfloat << "f},\n"; // hex: the exact value
  o << "    {-1, 0, 0.0f}};\n"
    << "static const char *kErrors[] = {";
  for (const auto &m : b.errorMessages)
    o << q(m) << ", ";
  o << "nullptr};\n\n"
    << "int main(int argc, char **argv) {\n"
    << "  if (argc < 2) {\n    std::fprintf(stderr, \"usage: %s PLAN.tecplan [INPUT.bin...]\\n\", argv[0]);\n    return 2;\n  }\n"
    << "  std::ifstream file(argv[1], std::ios::binary);\n"
    << "  std::vector<char> plan((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());\n"
    << "  uint64_t dataOffset = 0;\n"
    << "  if (plan.size() < 64 || std::memcmp(plan.data(), \"TECPLAN\", 8) != 0) {\n"
    << "    std::fprintf(stderr, \"%s: not a .tecplan\\n\", argv[1]);\n    return 2;\n  }\n"
    << "  std::memcpy(&dataOffset, plan.data() + 32, 8); // the header's data-section offset\n"
    << "  const char *data = plan.data() + dataOffset;\n"
    << "  CHECK_CUDA(cudaMalloc(&arena, " << b.arenaBytes << "));\n"
    << "  CHECK_CUDA(cudaMemcpy(P(" << b.dataBase << "), data, " << b.dataEnd << ", cudaMemcpyHostToDevice));\n"
    << "  for (auto *s = kState; (*s)[0] >= 0; ++s)\n"
    << "    CHECK_CUDA(cudaMemcpy(P((*s)[0]), data + (*s)[1], (*s)[2], cudaMemcpyHostToDevice));\n"
    << "  for (auto *s = kFilledState; s->offset >= 0; ++s) {\n"
    << "    std::vector<float> fill(s->count, s->value);\n"
    << "    CHECK_CUDA(cudaMemcpy(P(s->offset), fill.data(), fill.size() * sizeof(float), cudaMemcpyHostToDevice));\n"
    << "  }\n"
    << "  int argument = 2;\n"
    << "  for (auto *t = kInputs; t->name; ++t) {\n"
    << "    std::vector<char> bytes(t->bytes);\n"
    << "    if (argument < argc) {\n"
    << "      std::ifstream in(argv[argument++], std::ios::binary);\n"
    << "      if (!in.read(bytes.data(), t->bytes)) {\n"
    << "        std::fprintf(stderr, \"%s: expected %lld bytes for input '%s'\\n\", argv[argument - 1], (long long)t->bytes, t->name);\n"
    << "        return 2;\n      }\n    }\n"
    << "    CHECK_CUDA(cudaMemcpy(P(t->offset), bytes.data(), t->bytes, cudaMemcpyHostToDevice));\n  }\n"
    << "  CHECK_CUDA(cudaStreamCreate(&stream));\n"
    << "  workspace = P(" << b.workspace.offset << ");\n"
    << "  cublasLtHandle_t lt;\n  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS)\n    return 1;\n"
    << "  std::vector<std::unique_ptr<kc::Gemm>> gemms;\n  std::string error;\n";
  // Only the GEMMs the sequence runs (the backend also keeps an unfused twin of each fused one).
  for (size_t g = 0; g < b.gemmSpecs.size(); ++g) {
    const std::string use = "gemms[" + std::to_string(g) + "]";
    bool used = std::any_of(body.begin(), body.end(), [&](const std::string &l) { return l.find(use) != l.npos; });
    o << "  gemms.push_back("
      << (used ? "kc::Gemm::create(lt, " + gemmSpecSource(b.gemmSpecs[g]) + ", " + std::to_string(b.workspaceBytes) +
                     ", error)"
               : std::string("nullptr"))
      << ");\n";
    if (used)
      o << "  if (!gemms.back()) {\n    std::fprintf(stderr, \"GEMM " << g << ": %s\\n\", error.c_str());\n    return 1;\n  }\n";
  }
  o
    << "  CHECK_CUDA(cudaMemset(P(" << b.errorsSlot.offset << "), 0, " << sizeof(int) * std::max<size_t>(1, b.errorMessages.size())
    << "));\n\n";
  for (const auto &line : body)
    o << line << "\n";
  o << "\n  CHECK_CUDA(cudaStreamSynchronize(stream));\n"
    << "  std::vector<int> errors(" << std::max<size_t>(1, b.errorMessages.size()) << ");\n"
    << "  CHECK_CUDA(cudaMemcpy(errors.data(), P(" << b.errorsSlot.offset << "), errors.size() * sizeof(int), cudaMemcpyDeviceToHost));\n"
    << "  for (size_t i = 0; kErrors[i]; ++i)\n    if (errors[i]) {\n      std::fprintf(stderr, \"error: %s\\n\", kErrors[i]);\n      return 1;\n    }\n"
    << "  for (auto *t = kOutputs; t->name; ++t) {\n"
    << "    std::vector<char> bytes(t->bytes);\n"
    << "    CHECK_CUDA(cudaMemcpy(bytes.data(), P(t->offset), t->bytes, cudaMemcpyDeviceToHost));\n"
    << "    std::string path = std::string(t->name) + \".bin\";\n"
    << "    for (char &ch : path)\n      if (ch == '/' || ch == ':')\n        ch = '_';\n"
    << "    std::ofstream(path, std::ios::binary).write(bytes.data(), t->bytes);\n"
    << "    std::printf(\"output %s: %lld bytes -> %s\\n\", t->name, (long long)t->bytes, path.c_str());\n  }\n"
    << "  return 0;\n}\n";
  return o.str();
}

} // namespace

} // namespace tec

extern "C" tec::Backend *tecCreateCudaBackend(const tec::CudaBackendOptions *options, std::string *error) {
  auto backend = std::make_unique<tec::CudaBackend>(*options);
  if (tec::Status s = backend->init(); !s.ok()) {
    *error = s.message();
    return nullptr;
  }
  return backend.release();
}

extern "C" bool tecCudaProgramSource(const tec::plan::Variant *variant, const std::string *planName,
                                     std::string *source, std::string *error) {
  auto result = tec::CudaBackend::programSource(*variant, *planName);
  if (!result.ok()) {
    *error = result.error().message();
    return false;
  }
  *source = result.take();
  return true;
}
