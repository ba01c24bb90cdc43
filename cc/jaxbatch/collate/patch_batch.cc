#include "jaxbatch/collate/patch_batch.h"

#include <string>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/collate/internal.h"
#include "jaxbatch/collate/patch_collate.h"

namespace jaxbatch {
namespace {

using collate_internal::CopyRows;
using collate_internal::EncodePad;
using collate_internal::FillPattern;
using collate_internal::PadValue;

// Fills a fixed column's [rows, S, *inner] array: each segment its image's
// value, the unused slots the pad value.
void FillPerSegment(const RaggedColumn& column, const BatchView& view, const ExampleRow& row_of,
                    const PadValue& pad, int64_t segments, uint8_t* out) {
  const int64_t bytes = column.row_bytes();
  for (int64_t r = 0; r < view.shape.rows; ++r) {
    const std::span<const int64_t> examples = view.row_examples(r);
    uint8_t* row = out + r * segments * bytes;
    const auto n = static_cast<int64_t>(examples.size());
    for (int64_t s = 0; s < n; ++s) {
      CopyRows(row + s * bytes, column, row_of(examples[static_cast<size_t>(s)]), 1);
    }
    FillPattern(row + n * bytes, (segments - n) * column.inner_size(), pad.bytes,
                ItemSize(column.dtype()), pad.zero);
  }
}

}  // namespace

void CheckPatchBatchColumns(const Dataset& dataset, std::string_view image_column,
                            std::string_view who) {
  if (!dataset.has_column(image_column) || !dataset.column(image_column).is_grid()) {
    const bool has = dataset.has_column(image_column);
    throw InvalidArgumentError(StrCat(
        who, ": PatchPack cuts column '", image_column,
        "' into patches, so it must be an image column of examples [height, width, *inner] "
        "(jb.Dataset.from_arrays(..., axes={'",
        image_column, "': ('h', 'w')})); found ",
        !has ? "no such column"
             : (dataset.column(image_column).is_fixed() ? "a fixed-shape column"
                                                        : "a ragged column of one variable axis")));
  }
  for (const RaggedColumn& column : dataset.columns()) {
    if (column.is_fixed() || column.name() == image_column) continue;
    throw InvalidArgumentError(StrCat(
        who, ": PatchPack packs column '", image_column, "' into rows of patches; column '",
        column.name(), "' is ", column.is_grid() ? "another image (grid) column" : "ragged",
        ", which has no place in a row of patches: expected fixed-shape columns beside the image "
        "(one value per image, such as a label, laid out per segment [rows, segments, ...]); "
        "leave it out of the dataset (columns=[...] names the columns a Loader reads from a "
        "file)"));
  }
}

std::vector<Array> CollatePatchBatch(const Dataset& dataset, std::string_view image_column,
                                     const BatchView& view, const PatchPackOptions& o,
                                     int64_t epoch, const CollateOptions& options,
                                     const ExampleRow& row_of) {
  CheckPatchBatchColumns(dataset, image_column, "collate");
  const ExampleRow row = row_of ? row_of : [](int64_t e) { return e; };
  const auto count = static_cast<uint64_t>(dataset.num_examples());
  for (int64_t e : view.all_examples()) {
    if (static_cast<uint64_t>(row(e)) >= count) {
      collate_internal::CheckExample(dataset, row(e), view.index);
    }
  }
  const RaggedColumn& image = dataset.column(image_column);
  const PatchImages images = [&](int64_t e) {
    const int64_t i = row(e);
    return PatchImage{image.example_data(i), image.height(i), image.width(i)};
  };
  std::vector<Array> out = CollatePatches(
      images, {image.name(), image.dtype(), image.inner_shape()}, view, o, epoch, options);
  for (const RaggedColumn& column : dataset.columns()) {
    if (!column.is_fixed()) continue;
    std::vector<int64_t> shape = {view.shape.rows, view.shape.segments};
    shape.insert(shape.end(), column.inner_shape().begin(), column.inner_shape().end());
    Array values =
        AllocateArray(column.name(), column.dtype(), std::move(shape), options.allocator);
    FillPerSegment(column, view, row, EncodePad(column, options), view.shape.segments, values.data);
    out.push_back(std::move(values));
  }
  return out;
}

int64_t PatchBatchBytes(const Dataset& dataset, std::string_view image_column,
                        const BatchShape& shape, const PatchPackOptions& o, bool split) {
  const RaggedColumn& image = dataset.column(image_column);
  int64_t bytes =
      PatchCollatedBytes({image.name(), image.dtype(), image.inner_shape()}, shape, o, split);
  for (const RaggedColumn& column : dataset.columns()) {
    if (!column.is_fixed()) continue;
    const int64_t slots = SaturatingMul(shape.rows, shape.segments);
    bytes = SaturatingAdd(bytes, SaturatingMul(slots, column.row_bytes()));
  }
  return bytes;
}

std::vector<int64_t> KeptPatchCounts(std::span<const int64_t> heights,
                                     std::span<const int64_t> widths, const PatchPackOptions& o) {
  std::vector<int64_t> kept(heights.size(), 0);
  for (size_t i = 0; i < heights.size(); ++i) {
    const PatchGrid grid = PatchGridOf(heights[i], widths[i], o, static_cast<int64_t>(i));
    kept[i] = KeptPatchCount(grid.count(), o.drop_percent);
  }
  return kept;
}

}  // namespace jaxbatch
