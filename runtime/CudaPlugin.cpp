#include "runtime/CudaPlugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace tec {

namespace {

/// The folder of the binary this code is linked into (tec, a test), through dladdr.
std::string ownFolder() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void *>(&loadCudaPlugin), &info) || !info.dli_fname)
    return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
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
    // TEC_CUDA_PLUGIN names the file; otherwise next to the binary, in ../lib (installed and build
    // trees), then the build tree this runtime came from.
    std::vector<std::string> candidates;
    if (const char *env = std::getenv("TEC_CUDA_PLUGIN"); env && *env)
      candidates.push_back(env);
    else
      for (const std::string &folder : {ownFolder(), ownFolder() + "/../lib", std::string(TEC_PLUGIN_BUILD_DIR)})
        candidates.push_back(folder + "/" + kCudaPluginFile);
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
