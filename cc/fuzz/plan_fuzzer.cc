// libFuzzer target: planning and scheduling with random options, lengths
// and orders. A plan must account for every example exactly once, keep
// every batch within its options (rows, token budget, row length, slots),
// store O(examples + batches) entries whatever the batch size, report
// stats equal to a recount that cannot wrap, and for PadToMax equal a naive
// reference. An epoch schedule must deal disjoint, same-shaped steps to
// every shard whatever the shard count. Bad options and too-long examples
// must be InvalidArgumentError (or OutOfRangeError for a bad order), nothing
// else.
#include <algorithm>
#include <numeric>
#include <variant>

#include "fuzz_util.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/load/schedule.h"

namespace jaxbatch::fuzz {
namespace {

struct Limits {
  int64_t max_rows = kInt64Max;  // batch_size / rows_per_batch
  int64_t token_budget = 0;      // 0 = none
  int64_t length = 0;            // Pack: every batch's length
  int64_t segments = 0;          // Pack: every batch's segments (0: the default)
  Remainder remainder = Remainder::kPad;
  TooLong too_long = TooLong::kError;
  bool packed = false;
  int64_t rows_multiple = 1;  // every batch's rows are a multiple
};

Limits LimitsOf(const PlannerOptions& options) {
  return std::visit(
      [](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        Limits l;
        if constexpr (requires { o.rows_multiple; }) {  // graph planners: graph_fuzzer.cc
          l.remainder = o.remainder;
          l.rows_multiple = o.rows_multiple;
        }
        if constexpr (std::is_same_v<T, PadToMaxOptions>) l.max_rows = o.batch_size;
        if constexpr (std::is_same_v<T, FixedBucketsOptions> ||
                      std::is_same_v<T, AutoBucketsOptions>) {
          if (o.batch_size) l.max_rows = *o.batch_size;
          l.token_budget = o.token_budget.value_or(0);
        }
        if constexpr (std::is_same_v<T, FixedBucketsOptions>) l.too_long = o.too_long;
        if constexpr (std::is_same_v<T, PackOptions>) {
          l.max_rows = o.rows_per_batch;
          l.length = o.row_length;
          l.segments = o.max_segments_per_row.value_or(0);  // 0: sized from the lengths.
          l.too_long = o.too_long;
          l.packed = true;
        }
        return l;
      },
      options);
}

int64_t Saturate(__int128 v) { return v > kInt64Max ? kInt64Max : static_cast<int64_t>(v); }

// PadToMax by hand: consecutive chunks, each padded to its longest example
// rounded up (in 128 bits, so nothing wraps here).
void CheckPadToMax(const BatchPlan& plan, const std::vector<int64_t>& lengths,
                   const std::vector<int64_t>& ids, const PadToMaxOptions& o) {
  int64_t b = 0;
  for (size_t start = 0; start < ids.size(); start += static_cast<size_t>(o.batch_size)) {
    const size_t end = std::min(ids.size(), start + static_cast<size_t>(o.batch_size));
    const auto count = static_cast<int64_t>(end - start);
    if (count < o.batch_size && o.remainder == Remainder::kDrop) {
      FUZZ_CHECK(plan.dropped_examples == std::vector<int64_t>(ids.begin() + start, ids.end()),
                 "PadToMax dropped the wrong examples");
      break;
    }
    int64_t longest = 0;
    for (size_t k = start; k < end; ++k) longest = std::max(longest, lengths[ids[k]]);
    const __int128 units =
        std::max<__int128>(1, (__int128{longest} + o.pad_to_multiple - 1) / o.pad_to_multiple);
    const __int128 length = units * o.pad_to_multiple;
    const BatchView view = plan.batch(b++);
    FUZZ_CHECK(view.shape.length == length, "batch %ld: length %ld", long(b - 1),
               long(view.shape.length));
    const auto kept = static_cast<int64_t>((__int128{count} + o.rows_multiple - 1) /
                                           o.rows_multiple * o.rows_multiple);
    FUZZ_CHECK(view.shape.rows == (o.remainder == Remainder::kKeep ? kept : o.batch_size),
               "batch %ld: rows %ld", long(b - 1), long(view.shape.rows));
    const std::span<const int64_t> got = view.all_examples();
    FUZZ_CHECK(std::equal(got.begin(), got.end(), ids.begin() + start, ids.begin() + end),
               "batch %ld: other examples than the reference", long(b - 1));
  }
  FUZZ_CHECK(b == plan.num_batches(), "PadToMax: %ld batches, reference %ld",
             long(plan.num_batches()), long(b));
}

void CheckPlan(const BatchPlan& plan, const std::vector<int64_t>& lengths,
               const std::vector<int64_t>& ids, const PlannerOptions& options) {
  const Limits limits = LimitsOf(options);
  const int64_t batches = plan.num_batches();
  FUZZ_CHECK(plan.packed == limits.packed, "packed flag");
  FUZZ_CHECK(plan.batch_row_begin.size() == static_cast<size_t>(batches) + 1, "batch_row_begin");
  // O(examples + batches): only rows holding an example are stored.
  FUZZ_CHECK(plan.row_example_begin.size() <= ids.size() + 1, "%zu stored rows for %zu examples",
             plan.row_example_begin.size() - 1, ids.size());
  std::vector<int64_t> seen;
  std::vector<int64_t> per_shape(plan.shapes.size(), 0);
  __int128 padded = 0, real = 0, occupied = 0;
  int64_t truncated = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const BatchView view = plan.batch(b);
    const BatchShape& s = view.shape;
    ++per_shape[static_cast<size_t>(plan.batch_shape_ids[static_cast<size_t>(b)])];
    FUZZ_CHECK(s.rows > 0 && s.length > 0, "batch %ld: shape %ld x %ld", long(b), long(s.rows),
               long(s.length));
    FUZZ_CHECK(s.rows <= limits.max_rows, "batch %ld: %ld rows, more than %ld", long(b),
               long(s.rows), long(limits.max_rows));
    FUZZ_CHECK(s.rows % limits.rows_multiple == 0, "batch %ld: %ld rows, not a multiple of %ld",
               long(b), long(s.rows), long(limits.rows_multiple));
    if (limits.remainder == Remainder::kPad && limits.token_budget == 0) {
      FUZZ_CHECK(s.rows == limits.max_rows, "batch %ld: %ld rows, not %ld", long(b), long(s.rows),
                 long(limits.max_rows));
    }
    if (limits.token_budget > 0) {
      FUZZ_CHECK(__int128{s.rows} * s.length <= limits.token_budget,
                 "batch %ld: %ld x %ld over the token budget %ld", long(b), long(s.rows),
                 long(s.length), long(limits.token_budget));
    }
    if (limits.packed) {
      FUZZ_CHECK(s.length == limits.length, "packed shape");
      if (limits.segments > 0) {
        FUZZ_CHECK(s.segments == limits.segments, "packed segments not the ones asked for");
      } else {  // The default: a power of two, or the row length.
        FUZZ_CHECK(s.segments >= 1 && s.segments <= s.length &&
                       (s.segments == s.length || (s.segments & (s.segments - 1)) == 0),
                   "default packed segments %ld for rows of %ld", long(s.segments), long(s.length));
      }
    } else {
      FUZZ_CHECK(s.segments == 0, "segments in a padded plan");
    }
    FUZZ_CHECK(view.stored_rows() <= s.rows, "batch %ld stores more rows than its shape", long(b));
    padded += __int128{s.rows} * s.length;
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      const std::span<const int64_t> row = view.row_examples(r);
      FUZZ_CHECK(!row.empty(), "batch %ld row %ld: a stored empty row", long(b), long(r));
      FUZZ_CHECK(static_cast<int64_t>(row.size()) <= (limits.packed ? s.segments : 1),
                 "batch %ld row %ld: %zu examples", long(b), long(r), row.size());
      __int128 used = 0, total = 0;
      for (int64_t e : row) {
        seen.push_back(e);
        const int64_t length = lengths[static_cast<size_t>(e)];
        const __int128 take = std::min<__int128>(length, s.length - used);
        if (take < length) ++truncated;
        used += take;
        total += length;
      }
      FUZZ_CHECK(plan.allow_truncate || total <= s.length, "batch %ld row %ld overflows", long(b),
                 long(r));
      real += used;
      occupied += s.length;
    }
  }
  // Every example once: planned, dropped or skipped.
  FUZZ_CHECK(plan.dropped_examples.empty() || limits.remainder == Remainder::kDrop, "dropped");
  FUZZ_CHECK(plan.skipped_examples.empty() || limits.too_long == TooLong::kSkip, "skipped");
  FUZZ_CHECK(!plan.allow_truncate || limits.too_long == TooLong::kTruncate, "truncate");
  seen.insert(seen.end(), plan.dropped_examples.begin(), plan.dropped_examples.end());
  seen.insert(seen.end(), plan.skipped_examples.begin(), plan.skipped_examples.end());
  std::vector<int64_t> want = ids;
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  FUZZ_CHECK(seen == want, "%zu examples accounted for, %zu given", seen.size(), want.size());
  const PlanStats& st = plan.stats;
  FUZZ_CHECK(st.examples == static_cast<int64_t>(ids.size()) && st.batches == batches &&
                 st.batches_per_shape == per_shape,
             "stats counts");
  FUZZ_CHECK(st.padded_elements == Saturate(padded) && st.real_elements == Saturate(real) &&
                 st.occupied_elements == Saturate(occupied) && st.truncated == truncated,
             "stats elements: padded %ld real %ld", long(st.padded_elements),
             long(st.real_elements));
  FUZZ_CHECK(st.efficiency >= 0.0, "efficiency %f", st.efficiency);
  if (const auto* o = std::get_if<PadToMaxOptions>(&options)) CheckPadToMax(plan, lengths, ids, *o);
}

void CheckSchedule(FuzzedDataProvider& in, const std::vector<int64_t>& lengths,
                   const PlannerOptions& options) {
  const bool huge = in.ConsumeBool();
  ScheduleOptions o{.planner = options,
                    .shuffle = static_cast<ShuffleMode>(in.ConsumeIntegralInRange<int>(0, 2)),
                    .block_size = in.ConsumeIntegralInRange<int64_t>(1, 16),
                    .seed = in.ConsumeIntegral<uint64_t>(),
                    .shard_count = huge ? in.ConsumeIntegralInRange<int64_t>(1, kInt64Max)
                                        : in.ConsumeIntegralInRange<int64_t>(1, 5)};
  std::vector<uint8_t> excluded(lengths.size());
  for (uint8_t& x : excluded) x = in.ConsumeProbability<float>() < 0.1f;
  const int64_t epoch = in.ConsumeIntegralInRange<int64_t>(0, 3);
  // Every shard of a small count; the first and last few of a huge one.
  std::vector<int64_t> indices;
  for (int64_t k = 0; k < std::min<int64_t>(o.shard_count, 5); ++k) indices.push_back(k);
  // (Of a count of 6, shard 4 is among the first five already.)
  for (int64_t k = std::max<int64_t>(5, o.shard_count - 2); k < o.shard_count; ++k) {
    indices.push_back(k);
  }
  std::vector<EpochSchedule> all;
  for (int64_t index : indices) {
    o.shard_index = index;
    try {
      all.push_back(MakeEpochSchedule(lengths, excluded, o, epoch));
    } catch (const InvalidArgumentError&) {
      return;  // a planner refusal: the plan fuzzing above covers it
    }
  }
  std::vector<int64_t> seen;
  for (const EpochSchedule& s : all) {
    FUZZ_CHECK(s.steps.size() == all[0].steps.size(), "shards with different step counts");
    FUZZ_CHECK(static_cast<int64_t>(s.steps.size()) <= s.plan.num_batches(),
               "%zu steps for %ld batches", s.steps.size(), long(s.plan.num_batches()));
    for (size_t t = 0; t < s.steps.size(); ++t) {
      const BatchView view = s.StepBatch(static_cast<int64_t>(t));
      FUZZ_CHECK(view.shape == all[0].StepBatch(static_cast<int64_t>(t)).shape,
                 "step %zu: shards disagree on the shape", t);
      for (int64_t e : view.all_examples()) seen.push_back(e);
    }
  }
  std::sort(seen.begin(), seen.end());
  FUZZ_CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end(),
             "an example dealt to two shards");
  for (int64_t e : seen) FUZZ_CHECK(!excluded[static_cast<size_t>(e)], "excluded example planned");
  if (o.shard_count <= 5) {  // every shard computed: the whole epoch is accounted for
    const auto candidates = std::count(excluded.begin(), excluded.end(), 0);
    const PlanStats& st = all[0].plan.stats;
    FUZZ_CHECK(static_cast<int64_t>(seen.size()) + st.dropped + st.skipped + all[0].shard_dropped ==
                   candidates,
               "%zu dealt of %ld", seen.size(), long(candidates));
  }
}

}  // namespace
}  // namespace jaxbatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jaxbatch;
  using namespace jaxbatch::fuzz;
  FuzzedDataProvider in(data, size);
  const bool huge = in.ConsumeBool();
  const PlannerOptions options = ConsumePlanner(in, 64, huge);
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, 200);
  std::vector<int64_t> lengths(n);
  for (int64_t& l : lengths) l = ConsumeSize(in, 64, huge && in.ConsumeBool());
  const bool negative =
      std::any_of(lengths.begin(), lengths.end(), [](int64_t l) { return l < 0; });
  std::vector<int64_t> order;
  const bool subset = in.ConsumeBool();
  if (subset) {  // a subset, shuffled (empty: plans nothing); sometimes a bad id
    for (size_t i = 0; i < n; ++i) {
      if (in.ConsumeBool()) order.push_back(static_cast<int64_t>(i));
    }
    for (size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[in.ConsumeIntegralInRange<size_t>(0, i - 1)]);
    }
    if (in.ConsumeProbability<float>() < 0.05f) order.push_back(in.ConsumeIntegral<int64_t>());
  }
  std::vector<int64_t> ids = order;
  if (!subset) {
    ids.resize(n);
    std::iota(ids.begin(), ids.end(), 0);
  }
  BatchPlan plan;
  try {
    plan = Plan(lengths, options, subset ? PlanOrder(order) : std::nullopt);
  } catch (const InvalidArgumentError&) {
    return 0;  // refused options, a too-long example, a negative length, a repeated id
  } catch (const OutOfRangeError&) {
    return 0;  // an id in `order` that is not an example
  }
  FUZZ_CHECK(!negative, "a negative length was planned");
  CheckPlan(plan, lengths, ids, options);
  CheckSchedule(in, lengths, options);
  return 0;
}
