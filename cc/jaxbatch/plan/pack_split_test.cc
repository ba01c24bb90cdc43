// Tests for Pack's too_long="split": the plan against a slow reference that
// cuts every example into pieces by hand and packs the pieces as examples of
// their own, the token-level invariants (every element exactly once, pieces
// in order, none longer than a row), and the collated rows element by
// element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// The reference: each example cut element by element into runs of at most
// `row_length`, listed as (example, piece, length), in the examples' order.
struct RefPiece {
  int64_t example, piece, length;
};

std::vector<RefPiece> SlowPieces(const std::vector<int64_t>& lengths, int64_t row_length) {
  std::vector<RefPiece> pieces;
  for (int64_t e = 0; e < static_cast<int64_t>(lengths.size()); ++e) {
    int64_t piece = 0, run = 0;
    for (int64_t t = 0; t < lengths[static_cast<size_t>(e)]; ++t) {
      if (run == row_length) {
        pieces.push_back({e, piece++, run});
        run = 0;
      }
      ++run;
    }
    pieces.push_back({e, piece, run});  // the last piece (empty for an empty example)
  }
  return pieces;
}

// Row by row, (example, piece) of every segment of `plan`.
std::vector<std::vector<std::pair<int64_t, int64_t>>> Rows(const BatchPlan& plan) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rows;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      rows.emplace_back();
      for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
        rows.back().emplace_back(view.examples[static_cast<size_t>(q)], view.piece(q));
      }
    }
  }
  return rows;
}

std::vector<int64_t> RandomLengths(std::mt19937_64& rng, int64_t n, int64_t most) {
  std::uniform_int_distribution<int64_t> length(0, most);
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t& l : lengths) l = length(rng);
  return lengths;
}

TEST(PackSplitTest, MatchesPackingTheSlowReferencePiecesAsExamples) {
  std::mt19937_64 rng(27);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t row_length = 1 + static_cast<int64_t>(rng() % 9);
    const std::vector<int64_t> lengths =
        RandomLengths(rng, 1 + static_cast<int64_t>(rng() % 40), 4 * row_length);
    const std::vector<RefPiece> ref = SlowPieces(lengths, row_length);
    std::vector<int64_t> ref_lengths;
    for (const RefPiece& p : ref) ref_lengths.push_back(p.length);
    for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
      for (int mode = 0; mode < 3; ++mode) {
        PackOptions o{.row_length = row_length, .rows_per_batch = 3, .algorithm = algorithm};
        if (mode == 1) o.lookahead = 5;
        if (mode == 2) o.open_rows = 2;
        PackOptions split = o;
        split.too_long = TooLong::kSplit;
        const BatchPlan plan = Plan(lengths, split);
        const BatchPlan expected = Plan(ref_lengths, o);
        ASSERT_TRUE(plan.split);
        EXPECT_EQ(plan.shapes, expected.shapes);
        EXPECT_EQ(plan.stats.real_elements, expected.stats.real_elements);
        EXPECT_EQ(plan.stats.truncated, 0);
        std::vector<std::vector<std::pair<int64_t, int64_t>>> want;
        for (const auto& row : Rows(expected)) {
          want.emplace_back();
          for (const auto& [id, unused] : row) {
            const RefPiece& p = ref[static_cast<size_t>(id)];
            want.back().emplace_back(p.example, p.piece);
          }
        }
        EXPECT_EQ(Rows(plan), want) << "trial " << trial << " mode " << mode;
      }
    }
  }
}

TEST(PackSplitTest, EveryElementExactlyOnceInOrderAndNoPieceLongerThanARow) {
  std::mt19937_64 rng(2027);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t row_length = 1 + static_cast<int64_t>(rng() % 12);
    const std::vector<int64_t> lengths = RandomLengths(rng, 30, 5 * row_length);
    const BatchPlan plan = Plan(
        lengths,
        PackOptions{.row_length = row_length, .rows_per_batch = 4, .too_long = TooLong::kSplit});
    CheckPlan(plan);
    std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> spans;  // example -> pieces
    int64_t real = 0;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      const BatchView view = plan.batch(b);
      for (int64_t r = 0; r < view.stored_rows(); ++r) {
        int64_t used = 0;
        for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
          const int64_t e = view.examples[static_cast<size_t>(q)];
          const PieceSpan s = PieceOf(lengths[static_cast<size_t>(e)], view.piece(q), row_length);
          EXPECT_LE(s.length, row_length);
          spans[e].emplace_back(view.piece(q), s.start);
          used += s.length;
        }
        EXPECT_LE(used, row_length);
        real += used;
      }
    }
    int64_t total = 0;
    for (int64_t e = 0; e < static_cast<int64_t>(lengths.size()); ++e) {
      total += lengths[static_cast<size_t>(e)];
      std::vector<std::pair<int64_t, int64_t>> got = spans[e];
      std::sort(got.begin(), got.end());
      const int64_t count = PieceCount(lengths[static_cast<size_t>(e)], row_length);
      ASSERT_EQ(static_cast<int64_t>(got.size()), count) << "example " << e;
      for (int64_t k = 0; k < count; ++k) {  // pieces 0..count-1, each once, back to back
        EXPECT_EQ(got[static_cast<size_t>(k)], std::make_pair(k, k * row_length));
      }
    }
    EXPECT_EQ(real, total);
    EXPECT_EQ(plan.stats.real_elements, total);
  }
}

TEST(PackSplitTest, CollatesEachPieceFromItsOffsetWithPositionsFromZero) {
  // Example 0 has 7 tokens, example 1 has 2: rows of 3 hold [0:3], [3:6], [6:7]+[ex1].
  const std::vector<int32_t> tokens = {10, 11, 12, 13, 14, 15, 16, 20, 21};
  const std::vector<int64_t> offsets = {0, 7, 9};
  const Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 9,
                                         offsets.data(), 2, nullptr)});
  const BatchPlan plan =
      Plan(ds.column("tokens").Lengths(), PackOptions{.row_length = 3,
                                                      .rows_per_batch = 3,
                                                      .max_segments_per_row = 2,
                                                      .algorithm = PackAlgorithm::kFirstFit,
                                                      .too_long = TooLong::kSplit});
  ASSERT_EQ(plan.num_batches(), 1);
  const std::vector<Array> out = Collate(ds, plan, 0, {});
  auto values = [&](const std::string& name) {
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
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(values("tokens"), (std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 20, 21}));
  EXPECT_EQ(values("tokens_positions"), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(values("tokens_segment_ids"), (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(values("tokens_lengths"), (std::vector<int64_t>{3, 0, 3, 0, 1, 2}));
  EXPECT_EQ(values("example_index"), (std::vector<int64_t>{0, -1, 0, -1, 0, 1}));
  EXPECT_EQ(values("example_piece"), (std::vector<int64_t>{0, -1, 1, -1, 2, 0}));
  BatchLayout layout;
  layout.packed = true;
  layout.split = true;
  int64_t bytes = 0;
  for (const Array& a : out) bytes += a.num_bytes();
  EXPECT_EQ(CollatedBytes(ds, plan.shapes[0], layout), bytes);
  EXPECT_EQ(ExamplesStarted(plan.batch(0)), 2);
}

// The message of the InvalidArgumentError `f` throws.
template <typename F>
std::string Refusal(F&& f) {
  return ThrownMessage<InvalidArgumentError>(std::forward<F>(f));
}

TEST(PackSplitTest, OptionsKeyAndRefusals) {
  // Keys without split are pinned in planner_key_test; split round-trips.
  const PackOptions split{.row_length = 8, .rows_per_batch = 2, .too_long = TooLong::kSplit};
  const std::string key = PlannerKey(split);
  EXPECT_TRUE(Contains(key, "too_long='split'")) << key;
  EXPECT_EQ(ParsePlannerKey(key), PlannerOptions(split));
  PackOptions drop = split;
  drop.remainder = Remainder::kDrop;
  std::string msg = Refusal([&] { ValidatePlannerOptions(drop); });
  EXPECT_TRUE(Contains(msg, "remainder=\"drop\"")) << msg;
  // FixedBuckets splits too (bucket_split_test), but not with remainder drop.
  const FixedBucketsOptions buckets{.boundaries = {4, 8},
                                    .batch_size = 2,
                                    .remainder = Remainder::kDrop,
                                    .too_long = TooLong::kSplit};
  msg = Refusal([&] { ValidatePlannerOptions(buckets); });
  EXPECT_TRUE(Contains(msg, "FixedBuckets: too_long=\"split\" with remainder=\"drop\"")) << msg;
  // A split plan whose pieces do not line up with its examples is refused.
  BatchPlan plan = Plan(std::vector<int64_t>{9, 2}, split);
  plan.example_pieces.pop_back();
  msg = Refusal([&] { CheckPlan(plan); });
  EXPECT_TRUE(Contains(msg, "example_pieces")) << msg;
}

}  // namespace
}  // namespace jaxbatch
