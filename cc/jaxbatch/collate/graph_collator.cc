// Graph batches: concatenated nodes and edges, padded as jraph pads.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/collate/internal.h"
#include "jaxbatch/data/graph.h"

namespace jaxbatch {
namespace {

using namespace collate_internal;  // NOLINT: the collators' shared helpers

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

std::vector<int64_t> WithInner(int64_t lead, const RaggedColumn& column) {
  std::vector<int64_t> shape = {lead};
  shape.insert(shape.end(), column.inner_shape().begin(), column.inner_shape().end());
  return shape;
}

template <typename T>
void OffsetIds(T* out, const uint8_t* in, int64_t count, int64_t offset, int64_t nodes,
               const std::string& name, int64_t example) {
  for (int64_t k = 0; k < count; ++k) {
    T id;
    std::memcpy(&id, in + k * static_cast<int64_t>(sizeof(T)), sizeof(T));
    if (id < 0 || static_cast<int64_t>(id) >= nodes) {
      throw InvalidArgumentError(StrCat("collate: graph ", example, ": ", name, "[", k,
                                        "] = ", static_cast<int64_t>(id),
                                        " is not a node id; the graph has ", nodes, " nodes"));
    }
    out[k] = static_cast<T>(id + offset);
  }
}

template <typename T>
void FillIds(T* out, int64_t count, int64_t value) {
  std::fill(out, out + count, static_cast<T>(value));
}

class GraphCollator {
 public:
  GraphCollator(const Dataset& dataset, const BatchView& view, const CollateOptions& options)
      : dataset_(dataset),
        view_(view),
        options_(options),
        graph_(FindGraphColumns(dataset, "collate")) {
    CheckNumThreads(options_);
    const BatchShape& shape = view_.shape;
    if (shape.length > kMaxInt32 || shape.edges > kMaxInt32 || shape.rows > kMaxInt32) {
      throw InvalidArgumentError(StrCat("collate: graph batch ", view_.index, " of ", shape.length,
                                        " nodes, ", shape.edges, " edges and ", shape.rows,
                                        " graphs: each must fit the int32 n_node, n_edge and ",
                                        "node ids (at most ", kMaxInt32, ")"));
    }
    Layout();
  }

  std::vector<Array> Run() {
    std::vector<Array> out;
    for (const std::string& name : graph_.nodes) Rows(dataset_.column(name), true, out);
    for (const std::string& name : graph_.edges) Rows(dataset_.column(name), false, out);
    Ids(dataset_.column(kSendersName), out);
    Ids(dataset_.column(kReceiversName), out);
    for (const std::string& name : graph_.per_graph) PerGraph(dataset_.column(name), out);
    Counts(out);
    Masks(out);
    int64_t bytes = 0;
    for (const Array& a : out) bytes += a.num_bytes();
    FillInParallel(graphs(), bytes, options_, [&](int64_t g0, int64_t g1) {
      for (const auto& filler : fillers_) filler(g0, g1);
    });
    for (const auto& pad : padders_) pad();
    return out;
  }

 private:
  int64_t graphs() const { return static_cast<int64_t>(examples_.size()); }

  // Each graph's example and first node and edge; checks that they fit.
  void Layout() {
    const BatchShape& shape = view_.shape;
    if (view_.stored_rows() > shape.rows - 1) {
      throw InvalidArgumentError(StrCat("collate: graph batch ", view_.index, " has ",
                                        view_.stored_rows(), " graphs but its shape holds ",
                                        shape.rows - 1, " (graphs - 1: one is the padding graph)"));
    }
    const RaggedColumn& senders = dataset_.column(kSendersName);
    node_begin_.push_back(0);
    edge_begin_.push_back(0);
    for (int64_t r = 0; r < view_.stored_rows(); ++r) {
      const std::span<const int64_t> row = view_.row_examples(r);
      if (row.size() != 1) {
        throw InvalidArgumentError(StrCat("collate: graph batch ", view_.index, ", row ", r,
                                          " holds ", row.size(), " examples; a graph slot holds ",
                                          "one graph"));
      }
      const int64_t e = row[0];
      CheckExample(dataset_, e, view_.index);
      const int64_t n = NodeCount(dataset_, graph_, e);
      const int64_t m = senders.length(e);
      if (n < 0) {
        throw InvalidArgumentError(StrCat("collate: graph ", e, ": n_node is ", n));
      }
      for (const std::string& name : graph_.nodes) CheckLength(name, e, n, "nodes");
      for (const std::string& name : graph_.edges) CheckLength(name, e, m, "edges (senders)");
      CheckLength(kReceiversName, e, m, "edges (senders)");
      examples_.push_back(e);
      node_begin_.push_back(SaturatingAdd(node_begin_.back(), n));
      edge_begin_.push_back(SaturatingAdd(edge_begin_.back(), m));
    }
    if (node_begin_.back() > shape.length - 1 || edge_begin_.back() > shape.edges) {
      throw InvalidArgumentError(StrCat("collate: graph batch ", view_.index, " holds ",
                                        node_begin_.back(), " nodes and ", edge_begin_.back(),
                                        " edges but its shape has room for ", shape.length - 1,
                                        " real nodes (one is padding) and ", shape.edges,
                                        "; the plan was made from other counts"));
    }
  }

  void CheckLength(const std::string& name, int64_t e, int64_t expected, const char* what) const {
    const int64_t length = dataset_.column(name).length(e);
    if (length != expected) {
      throw InvalidArgumentError(StrCat("collate: graph ", e, ": column '", name, "' has ", length,
                                        " rows but the graph has ", expected, " ", what));
    }
  }

  Array Alloc(std::string name, DType dtype, std::vector<int64_t> shape) {
    return AllocateArray(std::move(name), dtype, std::move(shape), options_.allocator);
  }

  // A node or edge column: the graphs' rows back to back, then padding.
  void Rows(const RaggedColumn& column, bool nodes, std::vector<Array>& out) {
    const int64_t slots = nodes ? view_.shape.length : view_.shape.edges;
    const std::vector<int64_t>& begin = nodes ? node_begin_ : edge_begin_;
    Array values = Alloc(column.name(), column.dtype(), WithInner(slots, column));
    uint8_t* data = values.data;
    const int64_t row_bytes = column.row_bytes();
    fillers_.push_back([=, this, &column, &begin](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const auto k = static_cast<size_t>(g);
        CopyRows(data + begin[k] * row_bytes, column, examples_[k], begin[k + 1] - begin[k]);
      }
    });
    const PadValue pad = EncodePad(column, options_);
    padders_.push_back([=, &column, &begin] {
      FillPattern(data + begin.back() * row_bytes, (slots - begin.back()) * column.inner_size(),
                  pad.bytes, ItemSize(column.dtype()), pad.zero);
    });
    out.push_back(std::move(values));
  }

  // senders or receivers: offset by the graph's first node; padding edges
  // point at the first padding node.
  void Ids(const RaggedColumn& column, std::vector<Array>& out) {
    const int64_t slots = view_.shape.edges;
    Array ids = Alloc(column.name(), column.dtype(), {slots});
    uint8_t* data = ids.data;
    const bool wide = column.dtype() == DType::kInt64;
    fillers_.push_back([=, this, &column](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const auto k = static_cast<size_t>(g);
        const int64_t e = examples_[k];
        const int64_t count = edge_begin_[k + 1] - edge_begin_[k];
        const int64_t nodes = node_begin_[k + 1] - node_begin_[k];
        if (count == 0) continue;
        if (wide) {
          OffsetIds(reinterpret_cast<int64_t*>(data) + edge_begin_[k], column.example_data(e),
                    count, node_begin_[k], nodes, column.name(), e);
        } else {
          OffsetIds(reinterpret_cast<int32_t*>(data) + edge_begin_[k], column.example_data(e),
                    count, node_begin_[k], nodes, column.name(), e);
        }
      }
    });
    padders_.push_back([=, this] {
      const int64_t first = edge_begin_.back();
      if (wide) {
        FillIds(reinterpret_cast<int64_t*>(data) + first, slots - first, node_begin_.back());
      } else {
        FillIds(reinterpret_cast<int32_t*>(data) + first, slots - first, node_begin_.back());
      }
    });
    out.push_back(std::move(ids));
  }

  // A fixed column: one row per graph slot.
  void PerGraph(const RaggedColumn& column, std::vector<Array>& out) {
    Array values = Alloc(column.name(), column.dtype(), WithInner(view_.shape.rows, column));
    uint8_t* data = values.data;
    const int64_t row_bytes = column.row_bytes();
    fillers_.push_back([=, this, &column](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        CopyRows(data + g * row_bytes, column, examples_[static_cast<size_t>(g)], 1);
      }
    });
    const PadValue pad = EncodePad(column, options_);
    padders_.push_back([=, this, &column] {
      FillPattern(data + graphs() * row_bytes, (view_.shape.rows - graphs()) * column.inner_size(),
                  pad.bytes, ItemSize(column.dtype()), pad.zero);
    });
    out.push_back(std::move(values));
  }

  // n_node, n_edge, graph_index: the padding graph after the real ones.
  void Counts(std::vector<Array>& out) {
    const int64_t slots = view_.shape.rows;
    Array n_node = Alloc(kNodeCountName, DType::kInt32, {slots});
    Array n_edge = Alloc(kEdgeCountName, DType::kInt32, {slots});
    Array index = Alloc(std::string(kGraphIndexName), DType::kInt64, {slots});
    auto* nodes = reinterpret_cast<int32_t*>(n_node.data);
    auto* edges = reinterpret_cast<int32_t*>(n_edge.data);
    auto* ids = reinterpret_cast<int64_t*>(index.data);
    fillers_.push_back([=, this](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const auto k = static_cast<size_t>(g);
        nodes[g] = static_cast<int32_t>(node_begin_[k + 1] - node_begin_[k]);
        edges[g] = static_cast<int32_t>(edge_begin_[k + 1] - edge_begin_[k]);
        ids[g] = examples_[k];
      }
    });
    padders_.push_back([=, this] {
      const int64_t k = graphs();
      std::fill(nodes + k, nodes + slots, 0);
      std::fill(edges + k, edges + slots, 0);
      std::fill(ids + k, ids + slots, -1);
      nodes[k] = static_cast<int32_t>(view_.shape.length - node_begin_.back());
      edges[k] = static_cast<int32_t>(view_.shape.edges - edge_begin_.back());
    });
    out.push_back(std::move(n_node));
    out.push_back(std::move(n_edge));
    out.push_back(std::move(index));
  }

  void Masks(std::vector<Array>& out) {
    const BatchShape& shape = view_.shape;
    Array node_mask = Alloc(std::string(kNodeMaskName), DType::kBool, {shape.length});
    Array edge_mask = Alloc(std::string(kEdgeMaskName), DType::kBool, {shape.edges});
    Array graph_mask = Alloc(std::string(kGraphMaskName), DType::kBool, {shape.rows});
    Array node_graph = Alloc(std::string(kNodeGraphName), DType::kInt32, {shape.length});
    uint8_t* nm = node_mask.data;
    uint8_t* em = edge_mask.data;
    uint8_t* gm = graph_mask.data;
    auto* ng = reinterpret_cast<int32_t*>(node_graph.data);
    fillers_.push_back([=, this](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const auto k = static_cast<size_t>(g);
        std::fill(ng + node_begin_[k], ng + node_begin_[k + 1], static_cast<int32_t>(g));
      }
    });
    padders_.push_back([=, this] {
      const int64_t nodes = node_begin_.back();
      const int64_t edges = edge_begin_.back();
      std::memset(nm, 1, static_cast<size_t>(nodes));
      std::memset(nm + nodes, 0, static_cast<size_t>(shape.length - nodes));
      std::memset(em, 1, static_cast<size_t>(edges));
      std::memset(em + edges, 0, static_cast<size_t>(shape.edges - edges));
      std::memset(gm, 1, static_cast<size_t>(graphs()));
      std::memset(gm + graphs(), 0, static_cast<size_t>(shape.rows - graphs()));
      std::fill(ng + nodes, ng + shape.length, static_cast<int32_t>(graphs()));
    });
    out.push_back(std::move(node_mask));
    out.push_back(std::move(edge_mask));
    out.push_back(std::move(graph_mask));
    out.push_back(std::move(node_graph));
  }

  const Dataset& dataset_;
  BatchView view_;
  const CollateOptions& options_;
  GraphColumns graph_;
  std::vector<int64_t> examples_;    // per graph slot
  std::vector<int64_t> node_begin_;  // graphs() + 1 prefix sums
  std::vector<int64_t> edge_begin_;
  // Fill graphs [g0, g1) of the arrays (in parallel); then the padding.
  std::vector<std::function<void(int64_t, int64_t)>> fillers_;
  std::vector<std::function<void()>> padders_;
};

}  // namespace

std::vector<Array> CollateGraphs(const Dataset& dataset, const BatchView& view,
                                 const CollateOptions& options) {
  return GraphCollator(dataset, view, options).Run();
}

int64_t GraphCollatedBytes(const Dataset& dataset, const BatchShape& shape) {
  const GraphColumns graph = FindGraphColumns(dataset, "collate");
  auto array = [](int64_t a, int64_t b) { return std::max<int64_t>(SaturatingMul(a, b), 1); };
  int64_t total = 0;
  auto add = [&total](int64_t bytes) { total = SaturatingAdd(total, bytes); };
  for (const std::string& name : graph.nodes) {
    add(array(shape.length, dataset.column(name).row_bytes()));
  }
  for (const std::string& name : graph.edges) {
    add(array(shape.edges, dataset.column(name).row_bytes()));
  }
  for (const char* name : {kSendersName, kReceiversName}) {
    add(array(shape.edges, dataset.column(name).row_bytes()));
  }
  for (const std::string& name : graph.per_graph) {
    add(array(shape.rows, dataset.column(name).row_bytes()));
  }
  add(array(shape.rows, 4 + 4 + 8 + 1));  // n_node, n_edge, graph_index, graph_mask
  add(array(shape.length, 1 + 4));        // node_mask, node_graph
  add(array(shape.edges, 1));             // edge_mask
  return total;
}

}  // namespace jaxbatch
