// What this machine can run: a CUDA probe through the driver API, loaded with dlopen so that tec starts
// (and falls back to the CPU) on machines without a CUDA driver.
#ifndef TEC_RUNTIME_DEVICE_H
#define TEC_RUNTIME_DEVICE_H

#include <cstdint>
#include <string>
#include <vector>

namespace tec {

struct CudaProbe {
  bool usable = false;      // a driver and at least one device
  std::string name;         // of device 0
  int major = 0, minor = 0; // compute capability of device 0
  int64_t memoryBytes = 0;
  int deviceCount = 0;
  int driverVersion = 0;    // e.g. 13000
  std::string reason;       // why not usable, when it is not
};

CudaProbe probeCuda();

/// A CUDA library tec would use, found (with its version) or not.
struct LibraryProbe {
  std::string name;    // "CUDA runtime", "cuBLASLt", "cuDNN", "NVRTC"
  std::string file;    // the path of what was loaded, empty when nothing was
  std::string version; // e.g. "13.0.88", or why there is none
};

/// The CUDA runtime, cuBLASLt, cuDNN and NVRTC (cuDNN's runtime-compiled engines need it), loaded with dlopen
/// from where the plugin finds them (so tec needs none of them to start).
std::vector<LibraryProbe> probeCudaLibraries();

/// Whether this GPU runs FP8 GEMMs, and if not, why (FP8 needs compute capability 8.9+, and cuBLASLt
/// 12.1.3 or newer on Ada).
std::string fp8Availability(const CudaProbe &cuda, const std::vector<LibraryProbe> &libraries);

/// Where block-scaled FP8 GEMMs (Float8BlockScaling) run here: cuBLASLt's block scale modes (sm_90+ with
/// cuBLASLt 12.9 or newer), tec's kernel, the cpu's emulation, and why.
std::string blockScalingAvailability(const CudaProbe &cuda, const std::vector<LibraryProbe> &libraries);

/// "sm_90" for compute capability 9.0.
std::string smName(int major, int minor);

} // namespace tec

#endif
