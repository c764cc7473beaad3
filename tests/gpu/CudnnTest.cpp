// cuDNN as the CUDA backend loads it (kernels/cuda/Cudnn.h): the library and every entry point resolve
// where cuDNN 9 is installed (no GPU needed), and on a GPU each convolution kind, through the algorithm
// tec chose, matches the CPU kernels on seeded data. Skipped (visibly) where cuDNN or a device is missing.
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cuda/Cudnn.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace tec::kernels;
using namespace tec::kernels::cuda;

namespace {

bool haveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::vector<float> seeded(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float &x : v)
    x = normal(rng);
  return v;
}

/// A grouped, strided, dilated convolution with symmetric pads (what cuDNN takes).
Window grouped() {
  Window w;
  w.batch = 2, w.channels = 4, w.height = 11, w.width = 9, w.outChannels = 6, w.groups = 2;
  w.kernelH = 3, w.kernelW = 2, w.strideH = 2, w.strideW = 1, w.dilationH = 2, w.dilationW = 1;
  w.padTop = w.padBottom = 2, w.padLeft = w.padRight = 1;
  w.outHeight = windowOutput(w.height, w.kernelH, w.strideH, w.padTop, w.padBottom, w.dilationH, false);
  w.outWidth = windowOutput(w.width, w.kernelW, w.strideW, w.padLeft, w.padRight, w.dilationW, false);
  return w;
}

} // namespace

TEST(Cudnn, LoadsWithEveryEntryPoint) {
  std::string why;
  const CudnnApi *api = loadCudnn(why);
  if (!api)
    GTEST_SKIP() << "cuDNN not loadable here: " << why;
  EXPECT_GE(cudnnLoadedVersion(*api), 90000u);
}

TEST(Cudnn, ConvolutionsMatchTheCpuKernels) {
  std::string why;
  const CudnnApi *api = loadCudnn(why);
  if (!api)
    GTEST_SKIP() << "cuDNN not loadable here: " << why;
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto handle = CudnnHandle::create(*api, stream, why);
  ASSERT_TRUE(handle) << why;
  const Window w = grouped();
  const size_t xs = w.batch * w.channels * w.height * w.width, ys = w.batch * w.outChannels * w.outHeight * w.outWidth,
               ws = w.outChannels * w.groupChannels() * w.kernelH * w.kernelW;
  const auto x = seeded(xs, 1), weight = seeded(ws, 2), dy = seeded(ys, 3);
  std::vector<float> y(ys), dx(xs), dw(ws);
  cpu::conv(w, x.data(), weight.data(), nullptr, y.data());
  cpu::convInputGrad(w, dy.data(), weight.data(), dx.data());
  cpu::convWeightGrad(w, dy.data(), x.data(), dw.data());
  struct Case {
    WindowKind kind;
    const std::vector<float> &a, &b, &want;
  } cases[] = {{WindowKind::Conv, x, weight, y}, {WindowKind::ConvInputGrad, dy, weight, dx},
               {WindowKind::ConvWeightGrad, dy, x, dw}};
  for (const Case &c : cases) {
    auto conv = Convolution::create(*handle, {c.kind, w, ElementType::F32, false}, why);
    ASSERT_TRUE(conv) << why;
    float *a, *b, *out;
    void *workspace = nullptr;
    cudaMalloc(&a, c.a.size() * 4), cudaMalloc(&b, c.b.size() * 4), cudaMalloc(&out, c.want.size() * 4);
    if (conv->workspaceBytes())
      cudaMalloc(&workspace, conv->workspaceBytes());
    cudaMemcpy(a, c.a.data(), c.a.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, c.b.data(), c.b.size() * 4, cudaMemcpyHostToDevice);
    ASSERT_TRUE(conv->run(a, b, out, workspace, why)) << why;
    std::vector<float> got(c.want.size());
    ASSERT_EQ(cudaMemcpyAsync(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    // FMA kernels in another summation order: a few ulps of the sum's magnitude.
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], c.want[i], 1e-4f * (1.0f + std::fabs(c.want[i]))) << "kind " << int(c.kind) << " at " << i;
    cudaFree(a), cudaFree(b), cudaFree(out), cudaFree(workspace);
  }
  handle.reset();
  cudaStreamDestroy(stream);
}
