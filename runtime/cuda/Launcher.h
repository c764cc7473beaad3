// What a CUDA step closure enqueues: kernels of kernels/cuda, GEMMs, cuDNN's graphs. A launcher either calls
// them on a stream or (--emit=cuda) writes the same calls as C++ source, so that the generated program is the
// backend's own launch sequence, not a second rendering of the plan that could drift from it.
#ifndef TEC_RUNTIME_CUDA_LAUNCHER_H
#define TEC_RUNTIME_CUDA_LAUNCHER_H

#include "kernels/cuda/Cudnn.h"
#include "kernels/cuda/CudnnAttention.h"
#include "kernels/cuda/Fp8Kernels.h"
#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/Kernels.h"
#include "kernels/cuda/Nccl.h"

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tec::cuda {

namespace kc = kernels::cuda;
using kernels::ActivationGradKind;
using kernels::BinaryKind;
using kernels::CompareKind;
using kernels::ElementType;
using kernels::Epilogue;
using kernels::Fp8Format;
using kernels::ReduceKind;
using kernels::UnaryKind;
using kernels::Window;
using kernels::WindowKind;

/// A kernel argument that is the launch's stream: the stream itself on a device, `stream` in written source.
struct Stream {};

/// A kernel of kernels/cuda as Launcher::launch takes it: its name (written source calls it by that name)
/// and its address (a device launch calls it there).
#define TEC_KC(kernel) "kc::" #kernel, &kc::kernel

class Launcher {
public:
  /// Enqueues on `stream`; GEMMs run from `gemms` with the cuBLASLt workspace at `workspace`, convolutions
  /// from `convolutions` (on the cuDNN handle's stream, the same one), attention from `attentions`.
  Launcher(void *stream, const std::vector<std::shared_ptr<kc::Gemm>> &gemms,
           const std::vector<std::shared_ptr<kc::Convolution>> &convolutions,
           const std::vector<std::shared_ptr<kc::CudnnAttention>> &attentions, void *workspace);
  /// Writes each call as a line of C++ (pointers as P(arena offset), relative to `base`) into `lines`.
  Launcher(const char *base, std::vector<std::string> &lines);

  /// Calls `kernel` with `args` (Stream{} where it takes its stream), or writes that call: each argument is
  /// rendered as the parameter it becomes, so a kernel's signature is written once, where kernels/cuda
  /// declares it. A result (delayedScaling's) is dropped: the step checked at prepare what would make it
  /// false.
  template <typename R, typename... Params, typename... Args>
  void launch(const char *name, R (*kernel)(Params...), Args &&...args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "pass every parameter, Stream{} for the stream");
    if (lines)
      call(name, {render<Params>(std::forward<Args>(args))...});
    else
      kernel(pass(std::forward<Args>(args))...);
  }
  void memset(void *p, int value, size_t bytes);
  void copy(void *dst, const void *src, size_t bytes);
  /// GEMM number `gemm` of the backend's table; false with `error` when every algorithm failed.
  bool gemm(int gemm, const kc::GemmOperands &operands, std::string &error);
  /// Convolution number `conv` of the backend's cuDNN table (see kc::Convolution::run for a, b, out);
  /// false with `error` when cuDNN fails.
  bool convolution(int conv, const void *a, const void *b, void *out, void *workspace, std::string &error);
  /// Attention number `index` of the backend's cuDNN table; false with `error` when cuDNN fails.
  bool cudnnAttention(int index, const kc::AttentionOperands &operands, void *workspace, std::string &error);

  /// Data parallelism: NCCL's communicator, its stream and the events (cudaEvent_t) that order it against
  /// the work stream. (Written source names them `comm`, `commStream` and `events[i]`.)
  void setCollectives(kc::NcclComm *comm, void *commStream, void *const *events);
  /// Records event `event` on the work stream (`onComm` false) or on the collectives' stream.
  void record(int event, bool onComm);
  /// Makes the work stream (`onComm` false) or the collectives' stream wait for event `event`.
  void await(int event, bool onComm);
  /// The all-reduce of each (floats, count), in place, on the collectives' stream as one NCCL group.
  bool allReduce(const std::vector<std::pair<float *, int64_t>> &tensors, kc::NcclReduction reduction,
                 std::string &error);

private:
  template <typename A> decltype(auto) pass(A &&a) const {
    if constexpr (std::is_same_v<std::decay_t<A>, Stream>)
      return stream;
    else
      return std::forward<A>(a);
  }
  template <typename P, typename A> std::string render(A &&a) const {
    if constexpr (std::is_same_v<std::decay_t<A>, Stream>)
      return "stream";
    else
      return text(static_cast<P>(std::forward<A>(a)));
  }
  /// A typed pointer as P(offset) cast to its type, as the generated program's kernels take it.
  template <typename T, typename = std::enable_if_t<!std::is_void_v<std::remove_cv_t<T>>>>
  std::string text(T *p) const {
    return p ? "(" + std::string(pointeeName<std::remove_cv_t<T>>()) + " *)" + text(static_cast<const void *>(p))
             : "nullptr";
  }
  template <typename T> static constexpr const char *pointeeName() {
    if constexpr (std::is_same_v<T, float>)
      return "float";
    else if constexpr (std::is_same_v<T, double>)
      return "double";
    else if constexpr (std::is_same_v<T, uint8_t>)
      return "uint8_t";
    else if constexpr (std::is_same_v<T, bool>)
      return "bool";
    else if constexpr (std::is_same_v<T, int>)
      return "int";
    else if constexpr (std::is_same_v<T, int64_t>)
      return "int64_t";
    else {
      static_assert(std::is_same_v<T, unsigned long long>, "a kernel parameter's pointer type without a name here");
      return "unsigned long long";
    }
  }
  std::string text(const void *p) const;
  static std::string text(bool v);
  static std::string text(int v);
  static std::string text(int64_t v);
  static std::string text(size_t v);
  static std::string text(float v);
  static std::string text(ElementType t);
  static std::string text(Fp8Format f);
  static std::string text(kernels::BlockScale s);
  static std::string text(kc::GemmScaling s);
  static std::string text(BinaryKind k);
  static std::string text(CompareKind k);
  static std::string text(UnaryKind k);
  static std::string text(ActivationGradKind k);
  static std::string text(ReduceKind k);
  static std::string text(WindowKind k);
  static std::string text(Epilogue e);
  static std::string text(const kc::Extent &e);
  static std::string text(const kc::Strided &s);
  static std::string text(const Window &w);
  static std::string text(const kernels::AttentionShape &a);
  static std::string text(const kernels::OptimizerParams &o);
  std::string text(kc::ConstRef r) const;
  std::string text(kc::Ref r) const { return text(kc::ConstRef(r)); }
  std::string text(const kc::AttentionFp8Args &a) const;
  std::string text(const std::vector<kc::OptimizerTensor> &tensors) const;
  void call(const std::string &function, const std::vector<std::string> &args);

  void *stream = nullptr;
  const std::vector<std::shared_ptr<kc::Gemm>> *gemms = nullptr;
  const std::vector<std::shared_ptr<kc::Convolution>> *convolutions = nullptr;
  const std::vector<std::shared_ptr<kc::CudnnAttention>> *attentions = nullptr;
  void *workspace = nullptr;
  kc::NcclComm *comm = nullptr;
  void *commStream = nullptr;
  void *const *events = nullptr;
  const char *base = nullptr;
  std::vector<std::string> *lines = nullptr; // set: the launcher writes source
};

/// A GemmSpec as a C++ initializer (for the generated program's setup).
std::string gemmSpecSource(const kc::GemmSpec &spec);

} // namespace tec::cuda

#endif
