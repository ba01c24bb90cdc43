// Mixture: named datasets drawn by weight into one stream, and what a Loader
// keeps of one (MixtureStream).
//
// A Loader over a mixture reads the sources laid end to end (ConcatDatasets,
// no copy) and plans the mixed stream in blocks of `block_size` positions:
// block b draws positions [b * block_size, (b + 1) * block_size) from the
// MixtureSchedule (mixture_schedule.h) and plans those examples, in the order
// drawn, with the Loader's planner, so a planner can only reorder examples
// within a block and every window of the stream keeps the mixture's shares
// up to one block. A block is to the Loader what an epoch is to one
// dataset: its steps, its shuffle of the batch order, its shards.
//
// Weights come in stages: stage k's shares hold from position `start` (a
// multiple of block_size) on. A planner whose shapes follow the data
// (AutoBuckets' boundaries, Pack's and PatchPack's default segments, Pack's
// chosen row lengths, GraphBuckets' shapes, AspectBuckets' buckets) is
// planned with the shapes it picks once, from the mixture's first positions
// (and its longest example; AspectBuckets' from every example), so every
// block has the same few shapes.
//
// State: where a block starts is a cursor of a few integers per source
// (MixtureState); a Loader restores one and draws the block again, so the
// stream continues exactly. A state restored into another mixture (weights
// changed, sources added or removed, keyed by name) finishes the block it was
// saved in as it was drawn, then continues with the new mixture, each
// source's draws where they were: nothing repeated or skipped.
//
// Example:
//   auto mixture = std::make_shared<Mixture>(Mixture{
//       .names = {"web", "code"}, .sources = {web, code},
//       .options = {.stages = {{.start = 0, .shares = {0.7, 0.3}}},
//                   .unit = MixtureUnit::kTokens}});
//   Loader loader(mixture, options);  // batches carry source_index
#ifndef JAXBATCH_LOAD_MIXTURE_H_
#define JAXBATCH_LOAD_MIXTURE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/load/mixture_schedule.h"
#include "jaxbatch/load/schedule.h"

namespace jaxbatch {

// Draws planned together: a partly filled last batch per block costs about
// 1% of a block of short examples (50 tokens, rows of 2,048), and changed
// weights wait for the block's end.
inline constexpr int64_t kDefaultMixtureBlock = 16384;
// The positions a planner whose shapes follow the data picks them from (at
// least one block).
inline constexpr int64_t kShapeSamplePositions = 16384;

struct MixtureStage {
  int64_t start = 0;           // a position, a multiple of block_size
  std::vector<double> shares;  // one per source, >= 0, one > 0
};

struct MixtureOptions {
  std::vector<MixtureStage> stages;  // the first starts at 0; starts increase
  MixtureUnit unit = kDefaultMixtureUnit;
  Exhaustion exhaustion = kDefaultExhaustion;
  int64_t block_size = kDefaultMixtureBlock;
};

struct Mixture {
  std::vector<std::string> names;
  std::vector<std::shared_ptr<const Dataset>> sources;
  MixtureOptions options;
};

// Throws InvalidArgumentError, starting "Dataset.mix: ", for no source, a
// missing dataset, names that are empty or repeated, a block size < 1, no
// stage or one whose start is not a multiple of block_size (naming it),
// starts out of order or not from 0, shares of the wrong count, and what
// WeightsFromShares refuses.
void ValidateMixture(const Mixture& mixture);

// The sources laid end to end (ConcatDatasets: no copy), what a Loader over
// the mixture reads. Throws what ValidateMixture throws, and
// InvalidArgumentError naming the sources when their columns differ.
std::shared_ptr<const Dataset> ConcatSources(const std::shared_ptr<const Mixture>& mixture);

// One source in a state: its identity, its cursor where the state's block
// starts, its weight in that block, and what it has yielded.
struct MixtureSourceState {
  std::string name;
  uint64_t fingerprint = 0;  // LayoutFingerprint of the source
  int64_t size = 0;
  MixtureSourceCursor cursor;
  int64_t weight = 0;    // WeightsFromShares' integer
  int64_t examples = 0;  // yielded (a split example counts once)
  int64_t elements = 0;  // real elements yielded (tokens; a graph's nodes)
  friend bool operator==(const MixtureSourceState&, const MixtureSourceState&) = default;
};

struct MixtureState {
  MixtureUnit unit = kDefaultMixtureUnit;
  Exhaustion exhaustion = kDefaultExhaustion;
  int64_t block_size = kDefaultMixtureBlock;
  int64_t position = 0;  // where the state's block starts (its epoch x block_size)
  bool ended = false;
  std::vector<MixtureSourceState> sources;
  friend bool operator==(const MixtureState&, const MixtureState&) = default;
};

// Each source's yield in one batch.
struct SourceTally {
  int64_t examples = 0;
  int64_t elements = 0;
};

// The mixture a Loader reads: its schedule, the cursor where each block
// starts (computed once, kept until the consumer has passed the block),
// and the blocks planned. Thread-safe.
class MixtureStream {
 public:
  // `tokens`: each example's real elements over the concatenated sources
  // (what unit="tokens" weighs and the stats count); `epochs`: for
  // Exhaustion::kRestart, the stream ends after epochs x (all sources'
  // examples) positions (0: never). Throws InvalidArgumentError for what
  // ValidateMixture refuses.
  MixtureStream(std::shared_ptr<const Mixture> mixture, std::vector<int64_t> tokens,
                const ScheduleOptions& order, int64_t epochs);

  const Mixture& mixture() const { return *mixture_; }
  int64_t num_sources() const { return static_cast<int64_t>(begin_.size()) - 1; }
  // The first example of each source in the concatenated data, and the end.
  const std::vector<int64_t>& source_begin() const { return begin_; }
  int64_t SourceOf(int64_t example) const;
  int64_t block_size() const { return mixture_->options.block_size; }

  // The planner blocks are planned with (FreezeShapes of `planner`): set
  // before the first block is planned.
  void set_block_planner(PlannerOptions planner) { block_planner_ = std::move(planner); }
  // The first positions' examples (and the longest), from which a planner
  // whose shapes follow the data picks them.
  std::vector<int64_t> ShapeSample() const;

  // Block `block` planned: its draws (bad records, `excluded`, left out and
  // counted in EpochSchedule::excluded), in order, with the block planner,
  // dealt to shards. No steps once the stream has ended. Throws
  // OutOfRangeError for a block before the loader's first.
  EpochSchedule PlanBlock(int64_t block, std::span<const int64_t> lengths,
                          std::span<const uint8_t> excluded, const ScheduleOptions& options,
                          std::span<const int64_t> edges, std::span<const int64_t> widths) const;

  // The positions block `block` draws, in order (none once the stream has
  // ended): what PlanBlock plans. Throws OutOfRangeError for a block before
  // the loader's first.
  std::vector<MixtureDraw> DrawBlock(int64_t block) const;
  // The whole stream from its start, block by block until a block draws
  // nothing, and the weights of the last block drawn: what a Loader with
  // epochs=1 reads. Throws InvalidArgumentError for an endless stream
  // (Exhaustion::kRestart with epochs 0).
  struct Pass {
    std::vector<MixtureDraw> draws;
    std::vector<int64_t> weights;
  };
  Pass DrawPass() const;

  // The state of the stream at block `block` (whose start is known: the
  // consumer's block), with each source's yield so far.
  MixtureState State(int64_t block, const std::vector<SourceTally>& yielded) const;
  // Starts the stream at the block of `state` (its epoch `block`, `step`
  // batches of it yielded): checks it belongs to this mixture (unit,
  // exhaustion, block size, position; a source of the same name must be the
  // same data) and returns each source's yield so far (0 for a source the
  // state lacks). A state of another mixture continues as the header says;
  // changes() then lists what changed. Throws InvalidArgumentError naming
  // what does not fit, and for a source removed in the middle of a block.
  std::vector<SourceTally> Restore(const MixtureState& state, int64_t block, int64_t step);
  // What Restore changed, one line each ("" lines none).
  const std::vector<std::string>& changes() const { return changes_; }
  // Drops what blocks before `block` kept.
  void Forget(int64_t block) const;

  // Adds `source_index` beside `example_index` (`graph_index`) and numbers
  // each example within its source (-1, padding, stays).
  void TagBatch(std::vector<Array>& arrays, const Allocator& allocator) const;
  // Each source's examples and real elements in `view`, as the Loader's
  // stats count a batch's (ExamplesStarted, RealElements).
  std::vector<SourceTally> Tally(const BatchView& view, std::span<const int64_t> lengths,
                                 std::span<const int64_t> widths, bool graph) const;

 private:
  std::vector<int64_t> WeightsOfBlock(int64_t block) const;
  // The cursor where `block` starts; mu_ held.
  MixtureCursor CursorAt(int64_t block) const;
  // The positions block `block` draws (fewer at the stream's end).
  int64_t BlockCount(const MixtureCursor& start) const;

  std::shared_ptr<const Mixture> mixture_;
  std::vector<int64_t> begin_;
  std::vector<int64_t> tokens_;
  std::vector<uint64_t> fingerprints_;
  std::unique_ptr<MixtureSchedule> schedule_;
  std::optional<PlannerOptions> block_planner_;
  int64_t limit_ = 0;  // positions in all (kRestart with epochs), 0: none
  // A restored state of another mixture: its block is drawn with its weights.
  int64_t override_block_ = -1;
  std::vector<int64_t> override_weights_;
  std::vector<std::string> changes_;
  mutable std::mutex mu_;
  mutable std::map<int64_t, MixtureCursor> starts_;  // block -> where it starts
};

// The options `planner` plans every block with: a planner whose shapes
// follow the data picks them once, for the examples `sample` (AutoBuckets:
// FixedBuckets at the boundaries and rows it chooses; Pack and PatchPack:
// the segments (and Pack's row lengths) they choose, a block that could
// hold more segments a row packing them into more rows; GraphBuckets: the
// shapes it chooses, given as its `shapes`), or for every example
// (AspectBuckets with max_shapes: the buckets it chooses, given as their
// ratios, which the Loader checks every example is at); any other as it
// is. A token budget's rows are never balanced (balance.h), so every block
// has the same shapes.
PlannerOptions FreezeShapes(const PlannerOptions& planner, std::span<const int64_t> lengths,
                            std::span<const int64_t> sample, std::span<const int64_t> edges,
                            std::span<const int64_t> widths);

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_MIXTURE_H_
