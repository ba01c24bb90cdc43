#include "jaxbatch/plan/graph_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

struct Sizes {
  std::vector<int64_t> nodes;
  std::vector<int64_t> edges;
};

// Molecule-like sizes: nodes 1..30, edges about twice the nodes (0 for a
// single atom).
Sizes RandomSizes(std::mt19937& rng, int64_t n) {
  Sizes s;
  std::uniform_int_distribution<int64_t> nodes(1, 30);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = nodes(rng);
    s.nodes.push_back(k);
    s.edges.push_back(k == 1 ? 0
                             : 2 * (k - 1) + 2 * std::uniform_int_distribution<int64_t>(0, 3)(rng));
  }
  return s;
}

// jraph.dynamically_batch, line for line: the example ids of each batch.
std::vector<std::vector<int64_t>> JraphBatches(const Sizes& s, int64_t n_node, int64_t n_edge,
                                               int64_t n_graph) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> acc;
  int64_t nodes = 0;
  int64_t edges = 0;
  int64_t graphs = 0;
  for (int64_t id = 0; id < static_cast<int64_t>(s.nodes.size()); ++id) {
    const int64_t en = s.nodes[static_cast<size_t>(id)];
    const int64_t ee = s.edges[static_cast<size_t>(id)];
    if (acc.empty()) {
      acc = {id};
      nodes = en;
      edges = ee;
      graphs = 1;
      continue;
    }
    if (graphs + 1 > n_graph - 1 || nodes + en > n_node - 1 || edges + ee > n_edge) {
      out.push_back(acc);
      acc = {id};
      nodes = en;
      edges = ee;
      graphs = 1;
    } else {
      acc.push_back(id);
      nodes += en;
      edges += ee;
      graphs += 1;
    }
  }
  if (!acc.empty()) out.push_back(acc);
  return out;
}

std::vector<std::vector<int64_t>> Batches(const BatchPlan& plan) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const auto ex = plan.batch(b).all_examples();
    out.emplace_back(ex.begin(), ex.end());
  }
  return out;
}

// Every graph once, each batch within its shape (one node and one graph
// slot left for padding), the shape one of the plan's.
void ExpectValid(const BatchPlan& plan, const Sizes& s, int64_t skipped = 0) {
  ASSERT_TRUE(plan.graph);
  std::multiset<int64_t> seen;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    int64_t nodes = 0;
    int64_t edges = 0;
    for (int64_t e : view.all_examples()) {
      seen.insert(e);
      nodes += s.nodes[static_cast<size_t>(e)];
      edges += s.edges[static_cast<size_t>(e)];
    }
    EXPECT_LE(nodes, view.shape.length - 1) << "batch " << b;
    EXPECT_LE(edges, view.shape.edges) << "batch " << b;
    EXPECT_LE(view.stored_rows(), view.shape.rows - 1) << "batch " << b;
    EXPECT_GE(view.stored_rows(), 1) << "batch " << b;
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()) + skipped, static_cast<int64_t>(s.nodes.size()));
  for (int64_t e = 0; e < static_cast<int64_t>(s.nodes.size()); ++e) {
    EXPECT_LE(seen.count(e), 1u) << "graph " << e;
  }
}

int64_t PaddedSlots(const BatchPlan& plan) {
  return plan.stats.padded_elements + plan.stats.padded_edges;
}

TEST(GraphPlannerTest, NextFitIsJraphsDynamicallyBatch) {
  std::mt19937 rng(7);
  const Sizes s = RandomSizes(rng, 500);
  for (const auto& [n, e, g] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {64, 128, 8}, {31, 1000, 100}, {1000, 70, 100}, {500, 1000, 3}, {31, 64, 2}}) {
    SCOPED_TRACE(::testing::Message() << n << " " << e << " " << g);
    const BatchPlan plan =
        Plan(s.nodes,
             GraphBudgetOptions{
                 .nodes = n, .edges = e, .graphs = g, .algorithm = GraphAlgorithm::kNextFit},
             {}, s.edges);
    EXPECT_EQ(Batches(plan), JraphBatches(s, n, e, g));
    ASSERT_EQ(plan.shapes.size(), 1u);
    EXPECT_EQ(plan.shapes[0], (BatchShape{.rows = g, .length = n, .segments = 0, .edges = e}));
  }
}

TEST(GraphPlannerTest, FitsAreValidAndFillBetterThanNextFit) {
  std::mt19937 rng(11);
  const Sizes s = RandomSizes(rng, 2000);
  const GraphBudgetOptions base{.nodes = 256, .edges = 600, .graphs = 33};
  GraphBudgetOptions next = base;
  next.algorithm = GraphAlgorithm::kNextFit;
  const BatchPlan next_plan = Plan(s.nodes, next, {}, s.edges);
  ExpectValid(next_plan, s);
  for (GraphAlgorithm a : {GraphAlgorithm::kFirstFit, GraphAlgorithm::kBestFit}) {
    GraphBudgetOptions o = base;
    o.algorithm = a;
    o.open_batches = 16;
    const BatchPlan plan = Plan(s.nodes, o, {}, s.edges);
    ExpectValid(plan, s);
    EXPECT_LE(plan.num_batches(), next_plan.num_batches());
    EXPECT_GT(plan.stats.efficiency, next_plan.stats.efficiency);
    EXPECT_EQ(plan.stats.real_graphs, 2000);
    EXPECT_EQ(plan.stats.padded_graphs, 33 * plan.num_batches());
  }
  // One open batch is next fit, whatever the algorithm.
  GraphBudgetOptions one = base;
  one.algorithm = GraphAlgorithm::kFirstFit;
  one.open_batches = 1;
  EXPECT_EQ(Batches(Plan(s.nodes, one, {}, s.edges)), Batches(next_plan));
}

TEST(GraphPlannerTest, StatsCountNodesEdgesAndGraphs) {
  const Sizes s{{3, 0, 5}, {4, 0, 8}};
  const BatchPlan plan =
      Plan(s.nodes, GraphBudgetOptions{.nodes = 10, .edges = 12, .graphs = 4}, {}, s.edges);
  ASSERT_EQ(plan.num_batches(), 1);
  EXPECT_EQ(plan.stats.real_elements, 8);
  EXPECT_EQ(plan.stats.padded_elements, 10);
  EXPECT_EQ(plan.stats.real_edges, 12);
  EXPECT_EQ(plan.stats.padded_edges, 12);
  EXPECT_EQ(plan.stats.real_graphs, 3);
  EXPECT_EQ(plan.stats.padded_graphs, 4);
}

TEST(GraphPlannerTest, TooBigIsAnErrorAtPlanTimeOrACountedSkip) {
  const Sizes s{{3, 10, 2}, {2, 1, 40}};
  GraphBudgetOptions o{.nodes = 10, .edges = 20, .graphs = 4};
  const std::string message =
      ThrownMessage<InvalidArgumentError>([&] { Plan(s.nodes, o, {}, s.edges); });
  EXPECT_TRUE(Contains(message, "GraphBudget: graph 1 has 10 nodes and 1 edges")) << message;
  EXPECT_TRUE(Contains(message, "at most 9 real nodes")) << message;
  o.too_big = TooBig::kSkip;
  const BatchPlan plan = Plan(s.nodes, o, {}, s.edges);
  EXPECT_EQ(plan.stats.skipped, 2);
  EXPECT_EQ(plan.skipped_examples, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Batches(plan), (std::vector<std::vector<int64_t>>{{0}}));
}

TEST(GraphPlannerTest, OptionsAreValidated) {
  auto message = [](const PlannerOptions& o) {
    return ThrownMessage<InvalidArgumentError>([&] { ValidatePlannerOptions(o); });
  };
  EXPECT_TRUE(Contains(message(GraphBudgetOptions{.nodes = 10, .edges = 5, .graphs = 1}),
                       "GraphBudget: graphs must be at least 2"));
  EXPECT_TRUE(Contains(message(GraphBudgetOptions{.nodes = 0, .edges = 5, .graphs = 3}),
                       "GraphBudget: nodes must be at least 1"));
  // One node slot is enough for graphs without nodes, as in jraph.
  const Sizes empty{{0, 0, 0}, {0, 0, 0}};
  EXPECT_EQ(
      Plan(empty.nodes, GraphBudgetOptions{.nodes = 1, .edges = 0, .graphs = 2}, {}, empty.edges)
          .num_batches(),
      3);
  EXPECT_TRUE(Contains(message(GraphBudgetOptions{.nodes = 4, .edges = -1, .graphs = 3}),
                       "edges must be >= 0"));
  EXPECT_TRUE(Contains(message(GraphBudgetOptions{.nodes = 4,
                                                  .edges = 1,
                                                  .graphs = 3,
                                                  .algorithm = GraphAlgorithm::kNextFit,
                                                  .open_batches = 4}),
                       "next_fit\" keeps one batch open"));
  EXPECT_TRUE(Contains(message(GraphBucketsOptions{.max_shapes = 0, .nodes = 4, .graphs = 3}),
                       "GraphBuckets: max_shapes must be a positive integer, found 0"));
  const Sizes s{{1, 2}, {0, 1}};
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] {
                         Plan(s.nodes, GraphBudgetOptions{.nodes = 4, .edges = 1, .graphs = 3});
                       }),
                       "expected an edge count for each of the 2 graphs, found 0"));
}

TEST(GraphPlannerTest, BucketsNeverPadMoreAndKeepTheirShapesUnderShuffles) {
  std::mt19937 rng(3);
  const Sizes s = RandomSizes(rng, 1500);
  const GraphBudgetOptions budget{.nodes = 300, .edges = 700, .graphs = 40};
  const GraphBucketsOptions buckets{.max_shapes = 4, .nodes = 300, .edges = 700, .graphs = 40};
  std::vector<int64_t> order(s.nodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<BatchShape> shapes;
  for (int trial = 0; trial < 3; ++trial) {
    if (trial > 0) std::shuffle(order.begin(), order.end(), rng);
    const BatchPlan one = Plan(s.nodes, budget, order, s.edges);
    const BatchPlan plan = Plan(s.nodes, buckets, order, s.edges);
    ExpectValid(plan, s);
    EXPECT_EQ(Batches(plan), Batches(one));  // The same batches, smaller shapes.
    EXPECT_LE(plan.shapes.size(), 4u);
    EXPECT_LE(PaddedSlots(plan), PaddedSlots(one));
    std::vector<BatchShape> sorted = plan.shapes;
    auto less = [](const BatchShape& a, const BatchShape& b) {
      return std::tie(a.rows, a.length, a.edges) < std::tie(b.rows, b.length, b.edges);
    };
    std::sort(sorted.begin(), sorted.end(), less);
    // Every epoch uses a subset of one set of shapes: those of index order.
    if (trial == 0) {
      shapes = sorted;
      EXPECT_TRUE(std::find(sorted.begin(), sorted.end(), one.shapes[0]) != sorted.end());
    }
    for (const BatchShape& shape : sorted) {
      EXPECT_TRUE(std::find(shapes.begin(), shapes.end(), shape) != shapes.end());
    }
  }
  // A remainder: 3 small graphs beside a full budget's worth gets a small shape.
  const Sizes tail{{2, 2, 2}, {2, 2, 2}};
  const BatchPlan small = Plan(
      tail.nodes, GraphBucketsOptions{.max_shapes = 2, .nodes = 100, .edges = 100, .graphs = 10},
      {}, tail.edges);
  ASSERT_EQ(small.num_batches(), 1);
  EXPECT_EQ(small.batch(0).shape, (BatchShape{.rows = 4, .length = 7, .segments = 0, .edges = 6}));
}

TEST(GraphPlannerTest, KeysRoundTrip) {
  for (const PlannerOptions& o : std::vector<PlannerOptions>{
           GraphBudgetOptions{.nodes = 64, .edges = 128, .graphs = 9},
           GraphBudgetOptions{.nodes = 64,
                              .edges = 0,
                              .graphs = 9,
                              .algorithm = GraphAlgorithm::kFirstFit,
                              .open_batches = 3,
                              .too_big = TooBig::kSkip},
           GraphBucketsOptions{.max_shapes = 4, .nodes = 64, .edges = 128, .graphs = 9},
           GraphBucketsOptions{
               .max_shapes = 4, .nodes = 64, .edges = 128, .graphs = 9, .shapes = {20, 30, 5}}}) {
    const std::string key = PlannerKey(o);
    EXPECT_EQ(ParsePlannerKey(key), o) << key;
  }
  EXPECT_EQ(PlannerKey(GraphBudgetOptions{.nodes = 64, .edges = 128, .graphs = 9}),
            "GraphBudget(nodes=64, edges=128, graphs=9, algorithm='best_fit', open_batches=None, "
            "too_big='error')");
  // Given shapes are written only when set: keys stored before them name
  // the same options.
  EXPECT_EQ(PlannerKey(GraphBucketsOptions{
                .max_shapes = 3, .nodes = 64, .edges = 128, .graphs = 9, .shapes = {20, 30, 5}}),
            "GraphBuckets(max_shapes=3, nodes=64, edges=128, graphs=9, algorithm='best_fit', "
            "open_batches=None, too_big='error', shapes=[20, 30, 5])");
}

// Given shapes are the shapes: each batch gets the smallest of them (and the
// budget) that holds it, whatever the graphs planned, and the batches are
// GraphBudget's.
TEST(GraphPlannerTest, GivenShapesAreUsedAsTheyAre) {
  std::mt19937 rng(5);
  const Sizes s = RandomSizes(rng, 600);
  const GraphBucketsOptions chosen{.max_shapes = 3, .nodes = 300, .edges = 700, .graphs = 40};
  std::vector<int64_t> all(s.nodes.size());
  std::iota(all.begin(), all.end(), 0);
  const std::vector<BatchShape> shapes = GraphBucketShapes(s.nodes, s.edges, all, chosen);
  ASSERT_EQ(shapes.front(), (BatchShape{.rows = 40, .length = 300, .segments = 0, .edges = 700}));
  GraphBucketsOptions given = chosen;
  for (size_t k = 1; k < shapes.size(); ++k) {
    given.shapes.insert(given.shapes.end(), {shapes[k].length, shapes[k].edges, shapes[k].rows});
  }
  EXPECT_EQ(GraphBucketShapes(s.nodes, s.edges, {0, 1}, given), shapes);
  // A part of the graphs: chosen anew its shapes would differ; given, they
  // are the same, and each batch's is the cheapest that holds it.
  const std::vector<int64_t> part(all.begin(), all.begin() + 150);
  const BatchPlan plan = Plan(s.nodes, given, part, s.edges);
  EXPECT_EQ(Batches(plan),
            Batches(Plan(s.nodes, GraphBudgetOptions{.nodes = 300, .edges = 700, .graphs = 40},
                         part, s.edges)));
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    ASSERT_TRUE(std::find(shapes.begin(), shapes.end(), view.shape) != shapes.end());
    int64_t nodes = 1, edges = 0;
    for (int64_t e : view.all_examples()) {
      nodes += s.nodes[static_cast<size_t>(e)];
      edges += s.edges[static_cast<size_t>(e)];
    }
    const int64_t graphs = view.stored_rows() + 1;
    for (const BatchShape& other : shapes) {  // no cheaper shape holds it
      if (nodes <= other.length && edges <= other.edges && graphs <= other.rows) {
        EXPECT_LE(view.shape.length + view.shape.edges, other.length + other.edges);
      }
    }
  }
  auto message = [](std::vector<int64_t> triples) {
    return ThrownMessage<InvalidArgumentError>([&] {
      ValidatePlannerOptions(GraphBucketsOptions{
          .max_shapes = 2, .nodes = 64, .edges = 128, .graphs = 9, .shapes = std::move(triples)});
    });
  };
  EXPECT_TRUE(Contains(message({20, 30}), "shapes must be (nodes, edges, graphs) triples"));
  EXPECT_TRUE(Contains(message({20, 300, 5}),
                       "shape 0 (nodes=20, edges=300, graphs=5) is not within the budget"));
  EXPECT_TRUE(Contains(message({20, 30, 1}), "is not within the budget"));
  EXPECT_TRUE(Contains(message({20, 30, 5, 30, 30, 5}),
                       "shapes give 3 distinct shapes with the budget, more than max_shapes=2"));
  // Repeats and the budget count once.
  EXPECT_NO_THROW(
      ValidatePlannerOptions(GraphBucketsOptions{.max_shapes = 2,
                                                 .nodes = 64,
                                                 .edges = 128,
                                                 .graphs = 9,
                                                 .shapes = {20, 30, 5, 64, 128, 9, 20, 30, 5}}));
}

}  // namespace
}  // namespace jaxbatch
