// Packing several features jointly, each into its own row length: pure
// compute over lengths, no buffers or threads (packer.h packs one).
//
// An example is a vector of lengths, one per feature (T5's inputs and
// targets); a row is a vector of capacities. An example enters a row only
// if every feature fits its own room, so example k of a row is segment k in
// every feature. The algorithms are packer.h's, with room a vector:
//   first fit: the first open row (in opening order) where every feature
//              fits; a segment tree of each feature's largest room prunes
//              the rows that cannot hold it.
//   best fit:  Grain's BestFitPackedBatch: among the open rows where every
//              feature fits, the one with the least room left summed over
//              the features (the most cells used), the earliest opened on
//              ties. Without open_rows the examples are taken longest first
//              (by the sum of their features' lengths), as best-fit
//              decreasing does for one feature.
// With one feature both are exactly PackRows / PackRowsStreaming: the
// tests hold them to it.
#ifndef JAXBATCH_PLAN_FEATURE_PACKER_H_
#define JAXBATCH_PLAN_FEATURE_PACKER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "jaxbatch/plan/packer.h"

namespace jaxbatch {

// Each example's length in each feature, feature-major: feature f of
// example id is lengths[f * num_examples + id]. Every length must be at most
// its feature's capacity (cut them first for too_long="truncate").
struct FeatureLengths {
  std::span<const int64_t> lengths;
  int64_t num_examples = 0;
  std::span<const int64_t> capacities;  // each feature's row length
  int64_t num_features() const { return static_cast<int64_t>(capacities.size()); }
  int64_t at(int64_t feature, int64_t id) const {
    return lengths[static_cast<size_t>(feature * num_examples + id)];
  }
};

// Packs `ids` into rows of at most `max_segments` examples. `open_rows` > 0
// streams with at most that many rows open (PackRowsStreaming's rules);
// else rows stay open for windows of `lookahead` examples (0 = all).
PackedRows PackFeatureRows(const FeatureLengths& features, std::span<const int64_t> ids,
                           int64_t max_segments, PackAlgorithm algorithm, int64_t lookahead,
                           int64_t open_rows);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_FEATURE_PACKER_H_
