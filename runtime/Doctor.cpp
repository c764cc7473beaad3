#include "runtime/Doctor.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/PackedGemm.h"
#include "kernels/cpu/ThreadPool.h"
#include "runtime/CudaPlugin.h"
#include "runtime/Device.h"
#include "runtime/Session.h"

#include <cstdio>
#include <thread>

namespace tec {

std::string formatBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3)
    bytes /= 1024, ++u;
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f %s", bytes, units[u]);
  return text;
}

Result<std::string> doctorReport(const std::string &planPath) {
  const CudaProbe cuda = probeCuda();
  const auto libraries = probeCudaLibraries();
  auto line = [](const std::string &key, const std::string &value) {
    std::string padded = key;
    padded.resize(std::max<size_t>(padded.size() + 1, 13), ' ');
    return "  " + padded + value + "\n";
  };
  std::string report = "tec doctor\n";
  if (cuda.usable) {
    report += line("GPU", cuda.name + " (" + smName(cuda.major, cuda.minor) + "), " +
                              std::to_string(cuda.deviceCount) + " device(s)");
    report += line("GPU memory", formatBytes(static_cast<double>(cuda.memoryBytes)));
    report += line("CUDA driver", std::to_string(cuda.driverVersion / 1000) + "." +
                                      std::to_string(cuda.driverVersion % 1000 / 10));
  } else {
    report += line("GPU", "none usable: " + cuda.reason);
  }
  for (const auto &l : libraries)
    report += line(l.name, l.version + (l.file.empty() ? "" : " (" + l.file + ")"));
  report += line("FP8", fp8Availability(cuda, libraries));
  const auto &plugin = loadCudaPlugin();
  report += line("CUDA backend", plugin.loaded ? "loaded (" + plugin.path + ")" : plugin.reason);
  const auto &blas = kernels::cpu::blas();
  if (!blas.loaded)
    report += line("CPU BLAS", blas.library);
  for (const auto &library : blas.libraries)
    report += line("CPU BLAS", library.config + " (" + library.file + "; single-threaded in tec's pool)");
  for (const auto &note : blas.notes)
    report += line("", note);
  if (blas.loaded) {
    report += line("GEMM choice", kernels::cpu::gemmTableDescription());
    const std::string &noPacking = kernels::cpu::PackedGemm::unavailable();
    report += line("", noPacking.empty() ? "constant weights: packed once by oneDNN's matmul where measured faster"
                                         : "constant weights are not packed once: " + noPacking);
  }
  const int cpus = kernels::cpu::availableCpus();
  report += line("CPU threads", std::to_string(cpus) + " by default: the CPUs this process may use (affinity, cgroup quota; of " +
                                    std::to_string(std::thread::hardware_concurrency()) + " online); --threads sets it");
  if (!planPath.empty()) {
    auto file = PlanFile::open(planPath);
    if (!file.ok())
      return file.error();
    auto choice = chooseVariant((*file)->plan(), probeGpuOffer(), {});
    if (!choice.ok())
      return Status::error(planPath + ": " + choice.error().message());
    report += line("plan", planPath + ": " + choice->reason);
  }
  return report;
}

} // namespace tec
