// Tests for CheckPlan: every planner's plan passes, and each way a plan
// rebuilt from parts can fail to fit together is refused with its name.
#include "jaxbatch/plan/batch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

const std::vector<int64_t> kLengths = {5, 3, 9, 2, 7, 1, 4};

TEST(CheckPlanTest, EveryPlannersPlanPasses) {
  const std::vector<PlannerOptions> planners = {
      PadToMaxOptions{.batch_size = 3},
      FixedBucketsOptions{.boundaries = {4, 8, 16}, .batch_size = 2},
      AutoBucketsOptions{.max_shapes = 2, .batch_size = 2},
      PackOptions{.row_length = 10, .rows_per_batch = 2}};
  for (const PlannerOptions& options : planners) {
    EXPECT_NO_THROW(CheckPlan(Plan(kLengths, options)));
  }
}

TEST(CheckPlanTest, PartsThatDoNotFitAreNamed) {
  const BatchPlan good = Plan(kLengths, PadToMaxOptions{.batch_size = 3});
  const std::vector<std::pair<std::function<void(BatchPlan&)>, std::string>> cases = {
      {[](BatchPlan& p) { p.batch_row_begin.pop_back(); }, "batch_row_begin has"},
      {[](BatchPlan& p) { p.row_example_begin[0] = 1; }, "row_example_begin must start at 0"},
      {[](BatchPlan& p) { p.row_example_begin.back() += 1; }, "row_example_begin ends at"},
      {[](BatchPlan& p) { std::swap(p.batch_row_begin[1], p.batch_row_begin[2]); },
       "batch_row_begin decreases at batch 1"},
      {[](BatchPlan& p) { p.batch_shape_ids[0] = 7; }, "batch 0 has shape 7"},
      {[](BatchPlan& p) { p.shapes[0].rows = 1; }, "stores 3 rows but its shape has 1"},
      {[](BatchPlan& p) { p.shapes[0].length = -1; }, "shape 0 of"},
      {[](BatchPlan& p) { p.example_ids[2] = -4; }, "example id -4 at 2 is negative"},
      {[](BatchPlan& p) { p.stats.batches = 9; }, "stats count 9 batches"},
      {[](BatchPlan& p) {
         p.row_example_begin.erase(p.row_example_begin.begin() + 1);
         for (int64_t& b : p.batch_row_begin) b = std::max<int64_t>(0, b - 1);
         p.batch_row_begin[0] = 0;
       },
       "holds 2 examples, but the plan is not packed"},
  };
  for (const auto& [breaks, message] : cases) {
    BatchPlan plan = good;
    breaks(plan);
    const std::string msg = ThrownMessage<InvalidArgumentError>([&] { CheckPlan(plan); });
    EXPECT_TRUE(Contains(msg, message)) << message << " / " << msg;
  }
}

}  // namespace
}  // namespace jaxbatch
