// ONNX's backend node tests (Debian's libonnx-testdata): every test whose operators tec supports goes
// import -> compile -> plan file -> CPU run, and each test_data_set's outputs are compared with ONNX's
// reference outputs (rtol 1e-3, atol 1e-7: ONNX's defaults). Prints passed / failed / unsupported per
// operator; any failure fails.
//
// Two allowances, both printed: bfloat16 outputs compare within one bfloat16 ulp (ONNX 1.12's reference
// truncates float -> bfloat16, tec rounds to nearest even as CUDA and PyTorch do); and a test whose
// data set disagrees with its own model's declared input shape is skipped (a static-shape plan cannot
// take it; ONNX fixed such test data later).
#include "api/CompileIR.h"
#include "api/TensorFiles.h"

#include "support/Half.h"
#include "runtime/Session.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

enum class Outcome { Passed, Failed, Unsupported, Skipped };

struct TestCase {
  std::string dir, name;
  onnx::ModelProto model;
};

std::vector<std::string> dataSets(const std::string &dir) {
  std::vector<std::string> sets;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    if (llvm::sys::path::filename(it->path()).starts_with("test_data_set_"))
      sets.push_back(it->path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

std::string pbPath(const std::string &set, const char *kind, int i) {
  llvm::SmallString<256> p(set);
  llvm::sys::path::append(p, std::string(kind) + "_" + std::to_string(i) + ".pb");
  return p.str().str();
}

/// Graph inputs that are not initializers, in order: the order of a data set's input_N.pb files.
std::vector<std::string> graphInputs(const onnx::ModelProto &model) {
  std::set<std::string> inits;
  for (const auto &i : model.graph().initializer())
    inits.insert(i.name());
  std::vector<std::string> names;
  for (const auto &i : model.graph().input())
    if (!inits.count(i.name()))
      names.push_back(i.name());
  return names;
}

/// Integer and one-element inputs fixed from the first data set, for tests that feed shapes, axes or sizes
/// (Range's limits, OneHot's depth) as inputs: what --freeze-input does for a user.
tec::ImportOptions freezeIntegerInputs(const TestCase &test, const std::set<std::string> &alsoFreeze) {
  tec::ImportOptions options;
  auto sets = dataSets(test.dir);
  if (sets.empty())
    return options;
  auto names = graphInputs(test.model);
  for (size_t i = 0; i < names.size(); ++i) {
    auto vi = std::find_if(test.model.graph().input().begin(), test.model.graph().input().end(),
                           [&](const auto &v) { return v.name() == names[i]; });
    int type = vi->type().tensor_type().elem_type();
    const auto &dims = vi->type().tensor_type().shape().dim();
    bool oneElement = std::all_of(dims.begin(), dims.end(), [](const auto &d) { return d.has_dim_value() && d.dim_value() == 1; });
    if (type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32 && !oneElement && !alsoFreeze.count(names[i]))
      continue;
    if (auto buffer = llvm::MemoryBuffer::getFile(pbPath(sets[0], "input", i), /*IsText=*/false))
      options.frozenInputs[names[i]] = (*buffer)->getBuffer().str();
  }
  return options;
}

/// Consumes `err`: its message, and whether it says tec does not support something (vs a failure).
std::pair<std::string, bool> describe(llvm::Error err) {
  std::string message;
  bool unsupported = false;
  llvm::handleAllErrors(
      std::move(err),
      [&](const tec::ImportError &e) {
        message = e.getMessage();
        unsupported = e.getKind() == tec::ImportErrorKind::Unsupported;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  return {message, unsupported};
}

std::string compare(const tec::HostTensor &expected, const tec::TensorInfo &info, const void *got) {
  if (expected.dtype != info.dtype || expected.shape != info.shape)
    return "output '" + info.name + "': expected " + tec::dtypeName(expected.dtype) + " of " +
           std::to_string(expected.shape.size()) + " dims, got " + tec::dtypeName(info.dtype);
  const int64_t n = info.bytes / tec::dtypeBytes(info.dtype);
  auto value = [&](const void *p, int64_t i) -> double {
    switch (info.dtype) {
    case tec::plan::F32: return static_cast<const float *>(p)[i];
    case tec::plan::I32: return static_cast<const int32_t *>(p)[i];
    case tec::plan::I64: return static_cast<double>(static_cast<const int64_t *>(p)[i]);
    case tec::plan::BOOL: return static_cast<const uint8_t *>(p)[i] != 0;
    case tec::plan::F16: return tec::kernels::f16ToFloat(static_cast<const uint16_t *>(p)[i]);
    case tec::plan::BF16: return tec::kernels::bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
    default: return static_cast<const uint8_t *>(p)[i];
    }
  };
  const bool exact = info.dtype == tec::plan::I32 || info.dtype == tec::plan::I64 || info.dtype == tec::plan::BOOL;
  const double rtol = info.dtype == tec::plan::BF16 ? 1.0 / 128 : kRtol; // one bfloat16 ulp (8-bit significand)
  for (int64_t i = 0; i < n; ++i) {
    double e = value(expected.bytes.data(), i), g = value(got, i);
    bool ok = exact ? e == g
                    : (std::isnan(e) ? std::isnan(g)
                                     : (std::isinf(e) ? e == g : std::fabs(g - e) <= kAtol + rtol * std::fabs(e)));
    if (!ok)
      return llvm::formatv("output '{0}' element {1}: expected {2}, got {3}", info.name, i, e, g).str();
  }
  return "";
}

/// Tests whose expected data ONNX Runtime and PyTorch disagree with, where tec follows them (the
/// exporters' models are checked against ONNX Runtime): skipped, visibly, with why.
const std::map<std::string, std::string> &disagreeWithOnnxRuntime() {
  static const std::map<std::string, std::string> tests = [] {
    const std::string alignCorners = "ONNX's data takes align_corners' output length as input * scale unrounded (2.4); "
                                     "ONNX Runtime and PyTorch, and tec, as the output size (2)";
    return std::map<std::string, std::string>{{"test_resize_downsample_scales_cubic_align_corners", alignCorners},
                                              {"test_resize_downsample_scales_linear_align_corners", alignCorners}};
  }();
  return tests;
}

Outcome runTest(TestCase &test, const std::string &planDir, std::string &why) {
  if (auto known = disagreeWithOnnxRuntime().find(test.name); known != disagreeWithOnnxRuntime().end()) {
    why = known->second;
    return Outcome::Skipped;
  }
  std::string modelPath = test.dir + "/model.onnx";
  mlir::MLIRContext context;
  context.printOpOnDiagnostic(false);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  tec::CompileOptions options;
  auto compiled = tec::compileModel(context, modelPath, options);
  if (!compiled) {
    auto [message, unsupported] = describe(compiled.takeError());
    // Inputs that decide shapes (and a float one the error names, as Resize's scales) as the constants
    // an exporter would write, until nothing more is asked for.
    std::set<std::string> named;
    while (unsupported && message.find("must be a constant or an initializer") != std::string::npos) {
      auto quoted = llvm::StringRef(message).split("input '").second.split("'").first.str();
      if (!named.insert(quoted).second)
        break;
      options.import = freezeIntegerInputs(test, named);
      compiled = tec::compileModel(context, modelPath, options);
      if (compiled)
        break;
      std::tie(message, unsupported) = describe(compiled.takeError());
    }
    if (!compiled) {
      why = message + "\n" + diagnostics;
      return unsupported ? Outcome::Unsupported : Outcome::Failed;
    }
  }
  std::string planPath = planDir + "/" + test.name + ".tecplan";
  if (tec::Status s = tec::writePlanFile(planPath, (*compiled)->plan, (*compiled)->data); !s.ok()) {
    why = s.message();
    return Outcome::Failed;
  }
  auto session = tec::Session::open(planPath);
  if (!session.ok()) {
    why = session.error().message();
    return Outcome::Failed;
  }
  auto &s = **session;
  auto names = graphInputs(test.model);
  auto sets = dataSets(test.dir);
  if (sets.empty()) {
    why = "no test data sets";
    return Outcome::Failed;
  }
  for (const auto &set : sets) {
    for (size_t i = 0; i < s.inputs().size(); ++i) {
      auto pos = std::find(names.begin(), names.end(), s.inputs()[i].name) - names.begin();
      auto tensor = tec::readTensorFile(pbPath(set, "input", pos));
      if (!tensor.ok()) {
        why = tensor.error().message();
        return Outcome::Failed;
      }
      if (tensor->shape != s.inputs()[i].shape) {
        why = "the data set's input '" + s.inputs()[i].name + "' disagrees with the model's declared shape";
        return Outcome::Skipped;
      }
      if (tec::Status st = s.setInput(i, tensor->bytes.data(), tensor->bytes.size()); !st.ok()) {
        why = st.message();
        return Outcome::Failed;
      }
    }
    if (tec::Status st = s.run(); !st.ok()) {
      why = st.message();
      return Outcome::Failed;
    }
    for (size_t i = 0; i < s.outputs().size(); ++i) {
      auto expected = tec::readTensorFile(pbPath(set, "output", i));
      if (!expected.ok()) {
        why = expected.error().message();
        return Outcome::Failed;
      }
      if (std::string diff = compare(*expected, s.outputs()[i], s.outputData(i)); !diff.empty()) {
        why = llvm::sys::path::filename(set).str() + ": " + diff;
        return Outcome::Failed;
      }
    }
  }
  return Outcome::Passed;
}

} // namespace

int main(int argc, char **argv) {
  // --min-passed=N guards the count of passing tests against regressions (an op that stops importing
  // turns its tests "unsupported", not failed).
  int minPassed = 1;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg.consume_front("--min-passed=")) {
      if (arg.getAsInteger(10, minPassed)) {
        llvm::errs() << "error: --min-passed takes a number, got '" << arg << "'\n";
        return 2;
      }
    } else {
      args.push_back(arg.str());
    }
  }
  if (args.empty()) {
    llvm::errs() << "usage: tec-node-tests <libonnx-testdata>/data/node [test-name-substring] [--min-passed=N]\n";
    return 2;
  }
  std::string filter = args.size() > 1 ? args[1] : "";
  std::vector<TestCase> tests;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(args[0], ec), end; it != end && !ec; it.increment(ec)) {
    TestCase t;
    t.dir = it->path();
    t.name = llvm::sys::path::filename(t.dir).str();
    std::ifstream in(t.dir + "/model.onnx", std::ios::binary);
    if (!in || (!filter.empty() && t.name.find(filter) == std::string::npos))
      continue;
    if (!t.model.ParseFromIstream(&in)) {
      llvm::errs() << "error: " << t.dir << "/model.onnx does not parse\n";
      return 1;
    }
    tests.push_back(std::move(t));
  }
  if (ec || tests.empty()) {
    llvm::errs() << "error: no node tests under " << args[0] << "\n";
    return 1;
  }
  std::sort(tests.begin(), tests.end(), [](const auto &a, const auto &b) { return a.name < b.name; });
  llvm::SmallString<128> planDir;
  if (llvm::sys::fs::createUniqueDirectory("tec-node-tests", planDir)) {
    llvm::errs() << "error: cannot create a temporary folder\n";
    return 1;
  }

  struct Counts {
    int passed = 0, failed = 0, unsupported = 0, skipped = 0;
    void add(Outcome o) {
      (o == Outcome::Passed ? passed : o == Outcome::Failed ? failed : o == Outcome::Skipped ? skipped : unsupported)++;
    }
  };
  std::map<std::string, Counts> perOp;
  Counts total;
  for (auto &test : tests) {
    std::string why;
    Outcome outcome = runTest(test, planDir.str().str(), why);
    std::set<std::string> ops;
    for (const auto &n : test.model.graph().node())
      ops.insert(n.op_type());
    for (const auto &op : ops)
      perOp[op].add(outcome);
    total.add(outcome);
    if (outcome == Outcome::Failed)
      llvm::outs() << "FAIL " << test.name << ": " << why << "\n";
    if (outcome == Outcome::Skipped)
      llvm::outs() << "SKIP " << test.name << ": " << why << "\n";
    if (outcome == Outcome::Unsupported && getenv("TEC_NODE_TESTS_VERBOSE"))
      llvm::outs() << "UNSUPPORTED " << test.name << ": " << why << "\n";
  }
  llvm::sys::fs::remove_directories(planDir);

  // The table lists the operators tec supports (others only add to "unsupported").
  auto supported = tec::supportedOnnxOps();
  llvm::outs() << llvm::formatv("\n{0,-20} {1,7} {2,7} {3,8} {4,12}\n", "operator", "passed", "failed", "skipped",
                                "unsupported");
  for (const auto &op : supported) {
    auto c = perOp[op];
    llvm::outs() << llvm::formatv("{0,-20} {1,7} {2,7} {3,8} {4,12}\n", op, c.passed, c.failed, c.skipped,
                                  c.unsupported);
  }
  llvm::outs() << llvm::formatv("\nONNX node tests: {0} passed, {1} failed, {2} skipped, {3} unsupported (of {4})\n",
                                total.passed, total.failed, total.skipped, total.unsupported, tests.size());
  if (total.passed < minPassed) {
    llvm::errs() << "error: " << total.passed << " node tests passed, expected at least " << minPassed << "\n";
    return 1;
  }
  return total.failed ? 1 : 0;
}
