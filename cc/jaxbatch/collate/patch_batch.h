// A whole PatchPack batch of a dataset (NaViT): the image column cut into
// patch rows (patch_collate.h), and beside it the columns that mean
// something per image, laid out per segment as Pack lays out a packed
// batch's fixed columns:
//   <fixed column>  [rows, S, *inner]  each segment's image's value (a
//                   label, a caption id); a split image's pieces each carry
//                   it; unused slots hold the column's pad value
// Ragged and other grid columns have no place in a row of patches (a
// caption's tokens, a second image of another size): CheckPatchBatchColumns
// refuses them, naming the column, before any batch.
//
// Example:
//   CheckPatchBatchColumns(dataset, "image", "Loader");
//   std::vector<Array> arrays =
//       CollatePatchBatch(dataset, "image", plan.batch(0), options, /*epoch=*/0, {});
#ifndef JAXBATCH_COLLATE_PATCH_BATCH_H_
#define JAXBATCH_COLLATE_PATCH_BATCH_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/patch_pack.h"

namespace jaxbatch {

// Throws InvalidArgumentError, starting "<who>: ", when `image_column` is
// not a grid column of `dataset`, or another column is ragged or a grid.
void CheckPatchBatchColumns(const Dataset& dataset, std::string_view image_column,
                            std::string_view who);

// Maps an example id of the data to its row in the dataset collated (a
// streaming loader's gathered batch); empty: the same.
using ExampleRow = std::function<int64_t(int64_t example)>;

// Collates `view`, a batch of a PatchPack plan of `o` made in `epoch`, over
// `dataset`. The view's example ids are the data's: drop_percent's kept
// patches and example_index follow them, whatever row `row_of` reads.
// Throws what CheckPatchBatchColumns and CollatePatches throw, and
// OutOfRangeError for an example the dataset does not have.
std::vector<Array> CollatePatchBatch(const Dataset& dataset, std::string_view image_column,
                                     const BatchView& view, const PatchPackOptions& o,
                                     int64_t epoch, const CollateOptions& options,
                                     const ExampleRow& row_of = {});

// Bytes of every array CollatePatchBatch returns for a batch of `shape`.
int64_t PatchBatchBytes(const Dataset& dataset, std::string_view image_column,
                        const BatchShape& shape, const PatchPackOptions& o, bool split);

// Each image's patches a PatchPack batch holds (kept ones under
// drop_percent): what a loader counts as a batch's real elements.
std::vector<int64_t> KeptPatchCounts(std::span<const int64_t> heights,
                                     std::span<const int64_t> widths, const PatchPackOptions& o);

}  // namespace jaxbatch

#endif  // JAXBATCH_COLLATE_PATCH_BATCH_H_
