#include "jaxbatch/plan/graph_fit.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

struct Sizes {
  std::vector<int64_t> nodes;
  std::vector<int64_t> edges;
};

// Molecule-like sizes: nodes 1..max_nodes, edges about `ratio` times the
// nodes, with a few large graphs in the tail.
Sizes RandomSizes(uint32_t seed, int64_t count, int64_t max_nodes = 30, int64_t ratio = 2) {
  std::mt19937 rng(seed);
  Sizes s;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_nodes));
    s.nodes.push_back(k);
    s.edges.push_back(ratio * (k - 1) + static_cast<int64_t>(rng() % 4));
  }
  return s;
}

// Real nodes and edges over slots, times real graphs over what the batches
// could hold (graphs - 1 each), of one plan: the fit's score, computed here
// from the plan's stats.
double Score(const BatchPlan& plan, int64_t graphs) {
  const PlanStats& s = plan.stats;
  const double slots = static_cast<double>(s.real_elements + s.real_edges) /
                       static_cast<double>(s.padded_elements + s.padded_edges);
  return slots * static_cast<double>(s.real_graphs) / static_cast<double>(s.batches * (graphs - 1));
}

std::vector<int64_t> Iota(size_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

TEST(GraphFit, HoldsEveryGraphAndRespectsTheMultiple) {
  for (uint32_t seed = 0; seed < 4; ++seed) {
    const Sizes s = RandomSizes(seed, 300, 20 + 10 * seed);
    for (int64_t multiple : {1, 8, 64}) {
      const GraphBudgetOptions b =
          FitGraphBudget(s.nodes, s.edges, {}, {.graphs = 16, .multiple = multiple});
      EXPECT_EQ(b.graphs, 16);
      EXPECT_EQ(b.nodes % multiple, 0);
      EXPECT_EQ(b.edges % multiple, 0);
      EXPECT_GE(b.nodes - 1, *std::max_element(s.nodes.begin(), s.nodes.end()));
      EXPECT_GE(b.edges, *std::max_element(s.edges.begin(), s.edges.end()));
      // Plans without a graph too big (too_big is kError).
      EXPECT_EQ(PlanGraphBudget(s.nodes, s.edges, Iota(s.nodes.size()), b).stats.skipped, 0);
    }
  }
}

TEST(GraphFit, KeepsThePlannersOtherOptionsAndIsDeterministic) {
  const Sizes s = RandomSizes(7, 400);
  const GraphBucketsOptions planner{
      .max_shapes = 3, .algorithm = GraphAlgorithm::kFirstFit, .open_batches = 4};
  const GraphBucketsOptions a = FitGraphBuckets(s.nodes, s.edges, {}, {.graphs = 9}, planner);
  const GraphBucketsOptions b = FitGraphBuckets(s.nodes, s.edges, {}, {.graphs = 9}, planner);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.max_shapes, 3);
  EXPECT_EQ(a.algorithm, GraphAlgorithm::kFirstFit);
  EXPECT_EQ(a.open_batches, 4);
  EXPECT_EQ(a.graphs, 9);
}

// The fit is within 2 points of the best budget of an exhaustive sweep,
// both scored by planning the same graphs in the same order.
TEST(GraphFit, NearTheBestOfAnExhaustiveSweep) {
  for (uint32_t seed = 0; seed < 3; ++seed) {
    const Sizes s = RandomSizes(seed, 250, 25, 2 + static_cast<int64_t>(seed));
    std::vector<int64_t> order = Iota(s.nodes.size());
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    const int64_t graphs = 12;
    const int64_t multiple = 4;
    GraphFitScore score;
    const GraphBudgetOptions fitted = FitGraphBudget(
        s.nodes, s.edges, order, {.graphs = graphs, .multiple = multiple}, {}, &score);
    const double fitted_score = Score(PlanGraphBudget(s.nodes, s.edges, order, fitted), graphs);
    EXPECT_NEAR(fitted_score, score.score, 1e-12);
    EXPECT_LE(score.candidates, 512);
    const int64_t max_nodes = *std::max_element(s.nodes.begin(), s.nodes.end());
    const int64_t max_edges = *std::max_element(s.edges.begin(), s.edges.end());
    double best = 0;
    for (int64_t n = (max_nodes + 1 + multiple - 1) / multiple * multiple; n <= 400;
         n += multiple) {
      for (int64_t e = (max_edges + multiple - 1) / multiple * multiple; e <= 1000;
           e += 3 * multiple) {
        const GraphBudgetOptions o{.nodes = n, .edges = e, .graphs = graphs};
        best = std::max(best, Score(PlanGraphBudget(s.nodes, s.edges, order, o), graphs));
      }
    }
    EXPECT_GE(fitted_score, best - 0.02) << "seed " << seed << ": best of the sweep " << best;
  }
}

TEST(GraphFit, FollowsTheDataNodeToEdgeRatio) {
  for (int64_t ratio : {1, 3, 6}) {
    const Sizes s = RandomSizes(3, 800, 30, ratio);
    const double data = std::accumulate(s.edges.begin(), s.edges.end(), 0.0) /
                        std::accumulate(s.nodes.begin(), s.nodes.end(), 0.0);
    const GraphBudgetOptions b = FitGraphBudget(s.nodes, s.edges, {}, {.graphs = 32});
    const double fitted = static_cast<double>(b.edges) / static_cast<double>(b.nodes - 1);
    EXPECT_NEAR(fitted / data, 1.0, 0.1) << "ratio " << ratio;
  }
}

TEST(GraphFit, EmptyGraphsAndNoEdges) {
  const std::vector<int64_t> nodes = {0, 0, 3, 1, 2};
  const std::vector<int64_t> edges = {0, 0, 0, 0, 0};
  const GraphBudgetOptions b = FitGraphBudget(nodes, edges, {}, {.graphs = 3, .multiple = 2});
  EXPECT_GE(b.nodes, 4);
  EXPECT_EQ(b.nodes % 2, 0);
  EXPECT_EQ(b.edges % 2, 0);
}

TEST(GraphFit, BadArgumentsNameWhatWasExpectedAndFound) {
  const std::vector<int64_t> nodes = {3, 4};
  const std::vector<int64_t> edges = {2, 6};
  auto fit = [&](std::vector<int64_t> n, std::vector<int64_t> e,
                 std::optional<std::vector<int64_t>> order, GraphFitOptions f) {
    const PlanOrder o = order ? PlanOrder(*order) : std::nullopt;
    return ThrownMessage<InvalidArgumentError>([&] { FitGraphBudget(n, e, o, f); });
  };
  EXPECT_EQ(fit({}, {}, {}, {.graphs = 4}),
            "GraphBudget.fit: expected at least one graph to fit to, found none");
  EXPECT_TRUE(
      Contains(fit(nodes, edges, {}, {.graphs = 1}), "GraphBudget.fit: graphs must be at least 2"));
  EXPECT_TRUE(Contains(fit(nodes, edges, {}, {.graphs = 1}), "found 1"));
  EXPECT_EQ(fit(nodes, edges, {}, {.graphs = 4, .multiple = 0}),
            "GraphBudget.fit: multiple must be a positive integer, found 0");
  EXPECT_EQ(fit(nodes, {2}, {}, {.graphs = 4}),
            "GraphBudget.fit: expected an edge count for each of the 2 graphs, found 1");
  EXPECT_EQ(fit(nodes, edges, std::vector<int64_t>{0, 2}, {.graphs = 4}),
            "GraphBudget.fit: order[1] = 2 is not a graph id; expected 0 <= id < 2");
  // An empty order is nothing to fit to, not all graphs; a repeated id is refused.
  EXPECT_EQ(fit(nodes, edges, std::vector<int64_t>{}, {.graphs = 4}),
            "GraphBudget.fit: order must name at least one graph, found none");
  EXPECT_EQ(fit(nodes, edges, std::vector<int64_t>{1, 1}, {.graphs = 4}),
            "GraphBudget.fit: order[1] = 1 lists that graph a second time; each graph may be "
            "planned once");
  EXPECT_EQ(fit({3, -1}, edges, {}, {.graphs = 4}),
            "GraphBudget.fit: graph 1: expected node and edge counts >= 0, found -1 nodes and 6 "
            "edges");
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>(
                           [&] { FitGraphBuckets(nodes, edges, {}, {.graphs = 4}, {}); }),
                       "GraphBuckets: max_shapes must be a positive integer, found 0"));
  // A graph no int32 budget can hold: the planner's own extent check.
  EXPECT_TRUE(Contains(fit({int64_t{1} << 40}, {0}, {}, {.graphs = 4}), "exceeds 2147483647"));
}

}  // namespace
}  // namespace jaxbatch
