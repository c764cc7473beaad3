#include "kernels/cpu/PackedGemm.h"
#include "kernels/cpu/ThreadPool.h"

#include <dlfcn.h>
#include <omp.h>

#include <cstdlib>

#if TEC_HAVE_ONEDNN_HEADERS
#include "kernels/cpu/OneDnn.h"
#endif

namespace tec::kernels::cpu {

#if TEC_HAVE_ONEDNN_HEADERS

namespace {

/// dims and strides of a row-major matrix view.
dnnl_memory_desc_t matrix(int64_t rows, int64_t cols, int64_t rowStride, int64_t colStride) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols}, strides = {rowStride, colStride};
  oneDnn().dnnl_memory_desc_init_by_strides(&md, 2, dims, dnnl_f32, strides);
  return md;
}

} // namespace

/// Columns [j0, j1) of C: the primitive, its packed slice of B, and memory objects for A and C's views.
struct PackedGemm::Chunk {
  int64_t j0 = 0, j1 = 0;
  dnnl_primitive_t primitive = nullptr;
  dnnl_stream_t stream = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  float *packed = nullptr;
  ~Chunk() {
    const OneDnn &d = oneDnn();
    for (dnnl_memory_t mem : {a, b, c})
      if (mem)
        d.dnnl_memory_destroy(mem);
    if (primitive)
      d.dnnl_primitive_destroy(primitive);
    if (stream)
      d.dnnl_stream_destroy(stream);
    std::free(packed);
  }
};

const std::string &PackedGemm::unavailable() { return oneDnn().problem; }

std::unique_ptr<PackedGemm> PackedGemm::create(bool transB, int64_t m, int64_t n, int64_t k, const float *b,
                                               int64_t ldb, const SourcePacked &sourcePacked) {
  const GemmSplit split = gemmSplit(m, n, k);
  if (!unavailable().empty() || split.by == GemmSplit::Rows || m <= 0 || n <= 0 || k <= 0)
    return nullptr;
  const OneDnn &d = oneDnn();
  std::unique_ptr<PackedGemm> gemm(new PackedGemm);
  gemm->m = m;
  gemm->split = split;
  // oneDNN runs on OpenMP: one thread, inside tec's pool (the setting is per thread).
  const int previous = omp_get_max_threads();
  omp_set_num_threads(1);
  bool ok = true;
  for (int64_t i = 0; i < split.count && ok; ++i) {
    auto c = std::make_unique<Chunk>();
    c->j0 = split.start(i), c->j1 = split.start(i + 1);
    const int64_t width = c->j1 - c->j0;
    const dnnl_memory_desc_t aMd = matrix(m, k, k, 1), cMd = matrix(m, width, n, 1);
    const dnnl_memory_desc_t bMd = transB ? matrix(k, width, 1, ldb) : matrix(k, width, ldb, 1);
    dnnl_memory_desc_t anyB;
    const dnnl_dims_t bDims = {k, width};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = nullptr, reorderPd = nullptr;
    dnnl_primitive_t reorder = nullptr;
    dnnl_memory_t source = nullptr;
    ok = d.dnnl_memory_desc_init_by_tag(&anyB, 2, bDims, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
         d.dnnl_matmul_desc_init(&desc, &aMd, &anyB, nullptr, &cMd) == dnnl_success &&
         d.dnnl_primitive_desc_create(&pd, &desc, nullptr, d.engine, nullptr) == dnnl_success;
    const dnnl_memory_desc_t *packedMd = ok ? d.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : nullptr;
    const size_t bytes = packedMd ? d.dnnl_memory_desc_get_size(packedMd) : 0;
    ok = ok && packedMd && (c->packed = static_cast<float *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    ok = ok && d.dnnl_primitive_create(&c->primitive, pd) == dnnl_success &&
         d.dnnl_stream_create(&c->stream, d.engine, dnnl_stream_default_flags) == dnnl_success &&
         d.dnnl_memory_create(&c->a, &aMd, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
         d.dnnl_memory_create(&c->c, &cMd, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
         d.dnnl_memory_create(&c->b, packedMd, d.engine, c->packed) == dnnl_success &&
         d.dnnl_memory_create(&source, &bMd, d.engine, const_cast<float *>(b + (transB ? c->j0 * ldb : c->j0))) ==
             dnnl_success &&
         d.dnnl_reorder_primitive_desc_create(&reorderPd, &bMd, d.engine, packedMd, d.engine, nullptr) ==
             dnnl_success &&
         d.dnnl_primitive_create(&reorder, reorderPd) == dnnl_success;
    if (ok) { // B into the packed layout, once
      dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, c->b}};
      ok = d.dnnl_primitive_execute(reorder, c->stream, 2, args) == dnnl_success &&
           d.dnnl_stream_wait(c->stream) == dnnl_success;
    }
    if (reorder)
      d.dnnl_primitive_destroy(reorder);
    if (source)
      d.dnnl_memory_destroy(source);
    for (dnnl_primitive_desc_t p : {pd, reorderPd})
      if (p)
        d.dnnl_primitive_desc_destroy(p);
    if (ok && transB && sourcePacked) // the chunk's rows of B, contiguous
      sourcePacked(b + c->j0 * ldb, (c->j1 - c->j0 - 1) * ldb + k);
    gemm->chunks.push_back(std::move(c));
  }
  omp_set_num_threads(previous);
  return ok ? std::move(gemm) : nullptr;
}

PackedGemm::~PackedGemm() = default;

void PackedGemm::run(const float *a, float *c, const GemmChunkEpilogue &epilogue) const {
  const OneDnn &d = oneDnn();
  const int64_t n = chunks.back()->j1;
  runSplit(split, m, n, [&](int64_t, int64_t, int64_t j0, int64_t) {
    const Chunk &chunk = **std::partition_point(chunks.begin(), chunks.end(), [&](auto &c) { return c->j1 <= j0; });
    const int previous = omp_get_max_threads();
    omp_set_num_threads(1);
    d.dnnl_memory_set_data_handle(chunk.a, const_cast<float *>(a));
    d.dnnl_memory_set_data_handle(chunk.c, c + chunk.j0);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, chunk.a}, {DNNL_ARG_WEIGHTS, chunk.b}, {DNNL_ARG_DST, chunk.c}};
    d.dnnl_primitive_execute(chunk.primitive, chunk.stream, 3, args);
    d.dnnl_stream_wait(chunk.stream);
    omp_set_num_threads(previous);
  }, epilogue);
}

#else

struct PackedGemm::Chunk {};

const std::string &PackedGemm::unavailable() {
  static const std::string why = "tec was built without oneDNN's headers (libdnnl-dev)";
  return why;
}

std::unique_ptr<PackedGemm> PackedGemm::create(bool, int64_t, int64_t, int64_t, const float *, int64_t,
                                               const SourcePacked &) {
  return nullptr;
}

PackedGemm::~PackedGemm() = default;

void PackedGemm::run(const float *, float *, const GemmChunkEpilogue &) const {}

#endif

} // namespace tec::kernels::cpu
