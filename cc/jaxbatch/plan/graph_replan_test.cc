#include "jaxbatch/plan/graph_replan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// The graphs of every batch of `plan`, in order.
std::vector<int64_t> AllGraphs(const BatchPlan& plan) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    for (const int64_t id : plan.batch(b).all_examples()) out.push_back(id);
  }
  return out;
}

TEST(GraphReplan, HalvesEachDimensionRoundingUp) {
  const std::vector<int64_t> nodes = {3, 5, 4, 2};
  const std::vector<int64_t> edges = {4, 8, 6, 2};
  const GraphBudgetOptions half = HalvedGraphBudget(
      nodes, edges, {0, 1, 2, 3}, BatchShape{.rows = 5, .length = 33, .edges = 41});
  EXPECT_EQ(half.graphs, 3);
  EXPECT_EQ(half.nodes, 17);
  EXPECT_EQ(half.edges, 21);
}

TEST(GraphReplan, NeverBelowTheLargestGraph) {
  const std::vector<int64_t> nodes = {3, 20, 4};
  const std::vector<int64_t> edges = {4, 30, 6};
  const GraphBudgetOptions half =
      HalvedGraphBudget(nodes, edges, {0, 1, 2}, BatchShape{.rows = 4, .length = 32, .edges = 40});
  EXPECT_EQ(half.nodes, 21);  // 20 nodes + the padding node
  EXPECT_EQ(half.edges, 30);
  EXPECT_EQ(half.graphs, 2);
}

TEST(GraphReplan, EveryGraphOnceInSmallerBatches) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> nodes, edges, ids;
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    for (int64_t i = 0; i < 40; ++i) {
      nodes.push_back(std::uniform_int_distribution<int64_t>(1, 9)(rng));
      edges.push_back(2 * nodes.back());
    }
    for (int64_t i = 0; i < n; ++i) ids.push_back((i * 7 + trial) % 40);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    const BatchShape failed{.rows = 16, .length = 128, .edges = 256};
    const BatchPlan plan = ReplanGraphsHalved(nodes, edges, ids, failed);
    std::vector<int64_t> got = AllGraphs(plan);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, ids);
    for (const BatchShape& s : plan.shapes) {
      EXPECT_EQ(s, (BatchShape{.rows = 8, .length = 64, .edges = 128}));
    }
  }
}

TEST(GraphReplan, RefusesABatchThatCannotShrink) {
  const std::vector<int64_t> nodes = {7};
  const std::vector<int64_t> edges = {10};
  const std::string message = ThrownMessage<InvalidArgumentError>([&] {
    ReplanGraphsHalved(nodes, edges, {0}, BatchShape{.rows = 2, .length = 8, .edges = 10});
  });
  EXPECT_TRUE(Contains(message, "cannot be halved")) << message;
  EXPECT_TRUE(Contains(message, "8 node slots and 10 edge slots")) << message;
}

TEST(GraphReplan, RefusesAnUnknownGraph) {
  const std::vector<int64_t> nodes = {3};
  const std::vector<int64_t> edges = {2};
  const std::string message = ThrownMessage<InvalidArgumentError>([&] {
    ReplanGraphsHalved(nodes, edges, {4}, BatchShape{.rows = 4, .length = 8, .edges = 8});
  });
  EXPECT_TRUE(Contains(message, "graph 4 is not one of the 1 graphs")) << message;
}

}  // namespace
}  // namespace jaxbatch
