#include "runtime/CudaPlugin.h"

#include "support/LibraryLocations.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace tec {

namespace {

/// The folder of the binary this code is linked into (tec, the Python extension, a test).
std::string ownFolder() {
  std::string folder = kernels::folderOf(reinterpret_cast<const void *>(&ownFolder));
  return folder.empty() ? "." : folder;
}

/// Loads the CUDA libraries the plugin links where the loader's own search would not find them (PyTorch's
/// nvidia-* wheels): loaded first, they satisfy the plugin's dependencies by soname.
void preloadCudaLibraries() {
  for (const char *soname : {"libcudart.so.13", "libcublasLt.so.13"}) {
    if (dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))
      continue;
    for (const std::string &file : kernels::nvidiaLibraryCandidates(soname, ownFolder()))
      if (dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL))
        break;
  }
}

CreateCudaBackendFn entry = nullptr;
CudaProgramSourceFn programSourceEntry = nullptr;

} // namespace

const CudaPluginStatus &loadCudaPlugin() {
  static const CudaPluginStatus status = [] {
    CudaPluginStatus s;
    if (!TEC_CUDA_PLUGIN_BUILT && !std::getenv("TEC_CUDA_PLUGIN")) {
      s.reason = "this tec was built without CUDA (no nvcc at build time)";
      return s;
    }
    const std::vector<std::string> candidates =
        kernels::pluginCandidates("TEC_CUDA_PLUGIN", kCudaPluginFile, ownFolder(), TEC_PLUGIN_BUILD_DIR);
    preloadCudaLibraries();
    std::string errors;
    for (const auto &path : candidates) {
      void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char *e = dlerror();
        errors += (errors.empty() ? "" : "; ") + std::string(e ? e : path);
        continue;
      }
      entry = reinterpret_cast<CreateCudaBackendFn>(dlsym(handle, kCudaPluginEntry));
      if (!entry) {
        errors += (errors.empty() ? "" : "; ") + path + " has no " + kCudaPluginEntry;
        continue;
      }
      programSourceEntry = reinterpret_cast<CudaProgramSourceFn>(dlsym(handle, kCudaProgramSourceEntry));
      s.loaded = true;
      s.path = path;
      return s;
    }
    s.reason = "cannot load the CUDA backend plugin (" + errors + ")";
    return s;
  }();
  return status;
}

Result<std::unique_ptr<Backend>> createCudaBackend(const CudaBackendOptions &options) {
  const auto &plugin = loadCudaPlugin();
  if (!plugin.loaded)
    return Status::error(plugin.reason);
  std::string error;
  Backend *backend = entry(&options, &error);
  if (!backend)
    return Status::error(error);
  return std::unique_ptr<Backend>(backend);
}

} // namespace tec

namespace tec {

Result<std::string> cudaProgramSource(const plan::Variant &variant, const std::string &planName) {
  const auto &plugin = loadCudaPlugin();
  if (!plugin.loaded)
    return Status::error(plugin.reason);
  if (!programSourceEntry)
    return Status::error(plugin.path + " has no " + kCudaProgramSourceEntry);
  std::string source, error;
  if (!programSourceEntry(&variant, &planName, &source, &error))
    return Status::error(error);
  return source;
}

} // namespace tec
