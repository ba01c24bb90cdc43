// Tests for Pack with a few row lengths for one column (row_length=[96,
// 256]) and a token budget: each segment against a slow reference of its
// group (the first row length that holds it, by a linear scan), rows within
// the row length and the budget, every example (or piece) exactly once, the
// last batches filled from shorter groups, the options' rules and key.
#include "jaxbatch/plan/pack_lengths.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// The reference group: the index of the first row length >= length.
size_t SlowGroup(const std::vector<int64_t>& row_lengths, int64_t length) {
  size_t g = 0;
  while (g + 1 < row_lengths.size() && row_lengths[g] < length) ++g;
  return g;
}

size_t GroupOf(const std::vector<int64_t>& row_lengths, int64_t row_length) {
  return static_cast<size_t>(std::find(row_lengths.begin(), row_lengths.end(), row_length) -
                             row_lengths.begin());
}

std::vector<int64_t> RandomLengths(std::mt19937_64& rng, int64_t n, int64_t longest) {
  std::uniform_int_distribution<int64_t> length(0, longest);
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t& l : lengths) l = length(rng);
  return lengths;
}

// Checks every invariant a plan of `o` over `lengths` must hold; returns
// each example's count of segments.
std::map<int64_t, int64_t> CheckInvariants(const std::vector<int64_t>& lengths,
                                           const PackOptions& o, const BatchPlan& plan) {
  const std::vector<int64_t> row_lengths =
      o.row_length_list.empty() ? std::vector<int64_t>{o.row_length} : o.row_length_list;
  std::map<int64_t, int64_t> seen;
  std::map<int64_t, int64_t> borrowing_batches;  // per row length
  std::map<int64_t, int64_t> rows_of;            // rows holding segments, per row length
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    rows_of[plan.batch(b).shape.length] += plan.batch(b).stored_rows();
  }
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    const size_t group = GroupOf(row_lengths, view.shape.length);
    EXPECT_LT(group, row_lengths.size()) << "batch " << b;
    if (o.token_budget) {
      EXPECT_LE(view.shape.rows * view.shape.length, *o.token_budget) << "batch " << b;
      const int64_t budget_rows =
          *o.token_budget / view.shape.length / o.rows_multiple * o.rows_multiple;
      // The budget's rows, spread over the row length's rows when the packing
      // does not follow the order (balance.h).
      const bool balanced = o.remainder == Remainder::kPad &&
                            !PackingFollowsOrder(o.algorithm, o.lookahead, o.open_rows);
      EXPECT_EQ(view.shape.rows,
                balanced ? BalancedRows(rows_of[view.shape.length], budget_rows, o.rows_multiple)
                         : budget_rows);
    } else {
      EXPECT_EQ(view.shape.rows, o.rows_per_batch);
    }
    bool borrows = false;
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      int64_t used = 0;
      const auto segments = view.row_examples(r);
      EXPECT_LE(static_cast<int64_t>(segments.size()), view.shape.segments);
      for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
        const int64_t e = view.examples[static_cast<size_t>(q)];
        const int64_t length = SegmentLength(view, lengths, q);
        used += length;
        ++seen[e];
        const size_t own = SlowGroup(row_lengths, length);
        EXPECT_LE(own, group) << "example " << e << " in a row of " << view.shape.length;
        borrows = borrows || own < group;
      }
      EXPECT_LE(used, view.shape.length) << "batch " << b << " row " << r;
    }
    borrowing_batches[view.shape.length] += borrows;
  }
  // Only a group's last batch takes shorter groups' rows.
  for (const auto& [row_length, count] : borrowing_batches) EXPECT_LE(count, 1) << row_length;
  return seen;
}

TEST(PackLengthsTest, RandomPlansKeepEveryInvariantAndEveryExampleOnce) {
  std::mt19937_64 rng(27);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int64_t> lengths = RandomLengths(rng, 1 + trial % 60, 64);
    PackOptions o{.row_length = 64, .row_length_list = {8, 24, 64}};
    if (trial % 2) {
      o.token_budget = 128 + trial;
    } else {
      o.rows_per_batch = 1 + trial % 5;
    }
    o.algorithm = trial % 3 ? PackAlgorithm::kBestFit : PackAlgorithm::kFirstFit;
    if (trial % 7 == 0) o.open_rows = 2;
    const BatchPlan plan = Plan(lengths, o);
    const std::map<int64_t, int64_t> seen = CheckInvariants(lengths, o, plan);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), static_cast<int64_t>(lengths.size()));
    for (const auto& [e, count] : seen) EXPECT_EQ(count, 1) << "example " << e;
    EXPECT_LE(plan.stats.shapes, 3);
    // Filling never adds a batch: no more than with every remainder kept.
    PackOptions keep = o;
    keep.remainder = Remainder::kKeep;
    EXPECT_LE(plan.num_batches(), Plan(lengths, keep).num_batches());
  }
}

TEST(PackLengthsTest, SplitPiecesCoverEveryElementOnce) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<int64_t> lengths = RandomLengths(rng, 1 + trial % 30, 200);
    const PackOptions o{.row_length = 64,
                        .row_length_list = {16, 64},
                        .token_budget = 256,
                        .too_long = TooLong::kSplit};
    const BatchPlan plan = Plan(lengths, o);
    ASSERT_TRUE(plan.split);
    std::map<int64_t, int64_t> elements;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      const BatchView view = plan.batch(b);
      for (int64_t q = view.row_begin.front(); q < view.row_begin.back(); ++q) {
        const int64_t e = view.examples[static_cast<size_t>(q)];
        const PieceSpan span = SegmentSpan(view, q, lengths[static_cast<size_t>(e)]);
        EXPECT_EQ(span.start, view.piece(q) * 64);
        elements[e] += span.length;
      }
    }
    for (size_t e = 0; e < lengths.size(); ++e) {
      EXPECT_EQ(elements[static_cast<int64_t>(e)], lengths[e]) << "example " << e;
    }
  }
}

TEST(PackLengthsTest, ShortRowsFillTheLongGroupsLastBatch) {
  // Ten texts of 20 tokens pack 4 to a row of 96 (3 rows, a partial batch
  // of 4 rows); three of 200 fill 3 of 4 rows of 256. The 200 short tokens
  // re-pack into one row of 256, the long group's empty row: one batch.
  std::vector<int64_t> lengths(10, 20);
  lengths.insert(lengths.end(), {200, 200, 200});
  const PackOptions o{.row_length = 256, .row_length_list = {96, 256}, .rows_per_batch = 4};
  const BatchPlan plan = Plan(lengths, o);
  ASSERT_EQ(plan.num_batches(), 1);
  EXPECT_EQ(plan.batch(0).shape, (BatchShape{.rows = 4, .length = 256, .segments = 16}));
  EXPECT_EQ(plan.batch(0).stored_rows(), 4);
  EXPECT_EQ(plan.stats.shapes, 1);
  // Kept remainders are not filled: one batch per row length.
  PackOptions keep = o;
  keep.remainder = Remainder::kKeep;
  EXPECT_EQ(Plan(lengths, keep).num_batches(), 2);
}

TEST(PackLengthsTest, TokenBudgetGivesEachRowLengthItsRows) {
  std::vector<int64_t> lengths(40, 50);
  lengths.insert(lengths.end(), 40, 150);
  const PackOptions o{.row_length = 256,
                      .row_length_list = {96, 256},
                      .token_budget = 1000,
                      .remainder = Remainder::kKeep,
                      .rows_multiple = 2};
  const BatchPlan plan = Plan(lengths, o);
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const BatchShape& shape : plan.shapes) shapes.emplace(shape.length, shape.rows);
  // 1000 / 96 = 10 rows, 1000 / 256 = 3 rounded down to 2.
  EXPECT_TRUE(shapes.count({96, 10})) << plan.shapes.size();
  EXPECT_TRUE(shapes.count({256, 2}));
  CheckInvariants(lengths,
                  PackOptions{.row_length = 256,
                              .row_length_list = {96, 256},
                              .token_budget = 1000,
                              .rows_multiple = 2},
                  Plan(lengths, PackOptions{.row_length = 256,
                                            .row_length_list = {96, 256},
                                            .token_budget = 1000,
                                            .rows_multiple = 2}));
}

TEST(PackLengthsTest, TooLongFollowsTheLargestRowLength) {
  const std::vector<int64_t> lengths = {10, 300, 90};
  PackOptions o{.row_length = 256, .row_length_list = {96, 256}, .rows_per_batch = 2};
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, o); }),
                       "example 1 has length 300, longer than row_length 256"));
  o.too_long = TooLong::kSkip;
  EXPECT_EQ(Plan(lengths, o).skipped_examples, std::vector<int64_t>{1});
}

TEST(PackLengthsTest, RefusesBadOptionsNamingThem) {
  const auto refused = [](const PackOptions& o) {
    return ThrownMessage<InvalidArgumentError>([&] { ValidatePlannerOptions(o); });
  };
  EXPECT_TRUE(
      Contains(refused({.row_length = 96, .row_length_list = {256, 96}, .rows_per_batch = 2}),
               "strictly increasing"));
  EXPECT_TRUE(
      Contains(refused({.row_length = 512, .row_length_list = {96, 256}, .rows_per_batch = 2}),
               "must be the largest"));
  EXPECT_TRUE(Contains(refused({.row_length = 96, .row_length_list = {0, 96}, .rows_per_batch = 2}),
                       "row_length[0] must be in 1.."));
  EXPECT_TRUE(Contains(refused({.row_length = 96, .rows_per_batch = 2, .token_budget = 960}),
                       "give rows_per_batch (2) or token_budget (960), not both"));
  EXPECT_TRUE(Contains(refused({.row_length = 256, .token_budget = 100}),
                       "token_budget 100 holds no row of row_length 256"));
  EXPECT_TRUE(Contains(refused({.row_length = 256, .row_length_list = {96, 256}}),
                       "rows_per_batch must be a positive integer"));
  EXPECT_TRUE(Contains(refused({.row_length = 256,
                                .row_length_list = {96, 256},
                                .rows_per_batch = 2,
                                .algorithm = PackAlgorithm::kConcatThenSplit}),
                       "concat_then_split"));
}

TEST(PackLengthsTest, KeyRoundTripsAndKeepsOlderKeys) {
  const PackOptions list{.row_length = 256, .row_length_list = {96, 256}, .token_budget = 4096};
  const std::string key = PlannerKey(list);
  EXPECT_TRUE(Contains(key, "row_length=[96, 256]"));
  EXPECT_TRUE(Contains(key, "rows_per_batch=None"));
  EXPECT_TRUE(Contains(key, "token_budget=4096"));
  EXPECT_EQ(std::get<PackOptions>(ParsePlannerKey(key)), list);
  const PackOptions one{.row_length = 128, .rows_per_batch = 4};
  EXPECT_FALSE(Contains(PlannerKey(one), "token_budget"));
  EXPECT_EQ(std::get<PackOptions>(ParsePlannerKey(PlannerKey(one))), one);
}

// The chooser's cost, written out slowly: each example's tokens counted into
// the first row length that holds it, whole rows of each, each slot
// weighted by (100 - a) * largest + a * row length.
double SlowCost(const std::vector<int64_t>& lengths, const std::vector<int64_t>& row_lengths,
                int64_t a) {
  std::vector<double> tokens(row_lengths.size(), 0.0);
  for (int64_t l : lengths) {
    tokens[SlowGroup(row_lengths, l)] += static_cast<double>(std::min(l, row_lengths.back()));
  }
  double cost = 0;
  for (size_t g = 0; g < row_lengths.size(); ++g) {
    const auto l = static_cast<double>(row_lengths[g]);
    const double rows = std::ceil(tokens[g] / l);
    cost += rows * l * static_cast<double>((100 - a) * row_lengths.back() + a * row_lengths[g]);
  }
  return cost;
}

TEST(PackLengthsTest, ChooserEqualsBruteForceOverSmallHistograms) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t row_length = 8 + trial % 40;
    const std::vector<int64_t> lengths = RandomLengths(rng, 1 + trial % 16, row_length + 3);
    const int64_t shapes = 1 + trial % 4;
    const int64_t a = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? 34 : 90);
    // Every subset of the distinct lengths (cut to the row) below row_length.
    std::set<int64_t> distinct;
    for (int64_t l : lengths) {
      if (std::clamp<int64_t>(l, 1, row_length) < row_length)
        distinct.insert(std::max<int64_t>(l, 1));
    }
    const std::vector<int64_t> below(distinct.begin(), distinct.end());
    ASSERT_LT(below.size(), 20u);
    double best = std::numeric_limits<double>::infinity();
    for (uint32_t mask = 0; mask < (1u << below.size()); ++mask) {
      if (std::popcount(mask) + 1 > shapes) continue;
      std::vector<int64_t> pick;
      for (size_t i = 0; i < below.size(); ++i) {
        if (mask & (1u << i)) pick.push_back(below[i]);
      }
      pick.push_back(row_length);
      best = std::min(best, SlowCost(lengths, pick, a));
    }
    const std::vector<int64_t> chosen = ChoosePackRowLengths(lengths, row_length, shapes, a);
    ASSERT_FALSE(chosen.empty());
    EXPECT_EQ(chosen.back(), row_length);
    EXPECT_LE(static_cast<int64_t>(chosen.size()), shapes);
    EXPECT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
    EXPECT_DOUBLE_EQ(SlowCost(lengths, chosen, a), best) << "trial " << trial;
  }
}

TEST(PackLengthsTest, ChosenRowLengthsPlanLikeTheGivenList) {
  std::mt19937_64 rng(5);
  std::vector<int64_t> lengths = RandomLengths(rng, 300, 256);
  const PackOptions chosen{.row_length = 256, .token_budget = 2048, .max_shapes = 2};
  const std::vector<int64_t> list = ChoosePackRowLengths(lengths, 256, 2, 34);
  ASSERT_EQ(list.size(), 2u);
  const BatchPlan a = Plan(lengths, chosen);
  const BatchPlan b =
      Plan(lengths, PackOptions{.row_length = 256, .row_length_list = list, .token_budget = 2048});
  EXPECT_EQ(a.example_ids, b.example_ids);
  EXPECT_EQ(a.shapes, b.shapes);
  CheckInvariants(lengths,
                  PackOptions{.row_length = 256, .row_length_list = list, .token_budget = 2048}, a);
  EXPECT_EQ(std::get<PackOptions>(ParsePlannerKey(PlannerKey(chosen))), chosen);
  EXPECT_TRUE(Contains(PlannerKey(chosen), "max_shapes=2"));
  EXPECT_TRUE(Contains(
      ThrownMessage<InvalidArgumentError>([] {
        ValidatePlannerOptions(PackOptions{
            .row_length = 256, .row_length_list = {96, 256}, .rows_per_batch = 2, .max_shapes = 2});
      }),
      "not both"));
}

}  // namespace
}  // namespace jaxbatch
