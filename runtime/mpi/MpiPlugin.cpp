// libtec_mpi.so: MPI's world for tec's process group (runtime/Collectives.h), behind a C interface so that
// tec links no MPI library and starts where none is installed. Built where CMake finds MPI (Open MPI from
// Debian's openmpi-bin and libopenmpi-dev, which ./dev installs).
//
// A collective is started (tecMpiStart) and waited for (tecMpiWait) apart, so that the CPU backend may compute
// while a bucket of gradients travels. Each runs as MPI's blocking collective (Open MPI's blocking
// algorithms move 1.6 MB between 2 ranks in 0.23 ms where MPI_Iallreduce and MPI_Test polling take 0.55),
// in the order the collectives were started, the same on every rank: on a communication thread where tec has
// a core to spare for it (MPI progresses inside the thread's call while tec computes), else inside the wait.
// A blocking call cannot give up, so a watchdog bounds it: when a collective outlives --collective-timeout,
// the rank says so and exits, and the launcher ends the others.
#include "runtime/Collectives.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <unistd.h>

namespace {

/// Set when a collective failed or timed out: the ranks no longer agree on which collective comes next, so
/// MPI_Finalize (itself collective) could wait forever for the rank that hung; finalizing aborts instead.
std::atomic<bool> collectiveFailed{false};

/// MPI counts are ints: a larger buffer goes in pieces.
constexpr int64_t kLargestCount = int64_t(1) << 30;

struct Job {
  tec::CollectiveKind kind;
  const void *send;
  void *receive;
  int64_t count;
  int op, root;
  bool done = false;
  int code = MPI_SUCCESS;
  char error[256] = {0};
};

int fail(int code, const char *what, char *error, int errorBytes) {
  collectiveFailed = true;
  if (error && errorBytes > 0) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int length = 0;
    MPI_Error_string(code, text, &length);
    std::snprintf(error, errorBytes, "%s: %s", what, text);
  }
  return code;
}

/// The communication thread and its queue; never destroyed (the thread may be inside MPI when the process
/// exits).
struct Communicator {
  std::mutex mutex;
  std::condition_variable work, finished;
  std::deque<std::shared_ptr<Job>> queue;
  std::map<int64_t, std::shared_ptr<Job>> started;
  int64_t nextTicket = 0;
  bool stopping = false, threaded = false, multiple = false;
  std::thread thread;
};

Communicator &communicator() {
  static Communicator *c = new Communicator;
  return *c;
}

void describeTimeout(char *message, int bytes, const char *what, double timeout) {
  std::snprintf(message, bytes,
                "%s: not every rank joined within %.0f s (--collective-timeout): a rank hung, died or runs another "
                "step",
                what, timeout);
}

/// Ends the process when the collective running inline outlives its timeout: MPI's blocking call cannot
/// return an error for a rank that never joins, and the rank that waits must not wait forever.
/// Arming and disarming only store atomics: the watchdog's thread looks at them a few times per timeout
/// (at most each second) rather than being woken for every collective, whose wake-ups on a machine whose
/// cores all compute took a core from a rank inside the all-reduce (the MLP's 2-rank all-reduce step 0.51 ms
/// with them, 0.44 without: medians of 8 alternating runs).
struct Watchdog {
  using Clock = std::chrono::steady_clock;
  std::atomic<const char *> what{nullptr}; // the collective running, or null
  std::atomic<Clock::rep> since{0};        // when it started, in Clock ticks
  std::atomic<double> timeout{0};
  std::once_flag started;
  int rank = 0;

  // The timeout is stored before the thread starts and read after each sleep: a watchdog that read it
  // first, before arm stored it, judged the first collective against 0 s and ended a rank that waited
  // 10 ms for its peer on a busy machine ("not every rank joined within 0 s").
  void arm(const char *collective, double seconds) {
    if (seconds <= 0)
      return;
    timeout = seconds;
    since = Clock::now().time_since_epoch().count();
    what = collective;
    std::call_once(started, [this] { std::thread([this] { watch(); }).detach(); });
  }
  void disarm() { what = nullptr; }
  void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(timeout / 8, 0.01, 1.0)));
      const char *running = what;
      const double limit = timeout;
      const auto elapsed = Clock::now() - Clock::time_point(Clock::duration(since.load()));
      if (running && std::chrono::duration<double>(elapsed).count() > limit) {
        char message[256];
        describeTimeout(message, sizeof(message), running, limit);
        std::fprintf(stderr, "error: rank %d: %s\n", rank, message);
        std::fflush(nullptr);
        _exit(1); // the launcher sees a rank gone and ends the others
      }
    }
  }
};

Watchdog &watchdog() {
  static Watchdog *w = new Watchdog;
  return *w;
}

const char *mpiName(tec::CollectiveKind kind) {
  static const char *const names[] = {"MPI_Allreduce", "MPI_Bcast", "MPI_Allgather"};
  return names[static_cast<int>(kind)];
}

/// Runs one collective to its end, inline within `timeout` (0: forever) or on the communication thread
/// (`timeout` 0: its waiter bounds the wait).
int run(Job &job, double timeout) {
  char *error = job.error;
  const int errorBytes = sizeof(job.error);
  const char *what = mpiName(job.kind);
  struct Armed {
    Armed(const char *what, double timeout) { watchdog().arm(what, timeout); }
    ~Armed() { watchdog().disarm(); }
  } armed(what, timeout);
  switch (job.kind) {
  case tec::CollectiveKind::AllReduce: {
    // CollectiveOp: Sum 0, Max 1, Mean 2 (a sum divided by the ranks).
    const MPI_Op mpiOp = job.op == 1 ? MPI_MAX : MPI_SUM;
    float *data = static_cast<float *>(job.receive);
    for (int64_t done = 0; done < job.count;) {
      const int n = static_cast<int>(std::min(kLargestCount, job.count - done));
      if (int code = MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, mpiOp, MPI_COMM_WORLD); code != MPI_SUCCESS)
        return fail(code, what, error, errorBytes);
      done += n;
    }
    if (job.op == 2) {
      int size = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      for (int64_t i = 0; i < job.count; ++i)
        data[i] /= static_cast<float>(size);
    }
    return MPI_SUCCESS;
  }
  case tec::CollectiveKind::Broadcast:
    for (int64_t done = 0; done < job.count;) {
      const int n = static_cast<int>(std::min(kLargestCount, job.count - done));
      if (int code = MPI_Bcast(static_cast<char *>(job.receive) + done, n, MPI_BYTE, job.root, MPI_COMM_WORLD);
          code != MPI_SUCCESS)
        return fail(code, what, error, errorBytes);
      done += n;
    }
    return MPI_SUCCESS;
  case tec::CollectiveKind::AllGather: {
    // One message: a bucket's shards are packed by the caller.
    if (job.count > kLargestCount) {
      collectiveFailed = true;
      std::snprintf(error, errorBytes, "a bucket of %lld floats per rank is more than MPI takes in one message: "
                                       "compile with a smaller --bucket-mb", static_cast<long long>(job.count));
      return -1;
    }
    const int n = static_cast<int>(job.count);
    const int code = MPI_Allgather(job.send, n, MPI_FLOAT, job.receive, n, MPI_FLOAT, MPI_COMM_WORLD);
    return code == MPI_SUCCESS ? code : fail(code, what, error, errorBytes);
  }
  }
  return -1;
}

void serve() {
  Communicator &c = communicator();
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(c.mutex);
      c.work.wait(lock, [&] { return c.stopping || !c.queue.empty(); });
      if (c.queue.empty())
        return;
      job = c.queue.front();
      c.queue.pop_front();
    }
    const int code = run(*job, 0);
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      job->code = code;
      job->done = true;
    }
    c.finished.notify_all();
  }
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) int tecMpiInit(int *rank, int *size, char *error, int errorBytes) {
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided); code != MPI_SUCCESS)
      return fail(code, "MPI_Init_thread", error, errorBytes);
  } else {
    MPI_Query_thread(&provided);
  }
  // Errors come back as codes that tec reports, not as MPI's default abort of the whole job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  watchdog().rank = *rank;
  communicator().multiple = provided == MPI_THREAD_MULTIPLE; // the thread polls while the caller may abort
  return MPI_SUCCESS;
}

/// Starts the communication thread (before the first collective; where MPI_THREAD_MULTIPLE is provided):
/// 1 when it runs.
__attribute__((visibility("default"))) int tecMpiProgressThread() {
  Communicator &c = communicator();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.threaded && c.multiple && c.queue.empty()) {
    c.thread = std::thread(serve);
    c.threaded = true;
  }
  return c.threaded ? 1 : 0;
}

__attribute__((visibility("default"))) int64_t tecMpiStart(int kind, const void *send, void *receive, int64_t count,
                                                            int op, int root) {
  Communicator &c = communicator();
  auto job = std::make_shared<Job>(Job{static_cast<tec::CollectiveKind>(kind), send, receive, count, op, root});
  std::lock_guard<std::mutex> lock(c.mutex);
  const int64_t ticket = c.nextTicket++;
  c.started[ticket] = job;
  c.queue.push_back(job); // run in this order, by the thread or by the waits (the same on every rank)
  if (c.threaded)
    c.work.notify_one();
  return ticket;
}

__attribute__((visibility("default"))) int tecMpiWait(int64_t ticket, double timeout, char *error, int errorBytes) {
  Communicator &c = communicator();
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.started.find(ticket);
    if (it == c.started.end()) {
      std::snprintf(error, errorBytes, "no collective #%lld was started", static_cast<long long>(ticket));
      return -1;
    }
    job = it->second;
    c.started.erase(it);
  }
  if (!c.threaded) {
    // Collectives started before this one run first: MPI's order is the order they were started in.
    while (!job->done) {
      std::shared_ptr<Job> next;
      {
        std::lock_guard<std::mutex> lock(c.mutex);
        next = c.queue.front();
        c.queue.pop_front();
      }
      next->code = run(*next, timeout);
      next->done = true;
      if (next->code != MPI_SUCCESS && next != job) {
        std::snprintf(error, errorBytes, "%s", next->error);
        return next->code;
      }
    }
    std::snprintf(error, errorBytes, "%s", job->error);
    return job->code;
  }
  std::unique_lock<std::mutex> lock(c.mutex);
  auto finished = [&] { return job->done; };
  const bool done = timeout > 0 ? c.finished.wait_for(lock, std::chrono::duration<double>(timeout), finished)
                                : (c.finished.wait(lock, finished), true);
  if (!done) {
    collectiveFailed = true;
    describeTimeout(error, errorBytes, mpiName(job->kind), timeout);
    return -1;
  }
  std::snprintf(error, errorBytes, "%s", job->error);
  return job->code;
}

/// Another path failed a collective (NCCL on the GPU): finalizing aborts, as after a failed MPI collective.
__attribute__((visibility("default"))) void tecMpiFail() { collectiveFailed = true; }

__attribute__((visibility("default"))) void tecMpiFinalize() {
  if (collectiveFailed) {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Communicator &c = communicator();
  if (c.threaded) {
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.stopping = true;
    }
    c.work.notify_one();
    c.thread.join();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

__attribute__((visibility("default"))) const char *tecMpiVersion() {
  static char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(version, &length);
  if (char *newline = std::strchr(version, '\n'))
    *newline = 0;
  return version;
}

} // extern "C"
