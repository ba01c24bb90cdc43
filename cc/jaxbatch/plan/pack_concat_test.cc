// Tests for Pack(algorithm="concat_then_split"): the plan against a slow
// reference that walks the concatenated stream token by token, Grain's
// ConcatThenSplitIterDataset cases (packing_concat_then_split_test.py, with
// its numbers), the token-level invariants, collation from each piece's
// offset, and the options' key and refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/plan/concat_split.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// (example, piece, start, length) of one segment.
using Seg = std::tuple<int64_t, int64_t, int64_t, int64_t>;
using Rows = std::vector<std::vector<Seg>>;

PackOptions Concat(int64_t row_length, int64_t rows_per_batch) {
  return {.row_length = row_length,
          .rows_per_batch = rows_per_batch,
          .algorithm = PackAlgorithm::kConcatThenSplit};
}

// The reference: the examples' tokens one at a time. A token opens a new
// row when the row is full, or when it starts a segment and the row has
// `max_segments` already; an empty example is a segment of the row open.
Rows SlowRows(const std::vector<int64_t>& lengths, const std::vector<int64_t>& order,
              int64_t row_length, int64_t max_segments) {
  Rows rows(1);
  int64_t used = 0;
  auto new_row = [&] {
    rows.emplace_back();
    used = 0;
  };
  for (int64_t e : order) {
    const int64_t length = lengths[static_cast<size_t>(e)];
    if (length == 0) {
      if (static_cast<int64_t>(rows.back().size()) == max_segments) new_row();
      rows.back().emplace_back(e, 0, 0, 0);
      continue;
    }
    int64_t piece = 0;
    for (int64_t t = 0; t < length; ++t) {
      const bool starts_segment = t == 0 || used == row_length;
      if (used == row_length ||
          (starts_segment && static_cast<int64_t>(rows.back().size()) == max_segments)) {
        new_row();
      }
      if (starts_segment) rows.back().emplace_back(e, t == 0 ? 0 : ++piece, t, 0);
      ++std::get<3>(rows.back().back());
      ++used;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

Rows PlanRows(const BatchPlan& plan) {
  Rows rows;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      rows.emplace_back();
      for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
        const size_t i = static_cast<size_t>(q);
        rows.back().emplace_back(view.examples[i], view.piece(q), view.starts[i],
                                 view.piece_lengths[i]);
      }
    }
  }
  return rows;
}

// Row by row, the example of each token (what Grain's tests print as values
// when example e's tokens are all e).
std::vector<std::vector<int64_t>> TokenRows(const BatchPlan& plan) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& row : PlanRows(plan)) {
    out.emplace_back();
    for (const auto& [e, piece, start, length] : row)
      out.back().insert(out.back().end(), length, e);
  }
  return out;
}

TEST(PackConcatTest, MatchesTheTokenByTokenReferenceInAnyOrder) {
  std::mt19937_64 rng(2727);
  for (int trial = 0; trial < 80; ++trial) {
    const int64_t row_length = 1 + static_cast<int64_t>(rng() % 10);
    const auto n = static_cast<int64_t>(rng() % 30);
    std::vector<int64_t> lengths(static_cast<size_t>(n));
    for (int64_t& l : lengths)
      l = static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * row_length + 1));
    std::vector<int64_t> order(lengths.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
    std::shuffle(order.begin(), order.end(), rng);
    PackOptions o = Concat(row_length, 1 + static_cast<int64_t>(rng() % 4));
    if (trial % 2) o.max_segments_per_row = 1 + static_cast<int64_t>(rng() % 4);
    if (trial % 3 == 0) o.remainder = Remainder::kKeep;
    const BatchPlan plan = Plan(lengths, o, order);
    CheckPlan(plan);
    ASSERT_TRUE(plan.split);
    const int64_t segments = plan.shapes.empty() ? 0 : plan.shapes[0].segments;
    const int64_t cap = o.max_segments_per_row.value_or(ConcatSegments(lengths, order, row_length));
    if (!plan.shapes.empty()) EXPECT_EQ(segments, cap);
    EXPECT_EQ(PlanRows(plan), SlowRows(lengths, order, row_length, cap)) << "trial " << trial;
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    EXPECT_EQ(plan.stats.real_elements, total);
    EXPECT_EQ(plan.stats.truncated, 0);
    int64_t started = 0;
    for (int64_t b = 0; b < plan.num_batches(); ++b) started += ExamplesStarted(plan.batch(b));
    EXPECT_EQ(started, n);  // each example's piece 0 once
  }
}

TEST(PackConcatTest, EveryRowButTheLastIsFullUnderTheDefaultSegments) {
  std::mt19937_64 rng(27);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t row_length = 1 + static_cast<int64_t>(rng() % 16);
    std::vector<int64_t> lengths(40);
    for (int64_t& l : lengths)
      l = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * row_length));
    std::vector<int64_t> order(lengths.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
    std::shuffle(order.begin(), order.end(), rng);
    const BatchPlan plan = Plan(lengths, Concat(row_length, 3), order);
    const Rows rows = PlanRows(plan);
    for (size_t r = 0; r + 1 < rows.size(); ++r) {
      int64_t used = 0;
      for (const Seg& s : rows[r]) used += std::get<3>(s);
      EXPECT_EQ(used, row_length) << "trial " << trial << " row " << r;
    }
    // The concatenation follows `order`: the examples appear in it.
    std::vector<int64_t> seen;
    for (const auto& row : rows) {
      for (const Seg& s : row) {
        if (std::get<1>(s) == 0) seen.push_back(std::get<0>(s));
      }
    }
    EXPECT_EQ(seen, order);
  }
}

// Grain's dummy_iter_dataset: observation i (1-based) repeats value v =
// ((i - 1) % 7) + 1 v times. Example ids here are i - 1.
std::vector<int64_t> GrainObservations(int64_t n) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < n; ++i) lengths.push_back(i % 7 + 1);
  return lengths;
}

// Row by row, the value of each token: observation e's value is e % 7 + 1.
std::vector<std::vector<int64_t>> GrainValues(const BatchPlan& plan) {
  std::vector<std::vector<int64_t>> rows = TokenRows(plan);
  for (auto& row : rows) {
    for (int64_t& v : row) v = v % 7 + 1;
  }
  return rows;
}

TEST(PackConcatTest, GrainMetaFeaturesNotRestrictingWhenSplittingFullLengthFeatures) {
  // Grain: length_struct={"observation": 6, "index": 6}, 9 observations.
  PackOptions o = Concat(6, 1);
  o.max_segments_per_row = 6;
  const BatchPlan plan = Plan(GrainObservations(9), o);
  EXPECT_EQ(GrainValues(plan), (std::vector<std::vector<int64_t>>{{1, 2, 2, 3, 3, 3},
                                                                  {4, 4, 4, 4, 5, 5},
                                                                  {5, 5, 5, 6, 6, 6},
                                                                  {6, 6, 6, 7, 7, 7},
                                                                  {7, 7, 7, 7, 1, 2},
                                                                  {2}}));
}

TEST(PackConcatTest, GrainMetaFeaturesRestricting) {
  // Grain: length_struct={"observation": 6, "index": 2}: two segments a row.
  PackOptions o = Concat(6, 1);
  o.max_segments_per_row = 2;
  const BatchPlan plan = Plan(GrainObservations(9), o);
  EXPECT_EQ(GrainValues(plan), (std::vector<std::vector<int64_t>>{{1, 2, 2},
                                                                  {3, 3, 3, 4, 4, 4},
                                                                  {4, 5, 5, 5, 5, 5},
                                                                  {6, 6, 6, 6, 6, 6},
                                                                  {7, 7, 7, 7, 7, 7},
                                                                  {7, 1},
                                                                  {2, 2}}));
}

TEST(PackConcatTest, GrainSplitElementMultipleTimes) {
  const BatchPlan plan = Plan(std::vector<int64_t>{7, 25}, Concat(10, 4));
  EXPECT_EQ(
      PlanRows(plan),
      (Rows{{{0, 0, 0, 7}, {1, 0, 0, 3}}, {{1, 1, 3, 10}}, {{1, 2, 13, 10}}, {{1, 3, 23, 2}}}));
}

TEST(PackConcatTest, GrainLargeElementWithExactFitFollowedBySmallElements) {
  const BatchPlan plan = Plan(std::vector<int64_t>{40, 5, 5}, Concat(10, 8));
  EXPECT_EQ(PlanRows(plan), (Rows{{{0, 0, 0, 10}},
                                  {{0, 1, 10, 10}},
                                  {{0, 2, 20, 10}},
                                  {{0, 3, 30, 10}},
                                  {{1, 0, 0, 5}, {2, 0, 0, 5}}}));
}

TEST(PackConcatTest, GrainOversizedFeature) {
  // Grain: observation [2, 2] at length 1 (index of length 1): two rows.
  const BatchPlan plan = Plan(std::vector<int64_t>{2}, Concat(1, 1));
  EXPECT_EQ(PlanRows(plan), (Rows{{{0, 0, 0, 1}}, {{0, 1, 1, 1}}}));
}

std::vector<int64_t> Values(const std::vector<Array>& out, const std::string& name) {
  for (const Array& a : out) {
    if (a.name != name) continue;
    std::vector<int64_t> v;
    for (int64_t k = 0; k < a.num_bytes() / static_cast<int64_t>(ItemSize(a.dtype)); ++k) {
      v.push_back(a.dtype == DType::kInt64 ? reinterpret_cast<const int64_t*>(a.data)[k]
                                           : reinterpret_cast<const int32_t*>(a.data)[k]);
    }
    return v;
  }
  ADD_FAILURE() << "no " << name;
  return {};
}

TEST(PackConcatTest, CollatesEachPieceFromItsOffsetWithPositionsFromZero) {
  // Grain's docstring: inputs [1, 2, 3], [4, 5, 6] at length 4.
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> offsets = {0, 3, 6};
  const Dataset ds({RaggedColumn::Ragged("inputs", DType::kInt32, {}, tokens.data(), 6,
                                         offsets.data(), 2, nullptr)});
  PackOptions o = Concat(4, 3);
  o.max_segments_per_row = 2;
  const BatchPlan plan = Plan(ds.column("inputs").Lengths(), o);
  ASSERT_EQ(plan.num_batches(), 1);
  const std::vector<Array> out = Collate(ds, plan, 0, {});
  EXPECT_EQ(Values(out, "inputs"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Values(out, "inputs_segment_ids"),
            (std::vector<int64_t>{1, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Values(out, "inputs_positions"),
            (std::vector<int64_t>{0, 1, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Values(out, "inputs_lengths"), (std::vector<int64_t>{3, 1, 2, 0, 0, 0}));
  EXPECT_EQ(Values(out, "example_index"), (std::vector<int64_t>{0, 1, 1, -1, -1, -1}));
  EXPECT_EQ(Values(out, "example_piece"), (std::vector<int64_t>{0, 0, 1, -1, -1, -1}));
  // A plan made from other lengths: a piece past its example is refused.
  BatchPlan wrong = plan;
  wrong.piece_starts[2] = 2;
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, wrong, 0, {}); });
  EXPECT_TRUE(Contains(msg, "elements [2, 4)")) << msg;
}

std::string Refusal(const PackOptions& o) {
  return ThrownMessage<InvalidArgumentError>([&] { ValidatePlannerOptions(o); });
}

TEST(PackConcatTest, OptionsKeyAndRefusals) {
  const PackOptions o = Concat(8, 2);
  const std::string key = PlannerKey(o);
  EXPECT_TRUE(Contains(key, "algorithm='concat_then_split'")) << key;
  EXPECT_EQ(ParsePlannerKey(key), PlannerOptions(o));
  // too_long does not apply: "error" (the default) and "split" plan alike.
  PackOptions split = o;
  split.too_long = TooLong::kSplit;
  const std::vector<int64_t> lengths = {30, 3, 0, 9};
  EXPECT_EQ(PlanRows(Plan(lengths, split)), PlanRows(Plan(lengths, o)));
  CheckExamplesFit(lengths, o);  // a long example is cut, not refused
  PackOptions bad = o;
  bad.too_long = TooLong::kTruncate;
  EXPECT_TRUE(Contains(Refusal(bad), "too_long=\"truncate\" would never apply"));
  bad.too_long = TooLong::kSkip;
  EXPECT_TRUE(Contains(Refusal(bad), "too_long=\"skip\""));
  bad = o;
  bad.lookahead = 4;
  EXPECT_TRUE(Contains(Refusal(bad), "lookahead=4 does not apply"));
  bad = o;
  bad.open_rows = 2;
  EXPECT_TRUE(Contains(Refusal(bad), "open_rows=2 does not apply"));
  bad = o;
  bad.remainder = Remainder::kDrop;
  EXPECT_TRUE(Contains(Refusal(bad), "remainder=\"drop\""));
}

TEST(PackConcatTest, RemainderPadsOrKeepsTheLastBatch) {
  const std::vector<int64_t> lengths = {10, 10, 10, 10, 10};  // 50 tokens, rows of 8: 7 rows
  const BatchPlan pad = Plan(lengths, Concat(8, 4));
  ASSERT_EQ(pad.num_batches(), 2);
  EXPECT_EQ(pad.batch(1).shape.rows, 4);
  EXPECT_EQ(pad.batch(1).stored_rows(), 3);
  PackOptions keep = Concat(8, 4);
  keep.remainder = Remainder::kKeep;
  keep.rows_multiple = 2;
  const BatchPlan kept = Plan(lengths, keep);
  EXPECT_EQ(kept.batch(1).shape.rows, 4);  // 3 rows rounded up to rows_multiple
  keep.rows_multiple = 1;
  EXPECT_EQ(Plan(lengths, keep).batch(1).shape.rows, 3);
}

TEST(PackConcatTest, CheckPlanRefusesSpansThatDoNotFit) {
  BatchPlan plan = Plan(std::vector<int64_t>{7, 25}, Concat(10, 4));
  BatchPlan missing = plan;
  missing.piece_lengths.pop_back();
  std::string msg = ThrownMessage<InvalidArgumentError>([&] { CheckPlan(missing); });
  EXPECT_TRUE(Contains(msg, "piece_lengths")) << msg;
  BatchPlan overfull = plan;
  overfull.piece_lengths[0] = 8;
  msg = ThrownMessage<InvalidArgumentError>([&] { CheckPlan(overfull); });
  EXPECT_TRUE(Contains(msg, "holds pieces of 11 elements")) << msg;
  BatchPlan negative = plan;
  negative.piece_starts[1] = -1;
  msg = ThrownMessage<InvalidArgumentError>([&] { CheckPlan(negative); });
  EXPECT_TRUE(Contains(msg, "expected both >= 0")) << msg;
}

}  // namespace
}  // namespace jaxbatch
