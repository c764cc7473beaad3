#include "kernels/cpu/PackedGemm.h"
#include "kernels/cpu/ThreadPool.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if TEC_HAVE_ONEDNN_HEADERS
#include "kernels/cpu/OneDnn.h"
#endif

namespace tec::kernels::cpu {

const char *PackedGemm::name(Kernel kernel) {
  return kernel == Kernel::Matmul ? "oneDNN matmul, B packed once" : "oneDNN 1x1 convolution, B packed once";
}

std::string PackedGemm::description() const {
  std::vector<std::string> parts;
  if (fused_.bias)
    parts.push_back("bias");
  if (fused_.activation == Epilogue::Relu)
    parts.push_back("ReLU");
  if (fused_.residual)
    parts.push_back("residual add");
  std::string text = name(kernel_);
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? ", with the " : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text;
}

std::optional<PackedGemm::Kernel> PackedGemm::ofChoice(int choice) {
  const int kernel = choice - static_cast<int>(blas().libraries.size());
  if (kernel < 0 || kernel >= static_cast<int>(kernelCount()))
    return std::nullopt;
  return kKernels[kernel];
}

#if TEC_HAVE_ONEDNN_HEADERS

namespace {

/// A tensor view: its dims and strides.
dnnl_memory_desc_t view(std::initializer_list<int64_t> dims, std::initializer_list<int64_t> strides) {
  dnnl_memory_desc_t md;
  dnnl_dims_t d = {}, s = {};
  std::copy(dims.begin(), dims.end(), d);
  std::copy(strides.begin(), strides.end(), s);
  oneDnn().dnnl_memory_desc_init_by_strides(&md, static_cast<int>(dims.size()), d, dnnl_f32, s);
  return md;
}


/// The views of one chunk's A (rows x k), B (k x width, from the chunk's first column), C (rows x width of
/// C's n columns, the residual's view too) and bias (width) that `kernel`'s primitive reads: matrices for the
/// matmul; for the convolution a 1 x rows NHWC image of k channels, an OIHW 1x1 weight and an NHWC image of
/// width channels.
struct Views {
  dnnl_memory_desc_t a, b, c, bias;
};
Views viewsOf(PackedGemm::Kernel kernel, bool transB, int64_t rows, int64_t width, int64_t n, int64_t k, int64_t ldb) {
  if (kernel == PackedGemm::Kernel::Matmul)
    return {view({rows, k}, {k, 1}), transB ? view({k, width}, {1, ldb}) : view({k, width}, {ldb, 1}),
            view({rows, width}, {n, 1}), view({1, width}, {width, 1})};
  return {view({1, k, 1, rows}, {rows * k, 1, rows * k, k}),
          transB ? view({width, k, 1, 1}, {ldb, 1, 1, 1}) : view({width, k, 1, 1}, {1, ldb, 1, 1}),
          view({1, width, 1, rows}, {rows * n, 1, rows * n, n}), view({width}, {1})};
}

/// oneDNN's name for the implementation `pd` runs ("jit_1x1:avx2"), or empty.
std::string implementationOf(dnnl_primitive_desc_t pd) {
  const char *info = nullptr;
  return oneDnn().dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &info) == dnnl_success && info ? info : "";
}

/// The primitive's description for `views`, applying `fused`, with its weight in the layout it prefers; null
/// where oneDNN has no such primitive.
dnnl_primitive_desc_t describe(PackedGemm::Kernel kernel, const Views &views, const PackedGemm::Fused &fused) {
  const OneDnn &d = oneDnn();
  dnnl_memory_desc_t anyB = views.b;
  if (d.dnnl_memory_desc_init_by_tag(&anyB, views.b.ndims, views.b.dims, dnnl_f32, dnnl_format_tag_any) != dnnl_success)
    return nullptr;
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t postOps = nullptr;
  bool ok = d.dnnl_primitive_attr_create(&attr) == dnnl_success && d.dnnl_post_ops_create(&postOps) == dnnl_success;
  if (ok && fused.activation == Epilogue::Relu)
    ok = d.dnnl_post_ops_append_eltwise(postOps, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success;
  if (ok && fused.residual)
    ok = d.dnnl_post_ops_append_binary(postOps, dnnl_binary_add, &views.c) == dnnl_success;
  ok = ok && d.dnnl_primitive_attr_set_post_ops(attr, postOps) == dnnl_success;
  const dnnl_memory_desc_t *bias = fused.bias ? &views.bias : nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  if (ok && kernel == PackedGemm::Kernel::Matmul) {
    dnnl_matmul_desc_t desc;
    ok = d.dnnl_matmul_desc_init(&desc, &views.a, &anyB, bias, &views.c) == dnnl_success &&
         d.dnnl_primitive_desc_create(&pd, &desc, attr, d.engine, nullptr) == dnnl_success;
  } else if (ok) {
    dnnl_convolution_desc_t desc;
    const dnnl_dims_t ones = {1, 1}, zeros = {0, 0};
    ok = d.dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
                                                      &views.a, &anyB, bias, &views.c, ones, zeros, zeros,
                                                      zeros) == dnnl_success &&
         d.dnnl_primitive_desc_create(&pd, &desc, attr, d.engine, nullptr) == dnnl_success;
  }
  if (postOps)
    d.dnnl_post_ops_destroy(postOps);
  if (attr)
    d.dnnl_primitive_attr_destroy(attr);
  return ok ? pd : nullptr;
}

/// Whether `kernel` runs `views` with `fused` as it runs the bare GEMM: by the same implementation, never a
/// reference loop (plain loops, never the fastest), so that what it fuses changes no sum and the measured
/// speed holds.
bool takes(PackedGemm::Kernel kernel, const Views &views, const PackedGemm::Fused &fused) {
  const OneDnn &d = oneDnn();
  std::string names[2];
  const PackedGemm::Fused forms[2] = {{}, fused};
  for (int i = 0; i < 2; ++i)
    if (dnnl_primitive_desc_t pd = describe(kernel, views, forms[i])) {
      names[i] = implementationOf(pd);
      d.dnnl_primitive_desc_destroy(pd);
    }
  return !names[0].empty() && names[0].compare(0, 3, "ref") != 0 && names[1] == names[0];
}

} // namespace

/// One primitive and its packed B, for the chunks of one height and columns.
struct PackedGemm::Prepared {
  int64_t rows = 0, j0 = 0, j1 = 0;
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t packedMd{};
  std::shared_ptr<float> packed; // shared with an earlier height's primitive that reads the same layout
  ~Prepared() {
    if (primitive)
      oneDnn().dnnl_primitive_destroy(primitive);
  }
};

/// A chunk of C: its prepared primitive, and memory objects and a stream of its own (chunks run at once).
struct PackedGemm::Chunk {
  GemmSplit::Bounds bounds{};
  const Prepared *prepared = nullptr;
  dnnl_stream_t stream = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, bias = nullptr, residual = nullptr;
  ~Chunk() {
    const OneDnn &d = oneDnn();
    for (dnnl_memory_t mem : {a, b, c, bias, residual})
      if (mem)
        d.dnnl_memory_destroy(mem);
    if (stream)
      d.dnnl_stream_destroy(stream);
  }
};

const std::string &PackedGemm::unavailable() { return oneDnn().problem; }

std::unique_ptr<PackedGemm> PackedGemm::create(Kernel kernel, bool transB, int64_t m, int64_t n, int64_t k,
                                               const float *b, int64_t ldb, const SourcePacked &sourcePacked,
                                               const Fused &wanted) {
  if (!unavailable().empty() || m <= 0 || n <= 0 || k <= 0)
    return nullptr;
  const OneDnn &d = oneDnn();
  std::unique_ptr<PackedGemm> gemm(new PackedGemm);
  gemm->kernel_ = kernel;
  gemm->m = m, gemm->n = n, gemm->k = k;
  gemm->split = gemmSplit(m, n, k);
  OmpThreads single(1);
  std::vector<GemmSplit::Bounds> bounds;
  for (int64_t i = 0; i < gemm->split.count; ++i)
    bounds.push_back(gemm->split.chunk(i, m, n));
  auto viewsOfChunk = [&](const GemmSplit::Bounds &c) {
    return viewsOf(kernel, transB, c.i1 - c.i0, c.j1 - c.j0, n, k, ldb);
  };
  // What to fuse, decided before anything is packed: all that was asked and oneDNN applies the same bits
  // for (then ReLU only), else the bias alone, else nothing.
  Fused asked = wanted;
  if (asked.activation != Epilogue::None && asked.activation != Epilogue::Relu)
    asked.activation = Epilogue::None, asked.residual = false;
  std::vector<GemmSplit::Bounds> shapes; // one chunk of each height and columns
  for (const GemmSplit::Bounds &c : bounds)
    if (std::none_of(shapes.begin(), shapes.end(), [&](const GemmSplit::Bounds &s) {
          return s.i1 - s.i0 == c.i1 - c.i0 && s.j0 == c.j0 && s.j1 == c.j1;
        }))
      shapes.push_back(c);
  std::optional<Fused> chosen;
  for (const Fused &form : {asked, Fused{wanted.bias}, Fused{}})
    if (!chosen && std::all_of(shapes.begin(), shapes.end(),
                               [&](const GemmSplit::Bounds &c) { return takes(kernel, viewsOfChunk(c), form); }))
      chosen = form;
  if (!chosen)
    return nullptr;
  gemm->fused_ = *chosen;
  // B into `p`'s layout, from its first column; shared with a primitive of the same columns reading it so.
  auto pack = [&](Prepared &p, const dnnl_memory_desc_t &source) {
    for (const auto &earlier : gemm->prepared)
      if (earlier->j0 == p.j0 && earlier->j1 == p.j1 && d.dnnl_memory_desc_equal(&earlier->packedMd, &p.packedMd))
        return (p.packed = earlier->packed), true;
    const size_t bytes = d.dnnl_memory_desc_get_size(&p.packedMd);
    p.packed.reset(static_cast<float *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), std::free);
    dnnl_memory_t from = nullptr, to = nullptr;
    dnnl_primitive_desc_t reorderPd = nullptr;
    dnnl_primitive_t reorder = nullptr;
    dnnl_stream_t stream = nullptr;
    bool ok = p.packed && d.dnnl_stream_create(&stream, d.engine, dnnl_stream_default_flags) == dnnl_success &&
              d.dnnl_memory_create(&from, &source, d.engine, const_cast<float *>(b + (transB ? p.j0 * ldb : p.j0))) ==
                  dnnl_success &&
              d.dnnl_memory_create(&to, &p.packedMd, d.engine, p.packed.get()) == dnnl_success &&
              d.dnnl_reorder_primitive_desc_create(&reorderPd, &source, d.engine, &p.packedMd, d.engine, nullptr) ==
                  dnnl_success &&
              d.dnnl_primitive_create(&reorder, reorderPd) == dnnl_success;
    if (ok) {
      dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
      ok = d.dnnl_primitive_execute(reorder, stream, 2, args) == dnnl_success &&
           d.dnnl_stream_wait(stream) == dnnl_success;
    }
    if (reorder)
      d.dnnl_primitive_destroy(reorder);
    if (reorderPd)
      d.dnnl_primitive_desc_destroy(reorderPd);
    for (dnnl_memory_t mem : {from, to})
      if (mem)
        d.dnnl_memory_destroy(mem);
    if (stream)
      d.dnnl_stream_destroy(stream);
    if (ok && transB && sourcePacked && gemm->split.by == GemmSplit::Columns) // the chunk's rows of B, contiguous
      sourcePacked(b + p.j0 * ldb, (p.j1 - p.j0 - 1) * ldb + k);
    return ok;
  };
  for (const GemmSplit::Bounds &c : bounds) {
    auto chunk = std::make_unique<Chunk>();
    chunk->bounds = c;
    const Views views = viewsOfChunk(c);
    auto same = std::find_if(gemm->prepared.begin(), gemm->prepared.end(),
                             [&](const auto &p) { return p->rows == c.i1 - c.i0 && p->j0 == c.j0 && p->j1 == c.j1; });
    if (same == gemm->prepared.end()) {
      auto p = std::make_unique<Prepared>();
      p->rows = c.i1 - c.i0, p->j0 = c.j0, p->j1 = c.j1;
      dnnl_primitive_desc_t pd = describe(kernel, views, gemm->fused_);
      bool ok = pd != nullptr;
      if (ok) {
        p->packedMd = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        ok = d.dnnl_primitive_create(&p->primitive, pd) == dnnl_success && pack(*p, views.b);
        d.dnnl_primitive_desc_destroy(pd);
      }
      if (!ok)
        return nullptr;
      same = gemm->prepared.insert(gemm->prepared.end(), std::move(p));
    }
    chunk->prepared = same->get();
    const Fused &f = gemm->fused_;
    if (d.dnnl_stream_create(&chunk->stream, d.engine, dnnl_stream_default_flags) != dnnl_success ||
        d.dnnl_memory_create(&chunk->a, &views.a, d.engine, DNNL_MEMORY_NONE) != dnnl_success ||
        d.dnnl_memory_create(&chunk->c, &views.c, d.engine, DNNL_MEMORY_NONE) != dnnl_success ||
        d.dnnl_memory_create(&chunk->b, &chunk->prepared->packedMd, d.engine, chunk->prepared->packed.get()) !=
            dnnl_success ||
        (f.bias && d.dnnl_memory_create(&chunk->bias, &views.bias, d.engine, DNNL_MEMORY_NONE) != dnnl_success) ||
        (f.residual && d.dnnl_memory_create(&chunk->residual, &views.c, d.engine, DNNL_MEMORY_NONE) != dnnl_success))
      return nullptr;
    gemm->chunks.push_back(std::move(chunk));
  }
  if (transB && sourcePacked && gemm->split.by != GemmSplit::Columns) // every chunk read all of B
    sourcePacked(b, (n - 1) * ldb + k);
  return gemm;
}

PackedGemm::~PackedGemm() = default;

void PackedGemm::run(const float *a, float *c, const float *bias, const float *residual,
                     const GemmChunkEpilogue &epilogue) const {
  const OneDnn &d = oneDnn();
  runSplit(split, m, n, [&](int64_t i0, int64_t, int64_t j0, int64_t) {
    const Chunk &chunk = **std::find_if(chunks.begin(), chunks.end(),
                                        [&](const auto &ch) { return ch->bounds.i0 == i0 && ch->bounds.j0 == j0; });
    OmpThreads single(1);
    d.dnnl_memory_set_data_handle(chunk.a, const_cast<float *>(a + i0 * k));
    d.dnnl_memory_set_data_handle(chunk.c, c + i0 * n + j0);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, chunk.a}, {DNNL_ARG_WEIGHTS, chunk.b}, {DNNL_ARG_DST, chunk.c}};
    int count = 3;
    if (chunk.bias) {
      d.dnnl_memory_set_data_handle(chunk.bias, const_cast<float *>(bias + j0));
      args[count++] = {DNNL_ARG_BIAS, chunk.bias};
    }
    if (chunk.residual) { // the binary add is the last post-op
      d.dnnl_memory_set_data_handle(chunk.residual, const_cast<float *>(residual + i0 * n + j0));
      const int index = fused_.activation == Epilogue::None ? 0 : 1;
      args[count++] = {DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, chunk.residual};
    }
    d.dnnl_primitive_execute(chunk.prepared->primitive, chunk.stream, count, args);
    d.dnnl_stream_wait(chunk.stream);
  }, epilogue);
}

#else

struct PackedGemm::Prepared {};
struct PackedGemm::Chunk {};

const std::string &PackedGemm::unavailable() {
  static const std::string why = "tec was built without oneDNN's headers (libdnnl-dev)";
  return why;
}

std::unique_ptr<PackedGemm> PackedGemm::create(Kernel, bool, int64_t, int64_t, int64_t, const float *, int64_t,
                                               const SourcePacked &, const Fused &) {
  return nullptr;
}

PackedGemm::~PackedGemm() = default;

void PackedGemm::run(const float *, float *, const float *, const float *, const GemmChunkEpilogue &) const {}

#endif

} // namespace tec::kernels::cpu
