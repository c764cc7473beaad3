// tec IR -> Plan: an ordered list of kernel launches over buffers, temporaries packed into one arena by
// liveness (reused, and written in place by elementwise ops where that is safe).
#ifndef TEC_CODEGEN_CODEGEN_H
#define TEC_CODEGEN_CODEGEN_H

#include "runtime/PlanFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace tec {

/// What codegen needs besides the IR: where each param's data went in the data section.
struct CodegenInputs {
  /// One entry per leading @forward argument (graph inputs, then params): the data-section offset of
  /// a param, -1 for a graph input. Arguments past these are state (`tec.state`), named by it.
  std::vector<int64_t> argDataOffsets;
  std::vector<std::string> argNames;
  std::string target = "cpu", precision = "fp32";
};

/// Lowers `forward` into one plan variant; constants go into `data` (referenced in the IR's attributes,
/// so the MLIRContext must outlive the plan's writing). Refuses, naming the op, what no kernel runs.
llvm::Expected<plan::Variant> buildVariant(mlir::func::FuncOp forward, const CodegenInputs &inputs,
                                           PlanDataBuilder &data);

} // namespace tec

#endif
