// libtec_mpi.so: MPI's world for tec's process group (runtime/Collectives.h), behind a C interface so that
// tec links no MPI library and starts where none is installed. Built where CMake finds MPI (Open MPI from
// Debian's openmpi-bin and libopenmpi-dev, which ./dev installs).
#include "runtime/Collectives.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace {

int fail(int code, const char *what, char *error, int errorBytes) {
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

__attribute__((visibility("default"))) int tecMpiAllReduce(float *data, int64_t count, int op, char *error,
                                                             int errorBytes) {
  // CollectiveOp: Sum 0, Max 1, Mean 2 (a sum divided by the ranks).
  const MPI_Op mpiOp = op == 1 ? MPI_MAX : MPI_SUM;
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min(kLargestCount, count - done));
    if (int code = MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, mpiOp, MPI_COMM_WORLD); code != MPI_SUCCESS)
      return fail(code, "MPI_Allreduce", error, errorBytes);
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

__attribute__((visibility("default"))) int tecMpiBroadcast(void *data, int64_t bytes, int root, char *error,
                                                             int errorBytes) {
  for (int64_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min(kLargestCount, bytes - done));
    if (int code = MPI_Bcast(static_cast<char *>(data) + done, n, MPI_BYTE, root, MPI_COMM_WORLD); code != MPI_SUCCESS)
      return fail(code, "MPI_Bcast", error, errorBytes);
    done += n;
  }
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) void tecMpiFinalize() {
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
