// Pack(row_length={"inputs": 512, "targets": 128}): several features packed
// jointly, each into its own row length (seqio's trim_and_pack, Grain's
// packers over a length struct, T5's encoder-decoder batches).
//
// The planner reads each feature's lengths: Plan()'s `lengths` are the
// first feature's (by name) and its `edges` the others', feature after
// feature, n each (FeatureLengthsOf builds that layout). The packing is
// feature_packer.h's: an example enters a row only if every feature fits
// its own room, and example k of a row is segment k in every feature (an
// example empty in a feature still takes its segment there: 0 elements).
// A batch's shape has `length` = the sum of the row lengths (so its
// padded_elements count every feature); BatchPlan::feature_row_lengths
// holds each, and a collator lays each feature out to its own.
//
// The options:
//   * too_long: "error" names the example and the feature; "truncate" cuts
//     each feature to its own row length (trim_and_pack), counted once per
//     example in stats.truncated; "skip" leaves the example out;
//   * max_segments_per_row caps the examples of a row (Grain's
//     max_sequences_per_bin); unset, it is the least over the features of
//     the most examples a row of that feature can hold (DefaultSegments);
//   * first fit, best fit (Grain's: the fitting row with the least room
//     summed over the features), lookahead and open_rows as for one feature;
//   * too_long="split" and algorithm="concat_then_split" are refused: both
//     cut an example at its own feature's row end, so the pieces of inputs
//     and of targets would not pair up, and example k could not be segment
//     k in every feature.
#ifndef JAXBATCH_PLAN_PACK_FEATURES_H_
#define JAXBATCH_PLAN_PACK_FEATURES_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/packer.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {

// Throws InvalidArgumentError for per-feature row lengths that no data
// could make valid (a bad name or length, row_length given too, split or
// concat_then_split). ValidatePack calls it when row_lengths is set.
void ValidatePackFeatures(const PackOptions& o);

// Throws, under too_long="error", the error planning would for the first
// example (by index) with a feature longer than its row length; and for
// `others` of the wrong size. `lengths` and `others` as Plan() takes them.
void CheckPackFeaturesFit(std::span<const int64_t> lengths, std::span<const int64_t> others,
                          const PackOptions& o);

// Plans `ids` (validated options with row_lengths set).
// Example:
//   // inputs of 3, 2, 1 and targets of 1, 3, 2 tokens, rows of 4 and 4:
//   Plan({3, 2, 1}, PackOptions{.row_lengths = {{"inputs", 4}, {"targets", 4}},
//                               .rows_per_batch = 2, .algorithm = PackAlgorithm::kFirstFit},
//        {}, {1, 3, 2});
//   // rows {0, 2} and {1}: Grain's two-feature fixture at length 4
BatchPlan PlanPackFeatures(std::span<const int64_t> lengths, std::span<const int64_t> others,
                           const std::vector<int64_t>& ids, const PackOptions& o);

// Adds `rows` as batches of o.rows_per_batch rows of `shape`, the last per
// o.remainder: padded to the full shape, kept with its rows rounded up to
// o.rows_multiple, or dropped (its examples counted). `add_row(r)` adds
// packed row r to the batch begun. Both Pack planners batch this way.
void AddPackedBatches(const PackedRows& rows, const PackOptions& o, const BatchShape& shape,
                      const std::function<void(int64_t)>& add_row, PlanBuilder& builder);

// Each example's total length over the features, each cut to its row
// length: the real elements a Loader counts for it.
std::vector<int64_t> PackFeatureTotals(std::span<const int64_t> lengths,
                                       std::span<const int64_t> others, const PackOptions& o);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PACK_FEATURES_H_
