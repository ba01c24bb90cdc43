#include "jaxbatch/plan/balance.h"

namespace jaxbatch {

int64_t BalancedRows(int64_t count, int64_t cap, int64_t rows_multiple) {
  if (count <= 0) return cap;
  // count / cap rounded up, without count + cap - 1 (which could wrap).
  const int64_t batches = count / cap + (count % cap != 0 ? 1 : 0);
  const int64_t rows = count / batches + (count % batches != 0 ? 1 : 0);
  // At most cap, itself a multiple of rows_multiple: the rounding cannot pass it.
  const int64_t partial = rows % rows_multiple;
  return partial == 0 ? rows : rows - partial + rows_multiple;
}

void BalanceRows(std::span<const int64_t> counts, std::span<int64_t> rows, int64_t rows_multiple) {
  for (size_t s = 0; s < rows.size(); ++s)
    rows[s] = BalancedRows(counts[s], rows[s], rows_multiple);
}

bool PackingFollowsOrder(PackAlgorithm algorithm, std::optional<int64_t> lookahead,
                         std::optional<int64_t> open_rows) {
  // Best fit without a window sorts its items longest first (ties are equal
  // lengths), so its rows depend on the lengths alone.
  return algorithm != PackAlgorithm::kBestFit || lookahead.has_value() || open_rows.has_value();
}

}  // namespace jaxbatch
