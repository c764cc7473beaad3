// The CPU backend's prepare (the arena, params read in place, state, every step's closure) and its f32
// operand views. CpuBackend.h says where the rest is.
#include "runtime/CpuBackend.h"

#include "runtime/Collectives.h"

#include <thread>

namespace tec::cpubackend {

float *CpuBackend::floatIn(int i) {
  if (dtype(i) == plan::F32)
    return ptr<float>(i);
  auto &shadow = scratch.emplace_back(count(i));
  void *src = pointers[i];
  auto from = elementType(dtype(i));
  int64_t n = count(i);
  float *dst = shadow.data();
  pending.pre.push_back([=] { k::cast(src, from, dst, k::ElementType::F32, n); });
  return dst;
}

float *CpuBackend::floatOut(int i) {
  if (dtype(i) == plan::F32)
    return ptr<float>(i);
  auto &shadow = scratch.emplace_back(count(i));
  void *dst = pointers[i];
  auto to = elementType(dtype(i));
  int64_t n = count(i);
  float *src = shadow.data();
  pending.post.push_back([=] { k::cast(src, k::ElementType::F32, dst, to, n); });
  return src;
}

/// GEMMs, convolutions and attention need a BLAS (not the block-scaled FP8 GEMM: tec's own, the GPU's twin);
/// GEMMs but the FP8 ones (whose operands are FP8 codes) floats.
Status CpuBackend::supports(const plan::Variant &v, const plan::Step &s) const {
  if (Status st = Backend::supports(v, s); !st.ok())
    return st;
  const std::string &k = s.kernel();
  const bool fp8Gemm = k == "fp8_gemm";
  const bool gemm = k == "matmul" || k == "linear" || k == "gemm" || fp8Gemm;
  const bool usesBlas = k == "conv" || k == "conv_input_grad" || k == "conv_weight_grad" || k.rfind("attention", 0) == 0;
  if ((gemm || usesBlas) && !k::blas().loaded)
    return Status::error("step '" + k + "' (from " + s.source() + ") needs BLAS: " + k::blas().library);
  for (int i : s.inputs())
    if (gemm && !fp8Gemm && !isFloat(v.buffers(i).dtype()))
      return Status::error("step '" + k + "' (from " + s.source() + ") needs float operands");
  return Status::success();
}

Status CpuBackend::prepare(const plan::Variant &v, const char *data) {
  if (variant) // the steps made for the first plan point into its arena: a second plan needs a new backend
    return Status::error("the cpu backend is already prepared for a plan: create another backend for another plan");
  if (Status s = supportsEveryStep(v); !s.ok())
    return s;
  variant = &v;
  mappedData = data;
  k::setThreads(threads);
  void *memory = nullptr;
  size_t arenaBytes = (v.arena_bytes() + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
  if (arenaBytes && posix_memalign(&memory, kPlanAlignment, arenaBytes) != 0)
    return Status::error("cannot allocate the " + std::to_string(arenaBytes) + "-byte arena");
  arena.reset(static_cast<char *>(memory));
  pointers.assign(v.buffers_size(), nullptr);
  for (int i = 0; i < v.buffers_size(); ++i) {
    const auto &root = v.buffers(i).alias_of() >= 0 ? v.buffers(v.buffers(i).alias_of()) : v.buffers(i);
    bool inData = root.role() == plan::PARAM || root.role() == plan::CONSTANT;
    // Params and constants are read in place from the mapped file: no copy.
    pointers[i] = const_cast<char *>(inData ? data + root.offset() : arena.get() + root.offset());
  }
  // State starts from its initial value in the plan and then carries over from run to run.
  for (int i = 0; i < v.buffers_size(); ++i) {
    const auto &b = v.buffers(i);
    if (b.role() != plan::STATE || b.alias_of() >= 0 || !b.bytes())
      continue;
    if (b.has_init_fill())
      std::fill_n(static_cast<float *>(pointers[i]), b.bytes() / sizeof(float), b.init_fill());
    else
      std::memcpy(pointers[i], data + b.init_offset(), b.bytes()), releaseData(b.init_offset(), b.bytes());
  }
  graph.emplace(v);
  readsOfCopy.assign(v.buffers_size(), 0);
  if (usesCollectives(v))
    if (auto group = ProcessGroup::get(); group.ok()) {
      // A communication thread overlaps only with a core to itself: this rank's share of the machine (all of
      // its CPUs where the launcher bound it, else an even share) beyond its computing threads.
      const int cpus = k::availableCpus(), all = static_cast<int>(std::thread::hardware_concurrency());
      const int localRanks = std::max(1, launcherLocalSize());
      const int share = cpus < all ? cpus : all / localRanks;
      (*group)->chooseProgress(share > k::poolThreads());
    }
  computingStep.resize(v.steps_size());
  std::iota(computingStep.begin(), computingStep.end(), 0);
  foldedHow.assign(v.steps_size(), "");
  chosen.assign(v.steps_size(), "");
  for (currentStep = 0; currentStep < v.steps_size(); ++currentStep) {
    const plan::Step &step = v.steps(currentStep);
    if (folded(currentStep)) // computed by an earlier step's closure, which ended its collectives (fold)
      continue;
    const int last = chainEnd(currentStep);
    emitCollectiveEndsThrough(std::max(currentStep, last));
    if (last > currentStep) {
      if (Status s = elementwiseChain(currentStep, last); !s.ok())
        return s;
      continue;
    }
    if (Status s = (this->*stepCompilers<CpuBackend>().at(step.kernel()))(step); !s.ok())
      return s;
  }
  emitCollectiveEndsThrough(v.steps_size()); // what only the caller reads: ended before run() returns
  return Status::success();
}

} // namespace tec::cpubackend

namespace tec {

std::unique_ptr<Backend> createCpuBackend(int threads, bool quantizeStats, bool fusion) {
  return std::make_unique<cpubackend::CpuBackend>(threads, quantizeStats, fusion);
}

} // namespace tec
