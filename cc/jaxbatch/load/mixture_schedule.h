// MixtureSchedule: which source, and which of its examples, fills each
// position of a mixed stream. Pure: no data, buffers or threads.
//
// Each source is read in its own order: draw k of a source of n examples is
// example order(k mod n) of its source epoch k / n, shuffled under a key
// derived from the seed and the source's *name* (so adding or removing
// another source changes no source's order). Which source fills a position
// depends on the unit:
//   - kExamples: Grain's integer arithmetic over the global position
//     (grain/_src/python/dataset/transformations/mix.py,
//     _dataset_and_key_of_next_element): among the first p positions source
//     i fills its exact proportional count, within one; O(K) per position.
//   - kTokens: the source whose next example finishes first on its
//     weighted token clock, (tokens_s + length of its next example) /
//     weight_s, ties to the lower index (weighted fair queueing, with every
//     source always backlogged); O(log K) per position. At every position
//     and for every source s with weight share w_s and longest example
//     L_s: -L_s <= tokens_s - w_s * tokens <= w_s * sum_j L_j, so in any
//     window of the stream a source's tokens are within
//     L_s + w_s * sum_j L_j of its share (the tests check this bound).
// Weights are integers, so the schedule is exact and the same on every
// machine; WeightsFromShares makes them from user shares.
//
// State is a cursor: the position, and per source its draws, its token
// clock and whether it is exhausted, and the weights in force. Drawing from
// a cursor is deterministic, so a cursor saved at any position continues
// the same stream; a cursor given other weights (a resume that changes the
// mixture) continues with every source's draws where they were, so no
// source repeats or skips an example.
//
// A source that runs out (draws >= n) follows the exhaustion rule: kRestart
// starts its next source epoch (a new shuffle), kStop ends the stream at
// that position, kDrop leaves it out from then on (the other weights keep
// their ratios) and ends the stream when none is left.
//
// Example:
//   MixtureSchedule schedule({10, 20}, {}, MixtureUnit::kExamples, Exhaustion::kRestart,
//                            {.shuffle = ShuffleMode::kGlobal, .seed = 0}, {"web", "code"});
//   MixtureCursor cursor = schedule.Start(WeightsFromShares({0.7, 0.3}));
//   std::vector<MixtureDraw> draws;
//   schedule.Draw(cursor, 100, &draws);  // positions 0..99
#ifndef JAXBATCH_LOAD_MIXTURE_SCHEDULE_H_
#define JAXBATCH_LOAD_MIXTURE_SCHEDULE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jaxbatch/load/schedule.h"

namespace jaxbatch {

enum class MixtureUnit { kExamples, kTokens };
enum class Exhaustion { kRestart, kStop, kDrop };
inline constexpr MixtureUnit kDefaultMixtureUnit = MixtureUnit::kExamples;
inline constexpr Exhaustion kDefaultExhaustion = Exhaustion::kRestart;

// "examples" / "tokens" and "restart" / "stop" / "drop": the text options,
// states and messages use. Parse* throw InvalidArgumentError naming the
// names they know.
const char* MixtureUnitName(MixtureUnit unit);
MixtureUnit ParseMixtureUnit(std::string_view name);
const char* ExhaustionName(Exhaustion exhaustion);
Exhaustion ParseExhaustion(std::string_view name);

// The smallest positive share becomes kWeightScale, the others in
// proportion (truncated, as Grain's _float_to_int_proportions does with its
// scale of 100), a share of 0 stays 0. Throws InvalidArgumentError naming
// the source (names[i], or its index) for a share that is negative, not
// finite, or so small beside the largest that the ratio passes
// kMaxWeightRatio, and when no share is positive.
inline constexpr int64_t kWeightScale = int64_t{1} << 20;
inline constexpr double kMaxWeightRatio = 1e9;
std::vector<int64_t> WeightsFromShares(std::span<const double> shares,
                                       std::span<const std::string> names = {});

// One source's draw of one position.
struct MixtureDraw {
  int64_t source = 0;
  int64_t example = 0;  // in the source
};

struct MixtureSourceCursor {
  int64_t draws = 0;       // examples drawn from the source, over all its epochs
  int64_t tokens = 0;      // its token clock: tokens drawn since the weights last changed
  bool exhausted = false;  // Exhaustion::kDrop: no longer drawn
  friend bool operator==(const MixtureSourceCursor&, const MixtureSourceCursor&) = default;
};

struct MixtureCursor {
  int64_t position = 0;  // the next position of the mixed stream
  std::vector<MixtureSourceCursor> sources;
  std::vector<int64_t> weights;  // in force from `position` on (WeightsFromShares)
  bool ended = false;            // kStop or kDrop ran out: no position follows
  friend bool operator==(const MixtureCursor&, const MixtureCursor&) = default;
};

// How each source is read: shuffle kNone (index order), kGlobal (a random
// permutation per source epoch) or kBlock (full blocks of `block_size` in
// random order, each shuffled within, then the short last block shuffled
// within: sequential reads).
struct SourceOrder {
  ShuffleMode shuffle = kDefaultShuffle;
  int64_t block_size = kDefaultBlockSize;
  uint64_t seed = 0;
};

class MixtureSchedule {
 public:
  // `sizes`: each source's examples; `tokens`: each source's token count per
  // example (needed for kTokens, else may be empty); `names` key each
  // source's shuffle. Throws InvalidArgumentError for sizes and names that
  // do not match, an empty or repeated name, or a bad block size.
  MixtureSchedule(std::vector<int64_t> sizes, std::vector<std::span<const int64_t>> tokens,
                  MixtureUnit unit, Exhaustion exhaustion, SourceOrder order,
                  std::vector<std::string> names);

  int64_t num_sources() const { return static_cast<int64_t>(sizes_.size()); }
  const std::vector<std::string>& names() const { return names_; }
  MixtureUnit unit() const { return unit_; }
  Exhaustion exhaustion() const { return exhaustion_; }
  int64_t size(int64_t source) const { return sizes_[static_cast<size_t>(source)]; }

  // A cursor at position 0 with `weights` (one per source). Throws what
  // SetWeights throws.
  MixtureCursor Start(std::vector<int64_t> weights) const;

  // A cursor for this schedule's sources continuing another's: at
  // `position`, each source named in `names` (the other schedule's sources,
  // with their cursors `sources`) keeps its draws and exhaustion, a source
  // not named there starts at draw 0, and `weights` are put in force (the
  // token clocks restart). What a resume that adds, removes or reweighs
  // sources starts from.
  MixtureCursor Resume(int64_t position, std::span<const std::string> names,
                       std::span<const MixtureSourceCursor> sources,
                       std::vector<int64_t> weights) const;

  // Puts `weights` in force from the cursor's position on. When they differ
  // from the cursor's, the token clocks restart (new weights apply to the
  // tokens from here on, not to those drawn before). Throws
  // InvalidArgumentError when no source that can still be drawn has a
  // positive weight (kDrop: the stream ends instead), or (kRestart) a source with a positive weight
  // has no examples, naming it.
  void SetWeights(MixtureCursor& cursor, std::vector<int64_t> weights) const;

  // Draws the positions [cursor.position, cursor.position + count), or
  // fewer when the stream ends (cursor.ended), appending each position's
  // (source, example) to `out` and advancing `cursor`.
  void Draw(MixtureCursor& cursor, int64_t count, std::vector<MixtureDraw>* out) const;

  // The example of `source`'s draw `draw` (the per-source order).
  int64_t ExampleOf(int64_t source, int64_t draw) const;

 private:
  MixtureCursor Fresh() const;  // position 0, nothing drawn, no weights
  void DrawExamples(MixtureCursor& cursor, int64_t count, std::vector<MixtureDraw>* out) const;
  void DrawTokens(MixtureCursor& cursor, int64_t count, std::vector<MixtureDraw>* out) const;
  // Whether `source` can be drawn now: a positive weight, not dropped.
  bool Eligible(const MixtureCursor& cursor, int64_t source) const;

  std::vector<int64_t> sizes_;
  std::vector<std::span<const int64_t>> tokens_;
  MixtureUnit unit_;
  Exhaustion exhaustion_;
  SourceOrder order_;
  std::vector<std::string> names_;
  std::vector<uint64_t> keys_;  // each source's shuffle key (seed and name)
};

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_MIXTURE_SCHEDULE_H_
