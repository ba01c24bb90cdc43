#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/graph.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

struct Graph {
  std::vector<float> x;   // [n, 2]
  std::vector<int8_t> z;  // [n]
  std::vector<float> w;   // [m]
  std::vector<int32_t> senders, receivers;
  float globals[3];
  int64_t n = 0;
};

std::vector<Graph> RandomGraphs(std::mt19937& rng, int count) {
  std::vector<Graph> out;
  for (int i = 0; i < count; ++i) {
    Graph g;
    g.n = std::uniform_int_distribution<int64_t>(0, 9)(rng);
    const int64_t m = g.n == 0 ? 0 : std::uniform_int_distribution<int64_t>(0, 14)(rng);
    for (int64_t k = 0; k < g.n; ++k) {
      g.x.push_back(static_cast<float>(i * 100 + k));
      g.x.push_back(-static_cast<float>(k));
      g.z.push_back(static_cast<int8_t>(k + 1));
    }
    std::uniform_int_distribution<int32_t> node(
        0, static_cast<int32_t>(std::max<int64_t>(g.n, 1) - 1));
    for (int64_t k = 0; k < m; ++k) {
      g.senders.push_back(node(rng));
      g.receivers.push_back(node(rng));
      g.w.push_back(0.5f * static_cast<float>(k + i));
    }
    for (int k = 0; k < 3; ++k) g.globals[k] = static_cast<float>(i + k);
    out.push_back(std::move(g));
  }
  return out;
}

template <typename T, typename F>
RaggedColumn Ragged(const std::string& name, DType dtype, std::vector<int64_t> inner,
                    const std::vector<Graph>& graphs, F field) {
  auto values = std::make_shared<std::vector<T>>();
  auto offsets = std::make_shared<std::vector<int64_t>>(1, 0);
  int64_t per_row = 1;
  for (int64_t d : inner) per_row *= d;
  for (const Graph& g : graphs) {
    const std::vector<T>& v = field(g);
    values->insert(values->end(), v.begin(), v.end());
    offsets->push_back(static_cast<int64_t>(values->size()) / per_row);
  }
  auto owner = std::make_shared<std::pair<decltype(values), decltype(offsets)>>(values, offsets);
  return RaggedColumn::Ragged(name, dtype, std::move(inner), values->data(),
                              static_cast<int64_t>(values->size()) / per_row, offsets->data(),
                              static_cast<int64_t>(graphs.size()), owner);
}

template <typename T>
RaggedColumn Fixed(const std::string& name, DType dtype, std::vector<int64_t> inner,
                   std::vector<T> data, int64_t n) {
  auto values = std::make_shared<std::vector<T>>(std::move(data));
  return RaggedColumn::Fixed(name, dtype, std::move(inner), values->data(), n, values);
}

Dataset MakeGraphs(const std::vector<Graph>& graphs) {
  std::vector<float> globals;
  std::vector<int32_t> n_node, n_edge;
  for (const Graph& g : graphs) {
    globals.insert(globals.end(), g.globals, g.globals + 3);
    n_node.push_back(static_cast<int32_t>(g.n));
    n_edge.push_back(static_cast<int32_t>(g.senders.size()));
  }
  const auto n = static_cast<int64_t>(graphs.size());
  std::vector<RaggedColumn> columns;
  columns.push_back(Ragged<float>("nodes/x", DType::kFloat32, {2}, graphs,
                                  [](const Graph& g) -> const std::vector<float>& { return g.x; }));
  columns.push_back(
      Ragged<int8_t>("nodes/z", DType::kInt8, {}, graphs,
                     [](const Graph& g) -> const std::vector<int8_t>& { return g.z; }));
  columns.push_back(Ragged<float>("edges", DType::kFloat32, {}, graphs,
                                  [](const Graph& g) -> const std::vector<float>& { return g.w; }));
  columns.push_back(
      Ragged<int32_t>("senders", DType::kInt32, {}, graphs,
                      [](const Graph& g) -> const std::vector<int32_t>& { return g.senders; }));
  columns.push_back(
      Ragged<int32_t>("receivers", DType::kInt32, {}, graphs,
                      [](const Graph& g) -> const std::vector<int32_t>& { return g.receivers; }));
  columns.push_back(Fixed<float>("globals", DType::kFloat32, {3}, globals, n));
  columns.push_back(Fixed<int32_t>("n_node", DType::kInt32, {}, n_node, n));
  columns.push_back(Fixed<int32_t>("n_edge", DType::kInt32, {}, n_edge, n));
  return Dataset(std::move(columns));
}

template <typename T>
std::vector<T> Values(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays) {
    if (a.name != name) continue;
    std::vector<T> out(static_cast<size_t>(a.num_bytes()) / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), a.data, out.size() * sizeof(T));
    return out;
  }
  ADD_FAILURE() << "no array " << name;
  return {};
}

// jraph.batch then jraph.pad_with_graphs, written out plainly (pad value 0,
// or `pad` for the float columns).
void ExpectJraphBatch(const std::vector<Graph>& graphs, const std::vector<int64_t>& ids,
                      const BatchShape& shape, const std::vector<Array>& arrays, float pad) {
  std::vector<float> x, w, globals;
  std::vector<int8_t> z;
  std::vector<int32_t> senders, receivers, n_node, n_edge, node_graph;
  std::vector<int64_t> index;
  std::vector<uint8_t> node_mask, edge_mask, graph_mask;
  int32_t offset = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const Graph& g = graphs[static_cast<size_t>(ids[k])];
    x.insert(x.end(), g.x.begin(), g.x.end());
    z.insert(z.end(), g.z.begin(), g.z.end());
    w.insert(w.end(), g.w.begin(), g.w.end());
    for (int32_t s : g.senders) senders.push_back(s + offset);
    for (int32_t r : g.receivers) receivers.push_back(r + offset);
    globals.insert(globals.end(), g.globals, g.globals + 3);
    n_node.push_back(static_cast<int32_t>(g.n));
    n_edge.push_back(static_cast<int32_t>(g.senders.size()));
    node_graph.insert(node_graph.end(), static_cast<size_t>(g.n), static_cast<int32_t>(k));
    index.push_back(ids[k]);
    offset += static_cast<int32_t>(g.n);
  }
  const int64_t real_nodes = offset;
  const auto real_edges = static_cast<int64_t>(senders.size());
  const auto real_graphs = static_cast<int64_t>(ids.size());
  node_mask.assign(static_cast<size_t>(real_nodes), 1);
  edge_mask.assign(static_cast<size_t>(real_edges), 1);
  graph_mask.assign(static_cast<size_t>(real_graphs), 1);
  // The padding graph, then empty ones.
  x.resize(static_cast<size_t>(shape.length * 2), pad);
  z.resize(static_cast<size_t>(shape.length), 0);
  w.resize(static_cast<size_t>(shape.edges), pad);
  senders.resize(static_cast<size_t>(shape.edges), offset);
  receivers.resize(static_cast<size_t>(shape.edges), offset);
  globals.resize(static_cast<size_t>(shape.rows * 3), pad);
  n_node.push_back(static_cast<int32_t>(shape.length - real_nodes));
  n_edge.push_back(static_cast<int32_t>(shape.edges - real_edges));
  n_node.resize(static_cast<size_t>(shape.rows), 0);
  n_edge.resize(static_cast<size_t>(shape.rows), 0);
  node_graph.resize(static_cast<size_t>(shape.length), static_cast<int32_t>(real_graphs));
  index.resize(static_cast<size_t>(shape.rows), -1);
  node_mask.resize(static_cast<size_t>(shape.length), 0);
  edge_mask.resize(static_cast<size_t>(shape.edges), 0);
  graph_mask.resize(static_cast<size_t>(shape.rows), 0);

  EXPECT_EQ(Values<float>(arrays, "nodes/x"), x);
  EXPECT_EQ(Values<int8_t>(arrays, "nodes/z"), z);
  EXPECT_EQ(Values<float>(arrays, "edges"), w);
  EXPECT_EQ(Values<int32_t>(arrays, "senders"), senders);
  EXPECT_EQ(Values<int32_t>(arrays, "receivers"), receivers);
  EXPECT_EQ(Values<float>(arrays, "globals"), globals);
  EXPECT_EQ(Values<int32_t>(arrays, "n_node"), n_node);
  EXPECT_EQ(Values<int32_t>(arrays, "n_edge"), n_edge);
  EXPECT_EQ(Values<int32_t>(arrays, "node_graph"), node_graph);
  EXPECT_EQ(Values<int64_t>(arrays, "graph_index"), index);
  EXPECT_EQ(Values<uint8_t>(arrays, "node_mask"), node_mask);
  EXPECT_EQ(Values<uint8_t>(arrays, "edge_mask"), edge_mask);
  EXPECT_EQ(Values<uint8_t>(arrays, "graph_mask"), graph_mask);
  EXPECT_EQ(arrays.size(), 13u);
}

TEST(GraphCollatorTest, EqualsJraphsBatchAndPadForEveryPlannerAndThreadCount) {
  std::mt19937 rng(5);
  const std::vector<Graph> graphs = RandomGraphs(rng, 120);
  const Dataset ds = MakeGraphs(graphs);
  const GraphColumns columns = FindGraphColumns(ds, "test");
  EXPECT_EQ(columns.nodes, (std::vector<std::string>{"nodes/x", "nodes/z"}));
  EXPECT_EQ(columns.edges, (std::vector<std::string>{"edges"}));
  EXPECT_EQ(columns.per_graph, (std::vector<std::string>{"globals"}));
  EXPECT_EQ(columns.globals, (std::vector<std::string>{"globals"}));
  EXPECT_TRUE(FindBadGraphs(ds, columns).empty());
  const std::vector<int64_t> nodes = NodeCounts(ds, columns);
  const std::vector<int64_t> edges = EdgeCounts(ds);
  for (const PlannerOptions& planner : std::vector<PlannerOptions>{
           GraphBudgetOptions{.nodes = 40, .edges = 50, .graphs = 6},
           GraphBudgetOptions{
               .nodes = 40, .edges = 70, .graphs = 9, .algorithm = GraphAlgorithm::kNextFit},
           GraphBucketsOptions{.max_shapes = 3, .nodes = 64, .edges = 80, .graphs = 12}}) {
    const BatchPlan plan = Plan(nodes, planner, {}, edges);
    for (int64_t threads : {1, 3}) {
      for (float pad : {0.0f, -1.5f}) {
        CollateOptions options;
        options.pad_values = {{"nodes/x", pad}, {"edges", pad}, {"globals", pad}};
        options.num_threads = threads;
        options.min_bytes_per_thread = 1;
        for (int64_t b = 0; b < plan.num_batches(); ++b) {
          SCOPED_TRACE(::testing::Message()
                       << PlannerName(planner) << " batch " << b << " threads " << threads);
          const BatchView view = plan.batch(b);
          const auto ex = view.all_examples();
          ExpectJraphBatch(graphs, {ex.begin(), ex.end()}, view.shape,
                           Collate(ds, plan, b, options), pad);
        }
      }
    }
  }
}

TEST(GraphCollatorTest, BadGraphsAreFoundAndNeverReadPastTheirArrays) {
  std::mt19937 rng(9);
  std::vector<Graph> graphs = RandomGraphs(rng, 6);
  graphs[1].n = 3;
  graphs[1].x.assign(6, 1.0f);
  graphs[1].z.assign(3, 1);
  graphs[1].senders = {0, 3};  // 3 is not a node of a 3-node graph
  graphs[1].receivers = {1, 2};
  graphs[1].w = {1, 2};
  graphs[4].z.push_back(7);  // one row too many in nodes/z
  const Dataset ds = MakeGraphs(graphs);
  const std::vector<GraphProblem> bad = FindBadGraphs(ds, FindGraphColumns(ds, "test"));
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].example, 1);
  EXPECT_EQ(bad[0].reason,
            "graph: senders[1] = 3 is not a node id; the graph has 3 nodes (ids 0..2)");
  EXPECT_EQ(bad[1].example, 4);
  EXPECT_TRUE(Contains(bad[1].reason, "column 'nodes/z' has")) << bad[1].reason;
  // Collate checks what it copies: a plan over bad graphs is an error, not a
  // write past a buffer.
  const std::vector<int64_t> nodes(6, 0);
  const std::vector<int64_t> edges(6, 0);
  PlanBuilder builder = PlanBuilder::Graphs();
  builder.BeginBatch({.rows = 8, .length = 100, .segments = 0, .edges = 100});
  for (const int64_t& id : std::vector<int64_t>{4})
    builder.AddRow(std::span<const int64_t>(&id, 1));
  builder.EndBatch();
  const BatchPlan plan = std::move(builder).FinishGraphs(nodes, edges, 6);
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, {}); }),
                       "collate: graph 4: column 'nodes/z' has"));
}

TEST(GraphCollatorTest, FindGraphColumnsNamesWhatIsWrong) {
  std::mt19937 rng(1);
  const std::vector<Graph> graphs = RandomGraphs(rng, 3);
  std::vector<RaggedColumn> columns = MakeGraphs(graphs).columns();
  columns.push_back(Ragged<float>("extra", DType::kFloat32, {}, graphs,
                                  [](const Graph& g) -> const std::vector<float>& { return g.w; }));
  const Dataset ds(columns);
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { FindGraphColumns(ds, "Loader"); }),
                       "Loader: column 'extra' is ragged but is neither a node column"));
  const Dataset plain({columns[0]});
  EXPECT_FALSE(IsGraphDataset(plain));
  EXPECT_TRUE(
      Contains(ThrownMessage<InvalidArgumentError>([&] { FindGraphColumns(plain, "Loader"); }),
               "Loader: graph planners need graphs: a 'senders' column"));
}

// A field's names are pytree paths: a leaf where another name needs a
// subtree would lose one of them in the GraphsTuple, so it is refused
// naming both; names that only share a start ("nodes/z" and "nodes/zz")
// make a tree and are fine.
TEST(GraphCollatorTest, FindGraphColumnsRefusesNamesThatDoNotMakeATree) {
  std::mt19937 rng(2);
  const std::vector<Graph> graphs = RandomGraphs(rng, 3);
  auto z = [](const Graph& g) -> const std::vector<int8_t>& { return g.z; };
  auto w = [](const Graph& g) -> const std::vector<float>& { return g.w; };
  const std::vector<RaggedColumn> base = MakeGraphs(graphs).columns();
  struct Case {
    RaggedColumn extra;
    std::string message;  // empty: accepted
  };
  const std::vector<Case> cases = {
      {Ragged<int8_t>("nodes/z/y", DType::kInt8, {}, graphs, z),
       "test: columns 'nodes/z' and 'nodes/z/y' cannot both be nodes columns"},
      {Ragged<int8_t>("nodes", DType::kInt8, {}, graphs, z),
       "test: columns 'nodes' and 'nodes/x' cannot both be nodes columns"},
      {Ragged<float>("edges/a", DType::kFloat32, {}, graphs, w),
       "test: columns 'edges' and 'edges/a' cannot both be edges columns"},
      {Fixed<float>("globals/0", DType::kFloat32, {}, {1, 2, 3}, 3),
       "test: columns 'globals' and 'globals/0' cannot both be globals columns"},
      {Ragged<int8_t>("nodes/zz", DType::kInt8, {}, graphs, z), ""},
      {Ragged<int8_t>("nodes/z2/y", DType::kInt8, {}, graphs, z), ""},
  };
  for (const Case& c : cases) {
    std::vector<RaggedColumn> columns = base;
    columns.push_back(c.extra);
    const Dataset ds(columns);
    if (c.message.empty()) {
      EXPECT_EQ(FindGraphColumns(ds, "test").nodes.size(), 3u) << c.extra.name();
    } else {
      EXPECT_TRUE(Contains(
          ThrownMessage<InvalidArgumentError>([&] { FindGraphColumns(ds, "test"); }), c.message))
          << c.extra.name();
    }
  }
}

}  // namespace
}  // namespace jaxbatch
