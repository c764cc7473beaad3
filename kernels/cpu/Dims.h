// Dims and strides inside the CPU kernels: room for 8 inline, so that working out a step's strides and
// walking its coordinates allocates nothing (a heap array only past rank 8).
#ifndef TEC_KERNELS_CPU_DIMS_H
#define TEC_KERNELS_CPU_DIMS_H

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace tec::kernels::cpu {

class Dims {
public:
  Dims() = default;
  explicit Dims(size_t n, int64_t value = 0) { assign(n, value); }
  template <typename It, typename = decltype(*std::declval<It>())> Dims(It first, It last) {
    for (; first != last; ++first)
      push_back(*first);
  }
  Dims(std::initializer_list<int64_t> values) : Dims(values.begin(), values.end()) {}
  Dims(const std::vector<int64_t> &values) : Dims(values.begin(), values.end()) {}
  Dims(const Dims &other) : Dims(other.begin(), other.end()) {}
  Dims &operator=(const Dims &other) {
    if (this != &other) {
      clear();
      for (int64_t v : other)
        push_back(v);
    }
    return *this;
  }

  void assign(size_t n, int64_t value) {
    clear();
    for (size_t i = 0; i < n; ++i)
      push_back(value);
  }
  void push_back(int64_t v) {
    if (count < kInline) {
      inline_[count] = v;
    } else {
      if (count == kInline)
        heap.assign(inline_, inline_ + kInline);
      heap.push_back(v);
    }
    ++count;
  }
  void clear() {
    count = 0;
    heap.clear();
  }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  int64_t *data() { return count > kInline ? heap.data() : inline_; }
  const int64_t *data() const { return count > kInline ? heap.data() : inline_; }
  int64_t *begin() { return data(); }
  int64_t *end() { return data() + count; }
  const int64_t *begin() const { return data(); }
  const int64_t *end() const { return data() + count; }
  int64_t &operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t &back() { return data()[count - 1]; }
  int64_t back() const { return data()[count - 1]; }

private:
  static constexpr size_t kInline = 8;
  int64_t inline_[kInline] = {};
  std::vector<int64_t> heap;
  size_t count = 0;
};

/// Strides of a contiguous tensor of `shape` broadcast (right-aligned) to `out`: 0 along broadcast dims.
inline Dims broadcastStrides(const Dims &shape, const Dims &out) {
  Dims strides(out.size(), 0);
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1, o = static_cast<int64_t>(out.size()) - 1; i >= 0;
       --i, --o) {
    strides[o] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

} // namespace tec::kernels::cpu

#endif
