#include "jaxbatch/plan/concat_split.h"

#include <algorithm>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

constexpr const char* kAlgorithm = "algorithm=\"concat_then_split\"";

// The pieces of a concatenation, row by row: row r holds entries
// [row_begin[r], row_begin[r + 1]) of the parallel vectors.
struct ConcatRows {
  std::vector<int64_t> row_begin{0};
  std::vector<int64_t> example, piece, start, length;
  int64_t num_rows() const { return static_cast<int64_t>(row_begin.size()) - 1; }
  std::span<const int64_t> Row(const std::vector<int64_t>& v, int64_t r) const {
    const auto begin = static_cast<size_t>(row_begin[static_cast<size_t>(r)]);
    const auto end = static_cast<size_t>(row_begin[static_cast<size_t>(r) + 1]);
    return std::span<const int64_t>(v).subspan(begin, end - begin);
  }
};

ConcatRows Concatenate(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                       int64_t row_length, int64_t max_segments) {
  ConcatRows rows;
  int64_t used = 0;
  int64_t segments = 0;
  auto close_row = [&] {
    rows.row_begin.push_back(static_cast<int64_t>(rows.example.size()));
    used = 0;
    segments = 0;
  };
  for (const int64_t id : ids) {
    const int64_t length = lengths[static_cast<size_t>(id)];
    int64_t start = 0;
    int64_t piece = 0;
    do {
      // A full row still takes an empty example while it has a slot.
      if (segments == max_segments || (used == row_length && start < length)) close_row();
      const int64_t take = std::min(length - start, row_length - used);
      rows.example.push_back(id);
      rows.piece.push_back(piece++);
      rows.start.push_back(start);
      rows.length.push_back(take);
      used += take;
      start += take;
      ++segments;
    } while (start < length);
  }
  if (segments > 0) close_row();
  return rows;
}

}  // namespace

void ValidateConcatThenSplit(const PackOptions& o) {
  if (o.lookahead || o.open_rows) {
    const char* option = o.lookahead ? "lookahead" : "open_rows";
    const int64_t value = o.lookahead ? *o.lookahead : *o.open_rows;
    throw InvalidArgumentError(StrCat("Pack: ", option, "=", value, " does not apply to ",
                                      kAlgorithm,
                                      ", which concatenates the examples in order, one row open "
                                      "at a time; leave it unset"));
  }
  if (o.too_long == TooLong::kTruncate || o.too_long == TooLong::kSkip) {
    throw InvalidArgumentError(StrCat("Pack: ", kAlgorithm,
                                      " cuts every example at row ends, so too_long=\"",
                                      o.too_long == TooLong::kTruncate ? "truncate" : "skip",
                                      "\" would never apply; leave too_long unset (or \"split\")"));
  }
  if (o.remainder == Remainder::kDrop) {
    throw InvalidArgumentError(
        StrCat("Pack: ", kAlgorithm,
               " with remainder=\"drop\" would drop the tail of an example whose head is "
               "yielded; use remainder=\"pad\" or \"keep\""));
  }
}

int64_t ConcatSegments(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                       int64_t row_length) {
  std::vector<int64_t> sorted;
  sorted.reserve(ids.size());
  for (const int64_t id : ids) sorted.push_back(lengths[static_cast<size_t>(id)]);
  std::sort(sorted.begin(), sorted.end());
  int64_t whole = 0;
  int64_t used = 0;
  for (const int64_t length : sorted) {
    if (whole == row_length || length > row_length - used) break;
    used += length;
    ++whole;
  }
  int64_t segments = 1;
  while (segments < whole + 2 && segments < row_length) segments *= 2;
  return std::min(segments, row_length);
}

BatchPlan PlanConcatThenSplit(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                              const PackOptions& o) {
  const int64_t segments =
      o.max_segments_per_row.value_or(ConcatSegments(lengths, ids, o.row_length));
  const ConcatRows rows = Concatenate(lengths, ids, o.row_length, segments);
  PlanBuilder builder(/*packed=*/true);
  builder.set_split(true);
  const int64_t num_rows = rows.num_rows();
  for (int64_t first = 0; first < num_rows; first += o.rows_per_batch) {
    const int64_t count = std::min(o.rows_per_batch, num_rows - first);
    // A kept partial batch's rows are rounded up to rows_multiple.
    const int64_t kept = (count + o.rows_multiple - 1) / o.rows_multiple * o.rows_multiple;
    const int64_t batch_rows = o.remainder == Remainder::kKeep ? kept : o.rows_per_batch;
    builder.BeginBatch({.rows = batch_rows, .length = o.row_length, .segments = segments});
    for (int64_t r = first; r < first + count; ++r) {
      builder.AddRow(rows.Row(rows.example, r), rows.Row(rows.piece, r), rows.Row(rows.start, r),
                     rows.Row(rows.length, r));
    }
    builder.EndBatch();
  }
  return std::move(builder).Finish(lengths, static_cast<int64_t>(ids.size()));
}

}  // namespace jaxbatch
