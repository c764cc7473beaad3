// Convolutions (and transposed ones), pools and Resize: window attributes, 1-D and 3-D forms through
// 2-D ones.
#include "frontend/GraphImporter.h"

namespace tec::importer {

Error GraphImporter::checkWindowAttributes(const onnx::NodeProto &node) {
  static const llvm::StringSet<> windowed = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                                             "AveragePool", "LpPool", "MaxUnpool", "DeformConv"};
  if (!node.domain().empty() || !windowed.contains(node.op_type()))
    return Error::success();
  for (const auto &a : node.attribute()) {
    const bool list = a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape";
    if (list && llvm::any_of(a.ints(), [](int64_t v) { return v < 1; }))
      return nodeInvalid(node, a.name() + " must be positive, got [" +
                                   llvm::join(llvm::map_range(a.ints(), [](int64_t v) { return std::to_string(v); }),
                                              ", ") +
                                   "]");
    if (a.name() == "group" && a.i() < 1)
      return nodeInvalid(node, "group must be positive, got " + llvm::Twine(a.i()));
  }
  return Error::success();
}

Expected<llvm::SmallVector<int64_t>> GraphImporter::intsAttr(const onnx::NodeProto &n, const char *name,
                                                             int64_t count, int64_t dflt) {
  const auto *a = findAttr(n, name);
  if (!a)
    return llvm::SmallVector<int64_t>(count, dflt);
  if (a->ints_size() != count)
    return nodeInvalid(n, "'" + llvm::Twine(name) + "' has " + llvm::Twine(a->ints_size()) + " values, expected " +
                              llvm::Twine(count));
  return llvm::SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

Expected<GraphImporter::Window2d> GraphImporter::windowAttrs(const onnx::NodeProto &n, RankedTensorType x,
                                                              ArrayRef<int64_t> kernel, bool ceilMode) {
  const int64_t spatial = x.getRank() - 2;
  TRY_ASSIGN(strides, intsAttr(n, "strides", spatial, 1));
  TRY_ASSIGN(dilations, intsAttr(n, "dilations", spatial, 1));
  TRY_ASSIGN(pads, intsAttr(n, "pads", 2 * spatial, 0));
  if (llvm::any_of(strides, [](int64_t v) { return v < 1; }) || llvm::any_of(dilations, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(pads, [](int64_t v) { return v < 0; }))
    return nodeInvalid(n, "strides and dilations must be positive and pads non-negative");
  const std::string autoPad = findAttr(n, "auto_pad") ? findAttr(n, "auto_pad")->s() : "NOTSET";
  if (autoPad == "VALID") {
    pads.assign(2 * spatial, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    // Output = ceil(input / stride); the padding that takes splits, the odd cell at the end (UPPER) or start.
    for (int64_t d = 0; d < spatial; ++d) {
      const int64_t in = x.getDimSize(2 + d), out = (in + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>((out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - in, 0);
      pads[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[spatial + d] = total - pads[d];
    }
  } else if (autoPad != "NOTSET") {
    return nodeInvalid(n, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + autoPad + "'");
  }
  Window2d w;
  if (spatial == 1) { // a 1-D window is a 2-D one of height 1
    w.kernel = {1, kernel[0]}, w.strides = {1, strides[0]}, w.dilations = {1, dilations[0]};
    w.pads = {0, pads[0], 0, pads[1]};
  } else {
    const int64_t h = spatial - 2; // the planar dims are the last two
    if (spatial == 3)
      w.depth = {kernel[0], strides[0], pads[0], pads[3], dilations[0]};
    w.kernel = {kernel[h], kernel[h + 1]}, w.strides = {strides[h], strides[h + 1]};
    w.dilations = {dilations[h], dilations[h + 1]};
    w.pads = {pads[h], pads[h + 1], pads[spatial + h], pads[spatial + h + 1]};
  }
  for (int64_t d = 0; d < spatial; ++d) {
    const WindowAxis axis{kernel[d], strides[d], pads[d], pads[spatial + d], dilations[d]};
    if (axis.output(x.getDimSize(2 + d), ceilMode) < 1)
      return nodeInvalid(n, "the window (kernel " + llvm::Twine(kernel[d]) + ", dilation " + llvm::Twine(dilations[d]) +
                                ") does not fit the padded input of " + llvm::Twine(x.getDimSize(2 + d)));
  }
  return w;
}

Value GraphImporter::as2d(const onnx::NodeProto &n, Value x) {
  auto t = typeOf(x);
  if (t.getRank() == 4)
    return x;
  return create<ReshapeOp>(n, RankedTensorType::get({t.getDimSize(0), t.getDimSize(1), 1, t.getDimSize(2)},
                                                    t.getElementType()),
                           x);
}

Expected<SmallVector<Value>> GraphImporter::depthSlices(const onnx::NodeProto &n, Value x, const WindowAxis &depth,
                                                        int64_t outDepth, Value fill) {
  auto t = typeOf(x);
  Type elt = t.getElementType();
  const int64_t batch = t.getDimSize(0), channels = t.getDimSize(1), inDepth = t.getDimSize(2);
  const int64_t height = t.getDimSize(3), width = t.getDimSize(4);
  Value depthMajor = create<TransposeOp>(n, RankedTensorType::get({batch, inDepth, channels, height, width}, elt), x,
                                         ArrayRef<int64_t>{0, 2, 1, 3, 4});
  // The cells the windows read, from -padBegin: more than the input and its pads in ceil mode, fewer when
  // the last rows are past every window.
  const int64_t read = (outDepth - 1) * depth.stride + (depth.kernel - 1) * depth.dilation + 1;
  TRY_ASSIGN(padded, padAxis(n, depthMajor, 1, depth.padBegin, read - depth.padBegin - inDepth, fill));
  auto sliceType = RankedTensorType::get({batch, outDepth, channels, height, width}, elt);
  auto foldedType = RankedTensorType::get({batch * outDepth, channels, height, width}, elt);
  SmallVector<Value> slices;
  for (int64_t k = 0; k < depth.kernel; ++k) {
    const int64_t start = k * depth.dilation;
    Value slice = create<SliceOp>(n, sliceType, padded, ArrayRef<int64_t>{0, start, 0, 0, 0},
                                  ArrayRef<int64_t>{batch, start + (outDepth - 1) * depth.stride + 1, channels, height,
                                                    width},
                                  ArrayRef<int64_t>{1, depth.stride, 1, 1, 1});
    slices.push_back(create<ReshapeOp>(n, foldedType, slice));
  }
  return slices;
}

Value GraphImporter::fromDepthSlices(const onnx::NodeProto &n, Value y, int64_t batch) {
  auto t = typeOf(y);
  Type elt = t.getElementType();
  const int64_t outDepth = t.getDimSize(0) / batch, channels = t.getDimSize(1);
  const int64_t height = t.getDimSize(2), width = t.getDimSize(3);
  Value unfolded =
      create<ReshapeOp>(n, RankedTensorType::get({batch, outDepth, channels, height, width}, elt), y);
  return create<TransposeOp>(n, RankedTensorType::get({batch, channels, outDepth, height, width}, elt), unfolded,
                             ArrayRef<int64_t>{0, 2, 1, 3, 4});
}

Value GraphImporter::depthConstant(const onnx::NodeProto &n, Type elt, ArrayRef<double> values) {
  auto type = RankedTensorType::get({1, 1, static_cast<int64_t>(values.size()), 1, 1}, elt);
  SmallVector<Attribute> attrs;
  for (double v : values)
    attrs.push_back(builder.getFloatAttr(elt, v));
  return create<ConstantOp>(n, type, DenseElementsAttr::get(type, attrs));
}

Value GraphImporter::weightAtDepth(const onnx::NodeProto &n, Value w, int64_t k) {
  auto t = typeOf(w);
  llvm::SmallVector<int64_t> starts(5, 0), ends(t.getShape()), steps(5, 1);
  starts[2] = k, ends[2] = k + 1;
  shape::Dims dims(t.getShape());
  dims[2] = 1;
  Value slice = create<SliceOp>(n, RankedTensorType::get(dims, t.getElementType()), w, starts, ends, steps);
  return create<ReshapeOp>(
      n, RankedTensorType::get({dims[0], dims[1], dims[3], dims[4]}, t.getElementType()), slice);
}

shape::Dims GraphImporter::planarOutput(RankedTensorType in, int64_t channels, const Window2d &win, bool ceilMode) {
  return {in.getDimSize(0), channels,
          kernels::windowOutput(in.getDimSize(2), win.kernel[0], win.strides[0], win.pads[0], win.pads[2],
                                win.dilations[0], ceilMode),
          kernels::windowOutput(in.getDimSize(3), win.kernel[1], win.strides[1], win.pads[1], win.pads[3],
                                win.dilations[1], ceilMode)};
}

Error GraphImporter::conv(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(w, value(n, 1));
  auto xt = typeOf(x), wt = typeOf(w);
  if (xt.getRank() < 3 || xt.getRank() > 5)
    return nodeUnsupported(n, "only 1-D, 2-D and 3-D convolutions are supported, got a rank-" +
                                  llvm::Twine(xt.getRank()) + " input");
  Type elt = xt.getElementType();
  if (!isFloat(elt) || wt.getElementType() != elt)
    return nodeUnsupported(n, "element type is not supported (float input and weight of one type)");
  const int64_t group = intAttr(n, "group", 1);
  if (wt.getRank() != xt.getRank() || group < 1 || xt.getDimSize(1) % group || wt.getDimSize(0) % group ||
      wt.getDimSize(1) * group != xt.getDimSize(1))
    return nodeInvalid(n, "weight " + shape::str(wt.getShape()) + " does not fit input " + shape::str(xt.getShape()) +
                              " with group " + llvm::Twine(group));
  auto kernel = wt.getShape().drop_front(2);
  if (const auto *k = findAttr(n, "kernel_shape"); k && !llvm::equal(k->ints(), kernel))
    return nodeInvalid(n, "kernel_shape disagrees with the weight " + shape::str(wt.getShape()));
  TRY_ASSIGN(win, windowAttrs(n, xt, kernel, false));
  Value bias;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(b, value(n, 2));
    if (typeOf(b).getShape() != ArrayRef<int64_t>{wt.getDimSize(0)} || typeOf(b).getElementType() != elt)
      return nodeInvalid(n, "bias must be [" + llvm::Twine(wt.getDimSize(0)) + "] of the input's type");
    bias = b;
  }
  auto planarConv = [&](Value x2, Value w2, Value b) -> Value {
    auto dims = planarOutput(typeOf(x2), wt.getDimSize(0), win, false);
    return create<ConvOp>(n, RankedTensorType::get(dims, elt), x2, w2, b, win.strides, win.pads, win.dilations, group);
  };
  if (xt.getRank() == 5) { // the sum over kernel depths of 2-D convs on depth slices
    TRY_ASSIGN(slices, depthSlices(n, x, win.depth, win.depth.output(xt.getDimSize(2), false), scalar(n, elt, 0)));
    Value sum;
    for (int64_t k = 0; k < win.depth.kernel; ++k) {
      Value y = planarConv(slices[k], weightAtDepth(n, w, k), k == 0 ? bias : Value());
      sum = sum ? create<AddOp>(n, y.getType(), sum, y) : y;
    }
    return define(n, 0, fromDepthSlices(n, sum, xt.getDimSize(0)));
  }
  Value y = planarConv(as2d(n, x), as2d(n, w), bias);
  if (xt.getRank() == 3) {
    auto dims = typeOf(y).getShape();
    y = create<ReshapeOp>(n, RankedTensorType::get({dims[0], dims[1], dims[3]}, elt), y);
  }
  return define(n, 0, y);
}

Error GraphImporter::convTranspose(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  TRY_ASSIGN(w, value(n, 1));
  auto xt = typeOf(x), wt = typeOf(w);
  if (xt.getRank() < 3 || xt.getRank() > 5)
    return nodeUnsupported(n, "only 1-D, 2-D and 3-D transposed convolutions are supported, got a rank-" +
                                  llvm::Twine(xt.getRank()) + " input");
  if (!isFloat(xt.getElementType()) || wt.getElementType() != xt.getElementType())
    return nodeUnsupported(n, "element type is not supported (float input and weight of one type)");
  const int64_t group = intAttr(n, "group", 1), spatial = xt.getRank() - 2;
  if (wt.getRank() != xt.getRank() || group < 1 || wt.getDimSize(0) != xt.getDimSize(1) || xt.getDimSize(1) % group)
    return nodeInvalid(n, "weight " + shape::str(wt.getShape()) + " does not fit input " + shape::str(xt.getShape()) +
                              " with group " + llvm::Twine(group) + " (expected [C, M / group, kernel...])");
  auto kernel = wt.getShape().drop_front(2);
  if (const auto *k = findAttr(n, "kernel_shape"); k && !llvm::equal(k->ints(), kernel))
    return nodeInvalid(n, "kernel_shape disagrees with the weight " + shape::str(wt.getShape()));
  TRY_ASSIGN(strides, intsAttr(n, "strides", spatial, 1));
  TRY_ASSIGN(dilations, intsAttr(n, "dilations", spatial, 1));
  TRY_ASSIGN(pads, intsAttr(n, "pads", 2 * spatial, 0));
  TRY_ASSIGN(outputPadding, intsAttr(n, "output_padding", spatial, 0));
  const auto *outputShapeAttr = findAttr(n, "output_shape");
  llvm::SmallVector<int64_t> outputShape;
  if (outputShapeAttr) { // the spatial dims, or (as some exporters write) the whole shape
    outputShape.assign(outputShapeAttr->ints().begin(), outputShapeAttr->ints().end());
    if (static_cast<int64_t>(outputShape.size()) == spatial + 2)
      outputShape.erase(outputShape.begin(), outputShape.begin() + 2);
    if (static_cast<int64_t>(outputShape.size()) != spatial)
      return nodeInvalid(n, "output_shape must have one size per spatial dim");
  }
  constexpr int64_t kMaxWindowAttribute = int64_t(1) << 20; // keeps the output size's arithmetic far from overflow
  auto outside = [&](ArrayRef<int64_t> values, int64_t low) {
    return llvm::any_of(values, [&](int64_t v) { return v < low || v > kMaxWindowAttribute; });
  };
  if (outside(strides, 1) || outside(dilations, 1) || outside(pads, 0) || outside(outputPadding, 0) ||
      outside(kernel, 1) || outside(outputShape, 1))
    return nodeInvalid(n, "strides, dilations and kernel must be in [1, 2^20], pads and output_padding in [0, 2^20], "
                          "output_shape in [1, 2^20]");
  const std::string autoPad = findAttr(n, "auto_pad") ? findAttr(n, "auto_pad")->s() : "NOTSET";
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return nodeInvalid(n, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + autoPad + "'");
  llvm::SmallVector<int64_t> outDims;
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t in = xt.getDimSize(2 + d), s = strides[d];
    const int64_t natural = s * (in - 1) + outputPadding[d] + (kernel[d] - 1) * dilations[d] + 1;
    int64_t &begin = pads[d], &end = pads[spatial + d];
    if (autoPad == "VALID") {
      begin = end = 0;
    } else if (outputShapeAttr || autoPad != "NOTSET") {
      // ONNX's rule: the padding that gives the output shape (in * stride for SAME), split with the odd cell
      // at the end for SAME_UPPER and at the start otherwise (Python's floor division, as the reference).
      const int64_t total = natural - (outputShapeAttr ? outputShape[d] : in * s);
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      begin = autoPad == "SAME_UPPER" ? half : total - half;
      end = total - begin;
    }
    // Padding below zero at the end is more output (output_padding); at the start it would shift the output.
    if (begin < 0)
      return nodeUnsupported(n, "an output_shape that needs negative padding at the start is not supported");
    if (end < 0) {
      outputPadding[d] -= end;
      end = 0;
    }
    if (outputPadding[d] >= s)
      return nodeUnsupported(n, "output padding " + llvm::Twine(outputPadding[d]) + " of at least the stride " +
                                    llvm::Twine(s) + " is not supported");
    const int64_t out = s * (in - 1) + outputPadding[d] + (kernel[d] - 1) * dilations[d] + 1 - begin - end;
    if (out < 1)
      return nodeInvalid(n, "the padding leaves no output along spatial dim " + llvm::Twine(d));
    outDims.push_back(out);
  }
  const int64_t outChannels = wt.getDimSize(1) * group;
  Value bias;
  if (hasInput(n, 2)) {
    TRY_ASSIGN(b, value(n, 2));
    if (typeOf(b).getShape() != ArrayRef<int64_t>{outChannels} || typeOf(b).getElementType() != xt.getElementType())
      return nodeInvalid(n, "bias must be [" + llvm::Twine(outChannels) + "] of the input's type");
    bias = b;
  }
  Type elt = xt.getElementType();
  const int64_t batch = xt.getDimSize(0);
  Value y;
  if (spatial == 1) {
    y = create<ConvInputGradOp>(n, RankedTensorType::get({batch, outChannels, 1, outDims[0]}, elt), as2d(n, x),
                                as2d(n, w), ArrayRef<int64_t>{1, strides[0]}, ArrayRef<int64_t>{0, pads[0], 0, pads[1]},
                                ArrayRef<int64_t>{1, dilations[0]}, group);
    y = create<ReshapeOp>(n, RankedTensorType::get({batch, outChannels, outDims[0]}, elt), y);
  } else if (spatial == 2) {
    y = create<ConvInputGradOp>(n, RankedTensorType::get({batch, outChannels, outDims[0], outDims[1]}, elt), x, w,
                                strides, pads, dilations, group);
  } else {
    TRY_ASSIGN(volume, convTranspose3d(n, x, w, group, strides, pads, dilations, outDims));
    y = volume;
  }
  if (bias) {
    shape::Dims biasDims(xt.getRank(), 1);
    biasDims[1] = outChannels;
    y = broadcast<AddOp>(n, y, create<ReshapeOp>(n, RankedTensorType::get(biasDims, elt), bias));
  }
  return define(n, 0, y);
}

/// Per kernel depth k, the 2-D transposed conv of every input depth slice with the weight's slice at k lands
/// at output depth id * stride + k * dilation - padBegin: spread to stride-spaced rows (zeros between), shifted
/// by k * dilation - padBegin and cut to the output's depth, then summed over k.
Expected<Value> GraphImporter::convTranspose3d(const onnx::NodeProto &n, Value x, Value w, int64_t group,
                                                ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                                                ArrayRef<int64_t> dilations, ArrayRef<int64_t> outDims) {
  auto xt = typeOf(x), wt = typeOf(w);
  Type elt = xt.getElementType();
  const int64_t batch = xt.getDimSize(0), inDepth = xt.getDimSize(2), outChannels = wt.getDimSize(1) * group;
  const int64_t stride = strides[0], row = outChannels * outDims[1] * outDims[2];
  Value zero = scalar(n, elt, 0), sum;
  TRY_ASSIGN(slices, depthSlices(n, x, WindowAxis{}, inDepth, zero)); // every input depth, one slice
  for (int64_t k = 0; k < wt.getDimSize(2); ++k) {
    Value y = create<ConvInputGradOp>(
        n, RankedTensorType::get({batch * inDepth, outChannels, outDims[1], outDims[2]}, elt), slices[0],
        weightAtDepth(n, w, k), ArrayRef<int64_t>{strides[1], strides[2]},
        ArrayRef<int64_t>{pads[1], pads[2], pads[4], pads[5]}, ArrayRef<int64_t>{dilations[1], dilations[2]}, group);
    y = create<ReshapeOp>(n, RankedTensorType::get({batch, inDepth, 1, row}, elt), y);
    TRY_ASSIGN(spread, fillAxis(n, y, 2, 0, stride - 1, zero));
    y = create<ReshapeOp>(n, RankedTensorType::get({batch, inDepth * stride, row}, elt), spread);
    const int64_t shift = k * dilations[0] - pads[0];
    TRY_ASSIGN(placed, padAxis(n, y, 1, shift, outDims[0] - inDepth * stride - shift, zero));
    sum = sum ? create<AddOp>(n, placed.getType(), sum, placed) : placed;
  }
  auto folded = RankedTensorType::get({batch * outDims[0], outChannels, outDims[1], outDims[2]}, elt);
  return fromDepthSlices(n, create<ReshapeOp>(n, folded, sum), batch);
}

namespace {

/// One resized axis: output element o reads input elements index[k][o] with weight[k][o], k over the taps.
struct ResizeTaps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<float>> weight;
};

/// ONNX Resize's coordinate transformation: output coordinate -> input coordinate, in float as ONNX Runtime
/// computes it (so that nearest picks the same elements at exact halves).
float resizeSource(llvm::StringRef mode, float x, float scale, int64_t in, int64_t out) {
  if (mode == "asymmetric")
    return x / scale;
  if (mode == "align_corners")
    return out == 1 ? 0.0f : x * static_cast<float>(in - 1) / static_cast<float>(out - 1);
  if (mode == "tf_half_pixel_for_nn")
    return (x + 0.5f) / scale;
  if (mode == "pytorch_half_pixel")
    return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
  if (mode == "half_pixel_symmetric") {
    const float adjustment = static_cast<float>(out) / (scale * static_cast<float>(in));
    const float center = static_cast<float>(in) / 2.0f;
    return center * (1.0f - adjustment) + (x + 0.5f) / scale - 0.5f;
  }
  return (x + 0.5f) / scale - 0.5f; // half_pixel
}

int64_t nearestIndex(llvm::StringRef mode, float x) {
  if (mode == "floor")
    return static_cast<int64_t>(std::floor(x));
  if (mode == "ceil")
    return static_cast<int64_t>(std::ceil(x));
  const float below = std::floor(x);
  if (x == below + 0.5f) // a tie
    return static_cast<int64_t>(mode == "round_prefer_ceil" ? below + 1.0f : below);
  return static_cast<int64_t>(std::round(x));
}

/// Keys's cubic convolution weights of the taps at floor(x) - 1 .. floor(x) + 2, for x's fraction `r`.
std::array<float, 4> cubicWeights(float r, float a) {
  auto near = [&](float t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };              // |t| <= 1
  auto far = [&](float t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };          // 1 < |t| < 2
  return {far(r + 1), near(r), near(1 - r), far(2 - r)};
}

ResizeTaps resizeTaps(llvm::StringRef mode, llvm::StringRef transform, llvm::StringRef nearestMode, float cubicA,
                      bool excludeOutside, float scale, int64_t in, int64_t out) {
  const int64_t taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  ResizeTaps t{std::vector<std::vector<int64_t>>(taps, std::vector<int64_t>(out)),
               std::vector<std::vector<float>>(taps, std::vector<float>(out))};
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    float x = resizeSource(transform, static_cast<float>(o), scale, in, out);
    if (mode == "nearest") {
      t.index[0][o] = clamp(nearestIndex(nearestMode, x));
      t.weight[0][o] = 1.0f;
      continue;
    }
    if (mode == "linear") { // the source clamped to the input, as ONNX Runtime's bilinear
      x = std::clamp(x, 0.0f, static_cast<float>(in - 1));
      const int64_t lo = static_cast<int64_t>(std::floor(x)), hi = clamp(lo + 1);
      const float r = x - static_cast<float>(lo);
      t.index[0][o] = lo, t.index[1][o] = hi;
      t.weight[0][o] = 1.0f - r, t.weight[1][o] = r;
      continue;
    }
    const float below = std::floor(x);
    const auto w = cubicWeights(x - below, cubicA);
    float sum = 0.0f;
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = static_cast<int64_t>(below) - 1 + k;
      const bool outside = i < 0 || i >= in;
      t.index[k][o] = clamp(i);
      t.weight[k][o] = excludeOutside && outside ? 0.0f : w[k];
      sum += t.weight[k][o];
    }
    if (excludeOutside)
      for (int64_t k = 0; k < 4; ++k)
        t.weight[k][o] /= sum;
  }
  return t;
}

} // namespace

Error GraphImporter::resize(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  const int64_t rank = xt.getRank();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (opset < 11)
    return nodeUnsupported(n, "Resize before opset 11 is not supported (convert the model to opset 11 or later)");
  auto str = [&](const char *name, const char *dflt) {
    const auto *a = findAttr(n, name);
    return a ? a->s() : std::string(dflt);
  };
  const std::string mode = str("mode", "nearest"), transform = str("coordinate_transformation_mode", "half_pixel"),
                    nearestMode = str("nearest_mode", "round_prefer_floor"),
                    aspect = str("keep_aspect_ratio_policy", "stretch");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return nodeInvalid(n, "mode must be nearest, linear or cubic, got '" + mode + "'");
  static const llvm::StringSet<> transforms{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                            "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (!transforms.contains(transform))
    return nodeInvalid(n, "unknown coordinate_transformation_mode '" + transform + "'");
  if (transform == "tf_crop_and_resize")
    return nodeUnsupported(n, "coordinate_transformation_mode tf_crop_and_resize is not supported");
  if (nearestMode != "round_prefer_floor" && nearestMode != "round_prefer_ceil" && nearestMode != "floor" &&
      nearestMode != "ceil")
    return nodeInvalid(n, "unknown nearest_mode '" + nearestMode + "'");
  if (intAttr(n, "antialias", 0) != 0 && mode != "nearest")
    return nodeUnsupported(n, "antialias is not supported");
  if (aspect != "stretch" && aspect != "not_larger" && aspect != "not_smaller")
    return nodeInvalid(n, "unknown keep_aspect_ratio_policy '" + aspect + "'");
  std::vector<int64_t> axes;
  if (const auto *a = findAttr(n, "axes"))
    for (int64_t axis : a->ints()) {
      TRY_ASSIGN(d, normalizeAxis(n, axis, rank));
      if (llvm::is_contained(axes, d))
        return nodeInvalid(n, "axes names dim " + llvm::Twine(d) + " twice");
      axes.push_back(d);
    }
  else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  // The output size and the scale of each axis: from sizes (scale = out / in) or scales (out = floor(in * s)).
  constexpr int64_t kMaxResizedLength = int64_t(1) << 24;
  std::vector<int64_t> outSize(xt.getShape());
  std::vector<float> scale(rank, 1.0f);
  const bool bySizes = hasInput(n, 3);
  if (bySizes) {
    TRY_ASSIGN(sizes, constInts(n, 3));
    if (sizes.size() != axes.size())
      return nodeInvalid(n, "sizes has " + llvm::Twine(sizes.size()) + " values for " + llvm::Twine(axes.size()) + " axes");
    float fit = aspect == "not_larger" ? INFINITY : 0.0f;
    for (size_t k = 0; k < axes.size(); ++k) {
      if (sizes[k] < 1)
        return nodeInvalid(n, "sizes must be positive");
      const float s = static_cast<float>(sizes[k]) / static_cast<float>(xt.getDimSize(axes[k]));
      fit = aspect == "not_larger" ? std::min(fit, s) : std::max(fit, s);
      outSize[axes[k]] = sizes[k], scale[axes[k]] = s;
    }
    if (aspect != "stretch")
      for (int64_t d : axes) {
        scale[d] = fit;
        const double length = std::round(double(fit) * static_cast<double>(xt.getDimSize(d)));
        outSize[d] = length > static_cast<double>(kMaxResizedLength) ? kMaxResizedLength + 1 : static_cast<int64_t>(length);
      }
  } else if (hasInput(n, 2)) {
    TRY_ASSIGN(scales, constFloats(n, 2));
    if (scales.size() != axes.size())
      return nodeInvalid(n, "scales has " + llvm::Twine(scales.size()) + " values for " + llvm::Twine(axes.size()) +
                                " axes");
    for (size_t k = 0; k < axes.size(); ++k) {
      if (!(scales[k] > 0.0f) || !std::isfinite(scales[k]))
        return nodeInvalid(n, "scales must be positive and finite");
      scale[axes[k]] = scales[k];
      const double length = std::floor(static_cast<double>(xt.getDimSize(axes[k])) * scales[k]);
      outSize[axes[k]] = length > static_cast<double>(kMaxResizedLength) ? kMaxResizedLength + 1
                                                                           : static_cast<int64_t>(length);
      if (outSize[axes[k]] < 1)
        return nodeInvalid(n, "scales leave no output along dim " + llvm::Twine(axes[k]));
    }
  } else {
    return nodeInvalid(n, "expected scales or sizes");
  }
  // The taps are tables of the output's length per axis, built now: bounded like any compile-time tensor.
  for (int64_t d : axes)
    if (xt.getDimSize(d) < 1 || outSize[d] > kMaxResizedLength)
      return nodeUnsupported(n, "resizing dim " + llvm::Twine(d) + " from " + llvm::Twine(xt.getDimSize(d)) + " to " +
                                    llvm::Twine(outSize[d]) + " is not supported (1 to " +
                                    llvm::Twine(kMaxResizedLength) + " elements)");
  TRY_ASSIGN(checked, checkedType(n, outSize, elt));
  (void)checked;
  const float cubicA = floatAttr(n, "cubic_coeff_a", -0.75f);
  const bool excludeOutside = intAttr(n, "exclude_outside", 0) != 0;
  Value y = x;
  for (int64_t d : axes) {
    const int64_t in = xt.getDimSize(d), out = outSize[d];
    if (in == out && scale[d] == 1.0f)
      continue; // every transformation maps an unscaled axis onto itself
    auto taps = resizeTaps(mode, transform, nearestMode, cubicA, excludeOutside, scale[d], in, out);
    auto current = typeOf(y);
    SmallVector<int64_t> dims(current.getShape()), weightDims(rank, 1);
    dims[d] = out, weightDims[d] = out;
    auto resultType = RankedTensorType::get(dims, elt);
    Value sum;
    for (size_t k = 0; k < taps.index.size(); ++k) {
      Value picked = create<GatherOp>(n, resultType, y, int64Constant(n, {out}, taps.index[k]), d);
      if (mode != "nearest") {
        auto f32Weights = RankedTensorType::get(weightDims, builder.getF32Type());
        Value weight = create<ConstantOp>(n, f32Weights, DenseElementsAttr::get(f32Weights, ArrayRef<float>(taps.weight[k])));
        if (!elt.isF32())
          weight = create<CastOp>(n, RankedTensorType::get(weightDims, elt), weight);
        picked = broadcast<MulOp>(n, picked, weight);
      }
      sum = sum ? create<AddOp>(n, resultType, sum, picked) : picked;
    }
    y = sum;
  }
  return define(n, 0, y);
}

Error GraphImporter::pool(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  if (xt.getRank() < 3 || xt.getRank() > 5)
    return nodeUnsupported(n, "only 1-D, 2-D and 3-D pools are supported, got a rank-" + llvm::Twine(xt.getRank()) +
                                  " input");
  Type elt = xt.getElementType();
  if (!isFloat(elt))
    return nodeUnsupported(n, "element type is not supported (f32, f16, bf16 only)");
  if (outputUsed(n, 1))
    return nodeUnsupported(n, "MaxPool's Indices output is not supported");
  const auto *k = findAttr(n, "kernel_shape");
  if (!k || k->ints_size() != xt.getRank() - 2)
    return nodeInvalid(n, "kernel_shape must have one size per spatial dim");
  llvm::SmallVector<int64_t> kernel(k->ints().begin(), k->ints().end());
  const bool ceilMode = intAttr(n, "ceil_mode", 0) != 0, max = n.op_type() == "MaxPool";
  const bool countIncludePad = !max && intAttr(n, "count_include_pad", 0) != 0;
  TRY_ASSIGN(win, windowAttrs(n, xt, kernel, ceilMode));
  auto planarPool = [&](Value x2) -> Value {
    auto dims = planarOutput(typeOf(x2), typeOf(x2).getDimSize(1), win, ceilMode);
    return create<PoolOp>(n, RankedTensorType::get(dims, elt), x2, builder.getStringAttr(max ? "max" : "avg"),
                          win.kernel, win.strides, win.pads, win.dilations, countIncludePad);
  };
  if (xt.getRank() == 5) {
    TRY_ASSIGN(y, pool3d(n, x, win, ceilMode, max, countIncludePad, planarPool));
    return define(n, 0, y);
  }
  Value y = planarPool(as2d(n, x));
  if (xt.getRank() == 3) {
    auto dims = typeOf(y).getShape();
    y = create<ReshapeOp>(n, RankedTensorType::get({dims[0], dims[1], dims[3]}, elt), y);
  }
  return define(n, 0, y);
}

/// The max over kernel depths of 2-D max pools on depth slices (-inf outside the input, so that padding never
/// wins); for the mean, the sum of 2-D means (each divided by its window's planar cells) divided by the depth
/// cells each output's window counts.
Expected<Value> GraphImporter::pool3d(const onnx::NodeProto &n, Value x, const Window2d &win, bool ceilMode, bool max,
                                      bool countIncludePad, llvm::function_ref<Value(Value)> planarPool) {
  auto xt = typeOf(x);
  Type elt = xt.getElementType();
  const WindowAxis &depth = win.depth;
  const int64_t inDepth = xt.getDimSize(2), outDepth = depth.output(inDepth, ceilMode);
  TRY_ASSIGN(slices, depthSlices(n, x, depth, outDepth, scalar(n, elt, max ? -INFINITY : 0.0)));
  Value combined;
  for (Value slice : slices) {
    Value y = planarPool(slice);
    if (!combined)
      combined = y;
    else if (max)
      combined = create<MaxOp>(n, y.getType(), combined, y);
    else
      combined = create<AddOp>(n, y.getType(), combined, y);
  }
  Value y = fromDepthSlices(n, combined, xt.getDimSize(0));
  if (max)
    return y;
  llvm::SmallVector<double> cells;
  for (int64_t od = 0; od < outDepth; ++od) {
    int64_t count = 0;
    for (int64_t k = 0; k < depth.kernel; ++k) {
      const int64_t id = od * depth.stride - depth.padBegin + k * depth.dilation;
      count += countIncludePad ? id >= -depth.padBegin && id < inDepth + depth.padEnd : id >= 0 && id < inDepth;
    }
    cells.push_back(static_cast<double>(count));
  }
  return broadcast<DivOp>(n, y, depthConstant(n, elt, cells));
}

Error GraphImporter::globalPool(const onnx::NodeProto &n) {
  TRY_ASSIGN(x, value(n, 0));
  auto xt = typeOf(x);
  if (xt.getRank() < 3 || !isFloat(xt.getElementType()))
    return nodeUnsupported(n, "expected a float [N, C, spatial...] input, got " + shape::str(xt.getShape()));
  ReduceSpec spec;
  for (int64_t d = 2; d < xt.getRank(); ++d)
    spec.axes.push_back(d);
  return define(n, 0, n.op_type() == "GlobalMaxPool" ? reduceWith<ReduceMaxOp>(n, x, spec)
                                                     : reduceWith<ReduceMeanOp>(n, x, spec));
}

} // namespace tec::importer
