// The compile summary `tec model.onnx` prints and tec.compile keeps: the model, the pipeline's passes and
// fusions, each GEMM layer's precision per target and why, trained and frozen params, the plan's variants.
#ifndef TEC_API_SUMMARY_H
#define TEC_API_SUMMARY_H

#include "api/CompileIR.h"

#include <string>

namespace tec {

/// `planPath` and `dumpDir` may be empty (no plan written, no dumps).
std::string compileSummary(const CompiledModel &compiled, const std::string &modelPath, const std::string &planPath,
                           const std::string &dumpDir);

} // namespace tec

#endif
