// The interface every backend (CPU, CUDA) implements: bind a variant's buffers, then run its steps.
#ifndef TEC_RUNTIME_BACKEND_H
#define TEC_RUNTIME_BACKEND_H

#include "runtime/Status.h"
#include "runtime/plan.pb.h"

#include <memory>
#include <vector>

namespace tec {

class Backend {
public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;
  /// Allocates the arena, binds every buffer (params and constants point into `data`, the plan's
  /// mapped data section) and prepares each step, so that run() allocates and decides nothing.
  virtual Status prepare(const plan::Variant &variant, const char *data) = 0;
  /// Host-visible storage of a buffer (an input to fill, an output to read).
  virtual void *hostData(int buffer) = 0;
  /// Runs every step; with `stepMillis` (one entry per plan step), adds each step's time to it.
  virtual Status run(std::vector<double> *stepMillis = nullptr) = 0;
};

/// `threads` = 0 keeps OpenMP's and BLAS's defaults.
std::unique_ptr<Backend> createCpuBackend(int threads);

} // namespace tec

#endif
