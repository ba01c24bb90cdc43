#include "jaxbatch/plan/planner_key.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

std::optional<int64_t> MaybeCount(std::mt19937& rng) {
  if (rng() % 3 == 0) return std::nullopt;
  return std::uniform_int_distribution<int64_t>(1, 1 << 20)(rng);
}

PlannerOptions RandomOptions(std::mt19937& rng) {
  auto count = [&] { return std::uniform_int_distribution<int64_t>(1, 1 << 20)(rng); };
  auto remainder = [&] { return static_cast<Remainder>(rng() % 3); };
  auto too_long = [&] { return static_cast<TooLong>(rng() % 3); };
  switch (rng() % 4) {
    case 0:
      return PadToMaxOptions{.batch_size = count(),
                             .pad_to_multiple = count(),
                             .remainder = remainder(),
                             .rows_multiple = rng() % 2 ? 1 : count()};
    case 1: {
      FixedBucketsOptions o{.batch_size = MaybeCount(rng),
                            .token_budget = MaybeCount(rng),
                            .remainder = remainder(),
                            .too_long = too_long(),
                            .rows_multiple = rng() % 2 ? 1 : count()};
      for (int k = 0, n = static_cast<int>(rng() % 5); k < n; ++k) o.boundaries.push_back(count());
      if (rng() % 3 == 0) {
        for (size_t k = 0; k < o.boundaries.size(); ++k) o.batch_sizes.push_back(count());
      }
      return o;
    }
    case 2:
      return AutoBucketsOptions{.max_shapes = count(),
                                .token_budget = MaybeCount(rng),
                                .batch_size = MaybeCount(rng),
                                .pad_to_multiple = count(),
                                .remainder = remainder(),
                                .rows_multiple = rng() % 2 ? 1 : count()};
    default:
      return PackOptions{.row_length = count(),
                         .rows_per_batch = count(),
                         .max_segments_per_row = MaybeCount(rng),
                         .algorithm = static_cast<PackAlgorithm>(rng() % 2),
                         .lookahead = MaybeCount(rng),
                         .open_rows = MaybeCount(rng),
                         .too_long = too_long(),
                         .remainder = remainder(),
                         .rows_multiple = rng() % 2 ? 1 : count()};
  }
}

TEST(PlannerKeyTest, EveryKeyParsesBackToItsOptions) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const PlannerOptions options = RandomOptions(rng);
    const std::string key = PlannerKey(options);
    EXPECT_TRUE(ParsePlannerKey(key) == options) << key;
    EXPECT_EQ(PlannerKey(ParsePlannerKey(key)), key);
  }
}

TEST(PlannerKeyTest, KeysReadLikeThePythonPlanner) {
  EXPECT_EQ(PlannerKey(AutoBucketsOptions{.max_shapes = 8, .token_budget = 65536}),
            "AutoBuckets(max_shapes=8, token_budget=65536, batch_size=None, pad_to_multiple=1, "
            "remainder='pad')");
  EXPECT_EQ(PlannerKey(PadToMaxOptions{.batch_size = 4, .rows_multiple = 2}),
            "PadToMax(batch_size=4, pad_to_multiple=1, remainder='pad', rows_multiple=2)");
  EXPECT_EQ(PlannerKey(FixedBucketsOptions{.boundaries = {8, 16}, .batch_size = 2}),
            "FixedBuckets(boundaries=[8, 16], batch_size=2, token_budget=None, remainder='pad', "
            "too_long='error')");
  EXPECT_EQ(PlannerKey(PackOptions{.row_length = 32, .rows_per_batch = 2, .open_rows = 4}),
            "Pack(row_length=32, rows_per_batch=2, max_segments_per_row=None, "
            "algorithm='best_fit', lookahead=None, too_long='error', remainder='pad', "
            "open_rows=4)");
}

// What earlier releases stored (Python reprs of the planner dataclasses)
// names the same options.
TEST(PlannerKeyTest, KeysOfEarlierReleasesParse) {
  EXPECT_TRUE(ParsePlannerKey("PadToMax(batch_size=4, pad_to_multiple=1, remainder='pad')") ==
              PlannerOptions(PadToMaxOptions{.batch_size = 4}));
  EXPECT_TRUE(ParsePlannerKey("Pack(row_length=32, rows_per_batch=2, max_segments_per_row=None, "
                              "algorithm='best_fit', lookahead=None, too_long='error', "
                              "remainder='pad')") ==
              PlannerOptions(PackOptions{.row_length = 32, .rows_per_batch = 2}));
  const PlannerOptions buckets = FixedBucketsOptions{.boundaries = {8, 16}, .token_budget = 64};
  for (const char* boundaries : {"[8, 16]", "(8, 16)", "[np.int64(8), np.int64(16)]", "(8,16,)"}) {
    const std::string key = StrCat("FixedBuckets(boundaries=", boundaries,
                                   ", batch_size=None, token_budget=64, remainder='pad', "
                                   "too_long='error')");
    EXPECT_TRUE(ParsePlannerKey(key) == buckets) << key;
  }
  EXPECT_TRUE(ParsePlannerKey("FixedBuckets(boundaries=(8,), token_budget=np.int64(64))") ==
              PlannerOptions(FixedBucketsOptions{.boundaries = {8}, .token_budget = 64}));
  // Field order does not matter; a field left out has its default.
  EXPECT_TRUE(ParsePlannerKey("AutoBuckets(remainder=\"keep\", max_shapes=3)") ==
              PlannerOptions(AutoBucketsOptions{.max_shapes = 3, .remainder = Remainder::kKeep}));
}

TEST(PlannerKeyTest, WhatIsNoKeyIsRefusedNamingWhere) {
  auto message = [](std::string_view key) {
    return ThrownMessage<InvalidArgumentError>([&] { ParsePlannerKey(key); });
  };
  EXPECT_TRUE(Contains(message("Sorted(batch_size=4)"), "unknown planner 'Sorted'"));
  EXPECT_TRUE(Contains(message("PadToMax(batch=4)"), "unknown field 'batch'"));
  EXPECT_TRUE(Contains(message("PadToMax(batch_size=4, batch_size=5)"), "given twice"));
  EXPECT_TRUE(Contains(message("PadToMax(batch_size='4')"), "batch_size must be an integer"));
  EXPECT_TRUE(Contains(message("PadToMax(remainder='spill')"), "remainder must be one of"));
  EXPECT_TRUE(Contains(message("PadToMax(batch_size=4"), "at character"));
  EXPECT_TRUE(Contains(message("PadToMax(batch_size=4) trailing"), "unexpected text"));
  EXPECT_TRUE(Contains(message("PadToMax(batch_size=99999999999999999999)"), "integer"));
  EXPECT_TRUE(Contains(message(""), "expected a name"));
}

}  // namespace
}  // namespace jaxbatch
