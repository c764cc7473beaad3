// The CPU transpose against its definition, y[out index] = x[the input index the permutation names], on
// shapes large enough for its tiled path (the input's last dim moved), for 1-, 2- and 4-byte elements.
#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

using namespace tec::kernels::cpu;

namespace {

template <typename E> void expectTransposed(const Shape &in, const std::vector<int64_t> &perm) {
  const int64_t n = numElements(in), rank = static_cast<int64_t>(in.size());
  std::vector<E> x(n), y(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<E>(i * 2654435761u);
  transpose(x.data(), in, perm, y.data(), sizeof(E));
  Shape out(rank);
  for (int64_t d = 0; d < rank; ++d)
    out[d] = in[perm[d]];
  std::vector<int64_t> inStrides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    inStrides[d] = inStrides[d + 1] * in[d + 1];
  std::vector<int64_t> index(rank, 0);
  for (int64_t o = 0; o < n; ++o) {
    int64_t source = 0;
    for (int64_t d = 0; d < rank; ++d)
      source += index[d] * inStrides[perm[d]];
    ASSERT_EQ(y[o], x[source]) << "output element " << o;
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == out[d]; --d)
      index[d] = 0;
  }
}

} // namespace

TEST(Transpose, MatchesItsDefinitionOnTiledShapes) {
  expectTransposed<uint32_t>({512, 1000}, {1, 0});      // a weight gradient's [R, C] -> [C, R], ragged tiles
  expectTransposed<uint32_t>({4, 130, 3, 64}, {0, 2, 3, 1}); // the input's last dim to the middle
  expectTransposed<uint16_t>({2, 33, 70, 5}, {3, 2, 1, 0});
  expectTransposed<uint8_t>({300, 97}, {1, 0});          // FP8 codes
  expectTransposed<uint32_t>({8, 128, 4, 32}, {0, 2, 1, 3}); // attention heads: the last dim stays (strided copy)
  expectTransposed<uint32_t>({2, 3, 50, 70}, {0, 2, 3, 1});  // an RGB image to channels-last: short output lines
  expectTransposed<uint32_t>({1, 16, 9, 300}, {0, 2, 3, 1}); // longer runs of a than a tile's, one ragged
  expectTransposed<uint32_t>({1, 4, 40, 50}, {0, 2, 3, 1});  // RGBA
  expectTransposed<uint16_t>({2, 3, 30, 70}, {0, 2, 3, 1});  // an RGB image in half precision
  expectTransposed<uint32_t>({5, 3, 4, 300}, {3, 0, 2, 1});  // lines of 3, but not adjacent in the output
}
