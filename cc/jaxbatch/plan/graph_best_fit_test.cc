#include "jaxbatch/plan/graph_best_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "jaxbatch/plan/graph_planner.h"

namespace jaxbatch {
namespace {

struct Sizes {
  std::vector<int64_t> nodes;
  std::vector<int64_t> edges;
};

// Molecule-like sizes: heavy atoms from a gamma distribution (right-skewed,
// as real molecules are), bonds = atoms - 1 + rings, an edge per bond each
// way. `big` of them come from a second, larger family (a library that mixes
// fragments and drug-sized molecules).
Sizes Molecules(uint32_t seed, int64_t count, double mean_atoms, double shape, double big = 0.0,
                double big_mean_atoms = 0.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  Sizes s;
  for (int64_t i = 0; i < count; ++i) {
    const double mean = coin(rng) < big ? big_mean_atoms : mean_atoms;
    std::gamma_distribution<double> atoms(shape, mean / shape);
    const int64_t n = std::max<int64_t>(1, std::llround(atoms(rng)));
    const int64_t rings = n > 2 ? std::binomial_distribution<int64_t>(n, 0.1)(rng) : 0;
    s.nodes.push_back(n);
    s.edges.push_back(2 * (n - 1 + rings));
  }
  return s;
}

// Flax's ogbg budget as jraph counts it: 576 real nodes, 1,088 edges and 32
// real graphs (577 node slots and 33 graph slots with the padding).
constexpr GraphRoom kFlax{.nodes = 576, .edges = 1088, .graphs = 32};

// max(sum nodes / nodes, sum edges / edges, count / graphs): no plan has
// fewer batches.
double LowerBound(const Sizes& s, const GraphRoom& room) {
  const double n = static_cast<double>(std::accumulate(s.nodes.begin(), s.nodes.end(), int64_t{0}));
  const double e = static_cast<double>(std::accumulate(s.edges.begin(), s.edges.end(), int64_t{0}));
  return std::max({n / static_cast<double>(room.nodes), e / static_cast<double>(room.edges),
                   static_cast<double>(s.nodes.size()) / static_cast<double>(room.graphs)});
}

std::vector<int64_t> Shuffled(int64_t count, uint32_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  return ids;
}

// Every id once, each batch within `room`, each batch's graphs in the order
// given.
void ExpectExactlyOnceWithinRoom(const std::vector<std::vector<int64_t>>& batches, const Sizes& s,
                                 const std::vector<int64_t>& ids, const GraphRoom& room) {
  std::vector<int64_t> position(s.nodes.size(), -1);
  for (size_t p = 0; p < ids.size(); ++p)
    position[static_cast<size_t>(ids[p])] = static_cast<int64_t>(p);
  std::vector<int> seen(s.nodes.size(), 0);
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::vector<int64_t>& batch = batches[b];
    ASSERT_FALSE(batch.empty()) << "batch " << b;
    int64_t nodes = 0;
    int64_t edges = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const size_t id = static_cast<size_t>(batch[i]);
      ++seen[id];
      nodes += s.nodes[id];
      edges += s.edges[id];
      if (i > 0) {
        EXPECT_LT(position[static_cast<size_t>(batch[i - 1])], position[id]);
      }
    }
    EXPECT_LE(nodes, room.nodes) << "batch " << b;
    EXPECT_LE(edges, room.edges) << "batch " << b;
    EXPECT_LE(static_cast<int64_t>(batch.size()), room.graphs) << "batch " << b;
  }
  for (int64_t id : ids) EXPECT_EQ(seen[static_cast<size_t>(id)], 1) << "graph " << id;
}

TEST(GraphBestFitTest, MoleculesAtFlaxsBudgetComeWithin4PercentOfTheBound) {
  const struct {
    const char* name;
    Sizes sizes;
  } cases[] = {
      {"drug-like", Molecules(1, 5000, 16.0, 2.0)},
      {"fragments and drugs", Molecules(2, 5000, 10.0, 6.0, 0.3, 33.0)},
      {"near every budget", Molecules(3, 5000, 17.0, 3.0)},
  };
  for (const auto& [name, s] : cases) {
    const double bound = LowerBound(s, kFlax);
    for (uint32_t seed : {0u, 1u, 2u}) {
      SCOPED_TRACE(::testing::Message() << name << ", shuffle " << seed);
      const std::vector<int64_t> ids = Shuffled(static_cast<int64_t>(s.nodes.size()), seed);
      const auto batches = PackGraphRuns(s.nodes, s.edges, ids, kFlax, kDefaultOpenBatches);
      ExpectExactlyOnceWithinRoom(batches, s, ids, kFlax);
      EXPECT_LE(static_cast<double>(batches.size()), 1.04 * bound) << "bound " << bound;
    }
  }
}

TEST(GraphBestFitTest, EveryGraphOnceWithinAnyBudgetAndWindow) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const int64_t count = std::uniform_int_distribution<int64_t>(0, 300)(rng);
    const GraphRoom room{.nodes = std::uniform_int_distribution<int64_t>(0, 60)(rng),
                         .edges = std::uniform_int_distribution<int64_t>(0, 90)(rng),
                         .graphs = std::uniform_int_distribution<int64_t>(1, 12)(rng)};
    Sizes s;
    for (int64_t i = 0; i < count; ++i) {
      s.nodes.push_back(std::uniform_int_distribution<int64_t>(0, room.nodes)(rng));
      s.edges.push_back(std::uniform_int_distribution<int64_t>(0, room.edges)(rng));
    }
    const int64_t window = std::uniform_int_distribution<int64_t>(1, 20)(rng);
    const std::vector<int64_t> ids = Shuffled(count, static_cast<uint32_t>(trial));
    const auto batches = PackGraphRuns(s.nodes, s.edges, ids, room, window);
    ExpectExactlyOnceWithinRoom(batches, s, ids, room);
    EXPECT_EQ(PackGraphRuns(s.nodes, s.edges, ids, room, window), batches);  // deterministic
  }
}

TEST(GraphBestFitTest, OneBatchAtATimeIsNextFit) {
  const Sizes s = Molecules(4, 700, 16.0, 2.0);
  const std::vector<int64_t> ids = Shuffled(700, 9);
  std::vector<std::vector<int64_t>> next_fit(1);
  int64_t nodes = 0;
  int64_t edges = 0;
  for (int64_t id : ids) {
    const size_t i = static_cast<size_t>(id);
    if (static_cast<int64_t>(next_fit.back().size()) == kFlax.graphs ||
        nodes + s.nodes[i] > kFlax.nodes || edges + s.edges[i] > kFlax.edges) {
      next_fit.emplace_back();
      nodes = edges = 0;
    }
    next_fit.back().push_back(id);
    nodes += s.nodes[i];
    edges += s.edges[i];
  }
  EXPECT_EQ(PackGraphRuns(s.nodes, s.edges, ids, kFlax, 1), next_fit);
}

TEST(GraphBestFitTest, AWiderWindowOrMoreDataDoesNotLoseTheBound) {
  // Many batches at a time, and a budget where nodes bind instead.
  const Sizes s = Molecules(6, 8000, 25.0, 4.0);
  const std::vector<int64_t> ids = Shuffled(8000, 3);
  for (int64_t window : {int64_t{4}, int64_t{64}, int64_t{1024}, int64_t{1} << 62}) {
    SCOPED_TRACE(::testing::Message() << "window " << window);
    const auto batches = PackGraphRuns(s.nodes, s.edges, ids, kFlax, window);
    ExpectExactlyOnceWithinRoom(batches, s, ids, kFlax);
    EXPECT_LE(static_cast<double>(batches.size()), 1.04 * LowerBound(s, kFlax));
  }
}

}  // namespace
}  // namespace jaxbatch
