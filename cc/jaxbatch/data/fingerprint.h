// Fingerprints of a dataset, the one place they are made.
//
// LayoutFingerprint: what decides a loader's stream (the plan only sees
// lengths), so a loader state restores only into a loader over the same
// layout: a Hash64 chained over each column's "name:dtype:[inner shape]:kind"
// and, for a ragged column, its lengths (int64). It reads no values, so a
// streaming source (lengths from its chunks) has one too.
//
// DatasetFingerprint: what a job keys its input on, so a re-run over other
// data is refused instead of mixing two inputs' outputs.
//
// A Hash64 over every column's name, dtype, inner shape, kind (ragged or
// fixed), example lengths and value bytes, in column order. Two datasets
// with equal columns hash alike however their buffers are laid out (a slice
// whose offsets do not start at 0 included); any changed value, length,
// dtype or name changes it. It reads every byte once (memory-mapped files
// included), at several GB/s.
//
// Both mix in a view's key (Dataset::view_key), so two views of equal
// lengths or values that take other examples differ.
//
// Both are stored (loader states, job journals): their values never change.
//
// Example:
//   uint64_t key = DatasetFingerprint(dataset);
//   uint64_t layout = LayoutFingerprint(dataset);
#ifndef JAXBATCH_DATA_FINGERPRINT_H_
#define JAXBATCH_DATA_FINGERPRINT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch {

uint64_t DatasetFingerprint(const Dataset& dataset);

// The lengths of a ragged column, by name (a streaming source's are not in
// its columns).
using LengthsOf = std::function<std::vector<int64_t>(const RaggedColumn& column)>;

uint64_t LayoutFingerprint(const Dataset& dataset);
// The same for columns whose lengths come from elsewhere: `columns` gives
// names, dtypes, shapes and kinds, `lengths_of` each ragged column's lengths.
uint64_t LayoutFingerprint(const Dataset& columns, const LengthsOf& lengths_of);

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_FINGERPRINT_H_
