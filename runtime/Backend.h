// The interface every backend (CPU, CUDA) implements: bind a variant's buffers, then run its steps.
#ifndef TEC_RUNTIME_BACKEND_H
#define TEC_RUNTIME_BACKEND_H

#include "support/Status.h"
#include "runtime/StepContracts.h"
#include "runtime/plan.pb.h"

#include <memory>
#include <string>
#include <functional>
#include <vector>

namespace tec {

/// FP8 health of one quantized tensor in the last run: how many values saturated or flushed to zero; for a
/// block-scaled one also its blocks and the range of their dequantization factors (finite ones).
struct QuantizeStats {
  std::string tensor; // the FP8 state's name without "/scale" ("fc1/input"), or the FP8 copy's buffer
  int64_t values = 0, saturated = 0, flushed = 0;
  int64_t blocks = 0;
  float smallestScaleInv = 0, largestScaleInv = 0;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;
  /// Whether this backend runs `step` of `variant` (as ggml's supports_op): the kernel's contract (operand
  /// counts, element types, shapes, attributes), then this backend's own limits. prepare() asks it of every
  /// step before laying anything out, so a plan a backend cannot run fails first, naming the step (and a
  /// session falls back to the CPU, saying why), and the step compilers trust their operands.
  virtual Status supports(const plan::Variant &variant, const plan::Step &step) const {
    return checkStepContract(variant, step);
  }
  /// supports() of every step: the first refusal.
  Status supportsEveryStep(const plan::Variant &variant) const {
    for (const plan::Step &step : variant.steps())
      if (Status s = supports(variant, step); !s.ok())
        return s;
    return Status::success();
  }
  /// Allocates the arena, binds every buffer (params and constants point into `data`, the plan's
  /// mapped data section) and prepares each step, so that run() allocates and decides nothing. Once per
  /// backend: a second call is an error (another plan needs another backend).
  virtual Status prepare(const plan::Variant &variant, const char *data) = 0;
  /// Where `data` is a mapped file: called by prepare with each part of it (offset, bytes) it has copied
  /// (state's initial values, a weight packed or laid out anew, an upload) and run() never reads, as soon as
  /// it has, so that the file's pages go while the copies are made and a plan costs its memory once.
  void setDataRelease(std::function<void(int64_t offset, int64_t bytes)> release) { releaseData_ = std::move(release); }
  /// Host-visible storage of an input (filled before run) or an output (read after run). A GPU
  /// backend stages these in pinned host memory and moves them as part of run(): an input only when its
  /// storage was asked for since its last upload, so a caller changes an input by asking again (inputs
  /// that stay the same stay on the device).
  virtual void *hostData(int buffer) = 0;
  /// Copies any buffer (state: checkpoints, calibration, FP8 health) to or from host memory, outside run().
  virtual Status readBuffer(int buffer, void *destination) = 0;
  virtual Status writeBuffer(int buffer, const void *source) = 0;
  /// Device memory (the CUDA backend; the CPU backend has none): a buffer's address on the device, valid
  /// until the next prepare, and an input filled from device memory (it is then not uploaded from its host
  /// staging at the next run).
  virtual void *deviceData(int) { return nullptr; }
  virtual Status writeBufferFromDevice(int, const void *) {
    return Status::error(std::string("the ") + name() + " backend runs in host memory: give the input as a host array");
  }
  /// Runs every step; with `stepMillis` (one entry per plan step), adds each step's time to it.
  virtual Status run(std::vector<double> *stepMillis = nullptr) = 0;
  /// With statistics asked for at creation: one entry per quantize step, updated by every run.
  virtual const std::vector<QuantizeStats> &quantizeStats() const = 0;
  /// What ran instead of a faster path, and why, one line each (a fused epilogue cuBLASLt lacks, a CUDA
  /// graph that could not be captured): for the user to see, and for the GPU check to flag.
  virtual std::vector<std::string> notes() const { return {}; }
  /// The step whose launch computes plan step `step` after prepare: itself, or the one it was fused into
  /// (a GEMM's epilogue, an elementwise chain); a run's time for it is counted there.
  virtual int computedBy(int step) const { return step; }
  /// How computedBy(step) took plan step `step` in after prepare ("its epilogue", "an elementwise chain", ...),
  /// for people (`tec inspect --schedule`); "" for a step that is its own launch.
  virtual std::string foldedAs(int) const { return ""; }
  /// Which kernel runs plan step `step`, where the backend chose among several by measurement (a
  /// convolution's oneDNN implementation or tec's loop, a GEMM's library or its packed weight), for people
  /// (`tec inspect --schedule`, profiles); "" where there was no choice.
  virtual std::string chosenKernel(int) const { return ""; }

protected:
  void releaseData(int64_t offset, int64_t bytes) const {
    if (releaseData_)
      releaseData_(offset, bytes);
  }

private:
  std::function<void(int64_t, int64_t)> releaseData_;
};

/// `threads` = 0 keeps OpenMP's and BLAS's defaults.
/// `quantizeStats`: count saturated and flushed values in every quantize (FP8 health; costs a little).
/// `fusion`: the load-time fusions (SessionOptions::fusion); off, every step runs alone.
std::unique_ptr<Backend> createCpuBackend(int threads, bool quantizeStats = false, bool fusion = true);

} // namespace tec

#endif
