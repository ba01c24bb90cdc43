// Re-planning a graph batch that ran out of device memory.
//
// A padded sequence batch shrinks by rows; a graph batch does not have rows
// to drop, so the executor hands the failed batch's graphs back here by name
// and gets them planned into batches of half its budget. Every graph comes
// back in exactly one new batch (none lost, none twice), and a halving that
// cannot shrink the budget (one graph that needs it all) is an error, so
// repeated halving always ends.
//
// Example:
//   // A (nodes=512, edges=1024, graphs=33) batch of graphs {4, 9, 17} ran out of memory:
//   BatchPlan retry = ReplanGraphsHalved(node_counts, edge_counts, {4, 9, 17},
//                                        BatchShape{.rows = 33, .length = 512, .edges = 1024});
//   // retry's batches are (256, 512, 17) at most, and hold graphs 4, 9 and 17.
#ifndef JAXBATCH_PLAN_GRAPH_REPLAN_H_
#define JAXBATCH_PLAN_GRAPH_REPLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/graph_planner.h"

namespace jaxbatch {

// Half of `failed`'s budget (rows = graph slots, length = node slots, edges
// = edge slots) in each dimension, rounded up, but never below what the
// largest of the graphs `ids` needs alone (its nodes plus the padding node,
// its edges, two graph slots). Throws InvalidArgumentError when that is
// `failed`'s budget itself: the batch cannot be made smaller.
GraphBudgetOptions HalvedGraphBudget(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                     const std::vector<int64_t>& ids, const BatchShape& failed);

// The graphs `ids` (in that order) planned with best fit under
// HalvedGraphBudget: one shape, so one new compilation per halving.
BatchPlan ReplanGraphsHalved(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                             const std::vector<int64_t>& ids, const BatchShape& failed);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRAPH_REPLAN_H_
