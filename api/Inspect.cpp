#include "api/Inspect.h"

#include "api/Checkpoint.h"
#include "runtime/Doctor.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/util/json_util.h>

#include <functional>
#include <numeric>

namespace tec {

namespace {

const char *roleName(plan::Role r) {
  switch (r) {
  case plan::INPUT: return "input";
  case plan::OUTPUT: return "output";
  case plan::PARAM: return "param";
  case plan::CONSTANT: return "constant";
  case plan::STATE: return "state";
  default: return "temp";
  }
}

} // namespace

std::string bytesString(double bytes) { return formatBytes(bytes); }

std::string shapeString(llvm::ArrayRef<int64_t> dims) {
  std::string s;
  for (auto [i, d] : llvm::enumerate(dims))
    s += (i ? "x" : "") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

std::string memoryLine(const MemoryReport &m) {
  std::string line = (m.savedBytes ? "saved for the backward pass " + bytesString(m.savedBytes) + "; " : std::string()) +
                     "peak at step " + std::to_string(m.peakStep) + ": " + bytesString(m.peakBytes) + " live";
  for (auto [i, entry] : llvm::enumerate(m.atPeak))
    line += std::string(i ? ", " : ": ") + kindName(entry.first) + " " + bytesString(entry.second);
  return line;
}

std::string perRankLine(const plan::Variant &v) {
  int64_t params = 0, optimizer = 0, whole = 0, ranks = 0;
  for (const auto &b : v.buffers()) {
    if (b.alias_of() >= 0 || b.role() != plan::STATE)
      continue;
    if (b.kind() == plan::KIND_PARAM)
      params += b.bytes();
    if (b.kind() != plan::KIND_OPTIMIZER_STATE)
      continue;
    optimizer += b.bytes();
    const auto shape = wholeShape(b);
    whole += std::accumulate(shape.begin(), shape.end(), int64_t(4), std::multiplies<>());
    ranks = std::max(ranks, b.shard_ranks());
  }
  if (optimizer == 0)
    return "";
  return "per rank: trained params " + bytesString(params) + ", optimizer state " + bytesString(optimizer) +
         (ranks > 0 ? " (its 1/" + std::to_string(ranks) + " of " + bytesString(whole) + ", sharded over " +
                          std::to_string(ranks) + " ranks)"
                    : " (whole on every rank; --shard-optimizer N gives each rank 1/N)");
}

std::string describePlan(const PlanFile &file, const std::string &path) {
  std::string text;
  llvm::raw_string_ostream os(text);
  const auto &plan = file.plan();
  os << "plan " << path << ": from " << plan.source_model() << ", format v" << kPlanFormatVersion << ", data "
     << bytesString(file.dataSize()) << "\n";
  os << "inputs:  " << llvm::join(plan.input_names(), ", ") << "\n";
  os << "outputs: " << llvm::join(plan.output_names(), ", ") << "\n";
  for (const auto &v : plan.variants()) {
    int64_t params = 0, constants = 0;
    for (const auto &b : v.buffers()) {
      if (b.alias_of() >= 0)
        continue;
      if (b.role() == plan::PARAM)
        params += b.bytes();
      else if (b.role() == plan::CONSTANT)
        constants += b.bytes();
    }
    os << "\nvariant " << v.target() << " (" << v.precision() << "): " << v.steps_size() << " steps, "
       << v.buffers_size() << " buffers\n";
    os << "  memory: arena " << bytesString(v.arena_bytes()) << ", params " << bytesString(params) << ", constants "
       << bytesString(constants) << "\n";
    const MemoryReport report = memoryReport(v);
    os << "  " << memoryLine(report) << "\n";
    if (std::string perRank = perRankLine(v); !perRank.empty())
      os << "  " << perRank << "\n";
    os << "  moved per run: " << bytesString(report.readBytes + report.writtenBytes) << " (read "
       << bytesString(report.readBytes) << ", written " << bytesString(report.writtenBytes) << ")\n";
    os << "  steps:\n";
    for (auto [i, st] : llvm::enumerate(v.steps())) {
      std::string ins, outs;
      for (int b : st.inputs())
        ins += (ins.empty() ? "" : ", ") + std::string("%") + std::to_string(b);
      for (int b : st.outputs())
        outs += (outs.empty() ? "" : ", ") + std::string("%") + std::to_string(b);
      os << llvm::formatv("    {0,3}  {1,-14} {2} -> {3}", i, st.kernel(), ins, outs);
      if (!st.source().empty())
        os << "   (" << st.source() << ")";
      os << "\n";
    }
    os << "  buffers:\n";
    for (auto [i, b] : llvm::enumerate(v.buffers())) {
      std::string type = std::string(dtypeName(b.dtype())) + "[" +
                         shapeString(std::vector<int64_t>(b.shape().begin(), b.shape().end())) + "]";
      int64_t offset = b.alias_of() >= 0 ? v.buffers(b.alias_of()).offset() : b.offset();
      os << llvm::formatv("    %{0,-3} {1,-8} {2,-22} offset {3,10}  {4,10}", i, roleName(b.role()), type, offset,
                          bytesString(b.bytes()));
      if (b.alias_of() >= 0)
        os << "  view of %" << b.alias_of();
      if (b.has_init_fill())
        os << "  starts as " << llvm::format("%g", b.init_fill());
      if (b.host_f32())
        os << "  given as f32";
      os << "  " << b.name() << "\n";
    }
  }
  os.flush();
  return text;
}

std::string planMetadataJson(const plan::Plan &plan) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(plan, &json, opts);
  return json;
}

std::string describeSchedule(const Session &session) {
  const plan::Variant &v = session.variant();
  int launches = 0;
  for (int i = 0; i < v.steps_size(); ++i)
    launches += session.computedBy(i) == i;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "variant " << v.target() << " on the " << session.backendName() << " backend: " << v.steps_size()
     << " steps in " << launches << " launches\n";
  for (int i = 0; i < v.steps_size(); ++i) {
    const plan::Step &st = v.steps(i);
    os << llvm::formatv("  {0,4}  {1,-14}", i, st.kernel());
    if (const int by = session.computedBy(i); by != i)
      os << " in step " << by << ": " << session.foldedAs(i);
    if (const std::string kernel = session.chosenKernel(i); !kernel.empty())
      os << " on " << kernel;
    if (!st.source().empty())
      os << "   (" << st.source() << ")";
    os << "\n";
  }
  return text;
}

} // namespace tec
