// Each plan kernel's contract, checked for every step before a backend prepares anything: a plan file is
// untrusted input, and a step whose operands do not fit its kernel would read or write out of bounds.
#ifndef TEC_RUNTIME_STEPCONTRACTS_H
#define TEC_RUNTIME_STEPCONTRACTS_H

#include "support/Status.h"
#include "runtime/plan.pb.h"

namespace tec {

/// Whether `step` of `variant` keeps its kernel's contract: a known kernel, its operand counts, element
/// types and shapes, attributes in range, and outputs that may be written (never a param, a constant
/// or an input). The buffers it names must exist (validatePlan checks that first).
Status checkStepContract(const plan::Variant &variant, const plan::Step &step);

} // namespace tec

#endif
