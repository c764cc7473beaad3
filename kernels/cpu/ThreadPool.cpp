#include "kernels/cpu/ThreadPool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tec::kernels::cpu {

namespace {

void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// How long a helper spins for the next loop before it sleeps: consecutive kernels of one step start
/// well within it, and an idle process stops using CPU soon after.
constexpr auto kSpinFor = std::chrono::microseconds(200);

/// The CPU quota of this process's cgroup in CPUs, or 0 for none.
double cgroupQuota() {
  // cgroup v2: "max 100000" or "200000 100000" in the unified hierarchy's cpu.max.
  std::string quota;
  double period = 0;
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2 >> quota >> period)
    return quota == "max" || period <= 0 ? 0.0 : std::stod(quota) / period;
  double q = -1, p = 0;
  if (std::ifstream v1q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); v1q >> q)
    if (std::ifstream v1p("/sys/fs/cgroup/cpu/cpu.cfs_period_us"); v1p >> p)
      return q > 0 && p > 0 ? q / p : 0.0;
  return 0.0;
}

/// One participant's share of a loop's chunks: [next, end), claimed from the front by its owner and, once
/// their own share is done, by the others.
struct alignas(64) Share {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
};

/// One parallel loop: its range and the chunks claimed and finished so far. Shared with the helpers, which
/// may still hold it after the caller returns (they then find no chunk left). Participant p (the caller is
/// 0) owns the p-th contiguous share of the chunks: consecutive loops over the same shape give each thread
/// the same part of the data, which stays in its core's cache (one shared counter dealt alternate chunks to
/// whichever thread asked, so each loop read much of what the other core had just written).
struct Job {
  explicit Job(int participants) : shares(participants) {}
  FunctionRef<void(int64_t, int64_t)> body;
  int64_t n = 0, grain = 1, chunks = 0;
  std::vector<Share> shares;
  std::atomic<int64_t> done{0};

  void deal(int64_t n_, int64_t grain_, FunctionRef<void(int64_t, int64_t)> body_) {
    body = body_, n = n_, grain = grain_, chunks = (n + grain - 1) / grain;
    const int64_t parts = static_cast<int64_t>(shares.size());
    for (int64_t p = 0; p < parts; ++p) {
      shares[p].next.store(chunks * p / parts, std::memory_order_relaxed);
      shares[p].end = chunks * (p + 1) / parts;
    }
    done.store(0, std::memory_order_relaxed);
  }
};

thread_local bool insideLoop = false;

/// Runs chunks of participant `self`'s share, then of the others' (a helper the OS has not scheduled
/// delays nothing: its share goes to whoever runs), until none is left; returns how many.
int64_t runChunks(Job &job, int self) {
  insideLoop = true;
  int64_t ran = 0;
  const int parts = static_cast<int>(job.shares.size());
  for (int k = 0; k < parts; ++k) {
    Share &share = job.shares[(self + k) % parts];
    for (int64_t c; (c = share.next.fetch_add(1, std::memory_order_relaxed)) < share.end; ++ran) {
      job.body(c * job.grain, std::min(job.n, (c + 1) * job.grain));
      job.done.fetch_add(1, std::memory_order_release);
    }
  }
  insideLoop = false;
  return ran;
}

/// Loops run serially after one whose caller waited far longer than a chunk takes for a helper's last
/// chunk: that helper lost its core mid-chunk (the machine is busy), and more loops on it would each risk
/// a time slice. Retried after this many loops.
constexpr int kSerialLoopsAfterAStall = 32;

class Pool {
public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i)
      helpers.emplace_back([this, i] { help(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (auto &t : helpers)
      t.join();
  }
  int threads() const { return static_cast<int>(helpers.size()) + 1; }

  /// Runs the loop over the pool, or returns false at once when another thread's loop has it (two
  /// sessions on two threads): that caller then runs its loop alone instead of waiting.
  bool tryRun(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> body) {
    std::unique_lock<std::mutex> caller(callerMutex, std::try_to_lock);
    if (!caller.owns_lock())
      return false;
    run(n, grain, body);
    return true;
  }

  /// Whether this loop runs on the caller alone (loops soon after a stall).
  bool backingOff() {
    int left = serialLoops.load(std::memory_order_relaxed);
    return left > 0 && serialLoops.compare_exchange_strong(left, left - 1, std::memory_order_relaxed);
  }

private:
  void run(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> body) {
    // The last loop's job again when no helper still holds it (no allocation per loop).
    if (!spare || spare.use_count() > 1)
      spare = std::make_shared<Job>(threads());
    std::shared_ptr<Job> job = spare;
    job->deal(n, grain, body);
    {
      std::lock_guard<std::mutex> lock(mutex);
      current = job;
      generation.fetch_add(1, std::memory_order_release);
    }
    if (sleepers.load(std::memory_order_acquire) > 0)
      wake.notify_all();
    const auto start = std::chrono::steady_clock::now();
    const int64_t ran = runChunks(*job, 0);
    const auto ownDone = std::chrono::steady_clock::now();
    // Only chunks some helper has claimed and not finished remain: yield the core to it while waiting.
    for (int spins = 0; job->done.load(std::memory_order_acquire) < job->chunks; ++spins) {
      if (spins < 64)
        pause();
      else
        std::this_thread::yield();
    }
    {
      std::lock_guard<std::mutex> lock(mutex); // helpers that wake now find no job
      current.reset();
    }
    const auto waited = std::chrono::steady_clock::now() - ownDone;
    const auto chunkTime = ran ? (ownDone - start) / ran : std::chrono::steady_clock::duration::zero();
    // A helper's first chunks are slow anyway (its BLAS buffers, its stack): no verdict on those.
    if (++jobs > 8 && waited > 4 * chunkTime + std::chrono::microseconds(300))
      serialLoops.store(kSerialLoopsAfterAStall, std::memory_order_relaxed);
  }

  void help(int self) {
    uint64_t seen = 0;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpinFor;
      while (generation.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until)
        for (int i = 0; i < 32; ++i)
          pause();
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (generation.load(std::memory_order_relaxed) == seen && !stopping) {
          sleepers.fetch_add(1, std::memory_order_release);
          wake.wait(lock, [&] { return stopping || generation.load(std::memory_order_relaxed) != seen; });
          sleepers.fetch_sub(1, std::memory_order_release);
        }
        if (stopping)
          return;
        seen = generation.load(std::memory_order_relaxed);
        job = current;
      }
      if (job)
        runChunks(*job, self);
    }
  }

  std::vector<std::thread> helpers;
  std::mutex callerMutex; // one loop at a time uses the helpers
  std::mutex mutex;
  std::condition_variable wake;
  std::shared_ptr<Job> current, spare;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> sleepers{0};
  std::atomic<int> serialLoops{0};
  int64_t jobs = 0; // loops run in parallel so far (by callers, one at a time)
  bool stopping = false;
};

std::mutex poolMutex;
std::unique_ptr<Pool> pool;

Pool &thePool() {
  std::lock_guard<std::mutex> lock(poolMutex);
  if (!pool)
    pool = std::make_unique<Pool>(availableCpus());
  return *pool;
}

} // namespace

int availableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    cpus = CPU_COUNT(&set);
  if (const double quota = cgroupQuota(); quota > 0)
    cpus = std::min(cpus, static_cast<int>(std::ceil(quota)));
  return std::max(cpus, 1);
}

void setPoolThreads(int threads) {
  const int wanted = threads > 0 ? threads : availableCpus();
  std::lock_guard<std::mutex> lock(poolMutex);
  if (!pool || pool->threads() != wanted)
    pool = std::make_unique<Pool>(wanted);
}

int poolThreads() { return thePool().threads(); }

void parallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> body) {
  grain = std::max<int64_t>(grain, 1);
  if (n <= 0)
    return;
  if (n > grain && !insideLoop)
    if (Pool &p = thePool(); p.threads() > 1 && !p.backingOff() && p.tryRun(n, grain, body))
      return;
  for (int64_t begin = 0; begin < n; begin += grain) // the same chunks, in order
    body(begin, std::min(n, begin + grain));
}

SerialScope::SerialScope() : previous(insideLoop) { insideLoop = true; }
SerialScope::~SerialScope() { insideLoop = previous; }

float *threadScratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats)
    scratch.resize(floats);
  return scratch.data();
}

} // namespace tec::kernels::cpu
