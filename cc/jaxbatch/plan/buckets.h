// Optimal bucket boundaries: pure compute over a length histogram.
//
// Given the distinct (rounded) lengths u_1 < ... < u_m with counts c_j and
// at most K buckets, choose boundaries (each some u_j, the last u_m) that
// minimise the total padded elements. A bucket (u_i, u_j] pads to u_j with
// rows(u_j) rows per batch, so it costs u_j * n with remainder keep/drop and
// u_j * rows * ceil(n / rows) with remainder pad (the empty rows count). The
// cost is a sum over buckets, so dynamic programming over the histogram is
// exact: dp[k][j] = min_i dp[k-1][i] + cost(i, j), O(K m^2) time, O(K m)
// memory.
#ifndef JAXBATCH_PLAN_BUCKETS_H_
#define JAXBATCH_PLAN_BUCKETS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace jaxbatch {

struct LengthHistogram {
  std::vector<int64_t> values;  // distinct lengths, increasing
  std::vector<int64_t> counts;  // examples of each length
};

// Histogram of lengths rounded up to a multiple of `multiple` (at least
// `multiple`, so an empty example still gets a row of padding).
LengthHistogram RoundedHistogram(std::span<const int64_t> lengths, std::span<const int64_t> order,
                                 int64_t multiple);

// Total padded elements of one bucket holding `count` examples padded to
// `length` with `rows` rows per batch.
int64_t BucketCost(int64_t length, int64_t count, int64_t rows, bool pad_remainder);

// The boundaries (a subset of histogram.values ending with its last value)
// of at most `max_shapes` buckets that minimise the summed BucketCost.
// `rows_for_length(L)` gives the rows per batch of a bucket of length L.
std::vector<int64_t> OptimalBoundaries(const LengthHistogram& histogram, int64_t max_shapes,
                                       const std::function<int64_t(int64_t)>& rows_for_length,
                                       bool pad_remainder);

// Filling remainders (AutoBuckets with remainder pad): the empty rows of a
// bucket's last batch cost the same whether empty or holding a shorter
// example, so, longest bucket first, each bucket's last batch takes
// examples of the shorter buckets (the next shorter first) into its empty
// rows, and those buckets have fewer examples to batch. `counts[k]` and
// `rows[k]` are bucket k's (shortest first); FillRemainders updates counts
// and calls move(from, to, n) for each n examples moved.
void FillRemainders(std::vector<int64_t>& counts, std::span<const int64_t> rows,
                    const std::function<void(size_t from, size_t to, int64_t n)>& move = {});

// The padded elements of buckets ending at `boundaries` over `histogram`
// once their remainders are filled, each bucket padded to its longest
// member (shorter than its boundary when its longest moved up) with the
// rows of its boundary.
int64_t FilledCost(const LengthHistogram& histogram, std::span<const int64_t> boundaries,
                   const std::function<int64_t(int64_t)>& rows_for_length);

// The boundaries of at most `max_shapes` buckets with the least FilledCost
// among the exact optima of each bucket count under both cost models (empty
// rows counted, and free): the filled cost lies between the two models', so
// the free model's optimum bounds it from below.
std::vector<int64_t> FilledBoundaries(const LengthHistogram& histogram, int64_t max_shapes,
                                      const std::function<int64_t(int64_t)>& rows_for_length);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_BUCKETS_H_
