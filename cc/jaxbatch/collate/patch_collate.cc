#include "jaxbatch/collate/patch_collate.h"

#include <algorithm>
#include <cstring>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/collate/internal.h"

namespace jaxbatch {
namespace {

using collate_internal::FillPattern;
using collate_internal::PadValue;

// The column's pad value in its dtype (CollateOptions' per-column value, or the default).
PadValue PatchPad(const PatchColumn& column, const CollateOptions& options) {
  Scalar value = options.default_pad_value;
  for (const auto& [name, v] : options.pad_values) {
    if (name == column.name) value = v;
  }
  PadValue pad;
  EncodeScalar(value, column.dtype, pad.bytes, StrCat("pad value for column '", column.name, "'"));
  pad.zero =
      std::all_of(pad.bytes, pad.bytes + ItemSize(column.dtype), [](uint8_t b) { return b == 0; });
  return pad;
}

int64_t InnerSize(const PatchColumn& column) {
  int64_t n = 1;
  for (int64_t d : column.inner_shape) n = SaturatingMul(n, d);
  return n;
}

// Everything the row loop reads, by value.
struct PatchFill {
  BatchView view;
  const PatchImages* images;
  const PatchPackOptions* o;
  int64_t epoch;
  int64_t cells, segments;
  int64_t ph, pw;
  int64_t pixel_bytes;  // one pixel: inner * item
  int64_t inner;        // elements of one pixel
  size_t item;
  PadValue pad;
  uint8_t* values;
  int32_t* ids;
  int32_t* positions;
  int32_t* pixels;
  int32_t* patches;
  int64_t* index;
  int64_t* piece;  // null unless split
  const std::string* name;
};

// Writes patch (pr, pc) of `image` to `out` (ph * pw pixels); returns its real pixels.
int64_t CutPatch(const PatchFill& f, const PatchImage& image, int64_t pr, int64_t pc,
                 uint8_t* out) {
  const int64_t y0 = pr * f.ph, x0 = pc * f.pw;
  const int64_t rows = std::clamp<int64_t>(image.height - y0, 0, f.ph);
  const int64_t cols = std::clamp<int64_t>(image.width - x0, 0, f.pw);
  const int64_t line = f.pw * f.pixel_bytes;
  for (int64_t py = 0; py < f.ph; ++py) {
    uint8_t* dst = out + py * line;
    int64_t copied = 0;
    if (py < rows && cols > 0) {
      copied = cols * f.pixel_bytes;
      std::memcpy(dst, image.data + ((y0 + py) * image.width + x0) * f.pixel_bytes,
                  static_cast<size_t>(copied));
    }
    FillPattern(dst + copied, (line - copied) / static_cast<int64_t>(f.item), f.pad.bytes, f.item,
                f.pad.zero);
  }
  return rows * cols;
}

[[noreturn]] void ThrowNoRoom(const PatchFill& f, int64_t r, int64_t example, int64_t count,
                              int64_t used, const char* what) {
  throw InvalidArgumentError(StrCat("collate: column '", *f.name, "' batch ", f.view.index, " row ",
                                    r, ": image ", example, " has ", count,
                                    " patches, but the row has room for ", f.cells - used, " more ",
                                    what, "; the plan was made from other image sizes"));
}

void FillRow(const PatchFill& f, int64_t r) {
  const int64_t patch_bytes = f.ph * f.pw * f.pixel_bytes;
  uint8_t* values = f.values + r * f.cells * patch_bytes;
  int32_t* ids = f.ids + r * f.cells;
  int32_t* positions = f.positions + r * f.cells * 2;
  int32_t* pixels = f.pixels + r * f.cells;
  const std::span<const int64_t> examples = f.view.row_examples(r);
  const int64_t first = r < f.view.stored_rows() ? f.view.row_begin[r] : 0;
  if (static_cast<int64_t>(examples.size()) > f.segments) {
    throw InvalidArgumentError(StrCat("collate: column '", *f.name, "' batch ", f.view.index,
                                      " row ", r, " has ", examples.size(),
                                      " segments, more than the shape's ", f.segments));
  }
  int64_t used = 0;
  for (size_t s = 0; s < examples.size(); ++s) {
    const int64_t e = examples[s];
    const PatchImage image = (*f.images)(e);
    const PatchGrid grid = PatchGridOf(image.height, image.width, *f.o, e);
    const auto q = static_cast<size_t>(first) + s;
    // The patches this segment holds, in raster order over the grid.
    std::vector<int64_t> kept;
    if (!f.view.starts.empty()) {
      const int64_t start = f.view.starts[q], count = f.view.piece_lengths[q];
      if (start < 0 || count < 0 || start + count > grid.count()) {
        ThrowNoRoom(f, r, e, grid.count(), used, "(a piece past its image)");
      }
      kept.resize(static_cast<size_t>(count));
      for (int64_t k = 0; k < count; ++k) kept[static_cast<size_t>(k)] = start + k;
    } else {
      kept = KeptPatchIds(grid.count(), *f.o, f.epoch, e);
    }
    const auto count = static_cast<int64_t>(kept.size());
    if (count > f.cells - used) ThrowNoRoom(f, r, e, count, used, "patches");
    for (int64_t k = 0; k < count; ++k) {
      const int64_t p = kept[static_cast<size_t>(k)];
      const int64_t pr = grid.cols == 0 ? 0 : p / grid.cols,
                    pc = grid.cols == 0 ? 0 : p % grid.cols;
      const int64_t slot = used + k;
      pixels[slot] = static_cast<int32_t>(CutPatch(f, image, pr, pc, values + slot * patch_bytes));
      ids[slot] = static_cast<int32_t>(s + 1);
      positions[2 * slot] = static_cast<int32_t>(pr);
      positions[2 * slot + 1] = static_cast<int32_t>(pc);
    }
    used += count;
    f.patches[r * f.segments + static_cast<int64_t>(s)] = static_cast<int32_t>(count);
    f.index[r * f.segments + static_cast<int64_t>(s)] = e;
    if (f.piece != nullptr)
      f.piece[r * f.segments + static_cast<int64_t>(s)] = f.view.piece(static_cast<int64_t>(q));
  }
  FillPattern(values + used * patch_bytes,
              (f.cells - used) * patch_bytes / static_cast<int64_t>(f.item), f.pad.bytes, f.item,
              f.pad.zero);
  std::fill(ids + used, ids + f.cells, 0);
  std::fill(positions + 2 * used, positions + 2 * f.cells, 0);
  std::fill(pixels + used, pixels + f.cells, 0);
  const auto segs = static_cast<int64_t>(examples.size());
  std::fill(f.patches + r * f.segments + segs, f.patches + (r + 1) * f.segments, 0);
  std::fill(f.index + r * f.segments + segs, f.index + (r + 1) * f.segments, -1);
  if (f.piece != nullptr) {
    std::fill(f.piece + r * f.segments + segs, f.piece + (r + 1) * f.segments, -1);
  }
}

std::vector<int64_t> ValueShape(const PatchColumn& column, const BatchShape& shape,
                                const PatchPackOptions& o) {
  return {shape.rows, shape.length,
          SaturatingMul(SaturatingMul(o.patch[0], o.patch[1]), InnerSize(column))};
}

}  // namespace

std::vector<Array> CollatePatches(const PatchImages& images, const PatchColumn& column,
                                  const BatchView& view, const PatchPackOptions& o, int64_t epoch,
                                  const CollateOptions& options) {
  collate_internal::CheckNumThreads(options);
  const BatchShape& shape = view.shape;
  const bool split = !view.starts.empty();
  auto make = [&](std::string_view suffix, DType dtype, std::vector<int64_t> dims) {
    return AllocateArray(StrCat(column.name, suffix), dtype, std::move(dims), options.allocator);
  };
  std::vector<Array> out;
  out.push_back(make("", column.dtype, ValueShape(column, shape, o)));
  out.push_back(make(kSegmentIdsSuffix, DType::kInt32, {shape.rows, shape.length}));
  out.push_back(make(kPositionsSuffix, DType::kInt32, {shape.rows, shape.length, 2}));
  out.push_back(make(kPixelsSuffix, DType::kInt32, {shape.rows, shape.length}));
  out.push_back(make(kPatchesSuffix, DType::kInt32, {shape.rows, shape.segments}));
  out.push_back(AllocateArray(std::string(kExampleIndexName), DType::kInt64,
                              {shape.rows, shape.segments}, options.allocator));
  if (split) {
    out.push_back(AllocateArray(std::string(kExamplePieceName), DType::kInt64,
                                {shape.rows, shape.segments}, options.allocator));
  }
  const size_t item = ItemSize(column.dtype);
  const PatchFill fill{
      .view = view,
      .images = &images,
      .o = &o,
      .epoch = epoch,
      .cells = shape.length,
      .segments = shape.segments,
      .ph = o.patch[0],
      .pw = o.patch[1],
      .pixel_bytes = InnerSize(column) * static_cast<int64_t>(item),
      .inner = InnerSize(column),
      .item = item,
      .pad = PatchPad(column, options),
      .values = out[0].data,
      .ids = reinterpret_cast<int32_t*>(out[1].data),
      .positions = reinterpret_cast<int32_t*>(out[2].data),
      .pixels = reinterpret_cast<int32_t*>(out[3].data),
      .patches = reinterpret_cast<int32_t*>(out[4].data),
      .index = reinterpret_cast<int64_t*>(out[5].data),
      .piece = split ? reinterpret_cast<int64_t*>(out[6].data) : nullptr,
      .name = &column.name,
  };
  collate_internal::FillInParallel(shape.rows, out[0].num_bytes(), options,
                                   [&](int64_t r0, int64_t r1) {
                                     for (int64_t r = r0; r < r1; ++r) FillRow(fill, r);
                                   });
  return out;
}

std::vector<Array> CollatePatchColumn(const RaggedColumn& column, const BatchView& view,
                                      const PatchPackOptions& o, int64_t epoch,
                                      const CollateOptions& options) {
  if (!column.is_grid()) {
    throw InvalidArgumentError(
        StrCat("PatchPack: column '", column.name(),
               "' is not an image column: expected examples of [height, width, *inner] (a grid "
               "column, jb.Dataset.from_arrays(..., axes={'",
               column.name(), "': ('h', 'w')})), found ",
               column.is_fixed() ? "a fixed" : "a ragged", " column"));
  }
  const PatchImages images = [&column](int64_t i) {
    return PatchImage{column.example_data(i), column.height(i), column.width(i)};
  };
  return CollatePatches(images, {column.name(), column.dtype(), column.inner_shape()}, view, o,
                        epoch, options);
}

int64_t PatchCollatedBytes(const PatchColumn& column, const BatchShape& shape,
                           const PatchPackOptions& o, bool split) {
  const int64_t item = static_cast<int64_t>(ItemSize(column.dtype));
  int64_t bytes = item;
  for (int64_t d : ValueShape(column, shape, o)) bytes = SaturatingMul(bytes, d);
  const int64_t cells = SaturatingMul(shape.rows, shape.length);
  const int64_t slots = SaturatingMul(shape.rows, shape.segments);
  // segment ids, positions (2), pixels: 4 int32 a cell; patches, example_index (+ piece) a slot.
  bytes = SaturatingAdd(bytes, SaturatingMul(cells, 16));
  return SaturatingAdd(bytes, SaturatingMul(slots, split ? 20 : 12));
}

}  // namespace jaxbatch
