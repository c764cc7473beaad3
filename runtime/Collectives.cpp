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
  MpiStartFn start = nullptr;
  MpiWaitFn wait = nullptr;
  MpiProgressThreadFn progressThread = nullptr;
  MpiFinalizeFn finalize = nullptr;
  MpiFailFn fail = nullptr;
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
      p.start = reinterpret_cast<MpiStartFn>(dlsym(handle, "tecMpiStart"));
      p.wait = reinterpret_cast<MpiWaitFn>(dlsym(handle, "tecMpiWait"));
      p.progressThread = reinterpret_cast<MpiProgressThreadFn>(dlsym(handle, "tecMpiProgressThread"));
      p.finalize = reinterpret_cast<MpiFinalizeFn>(dlsym(handle, "tecMpiFinalize"));
      p.version = reinterpret_cast<const char *(*)()>(dlsym(handle, "tecMpiVersion"));
      p.fail = reinterpret_cast<MpiFailFn>(dlsym(handle, "tecMpiFail"));
      if (!p.init || !p.start || !p.wait || !p.progressThread || !p.finalize || !p.version || !p.fail) {
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
    made->start_ = mpi.start;
    made->wait_ = mpi.wait;
    made->progressThread_ = mpi.progressThread;
    made->fail_ = mpi.fail;
    made->description_ = "MPI: rank " + std::to_string(made->rank_) + " of " + std::to_string(made->size_) + " (" +
                         mpi.version() + ")";
  }
  group = made;
  return group;
}

Result<int64_t> ProcessGroup::start(CollectiveKind kind, const void *send, void *receive, int64_t count,
                                    CollectiveOp op, int root) {
  if (size_ == 1) {
    if (kind == CollectiveKind::AllGather)
      std::copy_n(static_cast<const float *>(send), count, static_cast<float *>(receive));
    return int64_t(-1);
  }
  return start_(static_cast<int>(kind), send, receive, count, static_cast<int>(op), root);
}

Status ProcessGroup::wait(int64_t ticket) {
  if (size_ == 1 || ticket < 0)
    return Status::success();
  char error[512] = {0};
  if (wait_(ticket, timeout_, error, sizeof(error)) != 0)
    return Status::error(std::string("rank ") + std::to_string(rank_) + ": " + error);
  return Status::success();
}

void ProcessGroup::fail() {
  if (fail_)
    fail_();
}

void ProcessGroup::chooseProgress(bool spareCore) {
  if (size_ == 1 || progressChosen_)
    return;
  progressChosen_ = true;
  const char *forced = std::getenv("TEC_MPI_PROGRESS");
  const std::string force = forced ? forced : "";
  const bool wanted = force == "thread" || (force != "inline" && spareCore);
  const bool threaded = wanted && progressThread_() == 1;
  description_ += threaded ? "; collectives overlap on a communication thread"
                  : wanted ? "; collectives run where waited for (MPI without MPI_THREAD_MULTIPLE)"
                  : force == "inline" ? "; collectives run where waited for (TEC_MPI_PROGRESS=inline)"
                                      : "; collectives run where waited for (no core to spare for a communication thread)";
}

namespace {

Status startAndWait(ProcessGroup &group, CollectiveKind kind, const void *send, void *receive, int64_t count,
                    CollectiveOp op = CollectiveOp::Sum, int root = 0) {
  auto ticket = group.start(kind, send, receive, count, op, root);
  return ticket.ok() ? group.wait(*ticket) : ticket.error();
}

} // namespace

Status ProcessGroup::allReduce(float *data, int64_t count, CollectiveOp op) {
  return count == 0 ? Status::success() : startAndWait(*this, CollectiveKind::AllReduce, data, data, count, op);
}

Status ProcessGroup::broadcast(void *data, size_t bytes, int root) {
  return bytes == 0 ? Status::success()
                    : startAndWait(*this, CollectiveKind::Broadcast, data, data, static_cast<int64_t>(bytes),
                                   CollectiveOp::Sum, root);
}

Status ProcessGroup::allGather(const float *mine, float *all, int64_t count) {
  return startAndWait(*this, CollectiveKind::AllGather, mine, all, count);
}

std::string mpiPluginDescription() {
  const MpiPlugin &mpi = mpiPlugin();
  return mpi.init ? std::string(mpi.version()) + " (" + mpi.path + ")" : mpi.reason;
}

} // namespace tec
