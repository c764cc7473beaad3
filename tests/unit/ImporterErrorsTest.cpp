// Every class of bad input: the importer returns an error naming the file and the node or tensor,
// and the `tec` CLI prints it and exits with status 2 (no crash, no partial output).
#include "OnnxBuilder.h"

#include "frontend/Importer.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sys/wait.h>

using namespace tec;
using tec::testing::OnnxBuilder;

namespace {

struct Failure {
  ImportErrorKind kind;
  std::string message;
};

Failure importFails(const std::string &path, ImportOptions options = {}) {
  mlir::MLIRContext ctx;
  auto model = importOnnxFile(ctx, path, options);
  if (model) {
    ADD_FAILURE() << path << " imported, expected an error";
    return {};
  }
  Failure f;
  llvm::handleAllErrors(model.takeError(), [&](const ImportError &e) {
    f.kind = e.getKind();
    f.message = e.getMessage();
  });
  return f;
}

struct CliResult {
  int exitCode;
  std::string stderrText;
};

CliResult runTec(const std::string &args) {
  std::string command = std::string(TEC_BINARY) + " " + args + " 2>&1 >/dev/null";
  FILE *pipe = popen(command.c_str(), "r");
  std::string text;
  char buffer[512];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe))
    text.append(buffer, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text};
}

/// The library error and the CLI's report both carry every expected fragment; the CLI exits 2.
void expectRejected(const std::string &path, ImportErrorKind kind, std::vector<std::string> fragments,
                    const std::string &cliArgs = "") {
  Failure f = importFails(path);
  EXPECT_EQ(f.kind, kind) << f.message;
  EXPECT_EQ(f.message.rfind(path + ": ", 0), 0u) << "the message must start with the file: " << f.message;
  auto cli = runTec(path + " " + cliArgs);
  EXPECT_EQ(cli.exitCode, 2) << cli.stderrText;
  EXPECT_EQ(cli.stderrText.rfind("error: " + path + ": ", 0), 0u) << cli.stderrText;
  for (const auto &fragment : fragments) {
    EXPECT_NE(f.message.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << f.message;
    EXPECT_NE(cli.stderrText.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << cli.stderrText;
  }
}

OnnxBuilder reluModel() {
  OnnxBuilder b;
  b.input("x", {2, 3});
  b.node("Relu", {"x"}, {"y"}, "relu");
  b.output("y");
  return b;
}

} // namespace

TEST(ImporterErrors, NotAProtobuf) {
  std::string path = OnnxBuilder::tempDir() + "/notes.onnx";
  std::ofstream(path) << "this is a text file, not an ONNX model\n";
  expectRejected(path, ImportErrorKind::Invalid, {"not a valid ONNX model"});
}

TEST(ImporterErrors, EmptyFileIsNotAModel) {
  std::string path = OnnxBuilder::tempDir() + "/empty.onnx";
  std::ofstream(path).close();
  expectRejected(path, ImportErrorKind::Invalid, {"not an ONNX model"});
}

TEST(ImporterErrors, TruncatedFile) {
  OnnxBuilder b = reluModel();
  b.initF32("unused", {64}, std::vector<float>(64, 1.0f));
  std::string bytes = b.model.SerializeAsString();
  std::string path = OnnxBuilder::tempDir() + "/truncated.onnx";
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  expectRejected(path, ImportErrorKind::Invalid, {"not a valid ONNX model", "truncated"});
}

TEST(ImporterErrors, UnsupportedOpsAreAllListedWithNodeAndOpset) {
  OnnxBuilder b(13);
  b.input("x", {2, 3});
  b.node("Frobnicate", {"x"}, {"a"}, "frob_1");
  b.node("Relu", {"a"}, {"b"}, "relu");
  b.node("Zorkify", {"b"}, {"y"}, "zork_7").set_domain("com.example");
  b.output("y");
  expectRejected(b.save(), ImportErrorKind::Unsupported,
                 {"2 unsupported operators (opset 13):", "node 'frob_1'  op Frobnicate",
                  "node 'zork_7'  op com.example.Zorkify"});
}

TEST(ImporterErrors, OpsetOutsideTheSupportedRange) {
  OnnxBuilder b(5); // Relu changed at opset 6
  b.input("x", {2});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  expectRejected(b.save(), ImportErrorKind::Unsupported,
                 {"opset 5 is outside the supported range 7-21 and its Relu differs from opset 7's"});
  OnnxBuilder same(22);
  same.input("x", {2});
  same.node("Relu", {"x"}, {"y"});
  same.output("y");
  expectRejected(same.save(), ImportErrorKind::Unsupported, {"opset 22 is outside the supported range 7-21"});
}

TEST(ImporterErrors, DynamicDimsNeedShape) {
  OnnxBuilder b;
  b.input("tokens", {-1, 3});
  b.node("Relu", {"tokens"}, {"y"});
  b.output("y");
  std::string path = b.save();
  expectRejected(path, ImportErrorKind::Invalid, {"graph input 'tokens'", "dynamic dims 0 ('N')", "--shape tokens=AxB"});
  // With --shape the same model compiles.
  EXPECT_EQ(runTec(path + " --shape tokens=4x3").exitCode, 0);
  // A --shape that contradicts a static dim is refused too.
  auto cli = runTec(path + " --shape tokens=4x5");
  EXPECT_EQ(cli.exitCode, 2);
  EXPECT_NE(cli.stderrText.find("disagrees with the model's static dim 1 = 3"), std::string::npos) << cli.stderrText;
}

TEST(ImporterErrors, UndefinedNodeInput) {
  OnnxBuilder b;
  b.input("x", {2});
  b.node("Add", {"x", "ghost"}, {"y"}, "add_ghost");
  b.output("y");
  expectRejected(b.save(), ImportErrorKind::Invalid,
                 {"node 'add_ghost' (Add)", "input 'ghost' is not defined by any node, initializer or graph input"});
}

TEST(ImporterErrors, Cycle) {
  OnnxBuilder b;
  b.input("x", {2});
  b.node("Add", {"x", "c"}, {"a"}, "loop_a");
  b.node("Relu", {"a"}, {"c"}, "loop_c");
  b.node("Relu", {"x"}, {"y"}, "fine");
  b.output("y");
  expectRejected(b.save(), ImportErrorKind::Invalid,
                 {"the graph has a cycle through node 'loop_a' (Add), node 'loop_c' (Relu)"});
}

TEST(ImporterErrors, RawDataOfTheWrongSize) {
  OnnxBuilder b = reluModel();
  auto &w = b.initF32("fc.weight", {4, 4}, std::vector<float>(15, 0.0f));
  (void)w;
  b.node("Add", {"y", "fc.weight"}, {"z"});
  expectRejected(b.save(), ImportErrorKind::Invalid,
                 {"initializer 'fc.weight' holds 60 bytes of data, expected 64 for 4x4 FLOAT"});
}

TEST(ImporterErrors, DimsWhoseElementCountOverflows) {
  OnnxBuilder b = reluModel();
  b.initF32("huge", {int64_t(1) << 40, int64_t(1) << 40}, {});
  expectRejected(b.save(), ImportErrorKind::Invalid,
                 {"initializer 'huge' has dims [1099511627776x1099511627776]", "overflows int64"});
}

TEST(ImporterErrors, ExternalDataOutsideTheModelFolderIsRefused) {
  std::string outside = OnnxBuilder::tempDir();
  std::ofstream(outside + "/secret.bin", std::ios::binary) << std::string(24, '\0');
  std::string dir = OnnxBuilder::tempDir();
  OnnxBuilder b;
  b.input("x", {2, 3});
  auto &t = b.initF32("w", {2, 3}, {});
  t.clear_raw_data();
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto *e = t.add_external_data();
  e->set_key("location");
  e->set_value("../" + llvm::sys::path::filename(outside).str() + "/secret.bin");
  b.node("Add", {"x", "w"}, {"y"});
  b.output("y");
  expectRejected(b.save("model.onnx", dir), ImportErrorKind::Invalid,
                 {"initializer 'w'", "leaves the model's folder (refused)"});
  // An absolute location is refused as well.
  e->set_value(outside + "/secret.bin");
  expectRejected(b.save("model.onnx", dir), ImportErrorKind::Invalid, {"initializer 'w'", "is absolute"});
}

TEST(ImporterErrors, ShapeMismatchNamesTheNode) {
  OnnxBuilder b;
  b.input("a", {2, 3});
  b.input("b", {4, 3});
  b.node("Add", {"a", "b"}, {"y"}, "bad_add");
  b.output("y");
  Failure f = importFails(b.save());
  EXPECT_EQ(f.kind, ImportErrorKind::Invalid);
  EXPECT_NE(f.message.find("bad_add"), std::string::npos) << f.message;
}

// ONNX's own shape inference divides by a window's strides and group: a zero is refused before it runs
// (found by the ONNX fuzzer as a division by zero inside libonnx).
TEST(ImporterErrors, WindowAttributesMustBePositive) {
  for (auto [attr, value] : {std::pair<std::string, int64_t>{"strides", 0}, {"dilations", -1}, {"group", 0}}) {
    OnnxBuilder b;
    b.input("x", {1, 2, 8, 8});
    b.initF32("w", {2, 2, 3, 3}, std::vector<float>(36, 1.0f));
    auto &conv = b.node("Conv", {"x", "w"}, {"y"}, "stem");
    if (attr == "group")
      OnnxBuilder::setInt(conv, attr, value);
    else
      OnnxBuilder::setInts(conv, attr, {value, 1});
    b.output("y");
    expectRejected(b.save(), ImportErrorKind::Invalid, {"node 'stem' (Conv)", attr + " must be positive"});
  }
}

TEST(ImporterErrors, MissingFile) {
  auto cli = runTec("/nonexistent/model.onnx");
  EXPECT_EQ(cli.exitCode, 2);
  EXPECT_NE(cli.stderrText.find("error: /nonexistent/model.onnx: cannot read"), std::string::npos) << cli.stderrText;
}
