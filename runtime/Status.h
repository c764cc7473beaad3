// Errors for the runtime, which links neither LLVM nor MLIR: a status with a message, and a result.
#ifndef TEC_RUNTIME_STATUS_H
#define TEC_RUNTIME_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tec {

class [[nodiscard]] Status {
public:
  static Status success() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed = true;
    s.text = std::move(message);
    return s;
  }
  bool ok() const { return !failed; }
  const std::string &message() const { return text; }

private:
  bool failed = false;
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
