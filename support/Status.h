// Errors for the runtime, which links neither LLVM nor MLIR: a status with a message, and a result.
#ifndef TEC_SUPPORT_STATUS_H
#define TEC_SUPPORT_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tec {

/// A message safe for a terminal: control characters other than newline (from names in a model, a plan
/// or a file, which may carry escape sequences) become \xNN.
inline std::string escapeControl(const std::string &text) {
  static const char *hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n') || c == 0x7f)
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    else
      out += static_cast<char>(c);
  }
  return out;
}

class [[nodiscard]] Status {
public:
  static Status success() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed = true;
    s.text = escapeControl(message);
    return s;
  }
  /// A run that found its data invalid (an index or label out of range): the user's input, not a bug.
  static Status badData(std::string message) {
    Status s = error(std::move(message));
    s.dataError = true;
    return s;
  }
  bool ok() const { return !failed; }
  bool isBadData() const { return dataError; }
  const std::string &message() const { return text; }

private:
  bool failed = false, dataError = false;
  std::string text;
};

template <typename T> class [[nodiscard]] Result {
public:
  Result(T value) : value(std::move(value)) {}
  Result(Status status) : status(std::move(status)) { assert(!this->status.ok()); }
  bool ok() const { return value.has_value(); }
  const Status &error() const { return status; }
  T &operator*() { return *value; }
  T *operator->() { return &*value; }
  T take() { return std::move(*value); }

private:
  std::optional<T> value;
  Status status;
};

} // namespace tec

#endif
