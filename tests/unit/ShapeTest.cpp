// The shape rules the verifiers and the importer share, against numpy's rules.
#include "ir/TecOps.h"

#include <gtest/gtest.h>

#include <limits>

using namespace tec;

TEST(Shape, BroadcastFollowsNumpy) {
  EXPECT_EQ(*shape::broadcast({4, 1, 8}, {3, 1}), (shape::Dims{4, 3, 8}));
  EXPECT_EQ(*shape::broadcast({}, {2, 3}), (shape::Dims{2, 3}));
  EXPECT_EQ(*shape::broadcast({0, 1}, {1, 5}), (shape::Dims{0, 5}));
  EXPECT_FALSE(shape::broadcast({4, 3}, {2, 3}).has_value());
}

TEST(Shape, MatmulPromotesVectorsAndBroadcastsBatches) {
  EXPECT_EQ(*shape::matmul({2, 1, 4, 8}, {3, 8, 5}), (shape::Dims{2, 3, 4, 5}));
  EXPECT_EQ(*shape::matmul({8}, {8, 5}), (shape::Dims{5}));
  EXPECT_EQ(*shape::matmul({4, 8}, {8}), (shape::Dims{4}));
  EXPECT_EQ(*shape::matmul({8}, {8}), (shape::Dims{}));
  EXPECT_FALSE(shape::matmul({4, 8}, {7, 5}).has_value());
}

TEST(Shape, SliceLengthMatchesPythonRange) {
  for (int64_t start = -1; start <= 6; ++start)
    for (int64_t end = -1; end <= 6; ++end)
      for (int64_t step : {-3, -2, -1, 1, 2, 3}) {
        int64_t expected = 0;
        for (int64_t i = start; step > 0 ? i < end : i > end; i += step)
          ++expected;
        EXPECT_EQ(shape::sliceLength(start, end, step), expected) << start << ":" << end << ":" << step;
      }
  // Steps at int64's ends take one element, and nothing overflows (the folding fuzzer found the overflow).
  constexpr int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(shape::sliceLength(0, 3, max), 1);
  EXPECT_EQ(shape::sliceLength(2, -1, min), 1);
  EXPECT_EQ(shape::sliceLength(2, -1, -max), 1);
  EXPECT_EQ(shape::sliceLength(0, max, max), 1);
  EXPECT_EQ(shape::sliceLength(0, max, 1), max);
}

TEST(Shape, ElementCountDetectsOverflowAndNegativeDims) {
  EXPECT_EQ(*shape::elementCount({2, 3, 4}), 24);
  EXPECT_EQ(*shape::elementCount({}), 1);
  EXPECT_FALSE(shape::elementCount({std::numeric_limits<int64_t>::max() / 2, 3}).has_value());
  EXPECT_FALSE(shape::elementCount({4, -1}).has_value());
}
