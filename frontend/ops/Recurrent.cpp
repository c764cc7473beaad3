// Recurrent layers: RNN, GRU and LSTM (every direction and layout), unrolled over time.
#include "frontend/GraphImporter.h"

namespace tec::importer {

Expected<Value> GraphImporter::rnnActivation(const onnx::NodeProto &n, llvm::StringRef name, float alpha, float beta,
                                             Value x) {
  Type elt = typeOf(x).getElementType();
  auto affine = [&](float a, float b) { return broadcast<AddOp>(n, broadcast<MulOp>(n, x, scalar(n, elt, a)), scalar(n, elt, b)); };
  const std::string lower = name.lower();
  if (lower == "sigmoid")
    return create<SigmoidOp>(n, x.getType(), x);
  if (lower == "tanh")
    return create<TanhOp>(n, x.getType(), x);
  if (lower == "relu")
    return create<ReluOp>(n, x.getType(), x);
  if (lower == "affine")
    return affine(alpha, beta);
  if (lower == "hardsigmoid") // clip(alpha x + beta, 0, 1), ONNX's defaults 0.2 and 0.5
    return broadcast<MinOp>(n, broadcast<MaxOp>(n, affine(alpha, beta), scalar(n, elt, 0.0)), scalar(n, elt, 1.0));
  if (lower == "leakyrelu")
    return broadcast<MaxOp>(n, x, broadcast<MulOp>(n, x, scalar(n, elt, alpha)));
  if (lower == "scaledtanh")
    return broadcast<MulOp>(n, create<TanhOp>(n, x.getType(), broadcast<MulOp>(n, x, scalar(n, elt, beta))),
                            scalar(n, elt, alpha));
  return nodeUnsupported(n, "activation '" + name + "' is not supported (Sigmoid, Tanh, Relu, Affine, HardSigmoid, "
                                                    "LeakyRelu, ScaledTanh)");
}

Error GraphImporter::recurrent(const onnx::NodeProto &n) {
  const std::string op = n.op_type();
  const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  TRY_ASSIGN(xIn, value(n, 0));
  TRY_ASSIGN(w, value(n, 1));
  TRY_ASSIGN(r, value(n, 2));
  Type elt = typeOf(xIn).getElementType();
  if (!isFloat(elt) || typeOf(w).getElementType() != elt || typeOf(r).getElementType() != elt)
    return nodeUnsupported(n, "element type is not supported (float input and weights of one type)");
  const bool batchFirst = intAttr(n, "layout", 0) != 0;
  const std::string direction = findAttr(n, "direction") ? findAttr(n, "direction")->s() : "forward";
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return nodeInvalid(n, "direction must be forward, reverse or bidirectional, got '" + direction + "'");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (typeOf(xIn).getRank() != 3 || typeOf(w).getRank() != 3 || typeOf(r).getRank() != 3)
    return nodeInvalid(n, "X, W and R must be rank 3");
  Value x = xIn; // [T, B, I]
  if (batchFirst)
    x = create<TransposeOp>(n, RankedTensorType::get({typeOf(xIn).getDimSize(1), typeOf(xIn).getDimSize(0),
                                                      typeOf(xIn).getDimSize(2)}, elt),
                            xIn, ArrayRef<int64_t>{1, 0, 2});
  const int64_t steps = typeOf(x).getDimSize(0), batch = typeOf(x).getDimSize(1), inputSize = typeOf(x).getDimSize(2);
  const int64_t hidden = typeOf(r).getDimSize(2);
  if (intAttr(n, "hidden_size", hidden) != hidden)
    return nodeInvalid(n, "hidden_size " + llvm::Twine(intAttr(n, "hidden_size", hidden)) + " disagrees with R " +
                              shape::str(typeOf(r).getShape()));
  if (typeOf(w).getShape() != ArrayRef<int64_t>{dirs, gates * hidden, inputSize} ||
      typeOf(r).getShape() != ArrayRef<int64_t>{dirs, gates * hidden, hidden})
    return nodeInvalid(n, "W " + shape::str(typeOf(w).getShape()) + " and R " + shape::str(typeOf(r).getShape()) +
                              " do not fit " + llvm::Twine(dirs) + " direction(s), hidden size " + llvm::Twine(hidden) +
                              " and input size " + llvm::Twine(inputSize));
  if (steps < 1)
    return nodeUnsupported(n, "an empty sequence is not supported");
  auto optional = [&](int i, ArrayRef<int64_t> dims, const char *what) -> Expected<Value> {
    if (!hasInput(n, i))
      return Value();
    TRY_ASSIGN(v, value(n, i));
    if (typeOf(v).getShape() != dims || typeOf(v).getElementType() != elt)
      return nodeInvalid(n, llvm::Twine(what) + " must be " + shape::str(dims) + " of the input's type, got " +
                                shape::str(typeOf(v).getShape()));
    return v;
  };
  TRY_ASSIGN(bias, optional(3, {dirs, 2 * gates * hidden}, "B"));
  auto stateDims = batchFirst ? shape::Dims{batch, dirs, hidden} : shape::Dims{dirs, batch, hidden};
  TRY_ASSIGN(initialH, optional(5, stateDims, "initial_h"));
  TRY_ASSIGN(initialC, optional(6, op == "LSTM" ? ArrayRef<int64_t>(stateDims) : ArrayRef<int64_t>{}, "initial_c"));
  TRY_ASSIGN(peepholes, optional(7, {dirs, 3 * hidden}, "P"));
  Value lengths;
  if (hasInput(n, 4)) {
    TRY_ASSIGN(l, value(n, 4));
    if (typeOf(l).getShape() != ArrayRef<int64_t>{batch} ||
        !(typeOf(l).getElementType().isInteger(32) || typeOf(l).getElementType().isInteger(64)))
      return nodeInvalid(n, "sequence_lens must be [" + llvm::Twine(batch) + "] int32");
    lengths = create<ReshapeOp>(n, RankedTensorType::get({batch, 1}, typeOf(l).getElementType()), l);
  }
  const bool linearBeforeReset = intAttr(n, "linear_before_reset", 0) != 0;
  const bool inputForget = intAttr(n, "input_forget", 0) != 0;
  const float clip = floatAttr(n, "clip", 0.0f);
  if (findAttr(n, "clip") && !(clip > 0.0f))
    return nodeInvalid(n, "clip must be positive");
  // Activations: per direction f, g (GRU, LSTM) and h (LSTM); alphas and betas in order for those taking them.
  std::vector<std::string> activations;
  if (const auto *a = findAttr(n, "activations"))
    activations.assign(a->strings().begin(), a->strings().end());
  const int64_t perDirection = op == "LSTM" ? 3 : op == "GRU" ? 2 : 1;
  if (activations.empty()) { // ONNX's defaults: f = Sigmoid, g = h = Tanh (an RNN's one: Tanh)
    const std::vector<std::string> defaults = op == "RNN" ? std::vector<std::string>{"Tanh"}
                                              : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < dirs; ++d)
      activations.insert(activations.end(), defaults.begin(), defaults.end());
  }
  if (static_cast<int64_t>(activations.size()) != perDirection * dirs)
    return nodeInvalid(n, "expected " + llvm::Twine(perDirection * dirs) + " activations, got " +
                              llvm::Twine(activations.size()));
  std::vector<float> alphas, betas;
  if (const auto *a = findAttr(n, "activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const auto *a = findAttr(n, "activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  size_t nextAlpha = 0, nextBeta = 0;
  std::vector<std::pair<float, float>> params;
  for (const auto &name : activations) {
    const std::string lower = llvm::StringRef(name).lower();
    const bool takesAlpha = lower == "affine" || lower == "hardsigmoid" || lower == "leakyrelu" || lower == "scaledtanh";
    const bool takesBeta = lower == "affine" || lower == "hardsigmoid" || lower == "scaledtanh";
    float alpha = lower == "hardsigmoid" ? 0.2f : lower == "leakyrelu" ? 0.01f : 1.0f;
    float beta = lower == "hardsigmoid" ? 0.5f : lower == "affine" ? 0.0f : 1.0f;
    if (takesAlpha && nextAlpha < alphas.size())
      alpha = alphas[nextAlpha++];
    if (takesBeta && nextBeta < betas.size())
      beta = betas[nextBeta++];
    params.push_back({alpha, beta});
  }

  auto tensor = [&](ArrayRef<int64_t> dims) { return RankedTensorType::get(dims, elt); };
  auto slice = [&](Value v, int64_t axis, int64_t begin, int64_t end) {
    auto t = typeOf(v);
    SmallVector<int64_t> starts(t.getRank(), 0), ends(t.getShape()), stepsOne(t.getRank(), 1), dims(t.getShape());
    starts[axis] = begin, ends[axis] = end, dims[axis] = end - begin;
    return create<SliceOp>(n, tensor(dims), v, starts, ends, stepsOne);
  };
  auto reshape = [&](Value v, ArrayRef<int64_t> dims) { return create<ReshapeOp>(n, tensor(dims), v); };
  auto add = [&](Value a, Value b) { return broadcast<AddOp>(n, a, b); };
  auto mul = [&](Value a, Value b) { return broadcast<MulOp>(n, a, b); };
  llvm::DenseMap<Value, Value> transposed; // each weight transposed once, not once per step
  auto matmulT = [&](Value a, Value weight) { // a [rows, k] times weight [cols, k] transposed
    auto wt = typeOf(weight);
    Value &t = transposed[weight];
    if (!t)
      t = create<TransposeOp>(n, tensor({wt.getDimSize(1), wt.getDimSize(0)}), weight, ArrayRef<int64_t>{1, 0});
    return create<MatMulOp>(n, tensor({typeOf(a).getDimSize(0), wt.getDimSize(0)}), a, t);
  };
  auto clipped = [&](Value v) {
    if (clip <= 0.0f)
      return v;
    return broadcast<MinOp>(n, broadcast<MaxOp>(n, v, scalar(n, elt, -clip)), scalar(n, elt, clip));
  };
  auto stateOf = [&](Value all, int64_t d) -> Value { // [B, H] of direction d, or zeros
    if (!all)
      return create<ConstantOp>(n, tensor({batch, hidden}), DenseElementsAttr::get(tensor({batch, hidden}), builder.getFloatAttr(elt, 0.0)));
    Value s = slice(all, batchFirst ? 1 : 0, d, d + 1);
    return reshape(s, {batch, hidden});
  };

  std::vector<std::vector<Value>> outputs(dirs); // per direction, per time step: [B, H]
  std::vector<Value> lastH(dirs), lastC(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    Value wd = reshape(slice(w, 0, d, d + 1), {gates * hidden, inputSize});
    Value rd = reshape(slice(r, 0, d, d + 1), {gates * hidden, hidden});
    Value wb, rb;
    if (bias) {
      Value bd = reshape(slice(bias, 0, d, d + 1), {2 * gates * hidden});
      wb = slice(bd, 0, 0, gates * hidden), rb = slice(bd, 0, gates * hidden, 2 * gates * hidden);
    }
    // Every step's input projection at once: [T * B, I] x W^T (+ Wb, and Rb where it adds outside a gate).
    Value xw = matmulT(reshape(x, {steps * batch, inputSize}), wd);
    if (wb)
      xw = add(xw, wb);
    if (rb && op != "GRU")
      xw = add(xw, rb);
    if (rb && op == "GRU") // z and r take Rb outside; h takes it inside its reset (or its R GEMM)
      xw = add(xw, create<ConcatOp>(n, tensor({gates * hidden}),
                                    ValueRange{slice(rb, 0, 0, 2 * hidden),
                                               create<ConstantOp>(n, tensor({hidden}), DenseElementsAttr::get(tensor({hidden}), builder.getFloatAttr(elt, 0.0)))},
                                    0));
    xw = reshape(xw, {steps, batch, gates * hidden});
    Value rbh = rb && op == "GRU" ? slice(rb, 0, 2 * hidden, 3 * hidden) : Value();
    Value pi, po, pf;
    if (peepholes) {
      Value pd = reshape(slice(peepholes, 0, d, d + 1), {3 * hidden});
      pi = slice(pd, 0, 0, hidden), po = slice(pd, 0, hidden, 2 * hidden), pf = slice(pd, 0, 2 * hidden, 3 * hidden);
    }
    auto act = [&](int64_t k, Value v) {
      return rnnActivation(n, activations[d * perDirection + k], params[d * perDirection + k].first,
                           params[d * perDirection + k].second, v);
    };
    Value h = stateOf(initialH, d), c = op == "LSTM" ? stateOf(initialC, d) : Value();
    // GRU: R's z and r rows multiply the state, its h rows the state or the reset state.
    Value rzr = op == "GRU" ? slice(rd, 0, 0, 2 * hidden) : Value(), rh = op == "GRU" ? slice(rd, 0, 2 * hidden, 3 * hidden) : Value();
    outputs[d].resize(steps);
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = reverse ? steps - 1 - i : i;
      Value xt = reshape(slice(xw, 0, t, t + 1), {batch, gates * hidden});
      auto xGate = [&](int64_t k) { return slice(xt, 1, k * hidden, (k + 1) * hidden); };
      Value hNew, cNew;
      if (op == "RNN") {
        TRY_ASSIGN(a, act(0, clipped(add(xt, matmulT(h, rd)))));
        hNew = a;
      } else if (op == "LSTM") {
        Value hr = matmulT(h, rd);
        auto pre = [&](int64_t k) { return add(xGate(k), slice(hr, 1, k * hidden, (k + 1) * hidden)); };
        Value iPre = pre(0), oPre = pre(1), fPre = pre(2), cPre = pre(3); // ONNX's gate order: i, o, f, c
        if (pi)
          iPre = add(iPre, mul(pi, c)), fPre = add(fPre, mul(pf, c));
        TRY_ASSIGN(ig, act(0, clipped(iPre)));
        Value fg;
        if (inputForget) {
          fg = broadcast<SubOp>(n, scalar(n, elt, 1.0), ig);
        } else {
          TRY_ASSIGN(f, act(0, clipped(fPre)));
          fg = f;
        }
        TRY_ASSIGN(cg, act(1, clipped(cPre)));
        cNew = add(mul(fg, c), mul(ig, cg));
        if (po)
          oPre = add(oPre, mul(po, cNew));
        TRY_ASSIGN(og, act(0, clipped(oPre)));
        TRY_ASSIGN(hc, act(2, cNew));
        hNew = mul(og, hc);
      } else { // GRU, gates z, r, h
        Value hr = matmulT(h, rzr);
        TRY_ASSIGN(z, act(0, clipped(add(xGate(0), slice(hr, 1, 0, hidden)))));
        TRY_ASSIGN(rg, act(0, clipped(add(xGate(1), slice(hr, 1, hidden, 2 * hidden)))));
        Value candidate;
        if (linearBeforeReset) {
          Value hrh = matmulT(h, rh);
          if (rbh)
            hrh = add(hrh, rbh);
          candidate = add(xGate(2), mul(rg, hrh));
        } else {
          candidate = add(xGate(2), matmulT(mul(rg, h), rh));
          if (rbh)
            candidate = add(candidate, rbh);
        }
        TRY_ASSIGN(hh, act(1, clipped(candidate)));
        // (1 - z) * hh + z * h
        hNew = add(mul(broadcast<SubOp>(n, scalar(n, elt, 1.0), z), hh), mul(z, h));
      }
      if (lengths) { // past a sequence's end its state holds and its output is zero
        Type lt = typeOf(lengths).getElementType();
        Value live = compareValues(n, create<ConstantOp>(n, RankedTensorType::get({}, lt),
                                                         DenseElementsAttr::get(RankedTensorType::get({}, lt),
                                                                                builder.getIntegerAttr(lt, t))),
                                   lengths, "lt"); // [B, 1]
        auto whereLive = [&](Value a, Value b) {
          return create<WhereOp>(n, tensor({batch, hidden}), live, a, b);
        };
        outputs[d][t] = whereLive(hNew, stateOf(Value(), d));
        hNew = whereLive(hNew, h);
        if (cNew)
          cNew = whereLive(cNew, c);
      } else {
        outputs[d][t] = hNew;
      }
      h = hNew, c = cNew;
    }
    lastH[d] = h, lastC[d] = c;
  }
  // Y [T, dirs, B, H] (layout 1: [B, T, dirs, H]); Y_h, Y_c [dirs, B, H] (layout 1: [B, dirs, H]).
  if (outputUsed(n, 0)) {
    SmallVector<Value> perStep;
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t d = 0; d < dirs; ++d)
        perStep.push_back(reshape(outputs[d][t], {1, 1, batch, hidden}));
    Value y = create<ConcatOp>(n, tensor({steps * dirs, 1, batch, hidden}), perStep, 0);
    y = reshape(y, {steps, dirs, batch, hidden});
    if (batchFirst)
      y = create<TransposeOp>(n, tensor({batch, steps, dirs, hidden}), y, ArrayRef<int64_t>{2, 0, 1, 3});
    if (auto err = define(n, 0, y))
      return err;
  }
  auto stacked = [&](const std::vector<Value> &states) {
    SmallVector<Value> parts;
    for (Value s : states)
      parts.push_back(reshape(s, {1, batch, hidden}));
    Value all = create<ConcatOp>(n, tensor({dirs, batch, hidden}), parts, 0);
    return batchFirst ? create<TransposeOp>(n, tensor({batch, dirs, hidden}), all, ArrayRef<int64_t>{1, 0, 2}) : all;
  };
  if (outputUsed(n, 1))
    if (auto err = define(n, 1, stacked(lastH)))
      return err;
  if (op == "LSTM" && outputUsed(n, 2))
    if (auto err = define(n, 2, stacked(lastC)))
      return err;
  return Error::success();
}

} // namespace tec::importer
