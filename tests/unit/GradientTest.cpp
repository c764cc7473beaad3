// Every differentiable op's gradient against central finite differences: tec-autodiff builds the
// vector-Jacobian product, both functions are compiled to plans and run on the CPU, and for random
// inputs x, cotangents c and directions v, <VJP(x, c), v> must equal (f(x + hv) - f(x - hv)) / 2h
// with f(x) = <c, forward(x)>.
#include "codegen/Codegen.h"
#include "ir/TecOps.h"
#include "passes/Passes.h"
#include "runtime/Session.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdlib.h>

using namespace tec;

namespace {

/// Where the inputs are drawn: AtLeastOne keeps 1/x and log(x) where central differences with h = 1e-2
/// are accurate (their third derivatives grow as 1/x^4 and 1/x^3 toward zero); Spread draws multiples of
/// 0.25, all distinct in a window, so a max never switches within a difference step.
/// Unit stays inside (-0.8, 0.8) (asin, atanh, tan's steep part beyond); Integers keeps round's steps at
/// the half-integers away from every difference.
enum class Inputs { Normal, Positive, AwayFromZero, AtLeastOne, HalfIntegers, Spread, Unit, Integers };

struct GradCase {
  const char *name;
  const char *mlir; // defines @forward
  Inputs inputs = Inputs::Normal;
};

std::string tempDir() {
  std::string dir = "/tmp/tec-grad-test.XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

/// Compiles one function to a plan file and opens it.
std::unique_ptr<Session> open(mlir::func::FuncOp f, const std::string &path) {
  CodegenInputs inputs;
  plan::Plan plan;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    inputs.argNames.push_back("arg" + std::to_string(i));
    inputs.argDataOffsets.push_back(-1);
    plan.add_input_names("arg" + std::to_string(i));
  }
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    plan.add_output_names("result" + std::to_string(i));
  PlanDataBuilder data;
  auto variant = buildVariant(f, inputs, data);
  if (!variant) {
    ADD_FAILURE() << llvm::toString(variant.takeError());
    return nullptr;
  }
  *plan.add_variants() = std::move(*variant);
  Status s = writePlanFile(path, plan, data);
  EXPECT_TRUE(s.ok()) << s.message();
  auto session = Session::open(path);
  if (!session.ok()) {
    ADD_FAILURE() << session.error().message();
    return nullptr;
  }
  return session.take();
}

std::vector<float> values(const TensorInfo &info) { return std::vector<float>(info.bytes / 4); }

class Gradients : public ::testing::TestWithParam<GradCase> {};

TEST_P(Gradients, MatchCentralFiniteDifferences) {
  const GradCase &c = GetParam();
  mlir::DialectRegistry registry;
  registry.insert<TecDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext context(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(c.mlir, &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  pm.addPass(createTecAutodiff({"forward", "all"}));
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createCanonicalizerPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  auto vjp = module->lookupSymbol<mlir::func::FuncOp>("forward_vjp");
  ASSERT_TRUE(forward && vjp);
  std::string dir = tempDir();
  auto f = open(forward, dir + "/forward.tecplan");
  auto g = open(vjp, dir + "/vjp.tecplan");
  ASSERT_TRUE(f && g);

  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int spread = 0; // Spread: steps of 37 around 97 (a prime) visit every value before one repeats
  auto draw = [&](Inputs kind) {
    float v = normal(rng);
    if (kind == Inputs::Positive)
      return 0.5f + std::fabs(v);
    if (kind == Inputs::AtLeastOne)
      return 1.0f + std::fabs(v);
    if (kind == Inputs::HalfIntegers) // n + 0.5: h = 1e-2 steps never cross an integer
      return std::round(v * 3.0f) + 0.5f;
    if (kind == Inputs::Integers)
      return std::round(v * 3.0f);
    if (kind == Inputs::Unit)
      return 0.8f * std::tanh(v);
    if (kind == Inputs::AwayFromZero)
      return (v < 0 ? -0.2f : 0.2f) + v;
    if (kind == Inputs::Spread)
      return static_cast<float>(spread = (spread + 37) % 97) * 0.25f - 12.0f;
    return v;
  };
  // Inputs (float ones random, bool ones random), cotangents, directions.
  const size_t nArgs = forward.getNumArguments();
  std::vector<std::vector<float>> x(nArgs), dir_(nArgs);
  std::vector<std::vector<uint8_t>> masks(nArgs);
  for (size_t i = 0; i < nArgs; ++i) {
    const auto &info = f->inputs()[i];
    if (info.dtype == plan::BOOL) {
      masks[i].resize(info.bytes);
      for (auto &m : masks[i])
        m = rng() & 1;
      continue;
    }
    ASSERT_EQ(info.dtype, plan::F32);
    x[i] = values(info);
    dir_[i] = values(info);
    for (auto &v : x[i])
      v = draw(c.inputs);
    for (auto &v : dir_[i])
      v = normal(rng);
  }
  std::vector<std::vector<float>> cot(forward.getNumResults());
  for (size_t r = 0; r < cot.size(); ++r) {
    cot[r] = values(f->outputs()[r]);
    for (auto &v : cot[r])
      v = normal(rng);
  }
  auto bind = [&](Session &s, size_t i, const std::vector<float> &v) {
    ASSERT_TRUE(s.setInput(i, v.data(), v.size() * 4).ok());
  };
  for (size_t i = 0; i < nArgs; ++i) {
    if (!masks[i].empty()) {
      ASSERT_TRUE(f->setInput(i, masks[i].data(), masks[i].size()).ok());
      ASSERT_TRUE(g->setInput(i, masks[i].data(), masks[i].size()).ok());
    } else {
      bind(*g, i, x[i]);
    }
  }
  for (size_t r = 0; r < cot.size(); ++r)
    bind(*g, nArgs + r, cot[r]);
  ASSERT_TRUE(g->run().ok());

  // <VJP, v> over every float argument, from the tagged gradient results.
  double analytic = 0;
  for (unsigned r = forward.getNumResults(); r < vjp.getNumResults(); ++r) {
    auto arg = vjp.getResultAttrOfType<mlir::IntegerAttr>(r, kGradOfAttrName).getInt();
    auto *grad = static_cast<const float *>(g->outputData(r));
    for (size_t j = 0; j < dir_[arg].size(); ++j)
      analytic += static_cast<double>(grad[j]) * dir_[arg][j];
  }
  const double h = 1e-2;
  auto objective = [&](double sign) {
    for (size_t i = 0; i < nArgs; ++i) {
      if (!masks[i].empty())
        continue;
      std::vector<float> shifted(x[i]);
      for (size_t j = 0; j < shifted.size(); ++j)
        shifted[j] += static_cast<float>(sign * h * dir_[i][j]);
      bind(*f, i, shifted);
    }
    EXPECT_TRUE(f->run().ok());
    double sum = 0;
    for (size_t r = 0; r < cot.size(); ++r) {
      auto *y = static_cast<const float *>(f->outputData(r));
      for (size_t j = 0; j < cot[r].size(); ++j)
        sum += static_cast<double>(y[j]) * cot[r][j];
    }
    return sum;
  };
  double numeric = (objective(+1) - objective(-1)) / (2 * h);
  double scale = std::max({std::fabs(numeric), std::fabs(analytic), 1.0});
  EXPECT_NEAR(analytic, numeric, 2e-3 * scale) << c.name;
}

const GradCase kCases[] = {
    {"add_broadcast", R"(func.func @forward(%a: tensor<3x4xf32>, %b: tensor<4xf32>) -> tensor<3x4xf32> {
       %0 = tec.add %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
       return %0 : tensor<3x4xf32> })"},
    {"sub_broadcast", R"(func.func @forward(%a: tensor<3x1xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
       %0 = tec.sub %a, %b : (tensor<3x1xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
       return %0 : tensor<3x4xf32> })"},
    {"mul_broadcast", R"(func.func @forward(%a: tensor<2x3x4xf32>, %b: tensor<3x1xf32>) -> tensor<2x3x4xf32> {
       %0 = tec.mul %a, %b : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
       return %0 : tensor<2x3x4xf32> })"},
    {"div", R"(func.func @forward(%a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
       %0 = tec.div %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
       return %0 : tensor<3x4xf32> })", Inputs::Positive},
    // A computed exponent (a one-element parameter as the power): d/dx and d/dc, with c broadcast.
    {"pow_computed_exponent", R"(func.func @forward(%a: tensor<3x4xf32>, %c: tensor<1xf32>) -> tensor<3x4xf32> {
       %0 = tec.pow %a, %c : (tensor<3x4xf32>, tensor<1xf32>) -> tensor<3x4xf32>
       return %0 : tensor<3x4xf32> })", Inputs::Positive},
    {"pow_square_and_cube", R"(func.func @forward(%a: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
       %two = tec.constant dense<2.0> : tensor<f32>
       %three = tec.constant dense<3.0> : tensor<f32>
       %0 = tec.pow %a, %two : (tensor<3x4xf32>, tensor<f32>) -> tensor<3x4xf32>
       %1 = tec.pow %a, %three : (tensor<3x4xf32>, tensor<f32>) -> tensor<3x4xf32>
       return %0, %1 : tensor<3x4xf32>, tensor<3x4xf32> })", Inputs::Positive},
    {"relu", R"(func.func @forward(%a: tensor<5x7xf32>) -> tensor<5x7xf32> {
       %0 = tec.relu %a : tensor<5x7xf32>
       return %0 : tensor<5x7xf32> })", Inputs::AwayFromZero},
    {"gelu_erf", R"(func.func @forward(%a: tensor<5x7xf32>) -> tensor<5x7xf32> {
       %0 = tec.gelu %a : tensor<5x7xf32>
       return %0 : tensor<5x7xf32> })"},
    {"gelu_tanh", R"(func.func @forward(%a: tensor<5x7xf32>) -> tensor<5x7xf32> {
       %0 = tec.gelu %a {approximate = "tanh"} : tensor<5x7xf32>
       return %0 : tensor<5x7xf32> })"},
    {"tanh_sigmoid_erf_exp", R"(func.func @forward(%a: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.tanh %a : tensor<4x4xf32>
       %1 = tec.sigmoid %a : tensor<4x4xf32>
       %2 = tec.erf %a : tensor<4x4xf32>
       %3 = tec.exp %a : tensor<4x4xf32>
       return %0, %1, %2, %3 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32> })"},
    {"abs", R"(func.func @forward(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
       %0 = tec.abs %a : tensor<4x4xf32>
       return %0 : tensor<4x4xf32> })", Inputs::AwayFromZero},
    {"sqrt", R"(func.func @forward(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
       %0 = tec.sqrt %a : tensor<4x4xf32>
       return %0 : tensor<4x4xf32> })", Inputs::Positive},
    {"neg_sin_cos_softplus_silu", R"(func.func @forward(%a: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.neg %a : tensor<4x4xf32>
       %1 = tec.sin %a : tensor<4x4xf32>
       %2 = tec.cos %a : tensor<4x4xf32>
       %3 = tec.softplus %a : tensor<4x4xf32>
       %4 = tec.silu %a : tensor<4x4xf32>
       return %0, %1, %2, %3, %4 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32> })"},
    {"swiglu_broadcast", R"(func.func @forward(%g: tensor<3x4xf32>, %u: tensor<4xf32>) -> tensor<3x4xf32> {
       %0 = tec.swiglu %g, %u : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
       return %0 : tensor<3x4xf32> })"},
    {"log_reciprocal", R"(func.func @forward(%a: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.log %a : tensor<4x4xf32>
       %1 = tec.reciprocal %a : tensor<4x4xf32>
       return %0, %1 : tensor<4x4xf32>, tensor<4x4xf32> })", Inputs::AtLeastOne},
    // dy goes to the operand chosen (the clip bounds of Clip, and broadcast operands summed back).
    {"max_min", R"(func.func @forward(%a: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.max %a, %b : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
       %1 = tec.min %a, %b : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
       return %0, %1 : tensor<4x4xf32>, tensor<4x4xf32> })"},
    // Repeated indices add up (an embedding row used twice, a class picked twice); -1 counts from the end.
    {"gather_and_gather_elements", R"(func.func @forward(%t: tensor<5x3xf32>, %s: tensor<4x5xf32>) -> (tensor<2x3x3xf32>, tensor<4x2xf32>) {
       %ids = tec.constant dense<[[1, 4, 1], [0, -1, 1]]> : tensor<2x3xi64>
       %0 = tec.gather %t, %ids {axis = 0 : i64} : (tensor<5x3xf32>, tensor<2x3xi64>) -> tensor<2x3x3xf32>
       %picks = tec.constant dense<[[2, 2], [0, 4], [3, -4], [4, 4]]> : tensor<4x2xi32>
       %1 = tec.gather_elements %s, %picks {axis = 1 : i64} : (tensor<4x5xf32>, tensor<4x2xi32>) -> tensor<4x2xf32>
       return %0, %1 : tensor<2x3x3xf32>, tensor<4x2xf32> })"},
    {"gather_inner_axis", R"(func.func @forward(%t: tensor<2x6x3xf32>) -> tensor<2x4x3xf32> {
       %ids = tec.constant dense<[5, 0, 5, 2]> : tensor<4xi64>
       %0 = tec.gather %t, %ids {axis = 1 : i64} : (tensor<2x6x3xf32>, tensor<4xi64>) -> tensor<2x4x3xf32>
       return %0 : tensor<2x4x3xf32> })"},
    {"reduce_max_min", R"(func.func @forward(%a: tensor<2x3x4xf32>) -> (tensor<2x4xf32>, tensor<1x3x1xf32>) {
       %0 = tec.reduce_max %a {axes = array<i64: 1>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x4xf32>
       %1 = tec.reduce_min %a {axes = array<i64: 0, 2>, keepdims = true} : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
       return %0, %1 : tensor<2x4xf32>, tensor<1x3x1xf32> })"},
    // Groups, strides, asymmetric pads and dilations, with a bias.
    // ONNX ConvTranspose (groups, stride 2, output padding: the last row and column take only the padding's
    // side of the window).
    {"conv_transpose", R"(func.func @forward(%x: tensor<2x4x3x3xf32>, %w: tensor<4x3x3x2xf32>) -> tensor<2x6x6x6xf32> {
       %0 = tec.conv_input_grad %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<2x4x3x3xf32>, tensor<4x3x3x2xf32>) -> tensor<2x6x6x6xf32>
       return %0 : tensor<2x6x6x6xf32> })"},
    {"conv", R"(func.func @forward(%x: tensor<2x4x7x6xf32>, %w: tensor<6x2x3x2xf32>, %b: tensor<6xf32>) -> tensor<2x6x3x5xf32> {
       %0 = tec.conv %x, %w, %b {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 0, 1>, dilations = array<i64: 1, 2>, group = 2 : i64}
            : (tensor<2x4x7x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<2x6x3x5xf32>
       return %0 : tensor<2x6x3x5xf32> })"},
    // Grouped-query causal attention (2 query heads per K/V head), and a masked one with Tq != Tk, Dv != D.
    {"attention_causal_grouped", R"(func.func @forward(%q: tensor<1x4x5x3xf32>, %k: tensor<1x2x5x3xf32>, %v: tensor<1x2x5x3xf32>) -> tensor<1x4x5x3xf32> {
       %o, %lse = tec.attention %q, %k, %v {causal = true, scale = 0.5 : f32}
            : (tensor<1x4x5x3xf32>, tensor<1x2x5x3xf32>, tensor<1x2x5x3xf32>) -> (tensor<1x4x5x3xf32>, tensor<1x4x5xf32>)
       return %o : tensor<1x4x5x3xf32> })"},
    {"attention_masked", R"(func.func @forward(%q: tensor<2x2x3x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x5xf32>) -> tensor<2x2x3x5xf32> {
       %keep = tec.constant dense<[[[[true, true, false, true, false, true], [false, true, true, true, true, false], [true, false, false, false, true, true]]]]> : tensor<1x1x3x6xi1>
       %bias = tec.constant dense<[[[[0.0, -1.0, 0.5, 0.0, 2.0, -0.5]]], [[[1.0, 0.0, 0.0, -2.0, 0.0, 0.25]]]]> : tensor<2x1x1x6xf32>
       %o, %lse = tec.attention %q, %k, %v, %keep {scale = 0.7 : f32}
            : (tensor<2x2x3x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x5xf32>, tensor<1x1x3x6xi1>) -> (tensor<2x2x3x5xf32>, tensor<2x2x3xf32>)
       %o2, %lse2 = tec.attention %q, %k, %v, %bias {scale = 0.7 : f32}
            : (tensor<2x2x3x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x5xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x2x3x5xf32>, tensor<2x2x3xf32>)
       %sum = tec.add %o, %o2 : (tensor<2x2x3x5xf32>, tensor<2x2x3x5xf32>) -> tensor<2x2x3x5xf32>
       return %sum : tensor<2x2x3x5xf32> })"},
    {"max_and_average_pool", R"(func.func @forward(%x: tensor<2x3x7x7xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) {
       %0 = tec.pool %x {kind = "max", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : tensor<2x3x7x7xf32> -> tensor<2x3x4x4xf32>
       %1 = tec.pool %x {kind = "avg", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 1, 1>, dilations = array<i64: 1, 1>, count_include_pad = false} : tensor<2x3x7x7xf32> -> tensor<2x3x4x4xf32>
       return %0, %1 : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> })", Inputs::Spread},
    // Rotary embeddings' halves: slices of the last dim, and one of a middle dim.
    {"slice", R"(func.func @forward(%x: tensor<2x5x8xf32>) -> (tensor<2x5x4xf32>, tensor<2x2x8xf32>) {
       %0 = tec.slice %x {starts = array<i64: 0, 0, 4>, ends = array<i64: 2, 5, 8>, steps = array<i64: 1, 1, 1>} : tensor<2x5x8xf32> -> tensor<2x5x4xf32>
       %1 = tec.slice %x {starts = array<i64: 0, 1, 0>, ends = array<i64: 2, 3, 8>, steps = array<i64: 1, 1, 1>} : tensor<2x5x8xf32> -> tensor<2x2x8xf32>
       return %0, %1 : tensor<2x5x4xf32>, tensor<2x2x8xf32> })"},
    // Swin's patch merging (x[:, 1::2, 0::2]), a step whose last pick leaves zeros after it (1::3 of 8: 1, 4,
    // 7 of a dim of 8 and 2, 5 of 7), and a reversed slice (x[::-2] of 5: 4, 2, 0).
    {"strided_slice", R"(func.func @forward(%x: tensor<2x8x7xf32>) -> (tensor<2x4x4xf32>, tensor<2x3x2xf32>, tensor<1x8x7xf32>) {
       %0 = tec.slice %x {starts = array<i64: 0, 1, 0>, ends = array<i64: 2, 8, 7>, steps = array<i64: 1, 2, 2>} : tensor<2x8x7xf32> -> tensor<2x4x4xf32>
       %1 = tec.slice %x {starts = array<i64: 0, 1, 2>, ends = array<i64: 2, 8, 7>, steps = array<i64: 1, 3, 3>} : tensor<2x8x7xf32> -> tensor<2x3x2xf32>
       %2 = tec.slice %x {starts = array<i64: 1, 0, 0>, ends = array<i64: -1, 8, 7>, steps = array<i64: -2, 1, 1>} : tensor<2x8x7xf32> -> tensor<1x8x7xf32>
       return %0, %1, %2 : tensor<2x4x4xf32>, tensor<2x3x2xf32>, tensor<1x8x7xf32> })"},
    {"strided_reversed_slice", R"(func.func @forward(%x: tensor<5x3xf32>) -> tensor<3x3xf32> {
       %0 = tec.slice %x {starts = array<i64: 4, 0>, ends = array<i64: -1, 3>, steps = array<i64: -2, 1>} : tensor<5x3xf32> -> tensor<3x3xf32>
       return %0 : tensor<3x3xf32> })"},
    // Zero gradient; the inputs stay away from integers so that differences do not cross a step.
    {"floor_ceil", R"(func.func @forward(%a: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.floor %a : tensor<4x4xf32>
       %1 = tec.ceil %a : tensor<4x4xf32>
       return %0, %1 : tensor<4x4xf32>, tensor<4x4xf32> })", Inputs::HalfIntegers},
    {"round", R"(func.func @forward(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
       %0 = tec.round %a : tensor<4x4xf32>
       return %0 : tensor<4x4xf32> })", Inputs::Integers},
    {"tan_asin_acos_atanh", R"(func.func @forward(%a: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.tan %a : tensor<4x4xf32>
       %1 = tec.asin %a : tensor<4x4xf32>
       %2 = tec.acos %a : tensor<4x4xf32>
       %3 = tec.atanh %a : tensor<4x4xf32>
       return %0, %1, %2, %3 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32> })", Inputs::Unit},
    {"atan_sinh_cosh_asinh_softsign", R"(func.func @forward(%a: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
       %0 = tec.atan %a : tensor<4x4xf32>
       %1 = tec.sinh %a : tensor<4x4xf32>
       %2 = tec.cosh %a : tensor<4x4xf32>
       %3 = tec.asinh %a : tensor<4x4xf32>
       %4 = tec.softsign %a : tensor<4x4xf32>
       return %0, %1, %2, %3, %4 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32> })", Inputs::AwayFromZero},
    {"acosh", R"(func.func @forward(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
       %one = tec.constant dense<1.0> : tensor<f32>
       %b = tec.add %a, %one : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
       %0 = tec.acosh %b : tensor<4x4xf32>
       return %0 : tensor<4x4xf32> })", Inputs::AtLeastOne},
    {"where", R"(func.func @forward(%c: tensor<3x4xi1>, %a: tensor<3x4xf32>, %b: tensor<4xf32>) -> tensor<3x4xf32> {
       %0 = tec.where %c, %a, %b : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
       return %0 : tensor<3x4xf32> })"},
    {"softmax_and_log_softmax", R"(func.func @forward(%a: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xf32>) {
       %0 = tec.softmax %a {axis = 1 : i64} : tensor<3x5xf32>
       %1 = tec.log_softmax %a {axis = 0 : i64} : tensor<3x5xf32>
       return %0, %1 : tensor<3x5xf32>, tensor<3x5xf32> })"},
    {"layer_norm", R"(func.func @forward(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
       %0:3 = tec.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
       return %0#0 : tensor<2x3x8xf32> })"},
    {"rms_norm", R"(func.func @forward(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>) -> tensor<2x3x8xf32> {
       %0:2 = tec.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>)
       return %0#0 : tensor<2x3x8xf32> })"},
    {"rms_norm_two_dims", R"(func.func @forward(%x: tensor<2x3x4xf32>, %g: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
       %0:2 = tec.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x1x1xf32>)
       return %0#0 : tensor<2x3x4xf32> })"},
    // ScatterND's parts: each update's gradient is what its row's output gradient was (twice for a repeat).
    {"scatter_add", R"(func.func @forward(%u: tensor<3x4xf32>, %v: tensor<2x3xf32>) -> (tensor<5x4xf32>, tensor<2x5xf32>) {
       %i = tec.constant dense<[4, 0, 4]> : tensor<3xi64>
       %0 = tec.scatter_add %u, %i {axis = 0 : i64, elements = false} : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<5x4xf32>
       %j = tec.constant dense<[[1, 1, 3], [0, 2, 4]]> : tensor<2x3xi64>
       %1 = tec.scatter_add %v, %j {axis = 1 : i64, elements = true} : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x5xf32>
       return %0, %1 : tensor<5x4xf32>, tensor<2x5xf32> })"},
    // Each input reaches every output at or past it (exclusive: past it), so its gradient runs backwards.
    {"cumsum", R"(func.func @forward(%x: tensor<2x5x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x5x3xf32>) {
       %0 = tec.cumsum %x {axis = 1 : i64} : tensor<2x5x3xf32>
       %1 = tec.cumsum %x {axis = 2 : i64, exclusive = true, reverse = true} : tensor<2x5x3xf32>
       return %0, %1 : tensor<2x5x3xf32>, tensor<2x5x3xf32> })"},
    {"reductions", R"(func.func @forward(%a: tensor<2x3x4xf32>) -> (tensor<2x1x4xf32>, tensor<4xf32>) {
       %0 = tec.reduce_mean %a {axes = array<i64: 1>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
       %1 = tec.reduce_sum %a {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3x4xf32> -> tensor<4xf32>
       return %0, %1 : tensor<2x1x4xf32>, tensor<4xf32> })"},
    {"matmul_batched_broadcast", R"(func.func @forward(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<2x1x5x2xf32>) -> (tensor<2x3x5xf32>, tensor<2x2x3x2xf32>) {
       %0 = tec.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
       %1 = tec.matmul %0, %c : (tensor<2x3x5xf32>, tensor<2x1x5x2xf32>) -> tensor<2x2x3x2xf32>
       return %0, %1 : tensor<2x3x5xf32>, tensor<2x2x3x2xf32> })"},
    {"linear_transposed_bias_relu", R"(func.func @forward(%x: tensor<2x3x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>) -> tensor<2x3x6xf32> {
       %0 = tec.linear %x, %w, %b {epilogue = "relu", transpose_b = true} : (tensor<2x3x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<2x3x6xf32>
       return %0 : tensor<2x3x6xf32> })", Inputs::AwayFromZero},
    {"linear_plain", R"(func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>) -> tensor<4x6xf32> {
       %0 = tec.linear %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
       return %0 : tensor<4x6xf32> })"},
    {"shapes", R"(func.func @forward(%a: tensor<2x3x4xf32>, %b: tensor<1x4xf32>) -> (tensor<4x3x2xf32>, tensor<6x4xf32>, tensor<3x4xf32>) {
       %0 = tec.transpose %a {perm = array<i64: 2, 1, 0>} : tensor<2x3x4xf32> -> tensor<4x3x2xf32>
       %1 = tec.reshape %a : tensor<2x3x4xf32> -> tensor<6x4xf32>
       %2 = tec.expand %b : tensor<1x4xf32> -> tensor<3x4xf32>
       return %0, %1, %2 : tensor<4x3x2xf32>, tensor<6x4xf32>, tensor<3x4xf32> })"},
    {"concat_split", R"(func.func @forward(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>) -> (tensor<2x8xf32>, tensor<2x1xf32>) {
       %0 = tec.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
       %1:2 = tec.split %b {axis = 1 : i64} : (tensor<2x5xf32>) -> (tensor<2x1xf32>, tensor<2x4xf32>)
       return %0, %1#0 : tensor<2x8xf32>, tensor<2x1xf32> })"},
    {"value_used_twice", R"(func.func @forward(%a: tensor<3x4xf32>) -> tensor<3x4xf32> {
       %0 = tec.mul %a, %a : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
       %1 = tec.tanh %0 : tensor<3x4xf32>
       %2 = tec.add %1, %a : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
       return %2 : tensor<3x4xf32> })"},
};

INSTANTIATE_TEST_SUITE_P(EveryOp, Gradients, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(Autodiff, AnOpWithoutAGradientIsNamed) {
  mlir::DialectRegistry registry;
  registry.insert<TecDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext context(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"(
    func.func @forward(%a: tensor<4x8xf32>, %b: tensor<8x6xf32>) -> tensor<4x6xf32> {
      %0 = tec.gemm %a, %b {alpha = 2.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = false} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
      return %0 : tensor<4x6xf32>
    })",
                                                        &context);
  ASSERT_TRUE(module);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str();
    return mlir::success();
  });
  mlir::PassManager pm(&context);
  pm.addPass(createTecAutodiff({"forward", "all"}));
  EXPECT_TRUE(mlir::failed(pm.run(*module)));
  EXPECT_NE(diagnostics.find("'tec.gemm' has no gradient"), std::string::npos) << diagnostics;
}

} // namespace
