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

/// The plugin's C interface (looked up with dlsym by these names), kept to plain types so that the plugin
/// and tec agree without sharing C++ classes. Each returns 0 on success, else an MPI error code, with its
/// text in `error` (when given).
extern "C" {
using MpiInitFn = int (*)(int *rank, int *size, char *error, int errorBytes);
using MpiAllReduceFn = int (*)(float *data, int64_t count, int op, double timeoutSeconds, char *error, int errorBytes);
using MpiBroadcastFn = int (*)(void *data, int64_t bytes, int root, double timeoutSeconds, char *error, int errorBytes);
/// gather 0: every rank's `count` floats of `send`, in rank order, into `receive` (MPI_Allgather);
/// gather 1: `receive`'s `count` floats for this rank, the sum over the ranks of their `send`'s part for it
/// (MPI_Reduce_scatter_block; `send` holds `count` per rank).
using MpiShardFn = int (*)(const float *send, float *receive, int64_t count, int gather, double timeoutSeconds,
                           char *error, int errorBytes);
using MpiFinalizeFn = void (*)();
}
inline constexpr const char *kMpiPluginFile = "libtec_mpi.so";

class ProcessGroup {
public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// In place over every rank's `data` (the same count on each): the elementwise sum, max or mean.
  /// On one process a no-op.
  Status allReduce(float *data, int64_t count, CollectiveOp op);
  /// `bytes` of root's `data` to every rank.
  Status broadcast(void *data, size_t bytes, int root);
  /// Every rank's `count` floats, in rank order, into `all` (count x size floats) on every rank.
  Status allGather(const float *mine, float *all, int64_t count);
  /// The sum over the ranks of their `all` (count x size floats), of which this rank receives its `count`
  /// (rank r the r-th).
  Status reduceScatter(const float *all, float *mine, int64_t count);
  /// How long a collective waits for every rank before it fails (0: forever); 300 s unless set.
  void setTimeout(double seconds) { timeout_ = seconds; }
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
  MpiAllReduceFn allReduce_ = nullptr;
  MpiBroadcastFn broadcast_ = nullptr;
  MpiShardFn shard_ = nullptr;
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

/// For `tec doctor`: where the MPI plugin loads from and which MPI it links, or why it cannot be loaded.
std::string mpiPluginDescription();

} // namespace tec

#endif
