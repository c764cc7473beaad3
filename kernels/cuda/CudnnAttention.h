// Fused attention through cuDNN's graph API (scaled dot-product attention, forward and backward), built
// with the header-only cuDNN frontend (PyPI's nvidia-cudnn-frontend) over the cuDNN that Cudnn.h loads at
// run time. Where cuDNN or the frontend is missing, or has no engine for a configuration, tec's own
// attention kernels (Kernels.h) run and the backend says why.
#ifndef TEC_KERNELS_CUDA_CUDNNATTENTION_H
#define TEC_KERNELS_CUDA_CUDNNATTENTION_H

#include "support/Attention.h"
#include "support/Ops.h"
#include "kernels/cuda/Cudnn.h"

#include <cstddef>
#include <memory>
#include <string>

namespace tec::kernels::cuda {

/// One attention step: forward (q, k, v, mask? -> out, lse) or backward (dout, q, k, v, out, lse, mask? ->
/// dq, dk, dv); q, k, v, out and gradients of `type`, lse f32, an additive mask of `type`. FP8 attention
/// (`fp8`): q, k, v and out E4M3, dout and the gradients of `gradType`, with scales and amaxes.
struct AttentionSpec {
  AttentionShape shape;
  ElementType type = ElementType::BF16;
  bool grad = false;
  bool fp8 = false;
  ElementType doutType = ElementType::F8E5M2, gradType = ElementType::F8E5M2;
  /// The GPU's compute capability x 10 (90: Hopper): cuDNN's FP8 limits differ per architecture.
  int sm = 90;
};

/// Whether cuDNN's fused attention can express `spec`, and if not, why: bf16 or f16, head sizes multiples
/// of 8 up to 256 (128 for the backward), no boolean mask, an additive mask that spans queries and keys;
/// FP8 (Hopper and newer): head sizes multiples of 16 up to 256 forward; backward exactly 128 on Hopper,
/// multiples of 16 up to 128 (or 192 for Q/K with 128 for V) from Blackwell on, as cuDNN frontend's
/// sdpa_fp8_bwd checks; no mask but causal. Plain C++, tested without a GPU.
bool cudnnAttentionTakes(const AttentionSpec &spec, std::string &why);

/// Device pointers of one attention launch (those of the other direction stay null).
struct AttentionOperands {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr, *dout = nullptr;
  void *out = nullptr; // written forward, read backward
  float *lse = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  /// FP8: device f32 scalars in tec.attention_fp8's or tec.attention_fp8_grad's order (Kernels.h's
  /// AttentionFp8Args), the amaxes written by cuDNN.
  const float *scales[12] = {};
  float *amaxes[4] = {};
};

/// One attention's cuDNN graph, built and its plan chosen once (at plan load): deterministic in the
/// backward.
class CudnnAttention {
public:
  ~CudnnAttention();
  /// Null with `why` when tec was built without the frontend or cuDNN has no engine for `spec`.
  static std::unique_ptr<CudnnAttention> create(const CudnnHandle &handle, const AttentionSpec &spec, std::string &why);
  size_t workspaceBytes() const { return workspace; }
  /// Enqueues on the handle's stream.
  bool run(const AttentionOperands &operands, void *workspaceMemory, std::string &error) const;

private:
  explicit CudnnAttention(const CudnnHandle &handle);
  struct Graph;
  const CudnnHandle &handle;
  std::unique_ptr<Graph> graph;
  AttentionSpec spec;
  size_t workspace = 0;
};

} // namespace tec::kernels::cuda

#endif
