// mlir-opt for the tec dialect: runs any tec pass (or pipeline) on a .mlir file; drives the lit tests.
#include "ir/TecOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  tec::registerTecPassesAndPipelines();
  mlir::DialectRegistry registry;
  registry.insert<tec::TecDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "tec optimizer driver\n", registry));
}
