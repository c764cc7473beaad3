// The CPU backend's fused elementwise chains against the same ops run one at a time by the unfused kernels:
// every element equal in every bit (broadcasts of each kind, spans across a row's chunk, values kept for
// readers outside the chain, a result written in place over an operand, one long row cut into pieces, short
// rows several to a span, one thread and two).
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/ElementwiseChain.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace tec::kernels;
using namespace tec::kernels::cpu;

namespace {

using Operand = ElementwiseChain::Operand;
using Op = ElementwiseChain::Op;

std::vector<float> randomTensor(const Shape &shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> v(numElements(shape));
  for (float &x : v)
    x = normal(rng);
  return v;
}

Op unaryOp(UnaryKind kind, Operand a) {
  Op op;
  op.kind = ElementwiseChain::Kind::Unary;
  op.unary = kind;
  op.a = std::move(a);
  return op;
}

Op binaryOp(BinaryKind kind, Operand a, Operand b) {
  Op op;
  op.kind = ElementwiseChain::Kind::Binary;
  op.binary = kind;
  op.a = std::move(a);
  op.b = std::move(b);
  return op;
}

Op gradOp(ActivationGradKind kind, Operand dy, Operand x) {
  Op op = binaryOp(BinaryKind::Add, std::move(dy), std::move(x));
  op.kind = ElementwiseChain::Kind::ActivationGrad;
  op.grad = kind;
  return op;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ElementwiseChainThreads : public ::testing::TestWithParam<int> {
protected:
  void SetUp() override { setThreads(GetParam()); }
  void TearDown() override { setThreads(1); }
};

} // namespace

/// Rows longer than a span (1100), operands broadcast along the last dim, a middle dim and entirely, a scalar
/// on the left of a subtraction, a gradient; two values kept for readers outside, the rest never written.
TEST_P(ElementwiseChainThreads, EqualsTheOpsRunOneByOne) {
  const Shape shape{3, 5, 1100};
  const auto x = randomTensor(shape, 1), w = randomTensor({1100}, 2), y = randomTensor({3, 1, 1100}, 3);
  const std::vector<float> one{1.0f};
  const int64_t n = numElements(shape);
  // Unfused: each op over the whole tensor.
  std::vector<float> a(n), b(n), c(n), d(n), e(n);
  binary(BinaryKind::Mul, x.data(), shape, w.data(), Shape{1100}, a.data(), shape);
  unary(UnaryKind::Sigmoid, a.data(), b.data(), n);
  binary(BinaryKind::Sub, b.data(), shape, y.data(), Shape{3, 1, 1100}, c.data(), shape);
  binary(BinaryKind::Sub, one.data(), Shape{1}, c.data(), shape, d.data(), shape);
  activationGrad(ActivationGradKind::Gelu, d.data(), x.data(), e.data(), n);

  std::vector<float> keptB(n, -1.0f), keptE(n, -1.0f);
  std::vector<Op> ops{binaryOp(BinaryKind::Mul, Operand::tensor(x.data(), shape), Operand::tensor(w.data(), {1100})),
                      unaryOp(UnaryKind::Sigmoid, Operand::value(0)),
                      binaryOp(BinaryKind::Sub, Operand::value(1), Operand::tensor(y.data(), {3, 1, 1100})),
                      binaryOp(BinaryKind::Sub, Operand::tensor(one.data(), {1}), Operand::value(2)),
                      gradOp(ActivationGradKind::Gelu, Operand::value(3), Operand::tensor(x.data(), shape))};
  ops[1].out = keptB.data();
  ops[4].out = keptE.data();
  ElementwiseChain(shape, ops).run();
  EXPECT_TRUE(sameBits(keptB, b));
  EXPECT_TRUE(sameBits(keptE, e));
}

/// Short rows with one value per row (RMSNorm's backward: [B, T, D] times [B, T, 1]) and a weight per column.
TEST_P(ElementwiseChainThreads, ReadsOneValuePerRowOfShortRows) {
  const Shape shape{64, 48, 24};
  const auto x = randomTensor(shape, 4), r = randomTensor({64, 48, 1}, 5), g = randomTensor({24}, 6);
  const int64_t n = numElements(shape);
  std::vector<float> a(n), want(n);
  binary(BinaryKind::Mul, x.data(), shape, r.data(), Shape{64, 48, 1}, a.data(), shape);
  binary(BinaryKind::Div, a.data(), shape, g.data(), Shape{24}, want.data(), shape);
  std::vector<float> got(n);
  std::vector<Op> ops{binaryOp(BinaryKind::Mul, Operand::tensor(x.data(), shape), Operand::tensor(r.data(), {64, 48, 1})),
                      binaryOp(BinaryKind::Div, Operand::value(0), Operand::tensor(g.data(), {24}))};
  ops[1].out = got.data();
  ElementwiseChain(shape, ops).run();
  EXPECT_TRUE(sameBits(got, want));
}

/// Rows of 40 (NHWC channels) taken several to a span: ConvNeXt's layer scale (a row for every pixel) and
/// residual add, a scalar, a value kept for readers outside; 3,193 rows, so that spans and tasks end ragged.
TEST_P(ElementwiseChainThreads, TakesShortRowsSeveralToASpan) {
  const Shape shape{1, 31, 103, 40};
  const auto x = randomTensor(shape, 11), gamma = randomTensor({40}, 12), residual = randomTensor(shape, 13);
  const std::vector<float> half{0.5f};
  const int64_t n = numElements(shape);
  std::vector<float> a(n), b(n), want(n);
  binary(BinaryKind::Mul, x.data(), shape, gamma.data(), Shape{40}, a.data(), shape);
  binary(BinaryKind::Add, a.data(), shape, residual.data(), shape, b.data(), shape);
  binary(BinaryKind::Mul, half.data(), Shape{}, b.data(), shape, want.data(), shape);
  std::vector<float> keptA(n, -1.0f), got(n, -1.0f);
  std::vector<Op> ops{binaryOp(BinaryKind::Mul, Operand::tensor(x.data(), shape), Operand::tensor(gamma.data(), {40})),
                      binaryOp(BinaryKind::Add, Operand::value(0), Operand::tensor(residual.data(), shape)),
                      binaryOp(BinaryKind::Mul, Operand::tensor(half.data(), {}), Operand::value(1))};
  ops[0].out = keptA.data();
  ops[2].out = got.data();
  ElementwiseChain(shape, ops).run();
  EXPECT_TRUE(sameBits(keptA, a));
  EXPECT_TRUE(sameBits(got, want));
}

/// The result written over an operand read at the same elements (an in-place add of a residual).
TEST_P(ElementwiseChainThreads, WritesInPlaceOverAnOperand) {
  const Shape shape{7, 3000};
  auto x = randomTensor(shape, 7);
  const auto s = randomTensor({7, 3000}, 8);
  const int64_t n = numElements(shape);
  std::vector<float> a(n), want(n);
  unary(UnaryKind::Silu, s.data(), a.data(), n);
  binary(BinaryKind::Add, x.data(), shape, a.data(), shape, want.data(), shape);
  std::vector<Op> ops{unaryOp(UnaryKind::Silu, Operand::tensor(s.data(), shape)),
                      binaryOp(BinaryKind::Add, Operand::tensor(x.data(), shape), Operand::value(0))};
  ops[1].out = x.data();
  ElementwiseChain(shape, ops).run();
  EXPECT_TRUE(sameBits(x, want));
}

/// Contiguous operands make the whole tensor one row (75,000 elements), cut into pieces of whole spans for the
/// pool, the last one ragged.
TEST_P(ElementwiseChainThreads, CutsOneLongRowIntoPieces) {
  const Shape shape{3, 25000};
  const auto x = randomTensor(shape, 9), y = randomTensor(shape, 10);
  const int64_t n = numElements(shape);
  std::vector<float> a(n), b(n), want(n);
  unary(UnaryKind::Silu, x.data(), a.data(), n);
  binary(BinaryKind::Mul, a.data(), shape, y.data(), shape, b.data(), shape);
  binary(BinaryKind::Add, b.data(), shape, x.data(), shape, want.data(), shape);
  std::vector<float> got(n, -1.0f);
  std::vector<Op> ops{unaryOp(UnaryKind::Silu, Operand::tensor(x.data(), shape)),
                      binaryOp(BinaryKind::Mul, Operand::value(0), Operand::tensor(y.data(), shape)),
                      binaryOp(BinaryKind::Add, Operand::value(1), Operand::tensor(x.data(), shape))};
  ops[2].out = got.data();
  ElementwiseChain(shape, ops).run();
  EXPECT_TRUE(sameBits(got, want));
}

INSTANTIATE_TEST_SUITE_P(Threads, ElementwiseChainThreads, ::testing::Values(1, 2));
