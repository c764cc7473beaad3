// tec's CPU threads. The caller of a parallel loop works too; each participant owns a contiguous share of
// the loop's chunks (the same share loop after loop, so its data stays in its core's cache) and, its own
// done, claims what is left of the others': a helper the OS has not scheduled (another process holds its
// core) delays nothing, its chunks go to whoever runs. OpenMP's teams instead wait at a barrier for every
// thread, and on a busy machine a descheduled one costs a whole time slice per loop (tec with 2 threads
// beside two busy processes ran a small MLP in 28 ms instead of 0.7 ms). Helpers spin briefly for the
// next loop, then sleep. BLAS runs single-threaded inside the chunks (kernels/cpu/Blas.h).
#ifndef TEC_KERNELS_CPU_THREADPOOL_H
#define TEC_KERNELS_CPU_THREADPOOL_H

#include <cstddef>
#include <cstdint>
#include "kernels/cpu/FunctionRef.h"

namespace tec::kernels::cpu {

/// CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (cgroup v2 cpu.max, v1
/// cpu.cfs_quota_us / cpu.cfs_period_us), rounded up; at least 1.
int availableCpus();

/// The pool's threads, the caller included; 0 or less: availableCpus().
void setPoolThreads(int threads);
int poolThreads();

/// body(begin, end) over [0, n) in chunks of `grain` indices (the last may be shorter), spread over the
/// pool; serial when there is one chunk, one thread, or the call comes from inside another loop. The chunks
/// depend on n and grain only, so what each computes does not depend on the thread count.
void parallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> body);

/// While one lives, parallel loops started on this thread run serially on it: the measurements that choose
/// a kernel time its whole work alone, so that the choice (and the bits it computes) does not depend on the
/// pool's size or on what the other threads are doing.
class SerialScope {
public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope &) = delete;
  SerialScope &operator=(const SerialScope &) = delete;

private:
  bool previous;
};

/// `floats` of scratch for the calling thread, reused across steps (no allocation once it has grown): valid
/// until the thread's next call.
float *threadScratch(size_t floats);

} // namespace tec::kernels::cpu

#endif
