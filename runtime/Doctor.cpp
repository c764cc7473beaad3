#include "runtime/Doctor.h"

#include "kernels/cpu/Blas.h"
#include "kernels/cpu/PackedGemm.h"
#include "kernels/cpu/ThreadPool.h"
#include "runtime/CudaPlugin.h"
#include "runtime/Collectives.h"
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

Result<std::vector<DoctorFact>> doctorFacts(const std::string &planPath) {
  const CudaProbe cuda = probeCuda();
  const auto libraries = probeCudaLibraries();
  std::vector<DoctorFact> report;
  auto fact = [&report](const std::string &key, const std::string &value) { report.push_back({key, value}); };
  if (cuda.usable) {
    fact("GPU", cuda.name + " (" + smName(cuda.major, cuda.minor) + "), " + std::to_string(cuda.deviceCount) +
                    " device(s)");
    fact("GPU memory", formatBytes(static_cast<double>(cuda.memoryBytes)));
    fact("CUDA driver",
         std::to_string(cuda.driverVersion / 1000) + "." + std::to_string(cuda.driverVersion % 1000 / 10));
  } else {
    fact("GPU", "none usable: " + cuda.reason);
  }
  for (const auto &l : libraries)
    fact(l.name, l.version + (l.file.empty() ? "" : " (" + l.file + ")"));
  fact("FP8", fp8Availability(cuda, libraries));
  fact("FP8 blocks", blockScalingAvailability(cuda, libraries));
  const auto &plugin = loadCudaPlugin();
  fact("CUDA backend", plugin.loaded ? "loaded (" + plugin.path + ")" : plugin.reason);
  const auto &blas = kernels::cpu::blas();
  if (!blas.loaded)
    fact("CPU BLAS", blas.library);
  for (const auto &library : blas.libraries)
    fact("CPU BLAS", library.config + " (" + library.file + "; single-threaded in tec's pool)");
  for (const auto &note : blas.notes)
    fact("", note);
  if (blas.loaded) {
    fact("GEMM choice", kernels::cpu::gemmTableDescription());
    const std::string &noPacking = kernels::cpu::PackedGemm::unavailable();
    fact("", noPacking.empty() ? "constant weights: packed once by oneDNN's matmul where measured faster"
                               : "constant weights are not packed once: " + noPacking);
  }
  fact("MPI plugin", mpiPluginDescription() + "; data-parallel training under mpirun or srun (" +
                         std::to_string(launcherWorldSize()) + " rank(s) in this environment)");
  const int cpus = kernels::cpu::availableCpus();
  fact("CPU threads", std::to_string(cpus) + " by default: the CPUs this process may use (affinity, cgroup quota; of " +
                          std::to_string(std::thread::hardware_concurrency()) + " online); --threads sets it");
  if (!planPath.empty()) {
    auto file = PlanFile::open(planPath);
    if (!file.ok())
      return file.error();
    auto choice = chooseVariant((*file)->plan(), probeGpuOffer(), {});
    if (!choice.ok())
      return Status::error(planPath + ": " + choice.error().message());
    fact("plan", planPath + ": " + choice->reason);
  }
  return report;
}

Result<std::string> doctorReport(const std::string &planPath) {
  auto facts = doctorFacts(planPath);
  if (!facts.ok())
    return facts.error();
  std::string report = "tec doctor\n";
  for (const auto &[key, value] : *facts) {
    std::string padded = key;
    padded.resize(std::max<size_t>(padded.size() + 1, 13), ' ');
    report += "  " + padded + value + "\n";
  }
  return report;
}

std::string cpuBlasConfig() { return kernels::cpu::blas().loaded ? kernels::cpu::blas().config : ""; }

} // namespace tec
