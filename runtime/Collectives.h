// The group of processes one training runs on (data parallelism, DESIGN.md): this process alone, or the
// ranks that mpirun / srun started, whose collectives MPI carries. MPI lives in a plugin, libtec_mpi.so
// (runtime/mpi/MpiPlugin.cpp), loaded only when the launcher's environment says there are other ranks:
// tec itself links no MPI library, and a single process never initializes one.
#ifndef TEC_RUNTIME_COLLECTIVES_H
#define TEC_RUNTIME_COLLECTIVES_H

#include "support/Status.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <string>

namespace tec {

enum class CollectiveOp { Sum, Max, Mean };
/// An all_reduce step's `reduction` attribute ("sum", "max", else the mean).
inline CollectiveOp collectiveOp(const std::string &reduction) {
  return reduction == "sum" ? CollectiveOp::Sum : reduction == "max" ? CollectiveOp::Max : CollectiveOp::Mean;
}
/// What a collective does (values of the plugin's C interface): all_reduce `count` floats of `receive` in
/// place; broadcast `count` bytes of root's `receive`; all_gather every rank's `count` floats of `send` into
/// `receive` in rank order. (ZeRO-1's reduce-scatter is an all-reduce of which each rank keeps its part:
/// Open MPI's MPI_Reduce_scatter_block was 6x slower than its MPI_Allreduce of the same data.)
enum class CollectiveKind { AllReduce = 0, Broadcast = 1, AllGather = 2 };

/// The plugin's C interface (looked up with dlsym by these names), kept to plain types so that the plugin
/// and tec agree without sharing C++ classes. Init and wait return 0 on success, else an error code with
/// its text in `error`; start returns the collective's ticket for wait.
extern "C" {
using MpiInitFn = int (*)(int *rank, int *size, char *error, int errorBytes);
using MpiStartFn = int64_t (*)(int kind, const void *send, void *receive, int64_t count, int op, int root);
using MpiWaitFn = int (*)(int64_t ticket, double timeoutSeconds, char *error, int errorBytes);
using MpiProgressThreadFn = int (*)();
using MpiFinalizeFn = void (*)();
using MpiFailFn = void (*)();
}
inline constexpr const char *kMpiPluginFile = "libtec_mpi.so";

class ProcessGroup {
public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Starts a collective (CollectiveKind says what it does with its arguments); every rank starts the same
  /// ones in the same order. It runs while the caller goes on (MPI's progress on a communication thread)
  /// until wait(), which returns once it is done, or with an error after the timeout. On one process: done
  /// at once (an all_gather copies `send` into `receive`).
  Result<int64_t> start(CollectiveKind kind, const void *send, void *receive, int64_t count,
                        CollectiveOp op = CollectiveOp::Sum, int root = 0);
  Status wait(int64_t ticket);
  /// Blocking forms: in place over every rank's `data` (the same count on each), the elementwise sum, max
  /// or mean; `bytes` of root's `data` to every rank; every rank's `count` floats, in rank order, into `all`.
  Status allReduce(float *data, int64_t count, CollectiveOp op);
  Status broadcast(void *data, size_t bytes, int root);
  Status allGather(const float *mine, float *all, int64_t count);
  /// Runs the collectives on a communication thread from now on, so that they progress while the caller
  /// computes, where there is a core to spare for it (`spareCore`) or TEC_MPI_PROGRESS=thread says so
  /// (TEC_MPI_PROGRESS=inline: never); else a collective runs inside its wait(). Says which in description().
  void chooseProgress(bool spareCore);
  /// How long a collective waits for every rank before it fails (0: forever); 300 s unless set.
  void setTimeout(double seconds) { timeout_ = seconds; }
  double timeout() const { return timeout_; }
  /// A collective failed outside MPI (NCCL's on the GPU): the ranks no longer agree on what comes next, so
  /// the process ends the whole group (MPI_Abort) rather than wait for the others when it exits.
  void fail();
  /// How the group was made: "one process", or "MPI: rank r of n (plugin path)".
  const std::string &description() const { return description_; }

  /// The process's group, made on first use: with more than one rank in the launcher's environment
  /// (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE, SLURM_NTASKS under srun), MPI's world through the plugin,
  /// else this process alone. An error where the environment names other ranks but MPI cannot be loaded
  /// or started: training alone there would silently train a different model on each rank.
  static Result<ProcessGroup *> get();

private:
  int rank_ = 0, size_ = 1;
  double timeout_ = 300;
  std::string description_ = "one process";
  MpiStartFn start_ = nullptr;
  MpiWaitFn wait_ = nullptr;
  MpiProgressThreadFn progressThread_ = nullptr;
  MpiFailFn fail_ = nullptr;
  bool progressChosen_ = false;
};

/// The ranks the launcher's environment names (1 where none): what ProcessGroup::get will join. Inline, so
/// that the CUDA plugin, which links no runtime, can ask too.
inline int launcherWorldSize() {
  auto positive = [](const char *name) {
    const char *v = std::getenv(name);
    return v && *v ? std::max(0, std::atoi(v)) : 0;
  };
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (int n = positive(name))
      return n;
  // srun sets SLURM_NTASKS for every task it starts (with SLURM_STEP_ID); a batch script alone has no step.
  if (std::getenv("SLURM_STEP_ID"))
    if (int n = positive("SLURM_NTASKS"))
      return n;
  return 1;
}

/// The ranks on this machine, as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, srun's
/// SLURM_NTASKS_PER_NODE); 1 where it does not.
inline int launcherLocalSize() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char *v = std::getenv(name); v && *v)
      if (int n = std::atoi(v); n > 0)
        return n;
  return 1;
}

/// This process's index among the ranks on its machine, as the launcher says (OMPI_COMM_WORLD_LOCAL_RANK,
/// MPI_LOCALRANKID, SLURM_LOCALID); 0 where it does not. Each rank takes the GPU of that index.
inline int launcherLocalRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *v = std::getenv(name); v && *v)
      return std::max(0, std::atoi(v));
  return 0;
}

/// For `tec doctor`: where the MPI plugin loads from and which MPI it links, or why it cannot be loaded.
std::string mpiPluginDescription();

} // namespace tec

#endif
