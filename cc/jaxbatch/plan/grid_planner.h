// Grid planners: examples with two variable axes (images [h, w, ...], pair
// features [L, L, ...]) into batches of shape {rows, length = H, width = W},
// each example padded bottom/right to H x W cells.
//
// A planner sees each example's height and width only (Plan's `lengths`
// and `widths`). A square or tied column is planned with heights == widths,
// and every grid planner keeps H == W when every example is square, with no
// special case: each axis's choice is made from the same sizes.
//   PadToMaxOptions     consecutive batches, each axis padded to the batch's
//                       largest (both rounded up to pad_to_multiple).
//   AutoBucketsOptions  at most max_shapes shapes (H, W) chosen from the
//                       joint (h, w) histogram to minimise padded cells
//                       (grid_buckets.h: exact for a few distinct sizes, a
//                       measured heuristic otherwise); a shape of H x W
//                       cells gets batch_size rows and/or
//                       token_budget // (H x W), rounded down to
//                       rows_multiple.
// Any other planner over grid sizes is an InvalidArgumentError naming the
// ones that plan grids.
//
// Example:
//   BatchPlan plan = Plan(heights, PadToMaxOptions{.batch_size = 8}, {}, {}, widths);
//   plan.shapes[0];  // {.rows = 8, .length = max h, .width = max w}
#ifndef JAXBATCH_PLAN_GRID_PLANNER_H_
#define JAXBATCH_PLAN_GRID_PLANNER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {

// Throws InvalidArgumentError unless `widths` has one size >= 0 per height
// and `options` plan grids; names the planners that do.
void CheckGridSizes(std::span<const int64_t> heights, std::span<const int64_t> widths,
                    const PlannerOptions& options);

// Throws the InvalidArgumentError planning would for the first example no
// batch of `options` can hold (CheckExamplesFit over grid sizes).
void CheckGridExamplesFit(std::span<const int64_t> heights, std::span<const int64_t> widths,
                          const PlannerOptions& options);

// Plans the examples `ids` (in that order) of `heights` x `widths` (indexed
// by example id): a grid plan (BatchPlan::grid). Options already validated.
BatchPlan PlanGrid(std::span<const int64_t> heights, std::span<const int64_t> widths,
                   const std::vector<int64_t>& ids, const PlannerOptions& options);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_GRID_PLANNER_H_
