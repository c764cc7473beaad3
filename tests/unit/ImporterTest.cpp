// The importer on small models built here: which ops come out, with which shapes and attributes.
// Shapes are checked against ONNX's operator definitions (and, for opsets <= 17, ONNX's own shape
// inference, which the importer cross-checks).
#include "OnnxBuilder.h"

#include "frontend/Importer.h"
#include "ir/TecOps.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>

using namespace tec;
using tec::testing::OnnxBuilder;

namespace {

struct Imported {
  mlir::MLIRContext context;
  ImportedModel model;
  mlir::func::FuncOp forward() { return model.module->lookupSymbol<mlir::func::FuncOp>("forward"); }
  template <typename Op> std::vector<Op> ops() {
    std::vector<Op> found;
    forward().walk([&](Op op) { found.push_back(op); });
    return found;
  }
  std::string ir() {
    std::string s;
    llvm::raw_string_ostream os(s);
    model.module->print(os);
    return s;
  }
};

std::unique_ptr<Imported> importOk(OnnxBuilder &b, ImportOptions options = {}) {
  auto result = std::make_unique<Imported>();
  auto model = importOnnxFile(result->context, b.save(), options);
  if (!model) {
    ADD_FAILURE() << llvm::toString(model.takeError());
    return nullptr;
  }
  result->model = std::move(*model);
  return result;
}

std::vector<int64_t> shapeOf(mlir::Value v) {
  auto s = llvm::cast<mlir::RankedTensorType>(v.getType()).getShape();
  return {s.begin(), s.end()};
}

} // namespace

TEST(Importer, GemmWithTransBKeepsWeightsAsTaggedParams) {
  OnnxBuilder b;
  b.input("x", {4, 8});
  std::vector<float> w(16 * 8);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = 0.25f * i;
  b.initF32("fc.weight", {16, 8}, w);
  b.initF32("fc.bias", {16}, std::vector<float>(16, 1.5f));
  auto &gemm = b.node("Gemm", {"x", "fc.weight", "fc.bias"}, {"y"}, "fc");
  OnnxBuilder::setInt(gemm, "transB", 1);
  b.output("y");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  auto gemms = m->ops<GemmOp>();
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_TRUE(gemms[0].getTransB());
  EXPECT_EQ(shapeOf(gemms[0].getResult()), (std::vector<int64_t>{4, 16}));
  auto f = m->forward();
  ASSERT_EQ(f.getNumArguments(), 3u);
  EXPECT_FALSE(f.getArgAttr(0, kParamAttrName));
  EXPECT_EQ(llvm::cast<mlir::StringAttr>(f.getArgAttr(1, kParamAttrName)).getValue(), "fc.weight");
  ASSERT_EQ(m->model.params.size(), 2u);
  EXPECT_EQ(m->model.params[0].name, "fc.weight");
  ASSERT_EQ(m->model.params[0].bytes.size(), w.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(m->model.params[0].bytes.data(), w.data(), w.size() * sizeof(float)), 0);
  // The weights never appear in the printed IR.
  EXPECT_EQ(m->ir().find("dense"), std::string::npos);
}

TEST(Importer, ReshapeResolvesZeroAndMinusOne) {
  OnnxBuilder b;
  b.input("x", {2, 3, 4});
  b.initI64("shape", {2}, {0, -1});
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.output("y");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  auto reshapes = m->ops<ReshapeOp>();
  ASSERT_EQ(reshapes.size(), 1u);
  EXPECT_EQ(shapeOf(reshapes[0].getResult()), (std::vector<int64_t>{2, 12}));
  EXPECT_TRUE(m->model.params.empty()) << "an INT64 shape initializer is a constant, not a param";
}

// The shape arithmetic exporters write (x.view(x.size(0), -1) with dynamic axes) is evaluated on import:
// Shape -> Gather -> Unsqueeze -> Concat feeds Reshape as a constant; no shape op reaches the IR.
TEST(Importer, ShapeArithmeticFoldsIntoConstants) {
  OnnxBuilder b;
  b.input("x", {2, 3, 4});
  b.node("Shape", {"x"}, {"shape"});
  b.initI64("zero", {}, {0});
  b.node("Gather", {"shape", "zero"}, {"batch"});
  b.initI64("axes", {1}, {0});
  b.node("Unsqueeze", {"batch", "axes"}, {"batch1"});
  b.initI64("rest", {1}, {-1});
  b.node("Concat", {"batch1", "rest"}, {"target"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  b.node("Reshape", {"x", "target"}, {"y"});
  b.node("Size", {"x"}, {"count"});
  b.output("y");
  b.output("count");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  auto reshapes = m->ops<ReshapeOp>();
  ASSERT_EQ(reshapes.size(), 1u);
  EXPECT_EQ(shapeOf(reshapes[0].getResult()), (std::vector<int64_t>{2, 12}));
  EXPECT_TRUE(m->ops<GatherOp>().empty() && m->ops<ConcatOp>().empty()) << m->ir();
  EXPECT_NE(m->ir().find("dense<24> : tensor<i64>"), std::string::npos) << m->ir();
}

TEST(Importer, SqueezeUnsqueezeFlattenBecomeReshapes) {
  OnnxBuilder b;
  b.input("x", {2, 1, 3});
  b.initI64("sq_axes", {1}, {1});
  b.initI64("unsq_axes", {2}, {0, -1});
  b.node("Squeeze", {"x", "sq_axes"}, {"a"});
  b.node("Unsqueeze", {"a", "unsq_axes"}, {"c"});
  auto &flat = b.node("Flatten", {"c"}, {"d"});
  OnnxBuilder::setInt(flat, "axis", 2);
  b.output("a");
  b.output("c");
  b.output("d");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  auto results = m->forward().getResultTypes();
  ASSERT_EQ(results.size(), 3u);
  auto dims = [&](int i) {
    auto s = llvm::cast<mlir::RankedTensorType>(results[i]).getShape();
    return std::vector<int64_t>(s.begin(), s.end());
  };
  EXPECT_EQ(dims(0), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(dims(1), (std::vector<int64_t>{1, 2, 3, 1}));
  EXPECT_EQ(dims(2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(m->ops<ReshapeOp>().size(), 3u);
}

TEST(Importer, SliceNormalizesNegativeIndicesAndSteps) {
  OnnxBuilder b;
  b.input("x", {10, 6});
  b.initI64("starts", {2}, {-1, 1});
  b.initI64("ends", {2}, {-1000, 1000});
  b.initI64("axes", {2}, {0, -1});
  b.initI64("steps", {2}, {-1, 2});
  b.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  b.output("y");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  auto slices = m->ops<SliceOp>();
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].getStarts(), (llvm::ArrayRef<int64_t>{9, 1}));
  EXPECT_EQ(slices[0].getEnds(), (llvm::ArrayRef<int64_t>{-1, 6}));
  EXPECT_EQ(slices[0].getSteps(), (llvm::ArrayRef<int64_t>{-1, 2}));
  EXPECT_EQ(shapeOf(slices[0].getResult()), (std::vector<int64_t>{10, 3}));
}

TEST(Importer, SplitFollowsEachOpsetsRule) {
  for (int64_t opset : {13, 18}) {
    OnnxBuilder b(opset);
    b.input("x", {7, 2});
    auto &split = b.node("Split", {"x"}, {"a", "b", "c"});
    if (opset == 18)
      OnnxBuilder::setInt(split, "num_outputs", 3);
    b.output("a");
    b.output("c");
    if (opset == 13) {
      // Opset 13 splits equally only: 7 rows do not split into 3.
      mlir::MLIRContext ctx;
      auto model = importOnnxFile(ctx, b.save());
      ASSERT_FALSE(model);
      std::string message = llvm::toString(model.takeError());
      EXPECT_NE(message.find("Split"), std::string::npos) << message;
      continue;
    }
    auto m = importOk(b);
    ASSERT_TRUE(m);
    auto splits = m->ops<SplitOp>();
    ASSERT_EQ(splits.size(), 1u);
    EXPECT_EQ(shapeOf(splits[0].getResult(0)), (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(shapeOf(splits[0].getResult(2)), (std::vector<int64_t>{1, 2}));
  }
}

TEST(Importer, ReduceMeanAxesAttributeBeforeOpset18InputAfter) {
  for (int64_t opset : {13, 18}) {
    OnnxBuilder b(opset);
    b.input("x", {2, 3, 4});
    auto &reduce = b.node("ReduceMean", opset >= 18 ? std::vector<std::string>{"x", "axes"}
                                                    : std::vector<std::string>{"x"},
                          {"y"});
    if (opset >= 18)
      b.initI64("axes", {1}, {-1});
    else
      OnnxBuilder::setInts(reduce, "axes", {-1});
    OnnxBuilder::setInt(reduce, "keepdims", 0);
    b.output("y");
    auto m = importOk(b);
    ASSERT_TRUE(m);
    auto ops = m->ops<ReduceMeanOp>();
    ASSERT_EQ(ops.size(), 1u) << "opset " << opset;
    EXPECT_EQ(ops[0].getAxes(), (llvm::ArrayRef<int64_t>{2}));
    EXPECT_EQ(shapeOf(ops[0].getResult()), (std::vector<int64_t>{2, 3}));
  }
}

TEST(Importer, ConstantsAndScalarInitializersAreNotParams) {
  OnnxBuilder b;
  b.input("x", {4});
  auto &c = b.node("Constant", {}, {"half"});
  OnnxBuilder::setFloat(c, "value_float", 0.5f);
  b.initF32("two", {}, {2.0f});
  b.node("Mul", {"x", "half"}, {"a"});
  b.node("Pow", {"a", "two"}, {"y"});
  b.output("y");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->model.params.empty());
  auto constants = m->ops<ConstantOp>();
  ASSERT_EQ(constants.size(), 2u);
  EXPECT_EQ(m->forward().getNumArguments(), 1u);
}

std::vector<std::string> paramNames(const Imported &m) {
  std::vector<std::string> names;
  for (const auto &p : m.model.params)
    names.push_back(p.name);
  return names;
}

/// A model whose output is x * a * b * c * d, each factor a one-element initializer of the given name.
OnnxBuilder scalarFactors(const std::vector<std::pair<std::string, std::vector<int64_t>>> &factors) {
  OnnxBuilder b;
  b.input("x", {4});
  std::string last = "x";
  for (const auto &[name, dims] : factors) {
    b.initF32(name, dims, {1.5f});
    b.node("Mul", {last, name}, {last + "*"});
    last += "*";
  }
  b.output(last);
  return b;
}

TEST(Importer, OneElementParamsOfAPyTorchExportAreParams) {
  // PyTorch names parameters by module path and the values it made up "onnx::Op_N" (TorchScript) or
  // "val_N": a [1] bias, a 0-D scale and a [1, 1] gain train whatever their size; the others are constants.
  auto b = scalarFactors({{"head.bias", {1}}, {"logit_scale", {}}, {"gain", {1, 1}}, {"onnx::Mul_3", {}},
                          {"val_7", {}}, {"/attn/Constant_output_0", {}}});
  b.model.set_producer_name("pytorch");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  EXPECT_EQ(paramNames(*m), (std::vector<std::string>{"head.bias", "logit_scale", "gain"}));
  EXPECT_EQ(m->ops<ConstantOp>().size(), 3u);
  EXPECT_TRUE(m->model.scalarConstants.empty());
}

/// x + each initializer, [2, 64] floats of the given values.
OnnxBuilder addedTensors(const std::vector<std::pair<std::string, std::vector<float>>> &tensors) {
  OnnxBuilder b;
  b.input("x", {2, 64});
  std::string last = "x";
  for (const auto &[name, values] : tensors) {
    b.initF32(name, {2, 64}, values);
    b.node("Add", {last, name}, {last + "+"});
    last += "+";
  }
  b.output(last);
  b.model.set_producer_name("pytorch");
  return b;
}

TEST(Importer, ATableTheExporterGatheredAndFoldedIsNamed) {
  // Swin's relative position bias as torch.onnx's constant folding writes it: table[index] under a made-up
  // name, its 128 values copies of a 16-entry table. A random weight, a named param that repeats (a
  // module's own tensor: trained as PyTorch does) and a pruned one (zeros) are not flagged.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> table(16), gathered(128), random(128), repeatingParam(128), pruned(128, 0.0f);
  for (float &v : table)
    v = normal(rng);
  for (size_t i = 0; i < gathered.size(); ++i)
    gathered[i] = table[(i * 7 + i / 16) % table.size()], random[i] = normal(rng);
  repeatingParam = gathered;
  for (size_t i = 0; i < pruned.size(); i += 4) // three in four zeros: they repeat, yet say nothing
    pruned[i] = normal(rng);
  auto b = addedTensors({{"onnx::Add_759", gathered}, {"onnx::Add_12", random}, {"blocks.0.bias_grid", repeatingParam},
                         {"onnx::Add_31", pruned}});
  auto m = importOk(b);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->model.foldedTables.size(), 1u);
  EXPECT_EQ(m->model.foldedTables[0].first, "onnx::Add_759");
  EXPECT_EQ(m->model.foldedTables[0].second, "128 nonzero values, 16 distinct");
  // Another producer's names say nothing of an exporter's folding.
  b.model.set_producer_name("hand-built");
  auto other = importOk(b);
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->model.foldedTables.empty());
}

/// Two BatchNormalizations over 2 channels whose running statistics are equal, as a fresh model's are: the
/// TorchScript exporter keeps the first layer's and reads it for the second through Identity nodes named
/// for the second's buffers.
OnnxBuilder mergedRunningStatistics(bool training) {
  OnnxBuilder b;
  b.model.set_producer_name("pytorch");
  b.input("x", {4, 2, 3, 3});
  for (const std::string layer : {"bn1", "bn2"}) {
    b.initF32(layer + ".weight", {2}, {1.5f, 0.5f});
    b.initF32(layer + ".bias", {2}, {0.25f, -0.25f});
  }
  b.initF32("bn1.running_mean", {2}, {0.0f, 0.0f});
  b.initF32("bn1.running_var", {2}, {1.0f, 1.0f});
  b.node("Identity", {"bn1.running_mean"}, {"bn2.running_mean"});
  b.node("Identity", {"bn1.running_var"}, {"bn2.running_var"});
  std::string in = "x";
  for (const std::string layer : {"bn1", "bn2"}) {
    std::vector<std::string> outputs{layer + "_y"};
    if (training)
      outputs.insert(outputs.end(), {layer + "_mean", layer + "_var"});
    auto &n = b.node("BatchNormalization", {in, layer + ".weight", layer + ".bias", layer + ".running_mean",
                                            layer + ".running_var"},
                     outputs);
    OnnxBuilder::setInt(n, "training_mode", training);
    in = layer + "_y";
  }
  b.output(in);
  return b;
}

TEST(Importer, AMergedRunningStatisticIsARunningStatistic) {
  // The second layer's statistics are params of their own (separate buffers in PyTorch) and as much running
  // statistics as the first's: never trained by the optimizer (they were, by their gradient, in DenseNet's
  // eval-mode export), and in training mode each moves with its own layer's batch.
  auto eval = mergedRunningStatistics(false);
  auto m = importOk(eval);
  ASSERT_TRUE(m);
  auto f = m->forward();
  std::map<std::string, std::string> reasons;
  for (auto [i, p] : llvm::enumerate(m->model.params)) {
    auto why = f.getArgAttrOfType<mlir::StringAttr>(1 + i, kFrozenAttrName);
    reasons[p.name] = why ? why.str() : "trained";
  }
  const std::string statistic = "a BatchNormalization running statistic";
  EXPECT_EQ(reasons, (std::map<std::string, std::string>{
                         {"bn1.weight", "trained"}, {"bn1.bias", "trained"}, {"bn1.running_mean", statistic},
                         {"bn1.running_var", statistic}, {"bn2.weight", "trained"}, {"bn2.bias", "trained"},
                         {"bn2.running_mean", statistic}, {"bn2.running_var", statistic}}));
  auto train = mergedRunningStatistics(true);
  auto t = importOk(train);
  ASSERT_TRUE(t);
  std::vector<std::string> moved;
  auto tf = t->forward();
  for (unsigned r = 0; r < tf.getNumResults(); ++r)
    if (auto arg = tf.getResultAttrOfType<mlir::IntegerAttr>(r, kRunningStatAttrName))
      moved.push_back(t->model.params[arg.getInt() - 1].name);
  std::sort(moved.begin(), moved.end());
  EXPECT_EQ(moved, (std::vector<std::string>{"bn1.running_mean", "bn1.running_var", "bn2.running_mean",
                                             "bn2.running_var"}));
}

TEST(Importer, ConvWeightsTheExporterComputedAreNamed) {
  // A BatchNormalization folded into the convolution before it: TorchScript names the computed weight and
  // bias "onnx::Conv_N", the dynamo exporter's optimizer keeps the weight's name and adds "<weight>_bias".
  // A convolution of the module's own weight and bias is not listed, nor another producer's.
  OnnxBuilder b;
  b.model.set_producer_name("pytorch");
  b.input("x", {1, 2, 4, 4});
  std::string in = "x";
  for (const auto &[w, bias] : {std::pair{"onnx::Conv_12", "onnx::Conv_13"}, std::pair{"c2.weight", "c2.bias"},
                                std::pair{"c3.weight", "c3.weight_bias"}}) {
    b.initF32(w, {2, 2, 1, 1}, {1.0f, 0.5f, -0.5f, 2.0f});
    b.initF32(bias, {2}, {0.1f, -0.1f});
    b.node("Conv", {in, w, bias}, {in + "+"});
    in += "+";
  }
  b.output(in);
  auto m = importOk(b);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->model.computedConvParams,
            (std::vector<std::string>{"onnx::Conv_12", "onnx::Conv_13", "c3.weight", "c3.weight_bias"}));
  b.model.set_producer_name("hand-built");
  auto other = importOk(b);
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->model.computedConvParams.empty());
}

TEST(Importer, OneElementInitializersOfOtherProducersAreListedConstantsUnlessTrainable) {
  // A hand-built graph names its scalar factors as it likes ("inv_sqrt_hd"): constants that passes can fold,
  // each listed for the compile summary, and --trainable makes one a param.
  auto b = scalarFactors({{"inv_sqrt_hd", {}}, {"head.bias", {1}}, {"onnx::Mul_3", {}}});
  auto m = importOk(b);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->model.params.empty());
  EXPECT_EQ(m->model.scalarConstants, (std::vector<std::string>{"inv_sqrt_hd", "head.bias"}));
  ImportOptions options;
  options.trainable = "^head\\.";
  auto trained = importOk(b, options);
  ASSERT_TRUE(trained);
  EXPECT_EQ(paramNames(*trained), (std::vector<std::string>{"head.bias"}));
  EXPECT_EQ(trained->model.scalarConstants, (std::vector<std::string>{"inv_sqrt_hd"}));
}

/// Adds torch.export's metadata to value_info `name` as the dynamo exporter writes it (ValueInfoProto field
/// 4, metadata_props, which ONNX 1.12's schema lacks: an unknown field).
void torchMetadata(OnnxBuilder &b, const std::string &name, const std::string &key, const std::string &value) {
  auto *vi = b.graph().add_value_info();
  vi->set_name(name);
  onnx::StringStringEntryProto entry;
  entry.set_key(key);
  entry.set_value(value);
  vi->GetReflection()->MutableUnknownFields(vi)->AddLengthDelimited(4, entry.SerializeAsString());
}

TEST(Importer, TorchExportSignatureDecidesWhatTrains) {
  // With torch.export's signature only PARAMETERs train: a one-element parameter named like a made-up value
  // ("zeros" is an FX node's name too) trains, a buffer stays fixed, and a tensor the exporter folded from
  // weights through layout ops (an LSTM's two directions packed into one W) is those weights, one folded
  // through a computing op (arange) a computed value; one the exporter's own node computed from a parameter
  // (ViT's cls_token expanded over a static batch, named `expand`) trains in its place, listed; a scalar
  // folded from a parameter (exp(logit_scale)) is fixed and says why, one folded from shapes is a constant.
  OnnxBuilder b;
  b.model.set_producer_name("pytorch");
  b.input("x", {2, 2});
  b.initF32("zeros", {}, {0.5f});
  b.initF32("scale_buffer", {2}, {1.0f, 2.0f});
  b.initF32("val_12", {2, 2}, {1, 2, 3, 4});
  b.initF32("where", {2, 2}, {0, -1e9f, 0, 0});
  b.initF32("val_3", {}, {2.0f});
  b.initF32("val_57", {1}, {0.35f});
  b.initF32("exp", {}, {1.35f});
  b.initF32("val_48", {2}, {1.0f, 1.0f});
  b.initF32("conv.weight_bias", {2}, {0.5f, 0.25f});
  b.initF32("expand", {2, 2}, {0.75f, -0.5f, 0.75f, -0.5f});
  b.node("Mul", {"x", "zeros"}, {"a"});
  b.node("Mul", {"a", "scale_buffer"}, {"b"});
  b.node("MatMul", {"b", "val_12"}, {"c"});
  b.node("Add", {"c", "where"}, {"d"});
  b.node("Mul", {"d", "val_3"}, {"d3"});
  b.node("Mul", {"d3", "val_57"}, {"e"});
  b.node("Mul", {"e", "exp"}, {"f"});
  b.node("Mul", {"f", "val_48"}, {"g"});
  b.node("Add", {"g", "conv.weight_bias"}, {"h"});
  b.node("Add", {"h", "expand"}, {"y"});
  b.output("y");
  const std::string kind = "pkg.torch.export.graph_signature.InputSpec.kind";
  const std::string folded = "pkg.onnxscript.optimizer.folded_from";
  torchMetadata(b, "zeros", kind, "PARAMETER");
  torchMetadata(b, "scale_buffer", kind, "BUFFER");
  torchMetadata(b, "val_12", folded, "['rnn.weight_ih_l0', 'rnn.weight_ih_l0_reverse', 'zeros', 'val_10']");
  torchMetadata(b, "where", folded, "['arange_2', 'mask.bias']");
  torchMetadata(b, "exp", folded, "['logit_scale']");
  torchMetadata(b, "expand", folded, "['cls_token', 'val_6', 'val_7']");
  torchMetadata(b, "val_57", folded, "['getitem', 'val_34', 'sym_size_int_2']"); // an attention scale
  auto m = importOk(b);
  ASSERT_TRUE(m);
  EXPECT_EQ(paramNames(*m), (std::vector<std::string>{"zeros", "scale_buffer", "val_12", "where", "exp", "val_48",
                                                      "conv.weight_bias", "expand"}));
  auto f = m->forward();
  auto frozen = [&](unsigned arg) {
    auto why = f.getArgAttrOfType<mlir::StringAttr>(arg, kFrozenAttrName);
    return why ? why.str() : std::string("trained");
  };
  EXPECT_EQ(frozen(1), "trained");
  EXPECT_EQ(frozen(2), "a buffer in torch.export's signature, not a parameter");
  EXPECT_EQ(frozen(3), "trained");
  EXPECT_EQ(frozen(4), "a value the exporter computed from arange_2, mask.bias (where mask.bias is a parameter, "
                       "PyTorch trains it and tec cannot: it is not in the model; export with optimize=False or "
                       "with dynamic shapes to keep it)");
  EXPECT_EQ(frozen(5), "the exporter folded logit_scale into this value, so the parameter itself is not in the model "
                       "(export with optimize=False to train it)");
  EXPECT_EQ(frozen(6), "a value the exporter computed"); // no record, a made-up name: GroupNorm's unit gains
  EXPECT_EQ(frozen(7), "trained");                       // no record, a module's name: a folded weight
  EXPECT_EQ(frozen(8), "trained"); // in cls_token's place, listed
  EXPECT_EQ(m->model.foldedOps, (std::vector<std::pair<std::string, std::string>>{{"expand", "expand of cls_token"}}));
  EXPECT_EQ(m->ops<ConstantOp>().size(), 2u); // val_3, val_57
}

TEST(Importer, ShapeOptionFixesDynamicDims) {
  OnnxBuilder b;
  b.input("x", {-1, 8});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  ImportOptions options;
  options.shapes["x"] = {5, 8};
  auto m = importOk(b, options);
  ASSERT_TRUE(m);
  EXPECT_EQ(shapeOf(m->forward().getArgument(0)), (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(shapeOf(m->ops<ReluOp>()[0].getResult()), (std::vector<int64_t>{5, 8}));
}

// Exporters name dynamic dims (torch.onnx's dynamic_axes, dynamo's s0...): --shape N=5 binds the name in
// every input that uses it.
TEST(Importer, ShapeOptionBindsSymbolicDimsByName) {
  OnnxBuilder b;
  b.input("x", {-1, 8}); // dims named "N"
  b.input("mask", {-1});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  b.output("mask");
  ImportOptions options;
  options.shapes["N"] = {5};
  auto m = importOk(b, options);
  ASSERT_TRUE(m);
  EXPECT_EQ(shapeOf(m->forward().getArgument(0)), (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(shapeOf(m->forward().getArgument(1)), (std::vector<int64_t>{5}));

  ImportOptions unknown;
  unknown.shapes["batch"] = {5};
  mlir::MLIRContext context;
  auto refused = importOnnxFile(context, b.save(), unknown);
  ASSERT_FALSE(refused);
  EXPECT_NE(llvm::toString(refused.takeError()).find("'batch', which is neither a graph input nor a symbolic dim "
                                                      "(symbolic dims: N)"),
            std::string::npos);
}

TEST(Importer, ExternalDataIsMappedFromBesideTheModel) {
  std::string dir = OnnxBuilder::tempDir();
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  {
    std::ofstream os(dir + "/weights.bin", std::ios::binary);
    float pad = -1;
    os.write(reinterpret_cast<const char *>(&pad), sizeof(pad)); // data starts at offset 4
    os.write(reinterpret_cast<const char *>(w.data()), w.size() * sizeof(float));
  }
  OnnxBuilder b;
  b.input("x", {2, 3});
  auto &t = b.initF32("w", {2, 3}, {});
  t.clear_raw_data();
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair{"location", "weights.bin"}, std::pair{"offset", "4"}, std::pair{"length", "24"}}) {
    auto *e = t.add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  b.node("Add", {"x", "w"}, {"y"});
  b.output("y");
  mlir::MLIRContext ctx;
  auto model = importOnnxFile(ctx, b.save("model.onnx", dir));
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  ASSERT_EQ(model->params.size(), 1u);
  ASSERT_EQ(model->params[0].bytes.size(), 24u);
  EXPECT_EQ(std::memcmp(model->params[0].bytes.data(), w.data(), 24), 0);
}

TEST(Importer, NodesOutOfOrderAreSortedAndIdentityDropoutVanish) {
  OnnxBuilder b;
  b.input("x", {3});
  b.node("Relu", {"b"}, {"y"}, "second");
  b.node("Dropout", {"a"}, {"b"}, "drop");
  b.node("Identity", {"x"}, {"a"}, "first");
  b.output("y");
  auto m = importOk(b);
  ASSERT_TRUE(m);
  auto relus = m->ops<ReluOp>();
  ASSERT_EQ(relus.size(), 1u);
  EXPECT_EQ(relus[0].getInput(), m->forward().getArgument(0));
}

TEST(Importer, SupportedOpsListsTheIssueSubset) {
  auto ops = supportedOnnxOps();
  for (const char *op : {"MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Gelu", "Tanh", "Sigmoid", "Erf",
                         "Sqrt", "Pow", "Softmax", "LogSoftmax", "LayerNormalization", "Transpose", "Reshape",
                         "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Cast", "Identity",
                         "Dropout", "Constant", "ReduceMean", "ReduceSum", "Where", "Expand"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
}
