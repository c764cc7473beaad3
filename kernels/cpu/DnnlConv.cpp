#include "kernels/cpu/DnnlConv.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/ThreadPool.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#if TEC_HAVE_ONEDNN_HEADERS
#include "kernels/cpu/OneDnn.h"
#endif

namespace tec::kernels::cpu {

#if TEC_HAVE_ONEDNN_HEADERS

namespace {

/// Floats from `offset` rounded up to a cache line.
size_t aligned(size_t floats) { return (floats + 15) / 16 * 16; }

/// This thread's oneDNN stream (streams are not shared between threads).
dnnl_stream_t threadStream() {
  thread_local dnnl_stream_t stream = [] {
    dnnl_stream_t s = nullptr;
    oneDnn().dnnl_stream_create(&s, oneDnn().engine, dnnl_stream_default_flags);
    return s;
  }();
  return stream;
}

/// oneDNN on `threads` OpenMP threads while it lives (1: inside a chunk of tec's pool).
class OmpThreads {
public:
  explicit OmpThreads(int threads) : previous(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(previous); }

private:
  int previous;
};

} // namespace

/// The convolution of one image, the reorders around it (Blocked), and the sizes each run carves out of the
/// thread's scratch: the image and output in oneDNN's layouts, and the primitive's scratchpad.
struct DnnlConv::Primitives {
  dnnl_primitive_t conv = nullptr, srcIn = nullptr, dstOut = nullptr, weightIn = nullptr;
  dnnl_memory_desc_t userSrc{}, userDst{}, userWeight{}, bias{}, src{}, dst{}, weight{}, scratchpad{};
  size_t srcFloats = 0, dstFloats = 0, scratchFloats = 0;
  mutable std::vector<float> reorderedWeight;
  ~Primitives() {
    for (dnnl_primitive_t p : {conv, srcIn, dstOut, weightIn})
      if (p)
        oneDnn().dnnl_primitive_destroy(p);
  }
};

const std::string &DnnlConv::unavailable() { return oneDnn().problem; }

namespace {

dnnl_primitive_t reorder(const dnnl_memory_desc_t &from, const dnnl_memory_desc_t &to) {
  const OneDnn &d = oneDnn();
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t p = nullptr;
  if (d.dnnl_reorder_primitive_desc_create(&pd, &from, d.engine, &to, d.engine, nullptr) == dnnl_success)
    d.dnnl_primitive_create(&p, pd);
  if (pd)
    d.dnnl_primitive_desc_destroy(pd);
  return p;
}

/// Runs `p` with (argument, descriptor, data) triples, each bound to a memory object for this call.
bool execute(dnnl_primitive_t p, std::initializer_list<std::tuple<int, const dnnl_memory_desc_t *, const void *>> args) {
  const OneDnn &d = oneDnn();
  std::vector<dnnl_exec_arg_t> bound;
  bool ok = true;
  for (const auto &[arg, md, data] : args) {
    dnnl_memory_t m = nullptr;
    ok = ok && d.dnnl_memory_create(&m, md, d.engine, const_cast<void *>(data)) == dnnl_success;
    if (m)
      bound.push_back({arg, m});
  }
  ok = ok && d.dnnl_primitive_execute(p, threadStream(), static_cast<int>(bound.size()), bound.data()) == dnnl_success;
  for (const auto &b : bound)
    d.dnnl_memory_destroy(b.memory);
  return ok;
}

} // namespace

std::unique_ptr<DnnlConv> DnnlConv::create(const Window &w, bool bias, Form form) {
  if (!unavailable().empty())
    return nullptr;
  const OneDnn &d = oneDnn();
  std::unique_ptr<DnnlConv> conv(new DnnlConv);
  conv->window_ = w;
  conv->p_ = std::make_unique<Primitives>();
  Primitives &p = *conv->p_;
  const dnnl_dims_t srcDims = {1, w.channels, w.height, w.width}, dstDims = {1, w.outChannels, w.outHeight, w.outWidth};
  const dnnl_dims_t grouped = {w.groups, w.groupOutChannels(), w.groupChannels(), w.kernelH, w.kernelW};
  const dnnl_dims_t plain = {w.outChannels, w.channels, w.kernelH, w.kernelW}, biasDims = {w.outChannels};
  const bool ok = d.dnnl_memory_desc_init_by_tag(&p.userSrc, 4, srcDims, dnnl_f32, dnnl_nchw) == dnnl_success &&
                  d.dnnl_memory_desc_init_by_tag(&p.userDst, 4, dstDims, dnnl_f32, dnnl_nchw) == dnnl_success &&
                  (w.groups > 1 ? d.dnnl_memory_desc_init_by_tag(&p.userWeight, 5, grouped, dnnl_f32, dnnl_goihw)
                                : d.dnnl_memory_desc_init_by_tag(&p.userWeight, 4, plain, dnnl_f32, dnnl_oihw)) ==
                      dnnl_success &&
                  d.dnnl_memory_desc_init_by_tag(&p.bias, 1, biasDims, dnnl_f32, dnnl_x) == dnnl_success;
  if (!ok)
    return nullptr;
  dnnl_memory_desc_t src = p.userSrc, dst = p.userDst, weight = p.userWeight;
  if (form == Form::Blocked) {
    d.dnnl_memory_desc_init_by_tag(&src, 4, srcDims, dnnl_f32, dnnl_format_tag_any);
    d.dnnl_memory_desc_init_by_tag(&dst, 4, dstDims, dnnl_f32, dnnl_format_tag_any);
    if (w.groups > 1)
      d.dnnl_memory_desc_init_by_tag(&weight, 5, grouped, dnnl_f32, dnnl_format_tag_any);
    else
      d.dnnl_memory_desc_init_by_tag(&weight, 4, plain, dnnl_f32, dnnl_format_tag_any);
  }
  const dnnl_dims_t strides = {w.strideH, w.strideW}, dilations = {w.dilationH - 1, w.dilationW - 1};
  const dnnl_dims_t padBegin = {w.padTop, w.padLeft}, padEnd = {w.padBottom, w.padRight};
  dnnl_convolution_desc_t desc;
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  bool built = d.dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
                                                            &src, &weight, bias ? &p.bias : nullptr, &dst, strides,
                                                            dilations, padBegin, padEnd) == dnnl_success &&
               d.dnnl_primitive_attr_create(&attr) == dnnl_success &&
               d.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
               d.dnnl_primitive_desc_create(&pd, &desc, attr, d.engine, nullptr) == dnnl_success &&
               d.dnnl_primitive_create(&p.conv, pd) == dnnl_success;
  if (built) {
    p.src = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    p.dst = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    p.weight = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    p.scratchpad = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const char *impl = nullptr;
    if (d.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
      conv->implementation_ = impl;
    auto floats = [&](const dnnl_memory_desc_t &md) { return aligned(d.dnnl_memory_desc_get_size(&md) / sizeof(float)); };
    p.scratchFloats = floats(p.scratchpad);
    if (!d.dnnl_memory_desc_equal(&p.src, &p.userSrc)) {
      p.srcFloats = floats(p.src);
      built = (p.srcIn = reorder(p.userSrc, p.src));
    }
    if (built && !d.dnnl_memory_desc_equal(&p.dst, &p.userDst)) {
      p.dstFloats = floats(p.dst);
      built = (p.dstOut = reorder(p.dst, p.userDst));
    }
    if (built && !d.dnnl_memory_desc_equal(&p.weight, &p.userWeight)) {
      p.reorderedWeight.resize(floats(p.weight));
      built = (p.weightIn = reorder(p.userWeight, p.weight));
    }
  }
  if (pd)
    d.dnnl_primitive_desc_destroy(pd);
  if (attr)
    d.dnnl_primitive_attr_destroy(attr);
  return built ? std::move(conv) : nullptr;
}

DnnlConv::~DnnlConv() = default;

void DnnlConv::run(const float *x, const float *weight, const float *bias, float *y) const {
  const Primitives &p = *p_;
  const Window &w = window_;
  // Images spread over tec's pool, oneDNN single-threaded in each: its OpenMP threads beside the pool's
  // would contend for the same cores (a batch of 1 runs on one thread: measured slower with OpenMP's 2).
  OmpThreads single(1);
  if (p.weightIn) { // the weight in oneDNN's layout, once per run (it changes while training)
    execute(p.weightIn, {{DNNL_ARG_FROM, &p.userWeight, weight}, {DNNL_ARG_TO, &p.weight, p.reorderedWeight.data()}});
    oneDnn().dnnl_stream_wait(threadStream());
    weight = p.reorderedWeight.data();
  }
  const int64_t image = w.channels * w.height * w.width, outImage = w.outChannels * w.outHeight * w.outWidth;
  parallelFor(w.batch, 1, [&](int64_t begin, int64_t end) {
    float *scratch = threadScratch(p.srcFloats + p.dstFloats + p.scratchFloats);
    float *src = scratch, *dst = scratch + p.srcFloats, *pad = dst + p.dstFloats;
    for (int64_t n = begin; n < end; ++n) {
      const float *in = x + n * image;
      float *out = y + n * outImage;
      if (p.srcIn)
        execute(p.srcIn, {{DNNL_ARG_FROM, &p.userSrc, in}, {DNNL_ARG_TO, &p.src, src}});
      execute(p.conv, {{DNNL_ARG_SRC, &p.src, p.srcIn ? src : in},
                       {DNNL_ARG_WEIGHTS, &p.weight, weight},
                       {DNNL_ARG_BIAS, &p.bias, bias},
                       {DNNL_ARG_DST, &p.dst, p.dstOut ? dst : out},
                       {DNNL_ARG_SCRATCHPAD, &p.scratchpad, pad}});
      if (p.dstOut)
        execute(p.dstOut, {{DNNL_ARG_FROM, &p.dst, dst}, {DNNL_ARG_TO, &p.userDst, out}});
      oneDnn().dnnl_stream_wait(threadStream());
    }
  });
}

std::unique_ptr<DnnlConv> DnnlConv::fastest(const Window &w, bool bias) {
  if (!unavailable().empty())
    return nullptr;
  if (const char *forced = std::getenv("TEC_CPU_CONV"); forced && *forced) {
    const std::string f = forced;
    return f == "plain" ? create(w, bias, Form::Plain) : f == "blocked" ? create(w, bias, Form::Blocked) : nullptr;
  }
  const std::vector<std::string> candidates{"tec im2col + GEMM", "oneDNN " + std::to_string(DNNL_VERSION_MAJOR) + " plain",
                                            "oneDNN blocked"};
  static ChoiceTable table(machineTablePath("conv", candidates), "convolution table v1", candidates);
  char key[256];
  std::snprintf(key, sizeof(key), "%ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %d",
                long(w.batch), long(w.channels), long(w.height), long(w.width), long(w.outChannels), long(w.outHeight),
                long(w.outWidth), long(w.kernelH), long(w.kernelW), long(w.strideH), long(w.strideW), long(w.padTop),
                long(w.padLeft), long(w.padBottom), long(w.padRight), long(w.dilationH * 1000 + w.dilationW),
                long(w.groups), int(bias));
  const int choice = table.choose(key, [&] {
    // Each form on seeded data: the best of 3 runs after a warm-up.
    std::vector<float> x(w.batch * w.channels * w.height * w.width), weight(w.outChannels * w.groupChannels() * w.kernelH * w.kernelW),
        b(w.outChannels), y(w.batch * w.outChannels * w.outHeight * w.outWidth);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 7919) % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < weight.size(); ++i)
      weight[i] = static_cast<float>((i * 104729) % 13) / 13.0f - 0.5f;
    auto time = [&](const std::function<void()> &run) {
      run();
      double best = INFINITY;
      for (int r = 0; r < 3; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        run();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    std::vector<double> ms{time([&] { conv(w, x.data(), weight.data(), bias ? b.data() : nullptr, y.data()); })};
    for (Form form : {Form::Plain, Form::Blocked}) {
      auto candidate = create(w, bias, form);
      ms.push_back(candidate ? time([&] { candidate->run(x.data(), weight.data(), bias ? b.data() : nullptr, y.data()); })
                             : INFINITY);
    }
    return ms;
  });
  return choice == 0 ? nullptr : create(w, bias, choice == 1 ? Form::Plain : Form::Blocked);
}

#else

std::unique_ptr<DnnlConv> DnnlConv::fastest(const Window &, bool) { return nullptr; }

struct DnnlConv::Primitives {};

const std::string &DnnlConv::unavailable() {
  static const std::string why = "tec was built without oneDNN's headers (libdnnl-dev)";
  return why;
}

std::unique_ptr<DnnlConv> DnnlConv::create(const Window &, bool, Form) { return nullptr; }

DnnlConv::~DnnlConv() = default;

void DnnlConv::run(const float *, const float *, const float *, float *) const {}

#endif

} // namespace tec::kernels::cpu
