// Planners: pure, deterministic functions from example lengths to a BatchPlan.
//
// Each planner takes one small options struct, validated once
// (ValidatePlannerOptions, which Plan() calls):
//   PadToMaxOptions     consecutive batches padded to their longest example
//                       (rounded up to a multiple): the usual baseline.
//   FixedBucketsOptions tf.data's bucket_by_sequence_length: an example of
//                       length l goes to the first boundary >= l; each
//                       bucket may have its own batch size (batch_sizes).
//   AutoBucketsOptions  the boundaries that minimise padded elements with at
//                       most max_shapes shapes (exact, see buckets.h); with
//                       Remainder::kPad the empty rows of each bucket's last
//                       batch take the longest examples of shorter buckets
//                       (FillRemainders), and a bucket pads to its longest
//                       example left.
//   PackOptions         sequence packing into rows (see packer.h).
//   PatchPackOptions    images cut into patches, packed into rows of
//                       patches (NaViT; patch_pack.h): planned from heights
//                       as `lengths` and `widths`.
//   AspectBucketsOptions
//                       aspect-ratio buckets of a fixed area for images the
//                       user resizes (aspect_buckets.h): each example's
//                       target in BatchPlan::resize_to; planned from
//                       heights as `lengths` and `widths`.
//   GraphBudgetOptions, GraphBucketsOptions
//                       graphs to node, edge and graph budgets (see
//                       graph_planner.h): planned from node counts as
//                       `lengths` and edge counts as `edges`.
// With a token budget T a bucket of length L gets at most T / L rows, so
// every batch holds at most T elements and short sequences get big batches;
// with remainder pad a shape's rows are spread evenly over the batches it
// needs, so its last batch is not mostly padding (balance.h).
// `rows_multiple` makes every batch's row count a multiple of it (a global
// batch split over N local devices needs N | rows): a token budget's rows
// are rounded down to it, a kept remainder's rows up, and a batch_size or
// rows_per_batch (or one of FixedBuckets' batch_sizes) that is not a
// multiple is refused.
//
// Example:
//   BatchPlan plan = Plan(lengths, AutoBucketsOptions{.max_shapes = 8,
//                                                     .token_budget = 65536});
#ifndef JAXBATCH_PLAN_PLANNER_H_
#define JAXBATCH_PLAN_PLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "jaxbatch/plan/aspect_buckets.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/graph_planner.h"
#include "jaxbatch/plan/order.h"
#include "jaxbatch/plan/packer.h"
#include "jaxbatch/plan/patch_pack.h"
#include "jaxbatch/plan/plan_policies.h"

namespace jaxbatch {

inline constexpr int64_t kDefaultPadToMultiple = 1;
// Attention's share of a packed batch's time at the demo's 256-token rows,
// float32 on CPU (issue 27's measurement: 34%).
inline constexpr int64_t kDefaultAttentionPercent = 34;

// Options a planner needs are plain counts (required, > 0); options it may
// go without are std::optional (unset = not used; set, > 0).
struct PadToMaxOptions {
  int64_t batch_size = 0;  // required
  int64_t pad_to_multiple = kDefaultPadToMultiple;
  Remainder remainder = kDefaultRemainder;
  int64_t rows_multiple = kDefaultRowsMultiple;
  bool operator==(const PadToMaxOptions&) const = default;
};

// Bucket k holds the lengths in (boundaries[k - 1], boundaries[k]]: the last
// boundary closes the last bucket (a longer example follows too_long), so
// there are len(boundaries) buckets, where tf.data's open-ended last bucket
// makes len(bucket_boundaries) + 1.
struct FixedBucketsOptions {
  std::vector<int64_t> boundaries = {};                // required: strictly increasing, > 0
  std::optional<int64_t> batch_size = std::nullopt;    // rows per batch (or from token_budget)
  std::optional<int64_t> token_budget = std::nullopt;  // elements per batch; batch_size and/or it
  Remainder remainder = kDefaultRemainder;
  TooLong too_long = kDefaultTooLong;
  int64_t rows_multiple = kDefaultRowsMultiple;
  // tf.data's bucket_batch_sizes: batch_sizes[k] rows for bucket k, one per
  // boundary; excludes batch_size and token_budget. Empty: not used.
  std::vector<int64_t> batch_sizes = {};
  // With token_budget and remainder pad, a bucket's rows a batch are the
  // budget's spread evenly (balance.h); false: plans as jaxbatch did before
  // loader state version 4, every batch of the budget's rows. Not a user
  // option: the Loader clears it when it restores an older state.
  bool balance_batches = true;
  bool operator==(const FixedBucketsOptions&) const = default;
};

struct AutoBucketsOptions {
  int64_t max_shapes = 0;  // required
  std::optional<int64_t> token_budget = std::nullopt;
  std::optional<int64_t> batch_size = std::nullopt;  // batch_size and/or token_budget
  int64_t pad_to_multiple = kDefaultPadToMultiple;
  Remainder remainder = kDefaultRemainder;
  int64_t rows_multiple = kDefaultRowsMultiple;
  // false: plans as jaxbatch did before loader state version 3, the last
  // batches' empty rows left empty. Not a user option: the Loader clears it
  // when it restores an older state, so the stream continues as it began.
  bool fill_remainders = true;
  bool balance_batches = true;  // as in FixedBucketsOptions
  bool operator==(const AutoBucketsOptions&) const = default;
};

struct PackOptions {
  int64_t row_length = 0;  // required, unless row_lengths names the features
  // Several features packed jointly, each to its own row length (T5's
  // inputs and targets): an example enters a row only if every feature
  // fits, and example k of a row is segment k in every feature. Excludes
  // row_length (left 0); empty: one feature, the length column, of
  // row_length. Ordered by name, so the options (and their key) do not
  // depend on the order a caller gave them in.
  std::map<std::string, int64_t> row_lengths = {};
  // A few row lengths for the one column (row_length=[96, 256]), strictly
  // increasing: each example packs into rows of the smallest that holds it
  // (pack_lengths.h), and row_length is the largest. Empty: one row length.
  std::vector<int64_t> row_length_list = {};
  int64_t rows_per_batch = 0;  // required, unless token_budget (then left 0)
  // Elements per batch: rows of length L come token_budget / L to a batch
  // (rounded down to rows_multiple), so every batch holds at most
  // token_budget elements; excludes rows_per_batch.
  std::optional<int64_t> token_budget = std::nullopt;
  // Set: the planner chooses at most this many row lengths from all the
  // lengths, row_length the largest (ChoosePackRowLengths); excludes
  // row_length_list. attention_percent weighs attention's cost per token,
  // linear in the row length: its share of a row of row_length's time.
  std::optional<int64_t> max_shapes = std::nullopt;
  int64_t attention_percent = kDefaultAttentionPercent;
  // Unset: the most examples a row can hold, from the lengths (DefaultSegments).
  std::optional<int64_t> max_segments_per_row = std::nullopt;
  PackAlgorithm algorithm = kDefaultPackAlgorithm;
  std::optional<int64_t> lookahead = std::nullopt;  // examples packed together; unset = all
  // Set: stream with at most this many rows open (PackRowsStreaming), in
  // input order; excludes lookahead.
  std::optional<int64_t> open_rows = std::nullopt;
  TooLong too_long = kDefaultTooLong;
  Remainder remainder = kDefaultRemainder;
  int64_t rows_multiple = kDefaultRowsMultiple;
  // With token_budget and remainder pad, rows a batch balanced (balance.h)
  // unless the packing follows the order; false: as before loader state
  // version 4. Not a user option, as in FixedBucketsOptions.
  bool balance_batches = true;
  bool operator==(const PackOptions&) const = default;
};

using PlannerOptions =
    std::variant<PadToMaxOptions, FixedBucketsOptions, AutoBucketsOptions, PackOptions,
                 GraphBudgetOptions, GraphBucketsOptions, PatchPackOptions, AspectBucketsOptions>;

// The planner's name: "PadToMax", "FixedBuckets", "AutoBuckets", "Pack",
// "GraphBudget", "GraphBuckets", "PatchPack" or "AspectBuckets".
const char* PlannerName(const PlannerOptions& options);

// Whether `options` plan graphs (GraphBudget, GraphBuckets).
bool IsGraphPlanner(const PlannerOptions& options);

// Whether `options` plan pieces of examples (BatchPlan::split): Pack with
// too_long="split" or algorithm="concat_then_split", FixedBuckets with
// too_long="split". Their batches carry example_piece, and results per
// example need the pieces joined.
bool YieldsPieces(const PlannerOptions& options);

// Throws InvalidArgumentError, naming the planner, the option and the value
// found, for options that no data could make valid (a count <= 0, an unset
// required option, boundaries out of order, a row count that is not a
// multiple of rows_multiple, lookahead with open_rows). Plan() calls it; a
// caller building options calls it to fail where they are written.
void ValidatePlannerOptions(const PlannerOptions& options);

// Throws the InvalidArgumentError planning would, for the first example (by
// index) that no batch of `options` can hold when the policy is to raise:
// a sequence longer than Pack's row_length or FixedBuckets' last boundary
// (too_long="error"), a graph over a graph planner's budget
// (too_big="error"), the longest example with no row in AutoBuckets'
// token_budget, or a PadToMax batch of it past int64. One pass over the
// lengths (node counts, and `edges` for a graph planner): a Loader calls it
// when it is made, so such data is named before any batch, in every epoch
// and shard alike. With `widths` (grid data), `lengths` are the heights
// (grid_planner.h).
void CheckExamplesFit(std::span<const int64_t> lengths, const PlannerOptions& options,
                      std::span<const int64_t> edges = {}, std::span<const int64_t> widths = {});

// Plans batches over `lengths` (indexed by example id). `order` lists the
// example ids to plan, in the order to consider them (a shuffle, a shard, a
// filter's matches); absent means every example in index order, and an
// empty one plans nothing (order.h). A graph planner reads `lengths`
// as node counts and needs `edges`, the edge counts; a Pack with several
// features (row_lengths) reads `lengths` as its first feature's lengths (by
// name) and `edges` as the other features', feature after feature, n each
// (pack_features.h); the others ignore `edges`. Data with two variable axes
// (images, pair features) passes each example's width in `widths` and its
// height in `lengths`: a grid plan (grid_planner.h); empty `widths` is 1-D
// data. Throws InvalidArgumentError for bad options or a too-long example
// under TooLong::kError.
BatchPlan Plan(std::span<const int64_t> lengths, const PlannerOptions& options,
               PlanOrder order = std::nullopt, std::span<const int64_t> edges = {},
               std::span<const int64_t> widths = {});

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PLANNER_H_
