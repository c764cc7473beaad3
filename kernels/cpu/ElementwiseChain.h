// A chain of elementwise ops over one shape, evaluated in a single pass over memory: a block of rows at a
// time, each op over the block in turn, so that values stay in cache and the ones that nothing outside the
// chain reads never go to memory at all. Each element is computed exactly as the unfused kernels compute it
// (binarySpan, unarySpan, activationGradSpan): fusing changes no bit of any result.
#ifndef TEC_KERNELS_CPU_ELEMENTWISECHAIN_H
#define TEC_KERNELS_CPU_ELEMENTWISECHAIN_H

#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/Dims.h"

#include <vector>

namespace tec::kernels::cpu {

class ElementwiseChain {
public:
  enum class Kind { Unary, Binary, ActivationGrad };
  /// An operand: the value of an earlier op of the chain, or a tensor broadcast (numpy rules) to the shape.
  struct Operand {
    int op = -1;
    const float *data = nullptr;
    Shape shape;
    static Operand value(int op) { return {op, nullptr, {}}; }
    static Operand tensor(const float *data, Shape shape) { return {-1, data, std::move(shape)}; }
  };
  struct Op {
    Kind kind = Kind::Unary;
    UnaryKind unary = UnaryKind::Relu;
    BinaryKind binary = BinaryKind::Add;
    ActivationGradKind grad = ActivationGradKind::Relu;
    Operand a, b; // b: binary ops and gradients (dy, x) only
    /// Where the value is written, contiguous over the shape, for readers outside the chain; null: it
    /// lives in scratch only. It may be a tensor operand read at the same elements (in place).
    float *out = nullptr;
  };

  /// Operands must be earlier ops or tensors broadcastable to `shape`.
  ElementwiseChain(Shape shape, std::vector<Op> ops);
  void run() const;
  const std::vector<Op> &ops() const { return ops_; }

private:
  /// A tensor operand's place: per row its offset (outer strides), along a row 0 or 1.
  struct Access {
    const float *data;
    Dims outerStrides;
    int64_t innerStride;
    bool sameRowEveryRow; // outer strides all 0: one row (a per-channel scale over NHWC pixels) or a scalar
  };
  /// Whole rows a span takes at once: several where rows are short and every tensor operand reads the
  /// output's layout or the same row for each, else 1.
  int64_t rowsPerSpan() const;
  Shape shape_;
  std::vector<Op> ops_;
  /// The shape as rows: the trailing dims every tensor operand reads either whole or as one value per row.
  Dims outer_;
  int64_t inner_ = 1;
  std::vector<Access> access_; // per op, a's then b's; unused for values of ops
  int64_t spanRows_ = 1; // rowsPerSpan(), fixed by the shape and operands
};

} // namespace tec::kernels::cpu

#endif
