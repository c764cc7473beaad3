#include "runtime/Device.h"

#include "support/LibraryLocations.h"

#include <dlfcn.h>

#include <cstdio>
#include <optional>
#include <tuple>

namespace tec {

namespace {
// The few driver-API entry points the probe needs, declared here so the runtime needs no CUDA headers.
using CUresult = int;
using CUdevice = int;
constexpr int kComputeCapabilityMajor = 75, kComputeCapabilityMinor = 76;
} // namespace

std::string smName(int major, int minor) { return "sm_" + std::to_string(major * 10 + minor); }

CudaProbe probeCuda() {
  CudaProbe probe;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    probe.reason = "no CUDA driver (libcuda.so.1 not found)";
    return probe;
  }
  auto sym = [&](const char *name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(sym("cuInit"));
  auto driverGetVersion = reinterpret_cast<CUresult (*)(int *)>(sym("cuDriverGetVersion"));
  auto getCount = reinterpret_cast<CUresult (*)(int *)>(sym("cuDeviceGetCount"));
  auto get = reinterpret_cast<CUresult (*)(CUdevice *, int)>(sym("cuDeviceGet"));
  auto getName = reinterpret_cast<CUresult (*)(char *, int, CUdevice)>(sym("cuDeviceGetName"));
  auto getAttribute = reinterpret_cast<CUresult (*)(int *, int, CUdevice)>(sym("cuDeviceGetAttribute"));
  auto totalMem = reinterpret_cast<CUresult (*)(size_t *, CUdevice)>(sym("cuDeviceTotalMem_v2"));
  if (!init || !driverGetVersion || !getCount || !get || !getName || !getAttribute || !totalMem) {
    probe.reason = "the CUDA driver library lacks the driver API";
    return probe;
  }
  if (CUresult r = init(0); r != 0) {
    probe.reason = "cuInit failed with CUDA error " + std::to_string(r) + " (driver not loaded, or no device)";
    return probe;
  }
  driverGetVersion(&probe.driverVersion);
  if (getCount(&probe.deviceCount) != 0 || probe.deviceCount == 0) {
    probe.reason = "the CUDA driver reports no device";
    return probe;
  }
  CUdevice device = 0;
  char name[256] = {};
  size_t memory = 0;
  if (get(&device, 0) != 0 || getName(name, sizeof(name), device) != 0 ||
      getAttribute(&probe.major, kComputeCapabilityMajor, device) != 0 ||
      getAttribute(&probe.minor, kComputeCapabilityMinor, device) != 0 || totalMem(&memory, device) != 0) {
    probe.reason = "cannot query CUDA device 0";
    return probe;
  }
  probe.name = name;
  probe.memoryBytes = static_cast<int64_t>(memory);
  probe.usable = true;
  return probe;
}

namespace {
/// This binary's folder, where the search for the CUDA libraries starts (as the plugin's does).
std::string probingFolder() { return kernels::folderOf(reinterpret_cast<const void *>(&probingFolder)); }
} // namespace

std::vector<LibraryProbe> probeCudaLibraries() {
  struct Candidate {
    const char *name;
    std::vector<std::string> sonames;
    const char *versionSymbol;
  };
  // CUDA 13's sonames first: the plugin is built against them; then 12's, for a tec built with CUDA 12.
  const Candidate candidates[] = {
      {"CUDA runtime", {"libcudart.so.13", "libcudart.so.12"}, "cudaRuntimeGetVersion"},
      {"cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so.12"}, "cublasLtGetVersion"},
      {"cuDNN", {"libcudnn.so.9"}, "cudnnGetVersion"},
      {"NVRTC", {"libnvrtc.so.13", "libnvrtc.so.12"}, "nvrtcVersion"},
      // Data parallelism on GPUs (pip's nvidia-nccl-cu13 or the toolkit's): reported, not used yet.
      {"NCCL", {"libnccl.so.2"}, "ncclGetVersion"},
  };
  const std::string own = probingFolder();
  std::vector<LibraryProbe> found;
  for (const auto &c : candidates) {
    LibraryProbe probe{c.name, "", "not found"};
    std::vector<std::string> files;
    for (const std::string &soname : c.sonames)
      for (std::string &file : kernels::nvidiaLibraryCandidates(soname, own))
        files.push_back(std::move(file));
    for (const std::string &file : files) {
      void *lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!lib)
        continue;
      void *symbol = dlsym(lib, c.versionSymbol);
      Dl_info where{};
      probe.file = symbol && dladdr(symbol, &where) && where.dli_fname ? where.dli_fname : file; // the path
      if (!symbol) {
        probe.version = "version unknown";
      } else if (std::string(c.name) == "CUDA runtime") {
        int v = 0;
        reinterpret_cast<int (*)(int *)>(symbol)(&v); // 13000 for 13.0
        probe.version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
      } else if (std::string(c.name) == "NCCL") {
        int v = 0; // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9
        reinterpret_cast<int (*)(int *)>(symbol)(&v);
        probe.version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
      } else if (std::string(c.name) == "NVRTC") {
        int major = 0, minor = 0;
        reinterpret_cast<int (*)(int *, int *)>(symbol)(&major, &minor);
        probe.version = std::to_string(major) + "." + std::to_string(minor);
      } else {
        size_t v = reinterpret_cast<size_t (*)()>(symbol)(); // major*10000 + minor*100 + patch (cuBLASLt 12+), cuDNN 9: 90xxx
        probe.version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
      }
      // Looked at, not kept: a library the probe left loaded would satisfy by soname whatever the process
      // loads later (an older NCCL of the toolkit's made PyTorch's import fail after tec.doctor()).
      dlclose(lib);
      break;
    }
    found.push_back(probe);
  }
  return found;
}

namespace {

/// The probed cuBLASLt's version as (major, minor, patch); null where none was found.
std::optional<std::tuple<int, int, int>> cublasLtVersion(const std::vector<LibraryProbe> &libraries) {
  for (const auto &l : libraries)
    if (l.name == "cuBLASLt" && !l.file.empty()) {
      int major = 0, minor = 0, patch = 0;
      std::sscanf(l.version.c_str(), "%d.%d.%d", &major, &minor, &patch);
      return std::make_tuple(major, minor, patch);
    }
  return std::nullopt;
}

} // namespace

std::string fp8Availability(const CudaProbe &cuda, const std::vector<LibraryProbe> &libraries) {
  if (!cuda.usable)
    return "no: no usable GPU (" + cuda.reason + ")";
  int cc = cuda.major * 10 + cuda.minor;
  if (cc < 89)
    return "no: " + smName(cuda.major, cuda.minor) + " has no FP8 tensor cores (needs sm_89 or newer); BF16/FP16 instead";
  const auto version = cublasLtVersion(libraries);
  if (!version)
    return "no: cuBLASLt not found";
  if (cc == 89 && *version < std::make_tuple(12, 1, 3))
    for (const auto &l : libraries)
      if (l.name == "cuBLASLt")
        return "no: Ada needs cuBLASLt 12.1.3 or newer for FP8, found " + l.version;
  return "yes (" + smName(cuda.major, cuda.minor) + ")";
}

std::string blockScalingAvailability(const CudaProbe &cuda, const std::vector<LibraryProbe> &libraries) {
  if (!cuda.usable)
    return "cpu emulation (no usable GPU)";
  if (cuda.major < 9)
    return "no: " + smName(cuda.major, cuda.minor) + " runs current scaling instead (block scaling needs sm_90)";
  const auto version = cublasLtVersion(libraries);
  if (!version || *version < std::make_tuple(12, 9, 0))
    return "tec's kernel (CUDA cores): cuBLASLt's block scale modes need cuBLASLt 12.9 or newer" +
           std::string(version ? "" : " (cuBLASLt not found)");
  return "cuBLASLt's block scale modes (1x128 x 128x128 and 1x128 x 1x128, whole K blocks), tec's kernel elsewhere";
}

} // namespace tec
