#include "runtime/MemoryReport.h"

#include <algorithm>
#include <map>

namespace tec {

const char *kindName(plan::Kind kind) {
  switch (kind) {
  case plan::KIND_PARAM: return "params";
  case plan::KIND_OPTIMIZER_STATE: return "optimizer state";
  case plan::KIND_FP8_STATE: return "fp8 state";
  case plan::KIND_TRAINING_STATE: return "training state";
  case plan::KIND_INPUT: return "inputs";
  case plan::KIND_OUTPUT: return "outputs";
  case plan::KIND_SAVED: return "saved activations";
  case plan::KIND_TEMPORARY: return "temporaries";
  case plan::KIND_CONSTANT: return "constants";
  default: return "unclassified";
  }
}

MemoryReport memoryReport(const plan::Variant &v) {
  MemoryReport r;
  r.arena = v.arena_bytes();
  const int steps = v.steps_size(), n = v.buffers_size();
  auto rootOf = [&](int b) {
    const int alias = v.buffers(b).alias_of();
    return alias >= 0 && alias < n ? alias : b;
  };
  // Each arena root's live steps: from its first write (or the start, for what the step does not write
  // first) to its last read (or the end, for what outlives the step).
  std::vector<int> first(n, steps), last(n, -1);
  for (const auto &step : v.steps()) {
    for (int b : step.inputs())
      r.readBytes += b >= 0 && b < n ? v.buffers(b).bytes() : 0;
    for (int b : step.outputs())
      r.writtenBytes += b >= 0 && b < n ? v.buffers(b).bytes() : 0;
  }
  for (int s = 0; s < steps; ++s) {
    for (int b : v.steps(s).outputs())
      if (b >= 0 && b < n)
        first[rootOf(b)] = std::min(first[rootOf(b)], s);
    for (int b : v.steps(s).inputs())
      if (b >= 0 && b < n)
        last[rootOf(b)] = std::max(last[rootOf(b)], s);
  }
  std::vector<int> roots;
  for (int b = 0; b < n; ++b) {
    const auto &buffer = v.buffers(b);
    if (buffer.alias_of() >= 0)
      continue;
    if (buffer.role() == plan::PARAM || buffer.role() == plan::CONSTANT) {
      r.dataBytes += buffer.bytes();
      continue;
    }
    if (buffer.role() == plan::INPUT || buffer.role() == plan::STATE)
      first[b] = 0, last[b] = steps;
    if (buffer.role() == plan::OUTPUT)
      last[b] = steps;
    roots.push_back(b);
    if (buffer.kind() == plan::KIND_SAVED)
      r.savedBytes += buffer.bytes();
  }
  for (int s = 0; s < std::max(steps, 1); ++s) {
    int64_t live = 0;
    for (int b : roots)
      if (first[b] <= s && s <= last[b])
        live += v.buffers(b).bytes();
    if (live > r.peakBytes)
      r.peakBytes = live, r.peakStep = s;
  }
  std::map<plan::Kind, int64_t> kinds;
  for (int b : roots)
    if (first[b] <= r.peakStep && r.peakStep <= last[b])
      kinds[v.buffers(b).kind()] += v.buffers(b).bytes();
  r.atPeak.assign(kinds.begin(), kinds.end());
  return r;
}

} // namespace tec
