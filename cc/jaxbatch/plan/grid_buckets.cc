#include "jaxbatch/plan/grid_buckets.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/buckets.h"

namespace jaxbatch {
namespace {

// An axis's values: its distinct sizes, or at most kMaxGridAxisValues of
// them chosen by 1-D optimal boundaries over its marginal (each example
// padded to the next chosen value, the fewest padded cells on that axis).
std::vector<int64_t> AxisValues(std::span<const int64_t> sizes, int64_t max_values, bool* reduced) {
  const LengthHistogram histogram = RoundedHistogram(sizes, {}, 1);
  if (static_cast<int64_t>(histogram.values.size()) <= max_values) return histogram.values;
  *reduced = true;
  return OptimalBoundaries(
      histogram, max_values, [](int64_t) { return int64_t{1}; }, /*pad_remainder=*/false);
}

// The examples snapped to the axis values: cell (i, j) holds the examples
// whose smallest value >= h is heights[i] and >= w is widths[j].
struct Grid {
  std::vector<int64_t> heights, widths;
  std::vector<std::array<int64_t, 3>> cells;  // (i, j, count), count > 0
};

Grid MakeGrid(std::span<const int64_t> heights, std::span<const int64_t> widths, int64_t max_values,
              bool* reduced) {
  Grid grid;
  grid.heights = AxisValues(heights, max_values, reduced);
  grid.widths = AxisValues(widths, max_values, reduced);
  // Sorted (i, j) per example, then runs counted: memory O(examples), not
  // O(heights x widths), as the exact grid may have thousands of each.
  std::vector<std::pair<int64_t, int64_t>> at(heights.size());
  for (size_t e = 0; e < heights.size(); ++e) {
    // Sizes of 0 are held by the first value, as RoundedHistogram rounds them up.
    at[e] = {
        std::lower_bound(grid.heights.begin(), grid.heights.end(), heights[e]) -
            grid.heights.begin(),
        std::lower_bound(grid.widths.begin(), grid.widths.end(), widths[e]) - grid.widths.begin()};
  }
  std::sort(at.begin(), at.end());
  for (size_t e = 0; e < at.size();) {
    size_t end = e;
    while (end < at.size() && at[end] == at[e]) ++end;
    grid.cells.push_back({at[e].first, at[e].second, static_cast<int64_t>(end - e)});
    e = end;
  }
  return grid;
}

using Cell = std::array<int64_t, 2>;  // (height index, width index)

// Shapes worth trying: the bounding boxes of some examples, i.e. (i, j)
// with a non-empty cell (i, <= j) and a non-empty cell (<= i, j).
std::vector<Cell> Candidates(const Grid& grid) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> min_j(grid.heights.size(), kNone), min_i(grid.widths.size(), kNone);
  for (const auto& [i, j, count] : grid.cells) {
    min_j[static_cast<size_t>(i)] = std::min(min_j[static_cast<size_t>(i)], j);
    min_i[static_cast<size_t>(j)] = std::min(min_i[static_cast<size_t>(j)], i);
  }
  std::vector<Cell> out;
  for (int64_t i = 0; i < static_cast<int64_t>(grid.heights.size()); ++i) {
    for (int64_t j = 0; j < static_cast<int64_t>(grid.widths.size()); ++j) {
      if (min_j[static_cast<size_t>(i)] <= j && min_i[static_cast<size_t>(j)] <= i) {
        out.push_back({i, j});
      }
    }
  }
  return out;
}

// Sorts `shapes` by increasing area (then height), the order SmallestHolding
// breaks ties in and FillGridRemainders takes shapes in.
void SortByArea(std::vector<GridShape>& shapes) {
  std::sort(shapes.begin(), shapes.end(), [](const GridShape& a, const GridShape& b) {
    const int64_t x = SaturatingMul(a.height, a.width), y = SaturatingMul(b.height, b.width);
    return x != y ? x < y : a.height < b.height;
  });
}

// The summed cost of `shapes` over items (examples or cells) of
// `heights` x `widths` with `counts`, each in its smallest-area shape
// holding it, remainders filled when `fill_rows` is set; kMaxSize when an
// item fits no shape. The scratch vectors are reused between calls.
struct ShapeScore {
  std::vector<int64_t> held, counts, shape_of, rows;

  int64_t operator()(std::vector<GridShape>& shapes, std::span<const int64_t> heights,
                     std::span<const int64_t> widths, std::span<const int64_t> item_counts,
                     const GridCost& cost, const GridShapeRows& fill_rows) {
    if (fill_rows) SortByArea(shapes);
    held.assign(shapes.size(), 0);
    shape_of.resize(heights.size());
    for (size_t t = 0; t < heights.size(); ++t) {
      const int64_t s = SmallestHolding(shapes, heights[t], widths[t]);
      if (s < 0) return kMaxSize;
      shape_of[t] = s;
      held[static_cast<size_t>(s)] += item_counts[t];
    }
    if (fill_rows) {
      counts.assign(item_counts.begin(), item_counts.end());
      rows.clear();
      for (const GridShape& g : shapes) rows.push_back(fill_rows(g.height, g.width));
      FillGridRemainders(heights, widths, counts, shape_of, rows, held);
    }
    int64_t total = 0;
    for (size_t s = 0; s < shapes.size(); ++s) {
      if (held[s] > 0)
        total = SaturatingAdd(total, cost(shapes[s].height, shapes[s].width, held[s]));
    }
    return total;
  }
};

class Scorer {
 public:
  Scorer(const Grid& grid, const GridCost& cost, const GridShapeRows& fill_rows)
      : grid_(grid), cost_(cost), fill_rows_(fill_rows) {
    for (const auto& [i, j, count] : grid.cells) {
      heights_.push_back(grid.heights[static_cast<size_t>(i)]);
      widths_.push_back(grid.widths[static_cast<size_t>(j)]);
      counts_.push_back(count);
    }
  }

  GridShape ShapeOf(const Cell& c) const {
    return {grid_.heights[static_cast<size_t>(c[0])], grid_.widths[static_cast<size_t>(c[1])]};
  }

  // The summed cost of `set`, each cell's examples in its smallest-area
  // shape (remainders filled with fill_rows).
  int64_t Score(std::span<const Cell> set) const {
    shapes_.clear();
    for (const Cell& c : set) shapes_.push_back(ShapeOf(c));
    return score_(shapes_, heights_, widths_, counts_, cost_, fill_rows_);
  }

  int64_t ScoreShapes(std::span<const GridShape> shapes) const {
    shapes_.assign(shapes.begin(), shapes.end());
    return score_(shapes_, heights_, widths_, counts_, cost_, fill_rows_);
  }

 private:
  const Grid& grid_;
  const GridCost& cost_;
  const GridShapeRows& fill_rows_;
  std::vector<int64_t> heights_, widths_, counts_;  // per cell
  mutable std::vector<GridShape> shapes_;
  mutable ShapeScore score_;
};

// n choose k, saturating.
int64_t Choose(int64_t n, int64_t k) {
  int64_t out = 1;
  for (int64_t r = 1; r <= k; ++r) {
    const std::optional<int64_t> next = CheckedMul(out, n - k + r);
    if (!next) return kMaxSize;
    out = *next / r;
  }
  return out;
}

// Every set of at most `max_shapes` candidates (a set that leaves an
// example out scores kMaxSize): the best, in `best`. `top`, (max h, max w),
// holds every example alone, so `best` always holds every example.
void Exhaustive(const Scorer& scorer, const std::vector<Cell>& others, const Cell& top,
                int64_t max_shapes, std::vector<Cell>& best, int64_t& best_cost) {
  std::vector<Cell> set;
  best = {top};
  best_cost = scorer.Score(best);
  // Depth-first over increasing indices into `others`.
  std::vector<size_t> stack;
  size_t next = 0;
  while (true) {
    if (next < others.size() && static_cast<int64_t>(stack.size()) < max_shapes) {
      stack.push_back(next);
      set.push_back(others[next]);
      const int64_t cost = scorer.Score(set);
      if (cost < best_cost) {
        best_cost = cost;
        best = set;
      }
      ++next;
      continue;
    }
    if (stack.empty()) break;
    next = stack.back() + 1;
    stack.pop_back();
    set.pop_back();
  }
}

// From `top` alone, greedy additions, then single swaps (of any shape,
// `top` included) while any lowers the cost.
void LocalSearch(const Scorer& scorer, const std::vector<Cell>& others, const Cell& top,
                 int64_t extra, std::vector<Cell>& set, int64_t& cost) {
  set = {top};
  cost = scorer.Score(set);
  auto chosen = [&](const Cell& c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  for (int64_t k = 0; k < extra; ++k) {
    int64_t best = cost;
    size_t best_c = others.size();
    for (size_t c = 0; c < others.size(); ++c) {
      if (chosen(others[c])) continue;
      set.push_back(others[c]);
      const int64_t score = scorer.Score(set);
      set.pop_back();
      if (score < best) best = score, best_c = c;
    }
    if (best_c == others.size()) break;
    set.push_back(others[best_c]);
    cost = best;
  }
  // Each pass is O(K x candidates) scores; a swap lowers the cost, so
  // passes end; the cap bounds a long descent.
  constexpr int kMaxPasses = 64;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool improved = false;
    for (size_t p = 0; p < set.size(); ++p) {
      for (const Cell& c : others) {
        if (chosen(c)) continue;
        const Cell old = set[p];
        set[p] = c;
        const int64_t score = scorer.Score(set);
        if (score < cost) {
          cost = score;
          improved = true;
        } else {
          set[p] = old;
        }
      }
    }
    if (!improved) break;
  }
}

}  // namespace

int64_t SmallestHolding(std::span<const GridShape> shapes, int64_t height, int64_t width) {
  int64_t best = -1;
  int64_t best_area = 0;
  for (size_t s = 0; s < shapes.size(); ++s) {
    if (shapes[s].height < height || shapes[s].width < width) continue;
    const int64_t area = SaturatingMul(shapes[s].height, shapes[s].width);
    if (best < 0 || area < best_area ||
        (area == best_area && shapes[s].height < shapes[static_cast<size_t>(best)].height)) {
      best = static_cast<int64_t>(s);
      best_area = area;
    }
  }
  return best;
}

namespace {

// The cells x shapes an exhaustive search of `grid` scores (saturating).
int64_t ExhaustiveWork(const Grid& grid, int64_t candidates, int64_t max_shapes) {
  const int64_t most = std::min(max_shapes, candidates);
  int64_t sets = 0;
  for (int64_t k = 1; k <= most; ++k) sets = SaturatingAdd(sets, Choose(candidates, k));
  return SaturatingMul(SaturatingMul(sets, static_cast<int64_t>(grid.cells.size())), most);
}

// The chosen shapes of `set` that hold examples, and the summed cost (with
// remainders filled when `fill_rows` is set), with the examples at their own
// sizes (`exact`, not snapped to a coarser grid).
GridChoice Finish(const Scorer& scorer, std::span<const Cell> set, const Grid& exact,
                  const GridCost& cost, const GridShapeRows& fill_rows) {
  std::vector<GridShape> shapes;
  for (const Cell& c : set) shapes.push_back(scorer.ShapeOf(c));
  std::vector<int64_t> held(shapes.size(), 0);
  for (const auto& [i, j, count] : exact.cells) {
    held[static_cast<size_t>(SmallestHolding(shapes, exact.heights[static_cast<size_t>(i)],
                                             exact.widths[static_cast<size_t>(j)]))] += count;
  }
  GridChoice choice;
  for (size_t s = 0; s < shapes.size(); ++s) {
    if (held[s] > 0) choice.shapes.push_back(shapes[s]);
  }
  SortByArea(choice.shapes);
  const Scorer exact_scorer(exact, cost, fill_rows);
  choice.cost = exact_scorer.ScoreShapes(choice.shapes);
  return choice;
}

// The best set on `grid`: exhaustive when its work is within the limit
// (`*searched` set), else (with `local`) the local search.
std::vector<Cell> Search(const Grid& grid, const GridCost& cost, const GridShapeRows& fill_rows,
                         int64_t max_shapes, int64_t max_evaluations, bool local, bool* searched) {
  const Scorer scorer(grid, cost, fill_rows);
  const Cell top = {static_cast<int64_t>(grid.heights.size()) - 1,
                    static_cast<int64_t>(grid.widths.size()) - 1};
  const std::vector<Cell> candidates = Candidates(grid);
  const auto candidate_count = static_cast<int64_t>(candidates.size());
  const int64_t most = std::min(max_shapes, candidate_count);
  std::vector<Cell> set;
  int64_t score = 0;
  *searched = ExhaustiveWork(grid, candidate_count, max_shapes) <= max_evaluations;
  if (*searched) {
    Exhaustive(scorer, candidates, top, most, set, score);
  } else if (local) {
    std::vector<Cell> others;
    for (const Cell& c : candidates) {
      if (c != top) others.push_back(c);
    }
    LocalSearch(scorer, others, top, most - 1, set, score);
  }
  return set;
}

}  // namespace

GridChoice ChooseGridShapes(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            int64_t max_shapes, const GridCost& cost, int64_t max_evaluations,
                            const GridShapeRows& fill_rows) {
  if (max_shapes < 1 || heights.size() != widths.size()) {
    throw InvalidArgumentError(
        StrCat("ChooseGridShapes: expected max_shapes >= 1 and one width "
               "per height, found max_shapes=",
               max_shapes, ", ", heights.size(), " heights and ", widths.size(), " widths"));
  }
  if (heights.empty()) return {};
  // The examples at their own sizes, to score the final choice.
  bool reduced = false;
  const Grid exact = MakeGrid(heights, widths, std::numeric_limits<int64_t>::max(), &reduced);
  reduced = false;
  const Grid grid = MakeGrid(heights, widths, kMaxGridAxisValues, &reduced);
  bool searched = false;
  const std::vector<Cell> set =
      Search(grid, cost, fill_rows, max_shapes, max_evaluations, /*local=*/true, &searched);
  GridChoice choice = Finish(Scorer(grid, cost, fill_rows), set, exact, cost, fill_rows);
  choice.exact = searched && !reduced;
  if (searched) return choice;
  // Local search can stall where two shapes must replace one; an exhaustive
  // search over the finest coarser grid it can afford does not, so keep the
  // better of the two.
  for (int64_t values = kMaxGridAxisValues - 1; values >= 1; --values) {
    bool coarser = false;
    const Grid coarse = MakeGrid(heights, widths, values, &coarser);
    bool done = false;
    const std::vector<Cell> other =
        Search(coarse, cost, fill_rows, max_shapes, max_evaluations, /*local=*/false, &done);
    if (!done) continue;
    GridChoice alternative = Finish(Scorer(coarse, cost, fill_rows), other, exact, cost, fill_rows);
    if (alternative.cost < choice.cost) choice = std::move(alternative);
    break;
  }
  return choice;
}

void FillGridRemainders(std::span<const int64_t> heights, std::span<const int64_t> widths,
                        std::span<int64_t> counts, std::span<int64_t> shape_of,
                        std::span<const int64_t> rows, std::span<int64_t> held) {
  for (size_t k = held.size(); k-- > 1;) {
    if (held[k] % rows[k] == 0) continue;  // no batch, or no spare row
    int64_t spare = rows[k] - held[k] % rows[k];
    GridShape box;  // of shape k's current examples
    for (size_t t = 0; t < heights.size(); ++t) {
      if (shape_of[t] == static_cast<int64_t>(k) && counts[t] > 0) {
        box = {std::max(box.height, heights[t]), std::max(box.width, widths[t])};
      }
    }
    for (size_t j = k; spare > 0 && j-- > 0;) {
      for (size_t t = 0; spare > 0 && t < heights.size(); ++t) {
        if (shape_of[t] != static_cast<int64_t>(j) || counts[t] == 0 || heights[t] > box.height ||
            widths[t] > box.width) {
          continue;
        }
        const int64_t n = std::min(spare, counts[t]);
        if (n == counts[t]) {
          shape_of[t] = static_cast<int64_t>(k);
        } else {
          counts[t] -= n;
        }
        held[j] -= n;
        held[k] += n;
        spare -= n;
      }
    }
  }
}

namespace {

// `shapes`' plan for the examples: each in its smallest-area shape (then
// remainders filled), boxes cut to the examples, and its padded cells
// (remainder="pad": every batch full rows).
struct PlannedBuckets {
  GridBuckets buckets;
  int64_t cells = 0;
};

PlannedBuckets PlanBuckets(std::span<const int64_t> heights, std::span<const int64_t> widths,
                           std::span<const GridShape> shapes, const GridShapeRows& rows,
                           bool fill) {
  PlannedBuckets out;
  GridBuckets& b = out.buckets;
  for (const GridShape& s : shapes) b.rows.push_back(rows(s.height, s.width));
  std::vector<int64_t> held(shapes.size(), 0);
  b.shape_of.resize(heights.size());
  for (size_t p = 0; p < heights.size(); ++p) {
    b.shape_of[p] = SmallestHolding(shapes, heights[p], widths[p]);
    ++held[static_cast<size_t>(b.shape_of[p])];
  }
  if (fill) {
    // The latest examples first: those a shape's last batch would hold.
    const size_t n = heights.size();
    std::vector<int64_t> h(heights.rbegin(), heights.rend()), w(widths.rbegin(), widths.rend());
    std::vector<int64_t> shape_of(b.shape_of.rbegin(), b.shape_of.rend()), ones(n, 1);
    FillGridRemainders(h, w, ones, shape_of, b.rows, held);
    std::copy(shape_of.rbegin(), shape_of.rend(), b.shape_of.begin());
  }
  b.boxes.assign(shapes.size(), GridShape{});
  for (size_t p = 0; p < heights.size(); ++p) {
    GridShape& box = b.boxes[static_cast<size_t>(b.shape_of[p])];
    box = {std::max(box.height, heights[p]), std::max(box.width, widths[p])};
  }
  for (size_t s = 0; s < shapes.size(); ++s) {
    const int64_t batches = (held[s] + b.rows[s] - 1) / b.rows[s];
    out.cells =
        SaturatingAdd(out.cells, SaturatingMul(SaturatingMul(batches, b.rows[s]),
                                               SaturatingMul(b.boxes[s].height, b.boxes[s].width)));
  }
  return out;
}

}  // namespace

GridBuckets ChooseGridBuckets(std::span<const int64_t> heights, std::span<const int64_t> widths,
                              int64_t max_shapes, const GridCost& cost, const GridShapeRows& rows,
                              bool fill) {
  const GridChoice plain = ChooseGridShapes(heights, widths, max_shapes, cost);
  if (!fill) return PlanBuckets(heights, widths, plain.shapes, rows, false).buckets;
  PlannedBuckets best = PlanBuckets(heights, widths, plain.shapes, rows, true);
  const GridChoice filled =
      ChooseGridShapes(heights, widths, max_shapes, cost, kMaxGridEvaluations, rows);
  PlannedBuckets other = PlanBuckets(heights, widths, filled.shapes, rows, true);
  if (other.cells < best.cells) best = std::move(other);
  return std::move(best.buckets);
}

}  // namespace jaxbatch
