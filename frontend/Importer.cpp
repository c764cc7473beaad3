// The ONNX importer's graph: opset and operator checks, graph inputs, definitions in order, ONNX's shape
// inference cross-checked, values and params, the importer table, and run(); the public entry points.
#include "frontend/GraphImporter.h"

#include <cstring>
#include <set>
#include <unordered_set>

namespace tec::importer {

Error GraphImporter::checkOpsetAndOps() {
  for (const auto &imp : storage.model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  out.opset = opset;
  if (opset != 0 && opset > kMaxOpset)
    return unsupported("opset " + llvm::Twine(opset) + " is outside the supported range " +
                       llvm::Twine(kMinOpset) + "-" + llvm::Twine(kMaxOpset) +
                       " (convert the model with onnx.version_converter)");
  // An older opset is read as opset 7 when none of its operators changed in between.
  if (opset != 0 && opset < kMinOpset) {
    for (const auto &[i, node] : llvm::enumerate(graph.node())) {
      const auto *old = onnx::OpSchemaRegistry::Schema(node.op_type(), opset, "");
      const auto *current = onnx::OpSchemaRegistry::Schema(node.op_type(), kMinOpset, "");
      if (!old || !current || old->SinceVersion() != current->SinceVersion())
        return unsupported("opset " + llvm::Twine(opset) + " is outside the supported range " +
                           llvm::Twine(kMinOpset) + "-" + llvm::Twine(kMaxOpset) + " and its " + node.op_type() +
                           " differs from opset " + llvm::Twine(kMinOpset) +
                           "'s (convert the model with onnx.version_converter)");
    }
  }
  std::string list;
  ImportError::Operators operators;
  for (const auto &[i, node] : llvm::enumerate(graph.node())) {
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (defaultDomain && importers().contains(node.op_type()))
      continue;
    std::string name = node.name().empty() ? "#" + std::to_string(i) : node.name();
    std::string op = (defaultDomain ? "" : node.domain() + ".") + node.op_type();
    list += "\n  node '" + name + "'  op " + op;
    operators.emplace_back(escapeControl(name), escapeControl(op));
  }
  if (!operators.empty())
    return llvm::make_error<ImportError>(
        ImportErrorKind::Unsupported,
        escapeControl(path + ": " + std::to_string(operators.size()) + " unsupported operator" +
                      (operators.size() == 1 ? "" : "s") + " (opset " + std::to_string(opset) + "):" + list),
        std::move(operators));
  if (opset == 0)
    return invalid("model imports no opset of the default ONNX domain");
  return Error::success();
}

Expected<RankedTensorType> GraphImporter::inputType(const onnx::ValueInfoProto &vi) {
  std::string what = "graph input '" + vi.name() + "'";
  if (!vi.type().has_tensor_type())
    return unsupported(what + " is not a tensor");
  const auto &tt = vi.type().tensor_type();
  Type elt = elementTypeFor(ctx, tt.elem_type());
  if (!elt)
    return unsupported(what + " has element type " + onnxTypeName(tt.elem_type()));
  auto given = options.shapes.find(vi.name());
  if (!tt.has_shape() && given == options.shapes.end())
    return invalid(what + " has no shape; pass --shape " + vi.name() + "=AxB");
  std::vector<int64_t> dims;
  std::string dynamic;
  for (const auto &[i, d] : llvm::enumerate(tt.shape().dim())) {
    if (d.has_dim_value())
      dims.push_back(d.dim_value());
    else if (auto bound = dimParams.find(d.dim_param()); d.has_dim_param() && bound != dimParams.end())
      dims.push_back(bound->second);
    else {
      dims.push_back(ShapedType::kDynamic);
      dynamic += (dynamic.empty() ? "" : ", ") + std::to_string(i) +
                 (d.has_dim_param() ? " ('" + d.dim_param() + "')" : std::string());
    }
  }
  if (given != options.shapes.end()) {
    ArrayRef<int64_t> fixed = given->second;
    if (tt.has_shape() && fixed.size() != dims.size())
      return invalid("--shape " + vi.name() + "=" + shape::str(fixed) + " has rank " + llvm::Twine(fixed.size()) +
                     ", but the model's input has rank " + llvm::Twine(dims.size()));
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] != ShapedType::kDynamic && dims[i] != fixed[i])
        return invalid("--shape " + vi.name() + "=" + shape::str(fixed) + " disagrees with the model's static dim " +
                       llvm::Twine(i) + " = " + llvm::Twine(dims[i]));
    dims.assign(fixed.begin(), fixed.end());
  } else if (!dynamic.empty()) {
    return invalid(what + " has dynamic dims " + dynamic + "; fix them with --shape " + vi.name() + "=AxB");
  }
  if (!shape::elementCount(dims))
    return invalid(what + " has dims [" + shape::str(dims) + "] whose element count is negative or overflows int64");
  return RankedTensorType::get(dims, elt);
}

Error GraphImporter::freezeInput(llvm::StringRef name, const std::string &serialized) {
  auto input = llvm::find_if(graph.input(), [&](const auto &vi) { return vi.name() == name; });
  if (input == graph.input().end())
    return invalid("--freeze-input names '" + name + "', which is not a graph input");
  std::string what = "frozen input '" + name.str() + "'";
  auto &t = ownedTensors.emplace_back();
  if (!t.ParseFromString(serialized))
    return invalid(what + ": the value is not a serialized ONNX TensorProto");
  if (auto err = checkTensorProto(t, what))
    return err;
  auto given = *tensorType(t, what);
  const auto &declared = input->type().tensor_type();
  bool matches = elementTypeFor(ctx, declared.elem_type()) == given.getElementType() &&
                 (!declared.has_shape() || declared.shape().dim_size() == given.getRank());
  for (int d = 0; matches && declared.has_shape() && d < declared.shape().dim_size(); ++d)
    matches = !declared.shape().dim(d).has_dim_value() || declared.shape().dim(d).dim_value() == given.getDimSize(d);
  if (!matches)
    return invalid(what + ": the value (" + onnxTypeName(t.data_type()) + " " + shape::str(given.getShape()) +
                   ") does not match the input's declared type");
  constants[name] = &t;
  return Error::success();
}

Error GraphImporter::checkDefinitionsAndOrder(std::vector<int> &order) {
  llvm::StringMap<int> producer;
  for (const auto &[i, node] : llvm::enumerate(graph.node()))
    for (const auto &o : node.output())
      if (!o.empty()) {
        if (producer.contains(o) || initializers.contains(o))
          return invalid(nodeLabel(node, i) + ": output '" + o + "' is defined twice");
        producer[o] = i;
      }
  llvm::StringSet<> graphInputs;
  for (const auto &vi : graph.input())
    graphInputs.insert(vi.name());
  // Kahn's algorithm, stable in the file's order; nodes left over sit on a cycle.
  std::vector<int> pending(graph.node_size(), 0);
  std::vector<std::vector<int>> consumers(graph.node_size());
  for (const auto &[i, node] : llvm::enumerate(graph.node())) {
    for (const auto &in : node.input()) {
      if (in.empty())
        continue;
      usedNames.insert(in);
      auto p = producer.find(in);
      if (p != producer.end()) {
        ++pending[i];
        consumers[p->second].push_back(i);
      } else if (!graphInputs.contains(in) && !initializers.contains(in)) {
        return invalid(nodeLabel(node, i) + ": input '" + in +
                       "' is not defined by any node, initializer or graph input");
      }
    }
  }
  for (const auto &o : graph.output()) {
    usedNames.insert(o.name());
    if (!producer.contains(o.name()) && !graphInputs.contains(o.name()) && !initializers.contains(o.name()))
      return invalid("graph output '" + o.name() + "' is not defined by any node, initializer or graph input");
  }
  std::vector<int> ready;
  for (int i = graph.node_size() - 1; i >= 0; --i)
    if (!pending[i])
      ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<int> next;
    for (int c : consumers[i])
      if (--pending[c] == 0)
        next.push_back(c);
    llvm::sort(next, std::greater<int>());
    ready.insert(ready.end(), next.begin(), next.end());
    llvm::sort(ready, std::greater<int>());
  }
  if (order.size() != static_cast<size_t>(graph.node_size())) {
    std::string cycle;
    for (const auto &[i, node] : llvm::enumerate(graph.node()))
      if (pending[i])
        cycle += (cycle.empty() ? "" : ", ") + nodeLabel(node, i);
    return invalid("the graph has a cycle through " + cycle);
  }
  return Error::success();
}

Error GraphImporter::runOnnxShapeInference() {
  // ONNX 1.12 knows opsets up to 17; for newer opsets its older schemas would infer wrong shapes, so
  // tec's own shape rules (which always run) stand alone there.
  if (opset > 17)
    return Error::success();
  try {
    onnx::ShapeInferenceOptions opts{/*check_type=*/true, /*error_mode=*/1, /*enable_data_propagation=*/false};
    onnx::shape_inference::InferShapes(storage.model, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception &e) {
    return invalid("ONNX shape inference failed: " + llvm::Twine(e.what()));
  }
  for (const auto &vi : storage.model.graph().value_info())
    onnxInferred[vi.name()] = &vi.type();
  for (const auto &vi : storage.model.graph().output())
    onnxInferred[vi.name()] = &vi.type();
  return Error::success();
}

Error GraphImporter::crossCheck(const onnx::NodeProto &node, unsigned i, RankedTensorType type) {
  auto it = onnxInferred.find(node.output(i));
  if (it == onnxInferred.end() || !it->second->has_tensor_type() || !it->second->tensor_type().has_shape())
    return Error::success();
  std::vector<int64_t> dims;
  for (const auto &d : it->second->tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return Error::success();
    dims.push_back(d.dim_value());
  }
  if (ArrayRef<int64_t>(dims) != type.getShape())
    return nodeInvalid(node, "output '" + node.output(i) + "' has shape " + shape::str(type.getShape()) +
                                 " by tec's rules but " + shape::str(dims) + " by ONNX shape inference");
  return Error::success();
}

Expected<Value> GraphImporter::value(const onnx::NodeProto &node, int i) {
  if (!hasInput(node, i))
    return nodeInvalid(node, "missing required input #" + llvm::Twine(i));
  const std::string &name = node.input(i);
  if (auto it = values.find(name); it != values.end())
    return it->second;
  if (auto it = constants.find(name); it != constants.end()) {
    if (scalarConstants.contains(name))
      out.scalarConstants.push_back(name);
    auto bytes = tensorBytes(*it->second, "tensor '" + name + "'");
    if (!bytes)
      return bytes.takeError();
    auto type = *tensorType(*it->second, name);
    DenseElementsAttr attr;
    if (type.getElementType().isInteger(1)) {
      llvm::SmallVector<bool> bits(bytes->begin(), bytes->end());
      attr = DenseElementsAttr::get(type, ArrayRef<bool>(bits));
    } else {
      attr = DenseElementsAttr::getFromRawBuffer(type, *bytes);
    }
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(body);
    Value v = builder.create<ConstantOp>(NameLoc::get(builder.getStringAttr(name)), type, attr);
    return values[name] = v;
  }
  if (initializers.contains(name))
    return param(name);
  return nodeInvalid(node, "input '" + name + "' is not defined");
}

Expected<Value> GraphImporter::param(const std::string &name) {
  if (auto it = values.find(name); it != values.end())
    return it->second;
  // A transposed copy of another initializer (an exporter untying lm_head from the embedding) is that
  // one's transpose: one param, whose gradient sums both uses, as in the model that was exported.
  if (auto tied = transposedCopies.find(name); tied != transposedCopies.end()) {
    auto sourceOrErr = param(tied->second);
    if (!sourceOrErr)
      return sourceOrErr.takeError();
    Value source = *sourceOrErr;
    out.transposedCopies[name] = tied->second;
    auto t = typeOf(source);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(body);
    Value transposed = builder.create<TransposeOp>(NameLoc::get(builder.getStringAttr(name)),
                                                   RankedTensorType::get({t.getDimSize(1), t.getDimSize(0)},
                                                                         t.getElementType()),
                                                   source, ArrayRef<int64_t>{1, 0});
    return values[name] = transposed;
  }
  auto merged = mergedCopies.find(name);
  if (merged != mergedCopies.end())
    out.mergedCopies[name] = merged->second;
  const onnx::TensorProto &init = *initializers.lookup(merged != mergedCopies.end() ? merged->second : name);
  std::string what = "initializer '" + init.name() + "'";
  auto bytes = tensorBytes(init, what);
  if (!bytes)
    return bytes.takeError();
  auto type = *tensorType(init, what);
  Value arg = body->addArgument(type, NameLoc::get(builder.getStringAttr(name)));
  out.params.push_back({name, type, *bytes});
  if (auto why = exporterConstant(name, type, *bytes))
    frozenParams.try_emplace(name, *why);
  return values[name] = arg;
}

/// Whether every element of `bytes` (`width` bytes each) has the first one's bytes.
static bool allElementsEqual(ArrayRef<char> bytes, size_t width) {
  for (size_t at = width; width && at + width <= bytes.size(); at += width)
    if (!std::equal(bytes.begin(), bytes.begin() + width, bytes.begin() + at))
      return false;
  return true;
}

/// The module a TorchScript export's node ran in: its name up to the last '/', each part without the "_N"
/// the exporter appends to the second and later calls of a module ("/first_1/MatMul" ran in "/first"); empty
/// where the name says nothing (no path).
static std::string callingModule(llvm::StringRef nodeName) {
  const size_t last = nodeName.rfind('/');
  if (last == llvm::StringRef::npos)
    return "";
  llvm::SmallVector<llvm::StringRef, 8> parts;
  nodeName.take_front(last).split(parts, '/', -1, /*KeepEmpty=*/false);
  static const llvm::Regex callSuffix("_[0-9]+$");
  std::string module;
  for (llvm::StringRef part : parts)
    module += "/" + callSuffix.sub("", part);
  return module;
}

/// Where two modules' paths part: each without the trailing parts they share ("/enc/layers.0/linear1" and
/// "/enc/layers.1/linear1": "/enc/layers.0" and "/enc/layers.1"); none for one module.
static std::optional<std::pair<std::string, std::string>> partingAncestors(llvm::StringRef a, llvm::StringRef b) {
  if (a == b)
    return std::nullopt;
  while (!a.empty() && !b.empty() && a.substr(a.rfind('/')) == b.substr(b.rfind('/')))
    a = a.take_front(a.rfind('/')), b = b.take_front(b.rfind('/'));
  return std::make_pair(a.str(), b.str());
}

/// Whether two modules are entries of one list (nn.ModuleList, nn.Sequential: "/layers.0" and "/layers.1"),
/// where deep copies of a layer live.
static bool listSiblings(llvm::StringRef a, llvm::StringRef b) {
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common])
    ++common;
  while (common > 0 && llvm::isDigit(a[common - 1]))
    --common;
  auto index = [&](llvm::StringRef s) { return s.size() > common && llvm::all_of(s.drop_front(common), llvm::isDigit); };
  return common > 0 && (a[common - 1] == '.' || a[common - 1] == '/') && index(a) && index(b);
}

void GraphImporter::findMergedCopies(bool fromPyTorch) {
  if (!fromPyTorch)
    return;
  std::map<std::string, bool> splats; // an initializer -> whether its elements are all equal
  auto splat = [&](const std::string &name) {
    auto [known, added] = splats.try_emplace(name, false);
    if (!added)
      return known->second;
    const onnx::TensorProto &t = *initializers.lookup(name);
    auto bytes = tensorBytes(t, name);
    auto type = tensorType(t, name);
    known->second = bytes && type && allElementsEqual(*bytes, storageBytes(type->getElementType()));
    if (!bytes)
      llvm::consumeError(bytes.takeError());
    if (!type)
      llvm::consumeError(type.takeError());
    return known->second;
  };
  std::map<std::string, std::string> identitySource; // an Identity's output -> the initializer it reads
  for (const auto &node : graph.node())
    if (node.op_type() == "Identity" && node.input_size() == 1 && node.output_size() == 1 &&
        initializers.contains(node.input(0)) && !constants.contains(node.input(0)) &&
        !scalarConstants.contains(node.input(0)) && !frozenParams.contains(node.input(0)) &&
        !transposedCopies.count(node.input(0)) && !initializers.contains(node.output(0)))
      identitySource[node.output(0)] = node.input(0);
  // The params each module reads (not the shapes, axes or scalar factors among initializers), by role (op
  // type and input position), and the modules reading each.
  auto isParam = [&](const std::string &name) {
    return identitySource.count(name) ||
           (initializers.contains(name) && !constants.contains(name) && !scalarConstants.contains(name));
  };
  std::map<std::string, std::map<std::string, std::string>> roles; // module -> role -> value
  std::map<std::string, std::set<std::string>> readers;            // value -> modules
  for (const auto &node : graph.node()) {
    const std::string module = callingModule(node.name());
    if (node.op_type() == "Identity" || module.empty())
      continue;
    for (int i = 0; i < node.input_size(); ++i)
      if (isParam(node.input(i))) {
        roles[module][node.op_type() + "#" + std::to_string(i)] = node.input(i);
        readers[node.input(i)].insert(module);
      }
  }
  // Whether the modules under `to` are deep copies of those under `from` (nn.TransformerEncoder's layers,
  // copy.deepcopy clones), from the params both read in the same role: a random-valued param merged into its
  // counterpart says so (independently initialized params are never equal), the same initializer read in
  // both (a module called twice) or two random-valued ones apart (one weight assigned to two modules, each
  // with its own bias) say not; with neither, entries of one list are taken as copies.
  auto deepCopies = [&](const std::string &from, const std::string &to) {
    bool copied = false;
    for (auto it = roles.lower_bound(from); it != roles.end() && llvm::StringRef(it->first).starts_with(from); ++it) {
      const std::string below = it->first.substr(from.size()); // "/linear1", "" (not "0/..." of "/layers.10")
      if (!below.empty() && below[0] != '/')
        continue;
      auto other = roles.find(to + below);
      if (other == roles.end())
        continue;
      for (const auto &[role, x] : it->second) {
        auto y = other->second.find(role);
        if (y == other->second.end() || identitySource.count(x))
          continue;
        auto source = identitySource.find(y->second);
        if (y->second == x || (source == identitySource.end() && !splat(x) && !splat(y->second)))
          return false;
        copied |= source != identitySource.end() && source->second == x && !splat(x);
      }
    }
    return copied || listSiblings(from, to);
  };
  // The exporter merges the same tensor used twice too (a module called twice, ALBERT's layers: the
  // transposes of its weight it folded): meant to stay one param. A copy is a param of its own where it is
  // named by a module path, its elements are all equal (what a fresh model's distinct params share: ones,
  // zeros, a layer scale), or a deep copy of the module reading its source reads it (the transposes the
  // exporter folded of deep-copied layers' weights, under made-up names).
  auto separate = [&](const std::string &copy, const std::string &source) {
    if (!isExporterName(copy) || splat(source))
      return true;
    for (const std::string &from : readers[source])
      for (const std::string &to : readers[copy])
        if (auto parting = partingAncestors(from, to); parting && deepCopies(parting->first, parting->second))
          return true;
    return false;
  };
  for (const auto &[copy, source] : identitySource)
    if (separate(copy, source))
      mergedCopies[copy] = source;
}

/// The module a dynamo export's node ran in: the last but one of the name scopes it records
/// ("['', '0', '0.layers.1', '0.layers.1.linear1', 'linear_6']": "0.layers.1.linear1"); empty without them.
static std::string dynamoModule(const onnx::NodeProto &node) {
  constexpr int kNodeMetadataProps = 9;
  for (const auto &prop : metadataProps(node, kNodeMetadataProps))
    if (prop.key() == "pkg.torch.onnx.name_scopes") {
      const auto scopes = pythonStrings(prop.value());
      return scopes.size() >= 2 ? scopes[scopes.size() - 2].str() : "";
    }
  return "";
}

void GraphImporter::findMergedParams() {
  llvm::StringMap<std::map<std::string, int>> readers;                   // param -> op type -> nodes
  llvm::StringMap<std::map<std::string, std::set<std::string>>> modules; // param -> op type -> modules
  for (const auto &node : graph.node()) {
    if (node.op_type() == "Identity" && node.output_size() == 1 && mergedCopies.contains(node.output(0)))
      continue; // a param of its own now
    const std::string module = dynamoModule(node);
    llvm::StringSet<> inputs; // a node reading a param twice is one reader
    for (const auto &in : node.input())
      if (inputs.insert(in).second) {
        readers[in][node.op_type()]++;
        if (!module.empty())
          modules[in][node.op_type()].insert(module);
      }
  }
  for (const ParamData &p : out.params) {
    if (frozenParams.contains(p.name) || p.bytes.empty() || !llvm::isa<FloatType>(p.type.getElementType()))
      continue;
    const auto &kinds = readers.lookup(p.name);
    auto most = std::max_element(kinds.begin(), kinds.end(), [](auto &a, auto &b) { return a.second < b.second; });
    if (most == kinds.end() || most->second < 2)
      continue;
    // Equal elements (a fresh model's norms), or one kind of node in several modules (deep-copied layers'
    // equal weights: nn.TransformerEncoder's); a tied embedding is read by a Gather and a GEMM, not flagged.
    auto read = modules.find(p.name);
    const size_t places = read == modules.end() || !read->second.count(most->first) ? 0 : read->second[most->first].size();
    if (allElementsEqual(p.bytes, storageBytes(p.type.getElementType())))
      out.mergedParams.push_back({p.name, most->first + " x " + std::to_string(most->second)});
    else if (places > 1)
      out.mergedParams.push_back({p.name, most->first + " in " + *read->second[most->first].begin() + " and " +
                                              std::to_string(places - 1) + (places > 2 ? " other modules" : " other module")});
  }
}

/// Whether a random-valued tensor looks gathered from a smaller table: among its first elements (enough to
/// cover several copies of a table, few enough to bound the cost on large weights) half or more of the
/// nonzero ones repeat another's bits. A weight's random values practically never repeat; zeros (pruning,
/// padding) are left out.
static std::optional<std::pair<size_t, size_t>> repeatedValues(ArrayRef<char> bytes, size_t width) {
  constexpr size_t kLooked = 1 << 16, kFewest = 64;
  if (width == 0 || width > sizeof(uint64_t))
    return std::nullopt;
  std::unordered_set<uint64_t> distinct; // any bits: DenseSet reserves two keys, NaN patterns of a double
  size_t nonzero = 0;
  for (size_t at = 0; at + width <= bytes.size() && at / width < kLooked; at += width) {
    uint64_t bits = 0;
    std::memcpy(&bits, bytes.data() + at, width);
    const uint64_t magnitude = bits & ~(uint64_t(1) << (8 * width - 1)); // -0 is a zero too
    if (magnitude == 0)
      continue;
    ++nonzero;
    distinct.insert(bits);
  }
  if (nonzero < kFewest || distinct.size() * 2 > nonzero)
    return std::nullopt;
  return std::make_pair(nonzero, distinct.size());
}

void GraphImporter::findFoldedTables() {
  for (const ParamData &p : out.params) {
    if (frozenParams.contains(p.name) || mergedCopies.contains(p.name) || !isExporterName(p.name) ||
        !llvm::isa<FloatType>(p.type.getElementType()))
      continue;
    if (auto counts = repeatedValues(p.bytes, storageBytes(p.type.getElementType())))
      out.foldedTables.push_back({p.name, std::to_string(counts->first) + " nonzero values, " +
                                              std::to_string(counts->second) + " distinct"});
  }
}

void GraphImporter::findComputedConvParams() {
  llvm::StringSet<> computed;
  for (const auto &node : graph.node()) {
    const bool conv = node.op_type() == "Conv" || node.op_type() == "ConvTranspose";
    if (!conv && node.op_type() != "Gemm")
      continue;
    // onnxscript's BatchNorm fusion (the dynamo exporter's optimizer) keeps the weight's name and names the
    // bias it makes for a bias-less convolution or Gemm after it.
    if (node.input_size() > 2 && node.input(2) == node.input(1) + "_bias") {
      computed.insert(node.input(1));
      computed.insert(node.input(2));
    }
    // TorchScript's constant folding names what it computed after the node reading it.
    for (int i = 1; conv && i < node.input_size(); ++i)
      if (isExporterName(node.input(i)))
        computed.insert(node.input(i));
  }
  for (const ParamData &p : out.params)
    if (computed.contains(p.name) && !frozenParams.contains(p.name) && !mergedCopies.contains(p.name) &&
        llvm::isa<FloatType>(p.type.getElementType()))
      out.computedConvParams.push_back(p.name);
}

Error GraphImporter::define(const onnx::NodeProto &node, unsigned i, Value v) {
  if (static_cast<int>(i) >= node.output_size() || node.output(i).empty())
    return Error::success();
  if (auto err = crossCheck(node, i, typeOf(v)))
    return err;
  values[node.output(i)] = v;
  return Error::success();
}

Expected<RankedTensorType> GraphImporter::checkedType(const onnx::NodeProto &n, ArrayRef<int64_t> dims, Type elt) {
  if (!shape::elementCount(dims))
    return nodeInvalid(n, "result dims [" + shape::str(dims) + "] have a negative dim, one past 2^40 or an "
                              "overflowing element count");
  return RankedTensorType::get(dims, elt);
}

Expected<int64_t> GraphImporter::normalizeAxis(const onnx::NodeProto &n, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return nodeInvalid(n, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

const llvm::StringMap<GraphImporter::ImportFn> &GraphImporter::importers() {
  using G = GraphImporter;
  static const llvm::StringMap<ImportFn> table = {
      {"Add", &G::binary<AddOp>},
      {"Sub", &G::binary<SubOp>},
      {"Mul", &G::binary<MulOp>},
      {"Div", &G::binary<DivOp>},
      {"Pow", &G::binary<PowOp>},
      {"Max", &G::variadic<MaxOp>},
      {"Min", &G::variadic<MinOp>},
      {"Sum", &G::variadic<AddOp>},
      {"Mean", &G::mean},
      {"Mod", &G::mod},
      {"Clip", &G::clip},
      {"Equal", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "eq"); }},
      {"Less", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "lt"); }},
      {"LessOrEqual", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "le"); }},
      {"Greater", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "gt"); }},
      {"GreaterOrEqual", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "ge"); }},
      {"And", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "and"); }},
      {"Or", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "or"); }},
      {"Xor", [](G &g, const onnx::NodeProto &n) { return g.compare(n, "xor"); }},
      {"Not", &G::logicalNot},
      {"IsNaN", &G::isNaN},
      {"IsInf", &G::isInf},
      {"Exp", &G::unary<ExpOp>},
      {"Abs", &G::unary<AbsOp>},
      {"ConvTranspose", &G::convTranspose},
      {"Resize", &G::resize},
      {"InstanceNormalization", &G::instanceNorm},
      {"LSTM", &G::recurrent},
      {"GRU", &G::recurrent},
      {"RNN", &G::recurrent},
      {"Sign", &G::unary<SignOp>},
      {"LeakyRelu", &G::leakyRelu},
      {"HardSigmoid", &G::hardSigmoid},
      {"HardSwish", &G::hardSwish},
      {"Relu", &G::unary<ReluOp>},
      {"Tanh", &G::unary<TanhOp>},
      {"Sigmoid", &G::unary<SigmoidOp>},
      {"Erf", &G::unary<ErfOp>},
      {"Sqrt", &G::unary<SqrtOp>},
      {"Neg", &G::unary<NegOp>},
      {"Reciprocal", &G::unary<ReciprocalOp>},
      {"Log", &G::unary<LogOp>},
      {"Sin", &G::unary<SinOp>},
      {"Cos", &G::unary<CosOp>},
      {"Softplus", &G::unary<SoftplusOp>},
      {"Floor", &G::unary<FloorOp>},
      {"Ceil", &G::unary<CeilOp>},
      {"Round", &G::unary<RoundOp>},
      {"Tan", &G::unary<TanOp>},
      {"Asin", &G::unary<AsinOp>},
      {"Acos", &G::unary<AcosOp>},
      {"Atan", &G::unary<AtanOp>},
      {"Sinh", &G::unary<SinhOp>},
      {"Cosh", &G::unary<CoshOp>},
      {"Asinh", &G::unary<AsinhOp>},
      {"Acosh", &G::unary<AcoshOp>},
      {"Atanh", &G::unary<AtanhOp>},
      {"Softsign", &G::unary<SoftsignOp>},
      {"Gelu", &G::gelu},
      {"Softmax", &G::softmaxLike<SoftmaxOp>},
      {"LogSoftmax", &G::softmaxLike<LogSoftmaxOp>},
      {"LayerNormalization", &G::layerNorm},
      {"ReduceMean", &G::reduction<ReduceMeanOp>},
      {"ReduceSum", &G::reduction<ReduceSumOp>},
      {"ReduceMax", &G::reduction<ReduceMaxOp>},
      {"ReduceMin", &G::reduction<ReduceMinOp>},
      {"ReduceProd", &G::reduction<ReduceProdOp>},
      {"ReduceL1", &G::compositeReduction},
      {"ReduceL2", &G::compositeReduction},
      {"ReduceSumSquare", &G::compositeReduction},
      {"ReduceLogSum", &G::compositeReduction},
      {"ReduceLogSumExp", &G::compositeReduction},
      {"MatMul", &G::matmul},
      {"Gemm", &G::gemm},
      {"Transpose", &G::transpose},
      {"Reshape", &G::reshape},
      {"Flatten", &G::flatten},
      {"Squeeze", &G::squeeze},
      {"Unsqueeze", &G::unsqueeze},
      {"Concat", &G::concat},
      {"Split", &G::split},
      {"Slice", &G::slice},
      {"Gather", &G::gather},
      {"Cast", &G::cast},
      {"Identity", &G::identity},
      {"Dropout", &G::dropout},
      {"Constant", &G::constant},
      {"Where", &G::where},
      {"Expand", &G::expand},
      {"Shape", &G::shapeOf},
      {"Conv", &G::conv},
      {"MaxPool", &G::pool},
      {"AveragePool", &G::pool},
      {"GlobalAveragePool", &G::globalPool},
      {"GlobalMaxPool", &G::globalPool},
      {"BatchNormalization", &G::batchNorm},
      {"LRN", &G::lrn},
      {"GatherElements", &G::gatherElements},
      {"GatherND", &G::gatherND},
      {"ScatterND", &G::scatterND},
      {"Tile", &G::tile},
      {"ArgMax", &G::argReduce},
      {"ArgMin", &G::argReduce},
      {"CumSum", &G::cumSum},
      {"Einsum", &G::einsum},
      {"Pad", &G::pad},
      {"OneHot", &G::oneHot},
      {"NegativeLogLikelihoodLoss", &G::nllLoss},
      {"SoftmaxCrossEntropyLoss", &G::softmaxCrossEntropy},
      {"Size", &G::sizeOf},
      {"ConstantOfShape", &G::constantOfShape},
      {"Range", &G::range},
      {"CastLike", &G::castLike},
      {"Trilu", &G::trilu},
  };
  return table;
}

/// ONNX 1.12's schemas know opsets up to 17.
constexpr int64_t kLastSchemaOpset = 17;

Error GraphImporter::checkNodeSchema(const onnx::NodeProto &node) {
  llvm::StringSet<> seen;
  for (const auto &a : node.attribute())
    if (!seen.insert(a.name()).second)
      return nodeInvalid(node, "attribute '" + a.name() + "' appears more than once");
  for (const char *flag : {"transA", "transB", "allowzero", "keepdims", "noop_with_empty_axes"})
    if (const auto *a = findAttr(node, flag); a && a->type() == onnx::AttributeProto::INT && a->i() != 0 && a->i() != 1)
      return nodeInvalid(node, "attribute '" + llvm::Twine(flag) + "' must be 0 or 1, got " + llvm::Twine(a->i()));
  // Float attributes are factors and epsilons: a NaN or an infinity makes every output NaN silently. Only
  // bounds and fill values may be infinite (Clip's min and max, Pad's value); Constant holds any value.
  const bool boundsMayBeInfinite = node.op_type() == "Clip" || node.op_type() == "Pad";
  for (const auto &a : node.attribute()) {
    if (node.op_type() == "Constant" || (a.type() != onnx::AttributeProto::FLOAT && a.type() != onnx::AttributeProto::FLOATS))
      continue;
    std::vector<float> values(a.floats().begin(), a.floats().end());
    if (a.type() == onnx::AttributeProto::FLOAT)
      values = {a.f()};
    for (float v : values)
      if (std::isnan(v) || (std::isinf(v) && !boundsMayBeInfinite))
        return nodeInvalid(node, "attribute '" + a.name() + "' must be finite, got " + (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
  }
  const auto *schema = onnx::OpSchemaRegistry::Schema(node.op_type(), std::min(opset, kLastSchemaOpset), "");
  if (!schema)
    return Error::success(); // newer than ONNX 1.12 (Gelu): the operator's importer checks what it reads
  if (opset <= kLastSchemaOpset) {
    try {
      schema->Verify(node);
    } catch (const std::exception &e) {
      std::string what = e.what();
      return nodeInvalid(node, what.substr(0, what.find('\n')));
    }
    return Error::success();
  }
  // A newer opset may add inputs and attributes (those of opsets 18-21 for the operators tec imports are
  // listed here), never change the type of an attribute it keeps.
  static const llvm::StringSet<> addedAfter17 = {"num_outputs", "noop_with_empty_axes", "saturate", "antialias",
                                                 "keep_aspect_ratio_policy", "reduction", "block_size"};
  if (node.input_size() < schema->min_input())
    return nodeInvalid(node, "expected at least " + llvm::Twine(schema->min_input()) + " inputs, got " +
                                 llvm::Twine(node.input_size()));
  // Inputs opsets 18-21 added to operators ONNX 1.12 knows: Pad's and the reductions' axes.
  static const llvm::StringMap<int> inputsAddedAfter17 = {
      {"Pad", 1},          {"ReduceMean", 1},      {"ReduceMax", 1},       {"ReduceMin", 1},
      {"ReduceProd", 1},   {"ReduceL1", 1},        {"ReduceL2", 1},        {"ReduceLogSum", 1},
      {"ReduceLogSumExp", 1}, {"ReduceSumSquare", 1}};
  const int maxInputs = schema->max_input() + inputsAddedAfter17.lookup(node.op_type());
  if (schema->max_input() < std::numeric_limits<int>::max() && node.input_size() > maxInputs)
    return nodeInvalid(node, "expected at most " + llvm::Twine(maxInputs) + " inputs, got " +
                                 llvm::Twine(node.input_size()));
  // A required input left empty ("" is ONNX's spelling of an omitted optional one).
  const auto &formals = schema->inputs();
  for (int i = 0; i < node.input_size() && i < static_cast<int>(formals.size()); ++i)
    if (node.input(i).empty() && formals[i].GetOption() == onnx::OpSchema::Single)
      return nodeInvalid(node, "input " + llvm::Twine(i) + " ('" + formals[i].GetName() + "') is required, but its name is empty");
  if (node.output_size() > schema->max_output())
    return nodeInvalid(node, "expected at most " + llvm::Twine(schema->max_output()) + " outputs, got " +
                                 llvm::Twine(node.output_size()));
  for (const auto &a : node.attribute()) {
    auto known = schema->attributes().find(a.name());
    if (known == schema->attributes().end() && !addedAfter17.contains(a.name()))
      return nodeInvalid(node, "unknown attribute '" + a.name() + "'");
    if (known != schema->attributes().end() && a.type() != known->second.type)
      return nodeInvalid(node, "attribute '" + a.name() + "' must be " +
                                   onnx::AttributeProto::AttributeType_Name(known->second.type) + ", got " +
                                   onnx::AttributeProto::AttributeType_Name(a.type()));
  }
  return Error::success();
}

Error GraphImporter::importNode(const onnx::NodeProto &node) {
  for (const auto &a : node.attribute())
    if (a.has_g() || a.graphs_size())
      return nodeUnsupported(node, "subgraph attributes are not supported");
  return importers().lookup(node.op_type())(*this, node);
}

void GraphImporter::narrowDoubles() {
  constexpr int kDouble = onnx::TensorProto::DOUBLE, kFloat = onnx::TensorProto::FLOAT;
  auto narrow = [&](onnx::TensorProto &t) {
    if (t.data_type() != kDouble || t.data_location() == onnx::TensorProto::EXTERNAL)
      return;
    std::vector<float> values;
    if (t.has_raw_data()) {
      const std::string &raw = t.raw_data();
      for (size_t at = 0; at + 8 <= raw.size(); at += 8) {
        double v;
        std::memcpy(&v, raw.data() + at, 8);
        values.push_back(static_cast<float>(v));
      }
    } else {
      for (double v : t.double_data())
        values.push_back(static_cast<float>(v));
    }
    t.clear_raw_data();
    t.clear_double_data();
    t.set_data_type(kFloat);
    t.set_raw_data(values.data(), values.size() * sizeof(float));
    ++out.narrowedDoubles;
  };
  auto *g = storage.model.mutable_graph();
  auto isDouble = [&](const onnx::ValueInfoProto &vi) { return vi.type().tensor_type().elem_type() == kDouble; };
  if (llvm::any_of(g->input(), isDouble) || llvm::any_of(g->output(), isDouble))
    return; // refused where the inputs and outputs are read, as unsupported
  for (auto &init : *g->mutable_initializer())
    narrow(init);
  for (auto &node : *g->mutable_node())
    for (auto &a : *node.mutable_attribute()) {
      if (a.has_t())
        narrow(*a.mutable_t());
      if (node.op_type() == "Cast" && a.name() == "to" && a.i() == kDouble) {
        a.set_i(kFloat);
        ++out.narrowedDoubles;
      }
    }
  for (auto &vi : *g->mutable_value_info())
    if (vi.type().tensor_type().elem_type() == kDouble)
      vi.mutable_type()->mutable_tensor_type()->set_elem_type(kFloat);
}

Error GraphImporter::run() {
  if (auto err = checkOpsetAndOps())
    return err;
  narrowDoubles();
  if (graph.output_size() == 0)
    return invalid("the graph has no outputs");
  llvm::StringSet<> inputNames;
  for (const auto &vi : graph.input())
    if (!inputNames.insert(vi.name()).second)
      return invalid("graph input '" + vi.name() + "' is listed twice");
  const auto origins = torchOrigins(graph);
  const bool signedByTorch = llvm::any_of(origins, [](const auto &o) { return !o.getValue().kind.empty(); });
  const bool fromPyTorch = storage.model.producer_name() == "pytorch";
  std::optional<llvm::Regex> trainable;
  if (!options.trainable.empty() && llvm::Regex(options.trainable).isValid())
    trainable.emplace(options.trainable); // an invalid one is the training pipeline's to report
  for (const auto &init : graph.initializer()) {
    if (init.name().empty())
      return invalid("an initializer has no name");
    if (initializers.contains(init.name()))
      return invalid("initializer '" + init.name() + "' is defined twice");
    if (auto err = checkTensorProto(init, "initializer '" + init.name() + "'"))
      return err;
    initializers[init.name()] = &init;
    auto role = initializerRole(init, elementTypeFor(ctx, init.data_type()), origins, signedByTorch, fromPyTorch,
                                trainable);
    if (role.constant)
      constants[init.name()] = &init;
    if (role.scalarConstant)
      scalarConstants.insert(init.name());
    else if (role.frozen)
      frozenParams[init.name()] = *role.frozen;
    if (role.foldedOp)
      out.foldedOps.push_back({init.name(), *role.foldedOp});
  }
  findTransposedCopies();
  findMergedCopies(fromPyTorch);
  // A --shape name that is no graph input binds a symbolic dim (dim_param) of that name.
  llvm::StringSet<> symbolicDims;
  for (const auto &vi : graph.input())
    for (const auto &d : vi.type().tensor_type().shape().dim())
      if (d.has_dim_param())
        symbolicDims.insert(d.dim_param());
  for (const auto &[name, dims] : options.shapes) {
    if (llvm::any_of(graph.input(), [&](const auto &vi) { return vi.name() == name; }))
      continue;
    if (!symbolicDims.contains(name))
      return invalid("--shape names '" + name.str() + "', which is neither a graph input nor a symbolic dim" +
                     (symbolicDims.empty() ? std::string() : " (symbolic dims: " + joinSorted(symbolicDims) + ")"));
    if (dims.size() != 1)
      return invalid("--shape " + name.str() + "=" + shape::str(dims) + ": a symbolic dim takes one size");
    dimParams[name] = dims[0];
  }
  for (const auto &[name, serialized] : options.frozenInputs)
    if (auto err = freezeInput(name, serialized))
      return err;
  std::vector<int> order;
  if (auto err = checkDefinitionsAndOrder(order))
    return err;
  // ONNX requires topological order and its shape inference walks the file's order: sort the nodes
  // (moving pointers only, so messages keep naming nodes by their original position).
  auto *nodes = storage.model.mutable_graph()->mutable_node();
  std::vector<onnx::NodeProto *> sorted;
  for (int i : order)
    sorted.push_back(nodes->Mutable(i));
  std::copy(sorted.begin(), sorted.end(), nodes->pointer_begin());
  for (const auto &node : graph.node()) {
    if (auto err = checkNodeSchema(node))
      return err;
    if (auto err = checkWindowAttributes(node))
      return err;
  }
  if (auto err = runOnnxShapeInference())
    return err;

  auto module = ModuleOp::create(FileLineColLoc::get(&ctx, path, 0, 0));
  out.module = module;
  builder.setInsertionPointToEnd(module.getBody());
  auto func = builder.create<func::FuncOp>(FileLineColLoc::get(&ctx, path, 0, 0), "forward",
                                           builder.getFunctionType({}, {}));
  body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);

  for (const auto &vi : graph.input()) {
    if (initializers.contains(vi.name()) || constants.contains(vi.name()))
      continue; // IR version < 4 lists initializers as inputs too; frozen inputs are constants.
    auto type = inputType(vi);
    if (!type)
      return type.takeError();
    values[vi.name()] = body->addArgument(*type, NameLoc::get(builder.getStringAttr(vi.name())));
    out.inputNames.push_back(vi.name());
  }
  // Every node tec cannot import (an operator's form or element type it lacks) is reported at once, as
  // unsupported operators are: nodes that read what one of them would have made are skipped, not reported.
  std::vector<std::string> unsupportedNodes;
  ImportError::Operators unsupportedOperators;
  llvm::StringSet<> skipped;
  for (const auto &node : graph.node()) {
    if (llvm::any_of(node.input(), [&](const std::string &in) { return skipped.contains(in); })) {
      skipped.insert(node.output().begin(), node.output().end());
      continue;
    }
    if (node.op_type() == "Identity" && node.output_size() == 1 && mergedCopies.contains(node.output(0))) {
      if (auto copy = param(node.output(0)); !copy)
        return copy.takeError();
      continue;
    }
    std::string message;
    Error err = llvm::handleErrors(importNode(node), [&](std::unique_ptr<ImportError> e) -> Error {
      if (e->getKind() != ImportErrorKind::Unsupported)
        return Error(std::move(e));
      message = e->getMessage();
      return Error::success();
    });
    if (err)
      return err;
    if (message.empty())
      continue;
    const std::string prefix = escapeControl(path + ": ");
    unsupportedNodes.push_back(llvm::StringRef(message).starts_with(prefix) ? message.substr(prefix.size()) : message);
    const size_t index = nodeIndex.lookup(&node);
    unsupportedOperators.emplace_back(escapeControl(node.name().empty() ? "#" + std::to_string(index) : node.name()),
                                      escapeControl(node.op_type()));
    skipped.insert(node.output().begin(), node.output().end());
  }
  if (!unsupportedNodes.empty())
    return llvm::make_error<ImportError>(
        ImportErrorKind::Unsupported,
        escapeControl(path + ": " +
                      (unsupportedNodes.size() == 1 ? unsupportedNodes.front()
                                                    : std::to_string(unsupportedNodes.size()) +
                                                          " nodes tec cannot import:\n  " +
                                                          llvm::join(unsupportedNodes, "\n  "))),
        std::move(unsupportedOperators));

  llvm::SmallVector<Value> results;
  for (const auto &o : graph.output()) {
    onnx::NodeProto outputUse;
    outputUse.set_op_type("graph output");
    outputUse.add_input(o.name());
    auto v = value(outputUse, 0);
    if (!v)
      return v.takeError();
    const auto &declared = o.type().tensor_type();
    auto type = typeOf(*v);
    if (declared.elem_type() && elementTypeFor(ctx, declared.elem_type()) != type.getElementType())
      return invalid("graph output '" + o.name() + "' is declared " + onnxTypeName(declared.elem_type()) +
                     " but computed as another element type");
    if (declared.has_shape()) {
      bool mismatch = declared.shape().dim_size() != type.getRank();
      for (int d = 0; !mismatch && d < declared.shape().dim_size(); ++d)
        mismatch = declared.shape().dim(d).has_dim_value() && declared.shape().dim(d).dim_value() != type.getDimSize(d);
      if (mismatch)
        return invalid("graph output '" + o.name() + "' is declared with another shape than the computed " +
                       shape::str(type.getShape()));
    }
    results.push_back(*v);
    out.outputNames.push_back(o.name());
  }
  const size_t firstRunningStat = results.size();
  for (auto [arg, next] : runningStats)
    results.push_back(next);
  builder.create<func::ReturnOp>(FileLineColLoc::get(&ctx, path, 0, 0), results);
  func.setFunctionType(builder.getFunctionType(body->getArgumentTypes(), TypeRange(ValueRange(results))));
  for (auto [i, update] : llvm::enumerate(runningStats))
    func.setResultAttr(firstRunningStat + i, kRunningStatAttrName,
                       builder.getI64IntegerAttr(update.first.getArgNumber()));
  if (signedByTorch) // TorchScript's merges go through Identity (findMergedCopies): a direct share is intended
    findMergedParams();
  else if (storage.model.producer_name() == "pytorch")
    findFoldedTables();
  if (storage.model.producer_name() == "pytorch")
    findComputedConvParams();
  size_t firstParam = out.inputNames.size();
  for (auto [i, p] : llvm::enumerate(out.params)) {
    func.setArgAttr(firstParam + i, kParamAttrName, builder.getStringAttr(p.name));
    if (auto why = frozenParams.find(p.name); why != frozenParams.end())
      func.setArgAttr(firstParam + i, kFrozenAttrName, builder.getStringAttr(why->second));
  }

  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      diagnostics += "\n  " + d.str();
      return success();
    });
    if (failed(verify(module)))
      return invalid("the imported IR does not verify:" + diagnostics);
  }
  return Error::success();
}

} // namespace tec::importer

char tec::ImportError::ID = 0;

namespace tec {

using namespace mlir;
using llvm::Expected;
using importer::GraphImporter;
using importer::makeError;
using importer::Storage;

std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &e : GraphImporter::importers())
    ops.push_back(e.getKey().str());
  llvm::sort(ops);
  return ops;
}

Expected<ImportedModel> importOnnxFile(MLIRContext &context, llvm::StringRef path, const ImportOptions &options) {
  context.loadDialect<TecDialect, func::FuncDialect>();
  // Only a regular file: a FIFO or a device would block or never end.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) && !llvm::sys::fs::is_regular_file(status))
    return makeError(ImportErrorKind::Invalid, path + ": not a regular file");
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!file)
    return makeError(ImportErrorKind::Invalid, path + ": cannot read: " + file.getError().message());
  auto storage = std::make_shared<Storage>();
  llvm::StringRef bytes = (*file)->getBuffer();
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return makeError(ImportErrorKind::Unsupported,
                     path + ": larger than 2 GiB; store the weights as external data (onnx.save(..., save_as_external_data=True))");
  if (!storage->model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return makeError(ImportErrorKind::Invalid,
                     path + ": not a valid ONNX model (the protobuf does not parse; is the file truncated?)");
  if (!storage->model.has_graph() || storage->model.ir_version() <= 0)
    return makeError(ImportErrorKind::Invalid, path + ": not an ONNX model (no graph or IR version)");
  ImportedModel result;
  result.producer = storage->model.producer_name();
  GraphImporter importer(context, path, *storage, options, result);
  if (auto err = importer.run())
    return std::move(err);
  onnx::ModelProto skeleton = storage->model;
  llvm::StringSet<> paramNames;
  for (const auto &p : result.params)
    paramNames.insert(p.name);
  for (auto &init : *skeleton.mutable_graph()->mutable_initializer())
    if (paramNames.contains(init.name()) || result.transposedCopies.count(init.name())) {
      init.clear_raw_data();
      init.clear_float_data();
      init.clear_external_data();
      init.clear_data_location();
    }
  if (!result.mergedCopies.empty()) {
    auto *graph = skeleton.mutable_graph();
    std::map<std::string, const onnx::TensorProto *> sources;
    for (const auto &init : graph->initializer())
      sources[init.name()] = &init;
    std::vector<onnx::TensorProto> copies;
    for (const auto &[copy, source] : result.mergedCopies) {
      onnx::TensorProto t = *sources.at(source);
      t.set_name(copy);
      t.clear_raw_data();
      t.clear_float_data();
      t.clear_external_data();
      t.clear_data_location();
      copies.push_back(std::move(t));
    }
    auto *nodes = graph->mutable_node();
    nodes->erase(std::remove_if(nodes->begin(), nodes->end(),
                                [&](const onnx::NodeProto &n) {
                                  return n.op_type() == "Identity" && n.output_size() == 1 &&
                                         result.mergedCopies.count(n.output(0));
                                }),
                 nodes->end());
    // A merged-into initializer that no node reads any more (its own param read it through an Identity too).
    llvm::StringSet<> read, merged;
    for (const auto &n : graph->node())
      for (const auto &in : n.input())
        read.insert(in);
    for (const auto &o : graph->output())
      read.insert(o.name());
    for (const auto &[copy, source] : result.mergedCopies)
      merged.insert(source);
    auto *inits = graph->mutable_initializer();
    inits->erase(std::remove_if(inits->begin(), inits->end(),
                                [&](const onnx::TensorProto &t) {
                                  return merged.contains(t.name()) && !read.contains(t.name());
                                }),
                 inits->end());
    for (auto &t : copies)
      *graph->add_initializer() = std::move(t);
  }
  skeleton.mutable_graph()->clear_value_info(); // shape inference's additions
  result.onnxWithoutParams = skeleton.SerializeAsString();
  result.storage = std::move(storage);
  return std::move(result);
}

} // namespace tec
