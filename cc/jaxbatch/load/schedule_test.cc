#include "jaxbatch/load/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "jaxbatch/base/error.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

std::vector<int64_t> ExamplesOf(const EpochSchedule& schedule, int64_t t) {
  const BatchView view = schedule.StepBatch(t);
  std::vector<int64_t> out;
  for (int64_t r = 0; r < view.shape.rows; ++r) {
    for (int64_t e : view.row_examples(r)) out.push_back(e);
  }
  return out;
}

std::vector<PlannerOptions> Planners(Remainder remainder) {
  return {PadToMaxOptions{.batch_size = 7, .remainder = remainder},
          AutoBucketsOptions{.max_shapes = 3, .token_budget = 256, .remainder = remainder},
          PackOptions{.row_length = 64, .rows_per_batch = 3, .remainder = remainder}};
}

TEST(ScheduleTest, ShardsAreDisjointCoverTheDataAndShareShapesPerStep) {
  const std::vector<int64_t> lengths = testing::RandomLengths(500, 60, 3);
  for (Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
    for (const PlannerOptions& planner : Planners(remainder)) {
      for (int64_t count : {1, 2, 3, 4}) {
        std::multiset<int64_t> seen;
        std::vector<EpochSchedule> shards;
        for (int64_t index = 0; index < count; ++index) {
          ScheduleOptions o{
              .planner = planner, .seed = 9, .shard_index = index, .shard_count = count};
          shards.push_back(MakeEpochSchedule(lengths, {}, o, /*epoch=*/2));
          for (size_t t = 0; t < shards.back().steps.size(); ++t) {
            for (int64_t e : ExamplesOf(shards.back(), static_cast<int64_t>(t))) seen.insert(e);
          }
        }
        const EpochSchedule& first = shards[0];
        for (const EpochSchedule& s : shards) {
          ASSERT_EQ(s.steps.size(), first.steps.size());
          for (size_t t = 0; t < s.steps.size(); ++t) {
            EXPECT_EQ(s.StepBatch(static_cast<int64_t>(t)).shape,
                      first.StepBatch(static_cast<int64_t>(t)).shape);
          }
        }
        // Disjoint (no example twice) and covering up to the counted drops.
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());
        const int64_t dropped = first.plan.stats.dropped + first.shard_dropped;
        EXPECT_EQ(static_cast<int64_t>(seen.size()) + dropped, 500);
        if (remainder == Remainder::kPad) {
          EXPECT_EQ(dropped, 0);
        }
      }
    }
  }
}

TEST(ScheduleTest, ShuffleDependsOnSeedAndEpochOnly) {
  const std::vector<int64_t> lengths = testing::RandomLengths(300, 40, 1);
  ScheduleOptions o{.planner = PadToMaxOptions{.batch_size = 8}, .seed = 5};
  const EpochSchedule a = MakeEpochSchedule(lengths, {}, o, 0);
  const EpochSchedule b = MakeEpochSchedule(lengths, {}, o, 0);
  const EpochSchedule c = MakeEpochSchedule(lengths, {}, o, 1);
  EXPECT_EQ(a.plan.example_ids, b.plan.example_ids);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_NE(a.plan.example_ids, c.plan.example_ids);
  o.shuffle = ShuffleMode::kNone;
  const EpochSchedule ordered = MakeEpochSchedule(lengths, {}, o, 3);
  EXPECT_TRUE(std::is_sorted(ordered.plan.example_ids.begin(), ordered.plan.example_ids.end()));
}

TEST(ScheduleTest, BlockShuffleKeepsBlocksContiguous) {
  const std::vector<int64_t> lengths(100, 5);
  ScheduleOptions o{.planner = PadToMaxOptions{.batch_size = 100},
                    .shuffle = ShuffleMode::kBlock,
                    .block_size = 10,
                    .seed = 4};
  const EpochSchedule s = MakeEpochSchedule(lengths, {}, o, 0);
  const std::vector<int64_t>& order = s.plan.example_ids;
  ASSERT_EQ(order.size(), 100u);
  for (size_t k = 0; k < 100; k += 10) {
    const int64_t block = order[k] / 10;
    for (size_t j = k; j < k + 10; ++j) EXPECT_EQ(order[j] / 10, block);
  }
  EXPECT_NE(order[0] / 10 * 10 + order[10] / 10, 1);  // not simply the first two blocks in order
}

TEST(ScheduleTest, ExcludedExamplesAreNeverPlanned) {
  const std::vector<int64_t> lengths(50, 3);
  std::vector<uint8_t> excluded(50, 0);
  excluded[7] = excluded[31] = 1;
  ScheduleOptions o{.planner = PadToMaxOptions{.batch_size = 4}};
  const EpochSchedule s = MakeEpochSchedule(lengths, excluded, o, 0);
  std::set<int64_t> ids(s.plan.example_ids.begin(), s.plan.example_ids.end());
  EXPECT_EQ(ids.size(), 48u);
  EXPECT_FALSE(ids.count(7));
  EXPECT_FALSE(ids.count(31));
}

TEST(ScheduleTest, BadShardThrows) {
  ScheduleOptions o{
      .planner = PadToMaxOptions{.batch_size = 4}, .shard_index = 2, .shard_count = 2};
  EXPECT_THROW(MakeEpochSchedule(std::vector<int64_t>{1, 2}, {}, o, 0), InvalidArgumentError);
}

TEST(ScheduleTest, ShardCountFarAboveTheBatchesCostsNoMemory) {
  // 2^31 shards of a 2-batch plan: every shard gets one step per shape,
  // most of them empty; the empty batches are not materialised (this used
  // to append 2^31 batches to the plan).
  const std::vector<int64_t> lengths = {5, 3, 9, 2};
  const int64_t count = int64_t{1} << 31;
  for (int64_t index : {int64_t{0}, int64_t{1}, count - 1}) {
    ScheduleOptions o{.planner = PadToMaxOptions{.batch_size = 2},
                      .shuffle = ShuffleMode::kNone,
                      .shard_index = index,
                      .shard_count = count};
    const EpochSchedule s = MakeEpochSchedule(lengths, {}, o, 0);
    EXPECT_EQ(s.plan.num_batches(), 2);
    ASSERT_EQ(s.steps.size(), s.plan.shapes.size());
    EXPECT_EQ(s.padding_batches, static_cast<int64_t>(s.plan.shapes.size()) * count - 2);
    std::vector<int64_t> examples;
    for (size_t t = 0; t < s.steps.size(); ++t) {
      const BatchView view = s.StepBatch(static_cast<int64_t>(t));
      EXPECT_EQ(view.shape, s.plan.shapes[t]);
      for (int64_t e : view.all_examples()) examples.push_back(e);
    }
    // Shard 0 gets the first batch of each shape; every other shard only padding.
    EXPECT_EQ(examples, index == 0 ? (std::vector<int64_t>{0, 1, 2, 3}) : std::vector<int64_t>{});
  }
}

}  // namespace
}  // namespace jaxbatch
