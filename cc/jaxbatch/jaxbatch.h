// jaxbatch: the C++ engine behind the Python package, usable on its own.
//
//   RaggedColumn, Dataset  data/      named ragged and fixed-shape columns
//   Plan(), BatchPlan      plan/      pad, bucket, token-budget and pack planners
//   Collate()              collate/   a planned batch into dense padded arrays
//
// Example (see examples/cpp/plan_and_collate.cc):
//   Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, values, n_values,
//                                    offsets, n, nullptr)});
//   BatchPlan plan = Plan(ds.column("tokens").Lengths(),
//                         AutoBucketsOptions{.max_shapes = 4, .token_budget = 4096});
//   for (int64_t b = 0; b < plan.num_batches(); ++b) {
//     std::vector<Array> arrays = Collate(ds, plan, b, {});
//   }
#ifndef JAXBATCH_JAXBATCH_H_
#define JAXBATCH_JAXBATCH_H_

#include "jaxbatch/base/error.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/dataset_builder.h"
#include "jaxbatch/data/dtype.h"
#include "jaxbatch/data/ragged_column.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/packer.h"
#include "jaxbatch/plan/planner.h"

#endif  // JAXBATCH_JAXBATCH_H_
