#include "runtime/StepContracts.h"

#include "runtime/Steps.h"
#include "support/Sharding.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

namespace tec {

namespace {

using Shape = std::vector<int64_t>;

class Contract {
public:
  Contract(const plan::Variant &v, const plan::Step &s) : v(v), s(s) {}

  Status check() {
    static const std::unordered_map<std::string, std::function<std::string(Contract &)>> contracts = {
#define TEC_KERNEL(name, contract, compiler) {#name, &Contract::contract},
#include "runtime/Kernels.def"
    };
    auto it = contracts.find(s.kernel());
    std::string why = it == contracts.end() ? "no such kernel" : writableOutputs();
    if (why.empty())
      why = it->second(*this);
    if (why.empty())
      return Status::success();
    return Status::error("variant '" + v.target() + "': step '" + s.kernel() + "' (from " + s.source() + "): " + why);
  }

private:
  const plan::Buffer &buf(int i) const { return v.buffers(i); }
  Shape shape(int i) const { return {buf(i).shape().begin(), buf(i).shape().end()}; }
  int64_t count(int i) const {
    return std::accumulate(buf(i).shape().begin(), buf(i).shape().end(), int64_t(1), std::multiplies<>());
  }
  plan::DType dtype(int i) const { return buf(i).dtype(); }
  int rank(int i) const { return buf(i).shape_size(); }
  int in(int k) const { return s.inputs(k); }
  int out(int k) const { return s.outputs(k); }
  static std::string text(const Shape &shape) {
    std::string t = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      t += (i ? "x" : "") + std::to_string(shape[i]);
    return t + "]";
  }
  std::string arity(int minIn, int maxIn, int minOut, int maxOut) const {
    if (s.inputs_size() < minIn || s.inputs_size() > maxIn || s.outputs_size() < minOut || s.outputs_size() > maxOut)
      return "expected " + std::to_string(minIn) + (maxIn != minIn ? "+" : "") + " inputs and " +
             std::to_string(minOut) + (maxOut != minOut ? "+" : "") + " outputs, got " +
             std::to_string(s.inputs_size()) + " and " + std::to_string(s.outputs_size());
    return "";
  }
  std::string writableOutputs() const {
    for (int o : s.outputs()) {
      const auto &root = buf(o).alias_of() >= 0 ? buf(buf(o).alias_of()) : buf(o);
      if (root.role() == plan::PARAM || root.role() == plan::CONSTANT || root.role() == plan::INPUT)
        return "writes '" + buf(o).name() + "', which is read-only (a param, constant or input)";
    }
    return "";
  }
  static bool broadcastsTo(const Shape &from, const Shape &to) {
    if (from.size() > to.size())
      return false;
    for (size_t i = 0; i < from.size(); ++i) {
      int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
      if (f != t && f != 1)
        return false;
    }
    return true;
  }
  std::string sameCount(int a, int b) const {
    return count(a) == count(b) ? "" : "'" + buf(a).name() + "' and '" + buf(b).name() + "' differ in size";
  }
  std::string scalar(int b) const { return count(b) == 1 ? "" : "'" + buf(b).name() + "' must hold one value"; }
  std::string first(std::initializer_list<std::string> problems) const {
    for (const auto &p : problems)
      if (!p.empty())
        return p;
    return "";
  }
  std::string axisIn(int64_t axis, int r) const {
    return axis >= 0 && axis < r ? "" : "axis " + std::to_string(axis) + " is outside rank " + std::to_string(r);
  }

  std::string binary() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    if (dtype(in(0)) != dtype(out(0)) || dtype(in(1)) != dtype(out(0)))
      return "operands of different element types";
    if (!broadcastsTo(shape(in(0)), shape(out(0))) || !broadcastsTo(shape(in(1)), shape(out(0))))
      return "operands " + text(shape(in(0))) + " and " + text(shape(in(1))) + " do not broadcast to " +
             text(shape(out(0)));
    return "";
  }
  std::string floatBinary() {
    if (auto e = binary(); !e.empty())
      return e;
    return steps::isFloat(dtype(out(0))) ? "" : "expected float operands";
  }
  std::string compare() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    if (dtype(in(0)) != dtype(in(1)) || dtype(out(0)) != plan::BOOL)
      return "expected operands of one element type and a bool result";
    if (!steps::compareKind(steps::attrs::predicate(s)))
      return "unknown predicate '" + steps::attrs::predicate(s) + "'";
    if (!broadcastsTo(shape(in(0)), shape(out(0))) || !broadcastsTo(shape(in(1)), shape(out(0))))
      return "operands " + text(shape(in(0))) + " and " + text(shape(in(1))) + " do not broadcast to " +
             text(shape(out(0)));
    return "";
  }
  std::string unary() {
    if (auto e = first({arity(1, 1, 1, 1), sameCount(in(0), out(0))}); !e.empty())
      return e;
    if (dtype(in(0)) != dtype(out(0)))
      return "expected input and output of one element type";
    if (steps::isFloat(dtype(out(0))))
      return "";
    const bool integer = dtype(out(0)) == plan::I32 || dtype(out(0)) == plan::I64;
    return integer && kernels::isIntUnary(steps::unaryKind(s)) ? "" : "expected float operands (integers: abs, neg, sign)";
  }
  std::string activationGrad() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    return first({sameCount(in(0), out(0)), sameCount(in(1), out(0))});
  }
  std::string where() {
    if (auto e = arity(3, 3, 1, 1); !e.empty())
      return e;
    if (dtype(in(0)) != plan::BOOL || dtype(in(1)) != dtype(out(0)) || dtype(in(2)) != dtype(out(0)))
      return "expected a bool condition and values of the output's type";
    for (int k = 0; k < 3; ++k)
      if (!broadcastsTo(shape(in(k)), shape(out(0))))
        return "'" + buf(in(k)).name() + "' does not broadcast to " + text(shape(out(0)));
    return "";
  }
  std::string scalars2to1() { return scalars<2, 1>(); }
  std::string scalars0to1() { return scalars<0, 1>(); }
  std::string scalars1to1() { return scalars<1, 1>(); }
  std::string scalars3to2() { return scalars<3, 2>(); }
  template <int Ins, int Outs> std::string scalars() {
    if (auto e = arity(Ins, Ins, Outs, Outs); !e.empty())
      return e;
    for (int i : s.inputs())
      if (auto e = scalar(i); !e.empty())
        return e;
    for (int o : s.outputs())
      if (auto e = scalar(o); !e.empty())
        return e;
    return "";
  }
  std::string oneHot() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    if (dtype(in(0)) != plan::I32 && dtype(in(0)) != plan::I64)
      return "labels must be integers";
    Shape expected = shape(in(0));
    if (rank(out(0)) == 0)
      return "the output has no class dim";
    expected.push_back(shape(out(0)).back());
    return shape(out(0)) == expected && dtype(out(0)) == plan::F32 ? "" : "the output is not f32 labels x classes";
  }
  std::string allFinite() {
    if (auto e = arity(1, 1 << 20, 1, 1); !e.empty())
      return e;
    return dtype(out(0)) == plan::BOOL ? scalar(out(0)) : "the output must be bool";
  }
  /// all_reduce: f32 tensors in, each output the shape of its input; a sum, max or mean.
  std::string allReduce() {
    if (auto e = arity(1, 1 << 20, 1, 1 << 20); !e.empty())
      return e;
    if (s.inputs_size() != s.outputs_size())
      return "expected one output per input";
    for (int i = 0; i < s.inputs_size(); ++i)
      if (dtype(in(i)) != plan::F32 || dtype(out(i)) != plan::F32 || shape(in(i)) != shape(out(i)))
        return "input " + std::to_string(i) + " and its output must be f32 tensors of one shape";
    const std::string reduction = steps::attrs::reduction(s);
    return reduction == "sum" || reduction == "max" || reduction == "mean"
               ? ""
               : "reduction must be sum, max or mean, got '" + reduction + "'";
  }
  /// reduce_scatter, shard: f32 tensors in, each output its 1-D shard over `ranks`; all_gather the reverse.
  std::string sharding() {
    if (auto e = arity(1, 1 << 20, 1, 1 << 20); !e.empty())
      return e;
    if (s.inputs_size() != s.outputs_size() || (s.kernel() == "shard" && s.inputs_size() != 1))
      return "expected one output per input";
    const int64_t ranks = steps::attrs::ranks(s);
    if (ranks < 1)
      return "ranks must be at least 1, got " + std::to_string(ranks);
    for (int i = 0; i < s.inputs_size(); ++i) {
      const bool gather = s.kernel() == "all_gather";
      const int whole = gather ? out(i) : in(i), shard = gather ? in(i) : out(i);
      if (dtype(whole) != plan::F32 || dtype(shard) != plan::F32 || shape(shard) != Shape{shardElements(count(whole), ranks)})
        return "tensor " + std::to_string(i) + ": expected f32 " + text(shape(whole)) + " and its shard over " +
               std::to_string(ranks) + " ranks, [" + std::to_string(shardElements(count(whole), ranks)) + "], got " +
               text(shape(shard));
    }
    return "";
  }
  std::string cast() { return first({arity(1, 1, 1, 1), sameCount(in(0), out(0))}); }
  /// One input, an output of its shape, an axis of it (softmax, log_softmax, cumsum).
  std::string alongAxis() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    return first({shape(in(0)) == shape(out(0)) ? "" : "input and output shapes differ",
                  axisIn(steps::attrs::axis(s), rank(in(0)))});
  }
  std::string cumSum() {
    return first({alongAxis(), dtype(in(0)) == dtype(out(0)) ? "" : "input and output types differ"});
  }
  /// layer_norm: x, scale[, bias] -> y, mean, rstd; rms_norm: x, scale -> y, rstd.
  std::string layerNorm() {
    const bool rms = s.kernel() == "rms_norm";
    if (auto e = rms ? arity(2, 2, 2, 2) : arity(2, 3, 3, 3); !e.empty())
      return e;
    const steps::NormStep n = steps::readNormStep(s, shape(in(0)));
    if (auto e = axisIn(n.axis, rank(n.x)); !e.empty())
      return e;
    if (shape(n.y) != shape(n.x) || count(n.weight) != n.cols || (n.bias >= 0 && count(n.bias) != n.cols) ||
        count(n.rstd) != n.rows || (n.mean >= 0 && count(n.mean) != n.rows))
      return "scale, bias or statistics do not fit the normalized shape";
    return "";
  }
  std::string attention() {
    auto step = steps::readAttentionStep(s, [&](int i) { return shape(i); }, [&](int i) { return dtype(i); });
    return step.ok() ? "" : step.error().message();
  }
  std::string reduce() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    auto axes = steps::attrs::axes(s);
    std::vector<bool> reduced(rank(in(0)), false);
    int64_t kept = 1;
    for (int64_t a : axes) {
      if (auto e = axisIn(a, rank(in(0))); !e.empty())
        return e;
      if (reduced[a])
        return "axis " + std::to_string(a) + " appears twice";
      reduced[a] = true;
    }
    for (int d = 0; d < rank(in(0)); ++d)
      if (!reduced[d])
        kept *= shape(in(0))[d];
    const bool widens = dtype(out(0)) == plan::F32 && (dtype(in(0)) == plan::BF16 || dtype(in(0)) == plan::F16);
    if (count(out(0)) != kept || (dtype(out(0)) != dtype(in(0)) && !widens))
      return "the output does not hold the kept dims";
    return "";
  }
  std::string matmul() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    Shape a = shape(in(0)), b = shape(in(1));
    if (a.empty() || b.empty())
      return "matmul of a scalar";
    const bool aVector = a.size() == 1, bVector = b.size() == 1;
    if (aVector)
      a.insert(a.begin(), 1);
    if (bVector)
      b.push_back(1);
    if (a.back() != b[b.size() - 2])
      return "inner dims " + text(shape(in(0))) + " x " + text(shape(in(1))) + " do not match";
    Shape aBatch(a.begin(), a.end() - 2), bBatch(b.begin(), b.end() - 2), batch;
    const size_t n = std::max(aBatch.size(), bBatch.size());
    for (size_t i = 0; i < n; ++i) {
      int64_t x = i < n - aBatch.size() ? 1 : aBatch[i - (n - aBatch.size())];
      int64_t y = i < n - bBatch.size() ? 1 : bBatch[i - (n - bBatch.size())];
      if (x != y && x != 1 && y != 1)
        return "batch dims do not broadcast";
      batch.push_back(std::max(x, y));
    }
    if (!aVector)
      batch.push_back(a[a.size() - 2]);
    if (!bVector)
      batch.push_back(b.back());
    return shape(out(0)) == batch ? "" : "the output is not " + text(batch);
  }
  std::string gemm() {
    if (auto e = arity(2, 3, 1, 1); !e.empty())
      return e;
    if (rank(in(0)) != 2 || rank(in(1)) != 2)
      return "A and B must be matrices";
    const bool ta = steps::attrs::transA(s), tb = steps::attrs::transB(s);
    const Shape a = shape(in(0)), b = shape(in(1));
    if (a[ta ? 0 : 1] != b[tb ? 1 : 0])
      return "inner dims do not match";
    const Shape y = {a[ta ? 1 : 0], b[tb ? 0 : 1]};
    if (shape(out(0)) != y)
      return "the output is not " + text(y);
    if (s.inputs_size() > 2 && !broadcastsTo(shape(in(2)), y))
      return "C does not broadcast to " + text(y);
    return "";
  }
  /// y[..., N] = x[..., K] · W (W [N,K] with transpose_b, else [K,N]), bias [N].
  std::string linearShapes(int x, int w, int bias, int y) {
    if (rank(w) != 2 || rank(x) < 1 || rank(y) < 1)
      return "the weight must be a matrix";
    const bool tb = steps::attrs::transposeB(s);
    const int64_t n = shape(y).back(), k = shape(w)[tb ? 1 : 0];
    if (shape(w)[tb ? 0 : 1] != n || shape(x).back() != k)
      return "x " + text(shape(x)) + ", weight " + text(shape(w)) + (tb ? " (transposed)" : "") + " and output " +
             text(shape(y)) + " do not fit";
    if (n && count(x) / k != count(y) / n)
      return "x and the output have different rows";
    if (bias >= 0 && count(bias) != n)
      return "the bias does not have the output's last dim";
    return "";
  }
  std::string linear() {
    if (auto e = arity(2, 3, 1, 1); !e.empty())
      return e;
    return linearShapes(in(0), in(1), s.inputs_size() > 2 ? in(2) : -1, out(0));
  }
  std::string transpose() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    auto perm = steps::attrs::perm(s);
    Shape sorted(perm), expected;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      if (sorted[i] != static_cast<int64_t>(i))
        return "perm is not a permutation";
    if (perm.size() != static_cast<size_t>(rank(in(0))))
      return "perm does not match the rank";
    for (int64_t p : perm)
      expected.push_back(shape(in(0))[p]);
    return shape(out(0)) == expected && dtype(out(0)) == dtype(in(0)) ? "" : "the output is not " + text(expected);
  }
  std::string expand() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    return broadcastsTo(shape(in(0)), shape(out(0))) && dtype(out(0)) == dtype(in(0)) ? ""
                                                                                       : "the input does not broadcast";
  }
  /// Concat and split: pieces equal to the whole but along `axis`, whose sizes add up.
  std::string pieces(int whole, const google::protobuf::RepeatedField<int32_t> &parts) {
    const int64_t axis = steps::attrs::axis(s);
    if (auto e = axisIn(axis, rank(whole)); !e.empty())
      return e;
    int64_t total = 0;
    for (int p : parts) {
      if (rank(p) != rank(whole) || dtype(p) != dtype(whole))
        return "'" + buf(p).name() + "' does not fit " + text(shape(whole));
      for (int d = 0; d < rank(whole); ++d)
        if (d != axis && shape(p)[d] != shape(whole)[d])
          return "'" + buf(p).name() + "' does not fit " + text(shape(whole));
      total += shape(p)[axis];
    }
    return total == shape(whole)[axis] ? "" : "the pieces do not add up along axis " + std::to_string(axis);
  }
  std::string concat() {
    if (auto e = arity(1, 1 << 20, 1, 1); !e.empty())
      return e;
    return pieces(out(0), s.inputs());
  }
  std::string split() {
    if (auto e = arity(1, 1, 1, 1 << 20); !e.empty())
      return e;
    return pieces(in(0), s.outputs());
  }
  std::string slice() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    auto starts = steps::attrs::starts(s), stepsAttr = steps::attrs::sliceSteps(s);
    const Shape x = shape(in(0)), y = shape(out(0));
    if (starts.size() != x.size() || stepsAttr.size() != x.size() || y.size() != x.size())
      return "starts, steps and the output do not match the rank";
    for (size_t d = 0; d < x.size(); ++d) {
      if (y[d] == 0)
        continue;
      const int64_t last = starts[d] + (y[d] - 1) * stepsAttr[d];
      if (stepsAttr[d] == 0 || starts[d] < 0 || starts[d] >= x[d] || last < 0 || last >= x[d])
        return "dim " + std::to_string(d) + " reads outside the input";
    }
    return dtype(out(0)) == dtype(in(0)) ? "" : "the output's type differs";
  }
  std::string gather() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    const int64_t axis = steps::attrs::axis(s);
    if (auto e = axisIn(axis, rank(in(0))); !e.empty())
      return e;
    if (dtype(in(1)) != plan::I32 && dtype(in(1)) != plan::I64)
      return "indices must be integers";
    const Shape data = shape(in(0)), indices = shape(in(1));
    Shape expected(data.begin(), data.begin() + axis);
    expected.insert(expected.end(), indices.begin(), indices.end());
    expected.insert(expected.end(), data.begin() + axis + 1, data.end());
    return shape(out(0)) == expected && dtype(out(0)) == dtype(in(0)) ? "" : "the output is not " + text(expected);
  }
  /// Indices with `full`'s shape off `axis` (gather_elements' data, scatter_add's result).
  std::string indicesAlong(const Shape &full, const Shape &indices, int64_t axis) {
    if (indices.size() != full.size())
      return "indices of rank " + std::to_string(indices.size()) + " for rank " + std::to_string(full.size());
    for (size_t d = 0; d < full.size(); ++d)
      if (static_cast<int64_t>(d) != axis && indices[d] != full[d])
        return "indices " + text(indices) + " differ from " + text(full) + " off the axis";
    return "";
  }
  std::string gatherElements() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    const int64_t axis = steps::attrs::axis(s);
    if (auto e = first({axisIn(axis, rank(in(0))), indicesAlong(shape(in(0)), shape(in(1)), axis)}); !e.empty())
      return e;
    if (dtype(in(1)) != plan::I32 && dtype(in(1)) != plan::I64)
      return "indices must be integers";
    return shape(out(0)) == shape(in(1)) && dtype(out(0)) == dtype(in(0)) ? "" : "the output is not the indices' shape";
  }
  std::string scatterAdd() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    const int64_t axis = steps::attrs::axis(s);
    if (auto e = axisIn(axis, rank(out(0))); !e.empty())
      return e;
    if (dtype(in(1)) != plan::I32 && dtype(in(1)) != plan::I64)
      return "indices must be integers";
    if (!steps::isFloat(dtype(in(0))) || dtype(out(0)) != dtype(in(0)))
      return "expected float updates of the output's type";
    const Shape result = shape(out(0)), indices = shape(in(1));
    if (steps::attrs::elements(s))
      return first({indicesAlong(result, indices, axis),
                    shape(in(0)) == indices ? "" : "updates are not the indices' shape"});
    Shape expected(result.begin(), result.begin() + axis);
    expected.insert(expected.end(), indices.begin(), indices.end());
    expected.insert(expected.end(), result.begin() + axis + 1, result.end());
    return shape(in(0)) == expected ? "" : "the updates are not " + text(expected);
  }
  /// Window steps: 4-D float operands whose shapes agree with the attributes (what readWindowStep reads).
  std::string window() {
    const std::string &k = s.kernel();
    const bool conv = k == "conv";
    if (auto e = arity(k == "pool" ? 1 : 2, conv ? 3 : (k == "pool" ? 1 : 2), 1, 1); !e.empty())
      return e;
    for (int i : s.inputs())
      if (rank(i) != 4 && !(conv && i == s.inputs(s.inputs_size() - 1) && s.inputs_size() == 3))
        return "'" + buf(i).name() + "' is not 4-D";
    if (rank(out(0)) != 4)
      return "the output is not 4-D";
    for (int i : s.inputs())
      if (!steps::isFloat(dtype(i)) || dtype(i) != dtype(out(0)))
        return "expected float operands of the output's type";
    const bool pool = k == "pool" || k == "pool_grad";
    if (steps::attrs::strides(s).size() != 2 || steps::attrs::pads(s).size() != 4 ||
        steps::attrs::dilations(s).size() != 2 || ((pool || k == "conv_weight_grad") && steps::attrs::kernel(s).size() != 2))
      return "expected 2 strides, 4 pads, 2 dilations (and 2 kernel dims)";
    auto read = steps::readWindowStep(s, [&](int i) { return shape(i); });
    if (!read.ok())
      return read.error().message();
    const auto &w = *read;
    const auto &g = w.window;
    if (g.strideH < 1 || g.strideW < 1 || g.dilationH < 1 || g.dilationW < 1 || g.kernelH < 1 || g.kernelW < 1 ||
        g.padTop < 0 || g.padLeft < 0 || g.padBottom < 0 || g.padRight < 0 || g.groups < 1 || g.channels % g.groups ||
        g.outChannels % g.groups)
      return "window attributes out of range";
    auto fits = [&](int64_t in, int64_t kernel, int64_t stride, int64_t padBegin, int64_t padEnd, int64_t dilation,
                    int64_t out) {
      return out == kernels::windowOutput(in, kernel, stride, padBegin, padEnd, dilation, false) ||
             (pool && out == kernels::windowOutput(in, kernel, stride, padBegin, padEnd, dilation, true));
    };
    if (!fits(g.height, g.kernelH, g.strideH, g.padTop, g.padBottom, g.dilationH, g.outHeight) ||
        !fits(g.width, g.kernelW, g.strideW, g.padLeft, g.padRight, g.dilationW, g.outWidth))
      return "the output size does not follow from the window";
    if (pool)
      return g.outChannels == g.channels && (k == "pool" || shape(out(0)) == shape(in(1))) ? "" : "channels differ";
    // The weight: [outChannels, channels / groups, kH, kW] (an input, or the weight gradient's output).
    const Shape weight = k == "conv_weight_grad" ? shape(out(0)) : shape(in(1));
    if (weight != Shape{g.outChannels, g.channels / g.groups, g.kernelH, g.kernelW})
      return "the weight " + text(weight) + " does not fit the channels";
    if (w.bias >= 0 && shape(w.bias) != Shape{g.outChannels})
      return "the bias is not [" + std::to_string(g.outChannels) + "]";
    return "";
  }
  std::string argReduce() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    const int64_t axis = steps::attrs::axis(s);
    if (auto e = axisIn(axis, rank(in(0))); !e.empty())
      return e;
    if (dtype(out(0)) != plan::I64 || !(steps::isFloat(dtype(in(0))) || dtype(in(0)) == plan::I32 ||
                                        dtype(in(0)) == plan::I64))
      return "expected a numeric input and an int64 output";
    Shape expected = shape(in(0));
    if (expected[axis] == 0)
      return "the axis is empty";
    expected.erase(expected.begin() + axis);
    Shape got = shape(out(0));
    if (static_cast<int>(got.size()) == rank(in(0)))
      got.erase(got.begin() + axis);
    return got == expected ? "" : "the output is not the input without the axis";
  }
  std::string copy() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    return buf(in(0)).bytes() == buf(out(0)).bytes() ? "" : "input and output differ in size";
  }
  static bool isFp8(plan::DType t) { return t == plan::F8E4M3FN || t == plan::F8E5M2; }
  std::string quantize() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    if (!steps::isFloat(dtype(in(0))) || !isFp8(dtype(out(0))) || dtype(in(1)) != plan::F32)
      return "expected a float input, an f32 scale and an FP8 output";
    if (steps::attrs::transposeInput(s) &&
        (rank(in(0)) != 2 || shape(out(0)) != Shape{shape(in(0))[1], shape(in(0))[0]}))
      return "a transposed quantize needs a 2-D input and its transpose's shape";
    return first({scalar(in(1)), sameCount(in(0), out(0))});
  }
  std::string castFp8() {
    if (auto e = arity(2, 2, 2, 2); !e.empty())
      return e;
    const std::string a = steps::attrs::activation(s);
    if (a != "none" && a != "gelu" && a != "gelu_tanh")
      return "unknown activation '" + a + "'";
    if (!steps::isFloat(dtype(in(0))) || !isFp8(dtype(out(0))) || dtype(in(1)) != plan::F32 || dtype(out(1)) != plan::F32)
      return "expected a float input, an f32 scale, an FP8 output and an f32 amax";
    return first({scalar(in(1)), scalar(out(1)), sameCount(in(0), out(0))});
  }
  /// dy [..., C], scale -> q, amax, bias_grad [C].
  std::string castFp8BiasGrad() {
    if (auto e = arity(2, 2, 3, 3); !e.empty())
      return e;
    if (!steps::isFloat(dtype(in(0))) || !isFp8(dtype(out(0))) || dtype(in(1)) != plan::F32 ||
        dtype(out(1)) != plan::F32 || dtype(out(2)) != plan::F32)
      return "expected a float input, an f32 scale, an FP8 output and f32 amax and bias gradient";
    if (rank(in(0)) < 2 || count(out(2)) != shape(in(0)).back())
      return "the bias gradient does not hold the input's last dim";
    return first({scalar(in(1)), scalar(out(1)), sameCount(in(0), out(0))});
  }
  /// x, weight, bias?, scale -> q, amax, mean, rstd.
  std::string layerNormFp8() {
    if (auto e = arity(3, 4, 4, 4); !e.empty())
      return e;
    const steps::NormStep n = steps::readNormStep(s, shape(in(0)));
    if (auto e = axisIn(n.axis, rank(n.x)); !e.empty())
      return e;
    if (!steps::isFloat(dtype(n.x)) || !isFp8(dtype(n.y)) || dtype(n.scale) != plan::F32 || dtype(n.amax) != plan::F32 ||
        dtype(n.mean) != plan::F32 || dtype(n.rstd) != plan::F32)
      return "expected a float input, an f32 scale, an FP8 output and f32 amax and statistics";
    if (count(n.weight) != n.cols || (n.bias >= 0 && count(n.bias) != n.cols) || count(n.mean) != n.rows ||
        count(n.rstd) != n.rows)
      return "weight, bias or statistics do not fit the normalized shape";
    if (n.bias >= 0 && dtype(n.bias) != dtype(n.weight))
      return "weight and bias of different element types";
    return first({scalar(n.scale), scalar(n.amax), sameCount(n.x, n.y)});
  }
  std::string dequantize() {
    if (auto e = arity(2, 2, 1, 1); !e.empty())
      return e;
    if (!isFp8(dtype(in(0))) || !steps::isFloat(dtype(out(0))) || dtype(in(1)) != plan::F32)
      return "expected an FP8 input, an f32 scale_inv and a float output";
    return first({scalar(in(1)), sameCount(in(0), out(0))});
  }
  std::string amax() {
    if (auto e = arity(1, 1, 1, 1); !e.empty())
      return e;
    return steps::isFloat(dtype(in(0))) && dtype(out(0)) == plan::F32 ? scalar(out(0)) : "expected float in, f32 out";
  }
  std::string fp8Gemm() {
    if (auto e = arity(4, 5, 1, 1); !e.empty())
      return e;
    if (!isFp8(dtype(in(0))) || !isFp8(dtype(in(1))) || dtype(in(2)) != plan::F32 || dtype(in(3)) != plan::F32)
      return "expected FP8 operands with f32 scale_invs";
    return first({scalar(in(2)), scalar(in(3)), linearShapes(in(0), in(1), s.inputs_size() > 4 ? in(4) : -1, out(0))});
  }
  std::string currentScaling() {
    if (auto e = arity(1, 1, 2, 2); !e.empty())
      return e;
    for (int b : {in(0), out(0), out(1)})
      if (dtype(b) != plan::F32)
        return "expected an f32 amax, scale and scale_inv";
    const double fp8Max = steps::attrs::fp8Max(s), epsilon = steps::attrs::amaxEpsilon(s);
    if (fp8Max != kernels::kE4M3Max && fp8Max != kernels::kE5M2Max)
      return "fp8_max " + std::to_string(fp8Max) + " is neither E4M3's 448 nor E5M2's 57344";
    if (!(epsilon >= 0.0) || epsilon > 3.4e38)
      return "amax_epsilon must be finite and non-negative";
    return first({scalar(in(0)), scalar(out(0)), scalar(out(1))});
  }
  /// A block shape of two extents in [1, 2^20], and a block-scaled tensor's scales: one per block.
  std::string blockScales(int tensor, int scales, const std::vector<int64_t> &block) const {
    if (block.size() != 2 || block[0] < 1 || block[1] < 1 || block[0] > (1 << 20) || block[1] > (1 << 20))
      return "expected a block of two extents in [1, 2^20]";
    const Shape dims = shape(tensor);
    const int64_t cols = dims.empty() ? 1 : dims.back(), rows = cols ? count(tensor) / cols : 0;
    if (dtype(scales) != plan::F32 ||
        count(scales) != ((rows + block[0] - 1) / block[0]) * ((cols + block[1] - 1) / block[1]))
      return "'" + buf(scales).name() + "' does not hold one f32 per block of " + text(Shape(block.begin(), block.end())) +
             " of '" + buf(tensor).name() + "'";
    return "";
  }
  std::string quantizeBlocks() {
    if (auto e = arity(1, 1, 2, 2); !e.empty())
      return e;
    if (!steps::isFloat(dtype(in(0))) || !isFp8(dtype(out(0))))
      return "expected a float input and an FP8 output";
    const std::string type = steps::attrs::scaleType(s);
    if (type != "f32" && type != "pow2" && type != "e8m0")
      return "unknown scale_type '" + type + "'";
    const double epsilon = steps::attrs::amaxEpsilon(s);
    if (!(epsilon >= 0.0) || epsilon > 3.4e38)
      return "amax_epsilon must be finite and non-negative";
    if (steps::attrs::transposeInput(s) &&
        (rank(in(0)) != 2 || shape(out(0)) != Shape{shape(in(0))[1], shape(in(0))[0]}))
      return "a transposed quantize needs a 2-D input and its transpose's shape";
    return first({sameCount(in(0), out(0)), blockScales(out(0), out(1), steps::attrs::block(s))});
  }
  std::string fp8BlockGemm() {
    if (auto e = arity(4, 5, 1, 1); !e.empty())
      return e;
    if (!isFp8(dtype(in(0))) || !isFp8(dtype(in(1))) || !steps::isFloat(dtype(out(0))))
      return "expected FP8 operands and a float output";
    return first({linearShapes(in(0), in(1), s.inputs_size() > 4 ? in(4) : -1, out(0)),
                  blockScales(in(0), in(2), steps::attrs::inputBlock(s)),
                  blockScales(in(1), in(3), steps::attrs::weightBlock(s))});
  }
  std::string delayedScaling() {
    if (auto e = arity(3, 3, 3, 3); !e.empty())
      return e;
    for (int b : {in(0), in(1), in(2), out(0), out(1), out(2)})
      if (dtype(b) != plan::F32)
        return "expected f32 state";
    if (count(in(0)) < 1 || count(in(0)) > 65536 || count(out(0)) != count(in(0)))
      return "the amax history must hold 1 to 65536 values, the same before and after";
    const int64_t margin = steps::attrs::margin(s);
    if (margin < -64 || margin > 64)
      return "margin " + std::to_string(margin) + " is outside [-64, 64]";
    return first({scalar(in(1)), scalar(in(2)), scalar(out(1)), scalar(out(2))});
  }
  std::string optimizerUpdate() {
    auto o = steps::readOptimizerStep(s);
    if (!o.ok())
      return o.error().message();
    for (int b : o->moments)
      if (auto e = sameCount(b, o->param); !e.empty())
        return e;
    for (int b : o->newMoments)
      if (auto e = sameCount(b, o->param); !e.empty())
        return e;
    for (int b : {o->param, o->grad, o->newParam})
      if (dtype(b) != plan::F32)
        return "params and gradients must be f32";
    return first({sameCount(o->grad, o->param), sameCount(o->newParam, o->param), scalar(o->lr), scalar(o->step)});
  }

  const plan::Variant &v;
  const plan::Step &s;
};

} // namespace

Status checkStepContract(const plan::Variant &variant, const plan::Step &step) {
  return Contract(variant, step).check();
}

} // namespace tec
