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
// The rows of a full batch of a shape of height x width (> 0).
using GridShapeRows = std::function<int64_t(int64_t height, int64_t width)>;

struct GridChoice {
  std::vector<GridShape> shapes;  // by increasing area (then height)
  int64_t cost = 0;               // summed GridCost of the examples' cells
  bool exact = false;             // whether every candidate set was scored
};

// Chooses at most `max_shapes` shapes for the examples of `heights` x
// `widths` (parallel, sizes already rounded) that minimise the summed cost.
// With `fill_rows`, each set is scored as planned with its remainders
// filled (FillGridRemainders, shapes' rows from `fill_rows`): a set whose
// small shapes' last batches empty into larger ones' spare rows can beat
// the best set scored with every shape's remainder padded.
GridChoice ChooseGridShapes(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            int64_t max_shapes, const GridCost& cost,
                            int64_t max_evaluations = kMaxGridEvaluations,
                            const GridShapeRows& fill_rows = {});

// Filling remainders over (h, w) (AutoBuckets with remainder="pad"): a
// shape's last batch has rows x H x W cells whether its spare rows are empty
// or not, so, largest shape first (shapes by increasing area), its spare
// rows take examples of the smaller shapes (the next smaller first; within
// one, items in the order given) that fit the bounding box of its own
// current examples (the box its batches are cut to). No shape is added, no
// example lost, no box grows and no shape gets more batches, so padded cells
// never increase; they fall when a smaller shape's batch empties.
// Items are examples (`counts` all 1) or histogram cells: item t has
// counts[t] examples of heights[t] x widths[t] in shape shape_of[t] (-1:
// none); a whole item moved changes its shape_of, part of one lowers its
// count (the part is counted in `held` only). `held[s]` (examples per shape)
// and `rows[s]` (a full batch's rows) are per shape; `held` is updated.
void FillGridRemainders(std::span<const int64_t> heights, std::span<const int64_t> widths,
                        std::span<int64_t> counts, std::span<int64_t> shape_of,
                        std::span<const int64_t> rows, std::span<int64_t> held);

// AutoBuckets over (h, w): the shapes, each example's shape and each shape's
// box (the bounding box of its examples) and rows.
struct GridBuckets {
  std::vector<GridShape> boxes;   // by increasing area of the shape chosen
  std::vector<int64_t> rows;      // a full batch's rows, from the shape chosen
  std::vector<int64_t> shape_of;  // per example, an index into boxes
};

// The shapes of ChooseGridShapes for `heights` x `widths`, each example in
// the smallest-area one holding it. With `fill` (remainder="pad"), also the
// shapes chosen by filled cost, each set's remainders filled (the examples
// latest in order moved first, those of a shape's last batch), and the set
// whose plan pads fewer cells is kept (the plain choice on a tie): never
// more padded cells than the plain choice's plan.
GridBuckets ChooseGridBuckets(std::span<const int64_t> heights, std::span<const int64_t> widths,
                              int64_t max_shapes, const GridCost& cost, const GridShapeRows& rows,
                              bool fill);

// The index into `shapes` of the smallest-area shape holding h x w (ties:
// the smaller height), or -1 when none does.
int64_t SmallestHolding(std::span<const GridShape> shapes, int64_t height, int64_t width);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRID_BUCKETS_H_
