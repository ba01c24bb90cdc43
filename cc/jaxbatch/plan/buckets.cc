#include "jaxbatch/plan/buckets.h"

#include <algorithm>
#include <limits>

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

std::vector<int64_t> OptimalBoundaries(const LengthHistogram& histogram, int64_t max_shapes,
                                       const std::function<int64_t(int64_t)>& rows_for_length,
                                       bool pad_remainder) {
  const size_t m = histogram.values.size();
  if (m == 0) return {};
  const size_t k_max = std::min(static_cast<size_t>(max_shapes), m);
  std::vector<int64_t> prefix(m + 1, 0);
  for (size_t j = 0; j < m; ++j) prefix[j + 1] = prefix[j] + histogram.counts[j];
  std::vector<int64_t> rows(m);
  for (size_t j = 0; j < m; ++j) rows[j] = rows_for_length(histogram.values[j]);

  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // dp[k][j]: least cost of covering values[0, j) with k buckets whose last
  // boundary is values[j - 1]; parent[k][j]: where that last bucket starts.
  std::vector<std::vector<int64_t>> dp(k_max + 1, std::vector<int64_t>(m + 1, kInf));
  std::vector<std::vector<uint32_t>> parent(k_max + 1, std::vector<uint32_t>(m + 1, 0));
  dp[0][0] = 0;
  for (size_t k = 1; k <= k_max; ++k) {
    const std::vector<int64_t>& prev = dp[k - 1];
    for (size_t j = k; j <= m; ++j) {
      const int64_t length = histogram.values[j - 1];
      const int64_t r = rows[j - 1];
      int64_t best = kInf;
      uint32_t best_i = 0;
      for (size_t i = k - 1; i < j; ++i) {
        if (prev[i] == kInf) continue;
        const int64_t cost =
            SaturatingAdd(prev[i], BucketCost(length, prefix[j] - prefix[i], r, pad_remainder));
        if (cost < best) {
          best = cost;
          best_i = static_cast<uint32_t>(i);
        }
      }
      dp[k][j] = best;
      parent[k][j] = best_i;
    }
  }
  size_t best_k = 1;
  for (size_t k = 1; k <= k_max; ++k) {
    if (dp[k][m] < dp[best_k][m]) best_k = k;
  }
  std::vector<int64_t> boundaries;
  for (size_t k = best_k, j = m; k > 0; --k) {
    boundaries.push_back(histogram.values[j - 1]);
    j = parent[k][j];
  }
  std::reverse(boundaries.begin(), boundaries.end());
  return boundaries;
}

}  // namespace jaxbatch
