// EpochSchedule: which batches one process yields in one epoch, in order.
//
// A pure function of (lengths, excluded examples, options, epoch), so every
// process of a multi-host job computes the same global plan and a restored
// loader recomputes exactly the schedule it left:
//   1. order the examples (none, a global IndexShuffle, or shuffled blocks),
//   2. plan them with the planner (shapes stay in its fixed set),
//   3. deal the batches to shards so that at every step all shards get a
//      batch of the same shape (one SPMD program across hosts): batches are
//      grouped by shape, `count` at a time; a shape's uneven tail is padded
//      with empty batches (remainder pad/keep) or dropped (remainder drop);
//      an empty batch is a step that names only its shape, so a shard count
//      far above the number of batches costs no memory,
//   4. shuffle the order of the steps (global shuffle only: with block
//      shuffle they follow the shuffled blocks, so reads stay sequential).
//
// Elastic resume: the first steps of an epoch may have been dealt to another
// number of shards (EarlierDeal, from a state saved there). The batches those
// steps took are left out and the rest of the same global plan is dealt to
// this loader's shards, so together they yield every batch of the epoch once
// (remainder drop: each deal drops its own uneven tails).
#ifndef JAXBATCH_LOAD_SCHEDULE_H_
#define JAXBATCH_LOAD_SCHEDULE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {

enum class ShuffleMode {
  kNone,    // index order
  kGlobal,  // a uniform random permutation of all examples
  kBlock,   // contiguous blocks in random order, shuffled within each block;
            // batches in the order the blocks give them
};

inline constexpr int64_t kDefaultBlockSize = 1024;
inline constexpr ShuffleMode kDefaultShuffle = ShuffleMode::kGlobal;

// "none", "global" or "block": the text states and messages use.
const char* ShuffleModeName(ShuffleMode mode);
// Throws InvalidArgumentError naming the names it knows.
ShuffleMode ParseShuffleMode(std::string_view name);

struct ScheduleOptions {
  PlannerOptions planner;
  ShuffleMode shuffle = kDefaultShuffle;
  int64_t block_size = kDefaultBlockSize;  // >= 1 (used by ShuffleMode::kBlock)
  uint64_t seed = 0;
  int64_t shard_index = 0;
  int64_t shard_count = 1;
};

// `steps` steps of an epoch dealt to `shard_count` shards, from what the
// deals before it left.
struct EarlierDeal {
  int64_t shard_count = 1;
  int64_t steps = 0;
  friend bool operator==(const EarlierDeal&, const EarlierDeal&) = default;
};

struct EpochSchedule {
  BatchPlan plan;  // the global plan
  // This shard's batches in order: a batch index into `plan`, or for an empty
  // batch that evens out shards, EmptyStep(shape id).
  std::vector<int64_t> steps;
  int64_t shard_dropped = 0;  // examples in batches no shard gets (remainder drop)
  // Empty batches (all shards) so every shard has as many steps; saturates
  // at 2^63 - 1 for a shard count near it.
  int64_t padding_batches = 0;
  // A mixture block's draws of bad records, left out of its plan (mixture.h).
  int64_t excluded = 0;
  // Dealt after earlier deals (elastic resume): what is left of an epoch, so
  // no steps here does not mean the stream has ended.
  bool remainder = false;

  static constexpr int64_t EmptyStep(int64_t shape_id) { return -1 - shape_id; }
  // The batch of step `t`: a view into `plan`, with no rows stored for an
  // empty batch. Throws OutOfRangeError for a step past the end.
  BatchView StepBatch(int64_t t) const;
};

// Throws InvalidArgumentError, naming the option, for a bad block size or
// shard (0 <= index < count); messages start with `who`, the call the user
// wrote. The planner has its own ValidatePlannerOptions.
void ValidateScheduleOptions(const ScheduleOptions& options, std::string_view who = "Loader");

// Throws what ValidateScheduleOptions and ValidatePlannerOptions throw, and
// whatever the planner throws for the data. `edges`: each graph's edge count,
// for a graph planner (which reads `lengths` as node counts). `widths`: each
// example's width when the length column is a grid (`lengths` its heights).
EpochSchedule MakeEpochSchedule(std::span<const int64_t> lengths, std::span<const uint8_t> excluded,
                                const ScheduleOptions& options, int64_t epoch,
                                std::span<const int64_t> edges = {},
                                std::span<const int64_t> widths = {});

// Steps 3 and 4 for a plan made already (MakeEpochSchedule's own, or a
// mixture block's): deals `plan`'s batches to shards and orders the steps
// (shuffled under options.shuffle = kGlobal, with `epoch`'s seed). With
// `earlier` deals, deals only what their steps left (each deal's batches in
// the order the one before held them; its steps shuffled anew). Throws
// InvalidArgumentError for an earlier deal of no shards, or of more steps
// than what was left gives.
// Example (3 shards continue where 2 stopped after 5 steps):
//   DealToShards(plan, {.shard_index = 1, .shard_count = 3}, epoch, {{{2, 5}}});
EpochSchedule DealToShards(BatchPlan plan, const ScheduleOptions& options, int64_t epoch,
                           std::span<const EarlierDeal> earlier = {});

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_SCHEDULE_H_
