// Codegen: the arena plan never lets two buffers that are alive at the same time share bytes (checked
// on every test model's plan from the steps alone), temporaries are reused, and IR without a kernel is
// refused with the op's name.
#include "api/CompileIR.h"
#include "codegen/Codegen.h"
#include "ir/TecOps.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace tec;

namespace {

struct Interval {
  int first, last;
  int64_t begin, end;
};

/// Lifetimes recomputed from the steps: an input lives for the whole run, an output to its end.
std::vector<Interval> arenaIntervals(const plan::Variant &v) {
  const int n = v.buffers_size(), end = v.steps_size() + 1;
  auto root = [&](int b) { return v.buffers(b).alias_of() >= 0 ? v.buffers(b).alias_of() : b; };
  std::vector<int> first(n, end), last(n, -1);
  for (int s = 0; s < v.steps_size(); ++s) {
    for (int b : v.steps(s).inputs())
      last[root(b)] = std::max(last[root(b)], s);
    for (int b : v.steps(s).outputs()) {
      first[root(b)] = std::min(first[root(b)], s);
      last[root(b)] = std::max(last[root(b)], s);
    }
  }
  std::vector<Interval> intervals;
  for (int b = 0; b < n; ++b) {
    const auto &buf = v.buffers(b);
    if (buf.alias_of() >= 0 || buf.role() == plan::PARAM || buf.role() == plan::CONSTANT)
      continue;
    if (buf.role() == plan::INPUT)
      first[b] = -1, last[b] = end;
    if (buf.role() == plan::OUTPUT)
      last[b] = end;
    intervals.push_back({first[b], last[b], buf.offset(), buf.offset() + buf.bytes()});
  }
  return intervals;
}

class ModelPlans : public ::testing::TestWithParam<const char *> {};

TEST_P(ModelPlans, LiveBuffersNeverShareBytesAndTemporariesAreReused) {
  mlir::MLIRContext context;
  std::string path = std::string(TEC_MODELS_DIR) + "/" + GetParam();
  auto compiled = compileModel(context, path, {});
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  const auto &v = (*compiled)->plan.variants(0);
  auto intervals = arenaIntervals(v);
  int64_t sum = 0;
  for (size_t i = 0; i < intervals.size(); ++i) {
    sum += intervals[i].end - intervals[i].begin;
    EXPECT_LE(intervals[i].end, v.arena_bytes());
    for (size_t j = i + 1; j < intervals.size(); ++j) {
      const auto &a = intervals[i], &b = intervals[j];
      bool together = a.first <= b.last && b.first <= a.last;
      bool overlap = a.begin < b.end && b.begin < a.end && a.begin != a.end && b.begin != b.end;
      EXPECT_FALSE(together && overlap) << "buffers alive at the same time share bytes in " << GetParam();
    }
  }
  EXPECT_LT(v.arena_bytes(), sum) << "the arena should reuse the space of dead temporaries";
}

INSTANTIATE_TEST_SUITE_P(TestModels, ModelPlans,
                         ::testing::Values("mlp.onnx", "gpt_block.onnx", "gpt_block_decomposed.onnx"));

TEST(Codegen, RefusesOpsWithoutAKernelNamingThem) {
  mlir::DialectRegistry registry;
  registry.insert<TecDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext context(registry);
  context.allowUnregisteredDialects();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
      %y = "mystery.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      return %y : tensor<4xf32>
    })mlir",
                                                        &context);
  ASSERT_TRUE(module);
  CodegenInputs inputs;
  inputs.argNames = {"x"};
  inputs.argDataOffsets = {-1};
  PlanDataBuilder data;
  auto variant = buildVariant(module->lookupSymbol<mlir::func::FuncOp>("forward"), inputs, data);
  ASSERT_FALSE(bool(variant));
  std::string message = llvm::toString(variant.takeError());
  EXPECT_NE(message.find("no kernel for this op ('mystery.op'"), std::string::npos) << message;
}

TEST(Codegen, ElementwiseOpsWriteInPlaceOverDeadInputs) {
  mlir::MLIRContext context;
  CompileOptions unfused;
  unfused.pipeline.disabledPasses = {"tec-recognize-patterns", "tec-fuse-linear"};
  auto compiled = compileModel(context, std::string(TEC_MODELS_DIR) + "/mlp.onnx", unfused);
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  const auto &v = (*compiled)->plan.variants(0);
  int relus = 0;
  for (const auto &step : v.steps())
    if (step.kernel() == "relu") {
      ++relus;
      const auto &out = v.buffers(step.outputs(0));
      EXPECT_EQ(out.alias_of(), step.inputs(0)) << "relu should overwrite the GEMM result it consumes";
    }
  EXPECT_EQ(relus, 1);
}

} // namespace
