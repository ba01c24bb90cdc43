// The collator's hot loops: rows of one ragged column of a batch, padded or
// packed, written from the column's examples into the batch's arrays.
//
// A fill is everything the loop reads, by value: held in locals, its fields
// need no reload after each memcpy's stores (as members of the column, the
// view or the collator would: ~16 ns a row on short rows). Each loop is
// instantiated once per column layout (one values buffer and its offsets,
// or a gathered column's per-example starts and lengths), so it has no
// branch on the layout. Not part of the public API: collator.cc builds the
// fills from a BatchView and calls these once per thread's rows.
#ifndef JAXBATCH_COLLATE_FILL_ROWS_H_
#define JAXBATCH_COLLATE_FILL_ROWS_H_

#include <cstddef>
#include <cstdint>

#include "jaxbatch/collate/internal.h"
#include "jaxbatch/data/ragged_column.h"

namespace jaxbatch::collate_internal {

// One padded column's rows: values [rows, cells, *inner], mask, lengths,
// and when asked segment ids and positions (a padded row is a packed row of
// one segment) and example_index.
struct PaddedFill {
  const int64_t* row_begin;  // the view's stored_rows + 1 row starts
  const int64_t* examples;   // the view's flat example ids
  int64_t stored_rows, batch;
  int64_t cells;      // the padded length
  int64_t item_row;   // bytes of one row of the variable axis
  int64_t row_bytes;  // cells * item_row
  int64_t inner;      // elements of one row of the variable axis
  size_t item;
  PadValue pad;
  bool bulk;  // clear values and mask for all rows first (short rows, zero pad)
  bool truncate;
  uint8_t* values;
  uint8_t* mask;
  int32_t* lengths;
  int32_t* ids = nullptr;  // null: no segment ids and positions
  int32_t* positions = nullptr;
  int64_t* index = nullptr;  // null: another pass writes example_index
  // A split plan's span per row's segment (FixedBuckets' pieces; null:
  // whole examples): its first element within its example and its count.
  const int64_t* starts = nullptr;
  const int64_t* piece_lengths = nullptr;
  const RaggedColumn* column;
};

// One packed column's rows: values, segment ids, positions, and each
// segment's length [rows, segments].
struct PackedFill {
  const int64_t* row_begin;
  const int64_t* examples;
  int64_t stored_rows, batch;
  int64_t cells, segments, item_row, inner;
  size_t item;
  PadValue pad;
  bool truncate;
  const int64_t* pieces;  // a split plan's piece per segment; null: whole examples
  // A concat_then_split plan's span per segment (null otherwise): its first
  // element within its example and its element count.
  const int64_t* starts = nullptr;
  const int64_t* piece_lengths = nullptr;
  uint8_t* values;
  int32_t* ids;
  int32_t* positions;
  int32_t* lengths;
  const RaggedColumn* column;
};

// Fill rows [r0, r1). Throw InvalidArgumentError for an example longer
// than its room when the fill does not truncate (a plan made from other
// lengths); the rows written before it are left as they are.
void FillPaddedRows(const PaddedFill& fill, int64_t r0, int64_t r1);
void FillPackedRows(const PackedFill& fill, int64_t r0, int64_t r1);

}  // namespace jaxbatch::collate_internal

#endif  // JAXBATCH_COLLATE_FILL_ROWS_H_
