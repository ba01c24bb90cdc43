#include "jaxbatch/job/work_units.h"

#include <cstddef>
#include <span>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// `from[first, last)`, each value less `base`.
std::vector<int64_t> Rebased(const std::vector<int64_t>& from, int64_t first, int64_t last,
                             int64_t base) {
  std::vector<int64_t> out(from.begin() + first, from.begin() + last);
  for (int64_t& v : out) v -= base;
  return out;
}

// `from[first, last)`, or nothing when `from` is empty (a vector parallel
// to example_ids that this plan does not have).
std::vector<int64_t> Parallel(const std::vector<int64_t>& from, int64_t first, int64_t last) {
  if (from.empty()) return {};
  return {from.begin() + first, from.begin() + last};
}

}  // namespace

std::vector<int64_t> CutIntoUnits(const BatchPlan& plan, int64_t examples_per_unit) {
  if (examples_per_unit < 1) {
    throw InvalidArgumentError(
        StrCat("work units: examples per unit must be >= 1, found ", examples_per_unit));
  }
  std::vector<int64_t> bounds{0};
  int64_t examples = 0;
  const int64_t batches = plan.num_batches();
  for (int64_t b = 0; b < batches; ++b) {
    examples += ExamplesStarted(plan.batch(b));
    if (examples >= examples_per_unit || b + 1 == batches) {
      bounds.push_back(b + 1);
      examples = 0;
    }
  }
  return bounds;
}

BatchPlan SliceBatches(const BatchPlan& plan, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > plan.num_batches()) {
    throw OutOfRangeError(StrCat("work units: batches [", begin, ", ", end,
                                 ") are not a range of the plan's ", plan.num_batches()));
  }
  BatchPlan slice;
  slice.packed = plan.packed;
  slice.graph = plan.graph;
  slice.grid = plan.grid;
  slice.allow_truncate = plan.allow_truncate;
  slice.split = plan.split;
  slice.length_column = plan.length_column;
  slice.feature_names = plan.feature_names;
  slice.feature_row_lengths = plan.feature_row_lengths;
  slice.shapes = plan.shapes;
  slice.resize_to = plan.resize_to;
  slice.batch_shape_ids.assign(plan.batch_shape_ids.begin() + begin,
                               plan.batch_shape_ids.begin() + end);
  const int64_t first_row = plan.batch_row_begin[static_cast<size_t>(begin)];
  const int64_t last_row = plan.batch_row_begin[static_cast<size_t>(end)];
  slice.batch_row_begin = Rebased(plan.batch_row_begin, begin, end + 1, first_row);
  const int64_t first = plan.row_example_begin[static_cast<size_t>(first_row)];
  const int64_t last = plan.row_example_begin[static_cast<size_t>(last_row)];
  slice.row_example_begin = Rebased(plan.row_example_begin, first_row, last_row + 1, first);
  slice.example_ids = Parallel(plan.example_ids, first, last);
  slice.example_pieces = Parallel(plan.example_pieces, first, last);
  slice.piece_starts = Parallel(plan.piece_starts, first, last);
  slice.piece_lengths = Parallel(plan.piece_lengths, first, last);
  slice.stats.batches = end - begin;
  slice.stats.shapes = static_cast<int64_t>(plan.shapes.size());
  for (int64_t b = 0; b < slice.num_batches(); ++b) {
    slice.stats.examples += ExamplesStarted(slice.batch(b));
  }
  return slice;
}

}  // namespace jaxbatch
