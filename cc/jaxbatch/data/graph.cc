#include "jaxbatch/data/graph.h"

#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

bool IsIn(std::string_view name, std::string_view field) {
  return name == field || (name.size() > field.size() && name.substr(0, field.size()) == field &&
                           name[field.size()] == '/');
}

bool IsInteger(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

// Element `i` of an integer buffer, saturated to int64.
int64_t ReadInteger(const uint8_t* data, DType dtype, int64_t i) {
  auto read = [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, data + i * static_cast<int64_t>(sizeof(v)), sizeof(v));
    return v;
  };
  switch (dtype) {
    case DType::kInt8:
      return read(int8_t{});
    case DType::kInt16:
      return read(int16_t{});
    case DType::kInt32:
      return read(int32_t{});
    case DType::kInt64:
      return read(int64_t{});
    case DType::kUInt8:
      return read(uint8_t{});
    case DType::kUInt16:
      return read(uint16_t{});
    case DType::kUInt32:
      return read(uint32_t{});
    case DType::kUInt64: {
      const uint64_t v = read(uint64_t{});
      return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? std::numeric_limits<int64_t>::max()
                 : static_cast<int64_t>(v);
    }
    default:
      return 0;
  }
}

void RequireCount(const Dataset& dataset, const char* name, const std::string& who) {
  const RaggedColumn& c = dataset.column(name);
  if (!c.is_fixed() || !c.inner_shape().empty() || !IsInteger(c.dtype())) {
    throw InvalidArgumentError(StrCat(
        who, ": column '", name, "' must hold one integer per graph, found ", DTypeName(c.dtype()),
        c.is_fixed() ? " fixed" : " ragged", " with inner shape of rank ", c.inner_shape().size()));
  }
}

int64_t CountOf(const RaggedColumn& column, int64_t e) {
  return ReadInteger(column.example_data(e), column.dtype(), 0);
}

// A field's column names are its pytree's leaf paths, so they must make a
// tree: no name may be a leaf where another needs a subtree ("nodes/a" and
// "nodes/a/b", or "nodes" and "nodes/x"). Otherwise one leaf is lost when
// the columns are made a GraphsTuple again.
void RequireTree(const std::vector<std::string>& names, const char* field, const std::string& who) {
  const std::unordered_set<std::string_view> leaves(names.begin(), names.end());
  for (const std::string& name : names) {
    for (size_t slash = name.find('/'); slash != std::string::npos;
         slash = name.find('/', slash + 1)) {
      const auto above = leaves.find(std::string_view(name).substr(0, slash));
      if (above == leaves.end()) continue;
      throw InvalidArgumentError(
          StrCat(who, ": columns '", *above, "' and '", name, "' cannot both be ", field,
                 " columns: a column's name is its leaf's path in the ", field, " pytree, and '",
                 *above, "' is a leaf where '", name, "' needs a subtree; rename one"));
    }
  }
}

}  // namespace

bool IsGraphDataset(const Dataset& dataset) {
  return dataset.has_column(kSendersName) && dataset.has_column(kReceiversName);
}

GraphColumns FindGraphColumns(const Dataset& dataset, const std::string& who) {
  for (const char* name : {kSendersName, kReceiversName}) {
    if (!dataset.has_column(name)) {
      throw InvalidArgumentError(
          StrCat(who, ": graph planners need graphs: a '", name,
                 "' column (and nodes/..., edges/...), as Dataset.from_graphs makes; the data has ",
                 dataset.columns().size(), " other columns"));
    }
    const RaggedColumn& c = dataset.column(name);
    if (c.is_fixed() || !c.inner_shape().empty() ||
        (c.dtype() != DType::kInt32 && c.dtype() != DType::kInt64)) {
      throw InvalidArgumentError(StrCat(
          who, ": column '", name, "' must be ragged int32 or int64 node ids, one per edge; ",
          "found ", c.is_fixed() ? "a fixed" : "a ragged", " ", DTypeName(c.dtype()),
          " column of inner rank ", c.inner_shape().size()));
    }
  }
  GraphColumns graph;
  for (const RaggedColumn& c : dataset.columns()) {
    const std::string& name = c.name();
    if (name == kSendersName || name == kReceiversName) continue;
    if (name == kNodeCountName || name == kEdgeCountName) {
      RequireCount(dataset, name == kNodeCountName ? kNodeCountName : kEdgeCountName, who);
      (name == kNodeCountName ? graph.has_node_count : graph.has_edge_count) = true;
    } else if (IsIn(name, kNodesName) && !c.is_fixed()) {
      graph.nodes.push_back(name);
    } else if (IsIn(name, kEdgesName) && !c.is_fixed()) {
      graph.edges.push_back(name);
    } else if (c.is_fixed()) {
      graph.per_graph.push_back(name);
      if (IsIn(name, kGlobalsName)) graph.globals.push_back(name);
    } else {
      throw InvalidArgumentError(
          StrCat(who, ": column '", name,
                 "' is ragged but is neither a node column (nodes, nodes/...) nor an edge column "
                 "(edges, edges/...); a value per graph must be fixed-shape"));
    }
  }
  RequireTree(graph.nodes, kNodesName, who);
  RequireTree(graph.edges, kEdgesName, who);
  RequireTree(graph.globals, kGlobalsName, who);
  if (!graph.has_node_count && graph.nodes.empty()) {
    throw InvalidArgumentError(StrCat(who,
                                      ": cannot count nodes: the data has neither an n_node "
                                      "column nor a node column (nodes, nodes/...)"));
  }
  return graph;
}

std::vector<int64_t> NodeCounts(const Dataset& dataset, const GraphColumns& graph) {
  if (!graph.has_node_count) return dataset.column(graph.nodes.front()).Lengths();
  const RaggedColumn& counts = dataset.column(kNodeCountName);
  std::vector<int64_t> out(static_cast<size_t>(dataset.num_examples()));
  for (int64_t e = 0; e < dataset.num_examples(); ++e) {
    out[static_cast<size_t>(e)] = CountOf(counts, e);
  }
  return out;
}

int64_t NodeCount(const Dataset& dataset, const GraphColumns& graph, int64_t example) {
  return graph.has_node_count ? CountOf(dataset.column(kNodeCountName), example)
                              : dataset.column(graph.nodes.front()).length(example);
}

std::vector<int64_t> EdgeCounts(const Dataset& dataset) {
  return dataset.column(kSendersName).Lengths();
}

std::vector<GraphProblem> FindBadGraphs(const Dataset& dataset, const GraphColumns& graph) {
  std::vector<GraphProblem> problems;
  const std::vector<int64_t> nodes = NodeCounts(dataset, graph);
  const RaggedColumn& senders = dataset.column(kSendersName);
  const RaggedColumn& receivers = dataset.column(kReceiversName);
  const RaggedColumn* edge_count = graph.has_edge_count ? &dataset.column(kEdgeCountName) : nullptr;
  for (int64_t e = 0; e < dataset.num_examples(); ++e) {
    const int64_t n = nodes[static_cast<size_t>(e)];
    const int64_t m = senders.length(e);
    std::string reason;
    if (n < 0) reason = StrCat("n_node is ", n, "; expected a count >= 0");
    for (const std::string& name : graph.nodes) {
      if (!reason.empty()) break;
      const int64_t length = dataset.column(name).length(e);
      if (length != n) {
        reason = StrCat("column '", name, "' has ", length, " rows but the graph has ", n, " nodes",
                        graph.has_node_count ? " (n_node)" : "");
      }
    }
    if (reason.empty() && edge_count != nullptr && CountOf(*edge_count, e) != m) {
      reason = StrCat("n_edge is ", CountOf(*edge_count, e), " but senders has ", m, " edges");
    }
    std::vector<std::string> edge_columns = graph.edges;
    edge_columns.emplace_back(kReceiversName);
    for (const std::string& name : edge_columns) {
      if (!reason.empty()) break;
      const int64_t length = dataset.column(name).length(e);
      if (length != m) {
        reason = StrCat("column '", name, "' has ", length, " rows but senders has ", m, " edges");
      }
    }
    for (const RaggedColumn* ids : {&senders, &receivers}) {
      if (!reason.empty()) break;
      const uint8_t* data = ids->example_data(e);
      for (int64_t k = 0; k < m; ++k) {
        const int64_t id = ReadInteger(data, ids->dtype(), k);
        if (id < 0 || id >= n) {
          reason = StrCat(ids->name(), "[", k, "] = ", id, " is not a node id; the graph has ", n,
                          " nodes (ids 0..", n - 1, ")");
          break;
        }
      }
    }
    if (!reason.empty()) problems.push_back(GraphProblem{e, StrCat("graph: ", reason)});
  }
  return problems;
}

}  // namespace jaxbatch
