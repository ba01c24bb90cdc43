#include "jaxbatch/collate/grid_collator.h"

#include <algorithm>
#include <cstring>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"

namespace jaxbatch::collate_internal {
namespace {

// Out of line, so the row loop stays small.
[[noreturn]] __attribute__((noinline, cold)) void ThrowTooBig(const GridFill& f, int64_t example,
                                                              int64_t h, int64_t w) {
  throw InvalidArgumentError(StrCat("collate: column '", f.column->name(), "', example ", example,
                                    " is ", h, " x ", w, " but batch ", f.batch, " has room for ",
                                    f.height, " x ", f.width,
                                    "; the plan was made from other sizes"));
}

// One padding row (or the part of a row below its example): pad values,
// mask false.
void PadCells(const GridFill& f, uint8_t* values, uint8_t* mask, int64_t cells) {
  FillPattern(values, cells * f.inner, f.pad.bytes, f.item, f.pad.zero);
  std::memset(mask, 0, static_cast<size_t>(cells));
}

}  // namespace

void FillGridRows(const GridFill& f, int64_t r0, int64_t r1) {
  const int64_t cells = f.height * f.width;
  for (int64_t r = r0; r < r1; ++r) {
    const bool real = r < f.stored_rows && f.row_begin[r + 1] > f.row_begin[r];
    const int64_t e = real ? f.examples[f.row_begin[r]] : -1;
    uint8_t* values = f.values + r * cells * f.cell_bytes;
    uint8_t* mask = f.mask + r * cells;
    int64_t h = 0, w = 0;
    if (real) {
      h = f.column->height(e);
      w = f.column->width(e);
      if ((h > f.height || w > f.width) && !f.truncate) ThrowTooBig(f, e, h, w);
    }
    // The rows the example's cells hold: all h, but for values read from a
    // truncated mapping, whose offsets may read as zeros (base/mapped_read.h).
    const int64_t stored = w > 0 ? std::min(h, f.column->length(e) / w) : 0;
    const int64_t used_h = std::min(stored, f.height);
    const int64_t used_w = std::min(w, f.width);
    const uint8_t* data = real ? f.column->example_data(e) : nullptr;
    for (int64_t y = 0; y < used_h; ++y) {
      uint8_t* out = values + y * f.width * f.cell_bytes;
      if (used_w * f.cell_bytes > 0) {
        std::memcpy(out, data + y * w * f.cell_bytes, static_cast<size_t>(used_w * f.cell_bytes));
      }
      std::memset(mask + y * f.width, 1, static_cast<size_t>(used_w));
      PadCells(f, out + used_w * f.cell_bytes, mask + y * f.width + used_w, f.width - used_w);
    }
    PadCells(f, values + used_h * f.width * f.cell_bytes, mask + used_h * f.width,
             (f.height - used_h) * f.width);
    f.lengths[2 * r] = static_cast<int32_t>(real ? std::min(h, f.height) : 0);
    f.lengths[2 * r + 1] = static_cast<int32_t>(used_w);
    if (f.index != nullptr) f.index[r] = e;
  }
}

int64_t GridCollatedBytes(const RaggedColumn& column, int64_t rows, int64_t height, int64_t width) {
  const int64_t cells = SaturatingMul(SaturatingMul(rows, height), width);
  int64_t total = SaturatingMul(cells, std::max<int64_t>(column.row_bytes(), 1));
  total = SaturatingAdd(total, cells);                      // mask
  return SaturatingAdd(total, SaturatingMul(rows, 2 * 4));  // lengths
}

}  // namespace jaxbatch::collate_internal
