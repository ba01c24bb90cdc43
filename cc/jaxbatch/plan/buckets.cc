#include "jaxbatch/plan/buckets.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <span>
#include <utility>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"

namespace jaxbatch {

LengthHistogram RoundedHistogram(std::span<const int64_t> lengths, std::span<const int64_t> order,
                                 int64_t multiple) {
  std::vector<int64_t> rounded;
  const size_t n = order.empty() ? lengths.size() : order.size();
  rounded.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t l = lengths[order.empty() ? k : static_cast<size_t>(order[k])];
    const std::optional<int64_t> r = CheckedRoundUp(l, multiple);
    if (!r) {
      throw InvalidArgumentError(StrCat("AutoBuckets: pad_to_multiple=", multiple,
                                        " rounds length ", l, " up past ", kMaxSize));
    }
    rounded.push_back(*r);
  }
  std::sort(rounded.begin(), rounded.end());
  LengthHistogram histogram;
  for (size_t k = 0; k < rounded.size();) {
    size_t end = k;
    while (end < rounded.size() && rounded[end] == rounded[k]) ++end;
    histogram.values.push_back(rounded[k]);
    histogram.counts.push_back(static_cast<int64_t>(end - k));
    k = end;
  }
  return histogram;
}

int64_t BucketCost(int64_t length, int64_t count, int64_t rows, bool pad_remainder) {
  // Saturates: a cost past int64 is simply worse than any that fits.
  if (!pad_remainder) return SaturatingMul(length, count);
  return SaturatingMul(SaturatingMul(length, rows), count / rows + (count % rows != 0 ? 1 : 0));
}

namespace {

// The exact optimum of each bucket count: result[k - 1] holds the
// boundaries of the least-cost k buckets (empty when k > distinct lengths),
// and costs[k - 1] its cost.
std::vector<std::vector<int64_t>> OptimaPerCount(
    const LengthHistogram& histogram, int64_t max_shapes,
    const std::function<int64_t(int64_t)>& rows_for_length, bool pad_remainder,
    std::vector<int64_t>* costs) {
  const size_t m = histogram.values.size();
  if (m == 0) return {};
  const size_t k_max = std::min(static_cast<size_t>(max_shapes), m);
  std::vector<int64_t> prefix(m + 1, 0);
  for (size_t j = 0; j < m; ++j) prefix[j + 1] = prefix[j] + histogram.counts[j];
  std::vector<int64_t> rows(m);
  for (size_t j = 0; j < m; ++j) rows[j] = rows_for_length(histogram.values[j]);

  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // Costs saturate at kInf (a cost past int64 is still a cost: huge lengths
  // times rows reach it), so "no way to cover" has a sentinel of its own;
  // otherwise a layer of saturated costs would leave no parent to follow.
  constexpr int64_t kUnreached = -1;
  // dp[k][j]: least cost of covering values[0, j) with k buckets whose last
  // boundary is values[j - 1]; parent[k][j]: where that last bucket starts.
  std::vector<std::vector<int64_t>> dp(k_max + 1, std::vector<int64_t>(m + 1, kUnreached));
  std::vector<std::vector<uint32_t>> parent(k_max + 1, std::vector<uint32_t>(m + 1, 0));
  dp[0][0] = 0;
  for (size_t k = 1; k <= k_max; ++k) {
    const std::vector<int64_t>& prev = dp[k - 1];
    for (size_t j = k; j <= m; ++j) {
      const int64_t length = histogram.values[j - 1];
      const int64_t r = rows[j - 1];
      int64_t best = kUnreached;
      uint32_t best_i = 0;
      for (size_t i = k - 1; i < j; ++i) {
        if (prev[i] == kUnreached) continue;
        const int64_t cost =
            SaturatingAdd(prev[i], BucketCost(length, prefix[j] - prefix[i], r, pad_remainder));
        if (best == kUnreached || cost < best) {
          best = cost;
          best_i = static_cast<uint32_t>(i);
        }
      }
      dp[k][j] = best;
      parent[k][j] = best_i;
    }
  }
  std::vector<std::vector<int64_t>> out(k_max);
  if (costs != nullptr) costs->assign(k_max, kInf);
  // k <= m: every count is reachable (dp[k - 1][k - 1] is, by induction).
  for (size_t k = 1; k <= k_max; ++k) {
    if (costs != nullptr) (*costs)[k - 1] = dp[k][m];
    std::vector<int64_t>& boundaries = out[k - 1];
    for (size_t q = k, j = m; q > 0; --q) {
      boundaries.push_back(histogram.values[j - 1]);
      j = parent[q][j];
    }
    std::reverse(boundaries.begin(), boundaries.end());
  }
  return out;
}

}  // namespace

std::vector<int64_t> OptimalBoundaries(const LengthHistogram& histogram, int64_t max_shapes,
                                       const std::function<int64_t(int64_t)>& rows_for_length,
                                       bool pad_remainder) {
  std::vector<int64_t> costs;
  std::vector<std::vector<int64_t>> optima =
      OptimaPerCount(histogram, max_shapes, rows_for_length, pad_remainder, &costs);
  if (optima.empty()) return {};
  size_t best = 0;  // The fewest buckets among equal costs.
  for (size_t k = 1; k < optima.size(); ++k) {
    if (costs[k] < costs[best]) best = k;
  }
  return optima[best];
}

void FillRemainders(std::vector<int64_t>& counts, std::span<const int64_t> rows,
                    const std::function<void(size_t from, size_t to, int64_t n)>& move) {
  for (size_t k = counts.size(); k-- > 1;) {
    int64_t free = counts[k] % rows[k] == 0 ? 0 : rows[k] - counts[k] % rows[k];
    for (size_t j = k; free > 0 && j-- > 0;) {
      const int64_t n = std::min(free, counts[j]);
      if (n == 0) continue;
      counts[j] -= n;
      counts[k] += n;
      free -= n;
      if (move) move(j, k, n);
    }
  }
}

int64_t FilledCost(const LengthHistogram& histogram, std::span<const int64_t> boundaries,
                   const std::function<int64_t(int64_t)>& rows_for_length) {
  // Each bucket's members as (length, count) runs, longest first: a move
  // takes from the front of one and appends to the back of a longer bucket
  // (whose members are all longer), so both stay sorted.
  const size_t n = boundaries.size();
  std::vector<std::deque<std::pair<int64_t, int64_t>>> members(n);
  std::vector<int64_t> counts(n, 0), rows(n);
  for (size_t j = histogram.values.size(), k = n - 1; j-- > 0;) {
    while (k > 0 && histogram.values[j] <= boundaries[k - 1]) --k;
    members[k].emplace_back(histogram.values[j], histogram.counts[j]);
    counts[k] += histogram.counts[j];
  }
  for (size_t k = 0; k < n; ++k) rows[k] = rows_for_length(boundaries[k]);
  FillRemainders(counts, rows, [&](size_t from, size_t to, int64_t moved) {
    while (moved > 0) {
      auto& [length, count] = members[from].front();
      const int64_t take = std::min(moved, count);
      members[to].emplace_back(length, take);
      moved -= take;
      if ((count -= take) == 0) members[from].pop_front();
    }
  });
  int64_t cost = 0;
  for (size_t k = 0; k < n; ++k) {
    if (counts[k] == 0) continue;  // emptied into longer buckets
    cost = SaturatingAdd(cost, BucketCost(members[k].front().first, counts[k], rows[k], true));
  }
  return cost;
}

std::vector<int64_t> FilledBoundaries(const LengthHistogram& histogram, int64_t max_shapes,
                                      const std::function<int64_t(int64_t)>& rows_for_length) {
  std::vector<int64_t> best;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  for (const bool pad : {true, false}) {
    for (const std::vector<int64_t>& boundaries :
         OptimaPerCount(histogram, max_shapes, rows_for_length, pad, nullptr)) {
      if (boundaries.empty()) continue;
      const int64_t cost = FilledCost(histogram, boundaries, rows_for_length);
      if (best.empty() || cost < best_cost ||
          (cost == best_cost && boundaries.size() < best.size())) {
        best_cost = cost;
        best = boundaries;
      }
    }
  }
  return best;
}

}  // namespace jaxbatch
