// Work units: a job's plan cut into pieces that run anywhere and commit one
// by one (jaxbatch.ray.run).
//
// A job on a cluster plans its whole input once, on the driver, and cuts the
// plan into units of consecutive batches: a unit closes at the first batch
// end at or past `examples_per_unit` examples, the rule jb.run's shards
// follow, so a unit is a shard. Each unit travels to a worker as its own
// small plan (SliceBatches): its batches with their example ids and shape
// ids, O(its examples) in size, so a worker never plans and never holds the
// whole plan. A worker collates and runs the slice as it would the plan's
// batches; the unit's output file is named after the unit's number.
//
// Example:
//   BatchPlan plan = Plan(lengths, AutoBucketsOptions{.max_shapes = 8, .batch_size = 32});
//   std::vector<int64_t> bounds = CutIntoUnits(plan, 8192);
//   for (size_t u = 0; u + 1 < bounds.size(); ++u) {
//     Send(u, SliceBatches(plan, bounds[u], bounds[u + 1]));
//   }
#ifndef JAXBATCH_JOB_WORK_UNITS_H_
#define JAXBATCH_JOB_WORK_UNITS_H_

#include <cstdint>
#include <vector>

#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch {

// The units' batch boundaries: {0, b1, ..., plan.num_batches()}, strictly
// increasing, unit u holding batches [bounds[u], bounds[u + 1]). A unit
// closes at the first batch end at or past `examples_per_unit` examples
// (ExamplesStarted: a split example counts once); the last holds the rest.
// An empty plan has no unit ({0}). Throws InvalidArgumentError for
// examples_per_unit < 1.
std::vector<int64_t> CutIntoUnits(const BatchPlan& plan, int64_t examples_per_unit);

// Batches [begin, end) of `plan` as a plan of their own: the same shapes
// (shape ids unchanged, so every unit compiles the same set), flags,
// features and resize targets; rows, example ids and pieces of those
// batches only; no dropped or skipped examples (the whole plan's). Its
// stats count its batches and examples. Throws OutOfRangeError unless
// 0 <= begin <= end <= plan.num_batches().
BatchPlan SliceBatches(const BatchPlan& plan, int64_t begin, int64_t end);

}  // namespace jaxbatch

#endif  // JAXBATCH_JOB_WORK_UNITS_H_
