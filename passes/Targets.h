// The capability table: what each target runs its GEMMs in. The one place that knows targets; the
// lowering pass, the pipeline and the compile summary all read it.
#ifndef TEC_PASSES_TARGETS_H
#define TEC_PASSES_TARGETS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace tec {

enum class GemmPrecision { Fp8, BF16, F16, F32 };

struct TargetCapability {
  llvm::StringLiteral name;      // "sm_90", "cpu", ...
  llvm::StringLiteral family;    // for messages: "Hopper", "Ampere", ...
  GemmPrecision gemms;           // tensor-core precision of GEMMs (FP8 ones only where eligible)
  GemmPrecision fallback;        // GEMMs that cannot or may not use FP8
  llvm::StringLiteral note;      // a caveat the summary repeats
};

/// Every target tec builds, best first: a plan's variants are tried in this order.
llvm::ArrayRef<TargetCapability> allTargets();
const TargetCapability *lookupTarget(llvm::StringRef name);
llvm::StringRef precisionName(GemmPrecision p);

} // namespace tec

#endif
