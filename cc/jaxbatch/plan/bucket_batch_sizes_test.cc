// Tests for FixedBuckets' per-bucket batch sizes (tf.data's
// bucket_batch_sizes): plans against a slow reference that batches each
// bucket on its own, validation naming the option, and the planner key.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// A batch as the reference writes it: its shape and its examples in row order.
struct RefBatch {
  int64_t rows;
  int64_t length;
  std::vector<int64_t> ids;
  bool operator==(const RefBatch&) const = default;
};

struct RefPlan {
  std::vector<RefBatch> batches;
  std::vector<int64_t> dropped, skipped;
};

// The obvious way: walk the examples, put each in its bucket's open batch,
// close the batch when it holds that bucket's size; at the end each bucket's
// open batch (in bucket order) is padded, kept (rows rounded up to
// rows_multiple) or dropped.
RefPlan Reference(const std::vector<int64_t>& lengths, const FixedBucketsOptions& o) {
  RefPlan plan;
  const size_t n = o.boundaries.size();
  std::vector<std::vector<int64_t>> open(n);
  for (int64_t id = 0; id < static_cast<int64_t>(lengths.size()); ++id) {
    size_t k = 0;
    while (k < n && o.boundaries[k] < lengths[static_cast<size_t>(id)]) ++k;
    if (k == n) {
      if (o.too_long == TooLong::kSkip) {
        plan.skipped.push_back(id);
        continue;
      }
      k = n - 1;  // truncate: to the last bucket
    }
    open[k].push_back(id);
    if (static_cast<int64_t>(open[k].size()) == o.batch_sizes[k]) {
      plan.batches.push_back({o.batch_sizes[k], o.boundaries[k], open[k]});
      open[k].clear();
    }
  }
  for (size_t k = 0; k < n; ++k) {
    if (open[k].empty()) continue;
    int64_t rows = o.batch_sizes[k];
    if (o.remainder == Remainder::kDrop) {
      plan.dropped.insert(plan.dropped.end(), open[k].begin(), open[k].end());
      continue;
    }
    if (o.remainder == Remainder::kKeep) {
      rows = static_cast<int64_t>(open[k].size());
      while (rows % o.rows_multiple != 0) ++rows;
    }
    plan.batches.push_back({rows, o.boundaries[k], open[k]});
  }
  return plan;
}

std::vector<RefBatch> BatchesOf(const BatchPlan& plan) {
  std::vector<RefBatch> out;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    const std::span<const int64_t> ids = view.all_examples();
    out.push_back({view.shape.rows, view.shape.length, {ids.begin(), ids.end()}});
  }
  return out;
}

FixedBucketsOptions RandomOptions(std::mt19937& rng) {
  auto draw = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  FixedBucketsOptions o{.remainder = static_cast<Remainder>(rng() % 3),
                        .too_long = rng() % 2 ? TooLong::kSkip : TooLong::kTruncate,
                        .rows_multiple = draw(1, 3)};
  int64_t boundary = 0;
  for (int64_t k = 0, n = draw(1, 5); k < n; ++k) {
    boundary += draw(1, 12);
    o.boundaries.push_back(boundary);
    o.batch_sizes.push_back(draw(1, 6) * o.rows_multiple);
  }
  return o;
}

TEST(BucketBatchSizesTest, MatchesTheReferenceOnRandomData) {
  std::mt19937 rng(27);
  for (int trial = 0; trial < 500; ++trial) {
    const FixedBucketsOptions o = RandomOptions(rng);
    std::vector<int64_t> lengths(rng() % 80);
    for (int64_t& l : lengths) {
      l = std::uniform_int_distribution<int64_t>(0, o.boundaries.back() + 4)(rng);
    }
    const RefPlan want = Reference(lengths, o);
    const BatchPlan got = Plan(lengths, o);
    ASSERT_EQ(BatchesOf(got), want.batches) << PlannerKey(o);
    EXPECT_EQ(got.dropped_examples, want.dropped) << PlannerKey(o);
    EXPECT_EQ(got.skipped_examples, want.skipped) << PlannerKey(o);
    CheckPlan(got);
  }
}

// tf.data's bucket_by_sequence_length_test: boundaries [10, 20, 30] with
// batch sizes [10, 8, 4, 2] over lengths 1..39. tf's buckets are [b_{k-1},
// b_k) with an open last one; jaxbatch's are (b_{k-1}, b_k] closed by the
// last boundary, so the same buckets are boundaries [9, 19, 29, 39].
TEST(BucketBatchSizesTest, TensorFlowsBucketsGetTheirSizes) {
  std::vector<int64_t> lengths;
  for (int64_t l = 1; l < 40; ++l) lengths.push_back(l);
  const FixedBucketsOptions o{
      .boundaries = {9, 19, 29, 39}, .remainder = Remainder::kKeep, .batch_sizes = {10, 8, 4, 2}};
  const BatchPlan plan = Plan(lengths, o);
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (rows, length) per batch
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    shapes.emplace_back(plan.batch(b).shape.rows, plan.batch(b).shape.length);
  }
  // Bucket 0 (lengths 1..9) has 9 examples: one kept batch of 9 rows.
  const std::vector<std::pair<int64_t, int64_t>> want = {{8, 19}, {4, 29}, {4, 29}, {2, 39},
                                                         {2, 39}, {2, 39}, {2, 39}, {2, 39},
                                                         {9, 9},  {2, 19}, {2, 29}};
  EXPECT_EQ(shapes, want);
}

TEST(BucketBatchSizesTest, BadSizesAreRefusedNamingTheOption) {
  auto message = [](FixedBucketsOptions o) {
    return ThrownMessage<InvalidArgumentError>([&] { ValidatePlannerOptions(o); });
  };
  EXPECT_TRUE(Contains(message({.boundaries = {8, 16}, .batch_sizes = {4}}),
                       "expected one batch size per boundary (2"));
  EXPECT_TRUE(Contains(message({.boundaries = {8, 16}, .batch_sizes = {4, 0}}),
                       "batch_sizes[1] must be a positive integer, found 0"));
  EXPECT_TRUE(Contains(message({.boundaries = {8}, .batch_size = 4, .batch_sizes = {4}}),
                       "give batch_sizes or batch_size, not both"));
  EXPECT_TRUE(Contains(message({.boundaries = {8}, .token_budget = 64, .batch_sizes = {4}}),
                       "give batch_sizes or token_budget, not both"));
  EXPECT_TRUE(Contains(message({.boundaries = {8, 16}, .rows_multiple = 4, .batch_sizes = {8, 6}}),
                       "batch_sizes[1]=6 is not a multiple of rows_multiple=4"));
  EXPECT_TRUE(
      Contains(message({.boundaries = {8, int64_t{1} << 30}, .batch_sizes = {1, int64_t{1} << 40}}),
               "batch_sizes[1]=1099511627776 with boundaries[1]=1073741824"));
}

TEST(BucketBatchSizesTest, KeyRoundTripsAndOmitsAnUnsetList) {
  // Without batch_sizes the key is exactly what earlier releases stored.
  EXPECT_EQ(PlannerKey(FixedBucketsOptions{.boundaries = {8, 16}, .batch_size = 2}),
            "FixedBuckets(boundaries=[8, 16], batch_size=2, token_budget=None, remainder='pad', "
            "too_long='error')");
  const FixedBucketsOptions o{.boundaries = {8, 16}, .batch_sizes = {8, 4}};
  const std::string key = PlannerKey(o);
  EXPECT_EQ(key,
            "FixedBuckets(boundaries=[8, 16], batch_size=None, token_budget=None, "
            "remainder='pad', too_long='error', batch_sizes=[8, 4])");
  EXPECT_TRUE(ParsePlannerKey(key) == PlannerOptions(o));
  // A parsed key is validated like any options: a count that does not match.
  const PlannerOptions bad =
      ParsePlannerKey("FixedBuckets(boundaries=[8, 16], batch_sizes=[8, 4, 2])");
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { ValidatePlannerOptions(bad); }),
                       "found 3 batch_sizes"));
}

}  // namespace
}  // namespace jaxbatch
