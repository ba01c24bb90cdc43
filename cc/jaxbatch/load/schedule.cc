#include "jaxbatch/load/schedule.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <variant>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/load/index_shuffle.h"

namespace jaxbatch {
namespace {

constexpr uint64_t kOrderSalt = 0x6f72646572ull;  // "order"
constexpr uint64_t kBlockSalt = 0x626c6f636bull;  // "block"
constexpr uint64_t kBatchSalt = 0x6261746368ull;  // "batch"
constexpr uint64_t kStepSalt = 0x73746570ull;     // "step"

uint64_t EpochSeed(uint64_t seed, int64_t epoch, uint64_t salt) {
  return Mix64(seed ^ Mix64(static_cast<uint64_t>(epoch) ^ Mix64(salt)));
}

std::vector<int64_t> OrderExamples(const std::vector<int64_t>& candidates, const ScheduleOptions& o,
                                   int64_t epoch) {
  const auto n = static_cast<uint64_t>(candidates.size());
  std::vector<int64_t> order;
  order.reserve(candidates.size());
  if (o.shuffle == ShuffleMode::kNone) return candidates;
  if (o.shuffle == ShuffleMode::kGlobal) {
    const IndexShuffle perm(n, EpochSeed(o.seed, epoch, kOrderSalt));
    for (uint64_t k = 0; k < n; ++k) order.push_back(candidates[perm(k)]);
    return order;
  }
  const auto block = static_cast<uint64_t>(o.block_size);
  const uint64_t blocks = (n + block - 1) / block;
  const IndexShuffle block_perm(blocks, EpochSeed(o.seed, epoch, kBlockSalt));
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t first = block_perm(b) * block;
    const uint64_t size = std::min(block, n - first);
    const IndexShuffle within(size, EpochSeed(o.seed, epoch, kOrderSalt) ^ first);
    for (uint64_t k = 0; k < size; ++k) order.push_back(candidates[first + within(k)]);
  }
  return order;
}

// A graph planner's batches always have their full shape: a shard's tail
// is evened out with empty batches, as remainder="pad" does.
Remainder PlannerRemainder(const PlannerOptions& planner) {
  return std::visit(
      [](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GraphBudgetOptions> ||
                      std::is_same_v<T, GraphBucketsOptions>) {
          return Remainder::kPad;
        } else {
          return o.remainder;
        }
      },
      planner);
}

int64_t ExamplesIn(const BatchPlan& plan, int64_t b) {
  const auto first = static_cast<size_t>(plan.batch_row_begin[static_cast<size_t>(b)]);
  const auto last = static_cast<size_t>(plan.batch_row_begin[static_cast<size_t>(b) + 1]);
  return plan.row_example_begin[last] - plan.row_example_begin[first];
}

}  // namespace

BatchView EpochSchedule::StepBatch(int64_t t) const {
  if (t < 0 || t >= static_cast<int64_t>(steps.size())) {
    throw OutOfRangeError(
        StrCat("EpochSchedule: step ", t, " out of range; the shard has ", steps.size(), " steps"));
  }
  const int64_t step = steps[static_cast<size_t>(t)];
  if (step >= 0) return plan.batch(step);
  BatchView view;
  view.index = step;
  view.shape = plan.shapes[static_cast<size_t>(-1 - step)];
  view.row_begin = std::span<const int64_t>(plan.row_example_begin).first(1);  // no rows
  view.examples = plan.example_ids;
  return view;
}

const char* ShuffleModeName(ShuffleMode mode) {
  switch (mode) {
    case ShuffleMode::kNone:
      return "none";
    case ShuffleMode::kGlobal:
      return "global";
    case ShuffleMode::kBlock:
      return "block";
  }
  return "?";
}

ShuffleMode ParseShuffleMode(std::string_view name) {
  for (const ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlock}) {
    if (name == ShuffleModeName(mode)) return mode;
  }
  throw InvalidArgumentError(
      StrCat("Loader: shuffle must be 'none', 'global' or 'block', found '", name, "'"));
}

void ValidateScheduleOptions(const ScheduleOptions& o, std::string_view who) {
  if (o.block_size < 1) {
    throw InvalidArgumentError(StrCat(who, ": block_size must be >= 1, found ", o.block_size));
  }
  if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count) {
    throw InvalidArgumentError(StrCat(who, ": shard must satisfy 0 <= index < count, found (",
                                      o.shard_index, ", ", o.shard_count, ")"));
  }
}

EpochSchedule MakeEpochSchedule(std::span<const int64_t> lengths, std::span<const uint8_t> excluded,
                                const ScheduleOptions& o, int64_t epoch,
                                std::span<const int64_t> edges, std::span<const int64_t> widths) {
  ValidateScheduleOptions(o);
  std::vector<int64_t> candidates;
  candidates.reserve(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (excluded.empty() || !excluded[i]) candidates.push_back(static_cast<int64_t>(i));
  }
  // Plan() reads an empty order as "every example": with none left, plan none.
  return DealToShards(candidates.empty() ? Plan({}, o.planner)
                                         : Plan(lengths, o.planner,
                                                OrderExamples(candidates, o, epoch), edges, widths),
                      o, epoch);
}

namespace {

// One deal of batches to `count` shards: each shape's batches in the order
// they are dealt, the first `usable` of them in groups of `count` (a step
// for every shard), and the groups in step order.
struct Deal {
  struct Group {
    int64_t first;  // its first batch: groups are stepped through in plan order
    size_t shape;
    uint64_t begin;  // position of its first batch in by_shape[shape]
  };
  std::vector<std::vector<int64_t>> by_shape;
  std::vector<uint64_t> usable;  // per shape: all, or (remainder drop) whole groups only
  std::vector<Group> groups;     // in step order
  int64_t dropped = 0;           // examples in batches past `usable`
  int64_t padding_batches = 0;   // empty batches that fill the last groups
};

// Groups of `count` same-shape batches: group k of shape s is positions
// [k * count, (k + 1) * count) of its list, the positions past the list's
// end being empty batches. Only the groups are stored, so this is
// O(batches) whatever the shard count.
Deal DealLists(const BatchPlan& plan, std::vector<std::vector<int64_t>> by_shape, uint64_t count,
               bool drop, bool shuffle, uint64_t step_seed) {
  Deal deal;
  deal.by_shape = std::move(by_shape);
  for (size_t s = 0; s < deal.by_shape.size(); ++s) {
    const std::vector<int64_t>& list = deal.by_shape[s];
    const uint64_t tail = list.size() % count;
    uint64_t usable = list.size();
    if (tail != 0 && drop) {
      usable -= tail;
      for (uint64_t k = usable; k < list.size(); ++k) deal.dropped += ExamplesIn(plan, list[k]);
    } else if (tail != 0) {
      deal.padding_batches =
          SaturatingAdd(deal.padding_batches, static_cast<int64_t>(count - tail));
    }
    deal.usable.push_back(usable);
    for (uint64_t k = 0; k < usable; k += count) deal.groups.push_back({list[k], s, k});
  }
  // Steps in plan order (first batch of each group) or shuffled.
  std::sort(deal.groups.begin(), deal.groups.end(),
            [](const Deal::Group& a, const Deal::Group& b) { return a.first < b.first; });
  if (shuffle) {
    const IndexShuffle step_perm(deal.groups.size(), step_seed);
    std::vector<Deal::Group> ordered;
    ordered.reserve(deal.groups.size());
    for (size_t t = 0; t < deal.groups.size(); ++t) ordered.push_back(deal.groups[step_perm(t)]);
    deal.groups = std::move(ordered);
  }
  return deal;
}

// What deal `deal` leaves after its first `steps` steps: each shape's
// batches not in those groups, in the order the deal held them.
std::vector<std::vector<int64_t>> LeftAfter(const Deal& deal, uint64_t count, size_t steps,
                                            int64_t num_batches) {
  std::vector<uint8_t> taken(static_cast<size_t>(num_batches), 0);
  for (size_t t = 0; t < steps; ++t) {
    const Deal::Group& group = deal.groups[t];
    const std::vector<int64_t>& list = deal.by_shape[group.shape];
    const uint64_t end = std::min(group.begin + count, deal.usable[group.shape]);
    for (uint64_t k = group.begin; k < end; ++k) taken[static_cast<size_t>(list[k])] = 1;
  }
  std::vector<std::vector<int64_t>> left(deal.by_shape.size());
  for (size_t s = 0; s < deal.by_shape.size(); ++s) {
    for (const int64_t b : deal.by_shape[s]) {
      if (!taken[static_cast<size_t>(b)]) left[s].push_back(b);
    }
  }
  return left;
}

}  // namespace

EpochSchedule DealToShards(BatchPlan planned, const ScheduleOptions& o, int64_t epoch,
                           std::span<const EarlierDeal> earlier) {
  EpochSchedule schedule;
  schedule.plan = std::move(planned);
  BatchPlan& plan = schedule.plan;
  // Block shuffle keeps the planner's batch order, which follows the
  // shuffled blocks, so a batch reads from the blocks read just before it;
  // a global shuffle shuffles the batches too.
  const bool shuffle = o.shuffle == ShuffleMode::kGlobal;
  const bool drop = PlannerRemainder(o.planner) == Remainder::kDrop;

  // Batches by shape, each list shuffled.
  std::vector<std::vector<int64_t>> by_shape(plan.shapes.size());
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    by_shape[static_cast<size_t>(plan.batch_shape_ids[static_cast<size_t>(b)])].push_back(b);
  }
  for (size_t s = 0; s < by_shape.size(); ++s) {
    std::vector<int64_t>& list = by_shape[s];
    if (!shuffle) continue;
    const IndexShuffle perm(list.size(), EpochSeed(o.seed, epoch, kBatchSalt) ^ s);
    std::vector<int64_t> shuffled(list.size());
    for (size_t k = 0; k < list.size(); ++k) shuffled[k] = list[perm(k)];
    list = std::move(shuffled);
  }
  // Each earlier deal takes its steps' batches; the next deals what is left.
  // Deal d > 0 orders its steps under a seed of its own.
  const uint64_t step_seed = EpochSeed(o.seed, epoch, kStepSalt);
  const auto seed_of = [&](size_t d) { return d == 0 ? step_seed : step_seed + Mix64(d); };
  for (size_t d = 0; d < earlier.size(); ++d) {
    const EarlierDeal& e = earlier[d];
    if (e.shard_count < 1 || e.steps < 0) {
      throw InvalidArgumentError(StrCat("Loader: an earlier deal of epoch ", epoch,
                                        " must have shard_count >= 1 and steps >= 0, found (",
                                        e.shard_count, ", ", e.steps, ")"));
    }
    const auto count = static_cast<uint64_t>(e.shard_count);
    const Deal deal = DealLists(plan, std::move(by_shape), count, drop, shuffle, seed_of(d));
    if (static_cast<uint64_t>(e.steps) > deal.groups.size()) {
      throw InvalidArgumentError(
          StrCat("Loader: the state's epoch ", epoch, " took ", e.steps, " steps on ",
                 e.shard_count, " shards, but what was left of it has ", deal.groups.size(),
                 " steps there; the state is not from this data and planner"));
    }
    by_shape = LeftAfter(deal, count, static_cast<size_t>(e.steps), plan.num_batches());
  }
  schedule.remainder = !earlier.empty();
  const auto count = static_cast<uint64_t>(o.shard_count);
  const Deal deal =
      DealLists(plan, std::move(by_shape), count, drop, shuffle, seed_of(earlier.size()));
  schedule.shard_dropped = deal.dropped;
  schedule.padding_batches = deal.padding_batches;
  schedule.steps.reserve(deal.groups.size());
  for (const Deal::Group& group : deal.groups) {
    const std::vector<int64_t>& list = deal.by_shape[group.shape];
    const uint64_t position = group.begin + static_cast<uint64_t>(o.shard_index);
    schedule.steps.push_back(position < deal.usable[group.shape]
                                 ? list[position]
                                 : EpochSchedule::EmptyStep(static_cast<int64_t>(group.shape)));
  }
  return schedule;
}

}  // namespace jaxbatch
