#include "jaxbatch/plan/graph_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <compare>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch {
namespace {

// The grid: kScaleSteps budgets from kMinScale to kMaxScale times the mean
// graph's sizes times graphs - 1, evenly spaced in log scale (9% apart),
// each with the edges at kRatios of the data's node:edge ratio. Below half
// the mean budget graph slots are mostly empty, above twice it nodes and
// edges mostly padding: the optimum lies between. The ratio varies because
// a batch's nodes and edges do not bind together: in small batches the one
// that varies more across graphs needs more room.
constexpr double kMinScale = 0.5;
constexpr double kMaxScale = 2.0;
constexpr int kScaleSteps = 17;
constexpr std::array<double, 5> kRatios = {0.7, 0.85, 1.0, 1.18, 1.4};
// Refinement starts from the kStarts best of them, at steps of 1/kFirstStep
// of the budget.
constexpr size_t kStarts = 4;
constexpr int64_t kFirstStep = 16;
// A bound on the budgets planned, whatever the refinement does.
constexpr int64_t kMaxCandidates = 512;
// Scores closer than this are equal (the same shares summed in another
// order), so ties go to the smaller budget on every platform.
constexpr double kTie = 1e-12;

struct Budget {
  int64_t nodes = 0;
  int64_t edges = 0;
  auto operator<=>(const Budget&) const = default;
};

// A seeded permutation of [0, count): Fisher-Yates over mt19937_64 with
// unbiased draws, so a seed gives the same shuffle on every platform
// (std::shuffle's and the distributions' algorithms are unspecified).
std::vector<int64_t> Shuffled(int64_t count, uint64_t seed, uint64_t round) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(round)};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[static_cast<size_t>(i)] = i;
  for (int64_t i = count - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % bound;
    uint64_t draw = rng();
    while (draw >= limit) draw = rng();
    std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(draw % bound)]);
  }
  return ids;
}

// The orders the candidates are planned in: `order` as given, else enough
// seeded shuffles (or one shuffle's first graphs) to plan about kFitGraphs.
std::vector<std::vector<int64_t>> FitOrders(int64_t count, PlanOrder order, uint64_t seed) {
  if (order) return {std::vector<int64_t>(order->begin(), order->end())};
  const int64_t shuffles =
      std::clamp<int64_t>((kFitGraphs + count - 1) / count, 1, kFitMaxShuffles);
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < shuffles; ++r) {
    out.push_back(Shuffled(count, seed, static_cast<uint64_t>(r)));
    if (count > kFitGraphs) out.back().resize(static_cast<size_t>(kFitGraphs));
  }
  return out;
}

void CheckArguments(std::span<const int64_t> nodes, std::span<const int64_t> edges, PlanOrder order,
                    const GraphFitOptions& fit, const char* who) {
  if (nodes.empty()) {
    throw InvalidArgumentError(StrCat(who, ": expected at least one graph to fit to, found none"));
  }
  if (edges.size() != nodes.size()) {
    throw InvalidArgumentError(StrCat(who, ": expected an edge count for each of the ",
                                      nodes.size(), " graphs, found ", edges.size()));
  }
  if (fit.graphs < 2) {
    throw InvalidArgumentError(StrCat(who, ": graphs must be at least 2 (one real graph and the ",
                                      "padding graph, as jraph.pad_with_graphs needs), found ",
                                      fit.graphs));
  }
  if (fit.multiple < 1) {
    throw InvalidArgumentError(
        StrCat(who, ": multiple must be a positive integer, found ", fit.multiple));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] < 0 || edges[i] < 0) {
      throw InvalidArgumentError(StrCat(who, ": graph ", i, ": expected node and edge counts >= 0",
                                        ", found ", nodes[i], " nodes and ", edges[i], " edges"));
    }
  }
  if (!order) return;
  if (order->empty()) {
    throw InvalidArgumentError(StrCat(who, ": order must name at least one graph, found none"));
  }
  const int64_t count = static_cast<int64_t>(nodes.size());
  std::vector<uint8_t> seen(nodes.size(), 0);
  for (size_t k = 0; k < order->size(); ++k) {
    const int64_t id = (*order)[k];
    if (id < 0 || id >= count) {
      throw InvalidArgumentError(
          StrCat(who, ": order[", k, "] = ", id, " is not a graph id; expected 0 <= id < ", count));
    }
    if (seen[static_cast<size_t>(id)]++) {
      throw InvalidArgumentError(StrCat(who, ": order[", k, "] = ", id,
                                        " lists that graph a second time; each graph may be "
                                        "planned once"));
    }
  }
}

struct Shares {
  double slot = 0.0;   // real nodes and edges over their slots
  double graph = 0.0;  // real graphs over what the batches could hold
  double score() const { return slot * graph; }
};

// Plans candidate budgets over the fit's orders and remembers their shares.
// `plan(budget, ids)` is the fitted planner's PlanGraph*.
template <typename PlanFn>
class Candidates {
 public:
  Candidates(PlanFn plan, std::vector<std::vector<int64_t>> orders, Budget floor, int64_t multiple,
             int64_t graphs)
      : plan_(std::move(plan)),
        orders_(std::move(orders)),
        floor_(floor),
        multiple_(multiple),
        graphs_(graphs) {}

  // The budget for `nodes` and `edges` slots: at least the floor, at most
  // kMaxExtent, rounded up to the multiple.
  Budget Round(double nodes, double edges) const {
    return {.nodes = RoundOne(nodes, floor_.nodes), .edges = RoundOne(edges, floor_.edges)};
  }

  const Shares& Of(const Budget& b) {
    auto found = seen_.find(b);
    if (found != seen_.end()) return found->second;
    double real = 0, slots = 0, real_graphs = 0, room = 0;
    for (const std::vector<int64_t>& ids : orders_) {
      const PlanStats s = plan_(b, ids);
      real += static_cast<double>(s.real_elements) + static_cast<double>(s.real_edges);
      slots += static_cast<double>(s.padded_elements) + static_cast<double>(s.padded_edges);
      real_graphs += static_cast<double>(s.real_graphs);
      room += static_cast<double>(s.batches) * static_cast<double>(graphs_ - 1);
    }
    const Shares shares{.slot = slots > 0 ? real / slots : 1.0,
                        .graph = room > 0 ? real_graphs / room : 1.0};
    return seen_.emplace(b, shares).first->second;
  }

  // Whether `a` beats `b`: a higher score, or an equal one with fewer slots.
  bool Better(const Budget& a, const Budget& b) {
    const double sa = Of(a).score();
    const double sb = Of(b).score();
    if (std::abs(sa - sb) > kTie) return sa > sb;
    return std::pair(a.nodes + a.edges, a.nodes) < std::pair(b.nodes + b.edges, b.nodes);
  }

  int64_t planned() const { return static_cast<int64_t>(seen_.size()); }
  bool exhausted() const { return planned() >= kMaxCandidates; }
  int64_t multiple() const { return multiple_; }

 private:
  int64_t RoundOne(double value, int64_t floor) const {
    const double top = static_cast<double>(kMaxExtent - kMaxExtent % multiple_);
    const int64_t slots = static_cast<int64_t>(std::ceil(std::clamp(value, 0.0, top)));
    return std::max(floor, CheckedRoundUp(slots, multiple_).value_or(kMaxExtent));
  }

  PlanFn plan_;
  std::vector<std::vector<int64_t>> orders_;
  Budget floor_;
  int64_t multiple_;
  int64_t graphs_;
  std::map<Budget, Shares> seen_;
};

// The kStarts best budgets of the grid, best first: where the refinement
// starts. Several, because on small data the score is jagged (it moves
// with whole batches) and the best start need not lead to the best budget.
// The grid is centred on the mean budget `mean`, or on the floor where the
// largest graph needs more: then budgets up to twice the floor are tried.
template <typename C>
std::vector<Budget> BestOfGrid(C& candidates, Budget floor, double mean_nodes, double mean_edges) {
  const double nodes = std::max(mean_nodes, static_cast<double>(floor.nodes));
  const double edges = std::max(mean_edges, static_cast<double>(floor.edges));
  std::vector<Budget> grid;
  for (int k = 0; k < kScaleSteps; ++k) {
    const double scale = kMinScale * std::pow(kMaxScale / kMinScale, k / (kScaleSteps - 1.0));
    for (const double ratio : kRatios) {
      const Budget b = candidates.Round(scale * nodes, ratio * scale * edges);
      if (std::find(grid.begin(), grid.end(), b) == grid.end()) grid.push_back(b);
    }
  }
  std::stable_sort(grid.begin(), grid.end(),
                   [&](const Budget& a, const Budget& b) { return candidates.Better(a, b); });
  grid.resize(std::min(grid.size(), kStarts));
  return grid;
}

// Steepest ascent from `best` over its 8 neighbours (nodes, edges, both),
// in steps of 1/kFirstStep of the budget halved down to the multiple.
template <typename C>
Budget Refine(C& candidates, Budget best) {
  const int64_t m = candidates.multiple();
  int64_t node_step = std::max<int64_t>(1, best.nodes / kFirstStep / m);
  int64_t edge_step = std::max<int64_t>(1, best.edges / kFirstStep / m);
  while (!candidates.exhausted()) {
    const double n = static_cast<double>(node_step * m);
    const double e = static_cast<double>(edge_step * m);
    Budget next = best;
    for (const double dn : {-n, 0.0, n}) {
      for (const double de : {-e, 0.0, e}) {
        const Budget b = candidates.Round(static_cast<double>(best.nodes) + dn,
                                          static_cast<double>(best.edges) + de);
        if (candidates.Better(b, next)) next = b;
      }
    }
    if (next != best) {
      best = next;
      continue;
    }
    if (node_step == 1 && edge_step == 1) break;
    node_step = std::max<int64_t>(1, node_step / 2);
    edge_step = std::max<int64_t>(1, edge_step / 2);
  }
  return best;
}

// The best budget refined from each of the best starts.
template <typename C>
Budget Search(C& candidates, Budget floor, double mean_nodes, double mean_edges) {
  const std::vector<Budget> starts = BestOfGrid(candidates, floor, mean_nodes, mean_edges);
  Budget best = starts.front();
  for (const Budget& start : starts) {
    const Budget b = Refine(candidates, start);
    if (candidates.Better(b, best)) best = b;
  }
  return best;
}

// The fit for a planner whose options `with(budget)` makes and `plan` plans.
template <typename Options, typename PlanFn>
Options Fit(std::span<const int64_t> nodes, std::span<const int64_t> edges, PlanOrder order,
            const GraphFitOptions& fit, const Options& planner, PlanFn plan,
            void (*validate)(const Options&), GraphFitScore* score, const char* who) {
  CheckArguments(nodes, edges, order, fit, who);
  double sum_nodes = 0, sum_edges = 0;
  int64_t max_nodes = 0, max_edges = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    sum_nodes += static_cast<double>(nodes[i]);
    sum_edges += static_cast<double>(edges[i]);
    max_nodes = std::max(max_nodes, nodes[i]);
    max_edges = std::max(max_edges, edges[i]);
  }
  auto with = [&](const Budget& b) {
    Options o = planner;
    o.nodes = b.nodes;
    o.edges = b.edges;
    o.graphs = fit.graphs;
    return o;
  };
  // The smallest budget that holds every graph; past kMaxExtent the
  // planner's own validation names the option that does not fit.
  const Budget floor{
      .nodes = CheckedRoundUp(SaturatingAdd(max_nodes, 1), fit.multiple).value_or(kMaxSize),
      .edges = CheckedRoundUp(max_edges, fit.multiple).value_or(kMaxSize)};
  validate(with(floor));
  auto plan_budget = [&](const Budget& b, const std::vector<int64_t>& ids) {
    return plan(nodes, edges, ids, with(b)).stats;
  };
  Candidates candidates(plan_budget, FitOrders(static_cast<int64_t>(nodes.size()), order, fit.seed),
                        floor, fit.multiple, fit.graphs);
  // The mean budget: graphs - 1 mean graphs and the padding node.
  const double real_graphs = static_cast<double>(fit.graphs - 1);
  const double count = static_cast<double>(nodes.size());
  const Budget best = Search(candidates, floor, sum_nodes / count * real_graphs + 1,
                             sum_edges / count * real_graphs);
  if (score != nullptr) {
    const Shares& s = candidates.Of(best);
    *score = {.slot_share = s.slot,
              .graph_fill = s.graph,
              .score = s.score(),
              .candidates = candidates.planned()};
  }
  return with(best);
}

}  // namespace

GraphBudgetOptions FitGraphBudget(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                  PlanOrder order, const GraphFitOptions& fit,
                                  GraphBudgetOptions planner, GraphFitScore* score) {
  return Fit(nodes, edges, order, fit, planner, PlanGraphBudget, ValidateGraphBudget, score,
             "GraphBudget.fit");
}

GraphBucketsOptions FitGraphBuckets(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                    PlanOrder order, const GraphFitOptions& fit,
                                    GraphBucketsOptions planner, GraphFitScore* score) {
  return Fit(nodes, edges, order, fit, planner, PlanGraphBuckets, ValidateGraphBuckets, score,
             "GraphBuckets.fit");
}

}  // namespace jaxbatch
