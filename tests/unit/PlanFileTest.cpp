// Plan files and Session, with the runtime library alone (this test does not link MLIR, proving a
// plan runs without the compiler): round trip, and refusal of corrupt, truncated, other-version and
// inconsistent plans with clear messages.
#include "runtime/Backend.h"
#include "runtime/Session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include <fstream>
#include <iterator>
#include <stdlib.h>

using namespace tec;

namespace {

std::string tempDir() {
  std::string dir = "/tmp/tec-plan-test.XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

plan::Buffer *addBuffer(plan::Variant &v, const std::string &name, std::vector<int64_t> shape, plan::Role role,
                        int64_t offset) {
  auto *b = v.add_buffers();
  b->set_name(name);
  b->set_dtype(plan::F32);
  int64_t n = 1;
  for (int64_t d : shape) {
    b->add_shape(d);
    n *= d;
  }
  b->set_role(role);
  b->set_bytes(n * 4);
  b->set_offset(offset);
  b->set_alias_of(-1);
  return b;
}

/// y = relu(x + bias) with x: input [2,3], bias: param [3].
struct SmallPlan {
  plan::Plan plan;
  PlanDataBuilder data;
  std::vector<float> bias = {1.0f, -2.0f, 0.5f};
  SmallPlan() {
    auto &v = *plan.add_variants();
    v.set_target("cpu");
    v.set_precision("fp32");
    addBuffer(v, "x", {2, 3}, plan::INPUT, 0);
    addBuffer(v, "bias", {3}, plan::PARAM, data.add(bias.data(), 12));
    addBuffer(v, "sum", {2, 3}, plan::TEMP, 64);
    addBuffer(v, "y", {2, 3}, plan::OUTPUT, 64)->set_alias_of(2);
    v.set_arena_bytes(128);
    auto *add = v.add_steps();
    add->set_kernel("add");
    add->add_inputs(0);
    add->add_inputs(1);
    add->add_outputs(2);
    auto *relu = v.add_steps();
    relu->set_kernel("relu");
    relu->add_inputs(2);
    relu->add_outputs(3);
    v.add_inputs(0);
    v.add_outputs(3);
    plan.add_input_names("x");
    plan.add_output_names("y");
    plan.set_source_model("handmade");
  }
  std::string write(const std::string &dir) {
    std::string path = dir + "/small.tecplan";
    Status s = writePlanFile(path, plan, data);
    EXPECT_TRUE(s.ok()) << s.message();
    return path;
  }
};

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string openError(const std::string &path) {
  auto session = Session::open(path);
  EXPECT_FALSE(session.ok());
  return session.ok() ? "" : session.error().message();
}

} // namespace

TEST(PlanFile, RoundTripRunsAndReadsWeightsInPlace) {
  SmallPlan small;
  std::string path = small.write(tempDir());
  auto session = Session::open(path);
  ASSERT_TRUE(session.ok()) << session.error().message();
  auto &s = **session;
  EXPECT_EQ(s.backendName(), "cpu");
  EXPECT_NE(s.selectionReason().find("cpu"), std::string::npos);
  std::vector<float> x = {0, 0, 0, -5, 5, -5};
  ASSERT_TRUE(s.setInput(0, x.data(), 24).ok());
  ASSERT_TRUE(s.run().ok());
  auto *y = static_cast<const float *>(s.outputData(0));
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{1, 0, 0.5f, 0, 3, 0}));
  // The data section is 64-byte aligned in the file, so mapped weights are aligned for SIMD.
  auto file = PlanFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*file)->data()) % 64, 0u);
}

// A backend's prepared steps point into its arena: preparing it for a second plan is refused (it crashed).
TEST(PlanFile, ABackendIsPreparedForOnePlanOnly) {
  SmallPlan first, second;
  const std::vector<float> data(first.bias.begin(), first.bias.end());
  auto cpu = createCpuBackend(1);
  ASSERT_TRUE(cpu->prepare(first.plan.variants(0), reinterpret_cast<const char *>(data.data())).ok());
  Status again = cpu->prepare(second.plan.variants(0), reinterpret_cast<const char *>(data.data()));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.message(), "the cpu backend is already prepared for a plan: create another backend for another plan");
  std::vector<float> x = {0, 0, 0, -5, 5, -5};
  std::memcpy(cpu->hostData(0), x.data(), 24);
  ASSERT_TRUE(cpu->run().ok()); // still the first plan
  auto *y = static_cast<const float *>(cpu->hostData(3));
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{1, 0, 0.5f, 0, 3, 0}));
}

// A backend answers for each step before it lays anything out (ggml's supports_op): a step that breaks its
// kernel's contract is refused by supports() and by prepare(), naming the step, and the backend stays
// unprepared (a good plan still prepares on it).
TEST(PlanFile, ABackendSaysWhichStepsItSupportsBeforePreparing) {
  SmallPlan bad, good;
  bad.plan.mutable_variants(0)->mutable_steps(0)->add_inputs(2);
  const plan::Variant &v = bad.plan.variants(0);
  auto cpu = createCpuBackend(1);
  EXPECT_TRUE(cpu->supports(v, v.steps(1)).ok());
  Status refused = cpu->supports(v, v.steps(0));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("step 'add' (from ): expected 2 inputs and 1 outputs, got 3 and 1"), std::string::npos)
      << refused.message();
  const std::vector<float> data(good.bias.begin(), good.bias.end());
  Status prepared = cpu->prepare(v, reinterpret_cast<const char *>(data.data()));
  EXPECT_EQ(prepared.message(), refused.message());
  EXPECT_TRUE(cpu->prepare(good.plan.variants(0), reinterpret_cast<const char *>(data.data())).ok());
}

TEST(PlanFile, WrongInputSizeIsAnError) {
  SmallPlan small;
  auto session = Session::open(small.write(tempDir()));
  ASSERT_TRUE(session.ok());
  float x[2] = {};
  Status s = (*session)->setInput(0, x, sizeof(x));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "input 'x' takes 24 bytes, got 8");
}

/// Device pointers are for the CUDA backend: on the CPU the input is refused with why, and no output has a
/// device address.
TEST(PlanFile, DevicePointersAreRefusedOnTheCpu) {
  SmallPlan small;
  SessionOptions options;
  options.device = "cpu";
  auto session = Session::open(small.write(tempDir()), options);
  ASSERT_TRUE(session.ok());
  float x[6] = {};
  Status s = (*session)->setInputFromDevice(0, x);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "input 'x': the cpu backend runs in host memory: give the input as a host array");
  EXPECT_EQ((*session)->outputDevicePointer(0), nullptr);
}

TEST(PlanFile, CorruptByteIsRefusedByTheChecksum) {
  SmallPlan small;
  std::string path = small.write(tempDir());
  std::string bytes = readAll(path);
  bytes[bytes.size() - 3] ^= 0x10; // inside the bias weights
  writeAll(path, bytes);
  EXPECT_EQ(openError(path), path + ": not a usable tec plan: checksum mismatch: the file is corrupt");
}

TEST(PlanFile, TruncatedFileIsRefused) {
  SmallPlan small;
  std::string path = small.write(tempDir());
  std::string bytes = readAll(path);
  writeAll(path, bytes.substr(0, bytes.size() - 8));
  EXPECT_NE(openError(path).find("do not fit in the file"), std::string::npos);
  writeAll(path, bytes.substr(0, 20));
  EXPECT_NE(openError(path).find("shorter than the 64-byte header"), std::string::npos);
}

TEST(PlanFile, OtherFormatVersionIsRefused) {
  SmallPlan small;
  std::string path = small.write(tempDir());
  std::string bytes = readAll(path);
  bytes[8] = 7; // the version field follows the 8-byte magic
  writeAll(path, bytes);
  EXPECT_EQ(openError(path), path + ": not a usable tec plan: format version 7, but this tec reads version 2; "
                                    "recompile the model with this tec");
}

TEST(PlanFile, NotAPlanIsRefused) {
  std::string path = tempDir() + "/model.onnx";
  writeAll(path, std::string(200, 'x'));
  EXPECT_NE(openError(path).find("bad magic"), std::string::npos);
}

TEST(PlanFile, InconsistentMetadataIsRefusedBeforeAnythingRuns) {
  SmallPlan small;
  small.plan.mutable_variants(0)->mutable_steps(0)->set_inputs(1, 99);
  std::string path = small.write(tempDir());
  EXPECT_NE(openError(path).find("step 'add' refers to buffer 99 of 4"), std::string::npos);

  SmallPlan outside;
  outside.plan.mutable_variants(0)->mutable_buffers(1)->set_offset(1 << 20);
  path = outside.write(tempDir());
  EXPECT_NE(openError(path).find("buffer 'bias' lies outside the data section"), std::string::npos);

  SmallPlan unknown;
  unknown.plan.mutable_variants(0)->mutable_steps(1)->set_kernel("frobnicate");
  path = unknown.write(tempDir());
  EXPECT_NE(openError(path).find("step 'frobnicate' (from ): no such kernel"), std::string::npos);
}

// A plan whose checksum is valid can still describe steps that do not fit their kernels: each is
// refused, with the step named, before a backend prepares anything (the run would read or write out of
// bounds, or into the read-only mapping of the params).
TEST(PlanFile, EveryStepIsCheckedAgainstItsKernelsContract) {
  auto refused = [](const std::function<void(plan::Variant &)> &edit) {
    SmallPlan p;
    edit(*p.plan.mutable_variants(0));
    return openError(p.write(tempDir()));
  };
  EXPECT_NE(refused([](plan::Variant &v) { v.mutable_steps(1)->set_outputs(0, 1); })
                .find("step 'relu' (from ): writes 'bias', which is read-only"),
            std::string::npos);
  EXPECT_NE(refused([](plan::Variant &v) { v.mutable_steps(0)->add_inputs(2); })
                .find("step 'add' (from ): expected 2 inputs and 1 outputs, got 3 and 1"),
            std::string::npos);
  EXPECT_NE(refused([](plan::Variant &v) { v.mutable_buffers(0)->set_shape(0, 3), v.mutable_buffers(0)->set_shape(1, 2); })
                .find("operands [3x2] and [3] do not broadcast to [2x3]"),
            std::string::npos);
  // Attributes that do not fit the buffers: a split axis, reduce axes, a perm.
  EXPECT_NE(refused([](plan::Variant &v) {
              auto *s = v.mutable_steps(1);
              s->set_kernel("split");
              (*s->mutable_attrs())["axis"].set_i(5);
            }).find("axis 5 is outside rank 2"),
            std::string::npos);
  EXPECT_NE(refused([](plan::Variant &v) {
              auto *s = v.mutable_steps(1);
              s->set_kernel("reduce_sum");
              (*s->mutable_attrs())["axes"].mutable_ints()->add_values(-1);
            }).find("axis -1 is outside rank 2"),
            std::string::npos);
  EXPECT_NE(refused([](plan::Variant &v) {
              auto *s = v.mutable_steps(1);
              s->set_kernel("transpose");
              for (int64_t p : {0, 0})
                (*s->mutable_attrs())["perm"].mutable_ints()->add_values(p);
            }).find("perm is not a permutation"),
            std::string::npos);
  // A Linear whose transpose_b does not fit its weight, and one whose output has extra unit dims.
  EXPECT_NE(refused([](plan::Variant &v) {
              auto *s = v.mutable_steps(1);
              s->set_kernel("linear");
              s->clear_inputs();
              s->add_inputs(2);
              s->add_inputs(0);
              (*s->mutable_attrs())["transpose_b"].set_i(1);
            }).find("do not fit"),
            std::string::npos);
}

TEST(PlanFile, WriteIntoAMissingFolderFailsWithoutLeavingAFile) {
  SmallPlan small;
  Status s = writePlanFile("/nonexistent-dir/x.tecplan", small.plan, small.data);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.tecplan"), std::string::npos);
}

TEST(VariantChoice, FallsBackToCpuAndSaysWhy) {
  SmallPlan small;
  GpuOffer noGpu;
  noGpu.cuda.reason = "no CUDA driver (libcuda.so.1 not found)";
  auto choice = chooseVariant(small.plan, noGpu, {});
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->backend, "cpu");
  EXPECT_NE(choice->reason.find("no CUDA driver"), std::string::npos);

  SessionOptions forceCuda;
  forceCuda.device = "cuda";
  auto forced = chooseVariant(small.plan, noGpu, forceCuda);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.error().message().find("--device cuda"), std::string::npos);

  SessionOptions missing;
  missing.variant = "sm_90";
  auto absent = chooseVariant(small.plan, noGpu, missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.error().message(), "the plan has no variant 'sm_90' (it has: cpu)");
}

// What --strict refuses: a GPU present and unused, an FP8 variant skipped, no variant for this GPU; never the
// CPU of a machine without a GPU, nor the CPU asked for.
TEST(VariantChoice, StrictKnowsAFallbackFromTheFastPath) {
  SmallPlan small;
  GpuOffer noGpu;
  noGpu.cuda.reason = "no CUDA driver (libcuda.so.1 not found)";
  auto cpuHere = chooseVariant(small.plan, noGpu, {});
  ASSERT_TRUE(cpuHere.ok());
  EXPECT_EQ(variantFallback(*cpuHere, noGpu, {}), "");
  GpuOffer pluginMissing;
  pluginMissing.cuda.usable = true, pluginMissing.cuda.major = 9, pluginMissing.cuda.name = "Test GPU";
  pluginMissing.backendMissing = "cannot load the CUDA backend plugin";
  auto unused = chooseVariant(small.plan, pluginMissing, {});
  ASSERT_TRUE(unused.ok());
  EXPECT_EQ(unused->backend, "cpu");
  EXPECT_NE(variantFallback(*unused, pluginMissing, {}).find("cannot load the CUDA backend plugin"), std::string::npos);
  SessionOptions cpu;
  cpu.device = "cpu";
  EXPECT_EQ(variantFallback(*unused, pluginMissing, cpu), "");
  VariantChoice skipped{0, "cuda", "variant sm_80 (bf16) on the cuda backend, Test GPU (sm_90); skipped sm_90 (fp8): "
                                   "cuBLASLt too old"};
  EXPECT_EQ(variantFallback(skipped, pluginMissing, {}), skipped.reason);
}

TEST(VariantChoice, WithoutACpuVariantTheCpuEmulatesTheBestOne) {
  SmallPlan small;
  small.plan.mutable_variants(0)->set_target("sm_90");
  GpuOffer noGpu;
  noGpu.cuda.reason = "the CUDA driver reports no device";
  auto choice = chooseVariant(small.plan, noGpu, {});
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->index, 0);
  EXPECT_EQ(choice->reason, "variant sm_90 on the cpu backend (the plan has no cpu variant; its GPU precisions are "
                            "emulated): the CUDA driver reports no device");
}

/// A plan with variants for sm_90 (FP8), sm_80 (BF16) and the cpu, as `tec --target all` writes.
plan::Plan threeTargets(const plan::Plan &base) {
  plan::Plan p = base;
  p.clear_variants();
  for (const char *target : {"sm_90", "sm_80", "cpu"}) {
    auto *v = p.add_variants();
    *v = base.variants(0);
    v->set_target(target);
    v->set_precision(std::string(target) == "sm_90" ? "fp8" : "bf16");
    if (std::string(target) == "sm_90")
      v->add_steps()->set_kernel("fp8_gemm");
  }
  return p;
}

GpuOffer gpuOffer(int major, int minor, std::string fp8Missing = "") {
  GpuOffer g;
  g.cuda.usable = true;
  g.cuda.name = "Test GPU";
  g.cuda.major = major;
  g.cuda.minor = minor;
  g.fp8Missing = std::move(fp8Missing);
  return g;
}

TEST(VariantChoice, PicksTheNewestVariantTheGpuRuns) {
  SmallPlan small;
  plan::Plan p = threeTargets(small.plan);
  auto hopper = chooseVariant(p, gpuOffer(9, 0), {});
  ASSERT_TRUE(hopper.ok());
  EXPECT_EQ(hopper->backend, "cuda");
  EXPECT_EQ(hopper->index, 0);
  EXPECT_EQ(hopper->reason, "variant sm_90 (fp8) on the cuda backend, Test GPU (sm_90)");

  // Ampere runs the sm_80 variant, never the sm_90 one.
  auto ampere = chooseVariant(p, gpuOffer(8, 6, "sm_86 has no FP8 tensor cores"), {});
  ASSERT_TRUE(ampere.ok());
  EXPECT_EQ(ampere->index, 1);

  // Ada without a new enough cuBLASLt: the FP8 variant is skipped, and the reason says so.
  plan::Plan ada = p;
  ada.mutable_variants(0)->set_target("sm_89");
  auto old = chooseVariant(ada, gpuOffer(8, 9, "Ada needs cuBLASLt 12.1.3 or newer for FP8, found 12.1.2"), {});
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->index, 1);
  EXPECT_NE(old->reason.find("skipped sm_89 (fp8): Ada needs cuBLASLt 12.1.3"), std::string::npos) << old->reason;

  // A GPU older than every GPU variant runs the cpu variant on the GPU.
  auto volta = chooseVariant(p, gpuOffer(7, 0, "no"), {});
  ASSERT_TRUE(volta.ok());
  EXPECT_EQ(volta->backend, "cuda");
  EXPECT_EQ(volta->index, 2);
  EXPECT_NE(volta->reason.find("no variant for sm_70"), std::string::npos);

  // --device cpu keeps to the cpu; a missing plugin falls back to it and says why.
  SessionOptions cpuOnly;
  cpuOnly.device = "cpu";
  EXPECT_EQ(chooseVariant(p, gpuOffer(9, 0), cpuOnly)->backend, "cpu");
  GpuOffer noPlugin = gpuOffer(9, 0);
  noPlugin.backendMissing = "cannot load the CUDA backend plugin (libtec_cuda.so: not found)";
  auto fallback = chooseVariant(p, noPlugin, {});
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->backend, "cpu");
  EXPECT_EQ(fallback->reason, "variant cpu on the cpu backend: found Test GPU (sm_90) but cannot load the CUDA "
                              "backend plugin (libtec_cuda.so: not found)");
  SessionOptions forceCuda;
  forceCuda.device = "cuda";
  EXPECT_FALSE(chooseVariant(p, noPlugin, forceCuda).ok());
}

TEST(Fp8Availability, FollowsComputeCapabilityAndCublasLtVersion) {
  CudaProbe gpu;
  gpu.usable = true;
  std::vector<LibraryProbe> libs = {{"cuBLASLt", "libcublasLt.so.12", "12.1.2"}};
  gpu.major = 8, gpu.minor = 0;
  EXPECT_EQ(fp8Availability(gpu, libs), "no: sm_80 has no FP8 tensor cores (needs sm_89 or newer); BF16/FP16 instead");
  gpu.major = 8, gpu.minor = 9;
  EXPECT_EQ(fp8Availability(gpu, libs), "no: Ada needs cuBLASLt 12.1.3 or newer for FP8, found 12.1.2");
  libs[0].version = "12.1.3";
  EXPECT_EQ(fp8Availability(gpu, libs), "yes (sm_89)");
  gpu.major = 9, gpu.minor = 0;
  EXPECT_EQ(fp8Availability(gpu, libs), "yes (sm_90)");
  CudaProbe none;
  none.reason = "no CUDA driver (libcuda.so.1 not found)";
  EXPECT_EQ(fp8Availability(none, libs), "no: no usable GPU (no CUDA driver (libcuda.so.1 not found))");
  EXPECT_EQ(fp8Availability(gpu, {}), "no: cuBLASLt not found");
}

TEST(Fp8Availability, BlockScalingRunsOnCublasLtFrom12Point9OnHopper) {
  CudaProbe gpu;
  gpu.usable = true;
  gpu.major = 9, gpu.minor = 0;
  std::vector<LibraryProbe> libs = {{"cuBLASLt", "libcublasLt.so.12", "12.8.4"}};
  const std::string old = blockScalingAvailability(gpu, libs);
  EXPECT_EQ(old.rfind("tec's kernel", 0), 0u) << old;
  EXPECT_NE(old.find("12.9 or newer"), std::string::npos) << old;
  libs[0].version = "12.9.0";
  EXPECT_EQ(blockScalingAvailability(gpu, libs).rfind("cuBLASLt's block scale modes", 0), 0u);
  libs[0] = {"cuBLASLt", "libcublasLt.so.13", "13.1.0"};
  EXPECT_EQ(blockScalingAvailability(gpu, libs).rfind("cuBLASLt's block scale modes", 0), 0u);
  gpu.major = 8, gpu.minor = 9;
  EXPECT_EQ(blockScalingAvailability(gpu, libs), "no: sm_89 runs current scaling instead (block scaling needs sm_90)");
}
