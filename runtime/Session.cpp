#include "runtime/Session.h"
#include "runtime/Collectives.h"
#include "runtime/PlanGraph.h"
#include "runtime/Steps.h"

#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/ThreadPool.h"

#include <cstring>

namespace tec {

GpuOffer probeGpuOffer() {
  GpuOffer offer;
  offer.cuda = probeCuda();
  if (!offer.cuda.usable)
    return offer;
  const auto &plugin = loadCudaPlugin();
  if (!plugin.loaded)
    offer.backendMissing = plugin.reason;
  std::string fp8 = fp8Availability(offer.cuda, probeCudaLibraries());
  if (fp8.rfind("yes", 0) != 0)
    offer.fp8Missing = fp8.substr(fp8.find(':') + 2);
  return offer;
}

namespace {

/// sm_XY's number XY, or -1 for a target that is not a GPU.
int smNumber(const std::string &target) {
  if (target.rfind("sm_", 0) != 0)
    return -1;
  try {
    return std::stoi(target.substr(3));
  } catch (...) {
    return -1;
  }
}

bool usesFp8(const plan::Variant &v) {
  for (const auto &step : v.steps())
    if (step.kernel() == "fp8_gemm")
      return true;
  return false;
}

} // namespace

Result<VariantChoice> chooseVariant(const plan::Plan &plan, const GpuOffer &gpu, const SessionOptions &options) {
  // Only variants of the asked kind compete: a train step is not a forward pass.
  auto kindOf = [](const plan::Variant &v) { return v.kind().empty() ? std::string("inference") : v.kind(); };
  std::string targets;
  int cpu = -1, first = -1;
  for (int i = 0; i < plan.variants_size(); ++i) {
    if (kindOf(plan.variants(i)) != options.kind)
      continue;
    const auto &target = plan.variants(i).target();
    targets += (targets.empty() ? "" : ", ") + target;
    if (first < 0)
      first = i;
    if (target == "cpu")
      cpu = i;
  }
  if (first < 0)
    return Status::error("the plan has no " + options.kind + " variant" +
                         (options.kind == "train" ? " (compile with --train)" : ""));
  const bool onGpu = gpu.runsCuda() && options.device != "cpu";
  const std::string gpuName = gpu.cuda.name + " (" + smName(gpu.cuda.major, gpu.cuda.minor) + ")";
  const std::string noGpu = !gpu.cuda.usable ? gpu.cuda.reason
                            : !gpu.backendMissing.empty() ? "found " + gpuName + " but " + gpu.backendMissing
                                                          : "--device cpu";
  if (options.device == "cuda" && !onGpu)
    return Status::error("--device cuda: cannot run on a GPU: " + noGpu);
  if (!options.variant.empty()) {
    for (int i = 0; i < plan.variants_size(); ++i) {
      if (plan.variants(i).target() != options.variant || kindOf(plan.variants(i)) != options.kind)
        continue;
      if (onGpu && (options.variant != "cpu" || options.device == "cuda"))
        return VariantChoice{i, "cuda", "variant " + options.variant + " (asked for) on the cuda backend, " + gpuName};
      return VariantChoice{i, "cpu", "variant " + options.variant + " (asked for) on the cpu backend" +
                                         (options.variant == "cpu" ? "" : ", its GPU precisions emulated")};
    }
    return Status::error("the plan has no variant '" + options.variant + "' (it has: " + targets + ")");
  }
  if (onGpu) {
    // The newest GPU variant this device runs: sm_XY with XY at most the device's, FP8 only where it runs.
    const int device = gpu.cuda.major * 10 + gpu.cuda.minor;
    int best = -1;
    std::string skipped;
    for (int i = 0; i < plan.variants_size(); ++i) {
      const auto &v = plan.variants(i);
      int sm = smNumber(v.target());
      if (kindOf(v) != options.kind || sm < 0 || sm > device)
        continue;
      if (usesFp8(v) && !gpu.fp8Missing.empty()) {
        skipped += "; skipped " + v.target() + " (" + v.precision() + "): " + gpu.fp8Missing;
        continue;
      }
      if (best < 0 || sm > smNumber(plan.variants(best).target()))
        best = i;
    }
    if (best >= 0)
      return VariantChoice{best, "cuda", "variant " + plan.variants(best).target() + " (" +
                                             plan.variants(best).precision() + ") on the cuda backend, " + gpuName +
                                             skipped};
    int fallback = cpu >= 0 ? cpu : first;
    return VariantChoice{fallback, "cuda",
                         "variant " + plan.variants(fallback).target() + " on the cuda backend, " + gpuName +
                             ": the plan has no variant for " + smName(gpu.cuda.major, gpu.cuda.minor) +
                             " (compile with --target auto)" + skipped};
  }
  if (cpu < 0)
    return VariantChoice{first, "cpu", "variant " + plan.variants(first).target() + " on the cpu backend (the plan has no "
                                       "cpu variant; its GPU precisions are emulated): " + noGpu};
  return VariantChoice{cpu, "cpu", "variant cpu on the cpu backend: " + noGpu};
}

std::string variantFallback(const VariantChoice &choice, const GpuOffer &gpu, const SessionOptions &options) {
  if (options.device == "cpu")
    return "";
  const bool gpuUnused = gpu.cuda.usable && choice.backend == "cpu";
  const bool passedOver = choice.reason.find("; skipped ") != std::string::npos ||
                          choice.reason.find("the plan has no variant for") != std::string::npos;
  return gpuUnused || passedOver ? choice.reason : "";
}

Result<std::string> normalizeDevice(const std::string &device) {
  if (device == "auto" || device == "cpu" || device == "cuda")
    return device;
  if (device == "cuda:0") // PyTorch's spelling of the first GPU
    return std::string("cuda");
  if (device.rfind("cuda:", 0) == 0)
    return Status::error("device '" + device + "': tec runs on the first GPU it sees (cuda or cuda:0); choose "
                         "another with CUDA_VISIBLE_DEVICES");
  return Status::error("device '" + device + "': expected auto, cpu, cuda or cuda:0");
}

Result<std::unique_ptr<Session>> Session::open(const std::string &path, const SessionOptions &requested) {
  auto device = normalizeDevice(requested.device);
  if (!device.ok())
    return device.error();
  // More threads than cores only make them wait for each other: 8 per CPU is past any sensible choice.
  const int cpus = kernels::cpu::availableCpus(), most = std::min(kMaxThreads, std::max(8, 8 * cpus));
  if (requested.threads < 0 || requested.threads > most)
    return Status::error("threads " + std::to_string(requested.threads) + ": expected 0 (the " + std::to_string(cpus) +
                         " CPUs this process may use) to " + std::to_string(most) + " (8 per CPU)");
  SessionOptions options = requested;
  options.device = *device;
  if (const char *strict = std::getenv("TEC_STRICT"); strict && *strict && std::string(strict) != "0")
    options.strict = true;
  auto file = PlanFile::open(path);
  if (!file.ok())
    return file.error();
  std::unique_ptr<Session> session(new Session());
  session->file = file.take();
  const plan::Plan &p = session->file->plan();
  GpuOffer gpu = options.device == "cpu" ? GpuOffer{} : probeGpuOffer();
  if (options.device == "cpu")
    gpu.cuda.reason = "--device cpu";
  auto choice = chooseVariant(p, gpu, options);
  if (!choice.ok())
    return Status::error(path + ": " + choice.error().message());
  session->choice = *choice;
  // Strict: a GPU this machine has and the plan cannot use on it, or a GPU variant passed over, is a fallback.
  auto strictError = [&](const std::string &why) {
    return Status::error(path + ": strict (--strict / TEC_STRICT): " + why);
  };
  if (std::string why = variantFallback(*choice, gpu, options); options.strict && !why.empty())
    return strictError(why);
  // A plan with collectives under several ranks (mpirun, srun): every rank must run the same backend, their
  // collectives meet in NCCL on the GPU and in MPI on the CPU.
  ProcessGroup *group = nullptr;
  if (launcherWorldSize() > 1 && usesCollectives(p.variants(session->choice.index))) {
    auto joined = ProcessGroup::get();
    if (!joined.ok())
      return Status::error(path + ": " + joined.error().message());
    group = *joined;
  }
  if (session->choice.backend == "cuda") {
    // A GPU that fails to start the backend or to prepare the plan falls back to the CPU, saying why.
    CudaBackendOptions cudaOptions;
    cudaOptions.quantizeStats = options.fp8Stats;
    cudaOptions.allowTf32 = options.allowTf32;
    const char *ncclAlone = std::getenv("TEC_NCCL"); // NCCL over one rank: how a single GPU tests that path
    cudaOptions.nccl = ncclAlone && std::string(ncclAlone) == "1";
    if (group && group->size() > 1) {
      cudaOptions.rank = group->rank();
      cudaOptions.ranks = group->size();
      cudaOptions.device = launcherLocalRank(); // one GPU per rank on each machine
      cudaOptions.broadcast = [group](void *data, size_t bytes) { return group->broadcast(data, bytes, 0); };
      cudaOptions.collectiveTimeout = [group] { return group->timeout(); };
      cudaOptions.collectiveFailed = [group] { group->fail(); };
    }
    auto cuda = createCudaBackend(cudaOptions);
    const auto &variant = p.variants(session->choice.index);
    auto data = session->dataFor(variant, options);
    if (!data.ok())
      return data.error();
    if (cuda.ok())
      session->releaseMappedData(**cuda, *data);
    Status failed = cuda.ok() ? (*cuda)->prepare(variant, *data) : cuda.error();
    if (failed.ok()) {
      session->backend = cuda.take();
    } else {
      if (options.device == "cuda")
        return Status::error(path + ": --device cuda: " + failed.message());
      if (options.strict)
        return strictError("the cuda backend failed: " + failed.message());
      gpu.backendMissing = "the cuda backend failed: " + failed.message();
      session->choice = *chooseVariant(p, gpu, options);
    }
  }
  if (group && group->size() > 1) { // a rank off the GPU takes every rank off it (MPI carries the collectives)
    float offGpu = session->backend ? 0.0f : 1.0f;
    if (Status s = group->allReduce(&offGpu, 1, CollectiveOp::Max); !s.ok())
      return Status::error(path + ": cannot agree on the backend with the other ranks: " + s.message());
    if (offGpu > 0 && session->backend) {
      const std::string why = "another rank cannot run the plan on its GPU, and every rank must run the same backend";
      if (options.device == "cuda" || options.strict)
        return Status::error(path + ": " + (options.strict ? "strict (--strict / TEC_STRICT): " : "--device cuda: ") +
                             why + " (its error says why)");
      session->backend.reset();
      gpu.backendMissing = why;
      session->choice = *chooseVariant(p, gpu, options);
    }
  }
  const auto &variant = p.variants(session->choice.index);
  if (!session->backend) {
    auto data = session->dataFor(variant, options);
    if (!data.ok())
      return data.error();
    session->backend = createCpuBackend(options.threads, options.fp8Stats, options.fusion);
    session->releaseMappedData(*session->backend, *data);
    if (Status s = session->backend->prepare(variant, *data); !s.ok())
      return Status::error(path + ": variant " + variant.target() + ": " + s.message());
  }
  session->strict = options.strict;
  if (Status s = session->refuseNotes(); !s.ok())
    return Status::error(path + ": " + s.message());
  auto describe = [&](const std::string &name, int buffer) {
    const auto &b = variant.buffers(buffer);
    if (b.host_f32()) // the caller's view: f32
      return TensorInfo{name, plan::F32, {b.shape().begin(), b.shape().end()}, b.bytes() / dtypeBytes(b.dtype()) * 4,
                        buffer};
    return TensorInfo{name, b.dtype(), {b.shape().begin(), b.shape().end()}, b.bytes(), buffer};
  };
  const auto &inputNames = variant.input_names_size() ? variant.input_names() : p.input_names();
  const auto &outputNames = variant.output_names_size() ? variant.output_names() : p.output_names();
  for (int i = 0; i < variant.inputs_size(); ++i) {
    session->inputInfo.push_back(describe(inputNames.Get(i), variant.inputs(i)));
    const auto &b = variant.buffers(variant.inputs(i));
    session->staging.emplace_back(b.host_f32() ? session->inputInfo.back().bytes / 4 : 0);
  }
  session->pending.assign(variant.inputs_size(), false);
  for (int i = 0; i < variant.outputs_size(); ++i)
    session->outputInfo.push_back(describe(outputNames.Get(i), variant.outputs(i)));
  return session;
}

void Session::releaseMappedData(Backend &backend, const char *data) const {
  // Only the file's own pages: a data section copied into memory (trained params) has no file behind it.
  if (data == file->data())
    backend.setDataRelease([file = file.get()](int64_t offset, int64_t bytes) { file->releaseData(offset, bytes); });
}

Result<const char *> Session::dataFor(const plan::Variant &variant, const SessionOptions &options) {
  if (!options.params)
    return file->data();
  auto params = options.params(file->plan(), variant);
  if (!params.ok())
    return params.error();
  const size_t bytes = (static_cast<size_t>(file->dataSize()) + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
  ownedData.reset(static_cast<char *>(std::aligned_alloc(kPlanAlignment, std::max<size_t>(bytes, kPlanAlignment))));
  if (!ownedData)
    return Status::error(file->path() + ": cannot allocate " + std::to_string(bytes) + " bytes for the params");
  std::memcpy(ownedData.get(), file->data(), file->dataSize());
  for (const auto &[name, values] : *params) {
    const plan::Buffer *param = nullptr;
    for (const auto &b : variant.buffers())
      if (b.role() == plan::PARAM && b.name() == name)
        param = &b;
    if (!param)
      return Status::error(file->path() + ": variant " + variant.target() + " has no param '" + name + "'");
    if (static_cast<int64_t>(values.size()) != param->bytes())
      return Status::error(file->path() + ": param '" + name + "' takes " + std::to_string(param->bytes()) +
                           " bytes, got " + std::to_string(values.size()));
    std::memcpy(ownedData.get() + param->offset(), values.data(), values.size());
  }
  return static_cast<const char *>(ownedData.get());
}

Status Session::setInput(size_t index, const void *data, int64_t bytes) {
  if (index >= inputInfo.size())
    return Status::error("no input #" + std::to_string(index));
  const auto &info = inputInfo[index];
  if (bytes != info.bytes)
    return Status::error("input '" + info.name + "' takes " + std::to_string(info.bytes) + " bytes, got " +
                         std::to_string(bytes));
  if (bytes) // an empty input may have no storage
    std::memcpy(inputData(index), data, bytes);
  return Status::success();
}

Status Session::setInputFromDevice(size_t index, const void *devicePointer) {
  if (index >= inputInfo.size())
    return Status::error("no input #" + std::to_string(index));
  if (Status s = backend->writeBufferFromDevice(inputInfo[index].buffer, devicePointer); !s.ok())
    return Status::error("input '" + inputInfo[index].name + "': " + s.message());
  pending[index] = false; // an f32 value staged earlier must not replace it
  return Status::success();
}

void *Session::inputData(size_t index) {
  if (staging[index].empty())
    return backend->hostData(inputInfo[index].buffer);
  pending[index] = true;
  return staging[index].data();
}

Status Session::run(std::vector<double> *stepMillis) {
  for (size_t i = 0; i < staging.size(); ++i)
    if (pending[i]) {
      const int buffer = inputInfo[i].buffer;
      kernels::cpu::cast(staging[i].data(), kernels::ElementType::F32, backend->hostData(buffer),
                         steps::elementType(variant().buffers(buffer).dtype()), static_cast<int64_t>(staging[i].size()));
      pending[i] = false;
    }
  if (Status s = backend->run(stepMillis); !s.ok())
    return s;
  return refuseNotes(); // a graph that could not be captured says so on its run
}

Status Session::refuseNotes() {
  if (!strict)
    return Status::success();
  const std::vector<std::string> lines = backend->notes();
  if (lines.size() <= notesSeen)
    return Status::success();
  std::string all;
  for (size_t i = notesSeen; i < lines.size(); ++i)
    all += (all.empty() ? "" : "; ") + lines[i];
  notesSeen = lines.size();
  return Status::error("strict (--strict / TEC_STRICT): tec fell back from its fast path: " + all);
}

} // namespace tec

namespace tec {

void fillRandom(void *data, const TensorInfo &info, std::mt19937_64 &rng) {
  int64_t count = info.bytes / dtypeBytes(info.dtype);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  switch (info.dtype) {
  case plan::F32:
    for (int64_t i = 0; i < count; ++i)
      static_cast<float *>(data)[i] = uniform(rng);
    return;
  case plan::BOOL:
    for (int64_t i = 0; i < count; ++i)
      static_cast<uint8_t *>(data)[i] = rng() & 1;
    return;
  default:
    std::memset(data, 0, info.bytes);
  }
}

} // namespace tec
