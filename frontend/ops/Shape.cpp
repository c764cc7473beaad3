// Shape and data movement: transposes, reshapes, concat/split/slice, gathers and scatters, tile, pad,
// one-hot, shapes, constants of a shape, ranges, Trilu.
#include "frontend/GraphImporter.h"

namespace tec::importer {

Error GraphImporter::transpose(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  llvm::SmallVector<int64_t> perm;
  if (const auto *a = findAttr(n, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  else
    for (int64_t i = in.getRank() - 1; i >= 0; --i)
      perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return nodeInvalid(n, "perm has " + llvm::Twine(perm.size()) + " entries for rank " + llvm::Twine(in.getRank()));
  shape::Dims dims;
  llvm::SmallVector<bool> seen(perm.size());
  for (int64_t &p : perm) {
    if (p < 0)
      p += in.getRank();
    if (p < 0 || p >= in.getRank() || seen[p])
      return nodeInvalid(n, "perm is not a permutation");
    seen[p] = true;
    dims.push_back(in.getDimSize(p));
  }
  return define(n, 0, create<TransposeOp>(n, RankedTensorType::get(dims, in.getElementType()), x, perm));
}

Error GraphImporter::reshapeTo(const onnx::NodeProto &n, Value input, ArrayRef<int64_t> dims) {
  TRY_ASSIGN(type, checkedType(n, dims, typeOf(input).getElementType()));
  if (type.getNumElements() != typeOf(input).getNumElements())
    return nodeInvalid(n, "cannot reshape " + shape::str(typeOf(input).getShape()) + " (" +
                              llvm::Twine(typeOf(input).getNumElements()) + " elements) to " + shape::str(dims));
  return define(n, 0, create<ReshapeOp>(n, type, input));
}

Error GraphImporter::reshape(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(target, constInts(n, 1));
  if (const auto *t = constants.lookup(n.input(1)); t && t->dims_size() != 1)
    return nodeInvalid(n, "the shape input must be 1-D, got rank " + llvm::Twine(t->dims_size()));
  auto in = typeOf(x);
  bool allowZero = intAttr(n, "allowzero", 0);
  shape::Dims dims;
  int inferred = -1;
  int64_t known = 1;
  for (auto [i, d] : llvm::enumerate(target)) {
    if (d == 0 && !allowZero) {
      if (static_cast<int64_t>(i) >= in.getRank())
        return nodeInvalid(n, "shape entry " + llvm::Twine(i) + " is 0 (copy) but the input has rank " +
                                  llvm::Twine(in.getRank()));
      d = in.getDimSize(i);
    }
    if (d == -1) {
      if (inferred >= 0)
        return nodeInvalid(n, "shape has more than one -1");
      inferred = i;
    } else if (d < 0) {
      return nodeInvalid(n, "shape entry " + llvm::Twine(i) + " is " + llvm::Twine(d));
    } else if (llvm::MulOverflow(known, d, known)) {
      return nodeInvalid(n, "shape's element count overflows int64");
    }
    dims.push_back(d);
  }
  if (inferred >= 0) {
    if (known == 0 || in.getNumElements() % known)
      return nodeInvalid(n, "cannot infer the -1 dim: " + llvm::Twine(in.getNumElements()) +
                                " elements do not divide by " + llvm::Twine(known));
    dims[inferred] = in.getNumElements() / known;
  }
  return reshapeTo(n, x, dims);
}

Error GraphImporter::flatten(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  int64_t axis = intAttr(n, "axis", 1);
  if (axis < -in.getRank() || axis > in.getRank())
    return nodeInvalid(n, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(in.getRank()));
  if (axis < 0)
    axis += in.getRank();
  int64_t outer = *shape::elementCount(in.getShape().take_front(axis));
  return reshapeTo(n, x, {outer, outer ? in.getNumElements() / outer : 0});
}

Expected<std::vector<int64_t>> GraphImporter::axesInputOrAttr(const onnx::NodeProto &n) {
  if (opset >= 13)
    return hasInput(n, 1) ? constInts(n, 1) : std::vector<int64_t>{};
  const auto *a = findAttr(n, "axes");
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}

Error GraphImporter::squeeze(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  TRY_ASSIGN(axes, axesInputOrAttr(n));
  for (auto &a : axes) {
    TRY_ASSIGN(norm, normalizeAxis(n, a, in.getRank()));
    a = norm;
    if (in.getDimSize(a) != 1)
      return nodeInvalid(n, "cannot squeeze dim " + llvm::Twine(a) + " of size " + llvm::Twine(in.getDimSize(a)));
  }
  shape::Dims dims;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    bool drop = axes.empty() ? in.getDimSize(i) == 1 : llvm::is_contained(axes, i);
    if (!drop)
      dims.push_back(in.getDimSize(i));
  }
  return reshapeTo(n, x, dims);
}

Error GraphImporter::unsqueeze(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(axes, axesInputOrAttr(n));
  auto in = typeOf(x);
  int64_t rank = in.getRank() + axes.size();
  for (auto &a : axes) {
    TRY_ASSIGN(norm, normalizeAxis(n, a, rank));
    a = norm;
  }
  llvm::sort(axes);
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return nodeInvalid(n, "axes repeat a dimension");
  shape::Dims dims;
  for (int64_t i = 0, src = 0; i < rank; ++i)
    dims.push_back(llvm::is_contained(axes, i) ? 1 : in.getDimSize(src++));
  return reshapeTo(n, x, dims);
}

Error GraphImporter::concat(const onnx::NodeProto &n) {
  if (!findAttr(n, "axis"))
    return nodeInvalid(n, "missing required attribute 'axis'");
  llvm::SmallVector<Value> inputs;
  for (int i = 0; i < n.input_size(); ++i) {
    TRY_ASSIGN(v, value(n, i));
    inputs.push_back(v);
  }
  if (inputs.empty())
    return nodeInvalid(n, "needs at least one input");
  auto first = typeOf(inputs[0]);
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), first.getRank()));
  shape::Dims dims(first.getShape());
  dims[axis] = 0;
  for (Value v : inputs) {
    auto t = typeOf(v);
    if (t.getElementType() != first.getElementType() || t.getRank() != first.getRank())
      return nodeInvalid(n, "inputs differ in element type or rank");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && t.getDimSize(d) != first.getDimSize(d))
        return nodeInvalid(n, "inputs " + shape::str(first.getShape()) + " and " + shape::str(t.getShape()) +
                                  " differ off the concat axis");
    dims[axis] += t.getDimSize(axis);
  }
  return define(n, 0, create<ConcatOp>(n, RankedTensorType::get(dims, first.getElementType()), inputs, axis));
}

Error GraphImporter::split(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto in = typeOf(x);
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), in.getRank()));
  int64_t dim = in.getDimSize(axis), parts = n.output_size();
  std::vector<int64_t> sizes;
  if (hasInput(n, 1)) {
    TRY_ASSIGN(s, constInts(n, 1));
    sizes = s;
  } else if (const auto *a = findAttr(n, "split")) {
    sizes.assign(a->ints().begin(), a->ints().end());
  } else {
    // Opset 18's num_outputs: ceil-sized chunks, the last one smaller; before, equal parts.
    int64_t num = intAttr(n, "num_outputs", parts);
    if (num != parts || num <= 0)
      return nodeInvalid(n, "num_outputs " + llvm::Twine(num) + " differs from the " + llvm::Twine(parts) + " outputs");
    int64_t chunk = opset >= 18 ? (dim + num - 1) / num : dim / num;
    if (opset < 18 && dim % num)
      return nodeInvalid(n, "dim " + llvm::Twine(dim) + " does not split into " + llvm::Twine(num) + " equal parts");
    for (int64_t i = 0; i < num; ++i)
      sizes.push_back(std::min(chunk, dim - i * chunk));
  }
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (static_cast<int64_t>(sizes.size()) != parts || total != dim || llvm::any_of(sizes, [](int64_t s) { return s < 0; }))
    return nodeInvalid(n, "split sizes do not add up to dim " + llvm::Twine(dim) + " over " + llvm::Twine(parts) + " outputs");
  llvm::SmallVector<Type> types;
  for (int64_t s : sizes) {
    shape::Dims dims(in.getShape());
    dims[axis] = s;
    types.push_back(RankedTensorType::get(dims, in.getElementType()));
  }
  auto op = builder.create<SplitOp>(loc(n), types, x, axis);
  for (auto [i, r] : llvm::enumerate(op.getResults()))
    if (auto err = define(n, i, r))
      return err;
  return Error::success();
}

Error GraphImporter::slice(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  // Before opset 10, starts, ends and axes are attributes and there are no steps.
  auto ints = [&](int i, const char *attr) -> Expected<std::vector<int64_t>> {
    if (opset >= 10)
      return constInts(n, i);
    const auto *a = findAttr(n, attr);
    if (!a)
      return nodeInvalid(n, "missing required attribute '" + llvm::Twine(attr) + "'");
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  };
  TRY_ASSIGN(starts, ints(1, "starts"));
  TRY_ASSIGN(ends, ints(2, "ends"));
  auto in = typeOf(x);
  int64_t rank = in.getRank();
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (opset < 10 && findAttr(n, "axes")) {
    TRY_ASSIGN(a, ints(3, "axes"));
    axes = a;
  } else if (opset >= 10 && hasInput(n, 3)) {
    TRY_ASSIGN(a, constInts(n, 3));
    axes = a;
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  }
  if (opset >= 10 && hasInput(n, 4)) {
    TRY_ASSIGN(s, constInts(n, 4));
    steps = s;
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return nodeInvalid(n, "starts, ends, axes and steps differ in length");
  llvm::SmallVector<int64_t> s(rank, 0), e(in.getShape()), st(rank, 1);
  llvm::SmallVector<bool> seen(rank);
  for (size_t i = 0; i < axes.size(); ++i) {
    TRY_ASSIGN(axis, normalizeAxis(n, axes[i], rank));
    if (seen[axis])
      return nodeInvalid(n, "axes repeat dim " + llvm::Twine(axis));
    seen[axis] = true;
    int64_t dim = in.getDimSize(axis), step = steps[i];
    if (step == 0)
      return nodeInvalid(n, "step is 0 on axis " + llvm::Twine(axis));
    // ONNX's rules: negative indices count from the end, then clamp ([0, dim] forward, [-1, dim-1] backward).
    auto clampIndex = [&](int64_t v) {
      if (v < 0)
        v = v < std::numeric_limits<int64_t>::min() + dim ? -1 : v + dim;
      return step > 0 ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1);
    };
    s[axis] = clampIndex(starts[i]);
    e[axis] = clampIndex(ends[i]);
    if (step > 0)
      s[axis] = std::min(s[axis], dim);
    else
      s[axis] = std::max<int64_t>(std::min(s[axis], dim - 1), dim ? 0 : -1);
    st[axis] = step;
  }
  shape::Dims dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.push_back(shape::sliceLength(s[d], e[d], st[d]));
  return define(n, 0, create<SliceOp>(n, RankedTensorType::get(dims, in.getElementType()), x, s, e, st));
}

Error GraphImporter::gather(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  auto d = typeOf(data);
  Type idx = typeOf(indices).getElementType();
  if (!idx.isInteger(32) && !idx.isInteger(64))
    return nodeInvalid(n, "indices must be INT32 or INT64");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), d.getRank()));
  // Constant indices (a table lookup with fixed positions) are checked now, not when the plan runs.
  if (const auto *t = constants.lookup(n.input(1))) {
    TRY_ASSIGN(ids, constInts(n, 1));
    const int64_t dim = d.getDimSize(axis);
    for (int64_t id : ids)
      if (id < -dim || id >= dim)
        return nodeInvalid(n, "index " + llvm::Twine(id) + " in '" + t->name() + "' is outside [-" + llvm::Twine(dim) +
                                  ", " + llvm::Twine(dim) + ") along axis " + llvm::Twine(axis));
  }
  shape::Dims dims(d.getShape().take_front(axis));
  llvm::append_range(dims, typeOf(indices).getShape());
  llvm::append_range(dims, d.getShape().drop_front(axis + 1));
  TRY_ASSIGN(type, checkedType(n, dims, d.getElementType()));
  auto gather = create<GatherOp>(n, type, data, indices, axis);
  if (auto row = axis == 0 ? paddingRow(n.input(0)) : std::nullopt)
    gather.getDefiningOp()->setAttr("padding_index", builder.getI64IntegerAttr(*row));
  return define(n, 0, gather);
}

std::optional<int64_t> GraphImporter::paddingRow(const std::string &name) {
  if (storage.model.producer_name() != "pytorch" || frozenParams.contains(name))
    return std::nullopt;
  auto merged = mergedCopies.find(name);
  const onnx::TensorProto *table = initializers.lookup(merged != mergedCopies.end() ? merged->second : name);
  if (!table || constants.contains(table->name()) || table->dims_size() != 2 || table->dims(0) < 2)
    return std::nullopt;
  auto bytes = tensorBytes(*table, "initializer '" + table->name() + "'");
  if (!bytes) {
    llvm::consumeError(bytes.takeError());
    return std::nullopt;
  }
  auto type = tensorType(*table, table->name());
  if (!type || !llvm::isa<FloatType>(type->getElementType())) {
    if (!type)
      llvm::consumeError(type.takeError());
    return std::nullopt;
  }
  const size_t rows = table->dims(0), rowBytes = bytes->size() / rows;
  std::optional<int64_t> zero;
  for (size_t r = 0; r < rows && rowBytes; ++r) {
    const char *row = bytes->data() + r * rowBytes;
    if (std::all_of(row, row + rowBytes, [](char c) { return c == 0; })) {
      if (zero)
        return std::nullopt; // several zero rows: no padding row to tell
      zero = static_cast<int64_t>(r);
    }
  }
  if (zero && !llvm::is_contained(out.paddingRows, std::make_pair(name, *zero)))
    out.paddingRows.push_back({name, *zero});
  return zero;
}

Error GraphImporter::constant(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1)
    return nodeInvalid(n, "needs exactly one value attribute");
  const auto &a = n.attribute(0);
  const onnx::TensorProto *t = nullptr;
  if (a.name() == "value") {
    t = &a.t();
  } else if (a.name() == "value_float" || a.name() == "value_floats") {
    auto &owned = ownedTensors.emplace_back();
    owned.set_data_type(onnx::TensorProto::FLOAT);
    if (a.name() == "value_float")
      owned.add_float_data(a.f());
    else {
      owned.add_dims(a.floats_size());
      owned.mutable_float_data()->CopyFrom(a.floats());
    }
    t = &owned;
  } else if (a.name() == "value_int" || a.name() == "value_ints") {
    auto &owned = ownedTensors.emplace_back();
    owned.set_data_type(onnx::TensorProto::INT64);
    if (a.name() == "value_int")
      owned.add_int64_data(a.i());
    else {
      owned.add_dims(a.ints_size());
      owned.mutable_int64_data()->CopyFrom(a.ints());
    }
    t = &owned;
  } else {
    return nodeUnsupported(n, "Constant with attribute '" + a.name() + "' is not supported");
  }
  if (auto err = checkTensorProto(*t, label(n) + " value"))
    return err;
  constants[n.output(0)] = t;
  return Error::success();
}

Error GraphImporter::expand(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(target, constInts(n, 1));
  auto dims = shape::broadcast(typeOf(x).getShape(), target);
  if (!dims)
    return nodeInvalid(n, "input " + shape::str(typeOf(x).getShape()) + " does not broadcast to " + shape::str(target));
  TRY_ASSIGN(type, checkedType(n, *dims, typeOf(x).getElementType()));
  return define(n, 0, create<ExpandOp>(n, type, x));
}

Error GraphImporter::gatherElements(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  auto d = typeOf(data), i = typeOf(indices);
  if (!i.getElementType().isInteger(32) && !i.getElementType().isInteger(64))
    return nodeInvalid(n, "indices must be INT32 or INT64");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), d.getRank()));
  if (i.getRank() != d.getRank())
    return nodeInvalid(n, "indices have rank " + llvm::Twine(i.getRank()) + ", data " + llvm::Twine(d.getRank()));
  for (int64_t k = 0; k < d.getRank(); ++k)
    if (k != axis && i.getDimSize(k) != d.getDimSize(k))
      return nodeUnsupported(n, "indices " + shape::str(i.getShape()) + " smaller than the data " +
                                    shape::str(d.getShape()) + " off the axis are not supported");
  return define(n, 0, create<GatherElementsOp>(n, RankedTensorType::get(i.getShape(), d.getElementType()), data,
                                               indices, axis));
}

/// GatherND (batch_dims 0) as a Gather over the data's leading index dims flattened into one: the tuple
/// [i1..ik] becomes the row i1*s1 + ... + ik*sk (negative entries counted from their dim's end). It folds
/// where its inputs are constants and trains through the Gather's gradient.
/// The flat row of `data` (its first k dims as one) each index tuple of GatherND/ScatterND names:
/// indices [..., k] -> [...], negative components counted from their dim's end.
Expected<GraphImporter::NdRows> GraphImporter::ndRows(const onnx::NodeProto &n, RankedTensorType d, Value indices) {
  auto it = typeOf(indices);
  if (intAttr(n, "batch_dims", 0) != 0)
    return nodeUnsupported(n, "batch_dims other than 0 is not supported");
  if (!it.getElementType().isInteger(64) && !it.getElementType().isInteger(32))
    return nodeInvalid(n, "indices must be INT64");
  const int64_t k = it.getRank() ? it.getDimSize(it.getRank() - 1) : -1;
  if (it.getRank() < 1 || k < 1 || k > d.getRank())
    return nodeInvalid(n, "the indices' last dim (" + llvm::Twine(k) + ") must be in [1, " + llvm::Twine(d.getRank()) +
                              "]");
  Type index = it.getElementType();
  shape::Dims tupleShape(it.getShape().drop_back());
  auto componentType = RankedTensorType::get(tupleShape, index);
  NdRows r;
  r.k = k;
  for (int64_t j = k - 1, stride = 1; j >= 0; stride *= d.getDimSize(j), --j) {
    llvm::SmallVector<int64_t> starts(it.getRank(), 0), ends(it.getShape()), steps(it.getRank(), 1);
    starts.back() = j, ends.back() = j + 1;
    shape::Dims sliceDims(tupleShape);
    sliceDims.push_back(1);
    Value component = create<ReshapeOp>(
        n, componentType, create<SliceOp>(n, RankedTensorType::get(sliceDims, index), indices, starts, ends, steps));
    Value negative = compareValues(n, component, indexScalar(n, index, 0), "lt");
    component = create<WhereOp>(n, componentType, negative,
                                broadcast<AddOp>(n, component, indexScalar(n, index, d.getDimSize(j))), component);
    Value scaled = broadcast<MulOp>(n, component, indexScalar(n, index, stride));
    r.row = r.row ? broadcast<AddOp>(n, r.row, scaled) : scaled;
    r.count *= d.getDimSize(j);
  }
  shape::Dims flatDims{r.count};
  llvm::append_range(flatDims, d.getShape().drop_front(k));
  r.flatType = RankedTensorType::get(flatDims, d.getElementType());
  return r;
}

Error GraphImporter::gatherND(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  auto d = typeOf(data);
  TRY_ASSIGN(rows, ndRows(n, d, indices));
  Value flat = create<ReshapeOp>(n, rows.flatType, data);
  shape::Dims resultDims(typeOf(indices).getShape().drop_back());
  llvm::append_range(resultDims, d.getShape().drop_front(rows.k));
  TRY_ASSIGN(type, checkedType(n, resultDims, d.getElementType()));
  return define(n, 0, create<GatherOp>(n, type, flat, rows.row, 0));
}

/// ScatterND as the transpose of GatherND: the updates summed into their rows (scatter_add, deterministic),
/// and, without a reduction, those rows taken from the sums instead of the data. Duplicate indices,
/// undefined in ONNX without a reduction, add up.
Error GraphImporter::scatterND(const onnx::NodeProto &n) {
  TRY_ASSIGN(data, value(n, 0));
  TRY_ASSIGN(indices, value(n, 1));
  TRY_ASSIGN(updates, value(n, 2));
  auto d = typeOf(data);
  if (!isFloat(d.getElementType()))
    return nodeUnsupported(n, "ScatterND of non-float data is not supported");
  const std::string reduction = findAttr(n, "reduction") ? findAttr(n, "reduction")->s() : "none";
  if (reduction != "none" && reduction != "add")
    return nodeUnsupported(n, "reduction '" + reduction + "' is not supported (none and add are)");
  TRY_ASSIGN(rows, ndRows(n, d, indices));
  shape::Dims updateDims(typeOf(indices).getShape().drop_back());
  llvm::append_range(updateDims, d.getShape().drop_front(rows.k));
  if (typeOf(updates).getShape() != ArrayRef<int64_t>(updateDims) || typeOf(updates).getElementType() != d.getElementType())
    return nodeInvalid(n, "updates " + shape::str(typeOf(updates).getShape()) + " must be " + shape::str(updateDims) +
                              " of the data's type");
  Value flat = create<ReshapeOp>(n, rows.flatType, data);
  Value sums = create<ScatterAddOp>(n, rows.flatType, updates, rows.row, 0, /*elements=*/false);
  Value result;
  if (reduction == "add") {
    result = create<AddOp>(n, rows.flatType, flat, sums);
  } else {
    Value ones = create<ExpandOp>(n, typeOf(updates), scalar(n, d.getElementType(), 1.0));
    Value hits = create<ScatterAddOp>(n, rows.flatType, ones, rows.row, 0, /*elements=*/false);
    Value written = compareValues(n, hits, scalar(n, d.getElementType(), 0.0), "gt");
    result = create<WhereOp>(n, rows.flatType, written, sums, flat);
  }
  return define(n, 0, create<ReshapeOp>(n, d, result));
}

/// Tile as a broadcast: x [d0, d1...] seen as [1, d0, 1, d1...], expanded to [r0, d0, r1, d1...] and
/// flattened pairwise; it folds on constants and trains through the expand.
Error GraphImporter::tile(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(repeats, constInts(n, 1));
  auto t = typeOf(x);
  if (static_cast<int64_t>(repeats.size()) != t.getRank() || llvm::any_of(repeats, [](int64_t r) { return r < 0; }))
    return nodeInvalid(n, "repeats must hold one non-negative count per dim (" + llvm::Twine(t.getRank()) + ")");
  shape::Dims split, expanded, tiled;
  for (int64_t d = 0; d < t.getRank(); ++d) {
    split.append({1, t.getDimSize(d)});
    expanded.append({repeats[d], t.getDimSize(d)});
  }
  TRY_ASSIGN(expandedType, checkedType(n, expanded, t.getElementType()));
  for (int64_t d = 0; d < t.getRank(); ++d) { // each dim on its own too: a 0 elsewhere hides an overflow
    int64_t dim = 0;
    if (llvm::MulOverflow(repeats[d], t.getDimSize(d), dim))
      return nodeInvalid(n, "repeats [" + shape::str(repeats) + "] overflow dim " + llvm::Twine(d));
    tiled.push_back(dim);
  }
  Value y = create<ReshapeOp>(n, RankedTensorType::get(split, t.getElementType()), x);
  y = create<ExpandOp>(n, expandedType, y);
  return define(n, 0, create<ReshapeOp>(n, RankedTensorType::get(tiled, t.getElementType()), y));
}

Expected<Value> GraphImporter::cropAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before,
                                         int64_t after) {
  if (before >= 0 && after >= 0)
    return y;
  auto t = typeOf(y);
  const int64_t rank = t.getRank(), dim = t.getDimSize(axis);
  llvm::SmallVector<int64_t> starts(rank, 0), ends(t.getShape()), steps(rank, 1);
  starts[axis] = std::max<int64_t>(-before, 0);
  ends[axis] = dim - std::max<int64_t>(-after, 0);
  if (ends[axis] < starts[axis])
    return nodeInvalid(n, "pads crop more than dim " + llvm::Twine(axis) + " holds");
  shape::Dims dims(t.getShape());
  dims[axis] = ends[axis] - starts[axis];
  return create<SliceOp>(n, RankedTensorType::get(dims, t.getElementType()), y, starts, ends, steps);
}

Expected<Value> GraphImporter::fillAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before,
                                         int64_t after, Value fill) {
  auto t = typeOf(y);
  Type elt = t.getElementType();
  shape::Dims dims(t.getShape());
  dims[axis] += before + after;
  TRY_ASSIGN(padded, checkedType(n, dims, elt));
  SmallVector<Value> parts;
  for (int64_t count : {before, int64_t(-1), after}) {
    if (count == 0)
      continue;
    if (count < 0) {
      parts.push_back(y);
      continue;
    }
    shape::Dims fillDims(t.getShape());
    fillDims[axis] = count;
    parts.push_back(create<ExpandOp>(n, RankedTensorType::get(fillDims, elt), fill));
  }
  return parts.size() == 1 ? y : create<ConcatOp>(n, padded, parts, axis);
}

Expected<Value> GraphImporter::padAxis(const onnx::NodeProto &n, Value y, int64_t axis, int64_t before, int64_t after,
                                        Value fill) {
  TRY_ASSIGN(cropped, cropAxis(n, y, axis, before, after));
  return fillAxis(n, cropped, axis, std::max<int64_t>(before, 0), std::max<int64_t>(after, 0), fill);
}

/// Pad per axis: negative pads crop (a slice); constant mode joins fills around x, edge, reflect and wrap
/// gather x's rows with a constant index vector (so each trains through its op's gradient).
Error GraphImporter::pad(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto t = typeOf(x);
  const int64_t rank = t.getRank();
  std::vector<int64_t> pads, axes;
  if (opset < 11) {
    if (const auto *a = findAttr(n, "pads"))
      pads.assign(a->ints().begin(), a->ints().end());
  } else {
    TRY_ASSIGN(p, constInts(n, 1));
    pads = p;
  }
  if (opset >= 18 && hasInput(n, 3)) {
    TRY_ASSIGN(a, constInts(n, 3));
    axes = a;
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size())
    return nodeInvalid(n, "pads has " + llvm::Twine(pads.size()) + " values for " + llvm::Twine(axes.size()) + " axes");
  const std::string mode = findAttr(n, "mode") ? findAttr(n, "mode")->s() : "constant";
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    return nodeInvalid(n, "mode must be constant, edge, reflect or wrap, got '" + mode + "'");
  Type elt = t.getElementType();
  Value fill; // constant mode's value, a 0-D constant
  if (mode == "constant") {
    if (opset < 11) {
      fill = scalar(n, elt, floatAttr(n, "value", 0.0f));
    } else if (hasInput(n, 2)) { // any tensor of one element: the fill need not be known at compile time
      TRY_ASSIGN(v, value(n, 2));
      if (typeOf(v).getNumElements() != 1 || typeOf(v).getElementType() != elt)
        return nodeInvalid(n, "constant_value must be one element of the data's type");
      fill = create<ReshapeOp>(n, RankedTensorType::get({}, elt), v);
    } else {
      auto scalarType = RankedTensorType::get({}, elt);
      fill = create<ConstantOp>(n, scalarType, DenseElementsAttr::get(scalarType, builder.getZeroAttr(elt)));
    }
  }
  Value y = x;
  for (size_t k = 0; k < axes.size(); ++k) {
    TRY_ASSIGN(axis, normalizeAxis(n, axes[k], rank));
    int64_t before = pads[k], after = pads[k + axes.size()];
    // No pad beyond a dim's limit: within it, dims plus pads stay in int64.
    for (int64_t pad : {before, after})
      if (pad < -shape::kMaxDim || pad > shape::kMaxDim)
        return nodeInvalid(n, "pad " + llvm::Twine(pad) + " of axis " + llvm::Twine(axis) + " is past 2^40");
    TRY_ASSIGN(cropped, cropAxis(n, y, axis, before, after));
    y = cropped, before = std::max<int64_t>(before, 0), after = std::max<int64_t>(after, 0);
    if (before == 0 && after == 0)
      continue;
    if (mode == "constant") {
      TRY_ASSIGN(padded, fillAxis(n, y, axis, before, after, fill));
      y = padded;
      continue;
    }
    auto current = typeOf(y);
    const int64_t size = current.getDimSize(axis);
    shape::Dims dims(current.getShape());
    dims[axis] = size + before + after;
    TRY_ASSIGN(padded, checkedType(n, dims, elt));
    if (size == 0 || (mode == "reflect" && size < 2 && before + after > 0))
      return nodeInvalid(n, "cannot " + mode + "-pad a dim of size " + llvm::Twine(size));
    llvm::SmallVector<int64_t> rows;
    for (int64_t i = -before; i < size + after; ++i) {
      int64_t r = i;
      if (mode == "edge")
        r = std::clamp<int64_t>(i, 0, size - 1);
      else if (mode == "wrap")
        r = ((i % size) + size) % size;
      else { // reflect without repeating the edge: period 2 * (size - 1)
        const int64_t period = 2 * (size - 1);
        r = ((i % period) + period) % period;
        r = r < size ? r : period - r;
      }
      rows.push_back(r);
    }
    y = create<GatherOp>(n, padded, y, int64Constant(n, {static_cast<int64_t>(rows.size())}, rows), axis);
  }
  return define(n, 0, y);
}

/// OneHot as a comparison of the indices (negative ones counted from depth) with 0..depth-1 along the new
/// axis, selecting the on and off values.
Error GraphImporter::oneHot(const onnx::NodeProto &n) {
  TRY_ASSIGN(indices, value(n, 0));
  TRY_ASSIGN(depthAttr, constElements(n, 1));
  TRY_ASSIGN(values, value(n, 2));
  auto it = typeOf(indices), vt = typeOf(values);
  if (depthAttr.getNumElements() != 1 || vt.getNumElements() != 2 || vt.getRank() != 1)
    return nodeInvalid(n, "depth must be one value and values [off, on]");
  Attribute d = *depthAttr.value_begin<Attribute>();
  const int64_t depth = llvm::isa<FloatAttr>(d) ? static_cast<int64_t>(llvm::cast<FloatAttr>(d).getValueAsDouble())
                                                : llvm::cast<IntegerAttr>(d).getInt();
  if (depth < 1)
    return nodeInvalid(n, "depth must be positive, got " + llvm::Twine(depth));
  Type index = it.getElementType();
  if (!index.isInteger(32) && !index.isInteger(64)) {
    if (!isFloat(index))
      return nodeUnsupported(n, "indices of this element type are not supported");
    index = builder.getI64Type();
    indices = create<CastOp>(n, RankedTensorType::get(it.getShape(), index), indices);
  }
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", -1), it.getRank() + 1));
  Value negative = compareValues(n, indices, indexScalar(n, index, 0), "lt");
  auto indexType = RankedTensorType::get(it.getShape(), index);
  Value normalized = create<WhereOp>(n, indexType, negative, broadcast<AddOp>(n, indices, indexScalar(n, index, depth)), indices);
  shape::Dims expandedDims(it.getShape());
  expandedDims.insert(expandedDims.begin() + axis, 1);
  Value column = create<ReshapeOp>(n, RankedTensorType::get(expandedDims, index), normalized);
  shape::Dims iotaDims(it.getRank() + 1, 1);
  iotaDims[axis] = depth;
  llvm::SmallVector<Attribute> iota;
  for (int64_t i = 0; i < depth; ++i)
    iota.push_back(builder.getIntegerAttr(index, i));
  auto iotaType = RankedTensorType::get(iotaDims, index);
  Value classes = create<ConstantOp>(n, iotaType, DenseElementsAttr::get(iotaType, iota));
  Value hot = compareValues(n, column, classes, "eq");
  auto scalarType = RankedTensorType::get({}, vt.getElementType());
  auto pick = [&](int64_t i) {
    Value one = create<SliceOp>(n, RankedTensorType::get({1}, vt.getElementType()), values, ArrayRef<int64_t>{i},
                                ArrayRef<int64_t>{i + 1}, ArrayRef<int64_t>{1});
    return create<ReshapeOp>(n, scalarType, one);
  };
  auto resultType = RankedTensorType::get(typeOf(hot).getShape(), vt.getElementType());
  return define(n, 0, create<WhereOp>(n, resultType, hot, pick(1), pick(0)));
}

Error GraphImporter::shapeOf(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto dims = typeOf(x).getShape();
  const int64_t rank = dims.size();
  // Opset 15's start and end: negative counts from the back, then clamped to [0, rank].
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clamp(intAttr(n, "start", 0)), end = clamp(intAttr(n, "end", rank));
  auto kept = dims.slice(start, std::max<int64_t>(end - start, 0));
  return define(n, 0, int64Constant(n, {static_cast<int64_t>(kept.size())}, kept));
}

Error GraphImporter::sizeOf(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  return define(n, 0, int64Constant(n, {}, {typeOf(x).getNumElements()}));
}

Error GraphImporter::constantOfShape(const onnx::NodeProto &n) {
  TRY_ASSIGN(dims, constInts(n, 0));
  Type elt = builder.getF32Type();
  Attribute element = builder.getF32FloatAttr(0.0f);
  if (const auto *a = findAttr(n, "value")) {
    if (auto err = checkTensorProto(a->t(), label(n) + " value"))
      return err;
    TRY_ASSIGN(valueType, tensorType(a->t(), label(n) + " value"));
    if (valueType.getNumElements() != 1)
      return nodeInvalid(n, "value must hold one element, got " + llvm::Twine(valueType.getNumElements()));
    TRY_ASSIGN(bytes, tensorBytes(a->t(), label(n) + " value"));
    elt = valueType.getElementType();
    auto one = elt.isInteger(1) ? DenseElementsAttr::get(RankedTensorType::get({1}, elt), bytes[0] != 0)
                                : DenseElementsAttr::getFromRawBuffer(RankedTensorType::get({1}, elt), bytes);
    element = *one.value_begin<Attribute>();
  }
  TRY_ASSIGN(type, checkedType(n, dims, elt));
  if (llvm::any_of(dims, [](int64_t d) { return d < 0; }))
    return nodeInvalid(n, "dims [" + shape::str(dims) + "] must not be negative");
  return define(n, 0, create<ConstantOp>(n, type, DenseElementsAttr::get(type, element)));
}

Error GraphImporter::range(const onnx::NodeProto &n) {
  TRY_ASSIGN(start, constElements(n, 0));
  TRY_ASSIGN(limit, constElements(n, 1));
  TRY_ASSIGN(delta, constElements(n, 2));
  Type elt = start.getElementType();
  for (auto a : {start, limit, delta})
    if (a.getNumElements() != 1 || a.getElementType() != elt)
      return nodeInvalid(n, "start, limit and delta must be scalars of one element type");
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  // Folded into a constant here: bounded like any folded constant, and integers counted exactly (through
  // doubles, values near 2^63 round past int64's range).
  constexpr int64_t kMaxRangeElements = int64_t(1) << 24;
  auto tooLarge = [&](const std::string &count) {
    return nodeInvalid(n, "range of " + count + " elements is too large (at most " +
                              llvm::Twine(kMaxRangeElements) + " are folded)");
  };
  // Values, not an Attribute each: the context keeps every attribute it made (2^24 took 30 s and 2 GiB).
  auto constant = [&](auto values) {
    auto type = RankedTensorType::get({static_cast<int64_t>(values.size())}, elt);
    return define(n, 0, create<ConstantOp>(n, type, DenseElementsAttr::get(type, values)));
  };
  if (isFloat(elt)) {
    auto scalarOf = [](DenseElementsAttr a) { return llvm::cast<FloatAttr>(*a.value_begin<Attribute>()).getValueAsDouble(); };
    const double s = scalarOf(start), l = scalarOf(limit), d = scalarOf(delta);
    if (d == 0)
      return nodeInvalid(n, "delta is 0");
    const double count = std::max(std::ceil((l - s) / d), 0.0);
    if (!(count <= kMaxRangeElements))
      return tooLarge(std::to_string(count));
    auto valuesAs = [&](auto zero) { // C++'s narrowing conversion rounds to nearest even, as APFloat would
      std::vector<decltype(zero)> values(static_cast<size_t>(count));
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<decltype(zero)>(s + static_cast<double>(i) * d);
      return values;
    };
    if (elt.isF32())
      return constant(ArrayRef<float>(valuesAs(0.0f)));
    llvm::SmallVector<APFloat> values; // 16-bit floats
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      bool lost;
      values.emplace_back(s + i * d);
      values.back().convert(llvm::cast<FloatType>(elt).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    }
    return constant(ArrayRef<APFloat>(values));
  }
  auto scalarOf = [](DenseElementsAttr a) { return llvm::cast<IntegerAttr>(*a.value_begin<Attribute>()).getInt(); };
  const int64_t s = scalarOf(start), l = scalarOf(limit), d = scalarOf(delta);
  if (d == 0)
    return nodeInvalid(n, "delta is 0");
  const __int128 span = static_cast<__int128>(l) - s;
  const __int128 count = (span > 0) != (d > 0) || span == 0 ? 0 : (span + d - (d > 0 ? 1 : -1)) / d;
  if (count > kMaxRangeElements)
    return tooLarge("more than " + std::to_string(kMaxRangeElements));
  auto valuesAs = [&](auto zero) { // each lies between start and limit, so fits the element type
    std::vector<decltype(zero)> values(static_cast<size_t>(count));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<decltype(zero)>(s + static_cast<__int128>(i) * d);
    return values;
  };
  if (elt.isInteger(32))
    return constant(ArrayRef<int32_t>(valuesAs(int32_t(0))));
  return constant(ArrayRef<int64_t>(valuesAs(int64_t(0))));
}

/// Trilu keeps x where (column - row) is >= k (upper) or <= k (lower): a Where over a mask compared from
/// two index vectors, which broadcasts over the batch and folds to a constant only when small.
Error GraphImporter::trilu(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto type = typeOf(x);
  if (type.getRank() < 2)
    return nodeInvalid(n, "input must have at least 2 dims, got " + llvm::Twine(type.getRank()));
  int64_t k = 0;
  if (hasInput(n, 1)) {
    TRY_ASSIGN(ks, constInts(n, 1));
    if (ks.size() != 1)
      return nodeInvalid(n, "k must be a scalar");
    k = ks[0];
  }
  const int64_t rows = type.getDimSize(type.getRank() - 2), cols = type.getDimSize(type.getRank() - 1);
  auto iota = [&](int64_t count) {
    llvm::SmallVector<int64_t> v(count);
    std::iota(v.begin(), v.end(), 0);
    return v;
  };
  Value rowIndex = int64Constant(n, {rows, 1}, iota(rows)), colIndex = int64Constant(n, {1, cols}, iota(cols));
  Value offset = broadcast<SubOp>(n, colIndex, rowIndex);
  bool upper = intAttr(n, "upper", 1) != 0;
  Value keep = compareValues(n, offset, int64Constant(n, {}, {k}), upper ? "ge" : "le");
  auto zeroType = RankedTensorType::get({}, type.getElementType());
  Value zero = create<ConstantOp>(n, zeroType, DenseElementsAttr::get(zeroType, builder.getZeroAttr(type.getElementType())));
  return define(n, 0, create<WhereOp>(n, type, keep, x, zero));
}

} // namespace tec::importer
