#include "runtime/Collectives.h"

#include "support/LibraryLocations.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace tec {

namespace {

std::string ownFolder() {
  std::string folder = kernels::folderOf(reinterpret_cast<const void *>(&ownFolder));
  return folder.empty() ? "." : folder;
}

/// The plugin's functions, or why they could not be loaded (once per process).
struct MpiPlugin {
  MpiInitFn init = nullptr;
  MpiAllReduceFn allReduce = nullptr;
  MpiBroadcastFn broadcast = nullptr;
  MpiShardFn shard = nullptr;
  MpiFinalizeFn finalize = nullptr;
  const char *(*version)() = nullptr;
  std::string path, reason;
};

const MpiPlugin &mpiPlugin() {
  static const MpiPlugin plugin = [] {
    MpiPlugin p;
    const std::vector<std::string> candidates =
        kernels::pluginCandidates("TEC_MPI_PLUGIN", kMpiPluginFile, ownFolder(), TEC_PLUGIN_BUILD_DIR);
    std::string errors;
    for (const std::string &path : candidates) {
      // RTLD_GLOBAL: Open MPI loads its own components with dlopen, and they look up libmpi's symbols.
      void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (!handle) {
        const char *e = dlerror();
        errors += (errors.empty() ? "" : "; ") + std::string(e ? e : path);
        continue;
      }
      p.init = reinterpret_cast<MpiInitFn>(dlsym(handle, "tecMpiInit"));
      p.allReduce = reinterpret_cast<MpiAllReduceFn>(dlsym(handle, "tecMpiAllReduce"));
      p.broadcast = reinterpret_cast<MpiBroadcastFn>(dlsym(handle, "tecMpiBroadcast"));
      p.shard = reinterpret_cast<MpiShardFn>(dlsym(handle, "tecMpiShard"));
      p.finalize = reinterpret_cast<MpiFinalizeFn>(dlsym(handle, "tecMpiFinalize"));
      p.version = reinterpret_cast<const char *(*)()>(dlsym(handle, "tecMpiVersion"));
      if (!p.init || !p.allReduce || !p.broadcast || !p.shard || !p.finalize || !p.version) {
        errors += (errors.empty() ? "" : "; ") + path + " lacks tec's MPI entry points";
        continue;
      }
      p.path = path;
      return p;
    }
    p.reason = TEC_MPI_PLUGIN_BUILT ? "cannot load tec's MPI plugin (" + errors + ")"
                                    : "this tec was built without MPI (install libopenmpi-dev and rebuild)";
    return p;
  }();
  return plugin;
}

} // namespace

Result<ProcessGroup *> ProcessGroup::get() {
  static std::mutex mutex;
  static ProcessGroup *group = nullptr;
  static Status failure = Status::success();
  std::lock_guard<std::mutex> lock(mutex);
  if (group)
    return group;
  if (!failure.ok())
    return failure;
  auto *made = new ProcessGroup;
  const int launched = launcherWorldSize();
  if (launched > 1) {
    const MpiPlugin &mpi = mpiPlugin();
    if (!mpi.init) {
      failure = Status::error("the launcher started " + std::to_string(launched) + " ranks, but " + mpi.reason);
      delete made;
      return failure;
    }
    char error[512] = {0};
    if (mpi.init(&made->rank_, &made->size_, error, sizeof(error)) != 0) {
      failure = Status::error(std::string("cannot start MPI: ") + error);
      delete made;
      return failure;
    }
    std::atexit([] { mpiPlugin().finalize(); });
    made->allReduce_ = mpi.allReduce;
    made->broadcast_ = mpi.broadcast;
    made->shard_ = mpi.shard;
    made->description_ = "MPI: rank " + std::to_string(made->rank_) + " of " + std::to_string(made->size_) + " (" +
                         mpi.version() + ")";
  }
  group = made;
  return group;
}

Status ProcessGroup::allReduce(float *data, int64_t count, CollectiveOp op) {
  if (size_ == 1 || count == 0)
    return Status::success();
  char error[512] = {0};
  if (allReduce_(data, count, static_cast<int>(op), timeout_, error, sizeof(error)) != 0)
    return Status::error(std::string("rank ") + std::to_string(rank_) + ": " + error);
  return Status::success();
}

Status ProcessGroup::broadcast(void *data, size_t bytes, int root) {
  if (size_ == 1 || bytes == 0)
    return Status::success();
  char error[512] = {0};
  if (broadcast_(data, static_cast<int64_t>(bytes), root, timeout_, error, sizeof(error)) != 0)
    return Status::error(std::string("rank ") + std::to_string(rank_) + ": " + error);
  return Status::success();
}

Status ProcessGroup::allGather(const float *mine, float *all, int64_t count) {
  if (size_ == 1) {
    std::copy(mine, mine + count, all);
    return Status::success();
  }
  char error[512] = {0};
  if (shard_(mine, all, count, 1, timeout_, error, sizeof(error)) != 0)
    return Status::error(std::string("rank ") + std::to_string(rank_) + ": " + error);
  return Status::success();
}

Status ProcessGroup::reduceScatter(const float *all, float *mine, int64_t count) {
  if (size_ == 1) {
    std::copy(all, all + count, mine);
    return Status::success();
  }
  char error[512] = {0};
  if (shard_(all, mine, count, 0, timeout_, error, sizeof(error)) != 0)
    return Status::error(std::string("rank ") + std::to_string(rank_) + ": " + error);
  return Status::success();
}

std::string mpiPluginDescription() {
  const MpiPlugin &mpi = mpiPlugin();
  return mpi.init ? std::string(mpi.version()) + " (" + mpi.path + ")" : mpi.reason;
}

} // namespace tec
