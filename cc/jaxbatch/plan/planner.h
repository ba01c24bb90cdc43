// Planners: pure, deterministic functions from example lengths to a BatchPlan.
//
// Each planner takes one small options struct, validated once in Plan():
//   PadToMaxOptions     consecutive batches padded to their longest example
//                       (rounded up to a multiple): the usual baseline.
//   FixedBucketsOptions tf.data's bucket_by_sequence_length: an example of
//                       length l goes to the first boundary >= l.
//   AutoBucketsOptions  the boundaries that minimise padded elements with at
//                       most max_shapes shapes (exact, see buckets.h).
//   PackOptions         sequence packing into rows (see packer.h).
// With a token budget T a bucket of length L gets T / L rows, so every batch
// holds at most T elements and short sequences get big batches.
// `rows_multiple` makes every batch's row count a multiple of it (a global
// batch split over N local devices needs N | rows): a token budget's rows
// are rounded down to it, a kept remainder's rows up, and a batch_size or
// rows_per_batch that is not a multiple is refused.
//
// Example:
//   BatchPlan plan = Plan(lengths, AutoBucketsOptions{.max_shapes = 8,
//                                                     .token_budget = 65536});
#ifndef JAXBATCH_PLAN_PLANNER_H_
#define JAXBATCH_PLAN_PLANNER_H_

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/packer.h"

namespace jaxbatch {

// What happens to the last, partial batch of a shape.
enum class Remainder {
  kPad,   // fill with empty rows: no new shape, so no new compile (default)
  kKeep,  // keep it with fewer rows: one more shape
  kDrop,  // leave its examples out, counted in stats.dropped
};

// What happens to an example longer than the largest shape.
enum class TooLong {
  kError,     // InvalidArgumentError naming the example and its length (default)
  kTruncate,  // cut to the shape, counted in stats.truncated
  kSkip,      // left out, counted in stats.skipped
};

inline constexpr int64_t kDefaultPadToMultiple = 1;
inline constexpr int64_t kDefaultRowsMultiple = 1;

struct PadToMaxOptions {
  int64_t batch_size = 0;  // required, > 0
  int64_t pad_to_multiple = kDefaultPadToMultiple;
  Remainder remainder = Remainder::kPad;
  int64_t rows_multiple = kDefaultRowsMultiple;
};

struct FixedBucketsOptions {
  std::vector<int64_t> boundaries;  // strictly increasing, > 0
  int64_t batch_size = 0;           // rows per batch; 0 = from token_budget
  int64_t token_budget = 0;         // elements per batch; 0 = none
  Remainder remainder = Remainder::kPad;
  TooLong too_long = TooLong::kError;
  int64_t rows_multiple = kDefaultRowsMultiple;
};

struct AutoBucketsOptions {
  int64_t max_shapes = 0;  // required, > 0
  int64_t token_budget = 0;
  int64_t batch_size = 0;
  int64_t pad_to_multiple = kDefaultPadToMultiple;
  Remainder remainder = Remainder::kPad;
  int64_t rows_multiple = kDefaultRowsMultiple;
};

struct PackOptions {
  int64_t row_length = 0;            // required, > 0
  int64_t rows_per_batch = 0;        // required, > 0
  int64_t max_segments_per_row = 0;  // 0 = row_length
  PackAlgorithm algorithm = PackAlgorithm::kBestFit;
  int64_t lookahead = 0;  // examples packed together; 0 = all
  // > 0: stream with at most this many rows open (PackRowsStreaming), in
  // input order; excludes lookahead.
  int64_t open_rows = 0;
  TooLong too_long = TooLong::kError;
  Remainder remainder = Remainder::kPad;
  int64_t rows_multiple = kDefaultRowsMultiple;
};

using PlannerOptions =
    std::variant<PadToMaxOptions, FixedBucketsOptions, AutoBucketsOptions, PackOptions>;

// Plans batches over `lengths` (indexed by example id). `order` lists the
// example ids to plan, in the order to consider them (a shuffle or a shard);
// empty means every example in index order. Throws InvalidArgumentError for
// bad options or a too-long example under TooLong::kError.
BatchPlan Plan(std::span<const int64_t> lengths, const PlannerOptions& options,
               std::span<const int64_t> order = {});

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PLANNER_H_
