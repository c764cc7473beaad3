// A plan described for people and programs: `tec inspect` and tec.Plan.summary()/metadata().
#ifndef TEC_API_INSPECT_H
#define TEC_API_INSPECT_H

#include "runtime/MemoryReport.h"
#include "runtime/PlanFile.h"
#include "runtime/Session.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>

namespace tec {

/// "1.5 MiB".
std::string bytesString(double bytes);
/// "64x1024", or "scalar".
std::string shapeString(llvm::ArrayRef<int64_t> dims);
/// "peak at step N: X live: params A, saved activations B, ..." for tec inspect and the compile summary.
std::string memoryLine(const MemoryReport &m);
/// "per rank: trained params X, optimizer state Y (its 1/N of Z, sharded over N ranks)" for a training
/// variant (data parallelism), "" for one without optimizer state.
std::string perRankLine(const plan::Variant &v);

/// The plan at `path` (opened as `file`): its source, inputs and outputs, and per variant its memory,
/// steps and buffers, as `tec inspect` prints them.
std::string describePlan(const PlanFile &file, const std::string &path);
/// How `session`'s backend runs its variant after prepare: each step as its own launch or inside the one
/// that computes it, and how (its epilogue, an elementwise chain, ...): the fusions a backend decides at load,
/// which the IR dumps cannot show (`tec inspect --schedule TARGET`).
std::string describeSchedule(const Session &session);

/// The plan's metadata (variants, steps, buffers, attributes) as JSON.
std::string planMetadataJson(const plan::Plan &plan);

} // namespace tec

#endif
