#include "api/Opt.h"

#include "ir/TecOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"

namespace tec {

void registerTecOpt(mlir::DialectRegistry &registry) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  registerTecPassesAndPipelines();
  registry.insert<TecDialect, mlir::func::FuncDialect>();
}

} // namespace tec
