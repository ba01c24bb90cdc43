// PlannerKey: the canonical text of a planner's options, what loader states
// and job journals store to say which planner made a stream, and its parser.
//
// The text reads like the Python planner that made the options, every field
// named:
//   AutoBuckets(max_shapes=8, token_budget=65536, batch_size=None,
//               pad_to_multiple=1, remainder='pad')
// A field added after keys were first stored (rows_multiple, open_rows) is
// written only when it differs from its default, so a key stored before it
// existed is still the key of the same options. ParsePlannerKey reads every
// key PlannerKey writes and the keys earlier releases stored (Python reprs:
// fields in any order, boundaries as a list or tuple, numpy integers as
// np.int64(8)); two keys name the same planner exactly when their parsed
// options are equal.
//
// Example:
//   const std::string key = PlannerKey(AutoBucketsOptions{.max_shapes = 8, .batch_size = 64});
//   assert(ParsePlannerKey(key) == PlannerOptions(AutoBucketsOptions{.max_shapes = 8,
//                                                                    .batch_size = 64}));
#ifndef JAXBATCH_PLAN_PLANNER_KEY_H_
#define JAXBATCH_PLAN_PLANNER_KEY_H_

#include <string>
#include <string_view>

#include "jaxbatch/plan/planner.h"

namespace jaxbatch {

std::string PlannerKey(const PlannerOptions& options);

// Throws InvalidArgumentError naming the position and what was expected for
// text that is no planner key (an unknown planner or field, a bad value).
// The options are not validated (see ValidatePlannerOptions).
PlannerOptions ParsePlannerKey(std::string_view key);

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_PLANNER_KEY_H_
