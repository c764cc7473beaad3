// Reductions, arg-reductions, cumulative sums and the losses (NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss).
#include "frontend/GraphImporter.h"

namespace tec::importer {

Expected<GraphImporter::ReduceSpec> GraphImporter::reduceSpec(const onnx::NodeProto &n, RankedTensorType in,
                                                               bool axesIsInput) {
  ReduceSpec spec;
  spec.keepdims = intAttr(n, "keepdims", 1) != 0;
  if (axesIsInput && hasInput(n, 1)) {
    TRY_ASSIGN(a, constInts(n, 1));
    spec.axes = a;
  } else if (const auto *a = findAttr(n, "axes")) {
    spec.axes.assign(a->ints().begin(), a->ints().end());
  }
  if (spec.axes.empty()) {
    if (intAttr(n, "noop_with_empty_axes", 0)) {
      spec.noop = true;
      return spec;
    }
    for (int64_t i = 0; i < in.getRank(); ++i)
      spec.axes.push_back(i);
  }
  for (auto &a : spec.axes) {
    TRY_ASSIGN(norm, normalizeAxis(n, a, in.getRank()));
    a = norm;
  }
  llvm::sort(spec.axes);
  if (std::adjacent_find(spec.axes.begin(), spec.axes.end()) != spec.axes.end())
    return nodeInvalid(n, "axes repeat a dimension");
  return spec;
}

/// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp as elementwise ops around a
/// sum (LogSumExp shifted by the max, so large values do not overflow); they train through those.
Error GraphImporter::compositeReduction(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  Type elt = typeOf(x).getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  TRY_ASSIGN(spec, reduceSpec(n, typeOf(x), opset >= 18));
  const std::string &op = n.op_type();
  auto sum = [&](Value v) { return spec.noop ? v : reduceWith<ReduceSumOp>(n, v, spec); };
  if (op == "ReduceL1")
    return define(n, 0, sum(create<AbsOp>(n, x.getType(), x)));
  if (op == "ReduceSumSquare" || op == "ReduceL2") {
    Value squares = sum(broadcast<MulOp>(n, x, x));
    return define(n, 0, op == "ReduceL2" ? create<SqrtOp>(n, squares.getType(), squares) : squares);
  }
  if (op == "ReduceLogSum") {
    Value total = sum(x);
    return define(n, 0, create<LogOp>(n, total.getType(), total));
  }
  if (spec.noop) // LogSumExp of one value
    return define(n, 0, x);
  ReduceSpec kept = spec;
  kept.keepdims = true;
  Value max = reduceWith<ReduceMaxOp>(n, x, kept);
  Value shifted = broadcast<SubOp>(n, x, max);
  Value total = sum(create<ExpOp>(n, shifted.getType(), shifted));
  Value logTotal = create<LogOp>(n, total.getType(), total);
  return define(n, 0, broadcast<AddOp>(n, logTotal, create<ReshapeOp>(n, logTotal.getType(), max)));
}

Error GraphImporter::argReduce(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto t = typeOf(x);
  Type elt = t.getElementType();
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  if (t.getRank() == 0)
    return nodeInvalid(n, "the input must have at least one dim");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", 0), t.getRank()));
  if (t.getDimSize(axis) == 0)
    return nodeInvalid(n, "axis " + llvm::Twine(axis) + " is empty: no index to return");
  const bool keepdims = intAttr(n, "keepdims", 1) != 0;
  auto type = RankedTensorType::get(shape::reduce(t.getShape(), {axis}, keepdims), builder.getI64Type());
  return define(n, 0, create<ArgReduceOp>(n, type, x, builder.getStringAttr(n.op_type() == "ArgMax" ? "max" : "min"),
                                          axis, keepdims, intAttr(n, "select_last_index", 0) != 0));
}

Error GraphImporter::cumSum(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(axes, constInts(n, 1));
  auto t = typeOf(x);
  Type elt = t.getElementType();
  if (!isFloat(elt) && !elt.isInteger(32) && !elt.isInteger(64))
    return nodeUnsupported(n, "element type is not supported");
  if (axes.size() != 1)
    return nodeInvalid(n, "axis must be one value, got " + llvm::Twine(axes.size()));
  TRY_ASSIGN(axis, normalizeAxis(n, axes[0], t.getRank()));
  return define(n, 0, create<CumSumOp>(n, t, x, axis, intAttr(n, "exclusive", 0) != 0, intAttr(n, "reverse", 0) != 0));
}

Expected<Value> GraphImporter::negativeLogLikelihood(const onnx::NodeProto &n, Value logProb, Value labels,
                                                     Value weight) {
  auto x = typeOf(logProb), t = typeOf(labels);
  Type elt = x.getElementType(), index = t.getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (!index.isInteger(32) && !index.isInteger(64))
    return nodeInvalid(n, "labels must be INT32 or INT64");
  shape::Dims expected(x.getShape());
  if (x.getRank() < 2 || (expected.erase(expected.begin() + 1), ArrayRef<int64_t>(expected) != t.getShape()))
    return nodeInvalid(n, "labels " + shape::str(t.getShape()) + " do not match scores " + shape::str(x.getShape()) +
                              " (expected [N, C, d...] and [N, d...])");
  if (weight && (typeOf(weight).getShape() != ArrayRef<int64_t>{x.getDimSize(1)} || typeOf(weight).getElementType() != elt))
    return nodeInvalid(n, "weight must be [" + llvm::Twine(x.getDimSize(1)) + "] of the scores' type");
  const std::string reduction = findAttr(n, "reduction") ? findAttr(n, "reduction")->s() : "mean";
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return nodeInvalid(n, "reduction must be 'mean', 'sum' or 'none', got '" + reduction + "'");
  // Ignored labels pick class 0 (always valid) and count as weight 0.
  Value valid, safe = labels;
  if (const auto *ignore = findAttr(n, "ignore_index")) {
    valid = compareValues(n, labels, indexScalar(n, index, ignore->i()), "ne");
    safe = create<WhereOp>(n, t, valid, labels, indexScalar(n, index, 0));
  }
  shape::Dims pickDims(t.getShape());
  pickDims.insert(pickDims.begin() + 1, 1);
  Value picks = create<ReshapeOp>(n, RankedTensorType::get(pickDims, index), safe);
  Value picked = create<GatherElementsOp>(n, RankedTensorType::get(pickDims, elt), logProb, picks, 1);
  auto lossType = RankedTensorType::get(t.getShape(), elt);
  Value loss = create<NegOp>(n, lossType, create<ReshapeOp>(n, lossType, picked));
  Value weights; // per label; null when every one counts 1
  if (weight)
    weights = create<GatherOp>(n, lossType, weight, safe, 0);
  if (valid) {
    Value one = scalar(n, elt, 1.0), zero = scalar(n, elt, 0.0);
    weights = create<WhereOp>(n, lossType, valid, weights ? weights : one, zero);
  }
  if (weights)
    loss = broadcast<MulOp>(n, loss, weights);
  if (reduction == "none")
    return loss;
  llvm::SmallVector<int64_t> all(t.getRank());
  std::iota(all.begin(), all.end(), 0);
  auto scalarType = RankedTensorType::get({}, elt);
  if (reduction == "mean" && !weights)
    return create<ReduceMeanOp>(n, scalarType, loss, all, false);
  Value total = create<ReduceSumOp>(n, scalarType, loss, all, false);
  if (reduction == "sum")
    return total;
  return broadcast<DivOp>(n, total, create<ReduceSumOp>(n, scalarType, weights, all, false));
}

Error GraphImporter::nllLoss(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(labels, value(n, 1));
  Value weight;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(w, value(n, 2));
    weight = w;
  }
  TRY_ASSIGN(loss, negativeLogLikelihood(n, x, labels, weight));
  return define(n, 0, loss);
}

Error GraphImporter::softmaxCrossEntropy(const onnx::NodeProto &n) {
  TRY_ASSIGN(scores, value(n, 0));
  TRY_ASSIGN(labels, value(n, 1));
  Value weight;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(w, value(n, 2));
    weight = w;
  }
  if (typeOf(scores).getRank() < 2)
    return nodeInvalid(n, "scores must be [N, C, d...], got " + shape::str(typeOf(scores).getShape()));
  if (!isFloat(typeOf(scores).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  Value logProb = create<LogSoftmaxOp>(n, scores.getType(), scores, 1);
  TRY_ASSIGN(loss, negativeLogLikelihood(n, logProb, labels, weight));
  if (auto err = define(n, 0, loss))
    return err;
  return define(n, 1, logProb);
}

} // namespace tec::importer
