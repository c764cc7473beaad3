// Raw GEMM throughput through tec's cuBLASLt path (kernels/cuda/Gemm.h): FP8 E4M3 x E4M3 -> BF16 (the
// forward GEMM of an FP8 Linear, TN, fast accumulation) and BF16 x BF16 -> BF16, square sizes; and the
// block-scaled FP8 GEMM (Transformer Engine's Float8BlockScaling: 1x128 activation blocks, 128x128 weight
// tiles) at 4096 on tec's kernel and on cuBLASLt's block scale modes. Prints one JSON object per case; bench/gpu/bench.py runs torch._scaled_mm (with the same
// block scales for the block-scaled case) and torch.matmul beside it.
#include "kernels/cuda/Fp8Kernels.h"
#include "kernels/cuda/Gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kc = tec::kernels::cuda;
using tec::kernels::ElementType;

/// The block-scaled GEMM y[n, n] (bf16) = x[n, n] · w[n, n]ᵀ with every block scale 1 (the codes as
/// tec-gemm-bench's FP8 case: small normal values; the time does not depend on them), on tec's kernel and on
/// cuBLASLt's block scale modes (VEC128_32F x BLK128x128_32F, cuBLASLt 12.9 on Hopper) as the CUDA backend
/// runs them: the scales moved into cuBLASLt's layout, then the GEMM, each iteration.
void blockScaledGemm(int64_t size, int iterations, cublasLtHandle_t lt, void *workspace, size_t workspaceBytes,
                     cudaStream_t stream) {
  const int64_t blocks = size / 128;
  uint8_t *x, *w;
  float *xScales, *wScales, *xCublas, *wCublas;
  void *y;
  cudaMalloc(&x, size * size);
  cudaMalloc(&w, size * size);
  cudaMalloc(&y, size * size * 2);
  cudaMalloc(&xScales, size * blocks * sizeof(float));
  cudaMalloc(&wScales, blocks * blocks * sizeof(float));
  cudaMalloc(&xCublas, kc::cublasScaleCount(kc::GemmScaling::Vec128, size, blocks) * sizeof(float));
  cudaMalloc(&wCublas, kc::cublasScaleCount(kc::GemmScaling::Block128x128, blocks, blocks) * sizeof(float));
  cudaMemset(x, 0x38, size * size); // E4M3 1.0
  cudaMemset(w, 0x30, size * size); // E4M3 0.5
  std::vector<float> ones(size * blocks, 1.0f);
  cudaMemcpy(xScales, ones.data(), size * blocks * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(wScales, ones.data(), blocks * blocks * sizeof(float), cudaMemcpyHostToDevice);
  auto report = [&](const char *kernel, const std::function<bool(std::string &)> &run) {
    std::string error;
    bool ok = run(error);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream);
    for (int i = 0; i < iterations && ok; ++i)
      ok = run(error);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const cudaError_t status = cudaGetLastError();
    if (ok && status != cudaSuccess)
      ok = false, error = cudaGetErrorString(status);
    const double seconds = ms / 1e3 / iterations;
    if (!ok)
      std::printf("{\"gemm\": \"fp8_block_1x128_128x128\", \"size\": %lld, \"ok\": false, \"kernel\": \"%s\", "
                  "\"error\": \"%s\"}\n",
                  static_cast<long long>(size), kernel, error.c_str());
    else
      std::printf("{\"gemm\": \"fp8_block_1x128_128x128\", \"size\": %lld, \"ok\": true, \"ms\": %.4f, "
                  "\"tflops\": %.1f, \"kernel\": \"%s\"}\n",
                  static_cast<long long>(size), seconds * 1e3, 2.0 * size * size * size / seconds / 1e12, kernel);
  };
  report("tec", [&](std::string &) {
    kc::fp8BlockGemm(x, xScales, 1, 128, tec::kernels::Fp8Format::E4M3, w, wScales, 128, 128,
                     tec::kernels::Fp8Format::E4M3, /*transposeB=*/true, {}, kc::Ref{y, ElementType::BF16}, size, size,
                     size, tec::kernels::Epilogue::None, stream);
    return true;
  });
  kc::GemmSpec spec;
  spec.m = spec.n = spec.k = size;
  spec.transposeB = true;
  spec.a = spec.b = ElementType::F8E4M3;
  spec.d = ElementType::BF16;
  spec.scalingA = kc::GemmScaling::Vec128;
  spec.scalingB = kc::GemmScaling::Block128x128;
  std::string error;
  std::unique_ptr<kc::Gemm> gemm;
  if (kc::cublasLtSupports(spec, error))
    gemm = kc::Gemm::create(lt, spec, workspaceBytes, error);
  if (!gemm) {
    report("cublaslt", [&](std::string &why) {
      why = error;
      return false;
    });
  } else {
    report("cublaslt", [&](std::string &why) {
      kc::toCublasBlockScales(xScales, xCublas, kc::GemmScaling::Vec128, size, blocks, stream);
      kc::toCublasBlockScales(wScales, wCublas, kc::GemmScaling::Block128x128, blocks, blocks, stream);
      kc::GemmOperands o;
      o.a = x, o.b = w, o.d = y;
      o.aScaleInv = xCublas, o.bScaleInv = wCublas;
      return gemm->run(o, workspace, stream, why);
    });
  }
  for (void *p : {static_cast<void *>(x), static_cast<void *>(w), y, static_cast<void *>(xScales),
                  static_cast<void *>(wScales), static_cast<void *>(xCublas), static_cast<void *>(wCublas)})
    cudaFree(p);
}

int main(int argc, char **argv) {
  int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  const size_t workspaceBytes = kc::gemmWorkspaceBytes(major);
  void *workspace;
  cudaMalloc(&workspace, workspaceBytes);
  for (int64_t size : {4096, 8192, 16384}) {
    for (ElementType type : {ElementType::F8E4M3, ElementType::BF16}) {
      const bool fp8 = type == ElementType::F8E4M3;
      const size_t elem = fp8 ? 1 : 2;
      void *a, *b, *d;
      float *scales;
      cudaMalloc(&a, size * size * elem);
      cudaMalloc(&b, size * size * elem);
      cudaMalloc(&d, size * size * 2);
      // Each scale 256 bytes from the other, as a plan's buffers are: with B's 4 bytes past A's, every FP8
      // algorithm cuBLASLt offered failed with NOT_SUPPORTED on an H200 (2026-12-04).
      constexpr int kScaleStride = 64;
      cudaMalloc(&scales, 2 * kScaleStride * sizeof(float));
      // Random bytes: for FP8 a few are NaN codes, so mask them into small normal values.
      std::vector<uint8_t> host(size * size * elem);
      uint32_t state = 12345;
      for (auto &byte : host) {
        state = state * 1664525u + 1013904223u;
        byte = static_cast<uint8_t>((state >> 24) & (fp8 ? 0x3F : 0xFF)) | (fp8 ? (state & 0x80) : 0);
      }
      if (!fp8) // bf16: keep exponents moderate (every second byte is a high byte)
        for (size_t i = 1; i < host.size(); i += 2)
          host[i] = static_cast<uint8_t>(0x3C | (host[i] & 0x80));
      cudaMemcpy(a, host.data(), host.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(b, host.data(), host.size(), cudaMemcpyHostToDevice);
      const float one = 1.0f;
      for (int i = 0; i < 2; ++i)
        cudaMemcpy(scales + i * kScaleStride, &one, sizeof(one), cudaMemcpyHostToDevice);
      kc::GemmSpec spec;
      spec.m = spec.n = spec.k = size;
      spec.transposeB = true;
      spec.a = spec.b = type;
      spec.d = ElementType::BF16;
      spec.fastAccumulation = true;
      std::string error;
      auto gemm = kc::Gemm::create(lt, spec, workspaceBytes, error);
      if (!gemm) {
        std::printf("{\"gemm\": \"%s\", \"size\": %lld, \"error\": \"%s\"}\n", fp8 ? "fp8_e4m3" : "bf16",
                    static_cast<long long>(size), error.c_str());
        continue;
      }
      kc::GemmOperands o;
      o.a = a, o.b = b, o.d = d;
      if (fp8)
        o.aScaleInv = scales, o.bScaleInv = scales + kScaleStride;
      bool ok = true;
      for (int i = 0; i < 5 && ok; ++i)
        ok = gemm->run(o, workspace, stream, error);
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      cudaEventRecord(start, stream);
      for (int i = 0; i < iterations && ok; ++i)
        ok = gemm->run(o, workspace, stream, error);
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      const cudaError_t status = cudaGetLastError();
      if (ok && status != cudaSuccess)
        ok = false, error = cudaGetErrorString(status);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      double seconds = ms / 1e3 / iterations;
      // A failed run measured nothing: no time, only why.
      if (!ok)
        std::printf("{\"gemm\": \"%s\", \"size\": %lld, \"ok\": false, \"error\": \"%s\", \"algorithms\": %zu}\n",
                    fp8 ? "fp8_e4m3" : "bf16", static_cast<long long>(size), error.c_str(), gemm->algorithmCount());
      else
        std::printf("{\"gemm\": \"%s\", \"size\": %lld, \"ok\": true, \"ms\": %.4f, \"tflops\": %.1f, \"algorithms\": %zu}\n",
                    fp8 ? "fp8_e4m3" : "bf16", static_cast<long long>(size), seconds * 1e3,
                    2.0 * size * size * size / seconds / 1e12, gemm->algorithmCount());
      for (void *p : {a, b, d, static_cast<void *>(scales)})
        cudaFree(p);
    }
  }
  blockScaledGemm(4096, iterations, lt, workspace, workspaceBytes, stream);
  return 0;
}
