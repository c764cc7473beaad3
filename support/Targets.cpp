#include "support/Targets.h"

namespace tec {

const std::vector<TargetCapability> &allTargets() {
  static const std::vector<TargetCapability> table = {
      {"sm_100", "Blackwell", GemmPrecision::Fp8, GemmPrecision::BF16, "", 100},
      {"sm_90", "Hopper", GemmPrecision::Fp8, GemmPrecision::BF16, "", 90},
      {"sm_89", "Ada", GemmPrecision::Fp8, GemmPrecision::BF16, "FP8 needs cuBLASLt >= 12.1.3 on Ada", 89},
      {"sm_86", "Ampere", GemmPrecision::BF16, GemmPrecision::BF16, "no FP8 tensor cores before sm_89", 86},
      {"sm_80", "Ampere", GemmPrecision::BF16, GemmPrecision::BF16, "no FP8 tensor cores before sm_89", 80},
      {"sm_75", "Turing", GemmPrecision::F16, GemmPrecision::F16, "no FP8 before sm_89, no BF16 before sm_80", 75},
      {"sm_70", "Volta", GemmPrecision::F16, GemmPrecision::F16, "no FP8 before sm_89, no BF16 before sm_80", 70},
      {"cpu", "CPU", GemmPrecision::F32, GemmPrecision::F32,
       "cpu GEMMs run in FP32 (FP8 only emulated, with --fp8-emulate)"},
  };
  return table;
}

const TargetCapability *lookupTarget(std::string_view name) {
  for (const auto &t : allTargets())
    if (t.name == name)
      return &t;
  return nullptr;
}

std::string knownTargets() {
  std::string known;
  for (const auto &t : allTargets())
    known += (known.empty() ? "" : ", ") + std::string(t.name);
  return known;
}

std::string_view precisionName(GemmPrecision p) {
  switch (p) {
  case GemmPrecision::Fp8: return "fp8";
  case GemmPrecision::BF16: return "bf16";
  case GemmPrecision::F16: return "fp16";
  case GemmPrecision::F32: return "fp32";
  }
  return "?";
}

} // namespace tec
