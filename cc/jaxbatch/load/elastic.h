// Elastic resume: a Loader state saved by the shards (i, n) of a multi-host
// job restarts the same global stream on another number of shards.
//
// Every shard plans the same global plan from (seed, epoch) and takes its
// batches of each step from a deal of the plan's batches (schedule.h). So a
// state at step t of an epoch says which batches every shard had yielded:
// those of the deal's first t steps. A start state for shard (j, m) records
// that deal as LoaderState::earlier_deals (n, t); the loader then deals the
// rest of the same global plan to its m shards (DealToShards with earlier
// deals) and carries on with the next epochs as a loader on m shards does.
// Together the m shards yield every batch the n shards had left, once; every
// step gives every shard a batch of one shape. With remainder "drop" each
// deal drops its own uneven tails (batches per shape not a multiple of the
// shard count): those of the remainder's deal on m, not those the n shards
// would have dropped. A mixture's block is an epoch here: its draws are
// planned again from the block's cursor and dealt the same way.
//
// The counters of the start state (batches, examples, stats, a mixture's
// per-source yield) count this shard's batches from the restore on: the
// saved ones counted other shards' batches. The loader enters the resumed
// epoch again, counting its drops (its own deal's included) but not writing
// its quarantined records again. A state saved on n shards and restored on
// n, at the shard it was saved by, is restored as it is.
//
// Example:
//   std::vector<LoaderState> saved;  // each of the n shards' states at one step
//   for (int i = 0; i < n; ++i) saved.push_back(LoaderStateFromJson(ReadFile(Path(i, n))));
//   Loader loader(dataset, options, ElasticStart(saved, j, m));
#ifndef JAXBATCH_LOAD_ELASTIC_H_
#define JAXBATCH_LOAD_ELASTIC_H_

#include <cstdint>
#include <span>

#include "jaxbatch/load/loader.h"

namespace jaxbatch {

// The start state of shard (shard_index, shard_count) that continues the
// global stream the states `saved` reached: one shard's state, or several
// (up to every shard's, each once), which must then agree on the stream and
// on its position. Throws InvalidArgumentError, naming the shards, for no
// state, a state without its StreamKey (made by hand), states of different
// streams (seed, data, planner, shuffle, block size, shard count, mixture
// cursor), a shard given twice, and states saved at different steps (listing
// each position and the shards at it); and for a shard out of range. Whether
// the stream is the loader's own is the Loader's check, as for any state.
LoaderState ElasticStart(std::span<const LoaderState> saved, int64_t shard_index,
                         int64_t shard_count);

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_ELASTIC_H_
