// jaxbatch: the C++ engine behind the Python package, usable on its own.
//
//   RaggedColumn, Dataset  data/      named ragged and fixed-shape columns
//   Plan(), BatchPlan      plan/      pad, bucket, token-budget and pack planners
//   Collate()              collate/   a planned batch into dense padded arrays
//   Loader                 load/      threads that shuffle, shard, plan, collate and
//                                     prefetch; LoaderState to resume, and
//                                     its text (LoaderStateToJson/FromJson)
//   Journal, WriteFileAtomic job/     a job's durable log and its files
//
// Examples: examples/cpp/plan_and_collate.cc, examples/cpp/load_and_resume.cc.
//
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
#include "jaxbatch/data/fingerprint.h"
#include "jaxbatch/data/graph.h"
#include "jaxbatch/data/ragged_column.h"
#include "jaxbatch/data/text_fingerprint.h"
#include "jaxbatch/job/files.h"
#include "jaxbatch/job/journal.h"
#include "jaxbatch/job/work_units.h"
#include "jaxbatch/load/chunk_cache.h"
#include "jaxbatch/load/chunked_source.h"
#include "jaxbatch/load/elastic.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/schedule.h"
#include "jaxbatch/load/schema.h"
#include "jaxbatch/load/state_json.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/graph_planner.h"
#include "jaxbatch/plan/packer.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

#endif  // JAXBATCH_JAXBATCH_H_
