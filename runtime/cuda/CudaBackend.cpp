// The CUDA backend's life: creation, prepare (the arena, uploads, every step's launches), run (eager, then
// captured and replayed as a CUDA Graph), buffers in and out. CudaBackend.h says where the rest is.
#include "runtime/cuda/CudaBackend.h"

#include <chrono>
#include <thread>

namespace tec::cudabackend {

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
  nccl.reset(); // after the stream synchronized: its collectives are done
  for (cudaEvent_t e : collectiveEvents)
    cudaEventDestroy(e);
  if (commStream)
    cudaStreamDestroy(commStream);
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
  blockScaleModes = major >= 9 && kc::cublasLtVersion() >= 120900;
  workspaceBytes = kc::gemmWorkspaceBytes(major);
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return Status::error("cannot create a CUDA stream: " + cudaText(e));
  if (cublasStatus_t s = cublasLtCreate(&lt); s != CUBLAS_STATUS_SUCCESS)
    return Status::error("cannot initialize cuBLASLt (status " + std::to_string(static_cast<int>(s)) + ")");
  return Status::success();
}

// ---- prepare and run ------------------------------------------------------------------------------------

/// What cuBLASLt and tec's CUDA kernels take beyond the kernel's contract: GEMMs of one element type (16-bit
/// operands may write an f32 weight gradient without a bias, cuBLASLt's D type), quantize from floats, amax
/// histories up to kc::kMaxHistory, attention whose head sizes fit tec's kernel's shared memory.
Status CudaBackend::supports(const plan::Variant &v, const plan::Step &s) const {
  if (Status st = Backend::supports(v, s); !st.ok())
    return st;
  auto dtypeOf = [&](int i) { return v.buffers(i).dtype(); };
  auto shapeOf = [&](int i) { return std::vector<int64_t>(v.buffers(i).shape().begin(), v.buffers(i).shape().end()); };
  const std::string &k = s.kernel();
  const int y = s.outputs(0);
  if (k == "linear") {
    const plan::DType x = dtypeOf(s.inputs(0));
    const bool widens = s.inputs_size() < 3 && dtypeOf(y) == plan::F32 && (x == plan::BF16 || x == plan::F16);
    if (dtypeOf(s.inputs(1)) != x || (x != dtypeOf(y) && !widens))
      return unsupported(s, "operands of different element types");
  } else if (k == "gemm" || k == "matmul") {
    for (int i : s.inputs())
      if (dtypeOf(i) != dtypeOf(y))
        return unsupported(s, "operands of different element types");
  } else if (k == "quantize" && !isFloat(dtypeOf(s.inputs(0)))) {
    return unsupported(s, "expected an f32, bf16 or f16 input to quantize");
  } else if (k == "delayed_scaling" && v.buffers(s.inputs(0)).bytes() / 4 > kc::kMaxHistory) { // f32 (the contract)
    return unsupported(s, "amax history longer than " + std::to_string(kc::kMaxHistory));
  } else if (k.rfind("attention", 0) == 0) {
    const AttentionStep a = *readAttentionStep(s, shapeOf, dtypeOf); // the contract read it
    if (kc::attentionSharedBytes(a.shape, a.grad) > kc::kMaxAttentionSharedBytes)
      return unsupported(s, "head sizes " + std::to_string(a.shape.headDim) + " and " +
                                std::to_string(a.shape.valueDim) + " need more shared memory than tec's attention kernel has");
  }
  return Status::success();
}

Status CudaBackend::compile(const plan::Variant &v) {
  if (Status s = supportsEveryStep(v); !s.ok())
    return s;
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
  computingStep.resize(v.steps_size());
  std::iota(computingStep.begin(), computingStep.end(), 0);
  foldedHow.assign(v.steps_size(), "");
  for (currentStep = 0; currentStep < v.steps_size(); ++currentStep) {
    const plan::Step &step = v.steps(currentStep);
    firstLaunchOfStep.push_back(static_cast<int>(program.size()));
    emitCollectiveEndsThrough(currentStep);
    stepScratchUsed = 0;
    if (Status s = (this->*stepCompilers<CudaBackend>().at(step.kernel()))(step); !s.ok())
      return s;
  }
  // What only the caller reads: the work stream waits for it before the step's downloads (and a captured
  // graph joins the collectives' stream back).
  emitCollectiveEndsThrough(v.steps_size());
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

  if (collectiveEventCount > 0 && collectivesOnNccl())
    if (Status s = prepareCollectives(); !s.ok())
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
  // The device holds the params, constants and initial state now: their host pages may go.
  releaseData(0, dataEnd);
  for (const auto &b : v.buffers())
    if (b.role() == plan::STATE && b.alias_of() < 0 && !b.has_init_fill())
      releaseData(b.init_offset(), b.bytes());
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

Status CudaBackend::prepareCollectives() {
  std::string why;
  const kc::NcclApi *api = kc::loadNccl(why);
  if (!api)
    return Status::error("the plan's collectives need NCCL: " + why);
  if (options.ranks > 1 && !options.broadcast)
    return Status::error("NCCL over " + std::to_string(options.ranks) + " ranks needs a way to share its id");
  if (cudaError_t e = cudaStreamCreateWithFlags(&commStream, cudaStreamNonBlocking); e != cudaSuccess)
    return Status::error("cannot create the collectives' CUDA stream: " + cudaText(e));
  collectiveEvents.assign(collectiveEventCount, nullptr);
  for (cudaEvent_t &e : collectiveEvents)
    if (cudaError_t made = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); made != cudaSuccess)
      return Status::error("cannot create a CUDA event: " + cudaText(made));
  ncclApi = api;
  note("collectives: NCCL " + kc::ncclDescription(*api) + ", rank " + std::to_string(options.rank) + " of " +
       std::to_string(options.ranks) + " on GPU " + std::to_string(options.device) + ", on their own stream");
  return Status::success();
}

Status CudaBackend::joinCollectives() {
  auto share = [&](void *id, size_t bytes, std::string &failed) {
    Status s = options.broadcast(id, bytes);
    failed = s.ok() ? "" : "cannot share NCCL's id: " + s.message();
    return s.ok();
  };
  std::string why;
  if (!(nccl = kc::NcclComm::create(*ncclApi, options.rank, options.ranks, share, why))) {
    if (options.collectiveFailed)
      options.collectiveFailed();
    return Status::error("rank " + std::to_string(options.rank) + ": NCCL: " + why);
  }
  return Status::success();
}

Status CudaBackend::finishStep() {
  const double timeout = options.collectiveTimeout ? options.collectiveTimeout() : 0;
  if (!nccl) {
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
      return Status::error("the GPU step failed: " + cudaText(e));
    return Status::success();
  }
  // NCCL's kernels spin while a rank is missing: poll, so that a hung or dead rank ends the step.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess)
      return Status::success();
    if (e != cudaErrorNotReady)
      return Status::error("the GPU step failed: " + cudaText(e));
    std::string why;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (nccl->healthy(why) && (timeout <= 0 || waited < timeout)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    if (why.empty())
      why = "NCCL: a collective did not finish within " + std::to_string(static_cast<int>(timeout)) +
            " s (--collective-timeout): a rank hung, died or runs another step";
    nccl->abort();
    if (options.collectiveFailed)
      options.collectiveFailed();
    return Status::error("rank " + std::to_string(options.rank) + ": " + why);
  }
}

Status CudaBackend::run(std::vector<double> *stepMillis) {
  if (ncclApi && !nccl)
    if (Status s = joinCollectives(); !s.ok())
      return s;
  if (nccl && nccl->isAborted())
    return Status::error("rank " + std::to_string(options.rank) +
                         ": NCCL was aborted after a collective failed; the ranks no longer agree, start them again");
  Launcher launcher(stream, gemms, convolutions, attentions, arena + workspace.offset);
  launcher.setCollectives(nccl.get(), commStream, reinterpret_cast<void *const *>(collectiveEvents.data()));
  Context c{arena, &launcher, stepScratchSlot.offset};
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
  if (Status s = finishStep(); !s.ok())
    return s;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error("a kernel launch failed: " + cudaText(e));
  return checkErrors();
}

} // namespace tec::cudabackend


extern "C" tec::Backend *tecCreateCudaBackend(const tec::CudaBackendOptions *options, std::string *error) {
  auto backend = std::make_unique<tec::cudabackend::CudaBackend>(*options);
  if (tec::Status s = backend->init(); !s.ok()) {
    *error = s.message();
    return nullptr;
  }
  return backend.release();
}

extern "C" bool tecCudaProgramSource(const tec::plan::Variant *variant, const std::string *planName,
                                     std::string *source, std::string *error) {
  auto result = tec::cudabackend::CudaBackend::programSource(*variant, *planName);
  if (!result.ok()) {
    *error = result.error().message();
    return false;
  }
  *source = result.take();
  return true;
}
