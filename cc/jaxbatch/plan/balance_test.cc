// Tests for plan/balance: BalancedRows against a brute force over every
// row count, and each planner that balances (Pack, PatchPack, FixedBuckets,
// AutoBuckets in 1-D and over grids, AspectBuckets) against the plan of the
// same options unbalanced: the same batches and shapes but for their rows,
// never more batches, every example once, fewer padded elements, and no
// balancing where the rows are the user's or the packing follows the order.
#include "jaxbatch/plan/balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

// The brute force: the fewest rows r <= cap (a multiple of rows_multiple)
// whose batches of r hold `count` rows in as few batches as batches of cap do.
int64_t SlowBalancedRows(int64_t count, int64_t cap, int64_t rows_multiple) {
  if (count == 0) return cap;
  const int64_t batches = (count + cap - 1) / cap;
  for (int64_t r = rows_multiple; r <= cap; r += rows_multiple) {
    if (r * batches >= count) return r;
  }
  return cap;
}

TEST(BalancedRowsTest, EqualsTheFewestRowsThatKeepTheBatchCount) {
  for (int64_t multiple : {1, 2, 3, 8}) {
    for (int64_t cap = multiple; cap <= 48; cap += multiple) {
      for (int64_t count = 0; count <= 200; ++count) {
        const int64_t rows = BalancedRows(count, cap, multiple);
        ASSERT_EQ(rows, SlowBalancedRows(count, cap, multiple))
            << count << " rows, cap " << cap << ", multiple " << multiple;
        ASSERT_LE(rows, cap);
        ASSERT_EQ(rows % multiple, 0);
        if (count > 0) {
          const int64_t batches = (count + cap - 1) / cap;
          ASSERT_GE(rows * batches, count);
          ASSERT_LT(rows * batches - count, batches * multiple);  // under rows_multiple a batch
        }
      }
    }
  }
}

TEST(BalancedRowsTest, TheIssuesNumbersAndTheExtremes) {
  EXPECT_EQ(BalancedRows(100, 41, 1), 34);  // 600 pydoc paragraphs: 100 rows of 256
  EXPECT_EQ(BalancedRows(467, 41, 1), 39);  // the full corpus: 467 rows
  EXPECT_EQ(BalancedRows(107, 41, 1), 36);
  EXPECT_EQ(BalancedRows(82, 41, 1), 41);  // full batches stay full
  EXPECT_EQ(BalancedRows(5, 41, 1), 5);    // one batch: just its rows
  EXPECT_EQ(BalancedRows(5, 40, 4), 8);
  EXPECT_EQ(BalancedRows(0, 41, 1), 41);
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(BalancedRows(big + 1, big, 1), big / 2 + 1);  // no overflow near int64's end
}

std::vector<int64_t> RandomLengths(std::mt19937_64& rng, size_t n, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> length(lo, hi);
  std::vector<int64_t> lengths(n);
  for (int64_t& l : lengths) l = length(rng);
  return lengths;
}

// Each example's segments, as (example, piece) pairs counted.
std::map<std::pair<int64_t, int64_t>, int64_t> Segments(const BatchPlan& plan) {
  std::map<std::pair<int64_t, int64_t>, int64_t> seen;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    // q indexes the plan's flat segments, as BatchView::piece takes it.
    for (int64_t q = view.row_begin.front(); q < view.row_begin.back(); ++q) {
      ++seen[{view.examples[static_cast<size_t>(q)], view.piece(q)}];
    }
  }
  return seen;
}

// A shape but for its rows: what a balanced shape keeps of its unbalanced one.
BatchShape WithoutRows(BatchShape shape) {
  shape.rows = 0;
  return shape;
}

// `balanced` against `before` (the same options, balance_batches off): the
// same segments, each once; as many batches; the same shapes but for their
// rows, at most the budget's, and each shape's padding rows under one a
// batch; never more padded elements.
void ExpectBalanced(const BatchPlan& before, const BatchPlan& balanced, int64_t rows_multiple) {
  EXPECT_EQ(Segments(balanced), Segments(before));
  for (const auto& [segment, count] : Segments(balanced)) ASSERT_EQ(count, 1);
  EXPECT_EQ(balanced.stats.batches, before.stats.batches);
  EXPECT_LE(balanced.stats.padded_elements, before.stats.padded_elements);
  EXPECT_EQ(balanced.stats.real_elements, before.stats.real_elements);
  ASSERT_EQ(balanced.shapes.size(), before.shapes.size());
  for (size_t s = 0; s < balanced.shapes.size(); ++s) {
    const BatchShape& shape = balanced.shapes[s];
    const auto it = std::find_if(before.shapes.begin(), before.shapes.end(), [&](const auto& b) {
      return WithoutRows(b) == WithoutRows(shape);
    });
    ASSERT_NE(it, before.shapes.end()) << "a shape of length " << shape.length << " was added";
    EXPECT_LE(shape.rows, it->rows);
    EXPECT_EQ(shape.rows % rows_multiple, 0);
    int64_t batches = 0, stored = 0;
    for (int64_t b = 0; b < balanced.num_batches(); ++b) {
      if (balanced.batch_shape_ids[static_cast<size_t>(b)] != static_cast<int32_t>(s)) continue;
      ++batches;
      stored += balanced.batch(b).stored_rows();
    }
    EXPECT_LT(batches * shape.rows - stored, batches * rows_multiple)
        << "shape " << s << ": " << batches << " batches of " << shape.rows << " rows hold "
        << stored;
  }
}

template <typename Options>
void CheckPlanner(const std::vector<int64_t>& lengths, Options o, int64_t rows_multiple,
                  const std::vector<int64_t>& widths = {}) {
  const BatchPlan balanced = Plan(lengths, o, {}, {}, widths);
  o.balance_batches = false;
  const BatchPlan before = Plan(lengths, o, {}, {}, widths);
  ExpectBalanced(before, balanced, rows_multiple);
}

TEST(BalanceTest, PackUnderABudgetSpreadsRowsEvenly) {
  // Lengths whose best fit makes 100 rows of 256 (one text a row at 240):
  // three batches of 34 rows under a budget of 41 rows, not 41, 41 and 41.
  const std::vector<int64_t> lengths(100, 240);
  const BatchPlan plan = Plan(lengths, PackOptions{.row_length = 256, .token_budget = 41 * 256});
  ASSERT_EQ(plan.stats.batches, 3);
  EXPECT_EQ(plan.shapes.at(0).rows, 34);
  EXPECT_EQ(plan.stats.padded_elements, 3 * 34 * 256);
  // rows_per_batch is the user's: kept.
  EXPECT_EQ(Plan(lengths, PackOptions{.row_length = 256, .rows_per_batch = 41}).shapes.at(0).rows,
            41);
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t multiple = trial % 3 == 0 ? 2 : 1;
    const std::vector<int64_t> some = RandomLengths(rng, 1 + rng() % 300, 0, 256);
    PackOptions o{.row_length = 256,
                  .token_budget = static_cast<int64_t>(256 * (2 + rng() % 30)),
                  .rows_multiple = multiple};
    if (trial % 2) o.row_length_list = {96, 256};
    if (trial % 5 == 0) o.too_long = TooLong::kSplit;
    CheckPlanner(trial % 5 == 0 ? RandomLengths(rng, 50, 0, 900) : some, o, multiple);
  }
}

TEST(BalanceTest, PackKeepsTheBudgetsRowsWhereItsRowsFollowTheOrder) {
  const std::vector<int64_t> lengths(100, 240);
  for (PackOptions o :
       {PackOptions{.algorithm = PackAlgorithm::kFirstFit}, PackOptions{.lookahead = 10},
        PackOptions{.open_rows = 4}, PackOptions{.remainder = Remainder::kKeep}}) {
    o.row_length = 256;
    o.token_budget = 41 * 256;
    EXPECT_EQ(Plan(lengths, o).shapes.at(0).rows, 41);
  }
}

TEST(BalanceTest, BestFitsBalancedShapeIsTheSameWhateverTheOrder) {
  std::mt19937_64 rng(2);
  const std::vector<int64_t> lengths = RandomLengths(rng, 400, 1, 256);
  const PackOptions o{.row_length = 256, .token_budget = 40 * 256};
  const BatchPlan first = Plan(lengths, o);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<int64_t> order(lengths.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    EXPECT_EQ(Plan(lengths, o, order).shapes, first.shapes);
  }
}

TEST(BalanceTest, PatchPackUnderABudgetSpreadsRowsEvenly) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> heights, widths;
    for (size_t i = 0; i < 1 + rng() % 150; ++i) {
      heights.push_back(16 * static_cast<int64_t>(1 + rng() % 8));
      widths.push_back(16 * static_cast<int64_t>(1 + rng() % 8));
    }
    PatchPackOptions o{.row_length = 64,
                       .token_budget = static_cast<int64_t>(64 * (2 + rng() % 9))};
    const BatchPlan balanced = PlanPatchPack(heights, widths, {}, o);
    o.balance_batches = false;
    ExpectBalanced(PlanPatchPack(heights, widths, {}, o), balanced, 1);
  }
  // rows_per_batch is the user's.
  const std::vector<int64_t> sides(9, 128);
  EXPECT_EQ(
      PlanPatchPack(sides, sides, {}, {.row_length = 64, .rows_per_batch = 4}).shapes.at(0).rows,
      4);
  EXPECT_EQ(
      PlanPatchPack(sides, sides, {}, {.row_length = 64, .token_budget = 4 * 64}).shapes.at(0).rows,
      3);
}

TEST(BalanceTest, BucketPlannersUnderABudgetSpreadRowsEvenly) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t multiple = trial % 4 == 0 ? 2 : 1;
    const std::vector<int64_t> lengths = RandomLengths(rng, 1 + rng() % 400, 1, 128);
    const int64_t budget = static_cast<int64_t>(128 * (2 + rng() % 20));
    CheckPlanner(lengths,
                 AutoBucketsOptions{.max_shapes = static_cast<int64_t>(1 + rng() % 4),
                                    .token_budget = budget,
                                    .rows_multiple = multiple},
                 multiple);
    CheckPlanner(
        lengths,
        FixedBucketsOptions{
            .boundaries = {32, 64, 128}, .token_budget = budget, .rows_multiple = multiple},
        multiple);
    CheckPlanner(RandomLengths(rng, 100, 1, 300),
                 FixedBucketsOptions{.boundaries = {32, 64, 128},
                                     .token_budget = budget,
                                     .too_long = TooLong::kSplit,
                                     .rows_multiple = multiple},
                 multiple);
  }
  // 45 examples of 100 under a budget of 10 rows: 5 batches of 9, not of 10.
  const std::vector<int64_t> lengths(45, 100);
  EXPECT_EQ(Plan(lengths, AutoBucketsOptions{.max_shapes = 1, .token_budget = 1000}).shapes,
            (std::vector<BatchShape>{{.rows = 9, .length = 100}}));
  // A batch_size (or batch_sizes) is the user's: kept.
  EXPECT_EQ(Plan(lengths, AutoBucketsOptions{.max_shapes = 1, .batch_size = 10}).shapes.at(0).rows,
            10);
  EXPECT_EQ(
      Plan(lengths, FixedBucketsOptions{.boundaries = {100}, .batch_size = 10}).shapes.at(0).rows,
      10);
  // With both, the budget's cap is balanced: min(8, 10) rows -> 6 batches of 8 (45 < 48).
  EXPECT_EQ(
      Plan(lengths, FixedBucketsOptions{.boundaries = {100}, .batch_size = 8, .token_budget = 1000})
          .shapes.at(0)
          .rows,
      8);
  EXPECT_EQ(
      Plan(lengths,
           AutoBucketsOptions{.max_shapes = 1, .token_budget = 1000, .remainder = Remainder::kDrop})
          .shapes.at(0)
          .rows,
      10);
}

TEST(BalanceTest, GridPlannersUnderABudgetSpreadRowsEvenly) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 1 + rng() % 200;
    const std::vector<int64_t> heights = RandomLengths(rng, n, 1, 64);
    const std::vector<int64_t> widths = RandomLengths(rng, n, 1, 64);
    const int64_t budget = static_cast<int64_t>(64 * 64 * (1 + rng() % 12));
    CheckPlanner(heights,
                 AutoBucketsOptions{.max_shapes = static_cast<int64_t>(1 + rng() % 4),
                                    .token_budget = budget},
                 1, widths);
    std::vector<int64_t> h, w;  // at AspectBuckets' resolutions of 64 x 64's area
    for (size_t i = 0; i < n; ++i) {
      const bool tall = rng() % 2;
      h.push_back(tall ? 128 : 64);
      w.push_back(tall ? 32 : 64);
    }
    CheckPlanner(
        h,
        AspectBucketsOptions{
            .area = 64 * 64, .multiple = 32, .ratios = {1, 4, 1, 1}, .token_budget = budget},
        1, w);
  }
}

}  // namespace
}  // namespace jaxbatch
