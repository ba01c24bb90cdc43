// Every planner reads its order the same way (order.h): absent plans every
// example, an empty order plans nothing, one id plans that example, all
// ids plan all, and an id listed twice is refused with one message.
#include "jaxbatch/plan/order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

using testing::ThrownMessage;

TEST(PlanIds, AbsentIsEveryExampleEmptyIsNone) {
  EXPECT_EQ(PlanIds(3, std::nullopt), (std::vector<int64_t>{0, 1, 2}));
  const std::vector<int64_t> none;
  EXPECT_TRUE(PlanIds(3, none).empty());
  const std::vector<int64_t> some = {2, 0};
  EXPECT_EQ(PlanIds(3, some), some);
  const std::vector<int64_t> twice = {1, 2, 1};
  EXPECT_EQ(ThrownMessage<InvalidArgumentError>([&] { PlanIds(3, twice); }),
            "plan: order[2] = 1 lists that example a second time; each example may be planned "
            "once");
  const std::vector<int64_t> outside = {0, 3};
  EXPECT_EQ(ThrownMessage<OutOfRangeError>([&] { PlanIds(3, outside); }),
            "plan: order[1] = 3 is not an example index; there are 3 examples");
}

// One planner and the sizes it plans: `lengths` (heights for a grid, node
// counts for graphs), `edges` (edge counts, or a Pack's second feature) and
// `widths` (a grid's).
struct Case {
  const char* name;
  PlannerOptions options;
  std::vector<int64_t> lengths, edges = {}, widths = {};
};

std::vector<Case> EveryPlanner() {
  const std::vector<int64_t> lengths = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::vector<int64_t> second = {2, 0, 1, 3, 2, 1, 1, 2};
  PackOptions features{.rows_per_batch = 2};
  features.row_lengths = {{"inputs", 9}, {"targets", 4}};
  return {
      {"PadToMax", PadToMaxOptions{.batch_size = 3}, lengths},
      {"FixedBuckets", FixedBucketsOptions{.boundaries = {4, 9}, .batch_size = 2}, lengths},
      {"FixedBuckets split",
       FixedBucketsOptions{.boundaries = {2, 4}, .batch_size = 2, .too_long = TooLong::kSplit},
       lengths},
      {"AutoBuckets", AutoBucketsOptions{.max_shapes = 2, .batch_size = 2}, lengths},
      {"Pack", PackOptions{.row_length = 9, .rows_per_batch = 2}, lengths},
      {"Pack split", PackOptions{.row_length = 4, .rows_per_batch = 2, .too_long = TooLong::kSplit},
       lengths},
      {"Pack concat_then_split",
       PackOptions{
           .row_length = 4, .rows_per_batch = 2, .algorithm = PackAlgorithm::kConcatThenSplit},
       lengths},
      {"Pack row lengths",
       PackOptions{.row_length = 9, .row_length_list = {4, 9}, .rows_per_batch = 2}, lengths},
      {"Pack features", features, lengths, second},
      {"GraphBudget", GraphBudgetOptions{.nodes = 12, .edges = 8, .graphs = 4}, lengths, second},
      {"GraphBuckets", GraphBucketsOptions{.max_shapes = 2, .nodes = 12, .edges = 8, .graphs = 4},
       lengths, second},
      {"PatchPack",
       PatchPackOptions{.patch = {1, 1}, .row_length = 12, .rows_per_batch = 2},
       lengths,
       {},
       second},
      {"PadToMax grid", PadToMaxOptions{.batch_size = 3}, lengths, {}, lengths},
      {"AspectBuckets",
       AspectBucketsOptions{.area = 81, .multiple = 1, .ratios = {1, 1}, .batch_size = 2},
       lengths,
       {},
       lengths},
  };
}

// The distinct examples a plan holds (a split plan holds several pieces of one).
std::multiset<int64_t> Planned(const BatchPlan& plan) {
  std::set<std::pair<int64_t, int64_t>> pieces;
  for (size_t q = 0; q < plan.example_ids.size(); ++q) {
    pieces.insert({plan.example_ids[q], plan.example_pieces.empty() ? 0 : plan.example_pieces[q]});
  }
  std::multiset<int64_t> out;
  for (const auto& [id, piece] : pieces) {
    if (piece == 0) out.insert(id);
  }
  return out;
}

TEST(PlanOrder, EveryPlannerPlansExactlyItsOrder) {
  for (const Case& c : EveryPlanner()) {
    SCOPED_TRACE(c.name);
    auto plan = [&](PlanOrder order) {
      return Plan(c.lengths, c.options, order, c.edges, c.widths);
    };
    const int64_t n = static_cast<int64_t>(c.lengths.size());
    std::multiset<int64_t> all;
    for (int64_t i = 0; i < n; ++i) all.insert(i);
    EXPECT_EQ(Planned(plan(std::nullopt)), all);
    // Empty: nothing, not everything (a filter that matched nothing).
    const BatchPlan none = plan(std::vector<int64_t>{});
    EXPECT_EQ(none.num_batches(), 0);
    EXPECT_TRUE(none.example_ids.empty());
    EXPECT_EQ(none.stats.examples, 0);
    const std::vector<int64_t> one = {5};
    EXPECT_EQ(Planned(plan(one)), std::multiset<int64_t>{5});
    std::vector<int64_t> every(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) every[static_cast<size_t>(i)] = n - 1 - i;
    EXPECT_EQ(Planned(plan(every)), all);
    const std::vector<int64_t> twice = {4, 2, 4};
    EXPECT_EQ(ThrownMessage<InvalidArgumentError>([&] { plan(twice); }),
              "plan: order[2] = 4 lists that example a second time; each example may be planned "
              "once");
  }
}

}  // namespace
}  // namespace jaxbatch
