// ONNX bytes -> import -> verify -> compile for the cpu target (inference and a training step). Any
// outcome but a clean error or a plan is a bug: a crash, a sanitizer report, a hang.
#include "FuzzFiles.h"

#include "api/CompileIR.h"

#include "mlir/IR/MLIRContext.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = tec::fuzz::writeFile("model.onnx", data, size);
  // No thread pool per input (made and joined for each model, it cost most of a small model's time).
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  tec::CompileOptions options;
  options.train = size % 2 == 1; // both flows, decided by the input
  auto compiled = tec::compileModel(context, path, options);
  if (!compiled)
    llvm::consumeError(compiled.takeError());
  return 0;
}
