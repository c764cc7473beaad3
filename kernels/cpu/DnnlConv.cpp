#include "kernels/cpu/DnnlConv.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/ThreadPool.h"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
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


} // namespace

/// The convolution of a band of one image (all of it, unless the image is channels-last and large: see
/// bandsOf and slicesOf), the reorders around it (Blocked; a slice's strided output), and the sizes each run
/// carves out of the thread's scratch: the band's input and output in oneDNN's layouts, and the primitive's
/// scratchpad.
struct Band {
  dnnl_primitive_t conv = nullptr, srcIn = nullptr, dstOut = nullptr;
  dnnl_memory_desc_t userSrc{}, userDst{}, src{}, dst{}, scratchpad{};
  size_t srcFloats = 0, dstFloats = 0, scratchFloats = 0;
  int64_t inOffset = 0, outOffset = 0; // where the band's input and output start in an NHWC image, in floats
  int64_t outRows = 1, outCols = 0, outStride = 0; // the output it writes: rows of outCols floats, outStride apart
  size_t weight = 0;                   // its WeightSlice
};

/// The weight (and bias) as a band reads it: the user's whole weight, or an output-channel slice's rows of
/// it, and oneDNN's layout of that, made from it once (a constant) or on each run, or none where oneDNN
/// reads the user's layout.
struct WeightSlice {
  dnnl_primitive_t in = nullptr;
  dnnl_memory_desc_t user{}, laidOut{}, bias{};
  int64_t offset = 0, biasOffset = 0; // into the user's weight and bias, in floats
  mutable std::vector<float> reordered;
};

struct DnnlConv::Primitives {
  std::vector<Band> bands;
  std::vector<WeightSlice> weights;
  ~Primitives() {
    for (const Band &band : bands)
      for (dnnl_primitive_t p : {band.conv, band.srcIn, band.dstOut})
        if (p)
          oneDnn().dnnl_primitive_destroy(p);
    for (const WeightSlice &weight : weights)
      if (weight.in)
        oneDnn().dnnl_primitive_destroy(weight.in);
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

/// This thread's memory object for `md`, pointing at `data`: made once per descriptor and thread, then only
/// repointed (making one per argument per run cost a third of a small conv's time).
dnnl_memory_t threadMemory(const dnnl_memory_desc_t *md, const void *data) {
  const OneDnn &d = oneDnn();
  struct Cached {
    dnnl_memory_desc_t md;
    dnnl_memory_t memory;
  };
  thread_local std::unordered_map<const dnnl_memory_desc_t *, Cached> cache;
  auto it = cache.find(md);
  if (it != cache.end() && !d.dnnl_memory_desc_equal(&it->second.md, md)) { // a freed descriptor's address reused
    d.dnnl_memory_destroy(it->second.memory);
    cache.erase(it);
    it = cache.end();
  }
  if (it == cache.end()) {
    dnnl_memory_t m = nullptr;
    if (d.dnnl_memory_create(&m, md, d.engine, const_cast<void *>(data)) != dnnl_success)
      return nullptr;
    it = cache.emplace(md, Cached{*md, m}).first;
  } else if (d.dnnl_memory_set_data_handle(it->second.memory, const_cast<void *>(data)) != dnnl_success) {
    return nullptr;
  }
  return it->second.memory;
}

/// Runs `p` with (argument, descriptor, data) triples, each bound to this thread's memory object for it.
bool execute(dnnl_primitive_t p, std::initializer_list<std::tuple<int, const dnnl_memory_desc_t *, const void *>> args) {
  const OneDnn &d = oneDnn();
  dnnl_exec_arg_t bound[8];
  int count = 0;
  for (const auto &[arg, md, data] : args) {
    dnnl_memory_t m = threadMemory(md, data);
    if (!m)
      return false;
    bound[count++] = {arg, m};
  }
  return d.dnnl_primitive_execute(p, threadStream(), count, bound) == dnnl_success;
}

/// Bands of output rows a channels-last image is cut into, so that tec's pool can share one image's
/// convolution (a batch of 1) among its threads; each band's rows and input rows are contiguous in NHWC. A
/// 1-D convolution's image (one row: H = 1) is cut into bands of columns instead, as contiguous.
/// Every band reads the whole weight, so a band's output must outweigh it (the late 1x1 convs of a net, a
/// 7x7 image by a 1152x320 weight, stay whole), but for a depthwise weight, which is no more than a band's
/// input (EfficientNet's 7x7 stage: 2 bands). It depends on the shape alone (about 2^20 multiply-adds per
/// band, each float of the image read or written counting as 32: a depthwise conv is memory-bound; at most 8
/// bands, each at least 2 rows or columns, an even count), never on the thread count: the sums are the same
/// at any count.
struct Banding {
  int64_t count = 1;
  bool columns = false; // bands of columns of a single-row image
};
Banding bandsOf(const Window &w, bool channelsLast) {
  if (!channelsLast)
    return {};
  const bool columns = w.height == 1 && w.outHeight == 1;
  const int64_t weight = w.outChannels * w.groupChannels() * w.kernelH * w.kernelW;
  const int64_t output = w.outHeight * w.outWidth * w.outChannels, macs = output / w.outChannels * weight;
  const int64_t work = macs + 32 * (output + w.height * w.width * w.channels);
  const int64_t along = columns ? w.outWidth : w.outHeight;
  const int64_t weightBound = w.groupChannels() == 1 && w.groups == w.channels ? 8 : output / weight;
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>({8, along / 2, work >> 20, weightBound}));
  return {count > 1 ? count - count % 2 : 1, columns}; // even: 3 bands left 2 threads at 2:1
}

/// The output channels of each slice of a channels-last convolution too weight-heavy for bands (ResNet's
/// 3x3 convs over 14x14 and 7x7 images): each slice reads its rows of the weight once and writes its
/// channels of every pixel. Multiples of 16 channels, about 2^20 multiply-adds per slice, at most 8; by the
/// shape alone, as the bands. The whole of the output channels where it does not pay.
int64_t sliceChannels(const Window &w, bool channelsLast, const Banding &banding) {
  if (!channelsLast || w.groups != 1 || banding.count > 1)
    return w.outChannels;
  const int64_t macs = w.outHeight * w.outWidth * w.outChannels * w.channels * w.kernelH * w.kernelW;
  int64_t slices = std::min<int64_t>({8, w.outChannels / 16, macs >> 20});
  slices -= slices > 2 ? slices % 2 : 0; // even, as the bands
  return slices < 2 ? w.outChannels : ((w.outChannels + slices - 1) / slices + 15) / 16 * 16;
}

/// The band of `w` from output row (or column) `outBegin` to `outEnd` as a window of its own: the input rows
/// (columns) it reads, with the original padding where the band reaches past the image.
Window bandWindow(const Window &w, bool columns, int64_t outBegin, int64_t outEnd, int64_t &inBegin) {
  const int64_t stride = columns ? w.strideW : w.strideH, pad = columns ? w.padLeft : w.padTop;
  const int64_t reach = ((columns ? w.kernelW : w.kernelH) - 1) * (columns ? w.dilationW : w.dilationH) + 1;
  const int64_t first = outBegin * stride - pad, last = (outEnd - 1) * stride - pad + reach;
  inBegin = std::max<int64_t>(0, first);
  const int64_t inEnd = std::min(columns ? w.width : w.height, last);
  Window b = w;
  b.batch = 1;
  (columns ? b.width : b.height) = inEnd - inBegin;
  (columns ? b.outWidth : b.outHeight) = outEnd - outBegin;
  (columns ? b.padLeft : b.padTop) = inBegin - first;
  (columns ? b.padRight : b.padBottom) = last - inEnd;
  return b;
}

size_t floatsOf(const dnnl_memory_desc_t &md) { return aligned(oneDnn().dnnl_memory_desc_get_size(&md) / sizeof(float)); }

/// The `nth` (from 0) of oneDNN's implementations of `desc` in its order of preference, or where `name` is
/// given the one so named (a later band runs what the first runs, reading its weight layout); null where
/// there is none. Reference implementations are skipped: plain loops, never the fastest (60 ms for a
/// depthwise conv that a JIT kernel runs in 0.1). oneDNN 2's iterator also offers, ahead of their places in
/// its list, the implementations its primitive cache holds for an equal descriptor (brdgmm_dw, brdgmm_dw,
/// jit_dw, jit_dw:avx2, jit:avx512_core, jit_dw:avx2, ... once two were made): each name counts at its last
/// offer, so that the nth is the same whatever this process made before.
dnnl_primitive_desc_t offeredImplementation(const dnnl_convolution_desc_t &desc, const_dnnl_primitive_attr_t attr, int nth,
                                            const std::string &name) {
  const OneDnn &d = oneDnn();
  dnnl_primitive_desc_iterator_t it = nullptr;
  if (d.dnnl_primitive_desc_iterator_create(&it, &desc, attr, d.engine, nullptr) != dnnl_success)
    return nullptr;
  std::vector<std::pair<std::string, dnnl_primitive_desc_t>> offers; // in the order of their last offer
  do {
    dnnl_primitive_desc_t pd = d.dnnl_primitive_desc_iterator_fetch(it);
    const char *info = nullptr;
    if (!pd || d.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &info) != dnnl_success || !info ||
        std::strncmp(info, "ref", 3) == 0) {
      if (pd)
        d.dnnl_primitive_desc_destroy(pd);
      continue;
    }
    auto earlier = std::find_if(offers.begin(), offers.end(), [&](const auto &offer) { return offer.first == info; });
    if (earlier != offers.end()) {
      d.dnnl_primitive_desc_destroy(earlier->second);
      offers.erase(earlier);
    }
    offers.emplace_back(info, pd);
  } while (d.dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  d.dnnl_primitive_desc_iterator_destroy(it);
  dnnl_primitive_desc_t found = nullptr;
  for (size_t i = 0; i < offers.size(); ++i)
    if (!found && (name.empty() ? int(i) == nth : offers[i].first == name))
      found = offers[i].second;
    else
      d.dnnl_primitive_desc_destroy(offers[i].second);
  return found;
}

} // namespace

std::unique_ptr<DnnlConv> DnnlConv::create(const Window &w, bool bias, Form form, bool channelsLast, int alternative) {
  if (!unavailable().empty())
    return nullptr;
  const OneDnn &d = oneDnn();
  std::unique_ptr<DnnlConv> conv(new DnnlConv);
  conv->window_ = w;
  conv->form_ = form;
  conv->p_ = std::make_unique<Primitives>();
  Primitives &p = *conv->p_;
  // oneDNN fixes a primitive's thread count when it is made: one, as it then runs inside tec's pool.
  OmpThreads single(1);
  const bool isGrouped = w.groups > 1;
  const dnnl_format_tag_t layout = channelsLast ? dnnl_nhwc : dnnl_nchw;
  const Banding banding = bandsOf(w, channelsLast);
  const int64_t sliceWidth = sliceChannels(w, channelsLast, banding);
  // The weight of `outChannels` output channels from `first` on, in the user's layout and as oneDNN chooses
  // to lay it out (any); its bias.
  auto addWeight = [&](int64_t first, int64_t outChannels, dnnl_memory_desc_t &any) {
    WeightSlice &ws = p.weights.emplace_back();
    const dnnl_dims_t grouped = {w.groups, w.groupOutChannels(), w.groupChannels(), w.kernelH, w.kernelW};
    const dnnl_dims_t plain = {outChannels, w.channels, w.kernelH, w.kernelW}, biasDims = {outChannels};
    ws.offset = first * w.groupChannels() * w.kernelH * w.kernelW, ws.biasOffset = first;
    auto init = [&](dnnl_memory_desc_t &md, dnnl_format_tag_t grouped5, dnnl_format_tag_t plain4) {
      return isGrouped ? d.dnnl_memory_desc_init_by_tag(&md, 5, grouped, dnnl_f32, grouped5)
                       : d.dnnl_memory_desc_init_by_tag(&md, 4, plain, dnnl_f32, plain4);
    };
    return init(ws.user, dnnl_goihw, dnnl_oihw) == dnnl_success &&
           init(any, dnnl_format_tag_any, dnnl_format_tag_any) == dnnl_success &&
           d.dnnl_memory_desc_init_by_tag(&ws.bias, 1, biasDims, dnnl_f32, dnnl_x) == dnnl_success;
  };
  // Bands of rows or columns share one weight (the first band has oneDNN choose its layout; the others must
  // agree); each output-channel slice has its own.
  const int64_t bands = banding.count, slices = (w.outChannels + sliceWidth - 1) / sliceWidth;
  const int64_t along = banding.columns ? w.outWidth : w.outHeight;
  dnnl_memory_desc_t anyWeight;
  for (int64_t i = 0; i < bands * slices; ++i) {
    Band &band = p.bands.emplace_back();
    Window b = w; // one band: the whole image (an NCHW one's planes keep their rows, read or not)
    b.batch = 1;
    if (bands > 1) {
      const int64_t outBegin = along * i / bands;
      int64_t inBegin = 0;
      b = bandWindow(w, banding.columns, outBegin, along * (i + 1) / bands, inBegin);
      // NHWC: a row holds width x channels floats, a column (of a single-row image) channels.
      band.inOffset = inBegin * w.channels * (banding.columns ? 1 : w.width);
      band.outOffset = outBegin * w.outChannels * (banding.columns ? 1 : w.outWidth);
    }
    const int64_t firstChannel = slices > 1 ? i * sliceWidth : 0;
    b.outChannels = std::min(sliceWidth, w.outChannels - firstChannel);
    band.outOffset += firstChannel; // a slice's channels of each NHWC pixel
    if (slices > 1)
      band.outRows = b.outHeight * b.outWidth, band.outCols = b.outChannels, band.outStride = w.outChannels;
    else
      band.outCols = band.outStride = b.outChannels * b.outHeight * b.outWidth;
    if (b.height < 1 || b.width < 1)
      return nullptr; // a band wholly in the padding
    const bool ownWeight = i == 0 || slices > 1;
    if (ownWeight && !addWeight(firstChannel, b.outChannels, anyWeight))
      return nullptr;
    band.weight = p.weights.size() - 1;
    WeightSlice &ws = p.weights.back();
    const dnnl_dims_t srcDims = {1, b.channels, b.height, b.width}, dstDims = {1, b.outChannels, b.outHeight, b.outWidth};
    // A slice's output: its channels of each pixel, strided by all of them (oneDNN writes a dense one, then
    // reorders it there).
    const dnnl_dims_t sliceStrides = {w.outHeight * w.outWidth * w.outChannels, 1, w.outWidth * w.outChannels, w.outChannels};
    dnnl_memory_desc_t src, dst;
    if (d.dnnl_memory_desc_init_by_tag(&band.userSrc, 4, srcDims, dnnl_f32, layout) != dnnl_success ||
        (slices > 1 ? d.dnnl_memory_desc_init_by_strides(&band.userDst, 4, dstDims, dnnl_f32, sliceStrides)
                    : d.dnnl_memory_desc_init_by_tag(&band.userDst, 4, dstDims, dnnl_f32, layout)) != dnnl_success ||
        d.dnnl_memory_desc_init_by_tag(&src, 4, srcDims, dnnl_f32, form == Form::Blocked ? dnnl_format_tag_any : layout) != dnnl_success ||
        d.dnnl_memory_desc_init_by_tag(&dst, 4, dstDims, dnnl_f32, form == Form::Blocked ? dnnl_format_tag_any : layout) != dnnl_success)
      return nullptr;
    const dnnl_dims_t strides = {b.strideH, b.strideW}, dilations = {b.dilationH - 1, b.dilationW - 1};
    const dnnl_dims_t padBegin = {b.padTop, b.padLeft}, padEnd = {b.padBottom, b.padRight};
    dnnl_convolution_desc_t desc;
    dnnl_primitive_attr_t attr = nullptr;
    dnnl_primitive_desc_t pd = nullptr;
    bool built = d.dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct, &src,
                                                              ownWeight ? &anyWeight : &ws.laidOut, bias ? &ws.bias : nullptr,
                                                              &dst, strides, dilations, padBegin, padEnd) == dnnl_success &&
                 d.dnnl_primitive_attr_create(&attr) == dnnl_success &&
                 d.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
                 (pd = offeredImplementation(desc, attr, alternative, conv->implementation_)) &&
                 d.dnnl_primitive_create(&band.conv, pd) == dnnl_success;
    if (built) {
      band.src = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
      band.dst = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
      band.scratchpad = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
      band.scratchFloats = floatsOf(band.scratchpad);
      if (ownWeight) {
        ws.laidOut = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!d.dnnl_memory_desc_equal(&ws.laidOut, &ws.user)) {
          ws.reordered.resize(floatsOf(ws.laidOut));
          built = (ws.in = reorder(ws.user, ws.laidOut));
        }
      }
      const char *impl = nullptr;
      if (i == 0 && d.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        conv->implementation_ = impl;
      built = built && !conv->implementation_.empty();
      if (built && !d.dnnl_memory_desc_equal(&band.src, &band.userSrc)) {
        band.srcFloats = floatsOf(band.src);
        built = (band.srcIn = reorder(band.userSrc, band.src));
      }
      if (built && !d.dnnl_memory_desc_equal(&band.dst, &band.userDst)) {
        band.dstFloats = floatsOf(band.dst);
        built = (band.dstOut = reorder(band.dst, band.userDst));
      }
    }
    if (pd)
      d.dnnl_primitive_desc_destroy(pd);
    if (attr)
      d.dnnl_primitive_attr_destroy(attr);
    if (!built)
      return nullptr;
  }
  return conv;
}

DnnlConv::~DnnlConv() = default;

void DnnlConv::layOutWeight(const float *weight) const {
  for (const WeightSlice &ws : p_->weights)
    if (ws.in)
      execute(ws.in, {{DNNL_ARG_FROM, &ws.user, weight + ws.offset}, {DNNL_ARG_TO, &ws.laidOut, ws.reordered.data()}});
  oneDnn().dnnl_stream_wait(threadStream());
}

void DnnlConv::run(const float *x, const float *weight, const float *bias, float *y, OutputPart written) const {
  const Primitives &p = *p_;
  const Window &w = window_;
  // Images and bands spread over tec's pool, oneDNN single-threaded in each: its OpenMP threads beside the
  // pool's would contend for the same cores.
  OmpThreads single(1);
  if (!weightFixed_) // the weight in oneDNN's layout, once per run (it changes while training)
    layOutWeight(weight);
  else
    weight = fixedWeight_;
  size_t scratchFloats = 0;
  for (const Band &band : p.bands)
    scratchFloats = std::max(scratchFloats, band.srcFloats + band.dstFloats + band.scratchFloats);
  const int64_t image = w.channels * w.height * w.width, outImage = w.outChannels * w.outHeight * w.outWidth;
  const int64_t bands = static_cast<int64_t>(p.bands.size());
  parallelFor(w.batch * bands, 1, [&](int64_t begin, int64_t end) {
    // On the thread running these bands: the setting is per thread, and a helper's default (every core)
    // made oneDNN start an OpenMP team of its own inside tec's pool (MobileNetV3 at 2 threads: 7 ms, not 1.5).
    OmpThreads bandThread(1);
    float *scratch = threadScratch(scratchFloats);
    for (int64_t i = begin; i < end; ++i) {
      const Band &band = p.bands[i % bands];
      const WeightSlice &ws = p.weights[band.weight];
      float *src = scratch, *dst = scratch + band.srcFloats, *pad = dst + band.dstFloats;
      const float *in = x + (i / bands) * image + band.inOffset; // offsets: bands > 1 only channels-last
      float *out = y + (i / bands) * outImage + band.outOffset;
      if (band.srcIn)
        execute(band.srcIn, {{DNNL_ARG_FROM, &band.userSrc, in}, {DNNL_ARG_TO, &band.src, src}});
      execute(band.conv, {{DNNL_ARG_SRC, &band.src, band.srcIn ? src : in},
                          {DNNL_ARG_WEIGHTS, &ws.laidOut, ws.in ? ws.reordered.data() : weight + ws.offset},
                          {DNNL_ARG_BIAS, &ws.bias, bias ? bias + ws.biasOffset : nullptr},
                          {DNNL_ARG_DST, &band.dst, band.dstOut ? dst : out},
                          {DNNL_ARG_SCRATCHPAD, &band.scratchpad, pad}});
      if (band.dstOut)
        execute(band.dstOut, {{DNNL_ARG_FROM, &band.dst, dst}, {DNNL_ARG_TO, &band.userDst, out}});
      oneDnn().dnnl_stream_wait(threadStream());
      if (written)
        written(out - y, band.outRows, band.outCols, band.outStride);
    }
  });
}

void DnnlConv::fixWeight(const float *weight) {
  OmpThreads single(1);
  layOutWeight(weight);
  fixedWeight_ = weight;
  weightFixed_ = true;
}

std::unique_ptr<DnnlConv> DnnlConv::fastest(const Window &w, bool bias, bool channelsLast) {
  if (!unavailable().empty())
    return nullptr;
  if (const char *forced = std::getenv("TEC_CPU_CONV"); forced && *forced) {
    const std::string f = forced;
    return f == "plain"     ? create(w, bias, Form::Plain, channelsLast)
           : f == "blocked" ? create(w, bias, Form::Blocked, channelsLast)
                            : nullptr;
  }
  // The candidates: tec's loop, oneDNN's blocked form, and its plain form by each of its first few
  // implementations (a depthwise conv over NHWC on AVX-512 has six besides its reference one; the fourth,
  // jit_dw:avx2, ran ConvNeXt's 7x7 over 40 channels fastest).
  std::vector<std::string> candidates{"tec im2col + GEMM", "oneDNN " + std::to_string(DNNL_VERSION_MAJOR) + " blocked"};
  for (int k = 0; k < kPlainAlternatives; ++k)
    candidates.push_back("oneDNN plain " + std::to_string(k));
  static ChoiceTable table(machineTablePath("conv", candidates), "convolution table v5", candidates);
  auto oneDnnCandidate = [&](size_t c) {
    return c == 1 ? create(w, bias, Form::Blocked, channelsLast) : create(w, bias, Form::Plain, channelsLast, int(c) - 2);
  };
  char key[256];
  std::snprintf(key, sizeof(key), "%ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %d%s",
                long(w.batch), long(w.channels), long(w.height), long(w.width), long(w.outChannels), long(w.outHeight),
                long(w.outWidth), long(w.kernelH), long(w.kernelW), long(w.strideH), long(w.strideW), long(w.padTop),
                long(w.padLeft), long(w.padBottom), long(w.padRight), long(w.dilationH * 1000 + w.dilationW),
                long(w.groups), int(bias), channelsLast ? " nhwc" : "");
  const int choice = table.choose(key, [&] {
    // Each candidate on seeded data: the best of 3 runs after a warm-up, candidates alternating run by run (a
    // busy machine drifts; six candidates measured one after another met different moments of it), on this
    // thread alone (the choice must not depend on the thread count: each form's bits differ).
    SerialScope serial;
    std::vector<float> x(w.batch * w.channels * w.height * w.width), weight(w.outChannels * w.groupChannels() * w.kernelH * w.kernelW),
        b(w.outChannels), y(w.batch * w.outChannels * w.outHeight * w.outWidth);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 7919) % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < weight.size(); ++i)
      weight[i] = static_cast<float>((i * 104729) % 13) / 13.0f - 0.5f;
    const float *bp = bias ? b.data() : nullptr;
    std::vector<std::unique_ptr<DnnlConv>> made(candidates.size()); // oneDNN's, where it takes the shape
    for (size_t c = 1; c < candidates.size(); ++c)
      made[c] = oneDnnCandidate(c);
    const auto tec = channelsLast ? convChannelsLast : conv;
    auto run = [&](size_t c) {
      if (c == 0)
        tec(w, x.data(), weight.data(), bp, y.data());
      else
        made[c]->run(x.data(), weight.data(), bp, y.data());
    };
    // Round -1 warms up; a candidate 8x slower than the fastest there (tec's loop or a dense kernel on a
    // depthwise conv: 15-60x) is not timed again, so that a plan's first load measures in a fraction of a second.
    std::vector<double> warm(candidates.size(), INFINITY), ms(candidates.size(), INFINITY);
    for (int round = -1; round < 3; ++round) {
      const double cutoff = 8 * *std::min_element(warm.begin(), warm.end());
      for (size_t c = 0; c < candidates.size(); ++c) {
        if ((c > 0 && !made[c]) || (round >= 0 && warm[c] > cutoff))
          continue;
        auto t0 = std::chrono::steady_clock::now();
        run(c);
        double &best = round < 0 ? warm[c] : ms[c];
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    return ms;
  });
  return choice == 0 ? nullptr : oneDnnCandidate(choice);
}

#else

std::unique_ptr<DnnlConv> DnnlConv::fastest(const Window &, bool, bool) { return nullptr; }

struct DnnlConv::Primitives {};

const std::string &DnnlConv::unavailable() {
  static const std::string why = "tec was built without oneDNN's headers (libdnnl-dev)";
  return why;
}

std::unique_ptr<DnnlConv> DnnlConv::create(const Window &, bool, Form, bool, int) { return nullptr; }

void DnnlConv::fixWeight(const float *) {}

DnnlConv::~DnnlConv() = default;

void DnnlConv::run(const float *, const float *, const float *, float *, OutputPart) const {}

void DnnlConv::layOutWeight(const float *) const {}

#endif

} // namespace tec::kernels::cpu
