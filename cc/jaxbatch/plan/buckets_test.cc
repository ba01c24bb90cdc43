// Tests for plan/buckets: the histogram, the bucket cost and the exact
// dynamic program, checked against brute force over every boundary subset.
#include "jaxbatch/plan/buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <vector>

namespace jaxbatch {
namespace {

// Reference histogram: a std::map from rounded length to count.
LengthHistogram NaiveHistogram(const std::vector<int64_t>& lengths,
                               const std::vector<int64_t>& order, int64_t multiple) {
  std::map<int64_t, int64_t> counts;
  const size_t n = order.empty() ? lengths.size() : order.size();
  for (size_t k = 0; k < n; ++k) {
    int64_t l = lengths[order.empty() ? k : static_cast<size_t>(order[k])];
    int64_t rounded = multiple;
    while (rounded < l) rounded += multiple;
    ++counts[rounded];
  }
  LengthHistogram h;
  for (const auto& [value, count] : counts) {
    h.values.push_back(value);
    h.counts.push_back(count);
  }
  return h;
}

TEST(RoundedHistogramTest, RoundsUpAndCounts) {
  const std::vector<int64_t> lengths = {5, 1, 0, 8, 3, 5, 9};
  LengthHistogram h = RoundedHistogram(lengths, {}, 4);
  EXPECT_EQ(h.values, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(h.counts, (std::vector<int64_t>{3, 3, 1}));

  h = RoundedHistogram(lengths, {}, 1);  // An empty example still counts as 1.
  EXPECT_EQ(h.values, (std::vector<int64_t>{1, 3, 5, 8, 9}));
  EXPECT_EQ(h.counts, (std::vector<int64_t>{2, 1, 2, 1, 1}));

  const std::vector<int64_t> order = {6, 0, 3};  // Only these examples.
  h = RoundedHistogram(lengths, order, 4);
  EXPECT_EQ(h.values, (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(h.counts, (std::vector<int64_t>{2, 1}));

  h = RoundedHistogram({}, {}, 8);
  EXPECT_TRUE(h.values.empty());
  EXPECT_TRUE(h.counts.empty());
}

TEST(RoundedHistogramTest, MatchesNaiveHistogram) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    std::vector<int64_t> lengths(static_cast<size_t>(n));
    for (int64_t& l : lengths) l = std::uniform_int_distribution<int64_t>(0, 50)(rng);
    std::vector<int64_t> order;
    if (trial % 2 == 1) {
      for (int64_t i = 0; i < n; ++i) {
        if (rng() % 3 != 0) order.push_back(i);
      }
      std::shuffle(order.begin(), order.end(), rng);
      if (order.empty()) continue;  // Empty means all examples.
    }
    const int64_t multiple = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    const LengthHistogram got = RoundedHistogram(lengths, order, multiple);
    const LengthHistogram want = NaiveHistogram(lengths, order, multiple);
    EXPECT_EQ(got.values, want.values);
    EXPECT_EQ(got.counts, want.counts);
  }
}

TEST(BucketCostTest, PadsTheLastBatchOnlyWhenAsked) {
  EXPECT_EQ(BucketCost(10, 7, 3, false), 70);
  EXPECT_EQ(BucketCost(10, 7, 3, true), 90);  // 3 batches of 3 rows.
  EXPECT_EQ(BucketCost(10, 6, 3, true), 60);
  EXPECT_EQ(BucketCost(10, 1, 8, true), 80);
  EXPECT_EQ(BucketCost(10, 0, 8, true), 0);
  EXPECT_EQ(BucketCost(4, 5, 1, true), 20);
}

// Summed BucketCost of `boundaries` over the histogram, or max on a value
// above the last boundary.
int64_t BoundariesCost(const LengthHistogram& h, const std::vector<int64_t>& boundaries,
                       const std::function<int64_t(int64_t)>& rows, bool pad) {
  std::vector<int64_t> count(boundaries.size(), 0);
  for (size_t j = 0; j < h.values.size(); ++j) {
    size_t b = 0;
    while (b < boundaries.size() && boundaries[b] < h.values[j]) ++b;
    if (b == boundaries.size()) return std::numeric_limits<int64_t>::max();
    count[b] += h.counts[j];
  }
  int64_t cost = 0;
  for (size_t b = 0; b < boundaries.size(); ++b) {
    const int64_t r = rows(boundaries[b]);
    const int64_t batches = pad ? (count[b] + r - 1) / r : 0;
    cost += pad ? boundaries[b] * r * batches : boundaries[b] * count[b];
  }
  return cost;
}

// Brute force: every subset of values[0, m-1) plus the last value, with at
// most max_shapes boundaries.
int64_t BruteForceCost(const LengthHistogram& h, int64_t max_shapes,
                       const std::function<int64_t(int64_t)>& rows, bool pad) {
  const size_t m = h.values.size();
  int64_t best = std::numeric_limits<int64_t>::max();
  for (uint32_t mask = 0; mask < (1u << (m - 1)); ++mask) {
    std::vector<int64_t> boundaries;
    for (size_t j = 0; j + 1 < m; ++j) {
      if (mask & (1u << j)) boundaries.push_back(h.values[j]);
    }
    boundaries.push_back(h.values[m - 1]);
    if (static_cast<int64_t>(boundaries.size()) > max_shapes) continue;
    best = std::min(best, BoundariesCost(h, boundaries, rows, pad));
  }
  return best;
}

struct RandomCase {
  LengthHistogram histogram;
  int64_t max_shapes;
  std::function<int64_t(int64_t)> rows;
};

RandomCase MakeCase(std::mt19937& rng, bool token_budget) {
  RandomCase c;
  const int m = std::uniform_int_distribution<int>(1, 10)(rng);
  std::vector<int64_t> values;
  while (static_cast<int>(values.size()) < m) {
    const int64_t v = std::uniform_int_distribution<int64_t>(1, 64)(rng);
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  c.histogram.values = values;
  for (int j = 0; j < m; ++j) {
    c.histogram.counts.push_back(std::uniform_int_distribution<int64_t>(1, 12)(rng));
  }
  c.max_shapes = std::uniform_int_distribution<int64_t>(1, m + 1)(rng);
  if (token_budget) {
    const int64_t budget = std::uniform_int_distribution<int64_t>(values.back(), 4 * 64)(rng);
    c.rows = [budget](int64_t length) { return budget / length; };
  } else {
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    c.rows = [batch](int64_t) { return batch; };
  }
  return c;
}

void CheckAgainstBruteForce(uint32_t seed, bool token_budget, bool pad) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const RandomCase c = MakeCase(rng, token_budget);
    const std::vector<int64_t> got = OptimalBoundaries(c.histogram, c.max_shapes, c.rows, pad);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " m=" << c.histogram.values.size()
                                      << " max_shapes=" << c.max_shapes);
    ASSERT_FALSE(got.empty());
    EXPECT_LE(static_cast<int64_t>(got.size()), c.max_shapes);
    EXPECT_EQ(got.back(), c.histogram.values.back());
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end());
    for (int64_t b : got) {
      EXPECT_NE(std::find(c.histogram.values.begin(), c.histogram.values.end(), b),
                c.histogram.values.end());
    }
    EXPECT_EQ(BoundariesCost(c.histogram, got, c.rows, pad),
              BruteForceCost(c.histogram, c.max_shapes, c.rows, pad));
  }
}

TEST(OptimalBoundariesTest, BatchSizePadRemainderMatchesBruteForce) {
  CheckAgainstBruteForce(1, /*token_budget=*/false, /*pad=*/true);
}

TEST(OptimalBoundariesTest, BatchSizeKeepRemainderMatchesBruteForce) {
  CheckAgainstBruteForce(2, /*token_budget=*/false, /*pad=*/false);
}

TEST(OptimalBoundariesTest, TokenBudgetPadRemainderMatchesBruteForce) {
  CheckAgainstBruteForce(3, /*token_budget=*/true, /*pad=*/true);
}

TEST(OptimalBoundariesTest, TokenBudgetKeepRemainderMatchesBruteForce) {
  CheckAgainstBruteForce(4, /*token_budget=*/true, /*pad=*/false);
}

TEST(OptimalBoundariesTest, EdgeCases) {
  auto rows = [](int64_t) { return int64_t{4}; };
  EXPECT_TRUE(OptimalBoundaries({}, 3, rows, true).empty());
  const LengthHistogram h = {{2, 5, 9, 30}, {3, 1, 4, 1}};
  // One shape: everything pads to the longest.
  EXPECT_EQ(OptimalBoundaries(h, 1, rows, false), (std::vector<int64_t>{30}));
  // Enough shapes and no padded remainder: every distinct length is its own
  // bucket, the only way to pay nothing for padding.
  EXPECT_EQ(OptimalBoundaries(h, 4, rows, false), (std::vector<int64_t>{2, 5, 9, 30}));
  EXPECT_EQ(OptimalBoundaries(h, 100, rows, false), (std::vector<int64_t>{2, 5, 9, 30}));
  // With a padded remainder of 4 rows, one shared batch beats two
  // almost-empty ones.
  const LengthHistogram tiny = {{1, 2}, {1, 1}};
  // Separate: 1*4 + 2*4 = 12; merged: 2*4*1 = 8.
  EXPECT_EQ(OptimalBoundaries(tiny, 2, rows, true), (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace jaxbatch
