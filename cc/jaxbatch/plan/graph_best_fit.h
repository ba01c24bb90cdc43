// GraphBudget's best fit: graphs planned a few batches at a time, each
// group spread over its batches so that every batch fills in every budget.
//
// Why not plain best fit: when the graph count binds (jraph's usual case,
// molecules under Flax's ogbg budget), a batch must hold graphs - 1 graphs
// whose nodes and edges together stay within the budget. Placing each graph
// as it comes into the fullest batch that holds it fills batches in nodes or
// edges with a few graphs short; a wider window does not help (issue 28:
// 170 batches where the bound is 156).
//
// What this does instead, for the graphs in the order given (a shuffle):
//   1. Take the longest run of the next graphs whose nodes, edges and count
//      fit `batches` batches' budget (the same window as open_batches).
//   2. Spread them over `batches` batches, largest first (by size weighted
//      with how tight each budget is in this run), each into the batch with
//      the most weighted room that holds it: the largest graphs land in
//      different batches and the small ones even the batches out, so each
//      batch fills to about the same, and a random run stays a random mix.
//   3. When some graph fits no batch, shorten the run (the last graphs wait
//      for the next one) until it fits.
//   4. The last run gets as few batches as hold it.
// Each batch keeps its graphs in the given order, and the batches of a run
// come in the order of their first graph, so nothing sorts by size.
//
// Deterministic: the same sizes and order give the same batches.
//
// Example:
//   const std::vector<std::vector<int64_t>> batches =
//       PackGraphRuns(nodes, edges, ids, {.nodes = 576, .edges = 1088, .graphs = 32}, 8);
#ifndef JAXBATCH_PLAN_GRAPH_BEST_FIT_H_
#define JAXBATCH_PLAN_GRAPH_BEST_FIT_H_

#include <cstdint>
#include <span>
#include <vector>

namespace jaxbatch {

// What one batch holds of real nodes, edges and graphs (the budget less the
// padding node and graph).
struct GraphRoom {
  int64_t nodes = 0;
  int64_t edges = 0;
  int64_t graphs = 0;  // >= 1
};

// The graphs `ids` (each within `room` alone) into batches, `batches` (>= 1)
// at a time; every id in exactly one batch.
std::vector<std::vector<int64_t>> PackGraphRuns(std::span<const int64_t> nodes,
                                                std::span<const int64_t> edges,
                                                std::span<const int64_t> ids, const GraphRoom& room,
                                                int64_t batches);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRAPH_BEST_FIT_H_
