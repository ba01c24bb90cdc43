// The policies planners share: what happens to a partial last batch and to
// an example no shape holds, and their defaults. Apart from planner.h so
// that a planner's options in a header of their own (patch_pack.h) can use
// them while planner.h's variant includes that header.
#ifndef JAXBATCH_PLAN_PLAN_POLICIES_H_
#define JAXBATCH_PLAN_PLAN_POLICIES_H_

#include <cstdint>

#include "jaxbatch/plan/packer.h"

namespace jaxbatch {

// What happens to the last, partial batch of a shape.
enum class Remainder {
  kPad,   // fill with empty rows: no new shape, so no new compile (default)
  kKeep,  // keep it with fewer rows: one more shape
  kDrop,  // leave its examples out, counted in stats.dropped
};

// What happens to an example longer than the largest shape.
enum class TooLong {
  kError,     // InvalidArgumentError naming the example and its length (default)
  kTruncate,  // cut to the shape, counted in stats.truncated
  kSkip,      // left out, counted in stats.skipped
  // Pack: cut into pieces of at most row_length, each packed as a segment
  // of its own (BatchPlan::example_pieces); FixedBuckets: into pieces of at
  // most the last boundary, each padded into the bucket its length falls in
  // (BatchPlan::piece_starts); PatchPack: into runs of whole patch rows.
  // Every element is kept.
  kSplit,
};

inline constexpr int64_t kDefaultRowsMultiple = 1;
inline constexpr Remainder kDefaultRemainder = Remainder::kPad;
inline constexpr TooLong kDefaultTooLong = TooLong::kError;
inline constexpr PackAlgorithm kDefaultPackAlgorithm = PackAlgorithm::kBestFit;

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PLAN_POLICIES_H_
