// Balanced batches: no half-empty last batch where a budget sets the rows.
//
// A shape whose rows a batch come from a budget (token_budget: at most that
// many elements a batch) would batch its R rows (packed rows, or examples
// of a bucket) as full batches of the budget's M rows and a last one padded
// to M, mostly empty when R is just past a multiple of M. Every batch of a
// shape has the same rows (one compilation), so spreading the rows over the
// batches only pays when the shape itself shrinks: its rows become
// ceil(R / ceil(R / M)) (rounded up to rows_multiple), still within the
// budget, in as many batches as the budget's rows needed, and the padding
// left is under one row a batch (under rows_multiple rows with it).
//
// Planners balance a shape only when the rows a batch are the budget's
// (never a batch_size or rows_per_batch the user fixed) and remainder is
// "pad", and, for a packing, only when its row count depends on the lengths
// alone (best fit without lookahead or open_rows): a shuffle then never
// changes the shape from epoch to epoch.
//
// Example:
//   BalancedRows(100, 41, 1);  // 34: three batches hold 34, 34 and 32 rows
//                              // (102 slots) instead of 41, 41 and 18 (123)
#ifndef JAXBATCH_PLAN_BALANCE_H_
#define JAXBATCH_PLAN_BALANCE_H_

#include <cstdint>
#include <optional>
#include <span>

#include "jaxbatch/plan/packer.h"

namespace jaxbatch {

// The rows a batch for `count` rows (>= 0) under a budget of `cap` rows a
// batch (> 0, a multiple of `rows_multiple` > 0): ceil(count / batches)
// rounded up to rows_multiple for batches = ceil(count / cap); `cap` when
// count is 0 (no batch).
int64_t BalancedRows(int64_t count, int64_t cap, int64_t rows_multiple);

// BalancedRows for each shape: rows[s] (its budget's cap) becomes the
// balanced rows for counts[s] rows.
void BalanceRows(std::span<const int64_t> counts, std::span<int64_t> rows, int64_t rows_multiple);

// Whether a packing's row count depends on the order of its items: first
// fit, or best fit within a lookahead window or over open_rows. Such a plan
// keeps its budget's rows (a balanced shape would change with a shuffle).
bool PackingFollowsOrder(PackAlgorithm algorithm, std::optional<int64_t> lookahead,
                         std::optional<int64_t> open_rows);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_BALANCE_H_
