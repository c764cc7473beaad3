// Imports every ONNX backend node test shipped by libonnx-testdata whose ops tec supports, verifies
// the IR and runs the inference pipeline on it. Unsupported ops, opsets, types or attributes are
// counted apart; any other failure fails the sweep.
#include "frontend/Importer.h"
#include "passes/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "llvm/Support/MemoryBuffer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

/// True (and the error consumed) when the import failed only because a shape input is not constant.
static bool needsFrozenInputs(llvm::Expected<tec::ImportedModel> &model) {
  bool needs = false;
  llvm::Error err = llvm::handleErrors(model.takeError(), [&](std::unique_ptr<tec::ImportError> e) -> llvm::Error {
    if (e->getMessage().find("must be a constant or an initializer") != std::string::npos) {
      needs = true;
      return llvm::Error::success();
    }
    return llvm::Error(std::move(e));
  });
  if (err)
    model = std::move(err);
  return needs;
}

/// Every integer input of test_data_set_0, keyed by the graph input it feeds.
static tec::ImportOptions freezeIntegerInputs(const std::string &modelPath) {
  tec::ImportOptions options;
  onnx::ModelProto model;
  std::ifstream file(modelPath, std::ios::binary);
  if (!model.ParseFromIstream(&file))
    return options;
  llvm::SmallString<256> dataSet(modelPath);
  llvm::sys::path::remove_filename(dataSet);
  llvm::sys::path::append(dataSet, "test_data_set_0");
  int index = 0;
  for (const auto &input : model.graph().input()) {
    llvm::SmallString<256> pb(dataSet);
    llvm::sys::path::append(pb, "input_" + std::to_string(index++) + ".pb");
    int type = input.type().tensor_type().elem_type();
    if (type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32)
      continue;
    if (auto buffer = llvm::MemoryBuffer::getFile(pb, /*IsText=*/false))
      options.frozenInputs[input.name()] = (*buffer)->getBuffer().str();
  }
  return options;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: tec-import-sweep <libonnx-testdata>/data/node\n";
    return 2;
  }
  std::vector<std::string> models;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(argv[1], ec), end; it != end && !ec; it.increment(ec)) {
    llvm::SmallString<256> model(it->path());
    llvm::sys::path::append(model, "model.onnx");
    if (llvm::sys::fs::exists(model))
      models.push_back(model.str().str());
  }
  if (ec || models.empty()) {
    llvm::errs() << "error: no node tests under " << argv[1] << (ec ? ": " + ec.message() : "") << "\n";
    return 1;
  }
  std::sort(models.begin(), models.end());

  int imported = 0, frozen = 0, failed = 0;
  std::map<std::string, int> unsupportedReasons;
  for (const auto &path : models) {
    mlir::MLIRContext context;
    context.printOpOnDiagnostic(false);
    std::string diagnostics;
    mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return mlir::success();
    });
    auto model = tec::importOnnxFile(context, path);
    if (!model && needsFrozenInputs(model)) {
      // The test feeds shapes or axes as graph inputs: fix them from its first data set, as
      // `tec --freeze-input` does.
      model = tec::importOnnxFile(context, path, freezeIntegerInputs(path));
      frozen += bool(model);
    }
    if (!model) {
      bool unsupported = false;
      std::string message;
      llvm::handleAllErrors(model.takeError(), [&](const tec::ImportError &e) {
        unsupported = e.getKind() == tec::ImportErrorKind::Unsupported;
        message = e.getMessage();
      });
      if (unsupported) {
        // Group by the reason's shape: the text after the file name, minus node names.
        std::string reason = message.substr(path.size() + 2);
        if (reason.find("unsupported operator") != std::string::npos)
          reason = "unsupported operators";
        else if (reason.rfind("opset", 0) == 0)
          reason = "opset outside 13-21";
        else {
          reason = "unsupported types or attributes";
          if (getenv("TEC_SWEEP_VERBOSE"))
            llvm::outs() << "UNSUPPORTED " << message << "\n";
        }
        ++unsupportedReasons[reason];
      } else {
        ++failed;
        llvm::outs() << "FAIL " << message << "\n";
      }
      continue;
    }
    mlir::PassManager pm(&context);
    tec::buildInferencePipeline(pm, {});
    if (mlir::failed(pm.run(*model->module))) {
      ++failed;
      llvm::outs() << "FAIL " << path << ": the pipeline failed:\n" << diagnostics;
      continue;
    }
    ++imported;
  }
  int unsupported = 0;
  for (const auto &[_, n] : unsupportedReasons)
    unsupported += n;
  llvm::outs() << "ONNX node tests: " << models.size() << " models\n"
               << "  imported and verified: " << imported << " (" << frozen
               << " with integer inputs frozen from test_data_set_0)\n"
               << "  failed:                " << failed << "\n"
               << "  unsupported:           " << unsupported << "\n";
  for (const auto &[reason, n] : unsupportedReasons)
    llvm::outs() << "    " << reason << ": " << n << "\n";
  if (imported == 0) {
    llvm::errs() << "error: no node test imported\n";
    return 1;
  }
  return failed ? 1 : 0;
}
