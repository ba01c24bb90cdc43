// Pack(algorithm="concat_then_split"): Grain's ConcatThenSplitIterDataset.
//
// The examples, in the order the planner is given them (a Loader's shuffled
// and sharded order), are concatenated into one stream that is cut at row
// ends: every row is full but the last, and an example that crosses a row
// end is cut there, each piece a segment of its own (positions from 0).
// The plan is split (BatchPlan::split): a segment is piece k of its example,
// elements [piece_starts[q], piece_starts[q] + piece_lengths[q]), so
// example_index and example_piece join per-token outputs back in order.
//
// Choices where Grain has no counterpart or several:
//   * every example longer than the room left is cut, whatever too_long
//     says (Grain's split_full_length_features=True): too_long must be
//     "error" (the default) or "split", which mean the same here;
//   * max_segments_per_row caps the segments of a row: a row that holds
//     that many closes early, not full (Grain's meta features of length S
//     do the same); unset, it is the most segments any order of the lengths
//     can put in a row (ConcatSegments), so no row closes early;
//   * an empty example is a segment of 0 elements in the row being filled,
//     even a full one while it has a segment slot left;
//   * the last, partial batch is padded with empty rows ("pad") or kept
//     with fewer rows ("keep"); "drop" is refused, as for too_long="split":
//     it would drop the tail of an example whose head was yielded;
//   * lookahead and open_rows are refused: nothing is reordered, and one
//     row is open at a time.
#ifndef JAXBATCH_PLAN_CONCAT_SPLIT_H_
#define JAXBATCH_PLAN_CONCAT_SPLIT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {

// Throws InvalidArgumentError for an option concat_then_split does not
// take (see above), naming it and the value found. ValidatePack calls it.
void ValidateConcatThenSplit(const PackOptions& o);

// The per-segment axis when max_segments_per_row is unset: a row holds at
// most a piece ending an example, whole examples (at most the k smallest
// lengths that sum to row_length) and a piece starting one, so k + 2,
// rounded up to a power of two and capped at row_length. From the lengths
// alone, not their order: every epoch and shard gets the same shape.
int64_t ConcatSegments(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                       int64_t row_length);

// Plans `ids` (in that order) by concatenation; options already validated.
// Example:
//   Plan({7, 25}, PackOptions{.row_length = 10, .rows_per_batch = 4,
//                             .algorithm = PackAlgorithm::kConcatThenSplit});
//   // one batch of rows [7 | 3 of 25], [10 of 25], [10 of 25], [2 of 25]
BatchPlan PlanConcatThenSplit(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                              const PackOptions& o);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_CONCAT_SPLIT_H_
