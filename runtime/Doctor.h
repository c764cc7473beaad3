// `tec doctor`'s report, in the runtime so that tools without the compiler (tec-bench on a GPU machine)
// print the same: the GPU, driver, CUDA libraries, FP8 or why not, the CUDA plugin, the CPU BLAS, and
// which variant of a plan this machine would run.
#ifndef TEC_RUNTIME_DOCTOR_H
#define TEC_RUNTIME_DOCTOR_H

#include "support/Status.h"

#include <string>
#include <vector>

namespace tec {

/// "1.5 MiB": bytes in the largest unit that keeps the number at least 1.
std::string formatBytes(double bytes);

/// One fact of the report: what ("GPU", "CPU BLAS", ...) and its value; an empty key adds a note to the fact
/// before it.
struct DoctorFact {
  std::string key, value;
};

/// The facts, in the report's order; with `planPath`, also the variant it would run (an error for a plan
/// that cannot be opened or has no variant for this machine).
Result<std::vector<DoctorFact>> doctorFacts(const std::string &planPath = "");
/// The facts as text, one per line (`tec doctor`).
Result<std::string> doctorReport(const std::string &planPath = "");
/// The CPU BLAS the cpu backend's GEMMs use, as its library describes itself ("OpenBLAS 0.3.21 ..."); empty
/// when none loaded.
std::string cpuBlasConfig();

} // namespace tec

#endif
