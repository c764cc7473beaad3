#include "kernels/cpu/Blas.h"

#if TEC_HAVE_ONEDNN_HEADERS
#include "kernels/cpu/OneDnn.h"

#include <dlfcn.h>

namespace tec::kernels::cpu {

const OneDnn &oneDnn() {
  static const OneDnn api = [] {
    OneDnn d;
    void *lib = oneDnnHandle();
    if (!lib) {
      d.problem = "oneDNN is not loaded";
      return d;
    }
#define TEC_DNNL_LOAD(name) d.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));
    TEC_DNNL_FUNCTIONS(TEC_DNNL_LOAD)
#undef TEC_DNNL_LOAD
    if (!d.dnnl_version || d.dnnl_version()->major != DNNL_VERSION_MAJOR || !d.dnnl_matmul_desc_init ||
        !d.dnnl_dilated_convolution_forward_desc_init || !d.dnnl_primitive_execute) {
      d.problem = "the oneDNN loaded is not version " + std::to_string(DNNL_VERSION_MAJOR) + " (tec's headers)";
      return d;
    }
    if (d.dnnl_engine_create(&d.engine, dnnl_cpu, 0) != dnnl_success)
      d.problem = "oneDNN has no CPU engine";
    return d;
  }();
  return api;
}

} // namespace tec::kernels::cpu

#endif
