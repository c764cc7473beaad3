// tec::Session: open a plan, pick the variant and backend this machine runs best, bind inputs, run,
// read outputs. The runtime links neither LLVM nor MLIR: a plan runs without the compiler.
#ifndef TEC_RUNTIME_SESSION_H
#define TEC_RUNTIME_SESSION_H

#include "runtime/Backend.h"
#include "runtime/CudaPlugin.h"
#include "runtime/Device.h"
#include "runtime/PlanFile.h"

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tec {

struct TensorInfo {
  std::string name;
  plan::DType dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  int buffer = -1;
};

/// Values that replace a variant's params (trained weights): by param buffer name, each exactly the buffer's
/// bytes in its dtype and layout. Asked with the variant the session chose, before the backend prepares it
/// (which lays constant weights out once); a param it does not name keeps the plan's value.
using ParamSource =
    std::function<Result<std::map<std::string, std::string>>(const plan::Plan &, const plan::Variant &)>;

struct SessionOptions {
  /// A variant's target ("cpu", "sm_90", ...); empty picks the best one this machine runs.
  std::string variant;
  /// "auto", "cpu" or "cuda" ("cuda" makes a missing GPU an error instead of a fallback).
  std::string device = "auto";
  /// CPU threads; 0 keeps the OpenMP/BLAS defaults.
  int threads = 0;
  /// "inference" (the model's forward) or "train" (one training step).
  std::string kind = "inference";
  /// Count saturated and flushed values of every FP8 quantize (`--fp8-report`).
  bool fp8Stats = false;
  /// FP32 GEMMs on the GPU may use TF32 tensor cores (`--tf32`); off, they stay full FP32.
  bool allowTf32 = false;
  /// Where the params come from when not from the plan (a checkpoint, a trainer's current weights).
  ParamSource params;
  /// Any fallback is an error naming the step and why (`--strict`; TEC_STRICT=1 sets it too): a usable GPU
  /// left for the CPU, a GPU variant skipped, and every backend note (cuDNN declined, no FP8 GEMM, an
  /// unfused epilogue, a graph not captured). A benchmark run strict measures tec's fast path or nothing.
  bool strict = false;
  /// The backend's load-time fusions (elementwise chains, GEMM and convolution epilogues, in-place views):
  /// off (`--no-fusion`), every step runs alone, with the same bits, to compare or to profile each step.
  bool fusion = true;
};

/// The most CPU threads a session takes.
inline constexpr int kMaxThreads = 4096;

/// `device` as the session reads it: "auto", "cpu" or "cuda" ("cuda:0", PyTorch's name for the first GPU, is
/// "cuda"); anything else is an error naming the allowed values.
Result<std::string> normalizeDevice(const std::string &device);

/// Which variant of `plan` to run here, on which backend ("cpu" or "cuda"), and why; an error when
/// none can run.
struct VariantChoice {
  int index = -1;
  std::string backend, reason;
};

/// What the GPU side offers: the device probe, the CUDA backend (empty `backendMissing` when its plugin
/// loaded) and FP8 GEMMs (empty `fp8Missing` when this GPU and cuBLASLt run them).
struct GpuOffer {
  CudaProbe cuda;
  std::string backendMissing, fp8Missing;
  bool runsCuda() const { return cuda.usable && backendMissing.empty(); }
};
/// This machine's offer: probes the driver, the plugin and the CUDA libraries.
GpuOffer probeGpuOffer();

/// The best variant for this machine: the GPU variant with the highest sm_XY the device covers (FP8
/// variants only where FP8 GEMMs run), else the cpu variant, on the GPU where there is one.
Result<VariantChoice> chooseVariant(const plan::Plan &plan, const GpuOffer &gpu, const SessionOptions &options);

/// Whether `choice` falls back from the fast path this machine has (what --strict refuses): a usable GPU left
/// for the CPU backend, a GPU variant skipped (its FP8 not runnable here), or no variant for this GPU. The
/// reason, or "" when it is the fast path (the CPU is no fallback on a machine without a GPU, or when asked).
std::string variantFallback(const VariantChoice &choice, const GpuOffer &gpu, const SessionOptions &options);

/// Seeded test data for an input: uniform [-1, 1) floats, random bools, zeros for integers (often
/// indices, for which zero is always valid) and narrow floats.
void fillRandom(void *data, const TensorInfo &info, std::mt19937_64 &rng);

class Session {
public:
  static Result<std::unique_ptr<Session>> open(const std::string &path, const SessionOptions &options = {});

  const std::vector<TensorInfo> &inputs() const { return inputInfo; }
  const std::vector<TensorInfo> &outputs() const { return outputInfo; }
  /// Copies `bytes` (which must equal the input's size) into input `index`.
  Status setInput(size_t index, const void *data, int64_t bytes);
  /// Where input `index` lives, to fill in place before the next run (ask again to change it later: a
  /// GPU backend uploads the inputs asked for since the last run). An input the plan holds in 16 bits
  /// is filled in f32 here and rounded before the run.
  void *inputData(size_t index);
  /// On the CUDA backend: copies input `index` from device memory (device to device; the input's own
  /// dtype and size, no f32 staging), and where output `index` lies on the device after a run (valid until
  /// the next run). On the CPU backend the first is an error and the second null.
  Status setInputFromDevice(size_t index, const void *devicePointer);
  const void *outputDevicePointer(size_t index) { return backend->deviceData(outputInfo[index].buffer); }
  Status run(std::vector<double> *stepMillis = nullptr);
  const std::vector<QuantizeStats> &quantizeStats() const { return backend->quantizeStats(); }
  /// What the backend ran instead of a faster path, and why (Backend::notes).
  std::vector<std::string> notes() const { return backend->notes(); }
  /// The step whose launch computes `step` (Backend::computedBy).
  int computedBy(int step) const { return backend->computedBy(step); }
  /// How computedBy(step) took `step` in (Backend::foldedAs); "" where it is its own launch.
  std::string foldedAs(int step) const { return backend->foldedAs(step); }
  /// The kernel the backend chose for `step` (Backend::chosenKernel); "" where there was no choice.
  std::string chosenKernel(int step) const { return backend->chosenKernel(step); }
  const void *outputData(size_t index) { return backend->hostData(outputInfo[index].buffer); }
  /// Copies buffer `index` of the running variant out or in (state: to save it, or to restore it).
  Status readBuffer(int index, void *destination) { return backend->readBuffer(index, destination); }
  Status writeBuffer(int index, const void *source) { return backend->writeBuffer(index, source); }
  /// A buffer's bytes, copied out (small state such as an FP8 scale).
  template <typename T> std::vector<T> bufferValues(int index) {
    std::vector<T> values(variant().buffers(index).bytes() / sizeof(T));
    if (!readBuffer(index, values.data()).ok())
      values.clear();
    return values;
  }

  const plan::Plan &plan() const { return file->plan(); }
  const plan::Variant &variant() const { return file->plan().variants(choice.index); }
  const std::string &backendName() const { return choice.backend; }
  /// One line: which variant and backend run, and why.
  const std::string &selectionReason() const { return choice.reason; }

  /// Where the params came from: "plan" (as compiled), or what the ParamSource's caller says (setWeightsSource).
  const std::string &weightsSource() const { return weights; }
  void setWeightsSource(std::string source) { weights = std::move(source); }

private:
  /// The data section the backend prepares `variant` from: the plan's, or a copy with options.params's
  /// values in place of the plan's.
  Result<const char *> dataFor(const plan::Variant &variant, const SessionOptions &options);
  /// Strict: an error listing the backend notes not yet refused.
  Status refuseNotes();

  std::unique_ptr<PlanFile> file;
  /// Lets `backend` release the pages of `data` it copies, where `data` is the mapped file's.
  void releaseMappedData(Backend &backend, const char *data) const;
  /// The copy dataFor made (64-byte aligned, as the mapped section); outlives the backend, which reads it.
  std::unique_ptr<char, decltype(&std::free)> ownedData{nullptr, &std::free};
  std::string weights = "plan";
  std::unique_ptr<Backend> backend;
  VariantChoice choice;
  std::vector<TensorInfo> inputInfo, outputInfo;
  /// Per input: its f32 staging where the plan holds it in 16 bits (plan::Buffer.host_f32), else empty;
  /// `pending` marks the ones written since the last run.
  std::vector<std::vector<float>> staging;
  std::vector<bool> pending;
  bool strict = false;
  size_t notesSeen = 0; // strict: the backend notes already refused (none: a note ends the session)
};

} // namespace tec

#endif
