// The fused optimizer kernel (tec.optimizer_update) against a double-precision reference written from
// torch.optim's documented update rules: SGD (weight decay, momentum, Nesterov) and AdamW, with gradient
// clipping and with a skipped (non-finite) step. Several steps, so the moments carry over.
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace tec::kernels;

namespace {

struct Reference {
  std::vector<double> p, m, v;
};

/// torch.optim.SGD / AdamW, one step, in double.
void referenceStep(const OptimizerParams &o, double lr, int step, double clip, const std::vector<float> &grad,
                   Reference &r) {
  for (size_t i = 0; i < r.p.size(); ++i) {
    double g = grad[i] * clip;
    if (o.adamw) {
      r.m[i] = o.beta1 * r.m[i] + (1 - o.beta1) * g;
      r.v[i] = o.beta2 * r.v[i] + (1 - o.beta2) * g * g;
      double mHat = r.m[i] / (1 - std::pow(o.beta1, step + 1)), vHat = r.v[i] / (1 - std::pow(o.beta2, step + 1));
      r.p[i] -= lr * (mHat / (std::sqrt(vHat) + o.eps) + o.weightDecay * r.p[i]);
    } else {
      g += o.weightDecay * r.p[i];
      double d = g;
      if (o.momentum != 0) {
        r.m[i] = o.momentum * r.m[i] + g;
        d = o.nesterov ? g + o.momentum * r.m[i] : r.m[i];
      }
      r.p[i] -= lr * d;
    }
  }
}

class Optimizer : public ::testing::TestWithParam<OptimizerParams> {};

TEST_P(Optimizer, MatchesTheDoublePrecisionReferenceOverSteps) {
  const OptimizerParams o = GetParam();
  const int64_t n = 1000;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  for (auto &x : p)
    x = normal(rng);
  Reference ref{{p.begin(), p.end()}, std::vector<double>(n), std::vector<double>(n)};
  const bool moments = o.adamw || o.momentum != 0.0f;
  for (int step = 0; step < 5; ++step) {
    for (auto &x : g)
      x = normal(rng);
    const float lr = 0.01f, clip = step == 2 ? 0.5f : 1.0f;
    // In place, as codegen lays it out: the new values over the old.
    cpu::optimizerUpdate(o, lr, static_cast<float>(step), clip, true, p.data(), g.data(), moments ? m.data() : nullptr,
                         o.adamw ? v.data() : nullptr, p.data(), moments ? m.data() : nullptr,
                         o.adamw ? v.data() : nullptr, n);
    referenceStep(o, lr, step, clip, g, ref);
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(p[i], ref.p[i], 1e-5 * (1 + std::fabs(ref.p[i]))) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Rules, Optimizer,
                         ::testing::Values(OptimizerParams{false, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f, false},
                                           OptimizerParams{false, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f, false},
                                           OptimizerParams{false, 0.9f, 0.999f, 1e-8f, 0.0f, 0.9f, false},
                                           OptimizerParams{false, 0.9f, 0.999f, 1e-8f, 0.01f, 0.9f, true},
                                           OptimizerParams{true, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f, false},
                                           OptimizerParams{true, 0.8f, 0.99f, 1e-6f, 0.05f, 0.0f, false}));

TEST(OptimizerSkip, ANonFiniteStepLeavesEverythingAsItWas) {
  OptimizerParams adamw{true, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f, false};
  std::vector<float> p{1, 2, 3}, m{0.1f, 0.2f, 0.3f}, v{0.01f, 0.02f, 0.03f}, g{INFINITY, 1, 1};
  std::vector<float> p2(3), m2(3), v2(3);
  cpu::optimizerUpdate(adamw, 0.1f, 4.0f, 1.0f, false, p.data(), g.data(), m.data(), v.data(), p2.data(), m2.data(),
                       v2.data(), 3);
  EXPECT_EQ(p2, p);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
}

} // namespace
