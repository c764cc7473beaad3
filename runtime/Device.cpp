#include "runtime/Device.h"

#include <dlfcn.h>

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

} // namespace tec
