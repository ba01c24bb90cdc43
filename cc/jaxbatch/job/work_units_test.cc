#include "jaxbatch/job/work_units.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

std::vector<int64_t> RandomLengths(int64_t n, int64_t longest, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> length(1, longest);
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t& l : lengths) l = length(rng);
  return lengths;
}

// Every (example, piece) segment of batches [begin, end) of `plan`, in order.
std::vector<std::pair<int64_t, int64_t>> Segments(const BatchPlan& plan, int64_t begin,
                                                  int64_t end) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t b = begin; b < end; ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t r = 0; r < view.shape.rows; ++r) {
      const auto row = view.row_examples(r);
      const int64_t first = r < view.stored_rows() ? view.row_begin[r] : 0;
      for (size_t q = 0; q < row.size(); ++q) {
        out.emplace_back(row[q], view.piece(first + static_cast<int64_t>(q)));
      }
      out.emplace_back(-1, -1);  // row end
    }
  }
  return out;
}

// The units, sliced and put back together, are the plan: the same batches,
// shapes and segments in the same order, each unit a plan CheckPlan takes.
void ExpectSlicesRebuildThePlan(const BatchPlan& plan, int64_t every) {
  const std::vector<int64_t> bounds = CutIntoUnits(plan, every);
  ASSERT_EQ(bounds.front(), 0);
  ASSERT_EQ(bounds.back(), plan.num_batches());
  int64_t examples = 0;
  for (size_t u = 0; u + 1 < bounds.size(); ++u) {
    ASSERT_LT(bounds[u], bounds[u + 1]);
    const BatchPlan slice = SliceBatches(plan, bounds[u], bounds[u + 1]);
    CheckPlan(slice);
    ASSERT_EQ(slice.num_batches(), bounds[u + 1] - bounds[u]);
    int64_t started = 0;
    for (int64_t b = 0; b < slice.num_batches(); ++b) {
      EXPECT_EQ(slice.batch(b).shape, plan.batch(bounds[u] + b).shape);
      EXPECT_EQ(slice.batch_shape_ids[b], plan.batch_shape_ids[bounds[u] + b]);
      started += ExamplesStarted(slice.batch(b));
      // The rule: a unit closes at the first batch end at or past `every`.
      if (b + 1 < slice.num_batches()) {
        EXPECT_LT(started, every);
      }
    }
    if (u + 2 < bounds.size()) {
      EXPECT_GE(started, every);
    }
    EXPECT_EQ(slice.stats.examples, started);
    EXPECT_EQ(slice.stats.batches, slice.num_batches());
    EXPECT_EQ(Segments(slice, 0, slice.num_batches()), Segments(plan, bounds[u], bounds[u + 1]));
    examples += started;
  }
  int64_t all = 0;
  for (int64_t b = 0; b < plan.num_batches(); ++b) all += ExamplesStarted(plan.batch(b));
  EXPECT_EQ(examples, all);
}

TEST(WorkUnitsTest, PaddedBucketedAndPackedPlansCutAndSliceBack) {
  const std::vector<int64_t> lengths = RandomLengths(3000, 200, 7);
  const std::vector<PlannerOptions> planners = {
      PadToMaxOptions{.batch_size = 16},
      AutoBucketsOptions{.max_shapes = 4, .batch_size = 32},
      PackOptions{.row_length = 256, .rows_per_batch = 4},
      PackOptions{.row_length = 64, .rows_per_batch = 4, .too_long = TooLong::kSplit},
  };
  for (const PlannerOptions& options : planners) {
    const BatchPlan plan = Plan(lengths, options);
    for (int64_t every : {1, 100, 999, 5000}) ExpectSlicesRebuildThePlan(plan, every);
  }
}

TEST(WorkUnitsTest, EmptyPlanHasNoUnitAndBadArgumentsAreRefused) {
  const BatchPlan empty = Plan(std::vector<int64_t>{}, PadToMaxOptions{.batch_size = 4});
  EXPECT_EQ(CutIntoUnits(empty, 10), std::vector<int64_t>{0});
  EXPECT_EQ(SliceBatches(empty, 0, 0).num_batches(), 0);
  const BatchPlan plan = Plan(std::vector<int64_t>{3, 1, 2}, PadToMaxOptions{.batch_size = 2});
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { CutIntoUnits(plan, 0); }),
                       "must be >= 1, found 0"));
  EXPECT_TRUE(Contains(ThrownMessage<OutOfRangeError>([&] { SliceBatches(plan, 1, 3); }),
                       "[1, 3) are not a range of the plan's 2"));
  EXPECT_THROW(SliceBatches(plan, 2, 1), OutOfRangeError);
}

}  // namespace
}  // namespace jaxbatch
