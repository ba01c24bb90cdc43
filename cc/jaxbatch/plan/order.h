// Which examples a plan covers: every example, or exactly the ids an
// `order` lists (a shuffle, a shard, a filter's matches).
//
// An absent order plans every example in index order. A present one plans
// exactly its ids in its order, so an empty order (a filter that matched
// nothing, a shard with no examples) plans nothing: it is never read as
// "all". An id listed twice is refused: a plan holds each example once
// (its example_index maps each output back to one example), so repeat an
// example by listing it in another plan or epoch. Every planner reads its
// order here, so the rule is the same for all of them.
//
// Example:
//   PlanIds(4, std::nullopt);                  // {0, 1, 2, 3}
//   PlanIds(4, std::vector<int64_t>{});        // {}: nothing
//   PlanIds(4, std::vector<int64_t>{2, 0});    // {2, 0}
//   PlanIds(4, std::vector<int64_t>{2, 2});    // InvalidArgumentError
#ifndef JAXBATCH_PLAN_ORDER_H_
#define JAXBATCH_PLAN_ORDER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace jaxbatch {

// An optional list of example ids: absent means every example.
using PlanOrder = std::optional<std::span<const int64_t>>;

// The ids to plan over `count` examples (see above). Throws OutOfRangeError
// for an id outside [0, count) and InvalidArgumentError for an id listed
// twice, naming its position; `who` starts the message ("plan").
std::vector<int64_t> PlanIds(int64_t count, PlanOrder order, const char* who = "plan");

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_ORDER_H_
