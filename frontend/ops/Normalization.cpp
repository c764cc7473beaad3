// Normalizations: LayerNormalization, InstanceNormalization, BatchNormalization, LRN.
#include "frontend/GraphImporter.h"

namespace tec::importer {

Error GraphImporter::layerNorm(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(scale, value(n, 1));
  Value bias;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(b, value(n, 2));
    bias = b;
  }
  if (!isFloat(typeOf(x).getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (intAttr(n, "stash_type", 1) != onnx::TensorProto::FLOAT)
    return nodeUnsupported(n, "stash_type other than FLOAT is not supported");
  TRY_ASSIGN(axis, normalizeAxis(n, intAttr(n, "axis", -1), typeOf(x).getRank()));
  auto normalized = typeOf(x).getShape().drop_front(axis);
  for (Value v : {scale, bias})
    if (v && (typeOf(v).getShape() != normalized || typeOf(v).getElementType() != typeOf(x).getElementType()))
      return nodeUnsupported(n, "scale/bias must have the normalized shape " + shape::str(normalized) +
                                    " and the input's element type (got " + shape::str(typeOf(v).getShape()) + ")");
  shape::Dims statsShape(typeOf(x).getShape().take_front(axis));
  statsShape.resize(typeOf(x).getRank(), 1);
  auto statsType = RankedTensorType::get(statsShape, builder.getF32Type());
  auto op = builder.create<LayerNormOp>(loc(n), TypeRange{x.getType(), statsType, statsType}, x, scale, bias,
                                        builder.getI64IntegerAttr(axis),
                                        builder.getF32FloatAttr(floatAttr(n, "epsilon", 1e-5f)));
  for (auto [i, r] : llvm::enumerate(op->getResults()))
    if (auto err = define(n, i, r))
      return err;
  return Error::success();
}

Error GraphImporter::checkChannelsFirst(const onnx::NodeProto &n, RankedTensorType x) {
  if (!isFloat(x.getElementType()))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (x.getRank() < 3)
    return nodeInvalid(n, "the input must be [N, C, d1, ...], got rank " + llvm::Twine(x.getRank()));
  return Error::success();
}

Error GraphImporter::instanceNorm(const onnx::NodeProto &n) {
  // Each (sample, channel) normalized over its spatial dims: a LayerNorm from axis 2 (a unit gain over the
  // normalized dims), then the per-channel scale and bias. GroupNorm exports as this over [N, groups, -1].
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(scale, value(n, 1));
  TRY_ASSIGN(bias, value(n, 2));
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  if (auto err = checkChannelsFirst(n, xt))
    return err;
  const int64_t channels = xt.getDimSize(1);
  for (Value v : {scale, bias})
    if (typeOf(v).getShape() != ArrayRef<int64_t>{channels} || typeOf(v).getElementType() != elt)
      return nodeInvalid(n, "scale and bias must be [" + llvm::Twine(channels) + "] of the input's type");
  auto normalizedType = RankedTensorType::get(xt.getShape().drop_front(2), elt);
  Value ones = create<ConstantOp>(n, normalizedType, DenseElementsAttr::get(normalizedType, builder.getFloatAttr(elt, 1.0)));
  shape::Dims statsShape{xt.getDimSize(0), channels};
  statsShape.resize(xt.getRank(), 1);
  auto statsType = RankedTensorType::get(statsShape, builder.getF32Type());
  auto normalized = builder.create<LayerNormOp>(loc(n), TypeRange{xt, statsType, statsType}, x, ones, Value(),
                                                builder.getI64IntegerAttr(2),
                                                builder.getF32FloatAttr(floatAttr(n, "epsilon", 1e-5f)));
  shape::Dims perChannel(xt.getRank() - 1, 1);
  perChannel[0] = channels;
  auto perChannelType = RankedTensorType::get(perChannel, elt);
  Value y = broadcast<MulOp>(n, normalized->getResult(0), create<ReshapeOp>(n, perChannelType, scale));
  return define(n, 0, broadcast<AddOp>(n, y, create<ReshapeOp>(n, perChannelType, bias)));
}

/// Inference BatchNormalization: (x - mean) * scale / sqrt(var + epsilon) + bias per channel. The running
/// statistics are params training leaves alone (tec.frozen).
/// BatchNormalization. In training mode (opset 14+) the statistics are the batch's own (population variance,
/// as ONNX defines it) and outputs 1 and 2 are the running statistics moved towards them by 1 - momentum.
Error GraphImporter::batchNorm(const onnx::NodeProto &n) {
  const bool training = opset >= 14 && intAttr(n, "training_mode", 0) != 0;
  if (opset < 9 && intAttr(n, "spatial", 1) == 0)
    return nodeUnsupported(n, "BatchNormalization with spatial = 0 is not supported");
  if (!training)
    for (int i = 1; i < n.output_size(); ++i)
      if (outputUsed(n, i))
        return nodeUnsupported(n, "the statistics outputs of BatchNormalization before opset 14 are not supported");
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  if (xt.getRank() < 2 || !isFloat(elt))
    return nodeUnsupported(n, "expected a float [N, C, ...] input, got " + shape::str(xt.getShape()));
  // Per-channel operands as [C, 1, ...] so they broadcast over the spatial dims.
  shape::Dims channelShape(xt.getRank() - 1, 1);
  channelShape[0] = xt.getDimSize(1);
  auto channelType = RankedTensorType::get(channelShape, elt);
  llvm::SmallVector<Value, 4> perChannel, raw;
  for (int i = 1; i <= 4; ++i) {
    TRY_ASSIGN(v, value(n, i));
    raw.push_back(v);
    if (typeOf(v).getShape() != ArrayRef<int64_t>{xt.getDimSize(1)} || typeOf(v).getElementType() != elt)
      return nodeInvalid(n, "input '" + n.input(i) + "' must be [" + llvm::Twine(xt.getDimSize(1)) + "] of the input's type");
    if (i >= 3 && isInitializer(n.input(i)))
      frozenParams[n.input(i)] = "a BatchNormalization running statistic";
    perChannel.push_back(create<ReshapeOp>(n, channelType, v));
  }
  Value scale = perChannel[0], bias = perChannel[1], mean = perChannel[2], var = perChannel[3];
  if (training) {
    ReduceSpec overAllButChannels;
    for (int64_t d = 0; d < xt.getRank(); ++d)
      if (d != 1)
        overAllButChannels.axes.push_back(d);
    overAllButChannels.keepdims = false;
    auto batchStatistic = [&](Value v) {
      return create<ReshapeOp>(n, channelType, reduceWith<ReduceMeanOp>(n, v, overAllButChannels));
    };
    Value batchMean = batchStatistic(x);
    Value centered = broadcast<SubOp>(n, x, batchMean);
    Value batchVar = batchStatistic(create<MulOp>(n, xt, centered, centered));
    const float momentum = floatAttr(n, "momentum", 0.9f);
    auto channelVector = RankedTensorType::get({xt.getDimSize(1)}, elt);
    for (auto [output, current] : {std::pair{1, batchMean}, std::pair{2, batchVar}}) {
      Value running = raw[output + 1];
      Value moved = create<ReshapeOp>(
          n, channelVector,
          broadcast<AddOp>(n, broadcast<MulOp>(n, perChannel[output + 1], scalar(n, elt, momentum)),
                           broadcast<MulOp>(n, current, scalar(n, elt, 1.0 - momentum))));
      if (auto err = define(n, output, moved))
        return err;
      // A running statistic that is an initializer moves in training, as the framework's buffer does.
      if (auto arg = llvm::dyn_cast<BlockArgument>(running); arg && isInitializer(n.input(output + 2)))
        if (!runningStats.insert({arg, moved}).second)
          return nodeUnsupported(n, "running statistic '" + n.input(output + 2) +
                                        "' is updated by more than one training-mode BatchNormalization");
    }
    mean = batchMean;
    var = batchVar;
  }
  Value stddev = create<SqrtOp>(n, var.getType(), broadcast<AddOp>(n, var, scalar(n, elt, floatAttr(n, "epsilon", 1e-5f))));
  Value normalized = broadcast<DivOp>(n, broadcast<SubOp>(n, x, mean), stddev);
  return define(n, 0, broadcast<AddOp>(n, broadcast<MulOp>(n, normalized, scale), bias));
}

/// LRN: y = x * (bias + alpha * mean of x² over `size` neighbouring channels)^-beta, the channel window
/// an average pool (padding counted, so it is the sum / size) over x² seen as [N, 1, C, spatial].
Error GraphImporter::lrn(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto t = typeOf(x);
  Type elt = t.getElementType();
  if (auto err = checkChannelsFirst(n, t))
    return err;
  const int64_t size = intAttr(n, "size", 0);
  if (size < 1)
    return nodeInvalid(n, "size must be positive, got " + llvm::Twine(size));
  const int64_t spatial = *shape::elementCount(t.getShape().drop_front(2));
  auto channelsType = RankedTensorType::get({t.getDimSize(0), 1, t.getDimSize(1), spatial}, elt);
  Value squares = create<ReshapeOp>(n, channelsType, create<MulOp>(n, t, x, x));
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Value mean = create<PoolOp>(n, channelsType, squares, builder.getStringAttr("avg"), ArrayRef<int64_t>{size, 1},
                              ArrayRef<int64_t>{1, 1}, ArrayRef<int64_t>{before, 0, after, 0}, ArrayRef<int64_t>{1, 1},
                              true);
  Value scaled = broadcast<MulOp>(n, create<ReshapeOp>(n, t, mean), scalar(n, elt, floatAttr(n, "alpha", 1e-4f)));
  Value base = broadcast<AddOp>(n, scaled, scalar(n, elt, floatAttr(n, "bias", 1.0f)));
  Value factor = broadcast<PowOp>(n, base, scalar(n, elt, -floatAttr(n, "beta", 0.75f)));
  return define(n, 0, create<MulOp>(n, t, x, factor));
}

// Shapes are static after import, so the shape operators are constants.

} // namespace tec::importer
