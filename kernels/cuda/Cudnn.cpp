// cuDNN resolved with dlopen/dlsym: cudnn.h gives the types and the signatures (decltype of each entry
// point), nothing is linked, so the plugin loads where cuDNN is absent.
#include "kernels/cuda/Cudnn.h"

#include "support/LibraryLocations.h"

#include <cudnn.h>
#include <dlfcn.h>

#include <mutex>
#include <vector>

// The convolution API is marked deprecated in cuDNN 9 in favour of the graph API; it is still shipped
// and supported, and it is what tec uses (see Cudnn.h).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace tec::kernels::cuda {

#define TEC_CUDNN_ENTRY_POINTS(X)                                                                                      \
  X(cudnnGetVersion)                                                                                                   \
  X(cudnnGetErrorString)                                                                                               \
  X(cudnnCreate)                                                                                                       \
  X(cudnnDestroy)                                                                                                      \
  X(cudnnSetStream)                                                                                                    \
  X(cudnnCreateTensorDescriptor)                                                                                       \
  X(cudnnSetTensor4dDescriptor)                                                                                        \
  X(cudnnDestroyTensorDescriptor)                                                                                      \
  X(cudnnCreateFilterDescriptor)                                                                                       \
  X(cudnnSetFilter4dDescriptor)                                                                                        \
  X(cudnnDestroyFilterDescriptor)                                                                                      \
  X(cudnnCreateConvolutionDescriptor)                                                                                  \
  X(cudnnSetConvolution2dDescriptor)                                                                                   \
  X(cudnnSetConvolutionGroupCount)                                                                                     \
  X(cudnnSetConvolutionMathType)                                                                                       \
  X(cudnnDestroyConvolutionDescriptor)                                                                                 \
  X(cudnnGetConvolutionForwardAlgorithm_v7)                                                                            \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                                                       \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                                                     \
  X(cudnnConvolutionForward)                                                                                           \
  X(cudnnConvolutionBackwardData)                                                                                      \
  X(cudnnConvolutionBackwardFilter)

struct CudnnApi {
#define TEC_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  TEC_CUDNN_ENTRY_POINTS(TEC_CUDNN_MEMBER)
#undef TEC_CUDNN_MEMBER
};

namespace {

struct Loaded {
  CudnnApi api;
  std::string why; // empty when loaded
  void *library = nullptr;
};

/// The first of kernels::cudnnCandidates() that loads (doctor reports the same file).
Loaded load() {
  Loaded r;
  void *&library = r.library;
  for (const std::string &name : cudnnCandidates(folderOf(reinterpret_cast<const void *>(&load))))
    if ((library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!library) {
    r.why = "libcudnn.so.9 not found";
    return r;
  }
#define TEC_CUDNN_RESOLVE(name)                                                                                        \
  if (r.why.empty() && !(r.api.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name))))                    \
    r.why = "libcudnn.so.9 lacks " #name;
  TEC_CUDNN_ENTRY_POINTS(TEC_CUDNN_RESOLVE)
#undef TEC_CUDNN_RESOLVE
  if (r.why.empty() && r.api.cudnnGetVersion() < 90000)
    r.why = "cuDNN " + std::to_string(r.api.cudnnGetVersion()) + " is older than 9";
  return r; // the library stays loaded for the process
}

cudnnDataType_t cudnnType(ElementType t) {
  switch (t) {
  case ElementType::F16: return CUDNN_DATA_HALF;
  case ElementType::BF16: return CUDNN_DATA_BFLOAT16;
  default: return CUDNN_DATA_FLOAT;
  }
}

/// FP32 without TF32 may use FMA kernels only; otherwise tensor cores are welcome.
cudnnMathType_t mathTypeFor(const ConvSpec &spec) {
  return spec.type == ElementType::F32 && !spec.allowTf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

bool mathAllowed(const ConvSpec &spec, cudnnMathType_t found) {
  return mathTypeFor(spec) != CUDNN_FMA_MATH || found == CUDNN_FMA_MATH;
}

std::string statusText(const CudnnApi &api, cudnnStatus_t s) { return api.cudnnGetErrorString(s); }

} // namespace

namespace {
const Loaded &loaded() {
  static Loaded library = load();
  return library;
}
} // namespace

const CudnnApi *loadCudnn(std::string &why) {
  why = loaded().why;
  return loaded().why.empty() ? &loaded().api : nullptr;
}

void *cudnnLibrary(const CudnnApi &) { return loaded().library; }

size_t cudnnLoadedVersion(const CudnnApi &api) { return api.cudnnGetVersion(); }

CudnnHandle::~CudnnHandle() { api_.cudnnDestroy(static_cast<cudnnHandle_t>(handle)); }

std::unique_ptr<CudnnHandle> CudnnHandle::create(const CudnnApi &api, void *stream, std::string &why) {
  cudnnHandle_t h = nullptr;
  if (cudnnStatus_t s = api.cudnnCreate(&h); s != CUDNN_STATUS_SUCCESS) {
    why = "cudnnCreate: " + statusText(api, s);
    return nullptr;
  }
  std::unique_ptr<CudnnHandle> handle(new CudnnHandle(api, h));
  if (cudnnStatus_t s = api.cudnnSetStream(h, static_cast<cudaStream_t>(stream)); s != CUDNN_STATUS_SUCCESS) {
    why = "cudnnSetStream: " + statusText(api, s);
    return nullptr;
  }
  return handle;
}

struct Convolution::Descriptors {
  const CudnnApi &api;
  WindowKind kind;
  cudnnTensorDescriptor_t image = nullptr, response = nullptr; // x (or dx), y (or dy)
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descriptors() {
    if (image)
      api.cudnnDestroyTensorDescriptor(image);
    if (response)
      api.cudnnDestroyTensorDescriptor(response);
    if (filter)
      api.cudnnDestroyFilterDescriptor(filter);
    if (conv)
      api.cudnnDestroyConvolutionDescriptor(conv);
  }
};

Convolution::Convolution(const CudnnHandle &handle) : handle(handle) {}
Convolution::~Convolution() = default;

namespace {

/// The first result cuDNN's heuristics rank highest that ran, is deterministic, fits the workspace cap and
/// keeps FP32 off tensor cores unless TF32 is allowed.
template <typename Perf>
const Perf *choose(const std::vector<Perf> &found, int returned, const ConvSpec &spec) {
  for (int i = 0; i < returned; ++i) {
    const Perf &p = found[i];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
        p.memory <= kMaxConvWorkspaceBytes && mathAllowed(spec, p.mathType))
      return &p;
  }
  return nullptr;
}

} // namespace

std::unique_ptr<Convolution> Convolution::create(const CudnnHandle &handle, const ConvSpec &spec, std::string &why) {
  if (!cudnnTakes(spec, why))
    return nullptr;
  const CudnnApi &api = handle.api();
  const Window &w = spec.window;
  const cudnnDataType_t type = cudnnType(spec.type);
  std::unique_ptr<Convolution> c(new Convolution(handle));
  c->d.reset(new Descriptors{api, spec.kind});
  Descriptors &d = *c->d;
  auto check = [&](cudnnStatus_t s, const char *what) {
    if (s != CUDNN_STATUS_SUCCESS && why.empty())
      why = std::string(what) + ": " + statusText(api, s);
    return s == CUDNN_STATUS_SUCCESS;
  };
  auto image = [](int64_t v) { return static_cast<int>(v); };
  // The plan verifier bounds tensor sizes, and cuDNN's 4-D descriptors take int dims.
  const bool described =
      check(api.cudnnCreateTensorDescriptor(&d.image), "cudnnCreateTensorDescriptor") &&
      check(api.cudnnSetTensor4dDescriptor(d.image, CUDNN_TENSOR_NCHW, type, image(w.batch), image(w.channels),
                                           image(w.height), image(w.width)),
            "input descriptor") &&
      check(api.cudnnCreateTensorDescriptor(&d.response), "cudnnCreateTensorDescriptor") &&
      check(api.cudnnSetTensor4dDescriptor(d.response, CUDNN_TENSOR_NCHW, type, image(w.batch), image(w.outChannels),
                                           image(w.outHeight), image(w.outWidth)),
            "output descriptor") &&
      check(api.cudnnCreateFilterDescriptor(&d.filter), "cudnnCreateFilterDescriptor") &&
      check(api.cudnnSetFilter4dDescriptor(d.filter, type, CUDNN_TENSOR_NCHW, image(w.outChannels),
                                           image(w.groupChannels()), image(w.kernelH), image(w.kernelW)),
            "filter descriptor") &&
      check(api.cudnnCreateConvolutionDescriptor(&d.conv), "cudnnCreateConvolutionDescriptor") &&
      check(api.cudnnSetConvolution2dDescriptor(d.conv, image(w.padTop), image(w.padLeft), image(w.strideH),
                                                image(w.strideW), image(w.dilationH), image(w.dilationW),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "convolution descriptor") &&
      check(api.cudnnSetConvolutionGroupCount(d.conv, image(w.groups)), "cudnnSetConvolutionGroupCount") &&
      check(api.cudnnSetConvolutionMathType(d.conv, mathTypeFor(spec)), "cudnnSetConvolutionMathType");
  if (!described)
    return nullptr;
  auto h = static_cast<cudnnHandle_t>(handle.get());
  auto pick = [&](auto &found, cudnnStatus_t status, int returned, const char *what) -> bool {
    if (!check(status, what))
      return false;
    const auto *chosen = choose(found, returned, spec);
    if (!chosen) {
      why = "no deterministic cuDNN algorithm within " + std::to_string(kMaxConvWorkspaceBytes >> 20) +
            " MiB of workspace" + (mathTypeFor(spec) == CUDNN_FMA_MATH ? " without TF32" : "");
      return false;
    }
    c->algorithm = static_cast<int>(chosen->algo);
    c->workspace = chosen->memory;
    return check(api.cudnnSetConvolutionMathType(d.conv, chosen->mathType), "cudnnSetConvolutionMathType");
  };
  int returned = 0;
  switch (spec.kind) {
  case WindowKind::Conv: {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> found(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    auto s = api.cudnnGetConvolutionForwardAlgorithm_v7(h, d.image, d.filter, d.conv, d.response,
                                                        static_cast<int>(found.size()), &returned, found.data());
    if (!pick(found, s, returned, "cudnnGetConvolutionForwardAlgorithm_v7"))
      return nullptr;
    break;
  }
  case WindowKind::ConvInputGrad: {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> found(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    auto s = api.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.filter, d.response, d.conv, d.image,
                                                             static_cast<int>(found.size()), &returned, found.data());
    if (!pick(found, s, returned, "cudnnGetConvolutionBackwardDataAlgorithm_v7"))
      return nullptr;
    break;
  }
  default: {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> found(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    auto s = api.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.image, d.response, d.conv, d.filter,
                                                               static_cast<int>(found.size()), &returned, found.data());
    if (!pick(found, s, returned, "cudnnGetConvolutionBackwardFilterAlgorithm_v7"))
      return nullptr;
    break;
  }
  }
  return c;
}

bool Convolution::run(const void *a, const void *b, void *out, void *workspaceMemory, std::string &error) const {
  const CudnnApi &api = handle.api();
  auto h = static_cast<cudnnHandle_t>(handle.get());
  const float one = 1.0f, zero = 0.0f; // float scalars for f32, f16 and bf16 data alike
  cudnnStatus_t s;
  switch (d->kind) {
  case WindowKind::Conv:
    s = api.cudnnConvolutionForward(h, &one, d->image, a, d->filter, b, d->conv,
                                    static_cast<cudnnConvolutionFwdAlgo_t>(algorithm), workspaceMemory, workspace,
                                    &zero, d->response, out);
    break;
  case WindowKind::ConvInputGrad:
    s = api.cudnnConvolutionBackwardData(h, &one, d->filter, b, d->response, a, d->conv,
                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm), workspaceMemory,
                                         workspace, &zero, d->image, out);
    break;
  default:
    s = api.cudnnConvolutionBackwardFilter(h, &one, d->image, b, d->response, a, d->conv,
                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm), workspaceMemory,
                                           workspace, &zero, d->filter, out);
    break;
  }
  if (s != CUDNN_STATUS_SUCCESS) {
    error = statusText(api, s);
    return false;
  }
  return true;
}

} // namespace tec::kernels::cuda
