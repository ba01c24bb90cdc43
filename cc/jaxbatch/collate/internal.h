// What the sequence and graph collators share (not part of the public API).
#ifndef JAXBATCH_COLLATE_INTERNAL_H_
#define JAXBATCH_COLLATE_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"

namespace jaxbatch::collate_internal {

// Fills `count` elements of `item_size` bytes at `out` with `pattern`.
void FillPattern(uint8_t* out, int64_t count, const uint8_t* pattern, size_t item_size, bool zero);

// Copies `rows` rows of example `e` (nothing for zero bytes).
void CopyRows(uint8_t* out, const RaggedColumn& column, int64_t e, int64_t rows);

// One column's pad value encoded in its dtype.
struct PadValue {
  uint8_t bytes[8] = {};
  bool zero = true;
};
PadValue EncodePad(const RaggedColumn& column, const CollateOptions& options);

// Throws OutOfRangeError for an example the dataset does not have.
void CheckExample(const Dataset& dataset, int64_t example, int64_t batch);

// Throws InvalidArgumentError for a negative or too large num_threads.
void CheckNumThreads(const CollateOptions& options);

// Runs fill(i0, i1) over [0, items): in one thread, or when the output is
// large (`bytes` over min_bytes_per_thread per thread) split over up to
// options.num_threads threads. Rethrows a thread's exception.
void FillInParallel(int64_t items, int64_t bytes, const CollateOptions& options,
                    const std::function<void(int64_t, int64_t)>& fill);

}  // namespace jaxbatch::collate_internal

#endif  // JAXBATCH_COLLATE_INTERNAL_H_
