// Tests for the grid planners (grid_planner.h): plans over (h, w) sizes
// checked against a slow reference written out here.
#include "jaxbatch/plan/grid_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/grid_buckets.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

// Expects `f` to throw an InvalidArgumentError whose message has `part`.
template <typename F>
void ExpectMessageHas(F&& f, const std::string& part) {
  const std::string message = testing::ThrownMessage<InvalidArgumentError>(std::forward<F>(f));
  EXPECT_TRUE(testing::Contains(message, part)) << message;
}

const std::vector<int64_t> kHeights = {5, 3, 9, 2, 7, 1, 4};
const std::vector<int64_t> kWidths = {2, 8, 3, 3, 1, 6, 4};

// Every example id planned, each once, in a row of a batch whose shape holds it.
void ExpectCoversOnce(const BatchPlan& plan, std::span<const int64_t> heights,
                      std::span<const int64_t> widths) {
  std::vector<int> seen(heights.size(), 0);
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t e : view.all_examples()) {
      ++seen[static_cast<size_t>(e)];
      EXPECT_LE(heights[static_cast<size_t>(e)], view.shape.length) << "batch " << b;
      EXPECT_LE(widths[static_cast<size_t>(e)], view.shape.width) << "batch " << b;
    }
  }
  for (int64_t e : plan.dropped_examples) ++seen[static_cast<size_t>(e)];
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST(GridPadToMaxTest, EachAxisPadsToTheBatchLargest) {
  const BatchPlan plan = Plan(kHeights, PadToMaxOptions{.batch_size = 3}, {}, {}, kWidths);
  CheckPlan(plan);
  EXPECT_TRUE(plan.grid);
  ASSERT_EQ(plan.num_batches(), 3);
  // Batches {5x2, 3x8, 9x3}, {2x3, 7x1, 1x6}, {4x4} padded with rows.
  EXPECT_EQ(plan.batch(0).shape, (BatchShape{.rows = 3, .length = 9, .width = 8}));
  EXPECT_EQ(plan.batch(1).shape, (BatchShape{.rows = 3, .length = 7, .width = 6}));
  EXPECT_EQ(plan.batch(2).shape, (BatchShape{.rows = 3, .length = 4, .width = 4}));
  int64_t real = 0;
  for (size_t i = 0; i < kHeights.size(); ++i) real += kHeights[i] * kWidths[i];
  EXPECT_EQ(plan.stats.real_elements, real);
  EXPECT_EQ(plan.stats.padded_elements, 3 * 9 * 8 + 3 * 7 * 6 + 3 * 4 * 4);
  EXPECT_EQ(plan.stats.occupied_elements, 3 * 9 * 8 + 3 * 7 * 6 + 1 * 4 * 4);
  EXPECT_EQ(PaddedElements(plan.batch(0).shape, false), 3 * 9 * 8);
  EXPECT_EQ(RealElements(plan.batch(2), kHeights, false, kWidths), 16);
  ExpectCoversOnce(plan, kHeights, kWidths);
}

TEST(GridPadToMaxTest, PadToMultipleRoundsBothAxesAndRemainderKeeps) {
  const BatchPlan plan = Plan(
      kHeights,
      PadToMaxOptions{
          .batch_size = 4, .pad_to_multiple = 4, .remainder = Remainder::kKeep, .rows_multiple = 2},
      {}, {}, kWidths);
  ASSERT_EQ(plan.num_batches(), 2);
  EXPECT_EQ(plan.batch(0).shape, (BatchShape{.rows = 4, .length = 12, .width = 8}));
  // 3 examples kept, rounded up to rows_multiple.
  EXPECT_EQ(plan.batch(1).shape, (BatchShape{.rows = 4, .length = 8, .width = 8}));
  const BatchPlan dropped = Plan(
      kHeights, PadToMaxOptions{.batch_size = 4, .remainder = Remainder::kDrop}, {}, {}, kWidths);
  EXPECT_EQ(dropped.num_batches(), 1);
  EXPECT_EQ(dropped.stats.dropped, 3);
  ExpectCoversOnce(dropped, kHeights, kWidths);
}

TEST(GridPadToMaxTest, SquareDataKeepsSquareShapes) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> sizes(50);
  for (int64_t& s : sizes) s = static_cast<int64_t>(rng() % 40);
  const BatchPlan plan =
      Plan(sizes, PadToMaxOptions{.batch_size = 6, .pad_to_multiple = 3}, {}, {}, sizes);
  for (const BatchShape& shape : plan.shapes) EXPECT_EQ(shape.length, shape.width);
  ExpectCoversOnce(plan, sizes, sizes);
}

TEST(GridPlanTest, OrderIsFollowed) {
  const std::vector<int64_t> order = {6, 0, 2};
  const BatchPlan plan = Plan(kHeights, PadToMaxOptions{.batch_size = 2}, order, {}, kWidths);
  ASSERT_EQ(plan.num_batches(), 2);
  EXPECT_EQ(plan.batch(0).shape, (BatchShape{.rows = 2, .length = 5, .width = 4}));
  EXPECT_EQ(plan.batch(1).shape, (BatchShape{.rows = 2, .length = 9, .width = 3}));
  EXPECT_EQ(plan.stats.examples, 3);
}

TEST(GridPlanTest, BadSizesAndPlannersAreNamed) {
  ExpectMessageHas(
      [&] { Plan(kHeights, PadToMaxOptions{.batch_size = 2}, {}, {}, std::vector<int64_t>{1}); },
      "expected one width per height (7), found 1 widths");
  std::vector<int64_t> widths = kWidths;
  widths[3] = -1;
  ExpectMessageHas([&] { Plan(kHeights, PadToMaxOptions{.batch_size = 2}, {}, {}, widths); },
                   "example 3: expected a width >= 0, found -1");
  ExpectMessageHas(
      [&] { Plan(kHeights, PackOptions{.row_length = 8, .rows_per_batch = 2}, {}, {}, kWidths); },
      "Pack: plans one length per example");
  ExpectMessageHas(
      [&] {
        CheckExamplesFit(std::vector<int64_t>{int64_t{1} << 40}, PadToMaxOptions{.batch_size = 2},
                         {}, std::vector<int64_t>{int64_t{1} << 40});
      },
      "PadToMax: pad_to_multiple=1 rounds size");
}

// The least summed cost over every set of at most `k` shapes drawn from
// (distinct h) x (distinct w) that holds every example, each example in its
// smallest-area shape: the reference ChooseGridShapes' exact search must match.
int64_t BruteForceCost(const std::vector<int64_t>& h, const std::vector<int64_t>& w, int64_t k,
                       const GridCost& cost) {
  std::vector<int64_t> hs = h, ws = w;
  std::sort(hs.begin(), hs.end());
  hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
  std::sort(ws.begin(), ws.end());
  ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
  std::vector<GridShape> all;
  for (int64_t a : hs) {
    for (int64_t b : ws) all.push_back({a, b});
  }
  int64_t best = std::numeric_limits<int64_t>::max();
  for (uint64_t mask = 1; mask < (uint64_t{1} << all.size()); ++mask) {
    if (std::popcount(mask) > k) continue;
    std::vector<GridShape> set;
    for (size_t s = 0; s < all.size(); ++s) {
      if (mask >> s & 1) set.push_back(all[s]);
    }
    std::vector<int64_t> counts(set.size(), 0);
    bool holds = true;
    for (size_t e = 0; e < h.size() && holds; ++e) {
      const int64_t s = SmallestHolding(set, h[e], w[e]);
      holds = s >= 0;
      if (holds) ++counts[static_cast<size_t>(s)];
    }
    if (!holds) continue;
    int64_t total = 0;
    for (size_t s = 0; s < set.size(); ++s) {
      if (counts[s] > 0) total += cost(set[s].height, set[s].width, counts[s]);
    }
    best = std::min(best, total);
  }
  return best;
}

TEST(GridBucketsTest, ExactSearchMatchesBruteForce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = 1 + rng() % 30;
    std::vector<int64_t> h(n), w(n);
    for (size_t e = 0; e < n; ++e) {
      h[e] = 1 + static_cast<int64_t>(rng() % 4) * 3;
      w[e] = 1 + static_cast<int64_t>(rng() % 4) * 5;
    }
    const int64_t k = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 4);
    const GridCost cost = [&](int64_t a, int64_t b, int64_t count) {
      return BucketCost(a * b, count, rows, trial % 2 == 0);
    };
    const GridChoice choice = ChooseGridShapes(h, w, k, cost);
    EXPECT_TRUE(choice.exact);
    EXPECT_LE(static_cast<int64_t>(choice.shapes.size()), k);
    EXPECT_EQ(choice.cost, BruteForceCost(h, w, k, cost)) << "trial " << trial;
  }
}

TEST(GridAutoBucketsTest, CoversEveryExampleOnceInAShapeThatHoldsIt) {
  std::mt19937_64 rng(3);
  std::vector<int64_t> h(300), w(300);
  for (size_t e = 0; e < h.size(); ++e) {
    h[e] = 16 + static_cast<int64_t>(rng() % 200);
    w[e] = 16 + static_cast<int64_t>(rng() % 300);
  }
  for (Remainder remainder : {Remainder::kPad, Remainder::kKeep, Remainder::kDrop}) {
    const BatchPlan plan = Plan(h,
                                AutoBucketsOptions{.max_shapes = 4,
                                                   .token_budget = 400'000,
                                                   .pad_to_multiple = 16,
                                                   .remainder = remainder,
                                                   .rows_multiple = 2},
                                {}, {}, w);
    CheckPlan(plan);
    EXPECT_TRUE(plan.grid);
    EXPECT_LE(plan.stats.shapes, remainder == Remainder::kKeep ? 8 : 4);
    for (const BatchShape& shape : plan.shapes) {
      EXPECT_EQ(shape.length % 16, 0);
      EXPECT_EQ(shape.width % 16, 0);
      EXPECT_EQ(shape.rows % 2, 0);
      EXPECT_LE(shape.rows * shape.length * shape.width, 400'000);
    }
    ExpectCoversOnce(plan, h, w);
    const BatchPlan pad_to_max = Plan(h, PadToMaxOptions{.batch_size = 8}, {}, {}, w);
    if (remainder != Remainder::kDrop) {
      EXPECT_GT(plan.stats.efficiency, pad_to_max.stats.efficiency);
    }
  }
}

TEST(GridAutoBucketsTest, SquareDataKeepsSquareShapes) {
  std::mt19937_64 rng(5);
  std::vector<int64_t> sizes(500);
  for (int64_t& s : sizes) s = 1 + static_cast<int64_t>(rng() % 300);
  for (int64_t k : {1, 3, 6}) {
    const BatchPlan plan =
        Plan(sizes, AutoBucketsOptions{.max_shapes = k, .batch_size = 4}, {}, {}, sizes);
    for (const BatchShape& shape : plan.shapes) EXPECT_EQ(shape.length, shape.width);
    EXPECT_LE(plan.stats.shapes, k);
    ExpectCoversOnce(plan, sizes, sizes);
  }
}

TEST(GridAutoBucketsTest, BudgetTooSmallForTheLargestShapeIsNamed) {
  ExpectMessageHas(
      [&] {
        CheckExamplesFit(kHeights, AutoBucketsOptions{.max_shapes = 2, .token_budget = 50}, {},
                         kWidths);
      },
      "token_budget 50 is smaller than the largest shape, 9 x 8");
  ExpectMessageHas(
      [&] {
        Plan(kHeights, AutoBucketsOptions{.max_shapes = 2, .token_budget = 50}, {}, {}, kWidths);
      },
      "raise token_budget to at least 72");
}

TEST(GridCheckPlanTest, WidthMustMatchTheGridFlag) {
  BatchPlan plan = Plan(kHeights, PadToMaxOptions{.batch_size = 3}, {}, {}, kWidths);
  plan.grid = false;
  ExpectMessageHas([&] { CheckPlan(plan); },
                   "shape 0 has width 8, expected 0 (the plan is not a grid plan)");
  BatchPlan flat = Plan(kHeights, PadToMaxOptions{.batch_size = 3});
  flat.grid = true;
  ExpectMessageHas([&] { CheckPlan(flat); }, "expected > 0 (the plan is a grid plan)");
}

}  // namespace
}  // namespace jaxbatch
