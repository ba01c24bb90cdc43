// Views: a dataset over another's examples, read in place.
//
// SelectExamples takes examples by index (in any order, repeats allowed),
// SliceExamples a range, ShardExamples one of `count` contiguous parts, and
// ConcatDatasets lays datasets of the same columns end to end. Each returns
// a Dataset like any other: a Loader, a plan and collation take it
// unchanged. No value is copied: a view's columns are gathered columns
// (RaggedColumn::Select), 16 bytes an example and column, that keep the
// data they read alive; a slice of a column of one buffer costs nothing per
// example. A view of a view reads the original data directly.
//
// A view carries a key (Dataset::view_key) naming what it takes from what,
// which its fingerprints mix in: a loader state or job over one view is
// refused on another even when their lengths or values are equal.
//
// Example:
//   Dataset train = SliceExamples(all, 0, 9000);
//   Dataset both = ConcatDatasets(std::vector<const Dataset*>{&web, &code});
#ifndef JAXBATCH_DATA_VIEW_H_
#define JAXBATCH_DATA_VIEW_H_

#include <cstdint>
#include <span>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch {

// Throws OutOfRangeError naming the position of an index outside
// [0, base.num_examples()). An empty index is a dataset of no examples.
Dataset SelectExamples(const Dataset& base, std::span<const int64_t> index);

// Examples [begin, end); OutOfRangeError unless 0 <= begin <= end <= size.
Dataset SliceExamples(const Dataset& base, int64_t begin, int64_t end);

// Part `index` of `count` (0 <= index < count, else InvalidArgumentError):
// examples [index * n / count, (index + 1) * n / count), so the parts are
// contiguous, cover the data once and differ in size by at most one.
Dataset ShardExamples(const Dataset& base, int64_t index, int64_t count);

// `parts` end to end. They must have the same columns (names in the same
// order, dtypes, inner shapes, kinds, axes) and aligned groups: else
// InvalidArgumentError naming the first part and column that differ.
Dataset ConcatDatasets(std::span<const Dataset* const> parts);

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_VIEW_H_
