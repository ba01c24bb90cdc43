// Grid bucket shapes: at most K shapes (H, W) chosen from the joint (h, w)
// histogram of images or pair features. Pure compute over sizes.
//
// A shape holds an example when H >= h and W >= w; each example goes to the
// smallest-area shape that holds it (ties: the smaller H). A shape holding
// n examples costs `cost(H, W, n)` (AutoBuckets: H x W cells per row, rows
// from batch_size or token_budget // (H x W), the last partial batch's empty
// rows counted under remainder="pad"). A shape can be cut to the bounding
// box of the examples it holds, so the candidates are the (H, W) for which
// some example has h == H, w <= W and some example has w == W, h <= H
// (square data gives square candidates only: tied axes stay square with no
// special case). (max h, max w) alone holds every example; a set of shapes
// need not contain it.
//
// Exact: every set of at most K candidates is scored when that is at most
// `max_evaluations` cells x shapes of work (a few distinct sizes: up to ~30
// candidates at K = 4). Otherwise a heuristic: each axis's values are
// reduced to at most kMaxGridAxisValues by 1-D optimal boundaries over that
// axis's marginal (an example's cell is the smallest reduced value >= its
// size on each axis); from (max h, max w) alone, shapes are added greedily
// (each time the one that lowers the cost most) and improved by single
// swaps while any lowers it. Single moves stall where two shapes must
// replace one, so the exhaustive optimum over the finest coarser grid the
// work limit affords is also found, and the cheaper of the two (scored at
// the examples' own sizes) is kept. Measured against the exhaustive optimum
// on 200 seeded random histograms (tests/test_grid_planners.py): worst
// 3.1% more padded cells, mean 0.05%.
#ifndef JAXBATCH_PLAN_GRID_BUCKETS_H_
#define JAXBATCH_PLAN_GRID_BUCKETS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace jaxbatch {

// The most distinct values per axis the shape search works over.
inline constexpr int64_t kMaxGridAxisValues = 32;
// Exhaustive search's work limit (cells x shapes summed over every set).
inline constexpr int64_t kMaxGridEvaluations = 20'000'000;

struct GridShape {
  int64_t height = 0;
  int64_t width = 0;
  friend bool operator==(const GridShape&, const GridShape&) = default;
};

// The padded cells of a shape of height x width holding `count` examples.
using GridCost = std::function<int64_t(int64_t height, int64_t width, int64_t count)>;

struct GridChoice {
  std::vector<GridShape> shapes;  // by increasing area (then height)
  int64_t cost = 0;               // summed GridCost of the examples' cells
  bool exact = false;             // whether every candidate set was scored
};

// Chooses at most `max_shapes` shapes for the examples of `heights` x
// `widths` (parallel, sizes already rounded) that minimise the summed cost.
GridChoice ChooseGridShapes(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            int64_t max_shapes, const GridCost& cost,
                            int64_t max_evaluations = kMaxGridEvaluations);

// The index into `shapes` of the smallest-area shape holding h x w (ties:
// the smaller height), or -1 when none does.
int64_t SmallestHolding(std::span<const GridShape> shapes, int64_t height, int64_t width);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRID_BUCKETS_H_
