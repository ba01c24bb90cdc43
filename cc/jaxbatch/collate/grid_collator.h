// The grid collator's loop: rows of one grid column (examples [h, w, *inner])
// padded bottom and right into a batch of [rows, H, W, *inner].
//
// A grid batch pads every example to H x W cells; a grid column tied to a 1-D
// length column (a pair feature [L, L] beside its tokens) is padded to L x L
// in a 1-D batch of length L. Each row writes:
//   <name>          [rows, H, W, *inner]  cells, padding set to the pad value
//   <name>_mask     [rows, H, W]          bool, true on real cells
//   <name>_lengths  [rows, 2]             int32 (h, w); (0, 0) for padding
// Not part of the public API: collator.cc builds a GridFill for each grid
// column and calls FillGridRows once per thread's rows.
#ifndef JAXBATCH_COLLATE_GRID_COLLATOR_H_
#define JAXBATCH_COLLATE_GRID_COLLATOR_H_

#include <cstddef>
#include <cstdint>

#include "jaxbatch/collate/internal.h"
#include "jaxbatch/data/ragged_column.h"

namespace jaxbatch::collate_internal {

struct GridFill {
  const int64_t* row_begin;  // the view's stored_rows + 1 row starts
  const int64_t* examples;   // the view's flat example ids
  int64_t stored_rows, batch;
  int64_t height, width;  // the padded H x W
  int64_t cell_bytes;     // bytes of one cell (inner_shape)
  int64_t inner;          // elements of one cell
  size_t item;
  PadValue pad;
  bool truncate;  // cut an example larger than H x W (else an error)
  uint8_t* values;
  uint8_t* mask;
  int32_t* lengths;
  int64_t* index = nullptr;  // null: another pass writes example_index
  const RaggedColumn* column;
};

// Fills rows [r0, r1). Throws InvalidArgumentError naming the column, the
// example, the batch and both sizes for an example larger than H x W when
// the fill does not truncate (a plan made from other sizes).
void FillGridRows(const GridFill& fill, int64_t r0, int64_t r1);

// Bytes of a grid column's three arrays in a batch of rows x H x W.
int64_t GridCollatedBytes(const RaggedColumn& column, int64_t rows, int64_t height, int64_t width);

}  // namespace jaxbatch::collate_internal

#endif  // JAXBATCH_COLLATE_GRID_COLLATOR_H_
