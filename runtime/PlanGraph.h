// What a backend asks of a variant's steps and buffers when it fuses or folds steps at prepare time: who
// reads a buffer, where its storage is live, whether a step in between overwrites it. Shared by the CPU and
// CUDA backends, which fold the same patterns (a transpose read through a GEMM's transpose flag).
#ifndef TEC_RUNTIME_PLANGRAPH_H
#define TEC_RUNTIME_PLANGRAPH_H

#include "runtime/plan.pb.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace tec {

class PlanGraph {
public:
  explicit PlanGraph(const plan::Variant &variant) : variant(&variant) {
    const int steps = variant.steps_size();
    live.assign(variant.buffers_size(), {steps, -1});
    readCount.assign(variant.buffers_size(), 0);
    for (int i = 0; i < steps; ++i) {
      for (int out : variant.steps(i).outputs())
        live[rootOf(out)].first = std::min(live[rootOf(out)].first, i);
      for (int in : variant.steps(i).inputs()) {
        live[rootOf(in)].second = i;
        ++readCount[rootOf(in)];
      }
    }
    for (int out : variant.outputs())
      ++readCount[rootOf(out)];
    for (int r = 0; r < variant.buffers_size(); ++r)
      if (variant.buffers(r).role() != plan::TEMP)
        live[r] = {-1, steps};
  }

  /// The buffer whose storage `b` views (itself when it is no view).
  int rootOf(int b) const { return variant->buffers(b).alias_of() >= 0 ? variant->buffers(b).alias_of() : b; }
  /// How many steps read `buffer` (or a view of its storage); a variant output counts as a reader.
  int readers(int buffer) const { return readCount[rootOf(buffer)]; }
  /// The step after `step` that reads `buffer`, when it has exactly one reader; else -1.
  int onlyReaderAfter(int buffer, int step) const {
    if (readers(buffer) != 1)
      return -1;
    for (int j = step + 1; j < variant->steps_size(); ++j)
      for (int in : variant->steps(j).inputs())
        if (rootOf(in) == rootOf(buffer))
          return j;
    return -1;
  }
  /// The first step after `step` that reads an output of `s` (the number of steps where none does).
  int firstReaderAfter(const plan::Step &s, int step) const {
    for (int j = step + 1; j < variant->steps_size(); ++j)
      for (int in : variant->steps(j).inputs())
        for (int out : s.outputs())
          if (rootOf(in) == rootOf(out))
            return j;
    return variant->steps_size();
  }
  /// Whether two buffers' storage overlaps (the arena and the data section are apart).
  bool overlaps(int a, int b) const {
    const auto &x = variant->buffers(rootOf(a)), &y = variant->buffers(rootOf(b));
    auto inData = [](const plan::Buffer &r) { return r.role() == plan::PARAM || r.role() == plan::CONSTANT; };
    return inData(x) == inData(y) && x.offset() < y.offset() + y.bytes() && y.offset() < x.offset() + x.bytes();
  }
  /// Whether no step in (from, to) writes any storage of `buffer`.
  bool unchangedBetween(int buffer, int from, int to) const {
    for (int i = from + 1; i < to; ++i)
      for (int out : variant->steps(i).outputs())
        if (overlaps(out, buffer))
          return false;
    return true;
  }
  /// Whether a step in (from, to) writes `buffer`'s storage.
  bool writtenBetween(int buffer, int from, int to) const {
    for (int i = from + 1; i < to; ++i)
      for (int out : variant->steps(i).outputs())
        if (rootOf(out) == rootOf(buffer))
          return true;
    return false;
  }
  /// Whether no other arena buffer that overlaps `buffer`'s bytes is live anywhere in steps [from, to].
  bool storageFreeBetween(int buffer, int from, int to) const {
    const auto &b = variant->buffers(rootOf(buffer));
    if (b.role() != plan::TEMP && b.role() != plan::OUTPUT)
      return false;
    for (int r = 0; r < variant->buffers_size(); ++r) {
      const auto &o = variant->buffers(r);
      if (r == rootOf(buffer) || o.alias_of() >= 0 || o.role() == plan::PARAM || o.role() == plan::CONSTANT ||
          o.offset() >= b.offset() + b.bytes() || b.offset() >= o.offset() + o.bytes())
        continue;
      if (live[r].first <= to && from <= live[r].second)
        return false;
    }
    return true;
  }
  /// Whether step `from` may write `buffer`, which step `to` writes in the plan: its storage (it may be
  /// an in-place view of something) is neither read nor written in between, nor shared with a live buffer.
  bool writableEarly(int buffer, int from, int to) const {
    if (!storageFreeBetween(buffer, from, to) || writtenBetween(buffer, from, to))
      return false;
    for (int i = from; i < to; ++i)
      for (int in : variant->steps(i).inputs())
        if (rootOf(in) == rootOf(buffer))
          return false;
    return true;
  }
  /// Keeps `buffer`'s storage live through `step` (a fold that reads it later than the plan did).
  void extendLive(int buffer, int step) { live[rootOf(buffer)].second = std::max(live[rootOf(buffer)].second, step); }

private:
  const plan::Variant *variant;
  /// Per root buffer, the steps it is live over: from its first write (inputs and state: from the start) to
  /// its last read (outputs and state: the end); and how many reads it has.
  std::vector<std::pair<int, int>> live;
  std::vector<int> readCount;
};

/// Whether the variant's steps talk to other ranks (a training step's all_reduce, ZeRO's reduce_scatter and
/// all_gather): only then does a process under mpirun join the group.
inline bool usesCollectives(const plan::Variant &v) {
  for (const auto &step : v.steps())
    if (step.kernel() == "all_reduce" || step.kernel() == "reduce_scatter" || step.kernel() == "all_gather")
      return true;
  return false;
}

/// Collectives a backend started and has not yet ended (waited for), by the first step that reads what they
/// write, so that the steps in between run while they travel. Each keeps the step that started it (the
/// profile counts the wait there) and the closure that ends it.
template <class Closure> class PendingCollectives {
public:
  void add(int reader, int started, Closure end) {
    ends.emplace(reader, std::pair<int, Closure>(started, std::move(end)));
  }
  /// Hands `emit(started, end)` the ends of the collectives read by steps up to `step`.
  template <class Emit> void endThrough(int step, Emit &&emit) {
    while (!ends.empty() && ends.begin()->first <= step) {
      auto node = ends.extract(ends.begin());
      emit(node.mapped().first, std::move(node.mapped().second));
    }
  }

private:
  std::multimap<int, std::pair<int, Closure>> ends;
};

} // namespace tec

#endif
