// oneDNN 2's C API from the library Blas.cpp loaded at run time: its headers (libdnnl-dev) give the types,
// nothing is linked. Shared by the primitives tec builds with it (PackedGemm, DnnlConv). Only with
// TEC_HAVE_ONEDNN_HEADERS.
#ifndef TEC_KERNELS_CPU_ONEDNN_H
#define TEC_KERNELS_CPU_ONEDNN_H

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <string>

namespace tec::kernels::cpu {

struct OneDnn {
#define TEC_DNNL_FUNCTIONS(X)                                                                                          \
  X(dnnl_version) X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_destroy) X(dnnl_stream_wait)               \
  X(dnnl_memory_desc_init_by_strides) X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_get_size)                     \
  X(dnnl_memory_desc_equal) X(dnnl_memory_create) X(dnnl_memory_destroy) X(dnnl_memory_set_data_handle)                \
  X(dnnl_matmul_desc_init) X(dnnl_dilated_convolution_forward_desc_init) X(dnnl_primitive_attr_create)                 \
  X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_scratchpad_mode) X(dnnl_primitive_desc_create)              \
  X(dnnl_primitive_desc_iterator_create) X(dnnl_primitive_desc_iterator_next) X(dnnl_primitive_desc_iterator_fetch)    \
  X(dnnl_primitive_desc_iterator_destroy)                                                                              \
  X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) X(dnnl_primitive_desc_query_md)                          \
  X(dnnl_reorder_primitive_desc_create) X(dnnl_primitive_create) X(dnnl_primitive_destroy) X(dnnl_primitive_execute)    \
  X(dnnl_post_ops_create) X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_eltwise) X(dnnl_post_ops_append_binary)      \
  X(dnnl_primitive_attr_set_post_ops)
#define TEC_DNNL_MEMBER(name) decltype(&::name) name = nullptr;
  TEC_DNNL_FUNCTIONS(TEC_DNNL_MEMBER)
#undef TEC_DNNL_MEMBER
  dnnl_engine_t engine = nullptr;
  /// Why the API cannot be used (not loaded, another major version), or empty.
  std::string problem;
};

const OneDnn &oneDnn();

/// oneDNN on `threads` OpenMP threads while it lives (1: inside a chunk of tec's pool; the setting is per
/// thread).
class OmpThreads {
public:
  explicit OmpThreads(int threads) : previous(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(previous); }

private:
  int previous;
};

} // namespace tec::kernels::cpu

#endif
