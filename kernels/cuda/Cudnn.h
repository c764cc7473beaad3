// Convolutions and their gradients through cuDNN, loaded at run time (dlopen of libcudnn.so.9): the
// plugin starts without cuDNN, and where it is missing, too old or refuses a shape, tec's own window
// kernels run instead and the backend says so. cuDNN's convolution API (cudnnConvolutionForward,
// BackwardData, BackwardFilter) is used, not the graph API: it covers every convolution tec's plans hold
// (2-D, groups, strides, dilations; 1-D as height 1) and reports each algorithm's determinism, which the
// graph API's engine knobs do not state as directly.
#ifndef TEC_KERNELS_CUDA_CUDNN_H
#define TEC_KERNELS_CUDA_CUDNN_H

#include "support/Ops.h"
#include "support/Window.h"

#include <cstddef>
#include <memory>
#include <string>

namespace tec::kernels::cuda {

/// One convolution step: forward (x, w -> y), input gradient (dy, w -> dx) or weight gradient
/// (dy, x -> dw), NCHW and OIHW, every operand of `type`.
struct ConvSpec {
  WindowKind kind = WindowKind::Conv;
  Window window;
  ElementType type = ElementType::F32;
  /// FP32 convolutions may use TF32 tensor cores only when asked (as GEMMs).
  bool allowTf32 = false;
};

/// Whether cuDNN's convolution API can express `spec`, and if not, why: a convolution kind (not a pool),
/// f32, f16 or bf16, and pads equal on both sides of each dim (the API has one pad per dim). Plain C++,
/// so the decision is tested without a GPU.
bool cudnnTakes(const ConvSpec &spec, std::string &why);

/// The most workspace one convolution may ask for: algorithms that want more are passed over.
inline constexpr size_t kMaxConvWorkspaceBytes = size_t(64) << 20;

/// cuDNN's entry points, resolved from the library once per process.
struct CudnnApi;

/// The library, loaded on first use; null with `why` when it is not found, lacks an entry point or is
/// older than cuDNN 9.
const CudnnApi *loadCudnn(std::string &why);
/// cudnnGetVersion() of the loaded library (e.g. 91000 for 9.10.0).
size_t cudnnLoadedVersion(const CudnnApi &api);
/// The loaded library's dlopen handle: cuDNN's frontend resolves the graph API from it.
void *cudnnLibrary(const CudnnApi &api);

/// A cuDNN handle bound to one stream.
class CudnnHandle {
public:
  ~CudnnHandle();
  /// Null with `why` when cuDNN cannot create a handle (no device, driver too old).
  static std::unique_ptr<CudnnHandle> create(const CudnnApi &api, void *stream, std::string &why);
  const CudnnApi &api() const { return api_; }
  void *get() const { return handle; }

private:
  CudnnHandle(const CudnnApi &api, void *handle) : api_(api), handle(handle) {}
  const CudnnApi &api_;
  void *handle;
};

/// One convolution's descriptors and the deterministic algorithm chosen for it, made once (at plan load).
class Convolution {
public:
  ~Convolution();
  /// Null with `why` when cuDNN rejects the descriptors or has no deterministic algorithm for them
  /// within kMaxConvWorkspaceBytes (and, for FP32 without TF32, without tensor cores).
  static std::unique_ptr<Convolution> create(const CudnnHandle &handle, const ConvSpec &spec, std::string &why);
  size_t workspaceBytes() const { return workspace; }
  /// Enqueues on the handle's stream. Forward: a = x, b = w, out = y; input gradient: a = dy, b = w,
  /// out = dx; weight gradient: a = dy, b = x, out = dw. Out is overwritten.
  bool run(const void *a, const void *b, void *out, void *workspaceMemory, std::string &error) const;

private:
  explicit Convolution(const CudnnHandle &handle);
  struct Descriptors;
  const CudnnHandle &handle;
  std::unique_ptr<Descriptors> d;
  int algorithm = 0;
  size_t workspace = 0;
};

} // namespace tec::kernels::cuda

#endif
