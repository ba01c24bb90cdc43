// Graph planners: graphs into batches of a fixed node, edge and graph budget.
//
// A graph batch has shape {rows = graph slots, length = node slots,
// edges = edge slots} and is padded the way jraph.pad_with_graphs pads: one
// padding graph holds every padding node and edge, and the slots after it
// are empty graphs. So a batch holds at most nodes - 1 real nodes, edges
// real edges and graphs - 1 real graphs (jraph.dynamically_batch's limits).
//
//   GraphBudgetOptions   every batch exactly (nodes, edges, graphs).
//                        next_fit fills one batch at a time and closes it
//                        when a graph does not fit: jraph.dynamically_batch
//                        batch for batch. first_fit keeps up to
//                        open_batches batches open (graphs in input order);
//                        a graph goes to the first that has room, and when
//                        none has, the fullest closes. best_fit plans
//                        open_batches batches at a time: the longest run of
//                        the next graphs that fits their budget, spread over
//                        them largest first so each fills in nodes, edges
//                        and graphs alike (graph_best_fit.h); within a few
//                        percent of the batch-count bound on molecules.
//   GraphBucketsOptions  the same batches, each then given the smallest of
//                        at most max_shapes shapes within the budget that
//                        holds it. The shapes are chosen once from every
//                        graph (in index order, whatever the order planned),
//                        greedily minimising padded nodes plus edges; the
//                        full budget is always one of them, so no batch is
//                        worse than under GraphBudget, and every epoch and
//                        shard uses the same shapes. With `shapes` given
//                        the shapes are those (and the full budget), not
//                        chosen: what a Loader over a mixture plans every
//                        block with (load/mixture.h), the shapes chosen
//                        once from the mixture's first draws.
// A graph larger than the budget is an InvalidArgumentError naming it, or
// with too_big=kSkip is left out and counted in stats.skipped.
//
// Example:
//   BatchPlan plan = Plan(node_counts, GraphBudgetOptions{.nodes = 512, .edges = 1024,
//                                                         .graphs = 33},
//                         {}, edge_counts);
#ifndef JAXBATCH_PLAN_GRAPH_PLANNER_H_
#define JAXBATCH_PLAN_GRAPH_PLANNER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch {

enum class GraphAlgorithm { kNextFit, kFirstFit, kBestFit };

// What happens to a graph that exceeds the budget.
enum class TooBig {
  kError,  // InvalidArgumentError naming the graph and its sizes (default)
  kSkip,   // left out, counted in stats.skipped
};

inline constexpr GraphAlgorithm kDefaultGraphAlgorithm = GraphAlgorithm::kBestFit;
inline constexpr int64_t kDefaultOpenBatches = 8;
inline constexpr TooBig kDefaultTooBig = TooBig::kError;

struct GraphBudgetOptions {
  int64_t nodes = 0;   // required, >= 1: node slots per batch, padding included
  int64_t edges = 0;   // required, >= 0
  int64_t graphs = 0;  // required, >= 2: graph slots, the padding graph included
  GraphAlgorithm algorithm = kDefaultGraphAlgorithm;
  // first_fit: batches open at once; best_fit: batches planned together
  // (unset: kDefaultOpenBatches); next_fit keeps one and refuses it set.
  std::optional<int64_t> open_batches = std::nullopt;
  TooBig too_big = kDefaultTooBig;
  bool operator==(const GraphBudgetOptions&) const = default;
};

struct GraphBucketsOptions {
  int64_t max_shapes = 0;  // required
  int64_t nodes = 0;       // the largest shape: as GraphBudgetOptions
  int64_t edges = 0;
  int64_t graphs = 0;
  GraphAlgorithm algorithm = kDefaultGraphAlgorithm;
  std::optional<int64_t> open_batches = std::nullopt;
  TooBig too_big = kDefaultTooBig;
  // The shapes, given: (nodes, edges, graphs) of each, flat, each within the
  // budget; the budget is a shape whether listed or not, and at most
  // max_shapes are distinct in all. Empty: chosen from the graphs (above).
  std::vector<int64_t> shapes = {};
  bool operator==(const GraphBucketsOptions&) const = default;
};

// Throw InvalidArgumentError naming the planner, the option and the value.
void ValidateGraphBudget(const GraphBudgetOptions& options);
void ValidateGraphBuckets(const GraphBucketsOptions& options);

// Throw the InvalidArgumentError planning would for the first graph (by
// index) over the budget under too_big=kError (nothing under kSkip), or for
// edge counts that do not match the node counts. One pass, no planning.
void CheckGraphsFit(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                    const GraphBudgetOptions& options);
void CheckGraphsFit(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                    const GraphBucketsOptions& options);

// Plan the graphs `ids` (in that order) of node counts `nodes` and edge
// counts `edges` (indexed by example id). The plan has graph = true.
BatchPlan PlanGraphBudget(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                          const std::vector<int64_t>& ids, const GraphBudgetOptions& options);
BatchPlan PlanGraphBuckets(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                           const std::vector<int64_t>& ids, const GraphBucketsOptions& options);

// The shapes GraphBuckets plans the graphs `ids` with: the full budget
// first, then the given `shapes` or those chosen from the graphs (in index
// order, whatever the order of `ids`).
std::vector<BatchShape> GraphBucketShapes(std::span<const int64_t> nodes,
                                          std::span<const int64_t> edges,
                                          const std::vector<int64_t>& ids,
                                          const GraphBucketsOptions& options);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRAPH_PLANNER_H_
