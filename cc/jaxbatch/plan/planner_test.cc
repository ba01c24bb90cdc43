// Tests for plan/planner and plan/batch_plan: every planner against a naive
// reference plan, the invariants every plan keeps (each example planned,
// dropped or skipped exactly once; rows per batch; shapes; token budget),
// stats recomputed by brute force, too-long policies and bad options.
#include "jaxbatch/plan/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/packer.h"

namespace jaxbatch {
namespace {

// A random count where 0 stands for an option left unset.
std::optional<int64_t> UnsetIfZero(int64_t value) {
  return value == 0 ? std::nullopt : std::optional<int64_t>(value);
}

using testing::Contains;
using testing::ThrownMessage;

int64_t RoundUp(int64_t value, int64_t multiple) {
  int64_t rounded = multiple;
  while (rounded < value) rounded += multiple;
  return rounded;
}

// ---- A plan as plain nested vectors, and its reference builders -----------

struct RefBatch {
  BatchShape shape;
  std::vector<std::vector<int64_t>> rows;
};

struct RefPlan {
  std::vector<RefBatch> batches;
  std::vector<int64_t> dropped;
  std::vector<int64_t> skipped;
  bool allow_truncate = false;
};

RefPlan FromPlan(const BatchPlan& plan) {
  RefPlan ref;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    RefBatch batch{view.shape, {}};
    for (int64_t r = 0; r < view.shape.rows; ++r) {
      const std::span<const int64_t> row = view.row_examples(r);
      batch.rows.emplace_back(row.begin(), row.end());
    }
    ref.batches.push_back(batch);
  }
  ref.dropped = plan.dropped_examples;
  ref.skipped = plan.skipped_examples;
  ref.allow_truncate = plan.allow_truncate;
  return ref;
}

std::string ToString(const RefPlan& plan) {
  std::ostringstream out;
  auto list = [&](const std::vector<int64_t>& ids) {
    out << "[";
    for (size_t k = 0; k < ids.size(); ++k) out << (k ? "," : "") << ids[k];
    out << "]";
  };
  for (const RefBatch& batch : plan.batches) {
    out << batch.shape.rows << "x" << batch.shape.length << "/" << batch.shape.segments << ":";
    for (const std::vector<int64_t>& row : batch.rows) list(row);
    out << "\n";
  }
  out << "dropped ";
  list(plan.dropped);
  out << " skipped ";
  list(plan.skipped);
  out << " truncate " << plan.allow_truncate << "\n";
  return out.str();
}

// A padded batch: one example per row, then empty rows up to `rows`.
RefBatch PaddedBatch(const std::vector<int64_t>& ids, int64_t rows, int64_t length) {
  RefBatch batch{{.rows = rows, .length = length}, {}};
  for (int64_t id : ids) batch.rows.push_back({id});
  while (static_cast<int64_t>(batch.rows.size()) < rows) batch.rows.emplace_back();
  return batch;
}

RefPlan NaivePadToMax(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                      const PadToMaxOptions& o) {
  RefPlan plan;
  for (size_t start = 0; start < ids.size(); start += static_cast<size_t>(o.batch_size)) {
    std::vector<int64_t> chunk;
    for (size_t k = start; k < ids.size() && k < start + static_cast<size_t>(o.batch_size); ++k) {
      chunk.push_back(ids[k]);
    }
    const auto count = static_cast<int64_t>(chunk.size());
    if (count < o.batch_size && o.remainder == Remainder::kDrop) {
      plan.dropped = chunk;
      break;
    }
    int64_t longest = 0;
    for (int64_t id : chunk) longest = std::max(longest, lengths[static_cast<size_t>(id)]);
    const int64_t rows = o.remainder == Remainder::kKeep ? count : o.batch_size;
    plan.batches.push_back(PaddedBatch(chunk, rows, RoundUp(longest, o.pad_to_multiple)));
  }
  return plan;
}

// Buckets by boundaries: an example goes to the first boundary >= its length
// rounded up to `multiple`; a bucket emits a batch each time it holds its
// rows, and its remainder at the end, bucket by bucket. With `fill`, first,
// longest bucket first, each bucket's last batch takes into its empty rows,
// one at a time, the longest example left in the next shorter non-empty
// bucket (the first in `ids` among equals); then each bucket pads to its
// longest (rounded) member.
RefPlan NaiveBuckets(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                     const std::vector<int64_t>& boundaries, int64_t batch_size,
                     int64_t token_budget, int64_t multiple, Remainder remainder, TooLong too_long,
                     bool fill = false, bool balance = true) {
  RefPlan plan;
  const size_t n = boundaries.size();
  std::vector<int64_t> rows(n);
  for (size_t b = 0; b < n; ++b) {
    rows[b] = batch_size > 0 ? batch_size : std::numeric_limits<int64_t>::max();
    if (token_budget > 0) rows[b] = std::min(rows[b], token_budget / boundaries[b]);
  }
  std::vector<int64_t> bucket(ids.size(), -1);
  for (size_t p = 0; p < ids.size(); ++p) {
    const int64_t id = ids[p];
    const int64_t key = RoundUp(lengths[static_cast<size_t>(id)], multiple);
    size_t b = 0;
    while (b < n && boundaries[b] < key) ++b;
    if (b == n) {
      if (too_long == TooLong::kSkip) {
        plan.skipped.push_back(id);
        continue;
      }
      EXPECT_EQ(too_long, TooLong::kTruncate) << "the reference does not model errors";
      plan.allow_truncate = true;
      b = n - 1;
    }
    bucket[p] = static_cast<int64_t>(b);
  }
  for (size_t k = n; fill && k-- > 1;) {
    int64_t count = 0;
    for (int64_t b : bucket) count += b == static_cast<int64_t>(k);
    int64_t free = (rows[k] - count % rows[k]) % rows[k];
    for (size_t j = k; free > 0 && j-- > 0;) {
      for (; free > 0; --free) {
        std::optional<size_t> longest;
        for (size_t p = 0; p < ids.size(); ++p) {
          if (bucket[p] != static_cast<int64_t>(j)) continue;
          if (!longest ||
              lengths[static_cast<size_t>(ids[p])] > lengths[static_cast<size_t>(ids[*longest])]) {
            longest = p;
          }
        }
        if (!longest) break;  // bucket j is empty: the next shorter one
        bucket[*longest] = static_cast<int64_t>(k);
      }
    }
  }
  std::vector<int64_t> length = boundaries;
  if (fill) {
    std::vector<int64_t> longest(n, 0);
    for (size_t p = 0; p < ids.size(); ++p) {
      if (bucket[p] < 0) continue;
      int64_t& l = longest[static_cast<size_t>(bucket[p])];
      l = std::max(l, RoundUp(lengths[static_cast<size_t>(ids[p])], multiple));
    }
    for (size_t b = 0; b < n; ++b) length[b] = longest[b] > 0 ? longest[b] : boundaries[b];
  }
  // A budget's rows, spread evenly (balance.h): the fewest that keep each
  // bucket's batch count.
  for (size_t b = 0; balance && token_budget > 0 && remainder == Remainder::kPad && b < n; ++b) {
    int64_t count = 0;
    for (int64_t k : bucket) count += k == static_cast<int64_t>(b);
    const int64_t batches = (count + rows[b] - 1) / rows[b];
    while (count > 0 && (rows[b] - 1) * batches >= count) --rows[b];
  }
  std::vector<std::vector<int64_t>> pending(n);
  for (size_t p = 0; p < ids.size(); ++p) {
    if (bucket[p] < 0) continue;
    const int64_t id = ids[p];
    const auto b = static_cast<size_t>(bucket[p]);
    pending[b].push_back(id);
    if (static_cast<int64_t>(pending[b].size()) == rows[b]) {
      plan.batches.push_back(PaddedBatch(pending[b], rows[b], length[b]));
      pending[b].clear();
    }
  }
  for (size_t b = 0; b < n; ++b) {
    if (pending[b].empty()) continue;
    const auto count = static_cast<int64_t>(pending[b].size());
    if (remainder == Remainder::kDrop) {
      plan.dropped.insert(plan.dropped.end(), pending[b].begin(), pending[b].end());
    } else {
      plan.batches.push_back(
          PaddedBatch(pending[b], remainder == Remainder::kPad ? rows[b] : count, length[b]));
    }
  }
  return plan;
}

// The default per-segment axis, by its definition: the largest k whose k
// smallest lengths fit one row, rounded up to a power of two, at most
// row_length.
int64_t NaiveSegments(const std::vector<int64_t>& lengths, const std::vector<int64_t>& kept,
                      int64_t row_length) {
  std::vector<int64_t> sorted;
  for (int64_t id : kept) sorted.push_back(lengths[static_cast<size_t>(id)]);
  std::sort(sorted.begin(), sorted.end());
  int64_t k = std::min<int64_t>(row_length, static_cast<int64_t>(sorted.size()));
  while (k > 0 && std::accumulate(sorted.begin(), sorted.begin() + k, int64_t{0}) > row_length) {
    --k;
  }
  for (int64_t p = 1;; p *= 2) {
    if (p >= k || p >= row_length) return std::min(p, row_length);
  }
}

RefPlan NaivePack(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                  const PackOptions& o) {
  RefPlan plan;
  std::vector<int64_t> kept;
  for (int64_t id : ids) {
    if (lengths[static_cast<size_t>(id)] > o.row_length) {
      if (o.too_long == TooLong::kSkip) {
        plan.skipped.push_back(id);
        continue;
      }
      plan.allow_truncate = true;
    }
    kept.push_back(id);
  }
  const int64_t segments =
      o.max_segments_per_row ? *o.max_segments_per_row : NaiveSegments(lengths, kept, o.row_length);
  // The packer itself is checked against naive first and best fit in
  // packer_test.cc.
  const PackedRows packed =
      PackRows(lengths, kept, o.row_length, segments, o.algorithm, o.lookahead.value_or(0));
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < packed.num_rows(); ++r) {
    rows.emplace_back(packed.example_ids.begin() + packed.row_begin[static_cast<size_t>(r)],
                      packed.example_ids.begin() + packed.row_begin[static_cast<size_t>(r) + 1]);
  }
  for (size_t first = 0; first < rows.size(); first += static_cast<size_t>(o.rows_per_batch)) {
    const size_t last = std::min(rows.size(), first + static_cast<size_t>(o.rows_per_batch));
    const auto count = static_cast<int64_t>(last - first);
    if (count < o.rows_per_batch && o.remainder == Remainder::kDrop) {
      for (size_t r = first; r < last; ++r) {
        plan.dropped.insert(plan.dropped.end(), rows[r].begin(), rows[r].end());
      }
      break;
    }
    const int64_t batch_rows = o.remainder == Remainder::kKeep ? count : o.rows_per_batch;
    RefBatch batch{{.rows = batch_rows, .length = o.row_length, .segments = segments}, {}};
    for (size_t r = first; r < last; ++r) batch.rows.push_back(rows[r]);
    while (static_cast<int64_t>(batch.rows.size()) < batch_rows) batch.rows.emplace_back();
    plan.batches.push_back(batch);
  }
  return plan;
}

// ---- Invariants and stats recomputed by brute force -----------------------

void CheckPlan(const BatchPlan& plan, const std::vector<int64_t>& lengths,
               const std::vector<int64_t>& ids, bool packed, int64_t token_budget) {
  EXPECT_EQ(plan.packed, packed);
  const int64_t num_batches = plan.num_batches();
  ASSERT_EQ(plan.batch_row_begin.size(), static_cast<size_t>(num_batches) + 1);
  EXPECT_EQ(plan.batch_row_begin.front(), 0);
  EXPECT_EQ(plan.batch_row_begin.back() + 1, static_cast<int64_t>(plan.row_example_begin.size()));
  EXPECT_EQ(plan.row_example_begin.front(), 0);
  EXPECT_EQ(plan.row_example_begin.back(), static_cast<int64_t>(plan.example_ids.size()));

  // Shapes: distinct, each used, batches_per_shape counted.
  for (size_t s = 0; s < plan.shapes.size(); ++s) {
    for (size_t t = 0; t < s; ++t) EXPECT_FALSE(plan.shapes[s] == plan.shapes[t]);
  }
  std::vector<int64_t> per_shape(plan.shapes.size(), 0);
  int64_t real = 0, padded = 0, truncated = 0;
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < num_batches; ++b) {
    const int32_t shape_id = plan.batch_shape_ids[static_cast<size_t>(b)];
    ASSERT_GE(shape_id, 0);
    ASSERT_LT(static_cast<size_t>(shape_id), plan.shapes.size());
    ++per_shape[static_cast<size_t>(shape_id)];
    const BatchView view = plan.batch(b);
    const BatchShape shape = plan.shapes[static_cast<size_t>(shape_id)];
    EXPECT_EQ(view.shape, shape);
    EXPECT_EQ(view.index, b);
    EXPECT_GT(shape.rows, 0);
    EXPECT_GT(shape.length, 0);
    // Only rows that hold examples are stored, and they come first.
    EXPECT_LE(view.stored_rows(), shape.rows) << "batch " << b;
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      EXPECT_FALSE(view.row_examples(r).empty()) << "batch " << b << " row " << r;
    }
    if (token_budget > 0) {
      EXPECT_LE(shape.rows * shape.length, token_budget) << "batch " << b;
    }
    if (!packed) {
      EXPECT_EQ(shape.segments, 0);
    }
    padded += shape.rows * shape.length;
    for (int64_t r = 0; r < shape.rows; ++r) {
      const std::span<const int64_t> row = view.row_examples(r);
      EXPECT_LE(static_cast<int64_t>(row.size()), packed ? shape.segments : 1)
          << "batch " << b << " row " << r;
      int64_t used = 0, total = 0;
      for (int64_t e : row) {
        seen.push_back(e);
        const int64_t length = lengths[static_cast<size_t>(e)];
        const int64_t take = std::min(length, shape.length - used);
        if (take < length) ++truncated;
        used += take;
        total += length;
      }
      if (!plan.allow_truncate) {
        EXPECT_LE(total, shape.length) << "batch " << b << " row " << r;
      }
      real += used;
    }
  }
  // Every example of `ids` exactly once: planned, dropped or skipped.
  seen.insert(seen.end(), plan.dropped_examples.begin(), plan.dropped_examples.end());
  seen.insert(seen.end(), plan.skipped_examples.begin(), plan.skipped_examples.end());
  std::vector<int64_t> want = ids;
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);

  const PlanStats& stats = plan.stats;
  EXPECT_EQ(stats.examples, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(stats.batches, num_batches);
  EXPECT_EQ(stats.shapes, static_cast<int64_t>(plan.shapes.size()));
  EXPECT_EQ(stats.batches_per_shape, per_shape);
  for (int64_t count : per_shape) EXPECT_GT(count, 0);
  EXPECT_EQ(stats.real_elements, real);
  EXPECT_EQ(stats.padded_elements, padded);
  EXPECT_DOUBLE_EQ(stats.efficiency,
                   padded == 0 ? 1.0 : static_cast<double>(real) / static_cast<double>(padded));
  EXPECT_EQ(stats.dropped, static_cast<int64_t>(plan.dropped_examples.size()));
  EXPECT_EQ(stats.skipped, static_cast<int64_t>(plan.skipped_examples.size()));
  EXPECT_EQ(stats.truncated, truncated);
  if (!plan.allow_truncate) {
    EXPECT_EQ(truncated, 0);
  }
}

// ---- Random inputs ---------------------------------------------------------

struct Input {
  std::vector<int64_t> lengths;
  std::vector<int64_t> order;  // What Plan() gets: empty, a permutation or a subset.
  std::vector<int64_t> ids;    // The ids it resolves to.
};

Input RandomInput(std::mt19937& rng, int64_t max_length) {
  Input in;
  const int n = std::uniform_int_distribution<int>(0, 60)(rng);
  for (int i = 0; i < n; ++i) {
    in.lengths.push_back(std::uniform_int_distribution<int64_t>(0, max_length)(rng));
  }
  const int kind = static_cast<int>(rng() % 3);
  for (int64_t i = 0; i < n; ++i) {
    if (kind != 2 || rng() % 3 != 0) in.order.push_back(i);
  }
  if (kind >= 1) std::shuffle(in.order.begin(), in.order.end(), rng);
  in.ids = in.order;  // kind 0: every example in index order; an empty order plans none
  return in;
}

int64_t Longest(const Input& in) {
  int64_t longest = 0;
  for (int64_t id : in.ids) longest = std::max(longest, in.lengths[static_cast<size_t>(id)]);
  return longest;
}

constexpr Remainder kRemainders[] = {Remainder::kPad, Remainder::kKeep, Remainder::kDrop};

TEST(PadToMaxTest, MatchesNaiveReference) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 300; ++trial) {
    const Input in = RandomInput(rng, 40);
    for (Remainder remainder : kRemainders) {
      const PadToMaxOptions o{.batch_size = std::uniform_int_distribution<int64_t>(1, 9)(rng),
                              .pad_to_multiple = std::uniform_int_distribution<int64_t>(1, 8)(rng),
                              .remainder = remainder};
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " remainder " << static_cast<int>(remainder));
      const BatchPlan plan = Plan(in.lengths, o, in.order);
      CheckPlan(plan, in.lengths, in.ids, /*packed=*/false, 0);
      ASSERT_EQ(ToString(FromPlan(plan)), ToString(NaivePadToMax(in.lengths, in.ids, o)));
    }
  }
}

TEST(FixedBucketsTest, MatchesNaiveReference) {
  std::mt19937 rng(22);
  for (int trial = 0; trial < 300; ++trial) {
    const Input in = RandomInput(rng, 40);
    std::set<int64_t> bounds;
    const int count = std::uniform_int_distribution<int>(1, 5)(rng);
    while (static_cast<int>(bounds.size()) < count) {
      bounds.insert(std::uniform_int_distribution<int64_t>(1, 48)(rng));
    }
    const std::vector<int64_t> boundaries(bounds.begin(), bounds.end());
    const bool fits = Longest(in) <= boundaries.back();
    for (Remainder remainder : kRemainders) {
      FixedBucketsOptions o{.boundaries = boundaries, .remainder = remainder};
      o.too_long =
          fits && rng() % 2 ? TooLong::kError : (rng() % 2 ? TooLong::kTruncate : TooLong::kSkip);
      switch (rng() % 3) {  // Rows from a batch size, a token budget or both.
        case 0:
          o.batch_size = std::uniform_int_distribution<int64_t>(1, 8)(rng);
          break;
        case 1:
          o.token_budget = std::uniform_int_distribution<int64_t>(boundaries.back(), 200)(rng);
          break;
        default:
          o.batch_size = std::uniform_int_distribution<int64_t>(1, 8)(rng);
          o.token_budget = std::uniform_int_distribution<int64_t>(boundaries.back(), 200)(rng);
      }
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " remainder " << static_cast<int>(remainder));
      const BatchPlan plan = Plan(in.lengths, o, in.order);
      CheckPlan(plan, in.lengths, in.ids, /*packed=*/false, o.token_budget.value_or(0));
      ASSERT_EQ(ToString(FromPlan(plan)),
                ToString(NaiveBuckets(in.lengths, in.ids, boundaries, o.batch_size.value_or(0),
                                      o.token_budget.value_or(0), 1, remainder, o.too_long)));
    }
  }
}

// Brute force: the least total cost of any boundaries (<= max_shapes of
// them, ending with the longest) over the rounded lengths of `ids`.
int64_t BruteForceBucketCost(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                             int64_t multiple, int64_t max_shapes,
                             const std::function<int64_t(int64_t)>& rows, bool pad) {
  std::set<int64_t> distinct;
  for (int64_t id : ids) distinct.insert(RoundUp(lengths[static_cast<size_t>(id)], multiple));
  const std::vector<int64_t> values(distinct.begin(), distinct.end());
  const size_t m = values.size();
  int64_t best = std::numeric_limits<int64_t>::max();
  for (uint32_t mask = 0; mask < (1u << (m - 1)); ++mask) {
    std::vector<int64_t> boundaries;
    for (size_t j = 0; j + 1 < m; ++j) {
      if (mask & (1u << j)) boundaries.push_back(values[j]);
    }
    boundaries.push_back(values.back());
    if (static_cast<int64_t>(boundaries.size()) > max_shapes) continue;
    std::vector<int64_t> count(boundaries.size(), 0);
    for (int64_t id : ids) {
      const int64_t key = RoundUp(lengths[static_cast<size_t>(id)], multiple);
      size_t b = 0;
      while (boundaries[b] < key) ++b;
      ++count[b];
    }
    int64_t cost = 0;
    for (size_t b = 0; b < boundaries.size(); ++b) {
      const int64_t r = rows(boundaries[b]);
      cost += pad ? boundaries[b] * r * ((count[b] + r - 1) / r) : boundaries[b] * count[b];
    }
    best = std::min(best, cost);
  }
  return best;
}

TEST(AutoBucketsTest, MatchesBruteForceOptimumAndNaiveBuckets) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t multiple = std::uniform_int_distribution<int64_t>(4, 8)(rng);
    const Input in = RandomInput(rng, 44);  // At most 12 distinct rounded lengths.
    const int64_t longest = RoundUp(Longest(in), multiple);
    for (Remainder remainder : kRemainders) {
      AutoBucketsOptions o{.max_shapes = std::uniform_int_distribution<int64_t>(1, 6)(rng),
                           .pad_to_multiple = multiple,
                           .remainder = remainder};
      switch (rng() % 3) {
        case 0:
          o.batch_size = std::uniform_int_distribution<int64_t>(1, 8)(rng);
          break;
        case 1:
          o.token_budget = std::uniform_int_distribution<int64_t>(longest, 300)(rng);
          break;
        default:
          o.batch_size = std::uniform_int_distribution<int64_t>(1, 8)(rng);
          o.token_budget = std::uniform_int_distribution<int64_t>(longest, 300)(rng);
      }
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " remainder " << static_cast<int>(remainder));
      const BatchPlan plan = Plan(in.lengths, o, in.order);
      CheckPlan(plan, in.lengths, in.ids, /*packed=*/false, o.token_budget.value_or(0));
      EXPECT_FALSE(plan.allow_truncate);
      EXPECT_TRUE(plan.skipped_examples.empty());
      if (remainder != Remainder::kKeep) {
        EXPECT_LE(plan.stats.shapes, o.max_shapes);
      }
      if (in.ids.empty()) {
        EXPECT_EQ(plan.num_batches(), 0);
        continue;
      }
      auto rows = [&](int64_t length) {
        int64_t r = o.batch_size.value_or(std::numeric_limits<int64_t>::max());
        return o.token_budget ? std::min(r, *o.token_budget / length) : r;
      };
      const bool pad = remainder == Remainder::kPad;
      const LengthHistogram histogram = RoundedHistogram(in.lengths, in.ids, multiple);
      // Keep and drop: the exact optimum of buckets whose remainders cost
      // what they hold. Pad: the boundaries whose filled cost is least.
      const std::vector<int64_t> boundaries =
          pad ? FilledBoundaries(histogram, o.max_shapes, rows)
              : OptimalBoundaries(histogram, o.max_shapes, rows, false);
      const int64_t best =
          BruteForceBucketCost(in.lengths, in.ids, multiple, o.max_shapes, rows, pad);
      if (remainder == Remainder::kKeep) {
        // Every bucket holds an example, so each shows up as a shape length,
        // and the plan's padded elements are the DP's cost.
        std::set<int64_t> shape_lengths;
        for (const BatchShape& s : plan.shapes) shape_lengths.insert(s.length);
        EXPECT_EQ(std::vector<int64_t>(shape_lengths.begin(), shape_lengths.end()), boundaries);
        EXPECT_EQ(plan.stats.padded_elements, best);
      }
      if (pad) {
        // Filling never costs more than the best of padding remainders with
        // empty rows, nor less than remainders that cost nothing.
        const int64_t free_rows =
            BruteForceBucketCost(in.lengths, in.ids, multiple, o.max_shapes, rows, false);
        // Balancing a budget's rows (balance.h) only lowers the filled cost.
        AutoBucketsOptions unbalanced = o;
        unbalanced.balance_batches = false;
        const int64_t filled = Plan(in.lengths, unbalanced, in.order).stats.padded_elements;
        EXPECT_EQ(filled, FilledCost(histogram, boundaries, rows));
        EXPECT_LE(plan.stats.padded_elements, filled);
        EXPECT_LE(plan.stats.padded_elements, best);
        EXPECT_GE(plan.stats.padded_elements, free_rows);
        // Without filling nor balancing (as before loader state version 3):
        // the boundaries whose empty remainder rows cost least, and exactly that cost.
        AutoBucketsOptions before = unbalanced;
        before.fill_remainders = false;
        const BatchPlan unfilled = Plan(in.lengths, before, in.order);
        EXPECT_EQ(unfilled.stats.padded_elements, best);
        ASSERT_EQ(ToString(FromPlan(unfilled)),
                  ToString(NaiveBuckets(in.lengths, in.ids,
                                        OptimalBoundaries(histogram, o.max_shapes, rows, true),
                                        o.batch_size.value_or(0), o.token_budget.value_or(0),
                                        multiple, remainder, TooLong::kError, false, false)));
      }
      ASSERT_EQ(ToString(FromPlan(plan)),
                ToString(NaiveBuckets(in.lengths, in.ids, boundaries, o.batch_size.value_or(0),
                                      o.token_budget.value_or(0), multiple, remainder,
                                      TooLong::kError, /*fill=*/pad)));
    }
  }
}

TEST(PackTest, MatchesNaiveReference) {
  std::mt19937 rng(24);
  for (int trial = 0; trial < 300; ++trial) {
    const Input in = RandomInput(rng, 24);
    for (Remainder remainder : kRemainders) {
      PackOptions o{
          .row_length = std::uniform_int_distribution<int64_t>(1, 32)(rng),
          .rows_per_batch = std::uniform_int_distribution<int64_t>(1, 5)(rng),
          .max_segments_per_row = UnsetIfZero(std::uniform_int_distribution<int64_t>(0, 4)(rng)),
          .algorithm = rng() % 2 ? PackAlgorithm::kFirstFit : PackAlgorithm::kBestFit,
          .lookahead = UnsetIfZero(std::uniform_int_distribution<int64_t>(0, 10)(rng)),
          .remainder = remainder};
      const bool fits = Longest(in) <= o.row_length;
      o.too_long =
          fits && rng() % 2 ? TooLong::kError : (rng() % 2 ? TooLong::kTruncate : TooLong::kSkip);
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " remainder " << static_cast<int>(remainder));
      const BatchPlan plan = Plan(in.lengths, o, in.order);
      CheckPlan(plan, in.lengths, in.ids, /*packed=*/true, 0);
      for (const BatchShape& s : plan.shapes) {
        EXPECT_EQ(s.length, o.row_length);
        if (o.max_segments_per_row) {
          EXPECT_EQ(s.segments, *o.max_segments_per_row);
        } else {
          EXPECT_LE(s.segments, o.row_length);
        }
      }
      ASSERT_EQ(ToString(FromPlan(plan)), ToString(NaivePack(in.lengths, in.ids, o)));
    }
  }
}

// ---- Hand-made cases -------------------------------------------------------

TEST(PackTest, DefaultSegmentAxisIsTheMostExamplesARowCanHold) {
  // 1 + 2 + 3 fit a row of 9, 1 + 2 + 3 + 5 do not: 3 segments, rounded to 4.
  const std::vector<int64_t> lengths = {3, 1, 2, 5, 9};
  const BatchPlan plan = Plan(lengths, PackOptions{.row_length = 9, .rows_per_batch = 2});
  ASSERT_EQ(plan.shapes.size(), 1u);
  EXPECT_EQ(plan.shapes[0].segments, 4);
  // The same lengths in another order: the same shape.
  const std::vector<int64_t> order = {4, 3, 2, 1, 0};
  EXPECT_EQ(
      Plan(lengths, PackOptions{.row_length = 9, .rows_per_batch = 2}, order).shapes[0].segments,
      4);
  // Many length-1 examples: capped at the row length.
  const std::vector<int64_t> ones(20, 1);
  EXPECT_EQ(Plan(ones, PackOptions{.row_length = 6, .rows_per_batch = 1}).shapes[0].segments, 6);
  // Set by the user: kept.
  EXPECT_EQ(
      Plan(lengths, PackOptions{.row_length = 9, .rows_per_batch = 2, .max_segments_per_row = 7})
          .shapes[0]
          .segments,
      7);
}

TEST(PadToMaxTest, RoundsToMultipleAndHandlesRemainders) {
  const std::vector<int64_t> lengths = {3, 7, 0, 5, 2};
  BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 2, .pad_to_multiple = 4});
  ASSERT_EQ(plan.num_batches(), 3);
  EXPECT_EQ(plan.batch(0).shape, (BatchShape{.rows = 2, .length = 8}));
  EXPECT_EQ(plan.batch(1).shape, (BatchShape{.rows = 2, .length = 8}));
  EXPECT_EQ(plan.batch(2).shape, (BatchShape{.rows = 2, .length = 4}));
  EXPECT_EQ(plan.batch(2).row_examples(1).size(), 0u);  // A padding row.
  EXPECT_EQ(plan.stats.shapes, 2);
  EXPECT_EQ(plan.stats.real_elements, 17);
  EXPECT_EQ(plan.stats.padded_elements, 16 + 16 + 8);

  plan = Plan(lengths, PadToMaxOptions{.batch_size = 2, .remainder = Remainder::kKeep});
  EXPECT_EQ(plan.batch(2).shape, (BatchShape{.rows = 1, .length = 2}));

  plan = Plan(lengths, PadToMaxOptions{.batch_size = 2, .remainder = Remainder::kDrop});
  EXPECT_EQ(plan.num_batches(), 2);
  EXPECT_EQ(plan.dropped_examples, (std::vector<int64_t>{4}));
  EXPECT_EQ(plan.stats.dropped, 1);
}

TEST(PlanTest, EmptyInputGivesAnEmptyPlan) {
  const std::vector<int64_t> none;
  const std::vector<PlannerOptions> all = {
      PadToMaxOptions{.batch_size = 4},
      FixedBucketsOptions{.boundaries = {8}, .batch_size = 4},
      AutoBucketsOptions{.max_shapes = 2, .batch_size = 4},
      PackOptions{.row_length = 8, .rows_per_batch = 2},
  };
  for (const PlannerOptions& options : all) {
    const BatchPlan plan = Plan(none, options);
    EXPECT_EQ(plan.num_batches(), 0);
    EXPECT_EQ(plan.stats.examples, 0);
    EXPECT_EQ(plan.stats.padded_elements, 0);
    EXPECT_DOUBLE_EQ(plan.stats.efficiency, 1.0);
  }
}

TEST(PlanTest, TokenBudgetGivesShortSequencesBigBatches) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 128; ++i) lengths.push_back(i % 2 ? 8 : 64);  // full batches: none balanced
  const BatchPlan plan =
      Plan(lengths, FixedBucketsOptions{.boundaries = {8, 64}, .token_budget = 256});
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const BatchShape& s : plan.shapes) shapes.insert({s.length, s.rows});
  EXPECT_EQ(shapes, (std::set<std::pair<int64_t, int64_t>>{{8, 32}, {64, 4}}));
  const BatchPlan capped = Plan(
      lengths, FixedBucketsOptions{.boundaries = {8, 64}, .batch_size = 16, .token_budget = 256});
  shapes.clear();
  for (const BatchShape& s : capped.shapes) shapes.insert({s.length, s.rows});
  EXPECT_EQ(shapes, (std::set<std::pair<int64_t, int64_t>>{{8, 16}, {64, 4}}));
}

// rows_multiple: every batch's rows are a multiple (a global batch over N
// devices), a budget's rows are rounded down, a kept remainder's rows up,
// and every example is still planned exactly once.
TEST(PlanTest, RowsMultipleMakesEveryBatchSplitEvenly) {
  std::mt19937 rng(7);
  std::vector<int64_t> lengths(301);
  for (int64_t& l : lengths) l = 1 + static_cast<int64_t>(rng() % 90);
  for (Remainder remainder : {Remainder::kPad, Remainder::kKeep, Remainder::kDrop}) {
    const std::vector<PlannerOptions> all = {
        PadToMaxOptions{.batch_size = 12, .remainder = remainder, .rows_multiple = 4},
        FixedBucketsOptions{.boundaries = {16, 50, 90},
                            .token_budget = 700,
                            .remainder = remainder,
                            .rows_multiple = 4},
        AutoBucketsOptions{
            .max_shapes = 3, .token_budget = 700, .remainder = remainder, .rows_multiple = 4},
        PackOptions{
            .row_length = 100, .rows_per_batch = 8, .remainder = remainder, .rows_multiple = 4},
    };
    for (const PlannerOptions& options : all) {
      const BatchPlan plan = Plan(lengths, options);
      std::vector<int64_t> seen = plan.dropped_examples;
      for (int64_t b = 0; b < plan.num_batches(); ++b) {
        const BatchView view = plan.batch(b);
        EXPECT_EQ(view.shape.rows % 4, 0) << "batch " << b << " has " << view.shape.rows;
        if (!plan.packed) {
          EXPECT_LE(view.shape.rows, std::max<int64_t>(12, 700 / view.shape.length));
        }
        for (int64_t e : view.all_examples()) seen.push_back(e);
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all_ids(lengths.size());
      std::iota(all_ids.begin(), all_ids.end(), 0);
      EXPECT_EQ(seen, all_ids);
    }
  }
  // A budget's rows round down: 700 / 16 = 43 rows -> 40.
  const BatchPlan budget =
      Plan(std::vector<int64_t>(100, 16),
           FixedBucketsOptions{.boundaries = {16}, .token_budget = 700, .rows_multiple = 8});
  EXPECT_EQ(budget.shapes.at(0).rows, 40);
  // A kept remainder of 3 examples gets 4 rows.
  const BatchPlan keep =
      Plan(std::vector<int64_t>(11, 5),
           PadToMaxOptions{.batch_size = 8, .remainder = Remainder::kKeep, .rows_multiple = 4});
  ASSERT_EQ(keep.num_batches(), 2);
  EXPECT_EQ(keep.batch(1).shape.rows, 4);
}

// Raising a budget to the least an error names is enough: the error names
// what needs the most (the longest example, the last boundary), not the
// first bucket that does not fit.
TEST(PlanTest, ATooSmallBudgetNamesTheLeastThatFits) {
  const std::vector<int64_t> lengths = {3, 120, 7, 101, 1024, 40};
  auto message = [&](const PlannerOptions& options) {
    return ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, options); });
  };
  EXPECT_EQ(message(AutoBucketsOptions{.max_shapes = 4, .token_budget = 100}),
            "AutoBuckets: token_budget 100 is smaller than the longest example (example 4, "
            "length 1024); raise token_budget to at least 1024");
  EXPECT_NO_THROW(Plan(lengths, AutoBucketsOptions{.max_shapes = 4, .token_budget = 1024}));
  EXPECT_TRUE(Contains(
      message(AutoBucketsOptions{.max_shapes = 4, .token_budget = 1000, .pad_to_multiple = 100}),
      "(example 4, length 1024 padded to 1100); raise token_budget to at least 1100"));
  EXPECT_EQ(message(FixedBucketsOptions{.boundaries = {16, 128, 2048}, .token_budget = 100}),
            "FixedBuckets: token_budget 100 is smaller than the last boundary 2048; raise "
            "token_budget to at least 2048");
  EXPECT_NO_THROW(
      Plan(lengths, FixedBucketsOptions{.boundaries = {16, 128, 2048}, .token_budget = 2048}));
}

TEST(PlanTest, RowsMultipleRefusesWhatCannotSplit) {
  const std::vector<int64_t> lengths = {5, 9, 3};
  auto message = [&](const PlannerOptions& options) {
    return ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, options); });
  };
  EXPECT_TRUE(Contains(message(PadToMaxOptions{.batch_size = 6, .rows_multiple = 4}),
                       "PadToMax: batch_size=6 is not a multiple of rows_multiple=4; use a "
                       "multiple, such as 8"));
  EXPECT_TRUE(
      Contains(message(PackOptions{.row_length = 10, .rows_per_batch = 3, .rows_multiple = 2}),
               "Pack: rows_per_batch=3 is not a multiple of rows_multiple=2"));
  EXPECT_TRUE(
      Contains(message(AutoBucketsOptions{.max_shapes = 2, .token_budget = 30, .rows_multiple = 4}),
               "token_budget 30 is smaller than the longest example (example 1, length 9) x "
               "rows_multiple=4; raise token_budget to at least 36"));
  EXPECT_TRUE(Contains(message(PadToMaxOptions{.batch_size = 4, .rows_multiple = 0}),
                       "PadToMax: rows_multiple must be a positive integer, found 0"));
  // Found by plan_fuzzer: the suggested multiple must not overflow.
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(message(PadToMaxOptions{.batch_size = max, .rows_multiple = 2}),
            StrCat("PadToMax: batch_size=", max, " is not a multiple of rows_multiple=2"));
}

TEST(FixedBucketsTest, TooLongErrorTruncateSkip) {
  const std::vector<int64_t> lengths = {3, 9, 8, 12};
  FixedBucketsOptions o{.boundaries = {4, 8}, .batch_size = 2};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, o); });
  EXPECT_TRUE(Contains(msg, "FixedBuckets")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
  EXPECT_TRUE(Contains(msg, "length 9")) << msg;
  EXPECT_TRUE(Contains(msg, "8")) << msg;

  o.too_long = TooLong::kTruncate;
  BatchPlan plan = Plan(lengths, o);
  EXPECT_TRUE(plan.allow_truncate);
  EXPECT_EQ(plan.stats.truncated, 2);
  EXPECT_EQ(plan.stats.real_elements, 3 + 8 + 8 + 8);
  ASSERT_EQ(plan.num_batches(), 3);
  // Full batches as they fill, then each bucket's remainder in bucket order.
  EXPECT_EQ(ToString(FromPlan(plan)),
            "2x8/0:[1][2]\n2x4/0:[0][]\n2x8/0:[3][]\ndropped [] skipped [] truncate 1\n");

  o.too_long = TooLong::kSkip;
  plan = Plan(lengths, o);
  EXPECT_FALSE(plan.allow_truncate);
  EXPECT_EQ(plan.skipped_examples, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(plan.stats.skipped, 2);
  EXPECT_EQ(plan.stats.truncated, 0);
  CheckPlan(plan, lengths, {0, 1, 2, 3}, false, 0);
}

TEST(PackTest, TooLongErrorTruncateSkip) {
  const std::vector<int64_t> lengths = {3, 9, 8, 12, 2};
  PackOptions o{.row_length = 8, .rows_per_batch = 2};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, o); });
  EXPECT_TRUE(Contains(msg, "Pack")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
  EXPECT_TRUE(Contains(msg, "length 9")) << msg;

  o.too_long = TooLong::kTruncate;
  BatchPlan plan = Plan(lengths, o);
  EXPECT_TRUE(plan.allow_truncate);
  EXPECT_EQ(plan.stats.truncated, 2);
  EXPECT_EQ(plan.stats.real_elements, 3 + 8 + 8 + 8 + 2);
  CheckPlan(plan, lengths, {0, 1, 2, 3, 4}, true, 0);

  o.too_long = TooLong::kSkip;
  plan = Plan(lengths, o);
  EXPECT_EQ(plan.skipped_examples, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(plan.stats.skipped, 2);
  EXPECT_EQ(plan.stats.real_elements, 3 + 8 + 2);
  CheckPlan(plan, lengths, {0, 1, 2, 3, 4}, true, 0);
}

TEST(PlanTest, BadOptionsThrowInvalidArgument) {
  const std::vector<int64_t> lengths = {3, 5, 9};
  const std::vector<std::pair<PlannerOptions, std::string>> bad = {
      {PadToMaxOptions{}, "batch_size"},
      {PadToMaxOptions{.batch_size = 2, .pad_to_multiple = 0}, "pad_to_multiple"},
      {FixedBucketsOptions{.boundaries = {}, .batch_size = 2}, "boundar"},
      {FixedBucketsOptions{.boundaries = {8, 8}, .batch_size = 2}, "boundaries[1]"},
      {FixedBucketsOptions{.boundaries = {0, 8}, .batch_size = 2}, "boundaries[0]"},
      {FixedBucketsOptions{.boundaries = {16}}, "batch_size or token_budget"},
      {FixedBucketsOptions{.boundaries = {4, 16}, .token_budget = 10}, "token_budget"},
      {AutoBucketsOptions{.batch_size = 2}, "max_shapes"},
      {AutoBucketsOptions{.max_shapes = 2}, "batch_size or token_budget"},
      {AutoBucketsOptions{.max_shapes = 2, .batch_size = 2, .pad_to_multiple = -1},
       "pad_to_multiple"},
      {AutoBucketsOptions{.max_shapes = 2, .token_budget = 8}, "token_budget"},
      {PackOptions{.rows_per_batch = 2}, "row_length"},
      {PackOptions{.row_length = 16}, "rows_per_batch"},
      {PackOptions{.row_length = 16, .rows_per_batch = 2, .max_segments_per_row = -1},
       "max_segments_per_row"},
      {PackOptions{.row_length = 16, .rows_per_batch = 2, .lookahead = -3}, "lookahead"},
  };
  for (const auto& [options, what] : bad) {
    const std::string msg = ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, options); });
    EXPECT_TRUE(Contains(msg, what)) << "expected '" << what << "' in: " << msg;
  }
}

TEST(PlanTest, BadLengthsAndOrderThrow) {
  const std::vector<int64_t> negative = {3, -1};
  std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { Plan(negative, PadToMaxOptions{.batch_size = 2}); });
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;

  const std::vector<int64_t> lengths = {3, 5, 9};
  const std::vector<int64_t> order = {0, 3};
  msg = ThrownMessage<OutOfRangeError>(
      [&] { Plan(lengths, PadToMaxOptions{.batch_size = 2}, order); });
  EXPECT_TRUE(Contains(msg, "order[1] = 3")) << msg;
}

TEST(PlanTest, OrderIsRespected) {
  const std::vector<int64_t> lengths = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> order = {5, 0, 3};
  const BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 2}, order);
  EXPECT_EQ(plan.example_ids, order);
  EXPECT_EQ(plan.stats.examples, 3);
  EXPECT_EQ(ToString(FromPlan(plan)),
            "2x6/0:[5][0]\n2x4/0:[3][]\ndropped [] skipped [] truncate 0\n");
  const BatchPlan packed =
      Plan(lengths,
           PackOptions{.row_length = 6, .rows_per_batch = 1, .algorithm = PackAlgorithm::kFirstFit},
           order);
  EXPECT_EQ(ToString(FromPlan(packed)),
            "1x6/2:[5]\n1x6/2:[0,3]\ndropped [] skipped [] truncate 0\n");
}

TEST(PlanTest, SameInputGivesIdenticalPlan) {
  std::mt19937 rng(25);
  const Input in = RandomInput(rng, 30);
  const std::vector<PlannerOptions> all = {
      PadToMaxOptions{.batch_size = 3, .pad_to_multiple = 4},
      FixedBucketsOptions{.boundaries = {8, 16, 32}, .token_budget = 64},
      AutoBucketsOptions{.max_shapes = 3, .token_budget = 96, .remainder = Remainder::kKeep},
      PackOptions{.row_length = 32, .rows_per_batch = 2, .lookahead = 5},
  };
  for (const PlannerOptions& options : all) {
    const BatchPlan a = Plan(in.lengths, options, in.order);
    const BatchPlan b = Plan(in.lengths, options, in.order);
    EXPECT_EQ(a.packed, b.packed);
    EXPECT_EQ(a.shapes, b.shapes);
    EXPECT_EQ(a.batch_shape_ids, b.batch_shape_ids);
    EXPECT_EQ(a.batch_row_begin, b.batch_row_begin);
    EXPECT_EQ(a.row_example_begin, b.row_example_begin);
    EXPECT_EQ(a.example_ids, b.example_ids);
    EXPECT_EQ(a.dropped_examples, b.dropped_examples);
    EXPECT_EQ(a.skipped_examples, b.skipped_examples);
    EXPECT_EQ(a.stats.padded_elements, b.stats.padded_elements);
    EXPECT_EQ(a.stats.batches_per_shape, b.stats.batches_per_shape);
  }
}

TEST(BatchPlanTest, BatchOutOfRangeThrows) {
  const std::vector<int64_t> lengths = {1, 2, 3};
  const BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 2});
  ASSERT_EQ(plan.num_batches(), 2);
  std::string msg = ThrownMessage<OutOfRangeError>([&] { plan.batch(2); });
  EXPECT_TRUE(Contains(msg, "batch 2")) << msg;
  EXPECT_TRUE(Contains(msg, "2 batches")) << msg;
  EXPECT_THROW(plan.batch(-1), OutOfRangeError);
  EXPECT_THROW(BatchPlan().batch(0), OutOfRangeError);
}

TEST(BatchPlanTest, BuilderPadsRowsAndDeduplicatesShapes) {
  const std::vector<int64_t> lengths = {4, 6, 1};
  PlanBuilder builder(/*packed=*/false);
  builder.BeginBatch({.rows = 2, .length = 8});
  builder.AddRow(std::vector<int64_t>{0});
  builder.EndBatch();  // The second row is padding, not stored.
  builder.BeginBatch({.rows = 2, .length = 8});
  builder.AddRow(std::vector<int64_t>{1});
  builder.AddRow(std::vector<int64_t>{2});
  builder.EndBatch();
  builder.Drop(5);
  const BatchPlan plan = std::move(builder).Finish(lengths, 4);
  EXPECT_EQ(plan.shapes.size(), 1u);
  EXPECT_EQ(plan.batch_row_begin, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(plan.row_example_begin, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(plan.batch(0).stored_rows(), 1);
  EXPECT_TRUE(plan.batch(0).row_examples(1).empty());
  EXPECT_EQ(plan.stats.examples, 4);
  EXPECT_EQ(plan.stats.real_elements, 11);
  EXPECT_EQ(plan.stats.padded_elements, 32);
  EXPECT_EQ(plan.stats.batches_per_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(plan.stats.dropped, 1);
}

// ---- Huge sizes: overflow and memory ---------------------------------------

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(PlannerHugeTest, BatchSizeFarAboveTheDataPlansInMemoryOfTheData) {
  // Padding rows are not stored: a batch of 2^31 rows over 4 examples
  // stores 4 rows (this used to allocate 2^31 row entries, 16 GiB).
  const std::vector<int64_t> lengths = {5, 3, 9, 2};
  const int64_t big = int64_t{1} << 31;
  const std::vector<PlannerOptions> planners = {
      PadToMaxOptions{.batch_size = big},
      FixedBucketsOptions{.boundaries = {9}, .token_budget = 9 * big},
      FixedBucketsOptions{.boundaries = {9}, .batch_size = big},
      AutoBucketsOptions{.max_shapes = 2, .batch_size = big},
      PackOptions{.row_length = 16, .rows_per_batch = big}};
  for (const PlannerOptions& options : planners) {
    const BatchPlan plan = Plan(lengths, options);
    ASSERT_EQ(plan.num_batches(), static_cast<int64_t>(plan.batch_row_begin.size()) - 1);
    EXPECT_LE(plan.row_example_begin.size(), lengths.size() + 1);
    EXPECT_EQ(plan.example_ids.size(), lengths.size());
    // A budget's rows are balanced (balance.h): its one batch has the 4 rows it holds.
    const auto* fixed = std::get_if<FixedBucketsOptions>(&options);
    const int64_t rows = fixed != nullptr && fixed->token_budget ? 4 : big;
    int64_t padded = 0;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      const BatchView view = plan.batch(b);
      EXPECT_EQ(view.shape.rows, rows);
      EXPECT_TRUE(view.row_examples(rows - 1).empty() == (rows == big));
      padded += view.shape.rows * view.shape.length;
    }
    EXPECT_EQ(plan.stats.padded_elements, padded);
    EXPECT_EQ(plan.stats.real_elements, 19);
  }
}

TEST(PlannerHugeTest, ShapeOverflowThrowsNamingTheOption) {
  const std::vector<int64_t> lengths = {5, 3, 9, 2};
  const int64_t rows = int64_t{1} << 40;
  std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    Plan(lengths, PadToMaxOptions{.batch_size = rows, .pad_to_multiple = int64_t{1} << 30});
  });
  EXPECT_TRUE(Contains(msg, "batch_size=1099511627776 with pad_to_multiple=1073741824")) << msg;
  EXPECT_TRUE(Contains(msg, "1099511627776 x 1073741824 elements, more than 9223372036854775807"))
      << msg;
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { Plan(lengths, FixedBucketsOptions{.boundaries = {kMaxExtent}, .batch_size = rows}); });
  EXPECT_TRUE(Contains(msg, "boundaries[0]=2147483647")) << msg;
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { Plan(lengths, PackOptions{.row_length = kMaxExtent, .rows_per_batch = rows}); });
  EXPECT_TRUE(Contains(msg, "row_length=2147483647")) << msg;
  EXPECT_TRUE(Contains(msg, "rows_per_batch=1099511627776")) << msg;
  msg = ThrownMessage<InvalidArgumentError>([&] {
    Plan(lengths, PackOptions{.row_length = 16,
                              .rows_per_batch = int64_t{1} << 40,
                              .max_segments_per_row = int64_t{1} << 40});
  });
  EXPECT_TRUE(Contains(msg, "max_segments_per_row=1099511627776")) << msg;
  // Rounding a length up to the multiple would itself pass 2^63.
  const std::vector<int64_t> long_one = {kInt64Max - 1};
  for (const PlannerOptions& options : std::vector<PlannerOptions>{
           PadToMaxOptions{.batch_size = 1, .pad_to_multiple = 4},
           AutoBucketsOptions{.max_shapes = 1, .batch_size = 1, .pad_to_multiple = 4}}) {
    msg = ThrownMessage<InvalidArgumentError>([&] { Plan(long_one, options); });
    EXPECT_TRUE(Contains(msg, "pad_to_multiple=4")) << msg;
  }
  // The largest batch that fits is planned: (2^32 + 2) x (2^31 - 1) = 2^63 - 2.
  const BatchPlan fits =
      Plan(std::vector<int64_t>{1},
           PadToMaxOptions{.batch_size = (int64_t{1} << 32) + 2, .pad_to_multiple = kMaxExtent});
  EXPECT_EQ(fits.stats.padded_elements, kInt64Max - 1);
}

TEST(PlannerTest, CheckExamplesFitThrowsWhatPlanningThrows) {
  // In index order Plan() meets the same example first: the same message.
  const std::vector<int64_t> lengths = {3, 9, 4, 12, 1 << 20};
  const std::vector<int64_t> edges = {2, 3, 39, 4, 0};
  const std::vector<PlannerOptions> refusing = {
      PadToMaxOptions{.batch_size = int64_t{1} << 50, .pad_to_multiple = 1 << 20},
      FixedBucketsOptions{.boundaries = {4, 8}, .batch_size = 2},
      AutoBucketsOptions{.max_shapes = 2, .token_budget = 1 << 19},
      PackOptions{.row_length = 8, .rows_per_batch = 2},
      GraphBudgetOptions{.nodes = 10, .edges = 30, .graphs = 4},
      GraphBucketsOptions{.max_shapes = 2, .nodes = 20, .edges = 30, .graphs = 4}};
  for (const PlannerOptions& options : refusing) {
    const std::string planned =
        ThrownMessage<InvalidArgumentError>([&] { Plan(lengths, options, {}, edges); });
    EXPECT_EQ(
        ThrownMessage<InvalidArgumentError>([&] { CheckExamplesFit(lengths, options, edges); }),
        planned);
  }
  // Policies that leave such examples out plan them: nothing to name.
  for (const PlannerOptions& options : std::vector<PlannerOptions>{
           FixedBucketsOptions{.boundaries = {4, 8}, .batch_size = 2, .too_long = TooLong::kSkip},
           PackOptions{.row_length = 8, .rows_per_batch = 2, .too_long = TooLong::kTruncate},
           GraphBudgetOptions{.nodes = 10, .edges = 30, .graphs = 4, .too_big = TooBig::kSkip}}) {
    EXPECT_NO_THROW(CheckExamplesFit(lengths, options, edges));
  }
}

TEST(PlannerHugeTest, ExtentsPastInt32AreRefusedWhenTheOptionsAreMade) {
  // Lengths, positions and segment ids are int32 in every batch; a graph
  // batch's n_node, n_edge, node ids and graph ids too. Options that need
  // more fail when they are made, naming the option, not at the first batch.
  const int64_t big = kMaxExtent + 1;
  const std::vector<std::pair<PlannerOptions, std::string>> cases = {
      {PadToMaxOptions{.batch_size = 1, .pad_to_multiple = big}, "PadToMax: pad_to_multiple="},
      {FixedBucketsOptions{.boundaries = {4, big}, .batch_size = 1},
       "FixedBuckets: boundaries[1]="},
      {AutoBucketsOptions{.max_shapes = 1, .batch_size = 1, .pad_to_multiple = big},
       "AutoBuckets: pad_to_multiple="},
      {PackOptions{.row_length = big, .rows_per_batch = 1}, "Pack: row_length="},
      {PackOptions{.row_length = 8, .rows_per_batch = 1, .max_segments_per_row = big},
       "Pack: max_segments_per_row="},
      {GraphBudgetOptions{.nodes = big, .edges = 1, .graphs = 2}, "GraphBudget: nodes="},
      {GraphBudgetOptions{.nodes = 2, .edges = big, .graphs = 2}, "GraphBudget: edges="},
      {GraphBucketsOptions{.max_shapes = 1, .nodes = 2, .edges = 1, .graphs = big},
       "GraphBuckets: graphs="},
  };
  for (const auto& [options, option] : cases) {
    const std::string msg =
        ThrownMessage<InvalidArgumentError>([&] { ValidatePlannerOptions(options); });
    EXPECT_TRUE(Contains(msg, StrCat(option,
                                     "2147483648 exceeds 2147483647, the most a batch's "
                                     "int32 ")))
        << msg;
  }
  // At the limit they are accepted.
  ValidatePlannerOptions(
      GraphBudgetOptions{.nodes = kMaxExtent, .edges = kMaxExtent, .graphs = kMaxExtent});
  ValidatePlannerOptions(PackOptions{.row_length = kMaxExtent, .rows_per_batch = 1});
}

TEST(PlannerHugeTest, StatsSaturateInsteadOfGoingNegative) {
  // Two batches of 2^62 elements each: 2^63 in all, one past int64.
  const int64_t length = int64_t{1} << 61;
  const std::vector<int64_t> lengths = {length, length, length, length};
  const BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 2});
  ASSERT_EQ(plan.num_batches(), 2);
  EXPECT_EQ(plan.stats.padded_elements, kInt64Max);
  EXPECT_EQ(plan.stats.occupied_elements, kInt64Max);
  EXPECT_EQ(plan.stats.real_elements, kInt64Max);
  EXPECT_GE(plan.stats.efficiency, 0.0);
  // AutoBuckets' cost model saturates too and still plans every example.
  const BatchPlan autob = Plan(lengths, AutoBucketsOptions{.max_shapes = 2, .batch_size = 2});
  EXPECT_EQ(autob.example_ids.size(), 4u);
  EXPECT_EQ(autob.stats.padded_elements, kInt64Max);
}

TEST(PlannerHugeTest, AutoBucketsPlansWhenEveryBucketCostSaturates) {
  // Two distinct lengths whose every bucketing costs past int64: the
  // dynamic programme must still pick (and backtrack) real boundaries, not
  // mistake saturated costs for unreachable ones (found by plan_fuzzer).
  const int64_t length = int64_t{1} << 61;
  const std::vector<int64_t> lengths = {length + 1, length, length + 1, length};
  for (const bool filled : {true, false}) {
    AutoBucketsOptions o{.max_shapes = 2, .batch_size = 2};
    o.fill_remainders = filled;
    const BatchPlan plan = Plan(lengths, o);
    std::vector<int64_t> seen(plan.example_ids.begin(), plan.example_ids.end());
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      const BatchView view = plan.batch(b);
      for (int64_t e : view.all_examples()) EXPECT_LE(lengths[e], view.shape.length);
    }
  }
}

}  // namespace
}  // namespace jaxbatch
