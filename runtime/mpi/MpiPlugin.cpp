// libtec_mpi.so: MPI's world for tec's process group (runtime/Collectives.h), behind a C interface so that
// tec links no MPI library and starts where none is installed. Built where CMake finds MPI (Open MPI from
// Debian's openmpi-bin and libopenmpi-dev, which ./dev installs).
#include "runtime/Collectives.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace {

/// Set when a collective failed or timed out: the ranks no longer agree on which collective comes next, so
/// MPI_Finalize (itself collective) could wait forever for the rank that hung; finalizing aborts instead.
bool collectiveFailed = false;

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

/// MPI counts are ints: a larger buffer goes in pieces.
constexpr int64_t kLargestCount = int64_t(1) << 30;

/// Waits for a nonblocking collective, at most `timeout` seconds (0: forever): a rank that hangs or died
/// without its launcher noticing must not hang the others. Polls MPI_Test (which also progresses the
/// collective), spinning for 100 ms (a bucket's latency is the step's), then sleeping 50 us between polls.
int waitFor(MPI_Request *request, double timeout, const char *what, char *error, int errorBytes) {
  const double start = MPI_Wtime();
  for (;;) {
    int done = 0;
    if (int code = MPI_Test(request, &done, MPI_STATUS_IGNORE); code != MPI_SUCCESS)
      return fail(code, what, error, errorBytes);
    if (done)
      return MPI_SUCCESS;
    const double waited = MPI_Wtime() - start;
    if (timeout > 0 && waited > timeout) {
      collectiveFailed = true;
      if (error && errorBytes > 0)
        std::snprintf(error, errorBytes,
                      "%s: not every rank joined within %.0f s (--collective-timeout): a rank hung, died or "
                      "runs another step",
                      what, timeout);
      return -1;
    }
    if (waited > 0.1)
      usleep(50);
  }
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) int tecMpiInit(int *rank, int *size, char *error, int errorBytes) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided); code != MPI_SUCCESS)
      return fail(code, "MPI_Init_thread", error, errorBytes);
  }
  // Errors come back as codes that tec reports, not as MPI's default abort of the whole job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int tecMpiAllReduce(float *data, int64_t count, int op, double timeout,
                                                             char *error, int errorBytes) {
  // CollectiveOp: Sum 0, Max 1, Mean 2 (a sum divided by the ranks).
  const MPI_Op mpiOp = op == 1 ? MPI_MAX : MPI_SUM;
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min(kLargestCount, count - done));
    MPI_Request request;
    if (int code = MPI_Iallreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, mpiOp, MPI_COMM_WORLD, &request);
        code != MPI_SUCCESS)
      return fail(code, "MPI_Iallreduce", error, errorBytes);
    if (int code = waitFor(&request, timeout, "MPI_Iallreduce", error, errorBytes); code != MPI_SUCCESS)
      return code;
    done += n;
  }
  if (op == 2) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const float ranks = static_cast<float>(size);
    for (int64_t i = 0; i < count; ++i)
      data[i] /= ranks;
  }
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int tecMpiBroadcast(void *data, int64_t bytes, int root, double timeout,
                                                             char *error, int errorBytes) {
  for (int64_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min(kLargestCount, bytes - done));
    MPI_Request request;
    if (int code = MPI_Ibcast(static_cast<char *>(data) + done, n, MPI_BYTE, root, MPI_COMM_WORLD, &request);
        code != MPI_SUCCESS)
      return fail(code, "MPI_Ibcast", error, errorBytes);
    if (int code = waitFor(&request, timeout, "MPI_Ibcast", error, errorBytes); code != MPI_SUCCESS)
      return code;
    done += n;
  }
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int tecMpiShard(const float *send, float *receive, int64_t count, int gather,
                                                        double timeout, char *error, int errorBytes) {
  // One message: a bucket's shards are packed by the caller; MPI counts are ints.
  if (count > kLargestCount) {
    collectiveFailed = true;
    if (error && errorBytes > 0)
      std::snprintf(error, errorBytes, "a bucket of %lld floats per rank is more than MPI takes in one message: "
                                       "compile with a smaller --bucket-mb", static_cast<long long>(count));
    return -1;
  }
  MPI_Request request;
  const int n = static_cast<int>(count);
  const char *what = gather ? "MPI_Iallgather" : "MPI_Ireduce_scatter_block";
  const int code = gather ? MPI_Iallgather(send, n, MPI_FLOAT, receive, n, MPI_FLOAT, MPI_COMM_WORLD, &request)
                          : MPI_Ireduce_scatter_block(send, receive, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
  if (code != MPI_SUCCESS)
    return fail(code, what, error, errorBytes);
  return waitFor(&request, timeout, what, error, errorBytes);
}

__attribute__((visibility("default"))) void tecMpiFinalize() {
  if (collectiveFailed) {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 1);
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
