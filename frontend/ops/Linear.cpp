// MatMul, Gemm and Einsum.
#include "frontend/GraphImporter.h"

namespace tec::importer {

Error GraphImporter::matmul(const onnx::NodeProto &n) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  if (!isFloat(typeOf(a).getElementType()) || typeOf(a).getElementType() != typeOf(b).getElementType())
    return nodeUnsupported(n, "operands must share a float element type (f32, f16, bf16)");
  auto dims = shape::matmul(typeOf(a).getShape(), typeOf(b).getShape());
  if (!dims)
    return nodeInvalid(n, "operand shapes " + shape::str(typeOf(a).getShape()) + " and " +
                              shape::str(typeOf(b).getShape()) + " are incompatible for MatMul");
  TRY_ASSIGN(type, checkedType(n, *dims, typeOf(a).getElementType()));
  return define(n, 0, create<MatMulOp>(n, type, a, b));
}

Error GraphImporter::gemm(const onnx::NodeProto &n) {
  TRY_ASSIGN(a, value(n, 0));
  TRY_ASSIGN(b, value(n, 1));
  Value c;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(cv, value(n, 2));
    c = cv;
  }
  Type elt = typeOf(a).getElementType();
  if (!isFloat(elt) || elt != typeOf(b).getElementType() || (c && typeOf(c).getElementType() != elt))
    return nodeUnsupported(n, "operands must share a float element type (f32, f16, bf16)");
  if (typeOf(a).getRank() != 2 || typeOf(b).getRank() != 2)
    return nodeInvalid(n, "A and B must be 2-D, got " + shape::str(typeOf(a).getShape()) + " and " +
                              shape::str(typeOf(b).getShape()));
  bool transA = intAttr(n, "transA", 0), transB = intAttr(n, "transB", 0);
  int64_t m = typeOf(a).getDimSize(transA), ka = typeOf(a).getDimSize(!transA);
  int64_t kb = typeOf(b).getDimSize(transB), nn = typeOf(b).getDimSize(!transB);
  if (ka != kb)
    return nodeInvalid(n, "inner dims differ: " + llvm::Twine(ka) + " and " + llvm::Twine(kb));
  if (c) {
    auto bc = shape::broadcast(typeOf(c).getShape(), {m, nn});
    if (!bc || ArrayRef<int64_t>(*bc) != ArrayRef<int64_t>{m, nn})
      return nodeInvalid(n, "C of shape " + shape::str(typeOf(c).getShape()) + " does not broadcast to " +
                                llvm::Twine(m) + "x" + llvm::Twine(nn));
  }
  auto type = RankedTensorType::get({m, nn}, elt);
  return define(n, 0,
                create<GemmOp>(n, type, a, b, c, builder.getF32FloatAttr(floatAttr(n, "alpha", 1.0f)),
                               builder.getF32FloatAttr(floatAttr(n, "beta", 1.0f)), builder.getBoolAttr(transA),
                               builder.getBoolAttr(transB)));
}

GraphImporter::Labeled GraphImporter::permuted(const onnx::NodeProto &n, const Labeled &x, ArrayRef<int> order) {
  if (ArrayRef<int>(x.labels) == order)
    return x;
  auto t = typeOf(x.value);
  llvm::SmallVector<int64_t> perm;
  shape::Dims dims;
  for (int label : order) {
    perm.push_back(llvm::find(x.labels, label) - x.labels.begin());
    dims.push_back(t.getDimSize(perm.back()));
  }
  return {create<TransposeOp>(n, RankedTensorType::get(dims, t.getElementType()), x.value, perm),
          std::vector<int>(order.begin(), order.end())};
}

GraphImporter::Labeled GraphImporter::summedOut(const onnx::NodeProto &n, const Labeled &x,
                                                llvm::function_ref<bool(int)> keep) {
  ReduceSpec spec;
  spec.keepdims = false;
  Labeled r{x.value, {}};
  for (auto [d, label] : llvm::enumerate(x.labels))
    if (keep(label))
      r.labels.push_back(label);
    else
      spec.axes.push_back(d);
  if (!spec.axes.empty())
    r.value = reduceWith<ReduceSumOp>(n, x.value, spec);
  return r;
}

GraphImporter::Labeled GraphImporter::contract(const onnx::NodeProto &n, Labeled a, Labeled b,
                                               llvm::function_ref<bool(int)> keep) {
  auto in = [](const Labeled &x, int label) { return llvm::is_contained(x.labels, label); };
  // A label only one side has and nothing later needs is summed there first.
  a = summedOut(n, a, [&](int l) { return keep(l) || in(b, l); });
  b = summedOut(n, b, [&](int l) { return keep(l) || in(a, l); });
  std::vector<int> batch, left, right, summed;
  for (int l : a.labels)
    (in(b, l) ? (keep(l) ? batch : summed) : left).push_back(l);
  for (int l : b.labels)
    if (!in(a, l))
      right.push_back(l);
  auto dimsOf = [&](ArrayRef<int> labels) {
    shape::Dims dims;
    for (int l : labels) {
      const Labeled &x = in(a, l) ? a : b;
      dims.push_back(typeOf(x.value).getDimSize(llvm::find(x.labels, l) - x.labels.begin()));
    }
    return dims;
  };
  auto sizeOf = [&](ArrayRef<int> labels) { return *shape::elementCount(dimsOf(labels)); };
  Type elt = typeOf(a.value).getElementType();
  const int64_t batchSize = sizeOf(batch), rows = sizeOf(left), cols = sizeOf(right);
  auto matrix = [&](const Labeled &x, ArrayRef<int> rows, ArrayRef<int> columns) {
    std::vector<int> order(batch);
    llvm::append_range(order, rows);
    llvm::append_range(order, columns);
    shape::Dims dims;
    if (!batch.empty())
      dims.push_back(batchSize);
    dims.append({sizeOf(rows), sizeOf(columns)});
    return create<ReshapeOp>(n, RankedTensorType::get(dims, elt), permuted(n, x, order).value);
  };
  shape::Dims productDims;
  if (!batch.empty())
    productDims.push_back(batchSize);
  productDims.append({rows, cols});
  Value product = create<MatMulOp>(n, RankedTensorType::get(productDims, elt), matrix(a, left, summed),
                                   matrix(b, summed, right));
  Labeled r{Value(), batch};
  llvm::append_range(r.labels, left);
  llvm::append_range(r.labels, right);
  r.value = create<ReshapeOp>(n, RankedTensorType::get(dimsOf(r.labels), elt), product);
  return r;
}

/// Einsum without diagonals: each operand's labels only it has and the output lacks are summed, then the
/// operands are contracted left to right as batched matmuls (batch, free and summed labels grouped by
/// transposes and reshapes) and the result permuted to the output's order. It trains through those ops.
Error GraphImporter::einsum(const onnx::NodeProto &n) {
  std::string equation;
  for (char c : findAttr(n, "equation") ? findAttr(n, "equation")->s() : std::string())
    if (c != ' ')
      equation.push_back(c);
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  llvm::SmallVector<StringRef> terms;
  StringRef(lhs).split(terms, ',');
  if (static_cast<int>(terms.size()) != n.input_size())
    return nodeInvalid(n, "equation '" + equation + "' names " + llvm::Twine(terms.size()) + " operands, the node has " +
                              llvm::Twine(n.input_size()));
  constexpr int kEllipsis = 256; // ellipsis dims are labels 256, 257, ... counted from the right
  auto labelName = [&](int l) {
    return l >= kEllipsis ? "...(" + std::to_string(l - kEllipsis) + " from the right)" : std::string(1, char(l));
  };
  auto parse = [&](StringRef term, int64_t rank) -> Expected<std::vector<int>> {
    std::vector<int> labels;
    const size_t dots = term.find("...");
    const int64_t letters = static_cast<int64_t>(term.size()) - (dots == StringRef::npos ? 0 : 3);
    if (dots == StringRef::npos ? letters != rank : letters > rank)
      return nodeInvalid(n, "term '" + term + "' does not fit an operand of rank " + llvm::Twine(rank));
    for (size_t i = 0; i < term.size(); ++i) {
      if (i == dots) {
        for (int64_t e = rank - letters - 1; e >= 0; --e)
          labels.push_back(kEllipsis + e);
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
        labels.push_back(term[i]);
      } else {
        return nodeInvalid(n, "unexpected '" + llvm::Twine(term[i]) + "' in equation '" + equation + "'");
      }
    }
    return labels;
  };
  std::vector<Labeled> operands;
  std::map<int, int64_t> sizes, uses;
  int ellipsisDims = 0;
  for (auto [i, term] : llvm::enumerate(terms)) {
    TRY_ASSIGN(x, value(n, i));
    auto t = typeOf(x);
    if (!isFloat(t.getElementType()))
      return nodeUnsupported(n, "element type is not supported");
    TRY_ASSIGN(labels, parse(term, t.getRank()));
    for (auto [d, l] : llvm::enumerate(labels)) {
      if (llvm::count(labels, l) > 1)
        return nodeUnsupported(n, "a label repeated within one operand (a diagonal) is not supported");
      auto [it, fresh] = sizes.insert({l, t.getDimSize(d)});
      // Ellipsis dims broadcast as numpy's do (1 against n); a letter names one size.
      const bool broadcasts = l >= kEllipsis && (it->second == 1 || t.getDimSize(d) == 1);
      if (!fresh && it->second != t.getDimSize(d) && !broadcasts)
        return nodeInvalid(n, "label '" + labelName(l) + "' has sizes " + llvm::Twine(it->second) + " and " +
                                  llvm::Twine(t.getDimSize(d)));
      it->second = std::max(it->second, t.getDimSize(d));
      ++uses[l];
      if (l >= kEllipsis)
        ellipsisDims = std::max(ellipsisDims, l - kEllipsis + 1);
    }
    operands.push_back({x, labels});
  }
  for (Labeled &x : operands) { // size-1 ellipsis dims expanded to the size the others have
    auto t = typeOf(x.value);
    shape::Dims dims(t.getShape());
    for (auto [d, l] : llvm::enumerate(x.labels))
      dims[d] = sizes[l];
    if (ArrayRef<int64_t>(dims) != t.getShape())
      x.value = create<ExpandOp>(n, RankedTensorType::get(dims, t.getElementType()), x.value);
  }
  std::vector<int> output;
  if (arrow == std::string::npos) { // implicit: the ellipsis, then the letters used once, alphabetically
    for (int e = ellipsisDims - 1; e >= 0; --e)
      output.push_back(kEllipsis + e);
    for (auto [l, count] : uses)
      if (l < kEllipsis && count == 1)
        output.push_back(l);
  } else {
    StringRef term = StringRef(equation).drop_front(arrow + 2);
    const bool dots = term.contains("...");
    if (ellipsisDims > 0 && !dots)
      return nodeInvalid(n, "the operands have an ellipsis that the output '" + term + "' lacks");
    TRY_ASSIGN(labels, parse(term, static_cast<int64_t>(term.size()) - (dots ? 3 - ellipsisDims : 0)));
    for (int l : labels)
      if (!sizes.count(l) || llvm::count(labels, l) > 1)
        return nodeInvalid(n, "output label '" + labelName(l) + "' " +
                                  (sizes.count(l) ? "appears twice" : "names no operand dim"));
    output = labels;
  }
  auto inOutput = [&](int l) { return llvm::is_contained(output, l); };
  Labeled acc = operands[0];
  for (size_t i = 1; i < operands.size(); ++i) {
    auto neededLater = [&](int l) {
      return inOutput(l) || llvm::any_of(ArrayRef(operands).drop_front(i + 1),
                                         [&](const Labeled &x) { return llvm::is_contained(x.labels, l); });
    };
    acc = contract(n, acc, operands[i], neededLater);
  }
  acc = summedOut(n, acc, inOutput);
  return define(n, 0, permuted(n, acc, output).value);
}

} // namespace tec::importer
