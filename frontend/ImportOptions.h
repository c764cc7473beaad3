// What importing an ONNX model takes and how it fails, without MLIR (the API's compile options hold these).
#ifndef TEC_FRONTEND_IMPORTOPTIONS_H
#define TEC_FRONTEND_IMPORTOPTIONS_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <string>
#include <utility>
#include <vector>

namespace tec {

/// Invalid: the model is broken. Unsupported: it is valid ONNX that tec does not handle (yet).
enum class ImportErrorKind { Invalid, Unsupported };

/// An import failure, with a message that names the file and the node or tensor.
class ImportError : public llvm::ErrorInfo<ImportError> {
public:
  static char ID;
  /// (node name, operator) for each node an Unsupported error is about, where it names them.
  using Operators = std::vector<std::pair<std::string, std::string>>;
  ImportError(ImportErrorKind kind, std::string message, Operators operators = {})
      : kind(kind), message(std::move(message)), operators(std::move(operators)) {}
  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }
  ImportErrorKind getKind() const { return kind; }
  const std::string &getMessage() const { return message; }
  const Operators &getOperators() const { return operators; }

private:
  ImportErrorKind kind;
  std::string message;
  Operators operators;
};

struct ImportOptions {
  /// Static shapes for graph inputs with dynamic dims (`--shape name=AxB`), as trtexec's --shapes. A name
  /// that is not a graph input but a symbolic dim (`dim_param`, e.g. `batch=2`) binds that dim wherever
  /// it appears.
  llvm::StringMap<llvm::SmallVector<int64_t>> shapes;
  /// Values fixed at compile time for graph inputs (`--freeze-input name=file.pb`), each a serialized
  /// ONNX TensorProto: the input becomes a constant, as shape inputs must be for static shapes.
  llvm::StringMap<std::string> frozenInputs;
  /// Training's `--trainable` regex: a one-element initializer it names is a param even where the importer
  /// would take it for a scalar constant (see ImportedModel::scalarConstants).
  std::string trainable;
};

} // namespace tec

#endif
