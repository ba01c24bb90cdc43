#include "jaxbatch/plan/graph_planner.h"

#include <algorithm>
#include <array>
#include <string>
#include <tuple>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/graph_best_fit.h"

namespace jaxbatch {
namespace {

// How many real nodes, edges and graphs one batch may hold.
using Capacity = GraphRoom;

Capacity CapacityOf(int64_t nodes, int64_t edges, int64_t graphs) {
  return {.nodes = nodes - 1, .edges = edges, .graphs = graphs - 1};
}

[[noreturn]] void ThrowTooBig(int64_t id, int64_t n, int64_t e, const Capacity& cap,
                              const char* planner) {
  throw InvalidArgumentError(StrCat(
      planner, ": graph ", id, " has ", n, " nodes and ", e, " edges, but a batch holds at most ",
      cap.nodes, " real nodes (nodes - 1: one node is padding) and ", cap.edges,
      " edges; raise the budget or pass too_big=\"skip\" to leave such graphs out"));
}

struct OpenBatch {
  int64_t nodes = 0;
  int64_t edges = 0;
  std::vector<int64_t> ids;
};

// Room left, as a fraction of each budget: what "the fullest batch" has
// least of.
double Slack(const Capacity& cap, int64_t nodes, int64_t edges) {
  const double n = cap.nodes == 0
                       ? 0.0
                       : static_cast<double>(cap.nodes - nodes) / static_cast<double>(cap.nodes);
  const double e = cap.edges == 0
                       ? 0.0
                       : static_cast<double>(cap.edges - edges) / static_cast<double>(cap.edges);
  return n + e;
}

struct Packed {
  std::vector<std::vector<int64_t>> batches;  // in the order they close
  std::vector<int64_t> skipped;
};

// Best fit plans `window` batches at a time (graph_best_fit.h) over the
// graphs within the budget.
Packed PackRuns(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                const std::vector<int64_t>& ids, const Capacity& cap, int64_t window,
                TooBig too_big, const char* planner) {
  Packed out;
  std::vector<int64_t> fit;
  fit.reserve(ids.size());
  for (int64_t id : ids) {
    const int64_t n = nodes[static_cast<size_t>(id)];
    const int64_t e = edges[static_cast<size_t>(id)];
    if (n <= cap.nodes && e <= cap.edges) {
      fit.push_back(id);
    } else if (too_big == TooBig::kSkip) {
      out.skipped.push_back(id);
    } else {
      ThrowTooBig(id, n, e, cap, planner);
    }
  }
  out.batches = PackGraphRuns(nodes, edges, fit, cap, window);
  return out;
}

// Graphs `ids`, in order, into batches of capacity `cap`: next fit and
// first fit keep at most `window` open at once (1: next fit), best fit plans
// `window` at a time.
Packed PackGraphs(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                  const std::vector<int64_t>& ids, const Capacity& cap, GraphAlgorithm algorithm,
                  int64_t window, TooBig too_big, const char* planner) {
  if (algorithm == GraphAlgorithm::kBestFit) {
    return PackRuns(nodes, edges, ids, cap, window, too_big, planner);
  }
  Packed out;
  std::vector<OpenBatch> open;
  auto close = [&](size_t k) {
    out.batches.push_back(std::move(open[k].ids));
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
  };
  for (int64_t id : ids) {
    const int64_t n = nodes[static_cast<size_t>(id)];
    const int64_t e = edges[static_cast<size_t>(id)];
    if (n > cap.nodes || e > cap.edges) {
      if (too_big == TooBig::kSkip) {
        out.skipped.push_back(id);
        continue;
      }
      ThrowTooBig(id, n, e, cap, planner);
    }
    size_t chosen = open.size();
    for (size_t k = 0; k < open.size(); ++k) {
      if (open[k].nodes + n <= cap.nodes && open[k].edges + e <= cap.edges) {
        chosen = k;
        break;
      }
    }
    if (chosen == open.size()) {
      if (static_cast<int64_t>(open.size()) == window) {
        size_t fullest = 0;
        for (size_t k = 1; k < open.size(); ++k) {
          if (Slack(cap, open[k].nodes, open[k].edges) <
              Slack(cap, open[fullest].nodes, open[fullest].edges)) {
            fullest = k;
          }
        }
        close(fullest);
      }
      open.emplace_back();
      chosen = open.size() - 1;
    }
    OpenBatch& b = open[chosen];
    b.nodes += n;
    b.edges += e;
    b.ids.push_back(id);
    if (static_cast<int64_t>(b.ids.size()) == cap.graphs) close(chosen);
  }
  while (!open.empty()) close(0);
  return out;
}

int64_t WindowOf(GraphAlgorithm algorithm, const std::optional<int64_t>& open_batches) {
  return algorithm == GraphAlgorithm::kNextFit ? 1 : open_batches.value_or(kDefaultOpenBatches);
}

void ValidateBudget(int64_t nodes, int64_t edges, int64_t graphs, GraphAlgorithm algorithm,
                    const std::optional<int64_t>& open_batches, const char* planner) {
  if (nodes < 1) {
    throw InvalidArgumentError(StrCat(planner, ": nodes must be at least 1 (the padding graph's ",
                                      "node, as jraph.pad_with_graphs needs), found ", nodes));
  }
  if (edges < 0) {
    throw InvalidArgumentError(StrCat(planner, ": edges must be >= 0, found ", edges));
  }
  if (graphs < 2) {
    throw InvalidArgumentError(StrCat(planner, ": graphs must be at least 2 (one real graph and ",
                                      "the padding graph, as jraph.pad_with_graphs needs), found ",
                                      graphs));
  }
  if (open_batches && *open_batches <= 0) {
    throw InvalidArgumentError(StrCat(planner, ": open_batches must be a positive integer, found ",
                                      *open_batches, " (leave it unset for ", kDefaultOpenBatches,
                                      ")"));
  }
  if (open_batches && algorithm == GraphAlgorithm::kNextFit) {
    throw InvalidArgumentError(StrCat(planner, ": algorithm=\"next_fit\" keeps one batch open; ",
                                      "leave open_batches unset, or use \"first_fit\" or ",
                                      "\"best_fit\" with open_batches=", *open_batches));
  }
  // Within these every size sum and product of a batch fits an int64 too.
  CheckExtent(nodes, planner, "nodes", "n_node, senders and receivers");
  CheckExtent(edges, planner, "edges", "n_edge");
  CheckExtent(graphs, planner, "graphs", "graph ids (node_graph)");
}

BatchShape ShapeOf(int64_t nodes, int64_t edges, int64_t graphs) {
  return {.rows = graphs, .length = nodes, .segments = 0, .edges = edges};
}

// What a batch of `ids` needs: its nodes + 1, edges, graphs + 1.
BatchShape NeedOf(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                  const std::vector<int64_t>& ids) {
  int64_t n = 1;
  int64_t e = 0;
  for (int64_t id : ids) {
    n = SaturatingAdd(n, nodes[static_cast<size_t>(id)]);
    e = SaturatingAdd(e, edges[static_cast<size_t>(id)]);
  }
  return ShapeOf(n, e, static_cast<int64_t>(ids.size()) + 1);
}

bool Fits(const BatchShape& need, const BatchShape& shape) {
  return need.length <= shape.length && need.edges <= shape.edges && need.rows <= shape.rows;
}

// Padded nodes plus edges, then graph slots: what a shape costs per batch.
int64_t Cost(const BatchShape& s) { return s.length + s.edges; }

// The cheapest of `shapes` that holds `need` (shapes[0] holds every batch).
const BatchShape& Smallest(const std::vector<BatchShape>& shapes, const BatchShape& need) {
  const BatchShape* best = &shapes.front();
  for (const BatchShape& s : shapes) {
    if (Fits(need, s) &&
        (Cost(s) < Cost(*best) || (Cost(s) == Cost(*best) && s.rows < best->rows))) {
      best = &s;
    }
  }
  return *best;
}

// Up to `max_shapes` shapes, the full budget first: greedily the need of
// some batch that lowers the total cost of `needs` (with their counts) most.
std::vector<BatchShape> ChooseShapes(const BatchShape& full, std::vector<BatchShape> needs,
                                     int64_t max_shapes) {
  auto order = [](const BatchShape& a, const BatchShape& b) {
    return std::tie(a.length, a.edges, a.rows) < std::tie(b.length, b.edges, b.rows);
  };
  std::sort(needs.begin(), needs.end(), order);
  std::vector<std::pair<BatchShape, int64_t>> counted;  // distinct needs, how many batches
  for (const BatchShape& n : needs) {
    if (!counted.empty() && counted.back().first == n) {
      ++counted.back().second;
    } else {
      counted.emplace_back(n, 1);
    }
  }
  // At most kCandidates candidate shapes, spread over the needs by cost.
  constexpr size_t kCandidates = 256;
  std::vector<BatchShape> candidates;
  for (const auto& [n, count] : counted) candidates.push_back(n);
  std::sort(candidates.begin(), candidates.end(),
            [](const BatchShape& a, const BatchShape& b) { return Cost(a) < Cost(b); });
  if (candidates.size() > kCandidates) {
    std::vector<BatchShape> spread;
    for (size_t k = 0; k < kCandidates; ++k) {
      spread.push_back(candidates[k * (candidates.size() - 1) / (kCandidates - 1)]);
    }
    candidates = std::move(spread);
  }
  std::vector<BatchShape> shapes = {full};
  // Each distinct need's cost under `shapes`.
  std::vector<int64_t> cost(counted.size(), Cost(full));
  while (static_cast<int64_t>(shapes.size()) < max_shapes) {
    int64_t best_gain = 0;
    const BatchShape* best = nullptr;
    for (const BatchShape& c : candidates) {
      int64_t gain = 0;
      for (size_t k = 0; k < counted.size(); ++k) {
        if (Fits(counted[k].first, c) && Cost(c) < cost[k]) {
          gain = SaturatingAdd(gain, SaturatingMul(cost[k] - Cost(c), counted[k].second));
        }
      }
      if (gain > best_gain) {
        best_gain = gain;
        best = &c;
      }
    }
    if (best == nullptr) break;
    shapes.push_back(*best);
    for (size_t k = 0; k < counted.size(); ++k) {
      if (Fits(counted[k].first, *best)) cost[k] = std::min(cost[k], Cost(*best));
    }
  }
  return shapes;
}

BatchPlan Build(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                const Packed& packed, const std::vector<BatchShape>& shapes, int64_t num_examples) {
  PlanBuilder builder = PlanBuilder::Graphs();
  for (const std::vector<int64_t>& batch : packed.batches) {
    builder.BeginBatch(Smallest(shapes, NeedOf(nodes, edges, batch)));
    for (const int64_t& id : batch) builder.AddRow(std::span<const int64_t>(&id, 1));
    builder.EndBatch();
  }
  for (int64_t id : packed.skipped) builder.Skip(id);
  return std::move(builder).FinishGraphs(nodes, edges, num_examples);
}

void CheckCounts(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                 const char* planner) {
  if (edges.size() != nodes.size()) {
    throw InvalidArgumentError(StrCat(planner, ": expected an edge count for each of the ",
                                      nodes.size(), " graphs, found ", edges.size()));
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    if (edges[i] < 0) {
      throw InvalidArgumentError(
          StrCat(planner, ": graph ", i, ": expected an edge count >= 0, found ", edges[i]));
    }
  }
}

// Throws what PackGraphs throws for the first graph (by index) over `cap`.
void CheckFits(std::span<const int64_t> nodes, std::span<const int64_t> edges, const Capacity& cap,
               TooBig too_big, const char* planner) {
  CheckCounts(nodes, edges, planner);
  if (too_big == TooBig::kSkip) return;
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (nodes[id] > cap.nodes || edges[id] > cap.edges) {
      ThrowTooBig(static_cast<int64_t>(id), nodes[id], edges[id], cap, planner);
    }
  }
}

}  // namespace

void CheckGraphsFit(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                    const GraphBudgetOptions& o) {
  CheckFits(nodes, edges, CapacityOf(o.nodes, o.edges, o.graphs), o.too_big, "GraphBudget");
}

void CheckGraphsFit(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                    const GraphBucketsOptions& o) {
  CheckFits(nodes, edges, CapacityOf(o.nodes, o.edges, o.graphs), o.too_big, "GraphBuckets");
}

void ValidateGraphBudget(const GraphBudgetOptions& o) {
  ValidateBudget(o.nodes, o.edges, o.graphs, o.algorithm, o.open_batches, "GraphBudget");
}

void ValidateGraphBuckets(const GraphBucketsOptions& o) {
  if (o.max_shapes <= 0) {
    throw InvalidArgumentError(
        StrCat("GraphBuckets: max_shapes must be a positive integer, found ", o.max_shapes));
  }
  ValidateBudget(o.nodes, o.edges, o.graphs, o.algorithm, o.open_batches, "GraphBuckets");
  if (o.shapes.size() % 3 != 0) {
    throw InvalidArgumentError(StrCat("GraphBuckets: shapes must be (nodes, edges, graphs) ",
                                      "triples, found ", o.shapes.size(), " numbers"));
  }
  std::vector<std::array<int64_t, 3>> distinct = {{o.nodes, o.edges, o.graphs}};
  for (size_t k = 0; k < o.shapes.size(); k += 3) {
    const std::array<int64_t, 3> s = {o.shapes[k], o.shapes[k + 1], o.shapes[k + 2]};
    if (s[0] < 1 || s[0] > o.nodes || s[1] < 0 || s[1] > o.edges || s[2] < 2 || s[2] > o.graphs) {
      throw InvalidArgumentError(
          StrCat("GraphBuckets: shape ", k / 3, " (nodes=", s[0], ", edges=", s[1],
                 ", graphs=", s[2], ") is not within the budget: expected 1 <= nodes <= ", o.nodes,
                 ", 0 <= edges <= ", o.edges, " and 2 <= graphs <= ", o.graphs));
    }
    if (std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
  }
  if (static_cast<int64_t>(distinct.size()) > o.max_shapes) {
    throw InvalidArgumentError(
        StrCat("GraphBuckets: shapes give ", distinct.size(),
               " distinct shapes with the budget, more than max_shapes=", o.max_shapes));
  }
}

BatchPlan PlanGraphBudget(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                          const std::vector<int64_t>& ids, const GraphBudgetOptions& o) {
  CheckCounts(nodes, edges, "GraphBudget");
  const Packed packed =
      PackGraphs(nodes, edges, ids, CapacityOf(o.nodes, o.edges, o.graphs), o.algorithm,
                 WindowOf(o.algorithm, o.open_batches), o.too_big, "GraphBudget");
  return Build(nodes, edges, packed, {ShapeOf(o.nodes, o.edges, o.graphs)},
               static_cast<int64_t>(ids.size()));
}

std::vector<BatchShape> GraphBucketShapes(std::span<const int64_t> nodes,
                                          std::span<const int64_t> edges,
                                          const std::vector<int64_t>& ids,
                                          const GraphBucketsOptions& o) {
  const BatchShape full = ShapeOf(o.nodes, o.edges, o.graphs);
  if (!o.shapes.empty()) {
    std::vector<BatchShape> shapes = {full};
    for (size_t k = 0; k + 2 < o.shapes.size(); k += 3) {
      const BatchShape s = ShapeOf(o.shapes[k], o.shapes[k + 1], o.shapes[k + 2]);
      if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
    }
    return shapes;
  }
  // The shapes come from the same graphs in index order, so they do not
  // depend on a shuffle: every epoch compiles the same few.
  std::vector<int64_t> canonical(ids);
  std::sort(canonical.begin(), canonical.end());
  const Packed reference =
      PackGraphs(nodes, edges, canonical, CapacityOf(o.nodes, o.edges, o.graphs), o.algorithm,
                 WindowOf(o.algorithm, o.open_batches), TooBig::kSkip, "GraphBuckets");
  std::vector<BatchShape> needs;
  needs.reserve(reference.batches.size());
  for (const std::vector<int64_t>& batch : reference.batches) {
    needs.push_back(NeedOf(nodes, edges, batch));
  }
  return ChooseShapes(full, std::move(needs), o.max_shapes);
}

BatchPlan PlanGraphBuckets(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                           const std::vector<int64_t>& ids, const GraphBucketsOptions& o) {
  CheckCounts(nodes, edges, "GraphBuckets");
  const Packed packed =
      PackGraphs(nodes, edges, ids, CapacityOf(o.nodes, o.edges, o.graphs), o.algorithm,
                 WindowOf(o.algorithm, o.open_batches), o.too_big, "GraphBuckets");
  return Build(nodes, edges, packed, GraphBucketShapes(nodes, edges, ids, o),
               static_cast<int64_t>(ids.size()));
}

}  // namespace jaxbatch
