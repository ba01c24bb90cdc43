#include "jaxbatch/collate/fill_rows.h"

#include <algorithm>
#include <cstring>

#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch::collate_internal {
namespace {

// Out of line, so the loops that check lengths stay small.
[[noreturn]] __attribute__((noinline, cold)) void ThrowTooLong(const RaggedColumn& column,
                                                               int64_t example, int64_t length,
                                                               int64_t batch, int64_t room) {
  throw InvalidArgumentError(StrCat("collate: column '", column.name(), "', example ", example,
                                    " has length ", length, " but batch ", batch, " has room for ",
                                    room, "; the plan was made from other lengths"));
}

// A split plan's piece (its stored span) that its example does not hold.
[[noreturn]] __attribute__((noinline, cold)) void ThrowPieceOutside(const RaggedColumn& column,
                                                                    int64_t example, int64_t length,
                                                                    int64_t batch, int64_t start,
                                                                    int64_t count) {
  throw InvalidArgumentError(StrCat("collate: column '", column.name(), "', example ", example,
                                    " has length ", length, " but batch ", batch,
                                    " holds its elements [", start, ", ", start + count,
                                    "); the plan was made from other lengths"));
}

// A column's example addressing, one type per layout, so the loops have
// no branch on it: a contiguous ragged column (one values buffer and its
// offsets) or a gathered one (each example's first byte and length).
struct ContiguousSource {
  const uint8_t* values;
  const int64_t* offsets;
  int64_t row_bytes;
  // Clamped as RaggedColumn::Reader::length is: offsets read from a
  // truncated mapping may decrease.
  int64_t length(int64_t e) const { return std::max<int64_t>(offsets[e + 1] - offsets[e], 0); }
  const uint8_t* data(int64_t e) const { return values + offsets[e] * row_bytes; }
};
struct GatheredSource {
  const uint8_t* const* starts;
  const int64_t* lengths;
  int64_t length(int64_t e) const { return lengths[e]; }
  const uint8_t* data(int64_t e) const { return starts[e]; }
};

// Rows [r0, r1) of one padded column: values, mask, lengths (and segment
// ids, positions, example_index when asked).
template <typename Source>
void FillPadded(const PaddedFill f, const Source source, int64_t r0, int64_t r1) {
  if (f.bulk) {
    std::memset(f.values + r0 * f.row_bytes, 0, static_cast<size_t>((r1 - r0) * f.row_bytes));
    std::memset(f.mask + r0 * f.cells, 0, static_cast<size_t>((r1 - r0) * f.cells));
  }
  for (int64_t r = r0; r < r1; ++r) {
    const bool real = r < f.stored_rows && f.row_begin[r + 1] > f.row_begin[r];
    const int64_t e = real ? f.examples[f.row_begin[r]] : -1;
    int64_t n = real ? source.length(e) : 0;
    int64_t start = 0;  // A piece is written from its offset within the example.
    if (f.starts != nullptr && real) {
      const int64_t q = f.row_begin[r];
      if (f.starts[q] > n || f.piece_lengths[q] > n - f.starts[q]) {
        ThrowPieceOutside(*f.column, e, n, f.batch, f.starts[q], f.piece_lengths[q]);
      }
      start = f.starts[q];
      n = f.piece_lengths[q];
    }
    if (n > f.cells) {
      if (!f.truncate) ThrowTooLong(*f.column, e, n, f.batch, f.cells);
      n = f.cells;
    }
    uint8_t* row = f.values + r * f.row_bytes;
    uint8_t* row_mask = f.mask + r * f.cells;
    // No copy of 0 bytes: a column of zero-sized rows may have no values.
    if (n * f.item_row > 0) {
      std::memcpy(row, source.data(e) + start * f.item_row, static_cast<size_t>(n * f.item_row));
    }
    if (!f.bulk) {
      FillPattern(row + n * f.item_row, (f.cells - n) * f.inner, f.pad.bytes, f.item, f.pad.zero);
      std::memset(row_mask + n, 0, static_cast<size_t>(f.cells - n));
    }
    std::memset(row_mask, 1, static_cast<size_t>(n));
    if (f.ids != nullptr) {
      int32_t* ids = f.ids + r * f.cells;
      int32_t* pos = f.positions + r * f.cells;
      for (int64_t k = 0; k < n; ++k) {  // One pass writes both.
        ids[k] = 1;
        pos[k] = static_cast<int32_t>(k);
      }
      std::memset(ids + n, 0, static_cast<size_t>(f.cells - n) * sizeof(int32_t));
      std::memset(pos + n, 0, static_cast<size_t>(f.cells - n) * sizeof(int32_t));
    }
    f.lengths[r] = static_cast<int32_t>(n);
    if (f.index != nullptr) f.index[r] = e;  // -1 for a padding row
  }
}

// Calls fn(source) with the ragged column's addressing as one of the
// types above.
template <typename Fn>
void WithSource(const RaggedColumn& column, Fn&& fn) {
  const RaggedColumn::Reader reader = column.reader();
  if (reader.starts != nullptr) {
    fn(GatheredSource{reader.starts, reader.lengths});
  } else {
    fn(ContiguousSource{reader.values, reader.offsets, reader.row_bytes});
  }
}

// Rows [r0, r1) of one packed column: values, segment ids, positions and
// each segment's length.
template <typename Source>
void FillPacked(const PackedFill f, const Source source, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* row = f.values + r * f.cells * f.item_row;
    int32_t* ids = f.ids + r * f.cells;
    int32_t* pos = f.positions + r * f.cells;
    int32_t* lens = f.lengths + r * f.segments;
    int64_t used = 0;
    int32_t segment = 0;
    const int64_t q0 = r < f.stored_rows ? f.row_begin[r] : 0;
    const int64_t q1 = r < f.stored_rows ? f.row_begin[r + 1] : 0;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t e = f.examples[q];
      int64_t n = source.length(e);
      int64_t start = 0;  // A piece is written from its offset within the example.
      if (f.starts != nullptr) {
        if (f.starts[q] > n || f.piece_lengths[q] > n - f.starts[q]) {
          ThrowPieceOutside(*f.column, e, n, f.batch, f.starts[q], f.piece_lengths[q]);
        }
        start = f.starts[q];
        n = f.piece_lengths[q];
      } else if (f.pieces != nullptr) {
        const PieceSpan piece = PieceOf(n, f.pieces[q], f.cells);
        start = piece.start;
        n = piece.length;
      }
      if (n > f.cells - used) {
        if (!f.truncate) ThrowTooLong(*f.column, e, n, f.batch, f.cells - used);
        n = f.cells - used;
      }
      // No copy of 0 bytes: a column of zero-sized rows may have no values.
      if (n * f.item_row > 0) {
        std::memcpy(row + used * f.item_row, source.data(e) + start * f.item_row,
                    static_cast<size_t>(n * f.item_row));
      }
      ++segment;
      int32_t* row_ids = ids + used;
      int32_t* row_pos = pos + used;
      for (int64_t k = 0; k < n; ++k) {  // One pass writes both.
        row_ids[k] = segment;
        row_pos[k] = static_cast<int32_t>(k);
      }
      lens[segment - 1] = static_cast<int32_t>(n);
      used += n;
    }
    FillPattern(row + used * f.item_row, (f.cells - used) * f.inner, f.pad.bytes, f.item,
                f.pad.zero);
    std::fill(ids + used, ids + f.cells, 0);
    std::fill(pos + used, pos + f.cells, 0);
    std::fill(lens + segment, lens + f.segments, 0);
  }
}

}  // namespace

void FillPaddedRows(const PaddedFill& fill, int64_t r0, int64_t r1) {
  WithSource(*fill.column, [&](const auto& source) { FillPadded(fill, source, r0, r1); });
}

void FillPackedRows(const PackedFill& fill, int64_t r0, int64_t r1) {
  WithSource(*fill.column, [&](const auto& source) { FillPacked(fill, source, r0, r1); });
}

}  // namespace jaxbatch::collate_internal
