// NCCL, the CUDA backend's collectives under data parallelism (DESIGN.md), loaded with dlopen as cuDNN is:
// the plugin links no NCCL and starts where it is absent (pip's nvidia-nccl-cu13 wheel or the toolkit's
// libnccl.so.2 is found the way cuDNN is). Collectives go on a stream of the caller's, so that they overlap the
// kernels of another stream; their errors arrive asynchronously (asyncError) and a communicator that hangs on a
// missing rank is aborted.
#ifndef TEC_KERNELS_CUDA_NCCL_H
#define TEC_KERNELS_CUDA_NCCL_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tec::kernels::cuda {

struct NcclApi;

/// The library, loaded on first use; null with `why` (one line) when it is not found or lacks an entry point.
const NcclApi *loadNccl(std::string &why);
/// "2.28.9 (path)" of the loaded library.
std::string ncclDescription(const NcclApi &api);

/// How an all-reduce combines the ranks' values (NCCL's sum, max and average).
enum class NcclReduction { Sum, Max, Mean };

/// One communicator over `ranks` processes, one GPU each (the current device).
class NcclComm {
public:
  /// Sends rank 0's unique id to every rank (`bytes` at `id`, in place); false with `why` on failure.
  using ShareId = std::function<bool(void *id, size_t bytes, std::string &why)>;
  /// Null with `why` when NCCL cannot make the communicator. Every rank calls it (NCCL's init is collective).
  static std::unique_ptr<NcclComm> create(const NcclApi &api, int rank, int ranks, const ShareId &share,
                                          std::string &why);
  ~NcclComm();
  /// Enqueues the all-reduce of each (device floats, count), in place, on `stream`, as one NCCL group (one
  /// launch for a bucket); false with `why` when NCCL refuses them.
  bool allReduce(const std::vector<std::pair<float *, int64_t>> &tensors, NcclReduction reduction, void *stream,
                 std::string &why);
  /// False with `why` once a collective failed (a rank left, a network error).
  bool healthy(std::string &why) const;
  /// Ends every collective of the communicator, those hung on a missing rank included: it is unusable after.
  void abort();
  bool isAborted() const { return aborted; }

private:
  NcclComm(const NcclApi &api, void *comm) : api(api), comm(comm) {}
  const NcclApi &api;
  void *comm;
  bool aborted = false;
};

} // namespace tec::kernels::cuda

#endif
