// A convolution run by oneDNN's convolution primitive: its JIT kernels for the machine's ISA, depthwise ones
// among them, where tec's im2col + GEMM multiplies one small GEMM per group (a depthwise 3x3 over 96 channels
// at 56x56 on an AVX-512 Xeon: 1.4 ms as GEMMs per group, 0.37 ms in oneDNN with its reorders). Two forms:
// Plain reads and writes the images as tec holds them (NCHW, or NHWC for tec-channels-last's convs);
// Blocked lets oneDNN choose their layouts (nChw16c, ...) and reorders each image in and out. Either reads
// the weight in oneDNN's layout: laid out on each run, or once at prepare by fixWeight() for a constant.
// Images, and bands of rows of a large channels-last image, run one per chunk of tec's pool, oneDNN
// single-threaded in each as the GEMMs are, with a scratchpad per thread. Which of tec's loop, Plain and
// Blocked runs a plan's convolution is measured per shape and kept on disk (ChoiceTable): every process
// chooses alike, so training resumes bit for bit.
#ifndef TEC_KERNELS_CPU_DNNLCONV_H
#define TEC_KERNELS_CPU_DNNLCONV_H

#include "support/Window.h"
#include "kernels/cpu/FunctionRef.h"

#include <memory>
#include <string>

namespace tec::kernels::cpu {

class DnnlConv {
public:
  enum class Form { Plain, Blocked };
  /// How many of oneDNN's implementations of the plain form fastest() measures.
  static constexpr int kPlainAlternatives = 4;
  /// Why no convolution can run on oneDNN here (not loaded, no headers), or empty when one can.
  static const std::string &unavailable();
  /// The convolution `w` (with a bias or not) in `form` over NCHW or (channelsLast) NHWC images, run by the
  /// `alternative`th of the implementations oneDNN offers for it, in its order of preference (0: its first
  /// choice; its reference loops are never offered); null where unavailable() or oneDNN has no such one.
  static std::unique_ptr<DnnlConv> create(const Window &w, bool bias, Form form, bool channelsLast = false,
                                          int alternative = 0);
  ~DnnlConv();
  DnnlConv(const DnnlConv &) = delete;
  DnnlConv &operator=(const DnnlConv &) = delete;

  /// Called on each part of y as it is written, on the thread that wrote it: the part's first element (from
  /// y), its rows of `cols` floats `stride` apart. Parts never overlap; together they are all of y.
  using OutputPart = FunctionRef<void(int64_t offset, int64_t rows, int64_t cols, int64_t stride)>;
  /// y = conv(x, weight) + bias, all in tec's layouts (NCHW or NHWC, OIHW); `written` (an epilogue) on each part.
  void run(const float *x, const float *weight, const float *bias, float *y, OutputPart written = {}) const;
  /// Lays out `weight`, which never changes (a param of an inference plan), once: run() then ignores its
  /// weight argument.
  void fixWeight(const float *weight);
  /// oneDNN's name for the kernel it runs ("brdgmm_dw:avx512_core").
  const std::string &implementation() const { return implementation_; }
  Form form() const { return form_; }

  /// The fastest way to run `w` here: a DnnlConv (either form; Plain by any of oneDNN's first few
  /// implementations, since its first choice is not always its fastest: for a depthwise 3x3 over NHWC on
  /// AVX-512, brdgmm_dw takes 1.3x jit_dw's time), or null for tec's im2col + GEMM (conv() in CpuKernels.h),
  /// measured on the first convolution of each shape and kept on disk. TEC_CPU_CONV=tec|plain|blocked forces
  /// one (oneDNN's first choice, where it takes the shape).
  static std::unique_ptr<DnnlConv> fastest(const Window &w, bool bias, bool channelsLast = false);

private:
  struct Primitives;
  DnnlConv() = default;
  void layOutWeight(const float *weight) const;
  Window window_;
  std::unique_ptr<Primitives> p_;
  std::string implementation_;
  Form form_ = Form::Plain;
  bool weightFixed_ = false;
  const float *fixedWeight_ = nullptr; // the constant weight where oneDNN reads tec's layout
};

} // namespace tec::kernels::cpu

#endif
