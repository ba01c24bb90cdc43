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

EpochSchedule DealToShards(BatchPlan planned, const ScheduleOptions& o, int64_t epoch) {
  EpochSchedule schedule;
  schedule.plan = std::move(planned);
  BatchPlan& plan = schedule.plan;
  // Block shuffle keeps the planner's batch order, which follows the
  // shuffled blocks, so a batch reads from the blocks read just before it;
  // a global shuffle shuffles the batches too.
  const bool shuffle = o.shuffle == ShuffleMode::kGlobal;

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
  // Groups of shard_count same-shape batches: one step for every shard.
  // Group k of shape s is positions [k * count, (k + 1) * count) of its list,
  // the positions past the list's end being empty batches: only the groups
  // are stored, so this is O(batches) whatever the shard count.
  const auto count = static_cast<uint64_t>(o.shard_count);
  const bool drop = PlannerRemainder(o.planner) == Remainder::kDrop;
  struct Group {
    int64_t first;  // its first batch: groups are stepped through in plan order
    size_t shape;
    uint64_t begin;  // position of its first batch in by_shape[shape]
  };
  std::vector<Group> groups;
  for (size_t s = 0; s < by_shape.size(); ++s) {
    std::vector<int64_t>& list = by_shape[s];
    const uint64_t tail = list.size() % count;
    if (tail != 0 && drop) {
      for (size_t k = list.size() - tail; k < list.size(); ++k) {
        schedule.shard_dropped += ExamplesIn(plan, list[k]);
      }
      list.resize(list.size() - tail);
    } else if (tail != 0) {
      schedule.padding_batches =
          SaturatingAdd(schedule.padding_batches, static_cast<int64_t>(count - tail));
    }
    for (uint64_t k = 0; k < list.size(); k += count) groups.push_back({list[k], s, k});
  }
  // Steps in plan order (first batch of each group) or shuffled.
  std::sort(groups.begin(), groups.end(),
            [](const Group& a, const Group& b) { return a.first < b.first; });
  const IndexShuffle step_perm(groups.size(), EpochSeed(o.seed, epoch, kStepSalt));
  schedule.steps.reserve(groups.size());
  for (size_t t = 0; t < groups.size(); ++t) {
    const Group& group = groups[shuffle ? step_perm(t) : t];
    const std::vector<int64_t>& list = by_shape[group.shape];
    const uint64_t position = group.begin + static_cast<uint64_t>(o.shard_index);
    schedule.steps.push_back(position < list.size()
                                 ? list[position]
                                 : EpochSchedule::EmptyStep(static_cast<int64_t>(group.shape)));
  }
  return schedule;
}

}  // namespace jaxbatch
