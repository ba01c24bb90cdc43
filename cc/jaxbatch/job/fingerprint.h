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
// Example:
//   uint64_t key = DatasetFingerprint(dataset);
#ifndef JAXBATCH_JOB_FINGERPRINT_H_
#define JAXBATCH_JOB_FINGERPRINT_H_

#include <cstdint>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch {

uint64_t DatasetFingerprint(const Dataset& dataset);

}  // namespace jaxbatch

#endif  // JAXBATCH_JOB_FINGERPRINT_H_
