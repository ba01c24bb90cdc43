#include "jaxbatch/plan/graph_replan.h"

#include <algorithm>
#include <string>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

int64_t HalfUp(int64_t n) { return n - n / 2; }

}  // namespace

GraphBudgetOptions HalvedGraphBudget(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                     const std::vector<int64_t>& ids, const BatchShape& failed) {
  if (ids.empty()) {
    throw InvalidArgumentError(
        "ReplanGraphsHalved: expected the failed batch's graphs, found none");
  }
  int64_t most_nodes = 0;
  int64_t most_edges = 0;
  for (const int64_t id : ids) {
    if (id < 0 || id >= static_cast<int64_t>(nodes.size()) ||
        id >= static_cast<int64_t>(edges.size())) {
      throw InvalidArgumentError("ReplanGraphsHalved: graph " + std::to_string(id) +
                                 " is not one of the " + std::to_string(nodes.size()) + " graphs");
    }
    most_nodes = std::max(most_nodes, nodes[id]);
    most_edges = std::max(most_edges, edges[id]);
  }
  GraphBudgetOptions half{.nodes = std::max(HalfUp(failed.length), most_nodes + 1),
                          .edges = std::max(HalfUp(failed.edges), most_edges),
                          .graphs = std::max<int64_t>(HalfUp(failed.rows), 2)};
  if (half.nodes >= failed.length && half.edges >= failed.edges && half.graphs >= failed.rows) {
    throw InvalidArgumentError(
        "ReplanGraphsHalved: a batch of " + std::to_string(failed.length) + " nodes, " +
        std::to_string(failed.edges) + " edges and " + std::to_string(failed.rows) +
        " graphs ran out of memory and cannot be halved: its largest graph needs " +
        std::to_string(most_nodes + 1) + " node slots and " + std::to_string(most_edges) +
        " edge slots alone");
  }
  ValidateGraphBudget(half);
  return half;
}

BatchPlan ReplanGraphsHalved(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                             const std::vector<int64_t>& ids, const BatchShape& failed) {
  return PlanGraphBudget(nodes, edges, ids, HalvedGraphBudget(nodes, edges, ids, failed));
}

}  // namespace jaxbatch
