#include "jaxbatch/plan/graph_best_fit.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "jaxbatch/base/checked.h"

namespace jaxbatch {
namespace {

// Per unit of node, edge and graph: how much one batch's room is worth, as
// the share of `k` batches' budget that a run fills in that dimension over
// the budget itself. A tight dimension weighs more, one with plenty of room
// next to nothing, so "largest" and "most room" mean what binds.
struct Weights {
  double node = 0;
  double edge = 0;
  double graph = 0;
};

double Share(int64_t total, int64_t room, int64_t k) {
  if (room == 0) return 0.0;  // nothing of it fits, nor is there any: it cannot bind
  const double budget = static_cast<double>(room) * static_cast<double>(k);
  return static_cast<double>(total) / budget / static_cast<double>(room);
}

// (a + b - 1) / b for a >= 0, b > 0; 0 for b == 0 (then a is 0 too).
int64_t CeilDiv(int64_t a, int64_t b) { return b == 0 ? 0 : a / b + (a % b != 0 ? 1 : 0); }

// The last run tries this many batch counts above its bound before it
// spreads over k batches like any other run.
constexpr int64_t kLastRunTries = 2;

// How finely graphs are ordered by size: finer changes no batch count on
// molecules (measured), and costs a larger counting sort.
constexpr size_t kSizeLevels = 64;

// Which batch a graph goes to among those that hold it.
enum class Into { kMostRoom, kLeastRoom };

class RunPacker {
 public:
  RunPacker(std::span<const int64_t> nodes, std::span<const int64_t> edges,
            std::span<const int64_t> ids, const GraphRoom& room)
      : nodes_(nodes), edges_(edges), ids_(ids), room_(room) {
    node_sum_.assign(ids.size() + 1, 0);
    edge_sum_.assign(ids.size() + 1, 0);
    for (size_t p = 0; p < ids.size(); ++p) {
      node_sum_[p + 1] = SaturatingAdd(node_sum_[p], NodesAt(static_cast<int64_t>(p)));
      edge_sum_[p + 1] = SaturatingAdd(edge_sum_[p], EdgesAt(static_cast<int64_t>(p)));
    }
  }

  std::vector<std::vector<int64_t>> Pack(int64_t k) {
    std::vector<std::vector<int64_t>> out;
    const int64_t count = static_cast<int64_t>(ids_.size());
    std::vector<int64_t> waiting;  // positions a run left over, ascending
    for (int64_t next = 0; next < count || !waiting.empty();) {
      const int64_t end = LongestRun(waiting, next, k);
      run_ = waiting;
      for (int64_t p = next; p < end; ++p) run_.push_back(p);
      Order(static_cast<int64_t>(waiting.size()), k);
      next = end;
      if (next == count && PackLast(&out)) break;
      Place(k);
      waiting = Emit(&out);
    }
    return out;
  }

 private:
  int64_t NodesAt(int64_t p) const {
    return nodes_[static_cast<size_t>(ids_[static_cast<size_t>(p)])];
  }
  int64_t EdgesAt(int64_t p) const {
    return edges_[static_cast<size_t>(ids_[static_cast<size_t>(p)])];
  }

  // The nodes and edges of the graphs at `positions`.
  std::pair<int64_t, int64_t> Sums(const std::vector<int64_t>& positions) const {
    int64_t nodes = 0;
    int64_t edges = 0;
    for (int64_t p : positions) {
      nodes = SaturatingAdd(nodes, NodesAt(p));
      edges = SaturatingAdd(edges, EdgesAt(p));
    }
    return {nodes, edges};
  }

  // The end of the longest run of positions from `next` that, with the
  // graphs `waiting`, fits k batches' nodes, edges and graphs. At least one
  // graph when none waits: each fits a batch alone.
  int64_t LongestRun(const std::vector<int64_t>& waiting, int64_t next, int64_t k) const {
    const auto [nodes, edges] = Sums(waiting);
    const int64_t count = static_cast<int64_t>(ids_.size());
    const int64_t slots = SaturatingMul(k, room_.graphs) - static_cast<int64_t>(waiting.size());
    int64_t end = std::min(count, SaturatingAdd(next, std::max<int64_t>(slots, 0)));
    auto last_within = [&](const std::vector<int64_t>& sum, int64_t room, int64_t used) {
      const int64_t limit =
          SaturatingAdd(sum[static_cast<size_t>(next)], SaturatingMul(k, room) - used);
      const auto it = std::upper_bound(sum.begin() + next, sum.begin() + end + 1, limit);
      return std::max(next, static_cast<int64_t>(it - sum.begin()) - 1);
    };
    end = last_within(node_sum_, room_.nodes, nodes);
    end = last_within(edge_sum_, room_.edges, edges);
    return waiting.empty() ? std::max(end, std::min(next + 1, count)) : end;
  }

  // Sets weights_ from run_ and order_ to its indices: the graphs that
  // waited (the first `waited`) first, so that none waits twice in a row
  // unless it fits nowhere even then, then largest first, by size in
  // kSizeLevels steps (a counting sort: a comparison sort of random keys
  // cost more than the rest of planning); ties in run order.
  void Order(int64_t waited, int64_t k) {
    const auto [nodes, edges] = Sums(run_);
    weights_ = {.node = Share(nodes, room_.nodes, k),
                .edge = Share(edges, room_.edges, k),
                .graph = Share(static_cast<int64_t>(run_.size()), room_.graphs, k)};
    const size_t first = static_cast<size_t>(waited);
    key_.resize(run_.size());
    double low = 0.0;
    double high = 0.0;
    for (size_t i = first; i < run_.size(); ++i) {
      key_[i] = weights_.node * static_cast<double>(NodesAt(run_[i])) +
                weights_.edge * static_cast<double>(EdgesAt(run_[i]));
      low = i == first ? key_[i] : std::min(low, key_[i]);
      high = i == first ? key_[i] : std::max(high, key_[i]);
    }
    const double scale = high > low ? static_cast<double>(kSizeLevels - 1) / (high - low) : 0.0;
    std::vector<size_t> level(run_.size(), 0);
    std::array<size_t, kSizeLevels + 1> start{};  // of each level, largest first
    for (size_t i = first; i < run_.size(); ++i) {
      level[i] = kSizeLevels - 1 - static_cast<size_t>((key_[i] - low) * scale + 0.5);
      ++start[level[i] + 1];
    }
    std::partial_sum(start.begin(), start.end(), start.begin());
    order_.resize(run_.size());
    std::iota(order_.begin(), order_.begin() + waited, 0);
    for (size_t i = first; i < run_.size(); ++i) {
      order_[first + start[level[i]]++] = static_cast<int64_t>(i);
    }
  }

  // The last run: into as few batches as the spread fits it all in (up to
  // the k its total fits), with nothing left over.
  bool PackLast(std::vector<std::vector<int64_t>>* out) {
    const auto [nodes, edges] = Sums(run_);
    const int64_t graphs = static_cast<int64_t>(run_.size());
    const int64_t fewest = std::max({int64_t{1}, CeilDiv(nodes, room_.nodes),
                                     CeilDiv(edges, room_.edges), CeilDiv(graphs, room_.graphs)});
    for (int64_t batches = fewest; batches <= graphs; ++batches) {
      if (Place(batches) == 0) {
        Emit(out);
        return true;
      }
      if (batches >= kLastRunTries + fewest) break;
    }
    return false;
  }

  double Room(size_t b) const {
    auto left = [](int64_t room, int64_t used) {
      return static_cast<double>(room) - static_cast<double>(used);
    };
    return weights_.node * left(room_.nodes, load_nodes_[b]) +
           weights_.edge * left(room_.edges, load_edges_[b]) +
           weights_.graph * left(room_.graphs, load_graphs_[b]);
  }

  bool Holds(size_t b, int64_t p) const {
    return load_graphs_[b] < room_.graphs && load_nodes_[b] + NodesAt(p) <= room_.nodes &&
           load_edges_[b] + EdgesAt(p) <= room_.edges;
  }

  // Spreads run_ over k batches, or, where that leaves graphs over, fills
  // the fullest batches first if that leaves fewer (it does where a batch
  // holds only a few graphs: large graphs want a batch's whole room).
  // Returns how many graphs none held.
  int64_t Place(int64_t k) {
    const int64_t spread = Spread(k, Into::kMostRoom);
    if (spread == 0) return 0;
    const int64_t filled = Spread(k, Into::kLeastRoom);
    return filled < spread ? filled : Spread(k, Into::kMostRoom);
  }

  // run_'s graphs in order_, each into the batch of the k with the most
  // (or least) room that holds it; bin_ says which (-1: none held it).
  // Returns how many none held.
  int64_t Spread(int64_t k, Into into) {
    const size_t n = static_cast<size_t>(k);
    load_nodes_.assign(n, 0);
    load_edges_.assign(n, 0);
    load_graphs_.assign(n, 0);
    room_left_.assign(n, 0.0);
    for (size_t b = 0; b < n; ++b) room_left_[b] = Room(b);
    bin_.assign(run_.size(), -1);
    int64_t unplaced = 0;
    for (int64_t i : order_) {
      const int64_t p = run_[static_cast<size_t>(i)];
      size_t chosen = n;
      for (size_t b = 0; b < n; ++b) {
        const bool better =
            chosen == n || (into == Into::kMostRoom ? room_left_[b] > room_left_[chosen]
                                                    : room_left_[b] < room_left_[chosen]);
        if (better && Holds(b, p)) chosen = b;
      }
      if (chosen == n) {
        ++unplaced;
        continue;
      }
      load_nodes_[chosen] += NodesAt(p);
      load_edges_[chosen] += EdgesAt(p);
      load_graphs_[chosen] += 1;
      room_left_[chosen] = Room(chosen);
      bin_[static_cast<size_t>(i)] = static_cast<int64_t>(chosen);
    }
    return unplaced;
  }

  // Appends the batches of the last Spread in the order of their first
  // graph, each graph in run order; returns the positions none held.
  std::vector<int64_t> Emit(std::vector<std::vector<int64_t>>* out) const {
    std::vector<int64_t> slot(load_graphs_.size(), -1);  // batch -> index in *out
    std::vector<int64_t> left;
    for (size_t i = 0; i < run_.size(); ++i) {
      const int64_t b = bin_[i];
      if (b < 0) {
        left.push_back(run_[i]);
        continue;
      }
      int64_t& s = slot[static_cast<size_t>(b)];
      if (s < 0) {
        s = static_cast<int64_t>(out->size());
        out->emplace_back();
      }
      (*out)[static_cast<size_t>(s)].push_back(ids_[static_cast<size_t>(run_[i])]);
    }
    return left;
  }

  std::span<const int64_t> nodes_;
  std::span<const int64_t> edges_;
  std::span<const int64_t> ids_;
  GraphRoom room_;
  std::vector<int64_t> node_sum_;  // prefix sums along ids_
  std::vector<int64_t> edge_sum_;
  std::vector<int64_t> run_;  // positions in ids_ of the run, ascending
  Weights weights_;
  std::vector<double> key_;     // per run_ index
  std::vector<int64_t> order_;  // run_ indices in the order they are placed
  std::vector<int64_t> load_nodes_;
  std::vector<int64_t> load_edges_;
  std::vector<int64_t> load_graphs_;
  std::vector<double> room_left_;
  std::vector<int64_t> bin_;  // per run_ index: its batch, or -1
};

}  // namespace

std::vector<std::vector<int64_t>> PackGraphRuns(std::span<const int64_t> nodes,
                                                std::span<const int64_t> edges,
                                                std::span<const int64_t> ids, const GraphRoom& room,
                                                int64_t batches) {
  // No run needs more batches than it has graphs (open_batches may be any
  // positive int64; a batch is memory).
  const int64_t most = std::max<int64_t>(static_cast<int64_t>(ids.size()), 1);
  return RunPacker(nodes, edges, ids, room).Pack(std::clamp<int64_t>(batches, 1, most));
}

}  // namespace jaxbatch
