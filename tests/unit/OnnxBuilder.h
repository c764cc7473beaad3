// Builds small ONNX models in C++ for the importer's tests, with ONNX's own protobuf classes.
#ifndef TEC_TESTS_UNIT_ONNXBUILDER_H
#define TEC_TESTS_UNIT_ONNXBUILDER_H

#include <onnx/onnx_pb.h>

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace tec::testing {

/// A dim of -1 is dynamic (a dim_param "N").
class OnnxBuilder {
public:
  explicit OnnxBuilder(int64_t opset = 17) {
    model.set_ir_version(8);
    model.set_producer_name("tec-unit-tests");
    auto *imp = model.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    graph().set_name("test");
  }
  onnx::GraphProto &graph() { return *model.mutable_graph(); }

  void input(const std::string &name, std::vector<int64_t> dims, int elemType = onnx::TensorProto::FLOAT) {
    setValueInfo(graph().add_input(), name, dims, elemType);
  }
  void output(const std::string &name) { graph().add_output()->set_name(name); }

  onnx::NodeProto &node(const std::string &op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                        const std::string &name = "") {
    auto *n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto &i : inputs)
      n->add_input(i);
    for (auto &o : outputs)
      n->add_output(o);
    return *n;
  }

  onnx::TensorProto &initF32(const std::string &name, std::vector<int64_t> dims, std::vector<float> values) {
    auto &t = *graph().add_initializer();
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims)
      t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(float)));
    return t;
  }
  onnx::TensorProto &initI64(const std::string &name, std::vector<int64_t> dims, std::vector<int64_t> values) {
    auto &t = *graph().add_initializer();
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims)
      t.add_dims(d);
    for (auto v : values)
      t.add_int64_data(v);
    return t;
  }

  static void setInt(onnx::NodeProto &n, const std::string &name, int64_t v) {
    auto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void setInts(onnx::NodeProto &n, const std::string &name, std::vector<int64_t> v) {
    auto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v)
      a->add_ints(x);
  }
  static void setFloat(onnx::NodeProto &n, const std::string &name, float v) {
    auto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }

  /// Writes the model as `file` in a fresh temporary folder (or `dir` when given); returns its path.
  std::string save(const std::string &file = "model.onnx", std::string dir = "") {
    if (dir.empty())
      dir = tempDir();
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, file);
    std::ofstream os(path.str().str(), std::ios::binary);
    model.SerializeToOstream(&os);
    return path.str().str();
  }

  static std::string tempDir() {
    llvm::SmallString<256> dir;
    llvm::sys::fs::createUniqueDirectory("tec-test", dir);
    return dir.str().str();
  }

  onnx::ModelProto model;

private:
  static void setValueInfo(onnx::ValueInfoProto *vi, const std::string &name, const std::vector<int64_t> &dims,
                           int elemType) {
    vi->set_name(name);
    auto *tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elemType);
    auto *shape = tt->mutable_shape();
    for (auto d : dims) {
      auto *dim = shape->add_dim();
      if (d < 0)
        dim->set_dim_param("N");
      else
        dim->set_dim_value(d);
    }
  }
};

} // namespace tec::testing

#endif
