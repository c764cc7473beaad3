// What tec-opt (mlir-opt for the tec dialect, which drives the lit tests) registers: the dialects of tec's
// IR, its passes and pipelines, and MLIR's canonicalizer and CSE.
#ifndef TEC_API_OPT_H
#define TEC_API_OPT_H

#include "mlir/IR/DialectRegistry.h"

namespace tec {

void registerTecOpt(mlir::DialectRegistry &registry);

} // namespace tec

#endif
