// Graphs: a Dataset whose examples are graphs, found by its column names.
//
// A graph data set names its columns the way jraph names a GraphsTuple's
// fields, a pytree leaf's path after a slash:
//   nodes, nodes/<path>   ragged: one row per node     [n_node, *inner]
//   edges, edges/<path>   ragged: one row per edge     [n_edge, *inner]
//   senders, receivers    ragged int32/int64: [n_edge], node ids in [0, n_node)
//   n_node, n_edge        fixed integer scalars (optional; else counted)
//   any other fixed column: one value per graph (globals/<path>, a label)
// A graph's node count is n_node when the column exists, else the length of
// its first node column; its edge count is the length of senders.
//
// Example:
//   const GraphColumns graph = FindGraphColumns(dataset);
//   for (const GraphProblem& p : FindBadGraphs(dataset, graph)) Report(p.example, p.reason);
//   const std::vector<int64_t> nodes = NodeCounts(dataset, graph);
#ifndef JAXBATCH_DATA_GRAPH_H_
#define JAXBATCH_DATA_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch {

// The columns' names: jraph.GraphsTuple's field names.
inline constexpr char kNodesName[] = "nodes";
inline constexpr char kEdgesName[] = "edges";
inline constexpr char kGlobalsName[] = "globals";
inline constexpr char kSendersName[] = "senders";
inline constexpr char kReceiversName[] = "receivers";
inline constexpr char kNodeCountName[] = "n_node";
inline constexpr char kEdgeCountName[] = "n_edge";

struct GraphColumns {
  std::vector<std::string> nodes;      // ragged, one row per node
  std::vector<std::string> edges;      // ragged, one row per edge
  std::vector<std::string> per_graph;  // fixed columns: globals, labels
  std::vector<std::string> globals;    // those of per_graph named globals, globals/...
  bool has_node_count = false;         // an n_node column
  bool has_edge_count = false;         // an n_edge column
};

// Whether `dataset` holds graphs: it has senders and receivers columns.
bool IsGraphDataset(const Dataset& dataset);

// The role of every column. Throws InvalidArgumentError, starting "<who>: ",
// naming the column and what was expected: no senders or receivers, senders
// or receivers not ragged 1-D int32/int64, a ragged column that is neither
// a node nor an edge column, n_node/n_edge not fixed integer scalars, no
// way to count nodes (neither n_node nor a node column), or two columns of
// one field whose paths do not make a tree (nodes/a and nodes/a/b).
GraphColumns FindGraphColumns(const Dataset& dataset, const std::string& who);

// Each graph's node and edge count, as defined above (for a bad graph,
// whatever its columns say; FindBadGraphs tells which those are).
std::vector<int64_t> NodeCounts(const Dataset& dataset, const GraphColumns& graph);
int64_t NodeCount(const Dataset& dataset, const GraphColumns& graph, int64_t example);
std::vector<int64_t> EdgeCounts(const Dataset& dataset);

struct GraphProblem {
  int64_t example = 0;
  std::string reason;  // "graph: senders[3] = 7 is not a node id; the graph has 5 nodes"
};

// Every graph, in index order, whose columns disagree (a node or edge
// column of another length, n_node or n_edge not the arrays' count, a
// negative n_node) or whose senders or receivers name a node it does not
// have, with the first such reason.
std::vector<GraphProblem> FindBadGraphs(const Dataset& dataset, const GraphColumns& graph);

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_GRAPH_H_
