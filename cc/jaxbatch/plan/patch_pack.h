// Patch packing (NaViT, "Patch n' Pack", Dehghani et al. 2023): images of
// any height and width, each cut into patches of patch[0] x patch[1]
// pixels, an image's patches one segment of a row of `row_length` patches.
// The rows are packed from each image's patch count by packer.h's first or
// best fit, as Pack packs sequences, so one row length is one shape: one
// compilation whatever the image sizes. Pure compute over (height, width)
// sizes; collate/patch_collate.h cuts the pixels into the rows.
//
// Policies (jaxbatch never resizes an image):
//   partial_patches  a height or width that is not a multiple of the patch:
//     "error" (default): InvalidArgumentError naming the image, its size and
//       the patch, before any batch;
//     "pad": ceil(h / ph) x ceil(w / pw) patches, the last patch row and
//       column padded with the pad value; `<k>_pixels` counts each patch's
//       real pixels, so a pixel-weighted mean is exact.
//   too_long  an image of more patches than a row:
//     "error" (default); "skip": left out, counted in stats.skipped;
//     "split": cut into runs of whole patch rows, floor(row_length / patch
//       columns) patch rows a piece, each a segment of its own (positions
//       keep the image's patch rows, `example_piece` says which piece); an
//       image wider than a row in patches is refused even then.
//     "truncate" is refused: it would drop pixels with no trace in the image.
//   drop_percent  NaViT's random patch dropping: an image of n patches keeps
//     n - floor(n * drop_percent / 100) of them (at least one). The count
//     depends on n alone, so the plan packs kept counts and is the same
//     whatever the seed; which patches are kept is a function of
//     (drop_seed, epoch, example) (KeptPatchIds), so a restored loader
//     yields the same patches. Refused with too_long="split".
//
// Example:
//   PatchPackOptions o{.patch = {16, 16}, .row_length = 256, .rows_per_batch = 8};
//   BatchPlan plan = PlanPatchPack({224, 512}, {224, 96}, {}, o);
//   // 196 and 192 patches: one row each (best fit), one batch of 8 rows
#ifndef JAXBATCH_PLAN_PATCH_PACK_H_
#define JAXBATCH_PLAN_PATCH_PACK_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/order.h"
#include "jaxbatch/plan/packer.h"
#include "jaxbatch/plan/plan_policies.h"

namespace jaxbatch {

// What happens to an image whose size is not a multiple of the patch.
enum class PartialPatches { kError, kPad };

inline constexpr int64_t kDefaultPatchSide = 16;
inline constexpr PartialPatches kDefaultPartialPatches = PartialPatches::kError;
// Highest drop_percent + 1: an image keeps at least one patch anyway.
inline constexpr int64_t kMaxDropPercent = 100;

struct PatchPackOptions {
  // (patch height, patch width) in pixels, each > 0.
  std::vector<int64_t> patch = {kDefaultPatchSide, kDefaultPatchSide};
  int64_t row_length = 0;      // required: patches per row
  int64_t rows_per_batch = 0;  // required, unless token_budget (then left 0)
  // Patches per batch: token_budget / row_length rows (rounded down to
  // rows_multiple); excludes rows_per_batch.
  std::optional<int64_t> token_budget = std::nullopt;
  // Unset: the most images a row can hold, from the patch counts (DefaultSegments).
  std::optional<int64_t> max_segments_per_row = std::nullopt;
  PackAlgorithm algorithm = kDefaultPackAlgorithm;  // first or best fit
  std::optional<int64_t> lookahead = std::nullopt;  // images packed together; unset = all
  std::optional<int64_t> open_rows = std::nullopt;  // stream; excludes lookahead
  TooLong too_long = kDefaultTooLong;               // error, skip or split
  PartialPatches partial_patches = kDefaultPartialPatches;
  int64_t drop_percent = 0;  // 0 <= drop_percent < 100
  int64_t drop_seed = 0;
  Remainder remainder = kDefaultRemainder;
  int64_t rows_multiple = kDefaultRowsMultiple;
  // As PackOptions' (balance.h); not a user option.
  bool balance_batches = true;
  bool operator==(const PatchPackOptions&) const = default;
};

// An image's patch grid: patch rows x patch columns.
struct PatchGrid {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t count() const { return rows * cols; }
};

// Throws InvalidArgumentError naming the option and the value found for
// options no data could make valid. ValidatePlannerOptions calls it.
void ValidatePatchPack(const PatchPackOptions& o);

// Rows per batch: rows_per_batch, or token_budget's rows.
int64_t PatchRowsPerBatch(const PatchPackOptions& o);

// The patch grid of image `example` of `height` x `width` pixels; throws
// InvalidArgumentError naming the image, its size and the patch when a
// side is not a multiple of the patch under partial_patches="error".
PatchGrid PatchGridOf(int64_t height, int64_t width, const PatchPackOptions& o, int64_t example);

// The patches an image of `patches` keeps under drop_percent.
int64_t KeptPatchCount(int64_t patches, int64_t drop_percent);

// Which of an image's `patches` (raster order over its grid) are kept, in
// increasing order: KeptPatchCount of them, a seeded choice from
// (drop_seed, epoch, example); all of them when drop_percent is 0.
std::vector<int64_t> KeptPatchIds(int64_t patches, const PatchPackOptions& o, int64_t epoch,
                                  int64_t example);

// The patch rows one piece of an image `grid_cols` patches wide holds under
// too_long="split" (0: no whole patch row fits a row).
inline int64_t PatchRowsPerPiece(int64_t grid_cols, int64_t row_length) {
  return grid_cols == 0 ? 0 : row_length / grid_cols;
}

// Throws the InvalidArgumentError planning would for the first image (by
// index) that no row can hold under the policies, or whose size is not a
// multiple of the patch under partial_patches="error". A Loader calls it
// when it is made, so such data is named before any batch.
void CheckPatchesFit(std::span<const int64_t> heights, std::span<const int64_t> widths,
                     const PatchPackOptions& o);

// Plans the images `ids` (order.h: absent, all in order; empty, none) of
// `heights` x `widths` pixels into packed batches of rows_per_batch rows of
// row_length patches.
// A segment is an image, or under too_long="split" a piece of whole patch
// rows of it (explicit starts and lengths in patches, BatchPlan::piece_starts).
// Stats count patches (kept ones under drop_percent).
BatchPlan PlanPatchPack(std::span<const int64_t> heights, std::span<const int64_t> widths,
                        PlanOrder ids, const PatchPackOptions& o);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PATCH_PACK_H_
