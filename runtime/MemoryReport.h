// A plan variant's memory by kind (params, optimizer state, saved activations, temporaries...): the bytes
// live in the arena at its fullest step, from the steps' reads and writes, as tec inspect and --report show.
#ifndef TEC_RUNTIME_MEMORYREPORT_H
#define TEC_RUNTIME_MEMORYREPORT_H

#include "runtime/plan.pb.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tec {

struct MemoryReport {
  int64_t arena = 0;      // the planned arena (at least the peak: placement can leave gaps)
  int peakStep = 0;       // the step with the most bytes live
  int64_t peakBytes = 0;  // live at that step
  int64_t dataBytes = 0;  // params and constants in the mapped data section, outside the arena
  int64_t savedBytes = 0; // what the backward pass keeps: all live at once, at the loss
  /// Bytes the steps read and write, each operand once per step: the memory traffic a step costs at
  /// least, which fusion lowers (a view moves nothing).
  int64_t readBytes = 0, writtenBytes = 0;
  /// Bytes live at the peak per kind, in plan::Kind order, kinds with none left out.
  std::vector<std::pair<plan::Kind, int64_t>> atPeak;
};

MemoryReport memoryReport(const plan::Variant &variant);

/// "saved activations", "optimizer state", ...
const char *kindName(plan::Kind kind);

} // namespace tec

#endif
