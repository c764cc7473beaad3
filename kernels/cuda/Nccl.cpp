// NCCL resolved with dlopen/dlsym: nccl.h gives the types and the signatures (decltype of each entry point),
// nothing is linked, so the plugin loads where NCCL is absent.
#include "kernels/cuda/Nccl.h"

#include "support/LibraryLocations.h"

#include <dlfcn.h>
#include <nccl.h>

namespace tec::kernels::cuda {

#define TEC_NCCL_ENTRY_POINTS(X)                                                                                       \
  X(ncclGetVersion)                                                                                                    \
  X(ncclGetErrorString)                                                                                                \
  X(ncclGetUniqueId)                                                                                                   \
  X(ncclCommInitRank)                                                                                                  \
  X(ncclCommDestroy)                                                                                                   \
  X(ncclCommAbort)                                                                                                     \
  X(ncclCommGetAsyncError)                                                                                             \
  X(ncclGroupStart)                                                                                                    \
  X(ncclGroupEnd)                                                                                                      \
  X(ncclAllReduce)

struct NcclApi {
#define TEC_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  TEC_NCCL_ENTRY_POINTS(TEC_NCCL_MEMBER)
#undef TEC_NCCL_MEMBER
  std::string path;
};

namespace {

struct Loaded {
  NcclApi api;
  std::string why; // empty when loaded
};

Loaded load() {
  Loaded r;
  void *library = nullptr;
  for (const std::string &name : nvidiaLibraryCandidates("libnccl.so.2", folderOf(reinterpret_cast<const void *>(&load))))
    if ((library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!library) {
    r.why = "libnccl.so.2 not found (pip install nvidia-nccl-cu13, or the CUDA toolkit's NCCL)";
    return r;
  }
#define TEC_NCCL_RESOLVE(name)                                                                                         \
  if (r.why.empty() && !(r.api.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name))))                     \
    r.why = "libnccl.so.2 lacks " #name;
  TEC_NCCL_ENTRY_POINTS(TEC_NCCL_RESOLVE)
#undef TEC_NCCL_RESOLVE
  Dl_info where{};
  if (r.why.empty() && dladdr(reinterpret_cast<void *>(r.api.ncclGetVersion), &where) && where.dli_fname)
    r.api.path = where.dli_fname;
  return r; // the library stays loaded for the process
}

const Loaded &loaded() {
  static Loaded library = load();
  return library;
}

ncclComm_t handle(void *comm) { return static_cast<ncclComm_t>(comm); }

} // namespace

const NcclApi *loadNccl(std::string &why) {
  why = loaded().why;
  return loaded().why.empty() ? &loaded().api : nullptr;
}

std::string ncclDescription(const NcclApi &api) {
  int v = 0; // major*10000 + minor*100 + patch
  api.ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) + " (" +
         api.path + ")";
}

std::unique_ptr<NcclComm> NcclComm::create(const NcclApi &api, int rank, int ranks, const ShareId &share,
                                           std::string &why) {
  ncclUniqueId id{};
  if (rank == 0)
    if (ncclResult_t r = api.ncclGetUniqueId(&id); r != ncclSuccess) {
      why = std::string("ncclGetUniqueId: ") + api.ncclGetErrorString(r);
      return nullptr;
    }
  if (ranks > 1 && !share(&id, sizeof(id), why))
    return nullptr;
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = api.ncclCommInitRank(&comm, ranks, id, rank); r != ncclSuccess) {
    why = std::string("ncclCommInitRank: ") + api.ncclGetErrorString(r);
    return nullptr;
  }
  return std::unique_ptr<NcclComm>(new NcclComm(api, comm));
}

NcclComm::~NcclComm() {
  if (!aborted)
    api.ncclCommDestroy(handle(comm));
}

bool NcclComm::allReduce(const std::vector<std::pair<float *, int64_t>> &tensors, NcclReduction reduction,
                         void *stream, std::string &why) {
  const ncclRedOp_t op = reduction == NcclReduction::Sum ? ncclSum : reduction == NcclReduction::Max ? ncclMax : ncclAvg;
  ncclResult_t r = api.ncclGroupStart();
  for (const auto &[data, count] : tensors)
    if (r == ncclSuccess && count > 0)
      r = api.ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat, op, handle(comm),
                            static_cast<cudaStream_t>(stream));
  if (ncclResult_t end = api.ncclGroupEnd(); r == ncclSuccess)
    r = end;
  if (r != ncclSuccess)
    why = std::string("ncclAllReduce: ") + api.ncclGetErrorString(r);
  return r == ncclSuccess;
}

bool NcclComm::healthy(std::string &why) const {
  ncclResult_t async = ncclSuccess;
  if (ncclResult_t r = api.ncclCommGetAsyncError(handle(comm), &async); r != ncclSuccess)
    async = r;
  if (async == ncclSuccess || async == ncclInProgress)
    return true;
  why = std::string("NCCL: ") + api.ncclGetErrorString(async);
  return false;
}

void NcclComm::abort() {
  if (!aborted)
    api.ncclCommAbort(handle(comm));
  aborted = true;
}

} // namespace tec::kernels::cuda
