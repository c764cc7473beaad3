// CPU convolutions: tec's im2col + GEMM and both oneDNN forms (DnnlConv) against a direct double-precision
// convolution, over the shapes models have (depthwise with stride and odd pads, grouped, dilated, 1x1, a
// batch, a 1-D conv as H = 1).
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/DnnlConv.h"
#include "kernels/cpu/ThreadPool.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <map>
#include <set>
#include <vector>

using namespace tec::kernels;
using namespace tec::kernels::cpu;

namespace {

struct ConvCase {
  const char *name;
  Window w;
  bool bias;
};

Window window(int64_t n, int64_t c, int64_t h, int64_t wd, int64_t oc, int64_t k, int64_t stride, int64_t padTop,
              int64_t padLeft, int64_t padBottom, int64_t padRight, int64_t dilation, int64_t groups, int64_t kw = 0) {
  Window w;
  w.batch = n, w.channels = c, w.height = h, w.width = wd, w.outChannels = oc, w.kernelH = k, w.kernelW = kw ? kw : k;
  w.strideH = w.strideW = stride, w.padTop = padTop, w.padLeft = padLeft, w.padBottom = padBottom, w.padRight = padRight;
  w.dilationH = w.dilationW = dilation, w.groups = groups;
  w.outHeight = windowOutput(h, w.kernelH, stride, padTop, padBottom, dilation, false);
  w.outWidth = windowOutput(wd, w.kernelW, stride, padLeft, padRight, dilation, false);
  return w;
}

std::vector<double> reference(const Window &w, const std::vector<float> &x, const std::vector<float> &weight,
                              const float *bias) {
  std::vector<double> y(w.batch * w.outChannels * w.outHeight * w.outWidth);
  const int64_t cg = w.groupChannels(), og = w.groupOutChannels();
  for (int64_t n = 0; n < w.batch; ++n)
    for (int64_t m = 0; m < w.outChannels; ++m)
      for (int64_t oy = 0; oy < w.outHeight; ++oy)
        for (int64_t ox = 0; ox < w.outWidth; ++ox) {
          double acc = bias ? bias[m] : 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ky = 0; ky < w.kernelH; ++ky)
              for (int64_t kx = 0; kx < w.kernelW; ++kx) {
                const int64_t iy = w.inputRow(oy, ky), ix = w.inputCol(ox, kx);
                if (w.inside(iy, ix))
                  acc += double(x[((n * w.channels + (m / og) * cg + c) * w.height + iy) * w.width + ix]) *
                         weight[((m * cg + c) * w.kernelH + ky) * w.kernelW + kx];
              }
          y[((n * w.outChannels + m) * w.outHeight + oy) * w.outWidth + ox] = acc;
        }
  return y;
}

/// The largest error relative to the expected value, where values that cancel to near zero are held to
/// 1e-2 of the output's largest (float sums of hundreds of products round at that scale, not at their own).
template <typename T> double worstError(const std::vector<float> &got, const std::vector<T> &want) {
  double largest = 0, worst = 0;
  for (T v : want)
    largest = std::max(largest, std::abs(double(v)));
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / (1e-2 * largest + std::abs(double(want[i]))));
  return worst;
}

/// A convolution's input, weight and bias, normal-distributed from `seed`.
struct ConvOperands {
  std::vector<float> x, weight, bias;
  ConvOperands(const Window &w, unsigned seed)
      : x(w.batch * w.channels * w.height * w.width), weight(w.outChannels * w.groupChannels() * w.kernelH * w.kernelW),
        bias(w.outChannels) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (auto *v : {&x, &weight, &bias})
      for (float &e : *v)
        e = normal(rng);
  }
};

class Convolutions : public ::testing::TestWithParam<ConvCase> {};

/// The parts of y that DnnlConv::run hands its epilogue (on 2 threads) cover every element exactly once, and
/// each thread that ran a part ran oneDNN single-threaded (an OpenMP team of its own inside tec's pool
/// oversubscribes the cores: MobileNetV3 ran 4x slower at 2 threads than at 1).
void expectPartsCoverTheOutputOnce(const DnnlConv &dnnl, const float *x, const float *weight, const float *bias,
                                   std::vector<float> &y, const std::string &name) {
  std::vector<int> seen(y.size(), 0);
  std::atomic<int> ompThreads{0};
  setPoolThreads(2);
  dnnl.run(x, weight, bias, y.data(), [&](int64_t offset, int64_t rows, int64_t cols, int64_t stride) {
    ompThreads = std::max(ompThreads.load(), omp_get_max_threads());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ++seen[offset + r * stride + c];
  });
  setPoolThreads(0);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(seen.size()))
      << name << ": the epilogue's parts must cover the output once";
  EXPECT_EQ(ompThreads.load(), 1) << name << ": oneDNN may start OpenMP threads inside tec's pool";
}

/// Every DnnlConv that DnnlConv::fastest may choose for `w`, named: the blocked form, and the plain one by
/// each implementation oneDNN offers among its first few (the first always; fewer where it has fewer).
std::vector<std::pair<std::string, std::unique_ptr<DnnlConv>>> oneDnnCandidates(const Window &w, bool bias,
                                                                               bool channelsLast) {
  std::vector<std::pair<std::string, std::unique_ptr<DnnlConv>>> out;
  auto add = [&](const char *form, std::unique_ptr<DnnlConv> conv) {
    if (conv)
      out.emplace_back(form + conv->implementation(), std::move(conv));
  };
  add("blocked ", DnnlConv::create(w, bias, DnnlConv::Form::Blocked, channelsLast));
  for (int k = 0; k < DnnlConv::kPlainAlternatives; ++k)
    add("plain ", DnnlConv::create(w, bias, DnnlConv::Form::Plain, channelsLast, k));
  return out;
}

TEST_P(Convolutions, EveryFormMatchesADirectConvolution) {
  ASSERT_TRUE(blas().loaded) << blas().library; // tec's loop multiplies with the BLAS
  const ConvCase &c = GetParam();
  const Window &w = c.w;
  const ConvOperands o(w, 11);
  const std::vector<float> &x = o.x, &weight = o.weight;
  const float *b = c.bias ? o.bias.data() : nullptr;
  const auto want = reference(w, x, weight, b);
  auto check = [&](const std::vector<float> &got, const std::string &form) {
    EXPECT_LE(worstError(got, want), 1e-3) << form;
  };
  std::vector<float> y(want.size(), NAN);
  conv(w, x.data(), weight.data(), b, y.data());
  check(y, "tec");
  const auto candidates = oneDnnCandidates(w, c.bias, /*channelsLast=*/false);
  if (!DnnlConv::unavailable().empty()) {
    EXPECT_TRUE(candidates.empty());
    GTEST_SKIP() << "oneDNN: " << DnnlConv::unavailable();
  }
  ASSERT_GE(candidates.size(), 2u) << "oneDNN refused the convolution (its blocked form and a plain one at least)";
  for (const auto &[name, dnnl] : candidates) {
    std::fill(y.begin(), y.end(), NAN);
    dnnl->run(x.data(), weight.data(), b, y.data());
    check(y, name);
    expectPartsCoverTheOutputOnce(*dnnl, x.data(), weight.data(), b, y, name);
  }
}

/// `nchw` [n, c, h, w] as [n, h, w, c].
std::vector<float> toChannelsLast(const std::vector<float> &nchw, int64_t n, int64_t c, int64_t h, int64_t w) {
  std::vector<float> out(nchw.size());
  transpose(nchw.data(), {n, c, h, w}, {0, 2, 3, 1}, out.data(), sizeof(float));
  return out;
}

// tec-channels-last's convolutions: NHWC in and out, the weight as ever; oneDNN cuts a large image into
// bands of rows for tec's pool, and every band's sums are the same at any thread count.
// A kernel called before anything loaded the BLAS (a GPU test's CPU reference, a tool) loads it itself:
// the GPU machine's first run found cpu::conv reading an empty table of GEMM functions. ctest runs each
// test in its own process, so nothing here has called blas() before.
TEST(Convolution, LoadsTheBlasItselfWhenCalledFirst) {
  const Window w = window(2, 4, 11, 9, 6, 3, 2, 2, 1, 2, 1, 2, 2, 2);
  const ConvOperands o(w, 3);
  std::vector<float> y(w.batch * w.outChannels * w.outHeight * w.outWidth, NAN);
  conv(w, o.x.data(), o.weight.data(), nullptr, y.data());
  ASSERT_TRUE(blas().loaded) << blas().library;
  EXPECT_LE(worstError(y, reference(w, o.x, o.weight, nullptr)), 1e-3);
}

TEST_P(Convolutions, ChannelsLastMatchesADirectConvolutionAtAnyThreadCount) {
  ASSERT_TRUE(blas().loaded) << blas().library;
  const ConvCase &c = GetParam();
  const Window &w = c.w;
  const ConvOperands o(w, 12);
  const std::vector<float> &x = o.x, &weight = o.weight;
  const float *b = c.bias ? o.bias.data() : nullptr;
  std::vector<float> wantNchw;
  for (double v : reference(w, x, weight, b))
    wantNchw.push_back(static_cast<float>(v));
  const auto want = toChannelsLast(wantNchw, w.batch, w.outChannels, w.outHeight, w.outWidth);
  const auto xLast = toChannelsLast(x, w.batch, w.channels, w.height, w.width);
  auto check = [&](const std::vector<float> &got, const std::string &form) {
    EXPECT_LE(worstError(got, want), 1e-3) << form;
  };
  std::vector<float> y(want.size(), NAN);
  convChannelsLast(w, xLast.data(), weight.data(), b, y.data());
  check(y, "tec");
  const auto candidates = oneDnnCandidates(w, c.bias, /*channelsLast=*/true);
  if (!DnnlConv::unavailable().empty())
    GTEST_SKIP() << "oneDNN: " << DnnlConv::unavailable();
  ASSERT_GE(candidates.size(), 2u) << "oneDNN refused the convolution (its blocked form and a plain one at least)";
  for (const auto &[name, dnnl] : candidates) {
    std::vector<std::vector<float>> runs;
    for (int threads : {1, 2}) {
      setPoolThreads(threads);
      std::fill(y.begin(), y.end(), NAN);
      dnnl->run(xLast.data(), weight.data(), b, y.data());
      check(y, name);
      runs.push_back(y);
    }
    setPoolThreads(0);
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), y.size() * sizeof(float)), 0) << name << ": 1 and 2 threads differ";
    expectPartsCoverTheOutputOnce(*dnnl, xLast.data(), weight.data(), b, y, name);
    // A constant weight laid out once: later runs read that layout, whatever pointer they pass.
    dnnl->fixWeight(weight.data());
    std::vector<float> garbage(weight.size(), NAN);
    std::fill(y.begin(), y.end(), NAN);
    dnnl->run(xLast.data(), garbage.data(), b, y.data());
    check(y, name + " with its weight fixed");
  }
}

// oneDNN 2 offers the implementations its primitive cache holds ahead of their places in its list: the nth
// implementation must not depend on what the process made before, or a choice measured once (and kept on
// disk) would run another kernel for a later conv of the same shape.
TEST(Convolution, TheNthImplementationIsTheSameWhateverWasMadeBefore) {
  const Window w = window(1, 144, 20, 20, 144, 3, 1, 1, 1, 1, 1, 1, 144);
  if (!DnnlConv::unavailable().empty())
    GTEST_SKIP() << "oneDNN: " << DnnlConv::unavailable();
  auto implementation = [&](int k) {
    auto conv = DnnlConv::create(w, true, DnnlConv::Form::Plain, /*channelsLast=*/true, k);
    return conv ? conv->implementation() : std::string("none");
  };
  // Made out of order (oneDNN 2.6 then offered jit_dw:avx2, cached, ahead of jit:avx512_core), then in order.
  std::map<int, std::string> outOfOrder;
  for (int k : {3, 0, 2, 1})
    outOfOrder[k] = implementation(k);
  std::set<std::string> distinct;
  for (const auto &[k, name] : outOfOrder)
    distinct.insert(name);
  EXPECT_EQ(distinct.size(), outOfOrder.size()) << "each alternative a different implementation";
  for (int k = 0; k < DnnlConv::kPlainAlternatives; ++k)
    EXPECT_EQ(implementation(k), outOfOrder[k]) << "alternative " << k;
}

// A depthwise conv's weight is read once per band, no more than the band's input: a small image with many
// channels (EfficientNet's 7x7 stage, 1152 channels) is cut into bands too, where a dense weight that size
// would keep it whole.
TEST(Convolution, ADepthwiseConvOverASmallImageStillBands) {
  const Window w = window(1, 1152, 7, 7, 1152, 5, 1, 2, 2, 2, 2, 1, 1152);
  const ConvOperands o(w, 5);
  auto dnnl = DnnlConv::create(w, true, DnnlConv::Form::Plain, /*channelsLast=*/true);
  if (!DnnlConv::unavailable().empty())
    GTEST_SKIP() << "oneDNN: " << DnnlConv::unavailable();
  ASSERT_NE(dnnl, nullptr);
  std::vector<float> y(w.outChannels * w.outHeight * w.outWidth, NAN);
  int parts = 0;
  dnnl->run(o.x.data(), o.weight.data(), o.bias.data(), y.data(), [&](int64_t, int64_t, int64_t, int64_t) { ++parts; });
  EXPECT_EQ(parts, 2); // 7 rows: at most along / 2 bands, an even count (3 left 2 threads at 2:1)
}

const ConvCase kCases[] = {
    {"depthwise_3x3", window(2, 16, 9, 7, 16, 3, 1, 1, 1, 1, 1, 1, 16), true},
    {"depthwise_5x5_stride2_odd_pads", window(1, 24, 11, 10, 24, 5, 2, 2, 1, 1, 2, 1, 24), false},
    {"grouped_dilated", window(2, 12, 10, 10, 18, 3, 1, 2, 2, 2, 2, 2, 3), true},
    {"pointwise", window(3, 20, 6, 6, 12, 1, 1, 0, 0, 0, 0, 1, 1), true},
    {"dense_3x3_stride2", window(2, 5, 13, 12, 8, 3, 2, 1, 1, 0, 1, 1, 1), false},
    {"conv1d_as_h1", window(2, 6, 1, 17, 4, 1, 3, 0, 2, 0, 1, 1, 1, 5), true},
    // Large enough for oneDNN bands of rows, or of columns for a 1-D image (each band's input and pads cut
    // from the image's).
    {"banded_3x3_stride2_odd_pads", window(1, 8, 161, 45, 16, 3, 2, 1, 0, 2, 1, 1, 1), true},
    {"conv1d_stride2_long", window(1, 32, 1, 3001, 48, 1, 2, 0, 4, 0, 3, 1, 1, 9), true},
    {"conv1d_depthwise_dilated", window(2, 64, 1, 999, 64, 1, 1, 0, 6, 0, 5, 3, 64, 5), false},
    {"banded_depthwise_dilated", window(2, 128, 48, 48, 128, 3, 1, 2, 2, 2, 2, 2, 128), false},
    // A depthwise weight outweighing the image's rows (EfficientNet's 7x7 stage) still bands: 2 bands of rows.
    {"banded_depthwise_small_image", window(1, 1152, 7, 7, 1152, 5, 1, 2, 2, 2, 2, 1, 1152), true},
    // Too weight-heavy for bands: slices of output channels (the last one narrower), each its own weight.
    {"sliced_3x3", window(1, 64, 7, 7, 96, 3, 1, 1, 1, 1, 1, 1, 1), true},
    {"sliced_uneven_stride2", window(2, 128, 9, 9, 100, 3, 2, 1, 1, 1, 1, 1, 1), false},
};

INSTANTIATE_TEST_SUITE_P(Cpu, Convolutions, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return std::string(info.param.name); });

} // namespace

namespace {

// tec-channels-last's pools against pool() over the same image in NCHW (pool() is held to ONNX's node tests):
// the same bits, for max (a NaN among the cells wins) and average (pads counted or not), with a ceil-mode
// output, odd pads and dilation.
TEST(ChannelsLastPool, HasTheBitsOfTheNchwPool) {
  Window w;
  w.batch = 2, w.channels = 19, w.height = 11, w.width = 9, w.outChannels = 19;
  w.kernelH = 3, w.kernelW = 2, w.strideH = 2, w.strideW = 2, w.padTop = 1, w.padLeft = 0, w.padBottom = 1,
  w.padRight = 1, w.dilationH = 2, w.dilationW = 1;
  w.outHeight = windowOutput(w.height, w.kernelH, w.strideH, w.padTop, w.padBottom, w.dilationH, true);
  w.outWidth = windowOutput(w.width, w.kernelW, w.strideW, w.padLeft, w.padRight, w.dilationW, true);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  std::vector<float> x(w.batch * w.channels * w.height * w.width);
  for (float &v : x)
    v = normal(rng);
  x[5 * w.width + 4] = NAN; // image 0, channel 0
  const auto xLast = toChannelsLast(x, w.batch, w.channels, w.height, w.width);
  for (bool max : {true, false})
    for (bool includePad : {false, true}) {
      std::vector<float> want(w.batch * w.channels * w.outHeight * w.outWidth), got(want.size());
      pool(w, max, includePad, x.data(), want.data());
      poolChannelsLast(w, max, includePad, xLast.data(), got.data());
      const auto wantLast = toChannelsLast(want, w.batch, w.channels, w.outHeight, w.outWidth);
      EXPECT_EQ(std::memcmp(got.data(), wantLast.data(), got.size() * sizeof(float)), 0)
          << (max ? "max" : "avg") << (includePad ? " counting pads" : "");
    }
}

} // namespace
