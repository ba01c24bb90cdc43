// A loader's state at the edges (issue 38): every counter held at 2^63 - 1
// instead of wrapping (on main batches and examples added with a plain +=:
// signed overflow, which this binary's UBSan build aborts on, and Python
// showed a negative count, then refused its own state), and a refused state
// that leaves the loader it was checked against running as it was.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/state_json.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::Drain;
using testing::ThrownMessage;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Every counter a state holds.
constexpr int64_t LoaderState::* kCounters[] = {
    &LoaderState::batches,     &LoaderState::examples,      &LoaderState::skipped,
    &LoaderState::quarantined, &LoaderState::dropped,       &LoaderState::padding_batches,
    &LoaderState::truncated,   &LoaderState::real_elements, &LoaderState::padded_elements,
    &LoaderState::real_edges,  &LoaderState::padded_edges};

LoaderOptions Options(PlannerOptions planner, uint64_t seed) {
  LoaderOptions o;
  o.schedule.planner = std::move(planner);
  o.schedule.seed = seed;
  o.num_threads = 2;
  o.epochs = 2;
  return o;
}

// Options under which one epoch adds to every counter but the edges':
// bad records (skipped or quarantined), a dropped remainder, shard padding
// batches and truncated examples.
LoaderOptions EveryCounterMoves(ErrorPolicy on_error) {
  LoaderOptions o = Options(FixedBucketsOptions{.boundaries = {4, 8},
                                                .batch_size = 2,
                                                .remainder = Remainder::kDrop,
                                                .too_long = TooLong::kTruncate},
                            /*seed=*/5);
  o.schedule.shard_count = 2;
  o.on_error = on_error;
  o.schema.columns = {{.name = "tokens", .min_length = 1}};
  return o;
}

TEST(LoaderStateTest, EveryCounterSaturatesAtItsLimit) {
  const auto ds = testing::TokensDataset({3, 0, 9, 5, 2, 7, 12, 0, 4, 6, 1});
  for (ErrorPolicy policy : {ErrorPolicy::kSkip, ErrorPolicy::kQuarantine}) {
    SCOPED_TRACE(static_cast<int>(policy));
    const LoaderOptions o = EveryCounterMoves(policy);
    // The counts one run from 0 makes: each of them moves.
    LoaderState fresh;
    {
      Loader loader(ds, o);
      Drain(loader);
      fresh = loader.state();
    }
    EXPECT_GT(fresh.batches, 0);
    EXPECT_GT(fresh.examples, 0);
    EXPECT_GT(policy == ErrorPolicy::kSkip ? fresh.skipped : fresh.quarantined, 0);
    EXPECT_GT(fresh.dropped, 0);
    EXPECT_GT(fresh.truncated, 0);
    EXPECT_GT(fresh.real_elements, 0);
    LoaderState at_limit{.seed = o.schedule.seed};
    for (int64_t LoaderState::* counter : kCounters) at_limit.*counter = kMax;
    Loader loader(ds, o, at_limit);
    EXPECT_EQ(Drain(loader).size(), static_cast<size_t>(fresh.batches));
    const LoaderState end = loader.state();
    for (int64_t LoaderState::* counter : kCounters) EXPECT_EQ(end.*counter, kMax);
    // Its own state reads back and restores (at the stream's end).
    const LoaderState again = LoaderStateFromJson(LoaderStateToJson(end));
    EXPECT_EQ(again.batches, kMax);
    Loader restored(ds, o, again);
    EXPECT_FALSE(restored.Next());
  }
}

TEST(LoaderStateTest, ARefusedStateLeavesTheLoaderAsItWas) {
  const auto ds = testing::TokensDataset(testing::RandomLengths(40, 9, 7));
  const LoaderOptions o = Options(PackOptions{.row_length = 12, .rows_per_batch = 2}, 3);
  std::vector<std::string> whole;
  {
    Loader uninterrupted(ds, o);
    whole = Drain(uninterrupted);
  }
  Loader loader(ds, o);
  std::vector<std::string> got = Drain(loader, 3);
  LoaderState state = loader.state();
  const auto refused = [&](LoaderState bad, const std::string& message) {
    EXPECT_TRUE(
        Contains(ThrownMessage<InvalidArgumentError>([&] { loader.CheckState(bad); }), message));
  };
  LoaderState other = state;
  other.seed = 4;
  refused(other, "saved with seed 4 but this loader has seed 3");
  other = state;
  other.key->fingerprint.reset();
  refused(other, StrCat("the state (version ", kLoaderStateVersion, ") has no fingerprint"));
  other = state;
  other.step = 1000;
  refused(other, "the state's step 1000 is past the end of epoch 0");
  other = state;
  other.examples = -1;
  refused(other, "the state's examples must be >= 0, found -1");
  loader.CheckState(state);  // its own state: accepted, and nothing changes
  for (const std::string& batch : Drain(loader)) got.push_back(batch);
  EXPECT_EQ(got, whole);
}

// An older state (version 2) is checked as its version planned, and a
// loader restored from one checks later states as it was asked to plan.
TEST(LoaderStateTest, AnOlderStateIsCheckedAsItsVersionPlanned) {
  const auto ds = testing::TokensDataset(testing::RandomLengths(50, 20, 3));
  LoaderOptions o = Options(AutoBucketsOptions{.max_shapes = 3, .batch_size = 4}, 9);
  o.epochs = 1;
  Loader current(ds, o);
  Drain(current, 2);
  LoaderState older = current.state();
  older.key->version = 2;
  older.key->fingerprint.reset();  // saved before fingerprints: checked by size
  current.CheckState(older);
  Loader restored(ds, o, older);
  EXPECT_EQ(restored.state().key->version, 2);
  restored.CheckState(current.state());  // a version-3 state of the same stream
}

}  // namespace
}  // namespace jaxbatch
