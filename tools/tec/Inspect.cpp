// tec inspect plan.tecplan: a plan's variants, steps, buffers and memory (or its metadata as JSON).
#include "Cli.h"

#include "runtime/MemoryReport.h"
#include "runtime/PlanFile.h"

#include <google/protobuf/util/json_util.h>

namespace cl = llvm::cl;

namespace cli {

cl::SubCommand &inspectSubcommand() {
  static cl::SubCommand sub("inspect", "print a plan's variants, steps, buffers and memory");
  return sub;
}

cl::opt<std::string> inspectPlan(cl::Positional, cl::desc("<model.tecplan>"), cl::Required, cl::sub(inspectSubcommand()), cl::cat(category()));

cl::opt<bool> inspectJson("json", cl::desc("the plan's metadata as JSON"), cl::sub(inspectSubcommand()), cl::cat(category()));

const char *roleName(tec::plan::Role r) {
  switch (r) {
  case tec::plan::INPUT: return "input";
  case tec::plan::OUTPUT: return "output";
  case tec::plan::PARAM: return "param";
  case tec::plan::CONSTANT: return "constant";
  case tec::plan::STATE: return "state";
  default: return "temp";
  }
}

int inspect() {
  auto file = tec::PlanFile::open(inspectPlan);
  if (!file.ok()) {
    llvm::errs() << "error: " << file.error().message() << "\n";
    return kExitBadInput;
  }
  const auto &plan = (*file)->plan();
  if (inspectJson) {
    std::string json;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(plan, &json, opts);
    llvm::outs() << json;
    return 0;
  }
  auto &os = llvm::outs();
  os << "plan " << inspectPlan << ": from " << plan.source_model() << ", format v" << tec::kPlanFormatVersion << ", data "
     << bytesString((*file)->dataSize()) << "\n";
  os << "inputs:  " << llvm::join(plan.input_names(), ", ") << "\n";
  os << "outputs: " << llvm::join(plan.output_names(), ", ") << "\n";
  for (const auto &v : plan.variants()) {
    int64_t params = 0, constants = 0;
    for (const auto &b : v.buffers()) {
      if (b.alias_of() >= 0)
        continue;
      if (b.role() == tec::plan::PARAM)
        params += b.bytes();
      else if (b.role() == tec::plan::CONSTANT)
        constants += b.bytes();
    }
    os << "\nvariant " << v.target() << " (" << v.precision() << "): " << v.steps_size() << " steps, "
       << v.buffers_size() << " buffers\n";
    os << "  memory: arena " << bytesString(v.arena_bytes()) << ", params " << bytesString(params) << ", constants "
       << bytesString(constants) << "\n";
    const tec::MemoryReport report = tec::memoryReport(v);
    os << "  " << memoryLine(report) << "\n";
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
      std::string type = std::string(tec::dtypeName(b.dtype())) + "[" +
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
  return 0;
}

} // namespace cli
