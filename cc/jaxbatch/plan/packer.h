// Sequence packing: pure compute over lengths, no buffers or threads.
//
// Packs examples into rows of `row_length` elements holding at most
// `max_segments` examples each, to waste as little of each row as possible.
//   first fit:  in order, each example goes to the first open row it fits
//               (a max segment tree over row capacities: O(n log n)).
//   best fit:   best-fit decreasing: longest first, each example goes to the
//               open row with the least room that still fits it (an ordered
//               set keyed by room: O(n log n)).
// Rows stay open for a window of `lookahead` examples (0 = all), then close;
// a smaller window keeps rows close to the input order.
//
// PackRowsStreaming keeps at most `open_rows` rows open across the whole
// stream instead (Grain's bins, but rows never close all at once): examples
// come in input order; each goes to the first open row that fits it (first
// fit, rows in the order they opened) or the open row with the least room
// that fits it (best fit, online: no sort); when none fits and `open_rows`
// are open, the fullest closes. Rows are emitted as they close (a row with
// `max_segments` examples closes at once), the rest at the end in opening
// order.
#ifndef JAXBATCH_PLAN_PACKER_H_
#define JAXBATCH_PLAN_PACKER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace jaxbatch {

// kConcatThenSplit is not a packer of PackRows: Pack plans it by
// concatenating the examples in order and cutting at row ends
// (concat_split.h).
enum class PackAlgorithm { kFirstFit, kBestFit, kConcatThenSplit };

struct PackedRows {
  std::vector<int64_t> row_begin{0};  // row r holds example_ids[row_begin[r], row_begin[r+1])
  std::vector<int64_t> example_ids;
  int64_t num_rows() const { return static_cast<int64_t>(row_begin.size()) - 1; }
};

// Packs the examples `ids` with `lengths[id]` (each <= row_length) into rows.
PackedRows PackRows(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                    int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                    int64_t lookahead);

// Packs `ids` in order with at most `open_rows` (> 0) rows open at once.
PackedRows PackRowsStreaming(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                             int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                             int64_t open_rows);

// The packing planners' choice: PackRowsStreaming with `open_rows` when
// set, else PackRows with `lookahead` (unset: all the items at once).
PackedRows PackRowsWith(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                        int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                        std::optional<int64_t> lookahead, std::optional<int64_t> open_rows);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PACKER_H_
