#include "api/Summary.h"

#include "api/Inspect.h"
#include "ir/TecOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace tec {

namespace {

std::string typeString(Type type) {
  auto t = llvm::cast<RankedTensorType>(type);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t.getElementType() << "[" << shapeString(t.getShape()) << "]";
  return s;
}

std::string opsString(const std::map<std::string, int> &counts, int &total) {
  std::string s;
  total = 0;
  for (const auto &[name, n] : counts) {
    s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
    total += n;
  }
  return s;
}

/// Which source nodes became which op, for every op built from more than one node.
/// The first few names and how many more: a net's dozens of convolutions in one line.
std::string fewNames(const std::vector<std::string> &names) {
  constexpr size_t kShown = 4;
  if (names.size() <= kShown)
    return llvm::join(names, ", ");
  return llvm::join(llvm::ArrayRef(names).take_front(kShown), ", ") + " and " +
         std::to_string(names.size() - kShown) + " more";
}

void printFusions(func::FuncOp forward, llvm::raw_ostream &os) {
  std::vector<std::string> lines;
  forward.walk([&](Operation *op) {
    auto nodes = sourceNodes(op->getLoc());
    if (nodes.size() < 2)
      return;
    std::string what = op->getName().stripDialect().str();
    if (auto epilogue = op->getAttrOfType<StringAttr>("epilogue"); epilogue && epilogue.getValue() != "none")
      what += " (epilogue " + epilogue.getValue().str() + ")";
    if (auto causal = op->getAttrOfType<BoolAttr>("causal"); causal && causal.getValue())
      what += " (causal)";
    lines.push_back(what + " <- " + llvm::join(nodes, ", "));
  });
  os << "  fusions  " << lines.size() << (lines.empty() ? "\n" : ":\n");
  for (const auto &l : lines)
    os << "    " << l << "\n";
}

/// TensorRT's layer information in the terminal: each GEMM's precision per target, then the reasons.
void printPrecisions(const CompiledModel &c, llvm::raw_ostream &os) {
  if (c.layers.empty())
    return;
  size_t width = 5;
  for (const auto &l : c.layers)
    width = std::max(width, l.layer.size());
  os << "  precision per GEMM layer:\n    " << llvm::left_justify("layer", width);
  for (const auto &v : c.plan.variants())
    os << "  " << llvm::left_justify(v.target(), 6);
  os << "\n";
  for (const auto &l : c.layers) {
    os << "    " << llvm::left_justify(l.layer, width);
    for (const auto &v : c.plan.variants()) {
      auto it = std::find_if(l.perTarget.begin(), l.perTarget.end(), [&](const auto &p) { return p.first == v.target(); });
      std::string precision = it == l.perTarget.end() ? "-" : llvm::StringRef(it->second).split(':').first.str();
      os << "  " << llvm::left_justify(precision, 6);
    }
    os << "\n";
  }
  // Why, once per distinct reason of each layer.
  for (const auto &l : c.layers) {
    std::vector<std::pair<std::string, std::vector<std::string>>> reasons;
    for (const auto &[target, text] : l.perTarget) {
      auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto &r) { return r.first == text; });
      if (it == reasons.end())
        reasons.push_back({text, {target}});
      else
        it->second.push_back(target);
    }
    for (const auto &[text, targetsWithIt] : reasons)
      os << "    " << l.layer << " on " << llvm::join(targetsWithIt, ", ") << ": " << text << "\n";
  }
}

/// With --train: which params the step trains, and each frozen one with why (from the first train module).
void printTrainedParams(const CompiledModel &c, llvm::raw_ostream &os) {
  if (c.trainModules.empty())
    return;
  auto step = const_cast<mlir::OwningOpRef<mlir::ModuleOp> &>(c.trainModules.front())->lookupSymbol<func::FuncOp>(
      "train_step");
  if (!step)
    return;
  std::vector<std::string> trained, frozen;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto name = step.getArgAttrOfType<mlir::StringAttr>(i, kParamAttrName);
    if (!name)
      continue;
    if (auto why = step.getArgAttrOfType<mlir::StringAttr>(i, kFrozenAttrName))
      frozen.push_back(name.str() + " (" + why.str() + ")");
    else
      trained.push_back(name.str());
  }
  // Every param by name, trained or frozen, so that none can be missed silently (a one-element bias was).
  os << "  trained  " << trained.size() << " params" << (trained.empty() ? "" : ":") << "\n";
  std::string line;
  for (const auto &t : trained) {
    if (!line.empty() && line.size() + t.size() > 100) {
      os << "    " << line << ",\n";
      line.clear();
    }
    line += (line.empty() ? "" : ", ") + t;
  }
  if (!line.empty())
    os << "    " << line << "\n";
  if (!c.model.scalarConstants.empty())
    os << "  constants " << c.model.scalarConstants.size() << " one-element initializers, not trained: "
       << llvm::join(c.model.scalarConstants, ", ")
       << " (taken as scalar factors: the model is not a PyTorch export, whose parameters are named by module "
          "path; --trainable NAME trains one)\n";
  for (const auto &[name, row] : c.model.paddingRows)
    os << "  padding  " << name << " row " << row
       << " is all zeros, as nn.Embedding's padding_idx: lookups of it pass no gradient, so it stays untrained "
          "as in PyTorch\n";
  if (!c.model.mergedParams.empty()) {
    std::vector<std::string> merged;
    for (const auto &[name, readers] : c.model.mergedParams)
      merged.push_back(name + " (" + readers + ")");
    os << "  tied     " << merged.size() << " params read by several nodes, every element equal or in "
       << "several modules: " << llvm::join(merged, ", ")
       << ". Each trains as one param. torch.onnx.export's dynamo exporter (its optimizer) merges equal "
          "initializers (a fresh model's norm weights and biases, its layer scales, deep-copied layers' "
          "weights), so these may be separate params in PyTorch: to train them apart as it does, export with "
          "optimize=False\n";
  }
  for (const auto &[name, counts] : c.model.foldedTables)
    if (llvm::is_contained(trained, name))
      os << "  folded   " << name << " repeats its values (" << counts
       << "), as a table that the exporter gathered and folded into a constant (Swin's relative position bias): "
          "each copy trains apart here, where PyTorch trains the table with their gradients summed. To train "
          "the table, export with do_constant_folding=False\n";
  for (const auto &[name, op] : c.model.foldedOps)
    if (llvm::is_contained(trained, name))
      os << "  folded   " << name << " is the exporter's " << op
         << ", folded into a constant for the export's static shapes: it trains in place of what it was computed "
            "from, each copy apart, where PyTorch trains that with the copies' gradients summed. To train it, "
            "export with optimize=False\n";
  std::vector<std::string> computed;
  for (const std::string &name : c.model.computedConvParams)
    if (llvm::is_contained(trained, name))
      computed.push_back(name);
  if (!computed.empty())
    os << "  computed " << computed.size() << " convolution weights and biases that the exporter computed ("
       << fewNames(computed)
       << "): a BatchNormalization folded into the convolution before it (eval mode) or a weight_norm's "
          "product, written as one tensor. tec trains that tensor; PyTorch trains the BatchNorm's scale and "
          "shift or weight_norm's g and v, which moves it otherwise. To train those params, export with "
          "do_constant_folding=False (TorchScript) or optimize=False (dynamo)\n";
  if (c.model.outputNames.size() > 1)
    os << "  outputs  " << llvm::join(c.model.outputNames, ", ")
       << ": each with a loss term; tec train trains on those given a --target and ignores the others\n";
  if (!frozen.empty())
    os << "  frozen   " << frozen.size() << " params:\n";
  for (const auto &f : frozen)
    os << "    " << f << "\n";
}

void printSummary(const CompiledModel &c, const std::string &modelPath, const std::string &planPath,
                  const std::string &dumpDir, llvm::raw_ostream &os) {
  const auto &model = c.model;
  auto forward = const_cast<ImportedModel &>(model).module->lookupSymbol<func::FuncOp>("forward");
  os << "tec: compiled " << modelPath << "\n";
  os << "  model    opset " << model.opset << (model.producer.empty() ? "" : ", producer " + model.producer) << "\n";
  auto args = forward.getArgumentTypes();
  for (auto [i, name] : llvm::enumerate(model.inputNames))
    os << "  input    " << name << " " << typeString(args[i]) << "\n";
  auto results = forward.getResultTypes();
  for (auto [i, name] : llvm::enumerate(model.outputNames))
    os << "  output   " << name << " " << typeString(results[i]) << "\n";
  double bytes = 0;
  int64_t elements = 0;
  for (const auto &p : model.params) {
    bytes += p.bytes.size();
    elements += p.type.getNumElements();
  }
  os << "  params   " << model.params.size() << " tensors, " << elements << " values, " << bytesString(bytes) << "\n";
  int total;
  std::string ops = opsString(c.importedOps, total);
  os << "  imported " << total << " ops: " << ops << "\n";
  if (model.narrowedDoubles > 0)
    os << "  float64  " << model.narrowedDoubles
       << " float64 constants and casts taken as float32 (tec has no float64 kernels)\n";
  ops = opsString(c.compiledOps, total);
  os << "  compiled " << total << " ops: " << ops << "\n";
  os << "  pipeline " << llvm::join(c.passes, " -> ") << "\n";
  printFusions(forward, os);
  printTrainedParams(c, os);
  for (const auto &v : c.plan.variants()) {
    os << "  variant  " << v.target() << (v.kind() == "train" ? " train step" : "") << " (" << v.precision()
       << "): " << v.steps_size() << " steps, arena " << bytesString(v.arena_bytes());
    if (v.kind() == "train") // what the backward pass keeps, the first thing lower precision should shrink
      os << ", saved activations " << bytesString(memoryReport(v).savedBytes);
    os << "\n";
  }
  printPrecisions(c, os);
  if (!planPath.empty())
    os << "  plan     " << planPath << " (data " << bytesString(c.data.size()) << ")\n";
  if (!c.dumpFiles.empty())
    os << "  dumps    " << c.dumpFiles.size() << " files in " << dumpDir << "\n";
}

} // namespace


std::string compileSummary(const CompiledModel &compiled, const std::string &modelPath, const std::string &planPath,
                           const std::string &dumpDir) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printSummary(compiled, modelPath, planPath, dumpDir, os);
  os.flush();
  return text;
}

} // namespace tec
