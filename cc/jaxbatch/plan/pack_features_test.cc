// Tests for Pack with several features, each its own row length: Grain's
// two-feature fixture at several row lengths, max_sequences_per_bin and
// zero-length features (grain testing_util.py), with one feature the
// single-feature packer exactly, the options' validation and their key.
#include "jaxbatch/plan/pack_features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/feature_packer.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

using RowSet = std::set<std::vector<int64_t>>;

template <typename F>
std::string Refusal(F&& f) {
  return ThrownMessage<InvalidArgumentError>(std::forward<F>(f));
}

// Grain's fixture: inputs [1, 2, 3], [4, 5], [6]; targets [10], [20, 30, 40], [50, 60].
const std::vector<int64_t> kInputs = {3, 2, 1};
const std::vector<int64_t> kTargets = {1, 3, 2};

// The rows of `plan`, each its examples in segment order.
std::vector<std::vector<int64_t>> Rows(const BatchPlan& plan) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      const auto examples = view.row_examples(r);
      rows.emplace_back(examples.begin(), examples.end());
    }
  }
  return rows;
}

RowSet AsSet(const std::vector<std::vector<int64_t>>& rows) { return {rows.begin(), rows.end()}; }

PackOptions TwoFeatures(int64_t inputs, int64_t targets, PackAlgorithm algorithm,
                        std::optional<int64_t> open_rows = std::nullopt) {
  return PackOptions{.row_lengths = {{"inputs", inputs}, {"targets", targets}},
                     .rows_per_batch = 4,
                     .algorithm = algorithm,
                     .open_rows = open_rows};
}

TEST(PackFeatures, GrainFixtureAtSeveralRowLengths) {
  // Grain's test_pack_sequences_length_{3..7} and _different_lengths, with
  // num_packing_bins as open_rows: the rows, as sets of examples.
  struct Case {
    int64_t inputs, targets, bins;
    RowSet rows;
  };
  const std::vector<Case> cases = {
      {3, 3, 1, {{0}, {1}, {2}}}, {3, 3, 3, {{0}, {1}, {2}}}, {4, 4, 2, {{0, 2}, {1}}},
      {5, 5, 2, {{0, 1}, {2}}},   {6, 6, 2, {{0, 1, 2}}},     {7, 7, 1, {{0, 1, 2}}},
      {3, 4, 3, {{0}, {1}, {2}}},
  };
  for (const Case& c : cases) {
    const BatchPlan plan = Plan(
        kInputs, TwoFeatures(c.inputs, c.targets, PackAlgorithm::kFirstFit, c.bins), {}, kTargets);
    EXPECT_EQ(AsSet(Rows(plan)), c.rows) << c.inputs << "/" << c.targets;
    EXPECT_EQ(plan.feature_names, (std::vector<std::string>{"inputs", "targets"}));
    EXPECT_EQ(plan.feature_row_lengths, (std::vector<int64_t>{c.inputs, c.targets}));
    EXPECT_EQ(plan.shapes[0].length, c.inputs + c.targets);
    EXPECT_EQ(plan.stats.real_elements, 12);  // 6 inputs + 6 targets
  }
}

TEST(PackFeatures, BestFitIsGrainsLeastRoomSummedOverFeatures) {
  // Best-fit decreasing (no open_rows) takes example 1 (5 elements) first,
  // then 0 (4), then 2 (3): at 4/4 example 2 fits only beside example 0.
  EXPECT_EQ(AsSet(Rows(Plan(kInputs, TwoFeatures(4, 4, PackAlgorithm::kBestFit), {}, kTargets))),
            (RowSet{{1}, {0, 2}}));
  // Online best fit picks the open row with the least room summed over the
  // features where every feature fits; first fit the earliest. Rows of 4
  // and 4: example 0 (1, 0) opens A (room 3 + 4), example 1 (4, 1) opens B
  // (room 0 + 3); example 2 (0, 1) fits both. B then holds the most
  // examples a row can (2, the default segment axis), so it is emitted as
  // it fills, before A.
  const std::vector<int64_t> inputs = {1, 4, 0};
  const std::vector<int64_t> targets = {0, 1, 1};
  EXPECT_EQ(Rows(Plan(inputs, TwoFeatures(4, 4, PackAlgorithm::kBestFit, 2), {}, targets)),
            (std::vector<std::vector<int64_t>>{{1, 2}, {0}}));
  EXPECT_EQ(Rows(Plan(inputs, TwoFeatures(4, 4, PackAlgorithm::kFirstFit, 2), {}, targets)),
            (std::vector<std::vector<int64_t>>{{0, 2}, {1}}));
}

TEST(PackFeatures, MaxSegmentsPerRowIsGrainsMaxSequencesPerBin) {
  // Grain's test_pack_max_sequences_per_bin: rows of 6 and 6, at most 2 examples.
  PackOptions o = TwoFeatures(6, 6, PackAlgorithm::kFirstFit, 2);
  o.max_segments_per_row = 2;
  const BatchPlan plan = Plan(kInputs, o, {}, kTargets);
  EXPECT_EQ(Rows(plan), (std::vector<std::vector<int64_t>>{{0, 1}, {2}}));
  EXPECT_EQ(plan.shapes[0].segments, 2);
}

TEST(PackFeatures, AnExampleEmptyInAFeatureTakesItsSegment) {
  // Grain's test_pack_sequences_with_zeros: input_tokens, input_vectors
  // and targets of 5, 3 and 5, at most 3 examples a row; the last example
  // is empty in every feature and still takes a segment.
  const std::vector<int64_t> tokens = {2, 1, 2, 1, 0};
  const std::vector<int64_t> others = {0, 3, 2, 1, 0,   // input_vectors
                                       0, 1, 3, 2, 0};  // targets
  const PackOptions o{.row_lengths = {{"input_tokens", 5}, {"input_vectors", 3}, {"targets", 5}},
                      .rows_per_batch = 2,
                      .max_segments_per_row = 3,
                      .algorithm = PackAlgorithm::kFirstFit,
                      .open_rows = 2};
  const BatchPlan plan = Plan(tokens, o, {}, others);
  EXPECT_EQ(Rows(plan), (std::vector<std::vector<int64_t>>{{0, 1, 4}, {2, 3}}));
  EXPECT_EQ(plan.stats.real_elements, 6 + 6 + 6);
}

TEST(PackFeatures, TruncateCutsEachFeatureToItsOwnRowLength) {
  PackOptions o = TwoFeatures(2, 2, PackAlgorithm::kFirstFit);
  o.too_long = TooLong::kTruncate;
  const BatchPlan plan = Plan(kInputs, o, {}, kTargets);
  // Cut: (2, 1), (2, 2), (1, 2): no two fit a row of 2 and 2.
  EXPECT_EQ(AsSet(Rows(plan)), (RowSet{{0}, {1}, {2}}));
  EXPECT_TRUE(plan.allow_truncate);
  EXPECT_EQ(plan.stats.truncated, 2);  // examples 0 (inputs) and 1 (both)
  EXPECT_EQ(plan.stats.real_elements, 2 + 1 + 2 + 2 + 1 + 2);
  o.too_long = TooLong::kSkip;
  const BatchPlan skipped = Plan(kInputs, o, {}, kTargets);
  EXPECT_EQ(skipped.skipped_examples, (std::vector<int64_t>{0, 1}));
  o.too_long = TooLong::kError;
  EXPECT_TRUE(Contains(Refusal([&] { Plan(kInputs, o, {}, kTargets); }),
                       "example 0 has 3 elements in feature 'inputs', longer than its row "
                       "length 2"));
  EXPECT_TRUE(
      Contains(Refusal([&] { CheckExamplesFit(kInputs, o, kTargets); }), "feature 'inputs'"));
}

TEST(PackFeatures, OneFeatureIsTheSingleFeaturePacker) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t row_length = 1 + static_cast<int64_t>(rng() % 32);
    std::vector<int64_t> lengths(1 + rng() % 80);
    for (int64_t& l : lengths) l = static_cast<int64_t>(rng() % (row_length + 1));
    std::vector<int64_t> ids(lengths.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int64_t segments = 1 + static_cast<int64_t>(rng() % 6);
    const std::vector<int64_t> capacity = {row_length};
    const FeatureLengths features{.lengths = lengths,
                                  .num_examples = static_cast<int64_t>(lengths.size()),
                                  .capacities = capacity};
    for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
      const int64_t window = static_cast<int64_t>(rng() % 20);
      const PackedRows one = PackRows(lengths, ids, row_length, segments, algorithm, window);
      const PackedRows many = PackFeatureRows(features, ids, segments, algorithm, window, 0);
      EXPECT_EQ(many.row_begin, one.row_begin) << trial;
      EXPECT_EQ(many.example_ids, one.example_ids) << trial;
      const int64_t open = 1 + static_cast<int64_t>(rng() % 5);
      const PackedRows stream =
          PackRowsStreaming(lengths, ids, row_length, segments, algorithm, open);
      const PackedRows stream_many = PackFeatureRows(features, ids, segments, algorithm, 0, open);
      EXPECT_EQ(stream_many.row_begin, stream.row_begin) << trial;
      EXPECT_EQ(stream_many.example_ids, stream.example_ids) << trial;
    }
  }
}

TEST(PackFeatures, EveryRowHoldsEveryFeatureAndEveryExampleOnce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
    const std::vector<int64_t> caps = {1 + static_cast<int64_t>(rng() % 20),
                                       1 + static_cast<int64_t>(rng() % 20),
                                       1 + static_cast<int64_t>(rng() % 20)};
    std::vector<int64_t> lengths(static_cast<size_t>(n) * 3);
    for (size_t k = 0; k < lengths.size(); ++k) {
      lengths[k] = static_cast<int64_t>(rng() % (caps[k / static_cast<size_t>(n)] + 1));
    }
    const PackOptions o{.row_lengths = {{"a", caps[0]}, {"b", caps[1]}, {"c", caps[2]}},
                        .rows_per_batch = 3,
                        .algorithm = trial % 2 ? PackAlgorithm::kBestFit : PackAlgorithm::kFirstFit,
                        .open_rows = trial % 3 ? std::optional<int64_t>(trial % 3) : std::nullopt};
    const std::span<const int64_t> all(lengths);
    const BatchPlan plan =
        Plan(all.first(static_cast<size_t>(n)), o, {}, all.subspan(static_cast<size_t>(n)));
    std::vector<int64_t> seen;
    for (const std::vector<int64_t>& row : Rows(plan)) {
      EXPECT_LE(static_cast<int64_t>(row.size()), plan.shapes[0].segments);
      for (size_t f = 0; f < 3; ++f) {
        int64_t used = 0;
        for (int64_t e : row) used += lengths[f * static_cast<size_t>(n) + static_cast<size_t>(e)];
        EXPECT_LE(used, caps[f]) << trial;
      }
      seen.insert(seen.end(), row.begin(), row.end());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all_ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all_ids[static_cast<size_t>(i)] = i;
    EXPECT_EQ(seen, all_ids) << trial;
  }
}

TEST(PackFeatures, RefusesWhatDoesNotPairUpAcrossFeatures) {
  PackOptions o = TwoFeatures(4, 4, PackAlgorithm::kFirstFit);
  o.too_long = TooLong::kSplit;
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }),
                       "too_long=\"split\" with several features"));
  o = TwoFeatures(4, 4, PackAlgorithm::kConcatThenSplit);
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }),
                       "algorithm=\"concat_then_split\" with several features"));
  o = TwoFeatures(4, 4, PackAlgorithm::kFirstFit);
  o.row_length = 8;
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }), "not both"));
  o = TwoFeatures(4, 0, PackAlgorithm::kFirstFit);
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }),
                       "row_length['targets'] must be a positive integer, found 0"));
  // What is refused and why (on main: "a list of row lengths for one column
  // or a dict of features' row lengths, not both", though no list was given).
  o = TwoFeatures(4, 4, PackAlgorithm::kFirstFit);
  o.rows_per_batch = 0;
  o.token_budget = 64;
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }),
                       "Pack: token_budget=64 with several features (row_length={'inputs': 4, "
                       "'targets': 4}) is not supported: a budget sizes batches by one row "
                       "length"));
  o = TwoFeatures(4, 4, PackAlgorithm::kFirstFit);
  o.max_shapes = 2;
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }),
                       "Pack: max_shapes=2 with several features"));
  o = TwoFeatures(4, 4, PackAlgorithm::kFirstFit);
  o.row_length_list = {2, 4};
  EXPECT_TRUE(Contains(Refusal([&] { ValidatePlannerOptions(o); }),
                       "a row_length list) and several features"));
  o = TwoFeatures(4, 4, PackAlgorithm::kFirstFit);
  EXPECT_TRUE(
      Contains(Refusal([&] { Plan(kInputs, o, {}, std::vector<int64_t>{1, 2}); }), "found 2"));
}

TEST(PackFeatures, KeyWritesAndReadsEachFeaturesRowLength) {
  const PackOptions o = TwoFeatures(512, 128, PackAlgorithm::kBestFit);
  const std::string key = PlannerKey(o);
  EXPECT_TRUE(Contains(key, "row_length={'inputs': 512, 'targets': 128}"));
  EXPECT_EQ(ParsePlannerKey(key), PlannerOptions(o));
  // One row length keeps the key it always had.
  EXPECT_TRUE(Contains(PlannerKey(PackOptions{.row_length = 8, .rows_per_batch = 2}),
                       "Pack(row_length=8, rows_per_batch=2,"));
  EXPECT_TRUE(Contains(
      Refusal([&] { ParsePlannerKey("Pack(row_length={'a': 1, 'a': 2}, rows_per_batch=2)"); }),
      "names feature 'a' twice"));
}

}  // namespace
}  // namespace jaxbatch
