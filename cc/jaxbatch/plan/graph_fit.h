// Graph budgets from the data: the node and edge budget for a given number
// of graph slots per batch, chosen by planning the graphs.
//
// A bigger budget fills more of each batch's graph slots but pads more
// nodes and edges; a smaller one pads fewer nodes and edges but holds fewer
// graphs a batch (more, emptier steps). The fit maximises the product
//
//   (real nodes + real edges) / (node slots + edge slots)
//     x real graphs / (batches x (graphs - 1)),
//
// the share of node and edge slots that are real times how full of graphs
// the batches are (1 when each holds the graphs - 1 it can), so neither is
// badly wasted. Graph slots themselves cost next to nothing; what a batch
// short of graphs costs is steps, so the second factor counts batches (and
// a GraphBuckets shape with fewer graph slots does not score better for
// it). The fit measures both by planning, not by a
// formula: each candidate budget plans the graphs with the planner it fits
// (its algorithm, open_batches and, for GraphBuckets, max_shapes) in a few
// seeded shuffles, as a shuffling Loader will. Candidates: a grid of
// budgets around the mean graph's sizes times graphs - 1 (scaled by 0.5 to
// 2, the edges at 0.7 to 1.4 of the data's node:edge ratio); then the four
// best are each refined in nodes and edges, apart and together (steps of
// 1/16 of the budget, halved down to `multiple`), at most 512 budgets in
// all: about 150 on molecule sizes. Every budget holds the largest graph
// (nodes - 1 >= its nodes, edges >= its edges) and is rounded up to
// `multiple`.
//
// Example:
//   GraphBudgetOptions budget =
//       FitGraphBudget(node_counts, edge_counts, {}, GraphFitOptions{.graphs = 32, .multiple = 8});
//   BatchPlan plan = PlanGraphBudget(node_counts, edge_counts, ids, budget);
#ifndef JAXBATCH_PLAN_GRAPH_FIT_H_
#define JAXBATCH_PLAN_GRAPH_FIT_H_

#include <cstdint>
#include <span>

#include "jaxbatch/plan/graph_planner.h"
#include "jaxbatch/plan/order.h"

namespace jaxbatch {

inline constexpr int64_t kDefaultFitMultiple = 1;
inline constexpr uint64_t kDefaultFitSeed = 0;
// Graphs planned per candidate budget: small data is planned in several
// shuffles (at most kFitMaxShuffles), large data in one shuffle's first
// kFitGraphs graphs, so a fit costs about the same whatever the data's size.
inline constexpr int64_t kFitGraphs = int64_t{1} << 15;
inline constexpr int64_t kFitMaxShuffles = 8;

struct GraphFitOptions {
  int64_t graphs = 0;  // required, >= 2: graph slots per batch, the padding graph included
  int64_t multiple = kDefaultFitMultiple;  // nodes and edges rounded up to a multiple of it
  uint64_t seed = kDefaultFitSeed;         // of the shuffles the candidates are planned in
};

// What the fitted budget scored: shares over the graphs it was planned on.
struct GraphFitScore {
  double slot_share = 0.0;  // (real nodes + real edges) / (node + edge slots)
  double graph_fill = 0.0;  // real graphs / (batches x (graphs - 1))
  double score = 0.0;       // their product, what the fit maximises
  int64_t candidates = 0;   // budgets planned
};

// The budget fitted to the graphs of node counts `nodes` and edge counts
// `edges`: `planner`'s options (algorithm, open_batches, too_big,
// max_shapes kept) with nodes, edges and graphs filled in. `order` (example
// ids) gives the graphs to plan the candidates on, in that order; absent:
// the fit's own seeded shuffles of all of them. InvalidArgumentError for no
// graphs (an empty order included: nothing to fit to), graphs < 2,
// multiple < 1, an id out of range or listed twice, or counts that do not
// match; `score`, when given, receives what the budget scored.
GraphBudgetOptions FitGraphBudget(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                  PlanOrder order, const GraphFitOptions& fit,
                                  GraphBudgetOptions planner = {}, GraphFitScore* score = nullptr);
GraphBucketsOptions FitGraphBuckets(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                    PlanOrder order, const GraphFitOptions& fit,
                                    GraphBucketsOptions planner, GraphFitScore* score = nullptr);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRAPH_FIT_H_
