#include "kernels/cpu/ElementwiseChain.h"

#include <algorithm>
#include <vector>

namespace tec::kernels::cpu {

namespace {

/// Elements per op in one pass: a chain's values for a span (2 KiB each) stay in L1.
constexpr int64_t kSpan = 512;

/// How a tensor with these broadcast strides reads the trailing dims of `out` from `first` on: whole
/// (contiguous, as the output is laid out: 1), one value for all of them (0), or neither (-1).
int64_t trailingAccess(const Dims &strides, const Dims &out, size_t first) {
  bool whole = true, single = true;
  int64_t contiguous = 1;
  for (size_t d = out.size(); d-- > first;) {
    if (out[d] != 1) {
      whole = whole && strides[d] == contiguous;
      single = single && strides[d] == 0;
    }
    contiguous *= out[d];
  }
  return whole ? 1 : single ? 0 : -1;
}

} // namespace

ElementwiseChain::ElementwiseChain(Shape shape, std::vector<Op> ops) : shape_(std::move(shape)), ops_(std::move(ops)) {
  const Dims out(shape_);
  std::vector<Dims> strides;
  for (const Op &op : ops_)
    for (const Operand *o : {&op.a, &op.b})
      strides.push_back(o->op < 0 && o->data ? broadcastStrides(Dims(o->shape), out) : Dims(out.size(), 0));
  // A row: as many trailing dims as every tensor reads whole or as one value (at least the last), so that
  // a span of a row is a pointer and a stride of 0 or 1 for each.
  size_t first = out.size() ? out.size() - 1 : 0;
  auto rowFits = [&](size_t from) {
    return std::all_of(strides.begin(), strides.end(), [&](const Dims &s) { return trailingAccess(s, out, from) >= 0; });
  };
  while (first > 0 && rowFits(first - 1))
    --first;
  outer_ = Dims(out.begin(), out.begin() + first);
  for (size_t d = first; d < out.size(); ++d)
    inner_ *= out[d];
  for (size_t i = 0; i < strides.size(); ++i) {
    const Operand &o = i % 2 ? ops_[i / 2].b : ops_[i / 2].a;
    const Dims outerStrides(strides[i].begin(), strides[i].begin() + first);
    access_.push_back({o.data, outerStrides, out.size() ? trailingAccess(strides[i], out, first) : 0,
                       std::all_of(outerStrides.begin(), outerStrides.end(), [](int64_t s) { return s == 0; })});
  }
  spanRows_ = rowsPerSpan();
}

// A chain over short rows (NHWC's channels: ConvNeXt's layer scale and residual add over 3,136 rows of 40)
// ran every op once per row, and fused it took 1.4x the time of its ops run one by one. Several rows make one
// span where each tensor operand's row r lies at r * inner (the output's layout) or is one row (or a scalar)
// for every r, laid out along the span once per task.
int64_t ElementwiseChain::rowsPerSpan() const {
  if (2 * inner_ > kSpan)
    return 1;
  for (const Access &a : access_) {
    if (!a.data || a.sameRowEveryRow)
      continue;
    if (a.innerStride != 1)
      return 1;
    int64_t contiguous = inner_;
    bool layout = true;
    for (size_t d = outer_.size(); d-- > 0; contiguous *= outer_[d])
      layout = layout && (outer_[d] == 1 || a.outerStrides[d] == contiguous);
    if (!layout)
      return 1;
  }
  return kSpan / inner_;
}

void ElementwiseChain::run() const {
  int64_t rows = 1;
  for (int64_t d : outer_)
    rows *= d;
  if (!rows || !inner_)
    return;
  const int64_t n = static_cast<int64_t>(ops_.size()), slots = static_cast<int64_t>(access_.size());
  const int64_t rank = static_cast<int64_t>(outer_.size());
  const int64_t rowsPerTask = std::max<int64_t>(1, kParallelThreshold / inner_);
  // A row longer than a task (a chain over contiguous tensors is one row: the whole tensor) is cut into
  // pieces of whole spans, so that it too spreads over the pool; each element is computed alike anyway.
  const int64_t pieceLength = (kParallelThreshold + kSpan - 1) / kSpan * kSpan;
  const int64_t pieces = rowsPerTask == 1 ? (inner_ + pieceLength - 1) / pieceLength : 1;
  const int64_t columns = pieces == 1 ? inner_ : pieceLength;
  const int64_t tasks = (rows + rowsPerTask - 1) / rowsPerTask * pieces;
  parallelLoop(tasks, rows * inner_ * n, [&](int64_t t) {
    const int64_t begin = t / pieces * rowsPerTask, end = std::min(rows, begin + rowsPerTask);
    const int64_t firstColumn = t % pieces * columns, endColumn = std::min(inner_, firstColumn + columns);
    float *scratch = threadScratch(n * kSpan); // a span per op
    auto apply = [&](int64_t i, const float *a, int64_t sa, const float *b, int64_t sb, int64_t len, int64_t at) {
      const Op &op = ops_[i];
      float *y = op.out ? op.out + at : scratch + i * kSpan;
      switch (op.kind) {
      case Kind::Unary:
        if (sa == 0) { // one value for the whole span
          std::fill(y, y + len, *a);
          a = y;
        }
        unarySpan(op.unary, a, y, len);
        break;
      case Kind::Binary:
        binarySpan(op.binary, a, sa, b, sb, y, len);
        break;
      case Kind::ActivationGrad:
        if (sa == 1 && sb == 1)
          activationGradSpan(op.grad, a, b, y, len);
        else
          for (int64_t j = 0; j < len; ++j)
            activationGradSpan(op.grad, a + j * sa, b + j * sb, y + j, 1);
        break;
      }
    };
    auto value = [&](int64_t op, int64_t at) -> const float * {
      return ops_[op].out ? ops_[op].out + at : scratch + op * kSpan;
    };
    if (spanRows_ > 1) {
      thread_local std::vector<float> tiles; // per operand of the same row for every row: the row repeated
      tiles.resize(slots * spanRows_ * inner_);
      for (int64_t k = 0; k < slots; ++k)
        if (access_[k].data && access_[k].sameRowEveryRow)
          for (int64_t r = 0; r < spanRows_; ++r) {
            float *tile = tiles.data() + (k * spanRows_ + r) * inner_;
            if (access_[k].innerStride)
              std::copy(access_[k].data, access_[k].data + inner_, tile);
            else // a scalar
              std::fill(tile, tile + inner_, *access_[k].data);
          }
      auto operand = [&](const Operand &o, int64_t slot, int64_t at) -> const float * {
        if (o.op >= 0)
          return value(o.op, at);
        if (!o.data)
          return nullptr;
        return access_[slot].sameRowEveryRow ? tiles.data() + slot * spanRows_ * inner_ : o.data + at;
      };
      for (int64_t row = begin; row < end; row += spanRows_) {
        const int64_t len = std::min(spanRows_, end - row) * inner_, at = row * inner_;
        for (int64_t i = 0; i < n; ++i)
          apply(i, operand(ops_[i].a, 2 * i, at), 1, operand(ops_[i].b, 2 * i + 1, at), 1, len, at);
      }
      return;
    }
    thread_local std::vector<int64_t> walk;     // each tensor's offset at the row, then the row's coordinates
    walk.assign(slots + rank, 0);               // no allocation once it has grown
    int64_t *offset = walk.data(), *coord = offset + slots;
    for (int64_t d = rank - 1, rest = begin; d >= 0; --d) {
      coord[d] = rest % outer_[d];
      rest /= outer_[d];
      for (int64_t k = 0; k < slots; ++k)
        offset[k] += coord[d] * access_[k].outerStrides[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t c0 = firstColumn; c0 < endColumn; c0 += kSpan) {
        const int64_t len = std::min(kSpan, endColumn - c0), at = row * inner_ + c0;
        auto operand = [&](const Operand &o, int64_t slot, int64_t &stride) -> const float * {
          stride = 1;
          if (o.op >= 0)
            return value(o.op, at);
          if (!o.data)
            return nullptr;
          stride = access_[slot].innerStride;
          return access_[slot].data + offset[slot] + c0 * stride;
        };
        for (int64_t i = 0; i < n; ++i) {
          int64_t sa = 1, sb = 1;
          const float *a = operand(ops_[i].a, 2 * i, sa), *b = operand(ops_[i].b, 2 * i + 1, sb);
          apply(i, a, sa, b, sb, len, at);
        }
      }
      for (int64_t d = rank - 1; d >= 0; --d) {
        for (int64_t k = 0; k < slots; ++k)
          offset[k] += access_[k].outerStrides[d];
        if (++coord[d] < outer_[d])
          break;
        for (int64_t k = 0; k < slots; ++k)
          offset[k] -= access_[k].outerStrides[d] * outer_[d];
        coord[d] = 0;
      }
    }
  });
}

} // namespace tec::kernels::cpu
