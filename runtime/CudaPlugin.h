// The CUDA backend lives in a plugin, libtec_cuda.so, loaded at run time: tec itself links no CUDA
// library, so it starts (and falls back to the CPU) on machines without a driver or a GPU.
#ifndef TEC_RUNTIME_CUDAPLUGIN_H
#define TEC_RUNTIME_CUDAPLUGIN_H

#include "runtime/Backend.h"

#include <functional>
#include <memory>
#include <string>

namespace tec {

struct CudaBackendOptions {
  int device = 0;
  /// Count saturated and flushed values of every FP8 quantize.
  bool quantizeStats = false;
  /// FP32 GEMMs may use TF32 tensor cores.
  bool allowTf32 = false;
  /// Capture the whole step as a CUDA Graph on the first run and replay it (off: launch step by step).
  bool useGraphs = true;
  /// Data parallelism (DESIGN.md): this process is `rank` of `ranks`, on GPU `device` modulo the GPUs it
  /// sees. NCCL carries the collectives where `nccl` (the Session sets it under several ranks, or with
  /// TEC_NCCL=1 on one); else they are copies.
  int rank = 0, ranks = 1;
  bool nccl = false;
  /// Sends rank 0's `bytes` at `data` to every rank, in place (NCCL's unique id, over MPI).
  std::function<Status(void *data, size_t bytes)> broadcast;
  /// How long a step waits for its collectives before the communicator is aborted (0: forever), asked at
  /// each step (the caller may change it).
  std::function<double()> collectiveTimeout;
  /// Told that a collective failed, so that the process group ends every rank.
  std::function<void()> collectiveFailed;
};

/// The plugin's one entry point (C linkage, looked up with dlsym). Null with `*error` set on failure.
using CreateCudaBackendFn = Backend *(*)(const CudaBackendOptions *options, std::string *error);
inline constexpr const char *kCudaPluginEntry = "tecCreateCudaBackend";
inline constexpr const char *kCudaPluginFile = "libtec_cuda.so";

/// Where the plugin was loaded from, or why it could not be (once per process).
struct CudaPluginStatus {
  bool loaded = false;
  std::string path, reason;
};
const CudaPluginStatus &loadCudaPlugin();

/// A CUDA backend from the plugin, or an error saying why there is none.
Result<std::unique_ptr<Backend>> createCudaBackend(const CudaBackendOptions &options);

/// `tec --emit=cuda`: the CUDA backend's launch sequence for `variant` as a standalone .cu host program
/// over tec's kernels library (needs the plugin, not a GPU). `planName` is what the program's usage names.
using CudaProgramSourceFn = bool (*)(const plan::Variant *variant, const std::string *planName, std::string *source,
                                     std::string *error);
inline constexpr const char *kCudaProgramSourceEntry = "tecCudaProgramSource";
Result<std::string> cudaProgramSource(const plan::Variant &variant, const std::string &planName);

} // namespace tec

#endif
