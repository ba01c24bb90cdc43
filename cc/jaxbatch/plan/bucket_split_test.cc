// Tests for FixedBuckets' too_long="split": the plan against a slow
// reference that cuts every example element by element into runs of at
// most the last boundary and buckets each run as an example of its own, the
// token-level invariants (every element exactly once, pieces in order),
// the collated rows element by element, and the options' refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// (example, piece, start, length) of one segment.
using Seg = std::tuple<int64_t, int64_t, int64_t, int64_t>;

// The reference: the runs of at most the last boundary that each example
// is cut into, element by element, in the examples' order, each run to the
// first boundary >= its length; a bucket emits a batch when it holds
// `rows[k]` runs (tf.data's bucket_by_sequence_length), and the partial
// batches follow in bucket order. Each batch as (its length, its rows'
// segments).
std::vector<std::pair<int64_t, std::vector<Seg>>> SlowSplitBuckets(
    const std::vector<int64_t>& lengths, const std::vector<int64_t>& order,
    const std::vector<int64_t>& boundaries, const std::vector<int64_t>& rows) {
  std::vector<std::vector<Seg>> buckets(boundaries.size());
  std::vector<std::pair<int64_t, std::vector<Seg>>> batches;
  const int64_t cut = boundaries.back();
  for (int64_t e : order) {
    int64_t piece = 0, start = 0, run = 0;
    auto emit = [&] {
      size_t k = 0;
      while (boundaries[k] < run) ++k;
      buckets[k].emplace_back(e, piece++, start, run);
      if (static_cast<int64_t>(buckets[k].size()) == rows[k]) {
        batches.emplace_back(boundaries[k], std::move(buckets[k]));
        buckets[k].clear();
      }
      start += run;
      run = 0;
    };
    for (int64_t t = 0; t < lengths[static_cast<size_t>(e)]; ++t) {
      if (run == cut) emit();
      ++run;
    }
    emit();  // the last piece (empty for an empty example)
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    if (!buckets[k].empty()) batches.emplace_back(boundaries[k], std::move(buckets[k]));
  }
  return batches;
}

// The plan's batches in the reference's form.
std::vector<std::pair<int64_t, std::vector<Seg>>> Batches(const BatchPlan& plan) {
  std::vector<std::pair<int64_t, std::vector<Seg>>> batches;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    batches.emplace_back(view.shape.length, std::vector<Seg>{});
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      EXPECT_EQ(view.row_begin[r + 1] - view.row_begin[r], 1) << "a padded row holds one segment";
      const int64_t q = view.row_begin[r];
      const auto i = static_cast<size_t>(q);
      batches.back().second.emplace_back(view.examples[i], view.piece(q), view.starts[i],
                                         view.piece_lengths[i]);
    }
  }
  return batches;
}

std::vector<int64_t> RandomLengths(std::mt19937_64& rng, int64_t n, int64_t most) {
  std::uniform_int_distribution<int64_t> length(0, most);
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t& l : lengths) l = length(rng);
  return lengths;
}

// Up to 4 strictly increasing boundaries in [1, 12].
std::vector<int64_t> RandomBoundaries(std::mt19937_64& rng) {
  std::vector<int64_t> all(12);
  for (int64_t k = 0; k < 12; ++k) all[static_cast<size_t>(k)] = k + 1;
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(1 + rng() % 4);
  std::sort(all.begin(), all.end());
  return all;
}

TEST(BucketSplitTest, MatchesTheSlowReference) {
  std::mt19937_64 rng(27);
  for (int trial = 0; trial < 80; ++trial) {
    const std::vector<int64_t> boundaries = RandomBoundaries(rng);
    const std::vector<int64_t> lengths =
        RandomLengths(rng, 1 + static_cast<int64_t>(rng() % 30), 4 * boundaries.back());
    std::vector<int64_t> order(lengths.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> rows;
    for (size_t k = 0; k < boundaries.size(); ++k) rows.push_back(1 + rng() % 3);
    FixedBucketsOptions o{.boundaries = boundaries,
                          .remainder = Remainder::kKeep,
                          .too_long = TooLong::kSplit,
                          .batch_sizes = rows};
    const BatchPlan plan = Plan(lengths, o, order);
    CheckPlan(plan);
    ASSERT_TRUE(plan.split);
    EXPECT_EQ(Batches(plan), SlowSplitBuckets(lengths, order, boundaries, rows))
        << "trial " << trial;
    EXPECT_EQ(plan.stats.examples, static_cast<int64_t>(lengths.size()));
    EXPECT_EQ(plan.stats.truncated, 0);
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    EXPECT_EQ(plan.stats.real_elements, total) << "every element counts once";
    int64_t started = 0;
    for (int64_t b = 0; b < plan.num_batches(); ++b) started += ExamplesStarted(plan.batch(b));
    EXPECT_EQ(started, static_cast<int64_t>(lengths.size())) << "each example starts once";
  }
}

TEST(BucketSplitTest, EveryElementExactlyOnceInOrderWithTokenBudget) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const std::vector<int64_t> boundaries = RandomBoundaries(rng);
    const std::vector<int64_t> lengths = RandomLengths(rng, 20, 5 * boundaries.back());
    const int64_t budget = boundaries.back() * (1 + static_cast<int64_t>(rng() % 4));
    const BatchPlan plan = Plan(lengths, FixedBucketsOptions{.boundaries = boundaries,
                                                             .token_budget = budget,
                                                             .too_long = TooLong::kSplit});
    // The budget's rows, balanced over each bucket's pieces (balance.h):
    // the reference's one batch per bucket counts them.
    std::vector<int64_t> order(lengths.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::map<int64_t, int64_t> rows_of;  // per bucket length
    std::vector<int64_t> rows;
    for (const auto& [length, pieces] :
         SlowSplitBuckets(lengths, order, boundaries,
                          std::vector<int64_t>(boundaries.size(), int64_t{1} << 40))) {
      rows_of[length] = BalancedRows(static_cast<int64_t>(pieces.size()), budget / length, 1);
    }
    for (int64_t boundary : boundaries)
      rows.push_back(rows_of.count(boundary) ? rows_of[boundary] : 1);
    EXPECT_EQ(Batches(plan), SlowSplitBuckets(lengths, order, boundaries, rows));
    // Per example, the elements its pieces cover, piece by piece.
    std::map<int64_t, std::map<int64_t, std::pair<int64_t, int64_t>>> spans;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      const BatchView view = plan.batch(b);
      EXPECT_LE(view.shape.rows * view.shape.length, budget) << "the budget holds";
      EXPECT_EQ(view.shape.rows, rows_of.at(view.shape.length)) << "the budget's rows, balanced";
      for (int64_t q = view.row_begin[0]; q < view.row_begin[view.stored_rows()]; ++q) {
        const auto i = static_cast<size_t>(q);
        EXPECT_LE(view.piece_lengths[i], view.shape.length) << "a piece fits its bucket";
        EXPECT_TRUE(spans[view.examples[i]]
                        .emplace(view.piece(q), std::pair(view.starts[i], view.piece_lengths[i]))
                        .second)
            << "piece listed twice";
      }
    }
    ASSERT_EQ(spans.size(), lengths.size());
    for (const auto& [e, pieces] : spans) {
      int64_t next = 0, k = 0;
      for (const auto& [piece, span] : pieces) {
        EXPECT_EQ(piece, k++) << "pieces 0..n-1";
        EXPECT_EQ(span.first, next) << "contiguous, in order";
        EXPECT_LE(span.second, boundaries.back());
        next += span.second;
      }
      EXPECT_EQ(next, lengths[static_cast<size_t>(e)]) << "example " << e << " covered";
    }
  }
}

// The values of array `name` of `out`, as int64.
std::vector<int64_t> Values(const std::vector<Array>& out, const std::string& name) {
  for (const Array& a : out) {
    if (a.name != name) continue;
    std::vector<int64_t> v;
    for (int64_t k = 0; k < a.num_bytes() / static_cast<int64_t>(ItemSize(a.dtype)); ++k) {
      switch (a.dtype) {
        case DType::kInt64:
          v.push_back(reinterpret_cast<const int64_t*>(a.data)[k]);
          break;
        case DType::kBool:
          v.push_back(reinterpret_cast<const bool*>(a.data)[k]);
          break;
        default:
          v.push_back(reinterpret_cast<const int32_t*>(a.data)[k]);
      }
    }
    return v;
  }
  ADD_FAILURE() << "no " << name;
  return {};
}

TEST(BucketSplitTest, CollatesEachPieceFromItsOffsetIntoItsBucket) {
  // Example 0 has 7 tokens, example 1 has 2; boundaries {2, 3}: example 0
  // is cut into [0:3], [3:6] (bucket 3) and [6:7] (bucket 2), example 1
  // whole into bucket 2.
  const std::vector<int32_t> tokens = {10, 11, 12, 13, 14, 15, 16, 20, 21};
  const std::vector<int64_t> offsets = {0, 7, 9};
  const Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 9,
                                         offsets.data(), 2, nullptr)});
  const BatchPlan plan =
      Plan(ds.column("tokens").Lengths(),
           FixedBucketsOptions{.boundaries = {2, 3}, .batch_size = 2, .too_long = TooLong::kSplit});
  ASSERT_EQ(plan.num_batches(), 2);
  CollateOptions options;
  options.padded_segments = true;
  const std::vector<Array> small = Collate(ds, plan, 1, options);  // filled last
  EXPECT_EQ(Values(small, "tokens"), (std::vector<int64_t>{16, 0, 20, 21}));
  EXPECT_EQ(Values(small, "tokens_mask"), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(Values(small, "tokens_lengths"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Values(small, "tokens_positions"), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(Values(small, "example_index"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Values(small, "example_piece"), (std::vector<int64_t>{2, 0}));
  const std::vector<Array> full = Collate(ds, plan, 0, {});  // filled first
  EXPECT_EQ(Values(full, "tokens"), (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(Values(full, "tokens_lengths"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(Values(full, "example_index"), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(Values(full, "example_piece"), (std::vector<int64_t>{0, 1}));
  BatchLayout layout;
  layout.split = true;
  int64_t bytes = 0;
  for (const Array& a : full) bytes += a.num_bytes();
  EXPECT_EQ(CollatedBytes(ds, plan.shapes[plan.batch_shape_ids[0]], layout), bytes);
  EXPECT_EQ(ExamplesStarted(plan.batch(0)), 1);
  EXPECT_EQ(ExamplesStarted(plan.batch(1)), 1);
}

// The message of the InvalidArgumentError `f` throws.
template <typename F>
std::string Refusal(F&& f) {
  return ThrownMessage<InvalidArgumentError>(std::forward<F>(f));
}

TEST(BucketSplitTest, OptionsKeyAndRefusals) {
  const FixedBucketsOptions split{
      .boundaries = {4, 8}, .batch_size = 2, .too_long = TooLong::kSplit};
  EXPECT_TRUE(YieldsPieces(split));
  EXPECT_FALSE(YieldsPieces(FixedBucketsOptions{.boundaries = {4}, .batch_size = 2}));
  const std::string key = PlannerKey(split);
  EXPECT_TRUE(Contains(key, "too_long='split'")) << key;
  EXPECT_EQ(ParsePlannerKey(key), PlannerOptions(split));
  CheckExamplesFit(std::vector<int64_t>{100}, split);  // nothing is too long
  FixedBucketsOptions drop = split;
  drop.remainder = Remainder::kDrop;
  std::string msg = Refusal([&] { ValidatePlannerOptions(drop); });
  EXPECT_TRUE(Contains(msg, "remainder=\"drop\"")) << msg;
  // A ragged column not aligned with the length column has no pieces.
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int64_t> a_offsets = {0, 9};
  const std::vector<int64_t> b_offsets = {0, 2};
  const Dataset ds(
      {RaggedColumn::Ragged("tokens", DType::kInt32, {}, a.data(), 9, a_offsets.data(), 1, nullptr),
       RaggedColumn::Ragged("other", DType::kInt32, {}, a.data(), 2, b_offsets.data(), 1,
                            nullptr)});
  const BatchPlan plan = Plan(ds.column("tokens").Lengths(), split);
  msg = Refusal([&] { Collate(ds, plan, 0, {}); });
  EXPECT_TRUE(Contains(msg, "'other'")) << msg;
  // A piece past its example (a plan made from other lengths) is refused.
  const Dataset single({RaggedColumn::Ragged("tokens", DType::kInt32, {}, a.data(), 9,
                                             a_offsets.data(), 1, nullptr)});
  BatchPlan stale = plan;
  stale.piece_starts[0] = 9;  // its piece [8, 9) moved past the end
  msg = Refusal([&] { Collate(single, stale, 0, {}); });
  EXPECT_TRUE(Contains(msg, "the plan was made from other lengths")) << msg;
}

}  // namespace
}  // namespace jaxbatch
