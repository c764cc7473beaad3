// The capability table: what each target runs its GEMMs in. The one place that knows targets; the
// lowering pass, the pipeline, the compile summary and the runtime all read it (no LLVM: the runtime links
// none of the compiler).
#ifndef TEC_SUPPORT_TARGETS_H
#define TEC_SUPPORT_TARGETS_H

#include <string>
#include <string_view>
#include <vector>

namespace tec {

enum class GemmPrecision { Fp8, BF16, F16, F32 };

struct TargetCapability {
  std::string_view name;   // "sm_90", "cpu", ...
  std::string_view family; // for messages: "Hopper", "Ampere", ...
  GemmPrecision gemms;     // tensor-core precision of GEMMs (FP8 ones only where eligible)
  GemmPrecision fallback;  // GEMMs that cannot or may not use FP8
  std::string_view note;   // a caveat the summary repeats
  int sm = 0;              // the compute capability as major * 10 + minor (90: sm_90); 0 for the cpu
};

/// Every target tec builds, best first: a plan's variants are tried in this order.
const std::vector<TargetCapability> &allTargets();
const TargetCapability *lookupTarget(std::string_view name);
/// "sm_100, sm_90, ..., cpu": every target's name, for messages.
std::string knownTargets();
std::string_view precisionName(GemmPrecision p);

} // namespace tec

#endif
