// `tec doctor`'s report, in the runtime so that tools without the compiler (tec-bench on a GPU machine)
// print the same: the GPU, driver, CUDA libraries, FP8 or why not, the CUDA plugin, the CPU BLAS, and
// which variant of a plan this machine would run.
#ifndef TEC_RUNTIME_DOCTOR_H
#define TEC_RUNTIME_DOCTOR_H

#include "runtime/Status.h"

#include <string>

namespace tec {

/// "1.5 MiB": bytes in the largest unit that keeps the number at least 1.
std::string formatBytes(double bytes);

/// The report, one fact per line; with `planPath`, also the variant it would run (an error for a plan
/// that cannot be opened or has no variant for this machine).
Result<std::string> doctorReport(const std::string &planPath = "");

} // namespace tec

#endif
