// Batches per shape: the examples of each shape (bucket), in their order,
// into batches of that shape's rows, a shape's last partial batch per
// `remainder` (pad: full rows; keep: its count rounded up to
// rows_multiple; drop: left out, counted). What a bucketing planner does
// once it has given each example a shape.
//
// Example:
//   PlanBuilder builder = PlanBuilder::Grid();
//   AddShapeBatches({{.rows = 2, .length = 64, .width = 128}}, ids, shape_of,
//                   Remainder::kPad, 1, builder);
#ifndef JAXBATCH_PLAN_SHAPE_BATCHES_H_
#define JAXBATCH_PLAN_SHAPE_BATCHES_H_

#include <cstdint>
#include <span>

#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/plan_policies.h"

namespace jaxbatch {

// Adds the batches of `ids` (in order) to `builder`: ids[p] goes to shape
// shape_of[p] (-1: not planned), one example a row; `shapes[s].rows` are a
// full batch's rows (> 0, a multiple of rows_multiple).
void AddShapeBatches(std::span<const BatchShape> shapes, std::span<const int64_t> ids,
                     std::span<const int64_t> shape_of, Remainder remainder, int64_t rows_multiple,
                     PlanBuilder& builder);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_SHAPE_BATCHES_H_
