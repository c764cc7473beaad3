// What this machine can run: a CUDA probe through the driver API, loaded with dlopen so that tec starts
// (and falls back to the CPU) on machines without a CUDA driver.
#ifndef TEC_RUNTIME_DEVICE_H
#define TEC_RUNTIME_DEVICE_H

#include <cstdint>
#include <string>

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

/// "sm_90" for compute capability 9.0.
std::string smName(int major, int minor);

} // namespace tec

#endif
