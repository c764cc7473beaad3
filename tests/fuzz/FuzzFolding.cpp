// The compile-time evaluation (constant folding, splats, shape arithmetic) near its limits: each input picks
// a shape- or constant-making operator (ConstantOfShape, Expand, Range, Tile, Reshape, Slice, Pad, Concat,
// Gather) whose constant operands hold values near the bounds (0, 1, 2^16, 2^31, 2^40, 2^62, INT64_MAX,
// negatives), then a consumer that folds or computes with the result, and compiles that model for the cpu
// target. Any outcome but a plan or a clean error is a bug: a crash, bad_alloc, a sanitizer report, a hang.
#include "FuzzFiles.h"

#include "api/CompileIR.h"

#include "mlir/IR/MLIRContext.h"

#include <onnx/onnx_pb.h>

#include <limits>
#include <string>
#include <vector>

namespace {

/// Reads the input as a stream of choices; past its end every choice is 0.
class Choices {
public:
  Choices(const uint8_t *data, size_t size) : data(data), size(size) {}
  uint8_t next() { return at < size ? data[at++] : 0; }
  /// A value near a bound: the input decides which bound and which side of it.
  int64_t nearBound() {
    static const int64_t bounds[] = {0, 1, 2, 3, 7, 64, 1 << 16, int64_t(1) << 20, int64_t(1) << 31,
                                     int64_t(1) << 40, int64_t(1) << 62, std::numeric_limits<int64_t>::max()};
    const uint8_t c = next();
    int64_t v = bounds[c % std::size(bounds)];
    if (c & 0x10)
      v = v == std::numeric_limits<int64_t>::max() ? v : v + 1;
    if (c & 0x20)
      v = v > 0 ? v - 1 : v;
    return c & 0x40 ? (v == std::numeric_limits<int64_t>::min() ? v : -v) : v;
  }

private:
  const uint8_t *data;
  size_t size, at = 0;
};

void addInt64s(onnx::GraphProto &g, const std::string &name, Choices &c, int count) {
  auto *t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(count);
  for (int i = 0; i < count; ++i)
    t->add_int64_data(c.nearBound());
}

onnx::NodeProto *addNode(onnx::GraphProto &g, const std::string &op, std::vector<std::string> inputs,
                         const std::string &output) {
  auto *n = g.add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + output);
  for (const auto &i : inputs)
    n->add_input(i);
  n->add_output(output);
  return n;
}

void addValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> *list, const std::string &name,
                  std::vector<int64_t> dims) {
  auto *v = list->Add();
  v->set_name(name);
  auto *tensor = v->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  auto *shape = tensor->mutable_shape();
  for (int64_t d : dims)
    shape->add_dim()->set_dim_value(d);
}

/// The model the input describes: x [2, 3] -> (a maker of "a") -> (a consumer of "a") -> y.
std::string model(Choices &c) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto &g = *m.mutable_graph();
  g.set_name("folding");
  addValueInfo(g.mutable_input(), "x", {2, 3});
  const int rank = 1 + c.next() % 4;
  switch (c.next() % 9) {
  case 0: { // a splat of a shape
    addInt64s(g, "shape", c, rank);
    addNode(g, "ConstantOfShape", {"shape"}, "a");
    break;
  }
  case 1:
    addInt64s(g, "shape", c, rank);
    addNode(g, "Expand", {"x", "shape"}, "a");
    break;
  case 2: {
    for (const char *name : {"start", "limit", "delta"}) {
      auto *t = g.add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::INT64);
      t->add_int64_data(c.nearBound());
    }
    addNode(g, "Range", {"start", "limit", "delta"}, "a");
    break;
  }
  case 3:
    addInt64s(g, "repeats", c, 2);
    addNode(g, "Tile", {"x", "repeats"}, "a");
    break;
  case 4:
    addInt64s(g, "shape", c, rank);
    addNode(g, "Reshape", {"x", "shape"}, "a");
    break;
  case 5:
    for (const char *name : {"starts", "ends", "axes", "steps"})
      addInt64s(g, name, c, 1);
    addNode(g, "Slice", {"x", "starts", "ends", "axes", "steps"}, "a");
    break;
  case 6:
    addInt64s(g, "pads", c, 4);
    addNode(g, "Pad", {"x", "pads"}, "a");
    break;
  case 7:
    addInt64s(g, "shape", c, rank);
    addNode(g, "ConstantOfShape", {"shape"}, "s");
    addNode(g, "Concat", {"s", "s"}, "a")->add_attribute()->set_name("axis");
    g.mutable_node(g.node_size() - 1)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
    g.mutable_node(g.node_size() - 1)->mutable_attribute(0)->set_i(c.nearBound() % 5);
    break;
  default:
    addInt64s(g, "indices", c, rank);
    addNode(g, "Gather", {"x", "indices"}, "a");
    break;
  }
  switch (c.next() % 3) {
  case 0:
    addNode(g, "ReduceSum", {"a"}, "y");
    break;
  case 1:
    addNode(g, "Shape", {"a"}, "y");
    break;
  default:
    addNode(g, "Mul", {"a", "a"}, "y");
    break;
  }
  auto *y = g.add_output();
  y->set_name("y");
  return m.SerializeAsString();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Choices choices(data, size);
  const std::string bytes = model(choices);
  const std::string path =
      tec::fuzz::writeFile("folding.onnx", reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  // No thread pool: one per input would cost more than the compile.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  tec::CompileOptions options;
  auto compiled = tec::compileModel(context, path, options);
  if (!compiled)
    llvm::consumeError(compiled.takeError());
  return 0;
}
