// Pack(row_length=[96, 256]): one column packed into a few row lengths.
//
// A single row length pads every row to the longest a text may be, and
// attention pays row_length per token; a few row lengths let short texts
// pack into short rows. Each example (or, under too_long="split", each piece
// cut at the largest row length) goes to the group of the smallest row
// length that holds it; each group is packed on its own with the chosen
// algorithm (first fit, best fit, lookahead, open_rows) into rows of its
// length. With token_budget a group of row length L gets token_budget / L
// rows per batch (rounded down to rows_multiple), so every batch holds at
// most token_budget elements; else every group gets rows_per_batch.
//
// The last, partial batch of each group would pad to full rows, and on a
// small corpus that padding would eat what the short rows saved. Under
// remainder="pad", longest group first, the empty rows of a group's last
// batch take the rows of each shorter group's last batch, re-packed into
// the longer rows, when they all fit there: that shorter group then has no
// partial batch (as AutoBuckets' FillRemainders, for rows).
//
// Batches of all groups are emitted interleaved, each at the input position
// of its earliest segment, so a shuffle mixes the shapes. Every shape is
// {rows, L, segments of L}: one shape per row length (and, under
// remainder="keep", one per kept remainder). The segment axis of a group
// defaults to DefaultSegments over all the lengths for its row length (the
// lengths only, never their order: the same every epoch and shard).
// algorithm="concat_then_split" and several features are refused with a
// list or a token budget.
#ifndef JAXBATCH_PLAN_PACK_LENGTHS_H_
#define JAXBATCH_PLAN_PACK_LENGTHS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {

// planner.cc's, shared by the Pack planners: the default segment axis of
// rows of `row_length` for the items `ids` of `lengths`, and the too_long
// policy for an example longer than `limit` (true: still planned).
int64_t DefaultSegments(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                        int64_t row_length);
bool HandleTooLong(TooLong policy, int64_t id, int64_t length, int64_t limit, const char* planner,
                   const char* what, PlanBuilder& builder);

// Whether `o` plans through PlanPackLengths: a row_length list, max_shapes
// or a token budget.
bool PacksSeveralLengths(const PackOptions& o);

// The row lengths `o` packs `lengths` (all the examples, by id) into,
// increasing: the list, those max_shapes chooses, or {row_length}.
std::vector<int64_t> PackRowLengths(const PackOptions& o, std::span<const int64_t> lengths);

// At most `max_shapes` row lengths, the largest `row_length`, that minimise
// the estimated cost of packing `lengths` (each cut to row_length): the T
// tokens of a group of row length L fill ceil(T / L) rows, and a row costs
// L slots of (100 - a) * row_length + a * L each, a = attention_percent:
// every slot (padding too) pays its token's work, and attention a cost
// linear in the row length, a% of a row of row_length's time. Exact dynamic
// programming over the distinct lengths (for row_length > 1024, each rounded
// up to a multiple of row_length / 1024, at most 1024 candidates), fewer
// row lengths on a tie. From the lengths alone, never their order: the same
// every epoch and shard.
std::vector<int64_t> ChoosePackRowLengths(std::span<const int64_t> lengths, int64_t row_length,
                                          int64_t max_shapes, int64_t attention_percent);

// Rows per batch for rows of `row_length`: rows_per_batch, or the token
// budget's rows rounded down to rows_multiple (0 when none fits).
int64_t PackRowsPerBatch(const PackOptions& o, int64_t row_length);

// Throws InvalidArgumentError for max_shapes with a list, max_shapes < 1,
// attention_percent outside 0..99; a list that is not strictly increasing,
// positive and within kMaxExtent, whose last is not row_length; for
// rows_per_batch with token_budget, or neither; a budget without one row
// of the largest length; several features or concat_then_split. ValidatePack
// calls it when PacksSeveralLengths(o).
void ValidatePackLengths(const PackOptions& o);

// Plans `ids` (validated options, PacksSeveralLengths(o)).
// Example:
//   // lengths 50, 200, 90, 30: rows of 96 take {50, 30} and {90}, of 256 {200}
//   Plan({50, 200, 90, 30}, PackOptions{.row_length = 256, .row_length_list = {96, 256},
//                                       .rows_per_batch = 2});
BatchPlan PlanPackLengths(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                          const PackOptions& o);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PACK_LENGTHS_H_
