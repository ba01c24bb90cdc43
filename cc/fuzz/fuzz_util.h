// Shared by the libFuzzer targets: options drawn from the fuzzer's bytes,
// and checks that abort (so libFuzzer records the input) when broken.
//
// Sizes are drawn in two regimes: small ones, that plan and collate real
// data, and huge ones (anywhere up to 2^63 - 1), that must either plan in
// memory of the data or be refused with InvalidArgumentError, never wrap.
#ifndef JAXBATCH_FUZZ_FUZZ_UTIL_H_
#define JAXBATCH_FUZZ_FUZZ_UTIL_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "jaxbatch/plan/planner.h"

namespace jaxbatch::fuzz {

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Aborts with `what` when `ok` is false: a real assert, in every build.
#define FUZZ_CHECK(ok, ...)                                                       \
  do {                                                                            \
    if (!(ok)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #ok); \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fprintf(stderr, "\n");                                                 \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

// A size: usually small (1..small_max), sometimes 0 or negative (refused),
// or with `huge` anywhere up to 2^63 - 1 (often a power of two).
inline int64_t ConsumeSize(FuzzedDataProvider& in, int64_t small_max, bool huge) {
  switch (in.ConsumeIntegralInRange<int>(0, huge ? 9 : 7)) {
    case 0:
      return in.ConsumeIntegralInRange<int64_t>(-2, 0);
    case 8:
      return int64_t{1} << in.ConsumeIntegralInRange<int>(20, 62);
    case 9:
      return in.ConsumeIntegralInRange<int64_t>(1, kInt64Max);
    default:
      return in.ConsumeIntegralInRange<int64_t>(1, small_max);
  }
}

inline Remainder ConsumeRemainder(FuzzedDataProvider& in) {
  return static_cast<Remainder>(in.ConsumeIntegralInRange<int>(0, 2));
}

inline TooLong ConsumeTooLong(FuzzedDataProvider& in) {
  return static_cast<TooLong>(in.ConsumeIntegralInRange<int>(0, 2));
}

// One of the four planners with fuzzed options; `small_max` bounds the
// small sizes (lengths, rows, boundaries).
inline PlannerOptions ConsumePlannerOnly(FuzzedDataProvider& in, int64_t small_max, bool huge) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return PadToMaxOptions{.batch_size = ConsumeSize(in, small_max, huge),
                             .pad_to_multiple = ConsumeSize(in, 8, huge),
                             .remainder = ConsumeRemainder(in)};
    case 1: {
      FixedBucketsOptions o;
      const int count = in.ConsumeIntegralInRange<int>(0, 6);
      int64_t last = 0;
      for (int k = 0; k < count; ++k) {
        // Mostly increasing; sometimes not (refused).
        const int64_t step = ConsumeSize(in, small_max, huge);
        if (in.ConsumeProbability<float>() < 0.05f) {
          last = step;
        } else if (__builtin_add_overflow(last, step > 0 ? step : 1, &last)) {
          break;
        }
        o.boundaries.push_back(last);
      }
      if (in.ConsumeBool()) o.batch_size = ConsumeSize(in, small_max, huge);
      if (in.ConsumeBool()) o.token_budget = ConsumeSize(in, small_max * small_max, huge);
      o.remainder = ConsumeRemainder(in);
      o.too_long = ConsumeTooLong(in);
      return o;
    }
    case 2: {
      AutoBucketsOptions o;
      o.max_shapes = in.ConsumeIntegralInRange<int64_t>(0, 12);
      if (in.ConsumeBool()) o.batch_size = ConsumeSize(in, small_max, huge);
      if (in.ConsumeBool()) o.token_budget = ConsumeSize(in, small_max * small_max, huge);
      o.pad_to_multiple = ConsumeSize(in, 8, huge);
      o.remainder = ConsumeRemainder(in);
      return o;
    }
    default: {
      PackOptions o;
      o.row_length = ConsumeSize(in, small_max, huge);
      o.rows_per_batch = ConsumeSize(in, small_max, huge);
      if (in.ConsumeBool()) o.max_segments_per_row = ConsumeSize(in, 8, huge);
      o.algorithm = in.ConsumeBool() ? PackAlgorithm::kBestFit : PackAlgorithm::kFirstFit;
      if (in.ConsumeBool()) o.lookahead = ConsumeSize(in, 16, false);
      // Streaming instead of windows (both together are refused).
      if (in.ConsumeBool()) o.open_rows = ConsumeSize(in, 8, huge);
      o.too_long = ConsumeTooLong(in);
      o.remainder = ConsumeRemainder(in);
      return o;
    }
  }
}

// A planner's options with, half the time, a rows_multiple; the batch size
// it constrains is then mostly rounded up to a multiple (else refused).
inline PlannerOptions ConsumePlanner(FuzzedDataProvider& in, int64_t small_max, bool huge) {
  PlannerOptions options = ConsumePlannerOnly(in, small_max, huge);
  if (!in.ConsumeBool()) return options;
  const int64_t multiple = ConsumeSize(in, 4, huge);
  const bool round = in.ConsumeProbability<float>() < 0.8f;
  std::visit(
      [&](auto& o) {
        if constexpr (requires { o.rows_multiple; }) {  // not the graph planners
          o.rows_multiple = multiple;
          auto round_up = [&](int64_t& rows) {
            int64_t up = 0;
            if (round && multiple > 0 && rows > 0 &&
                !__builtin_mul_overflow(rows / multiple + (rows % multiple != 0), multiple, &up)) {
              rows = up;
            }
          };
          if constexpr (requires { o.rows_per_batch; }) {
            round_up(o.rows_per_batch);
          } else if constexpr (std::is_same_v<decltype(o.batch_size), int64_t>) {
            round_up(o.batch_size);
          } else if (o.batch_size) {
            round_up(*o.batch_size);
          }
        }
      },
      options);
  return options;
}

}  // namespace jaxbatch::fuzz

#endif  // JAXBATCH_FUZZ_FUZZ_UTIL_H_
