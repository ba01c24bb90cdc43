// Aspect-ratio buckets of a fixed area, for users who resize (the buckets
// of diffusion training scripts: kohya-ss sd-scripts' BucketManager makes,
// for each width W a multiple of the step, the tallest H with H x W <= the
// area, and gives each image the bucket of the nearest aspect ratio).
//
// Every bucket is a resolution (H, W), both multiples of `multiple`, with
// H x W <= `area`: for each width W = multiple, 2 multiple, ... the tallest
// such H, and the transposes, one resolution per ratio W / H (the largest).
// The buckets are those of the given `ratios`, or at most `max_shapes`
// chosen from the data: the set minimising the summed |log(w/h) - log(W/H)|
// of every example to its nearest bucket, exact (dynamic programming over
// the resolutions between the data's least and greatest ratio:
// O(max_shapes x C^2 log n) for C of them). Each example goes to the bucket
// nearest its ratio in log space (compared exactly, in integers; a tie goes
// to the taller bucket) and is to be resized to it: the plan reports that
// target (BatchPlan::resize_to), and each batch holds one bucket's examples
// at exactly its resolution. jaxbatch never resizes: collating an example
// that is not at its target is an InvalidArgumentError naming it
// (CheckResizedTo), and a Loader refuses data not at its buckets
// (CheckAspectExamplesFit).
//
// Example:
//   AspectBucketsOptions o{.area = 256 * 256, .multiple = 64, .max_shapes = 3,
//                          .batch_size = 8};
//   BatchPlan plan = PlanAspectBuckets(heights, widths, ids, o);
//   plan.resize_to;  // h0', w0', h1', w1', ...: each example's target
#ifndef JAXBATCH_PLAN_ASPECT_BUCKETS_H_
#define JAXBATCH_PLAN_ASPECT_BUCKETS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/plan_policies.h"

namespace jaxbatch {

// Kohya's bucket_reso_steps.
inline constexpr int64_t kDefaultAspectMultiple = 64;
// The most widths area / multiple^2 may give: bounds the resolutions (twice
// this) and so the choice's time.
inline constexpr int64_t kMaxAspectWidths = 4096;

struct AspectBucketsOptions {
  int64_t area = 0;  // required: the most cells (pixels) of a bucket, H x W <= area
  int64_t multiple = kDefaultAspectMultiple;
  // Ratios width:height as pairs, flat (4:3 and 1:1 are {4, 3, 1, 1}): the
  // buckets are the resolutions nearest them. Excludes max_shapes.
  std::vector<int64_t> ratios = {};
  // The buckets chosen from the data, at most this many. Excludes ratios.
  std::optional<int64_t> max_shapes = std::nullopt;
  std::optional<int64_t> batch_size = std::nullopt;    // rows per batch, and/or
  std::optional<int64_t> token_budget = std::nullopt;  // cells per batch: budget // (H x W) rows
  Remainder remainder = kDefaultRemainder;
  int64_t rows_multiple = kDefaultRowsMultiple;
  // With token_budget and remainder pad, a bucket's rows balanced
  // (balance.h); not a user option, as in FixedBucketsOptions.
  bool balance_batches = true;
  bool operator==(const AspectBucketsOptions&) const = default;
};

struct Resolution {
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const Resolution&) const = default;
};

// Throws InvalidArgumentError naming the option for options no data could
// make valid.
void ValidateAspectBuckets(const AspectBucketsOptions& o);

// The candidate resolutions of `area` and `multiple`, sorted by W / H
// increasing (see above).
std::vector<Resolution> AspectResolutions(int64_t area, int64_t multiple);

// The index in `sorted` (by W / H increasing, distinct ratios) of the
// resolution nearest height x width's ratio in log space; ties: the lower.
int64_t NearestResolution(std::span<const Resolution> sorted, int64_t height, int64_t width);

// The buckets for the examples `ids` of heights x widths, sorted by ratio:
// the given ratios' resolutions, or the exact choice of at most max_shapes.
std::vector<Resolution> ChooseAspectBuckets(std::span<const int64_t> heights,
                                            std::span<const int64_t> widths,
                                            std::span<const int64_t> ids,
                                            const AspectBucketsOptions& o);

// The summed |log(w/h) - log(W/H)| of the examples `ids` to their nearest
// of `buckets` (sorted by ratio).
double AspectError(std::span<const int64_t> heights, std::span<const int64_t> widths,
                   std::span<const int64_t> ids, std::span<const Resolution> buckets);

// Plans the examples `ids` (in that order): a grid plan whose batches are
// one bucket's examples at its resolution, and resize_to (h, w per example
// id; (0, 0) for one not planned). Validates the options and sizes.
BatchPlan PlanAspectBuckets(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            std::span<const int64_t> ids, const AspectBucketsOptions& o);

// For a Loader: throws InvalidArgumentError for the first example that is
// not at its bucket's resolution (jaxbatch never resizes).
void CheckAspectExamplesFit(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            const AspectBucketsOptions& o);

// Throws InvalidArgumentError, naming `column`, the example, its size and
// its target, unless example `example` of `height` x `width` is at its
// target in `resize_to` (a plan's, h and w per example id).
void CheckResizedTo(std::span<const int64_t> resize_to, int64_t example, int64_t height,
                    int64_t width, std::string_view column);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_ASPECT_BUCKETS_H_
