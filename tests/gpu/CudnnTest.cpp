// cuDNN as the CUDA backend loads it (kernels/cuda/Cudnn.h): the library and every entry point resolve
// where cuDNN 9 is installed (no GPU needed), and on a GPU each convolution kind, through the algorithm
// tec chose, and the fused attention forward and backward (kernels/cuda/CudnnAttention.h) match the CPU
// kernels on seeded data. Skipped (visibly) where cuDNN or a device is missing.
#include "support/Half.h"
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cuda/Cudnn.h"
#include "kernels/cuda/CudnnAttention.h"

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

namespace {

std::vector<uint16_t> toBf16(const std::vector<float> &x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = floatToBf16(x[i]);
  return y;
}

std::vector<float> fromBf16(const std::vector<uint16_t> &x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = bf16ToFloat(x[i]);
  return y;
}

void *upload(const std::vector<uint16_t> &host) {
  void *device = nullptr;
  cudaMalloc(&device, host.size() * 2);
  cudaMemcpy(device, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
  return device;
}

} // namespace

/// Grouped-query causal attention in bf16, forward and backward, against the CPU kernel run on the same
/// bf16 values in f32: within bf16's rounding of the outputs (2^-8 relative, of the tensor's scale).
TEST(Cudnn, FusedAttentionMatchesTheCpuKernel) {
  if (!tec::kernels::cpu::blas().loaded)
    GTEST_SKIP() << "no BLAS for the CPU reference";
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
  AttentionShape a;
  a.batch = 2, a.heads = 4, a.kvHeads = 2, a.queries = a.keys = 192, a.headDim = a.valueDim = 64;
  a.scale = 0.125f, a.causal = true;
  const size_t qn = a.batch * a.heads * a.queries * a.headDim, kn = a.batch * a.kvHeads * a.keys * a.headDim;
  const auto q = toBf16(seeded(qn, 11)), k = toBf16(seeded(kn, 12)), v = toBf16(seeded(kn, 13)),
             dout = toBf16(seeded(qn, 14));
  const auto qf = fromBf16(q), kf = fromBf16(k), vf = fromBf16(v), doutf = fromBf16(dout);
  std::vector<float> out(qn), lse(qn / a.headDim), dq(qn), dk(kn), dv(kn);
  tec::kernels::cpu::attention(a, qf.data(), kf.data(), vf.data(), nullptr, out.data(), lse.data());
  auto forward = CudnnAttention::create(*handle, {a, ElementType::BF16, false}, why);
  if (!forward)
    GTEST_SKIP() << "cuDNN has no fused attention engine here: " << why;
  auto backward = CudnnAttention::create(*handle, {a, ElementType::BF16, true}, why);
  ASSERT_TRUE(backward) << why;
  AttentionOperands o;
  o.q = upload(q), o.k = upload(k), o.v = upload(v), o.dout = upload(dout);
  cudaMalloc(&o.out, qn * 2), cudaMalloc(&o.lse, lse.size() * 4);
  cudaMalloc(&o.dq, qn * 2), cudaMalloc(&o.dk, kn * 2), cudaMalloc(&o.dv, kn * 2);
  void *workspace = nullptr;
  cudaMalloc(&workspace, std::max<size_t>(1, std::max(forward->workspaceBytes(), backward->workspaceBytes())));
  ASSERT_TRUE(forward->run(o, workspace, why)) << why;
  std::vector<uint16_t> outDevice(qn);
  std::vector<float> lseDevice(lse.size());
  cudaMemcpyAsync(outDevice.data(), o.out, qn * 2, cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(lseDevice.data(), o.lse, lse.size() * 4, cudaMemcpyDeviceToHost, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  // The backward from the CPU's forward in bf16 (what a bf16 plan keeps), on both sides.
  const auto outBf16 = toBf16(out);
  cudaMemcpy(o.out, outBf16.data(), qn * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(o.lse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice);
  const auto outRounded = fromBf16(outBf16);
  tec::kernels::cpu::attentionGrad(a, doutf.data(), qf.data(), kf.data(), vf.data(), outRounded.data(), lse.data(),
                                   nullptr, dq.data(), dk.data(), dv.data());
  ASSERT_TRUE(backward->run(o, workspace, why)) << why;
  std::vector<uint16_t> dqDevice(qn), dkDevice(kn), dvDevice(kn);
  cudaMemcpyAsync(dqDevice.data(), o.dq, qn * 2, cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(dkDevice.data(), o.dk, kn * 2, cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(dvDevice.data(), o.dv, kn * 2, cudaMemcpyDeviceToHost, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  auto expectClose = [](const std::vector<float> &got, const std::vector<float> &want, const char *what) {
    float scale = 1e-20f, worst = 0;
    for (float w : want)
      scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, scale / 64) << what << ": largest difference " << worst << " of " << scale;
  };
  expectClose(fromBf16(outDevice), out, "output");
  expectClose(lseDevice, lse, "logsumexp");
  expectClose(fromBf16(dqDevice), dq, "dq");
  expectClose(fromBf16(dkDevice), dk, "dk");
  expectClose(fromBf16(dvDevice), dv, "dv");
  for (void *p : {const_cast<void *>(o.q), const_cast<void *>(o.k), const_cast<void *>(o.v),
                  const_cast<void *>(o.dout), o.out, static_cast<void *>(o.lse), o.dq, o.dk, o.dv, workspace})
    cudaFree(p);
  forward.reset(), backward.reset(), handle.reset();
  cudaStreamDestroy(stream);
}
