// Elastic resume: a state saved on n shards continues on m. The reference is
// the uninterrupted run on n shards: what its shards yield after the saved
// step, all together, is what the m shards yield, each piece once, with one
// shape per step on every shard.
#include "jaxbatch/load/elastic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/output_names.h"
#include "jaxbatch/load/state_json.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::ExpectThrowsWith;
using testing::RandomLengths;
using testing::TokensDataset;

using Pieces = std::multiset<int64_t>;

// The planners, each with a shuffle: every combination of shuffle mode and
// planner kind (buckets, packing with pieces) the deal must handle.
struct Case {
  PlannerOptions planner;
  ShuffleMode shuffle;
};

std::vector<Case> Cases() {
  return {
      {PadToMaxOptions{.batch_size = 7}, ShuffleMode::kGlobal},
      {AutoBucketsOptions{.max_shapes = 3, .token_budget = 256}, ShuffleMode::kBlock},
      {PackOptions{.row_length = 48, .rows_per_batch = 3, .too_long = TooLong::kSplit},
       ShuffleMode::kGlobal},
      {PackOptions{
           .row_length = 40, .rows_per_batch = 2, .algorithm = PackAlgorithm::kConcatThenSplit},
       ShuffleMode::kNone},
      {FixedBucketsOptions{.boundaries = {16, 32, 64}, .batch_size = 5}, ShuffleMode::kGlobal},
  };
}

void AddStep(const EpochSchedule& schedule, int64_t t, Pieces* into) {
  const BatchView view = schedule.StepBatch(t);
  for (int64_t e : view.all_examples()) into->insert(e);
}

// The deal alone: the n shards' first t steps and the m shards' remainder
// make up the plan's batches, each once; the m shards share shapes per step.
// remainder="drop": each deal drops its own uneven tails, so the remainder's
// deal on m drops what it counts (shard_dropped) and nothing else is missing.
TEST(ElasticTest, RemainderDealtToOtherShardsCompletesTheEpoch) {
  const std::vector<int64_t> lengths = RandomLengths(300, 60, 7);
  std::mt19937 rng(11);
  std::vector<Case> cases = Cases();
  cases.push_back(
      {PadToMaxOptions{.batch_size = 6, .remainder = Remainder::kDrop}, ShuffleMode::kGlobal});
  cases.push_back(
      {AutoBucketsOptions{.max_shapes = 4, .batch_size = 5, .remainder = Remainder::kDrop},
       ShuffleMode::kNone});
  for (const Case& c : cases) {
    const bool drop = &c >= &cases[cases.size() - 2];
    for (int64_t n = 1; n <= 5; ++n) {
      for (int64_t m = 1; m <= 5; ++m) {
        SCOPED_TRACE(StrCat(PlannerName(c.planner), " n=", n, " m=", m));
        ScheduleOptions o{.planner = c.planner, .shuffle = c.shuffle, .seed = 3};
        o.shard_count = n;
        const EpochSchedule full = MakeEpochSchedule(lengths, {}, o, /*epoch=*/1);
        const auto steps = static_cast<int64_t>(full.steps.size());
        const int64_t t = std::uniform_int_distribution<int64_t>(0, steps - 1)(rng);
        Pieces all;
        for (int64_t b = 0; b < full.plan.num_batches(); ++b) {
          for (int64_t e : full.plan.batch(b).all_examples()) all.insert(e);
        }
        Pieces got;
        for (int64_t i = 0; i < n; ++i) {
          o.shard_index = i;
          const EpochSchedule shard = MakeEpochSchedule(lengths, {}, o, 1);
          for (int64_t s = 0; s < t; ++s) AddStep(shard, s, &got);
        }
        o.shard_count = m;
        std::vector<EpochSchedule> rest;
        for (int64_t j = 0; j < m; ++j) {
          o.shard_index = j;
          const EarlierDeal earlier{.shard_count = n, .steps = t};
          rest.push_back(DealToShards(full.plan, o, 1, {&earlier, 1}));
          EXPECT_TRUE(rest.back().remainder);
          for (size_t s = 0; s < rest.back().steps.size(); ++s) {
            AddStep(rest.back(), static_cast<int64_t>(s), &got);
          }
        }
        for (const EpochSchedule& r : rest) {
          ASSERT_EQ(r.steps.size(), rest[0].steps.size());
          for (size_t s = 0; s < r.steps.size(); ++s) {
            EXPECT_EQ(r.StepBatch(static_cast<int64_t>(s)).shape,
                      rest[0].StepBatch(static_cast<int64_t>(s)).shape);
          }
        }
        if (!drop) {
          EXPECT_EQ(got, all);
          continue;
        }
        EXPECT_TRUE(std::includes(all.begin(), all.end(), got.begin(), got.end()));
        EXPECT_EQ(static_cast<int64_t>(all.size() - got.size()), rest[0].shard_dropped);
      }
    }
  }
}

TEST(ElasticTest, NoEarlierDealIsTheUsualDealAndTooManyStepsAreRefused) {
  const std::vector<int64_t> lengths = RandomLengths(200, 60, 5);
  ScheduleOptions o{.planner = PadToMaxOptions{.batch_size = 4}, .seed = 8};
  o.shard_count = 3;
  o.shard_index = 2;
  const EpochSchedule usual = MakeEpochSchedule(lengths, {}, o, 0);
  const EpochSchedule dealt = DealToShards(usual.plan, o, 0);
  EXPECT_EQ(dealt.steps, usual.steps);
  EXPECT_FALSE(dealt.remainder);
  const EarlierDeal too_many{.shard_count = 1, .steps = 51};  // 50 batches: 50 steps on 1
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { DealToShards(usual.plan, o, 0, {&too_many, 1}); },
      "took 51 steps on 1 shards, but what was left of it has 50 steps");
}

// -- through the Loader --------------------------------------------------------

LoaderOptions Options(const Case& c, int64_t index, int64_t count, int64_t epochs = 2) {
  LoaderOptions o;
  o.schedule.planner = c.planner;
  o.schedule.shuffle = c.shuffle;
  o.schedule.seed = 21;
  o.schedule.shard_index = index;
  o.schedule.shard_count = count;
  o.epochs = epochs;
  o.num_threads = 1;
  o.prefetch = 2;
  return o;
}

// The pieces a batch holds: example_index (with source_index, a mixture's
// source times 1e6 on top).
std::vector<int64_t> Held(const LoadedBatch& batch) {
  const Array& ids = testing::FindArray(batch, kExampleIndexName);
  const auto* id = reinterpret_cast<const int64_t*>(ids.data);
  const int32_t* source = nullptr;
  for (const Array& a : batch.arrays) {
    if (a.name == kSourceIndexName) source = reinterpret_cast<const int32_t*>(a.data);
  }
  std::vector<int64_t> held;
  for (int64_t i = 0; i < ids.num_bytes() / 8; ++i) {
    if (id[i] >= 0) held.push_back(id[i] + (source ? source[i] * 1000000 : 0));
  }
  return held;
}

struct ShardRun {
  std::vector<std::vector<int64_t>> steps;  // each batch's pieces
  std::vector<BatchShape> shapes;
  LoaderState state;  // after the batches taken
};

// Shard `loader`'s next `limit` batches (-1: all).
ShardRun Take(Loader& loader, int64_t limit = -1) {
  ShardRun run;
  while (limit < 0 || static_cast<int64_t>(run.steps.size()) < limit) {
    std::optional<LoadedBatch> batch = loader.Next();
    if (!batch) break;
    run.steps.push_back(Held(*batch));
    run.shapes.push_back(batch->shape);
  }
  run.state = loader.state();
  return run;
}

Pieces Union(const std::vector<ShardRun>& runs, size_t from = 0) {
  Pieces out;
  for (const ShardRun& r : runs) {
    for (size_t s = from; s < r.steps.size(); ++s) out.insert(r.steps[s].begin(), r.steps[s].end());
  }
  return out;
}

void ExpectSameShapePerStep(const std::vector<ShardRun>& runs) {
  for (const ShardRun& r : runs) {
    ASSERT_EQ(r.shapes, runs[0].shapes);
  }
}

// Runs `make(index, count, start)` on `count` shards from the states `saved`
// (ElasticStart), each to the end.
template <typename Make>
std::vector<ShardRun> Resume(Make make, const std::vector<LoaderState>& saved, int64_t count) {
  std::vector<ShardRun> runs;
  for (int64_t j = 0; j < count; ++j) {
    // Through the state's text, as a job saves and reads it.
    std::vector<LoaderState> read;
    for (const LoaderState& s : saved) read.push_back(LoaderStateFromJson(LoaderStateToJson(s)));
    std::unique_ptr<Loader> loader = make(j, count, ElasticStart(read, j, count));
    runs.push_back(Take(*loader));
  }
  return runs;
}

// For n, m in 1..5: save at a random step on n shards, resume on m. Every
// piece the uninterrupted n run yields after that step comes once from the
// m shards, two epochs long (the second dealt to m from its start).
TEST(ElasticTest, ResumeOnAnyShardCountYieldsTheRestOfTheStreamOnce) {
  const auto data = TokensDataset(RandomLengths(160, 50, 9));
  const std::vector<Case> cases = Cases();
  std::mt19937 rng(5);
  for (int64_t n = 1; n <= 5; ++n) {
    for (int64_t m = 1; m <= 5; ++m) {
      const Case& c = cases[static_cast<size_t>(n * 5 + m) % cases.size()];
      SCOPED_TRACE(StrCat(PlannerName(c.planner), " n=", n, " m=", m));
      const auto make = [&](int64_t i, int64_t count, std::optional<LoaderState> start) {
        return std::make_unique<Loader>(data, Options(c, i, count), std::move(start));
      };
      std::vector<ShardRun> full;
      for (int64_t i = 0; i < n; ++i) full.push_back(Take(*make(i, n, std::nullopt)));
      const auto total = static_cast<int64_t>(full[0].steps.size());
      const int64_t t = std::uniform_int_distribution<int64_t>(1, total - 1)(rng);
      std::vector<LoaderState> saved;
      for (int64_t i = 0; i < n; ++i) saved.push_back(Take(*make(i, n, std::nullopt), t).state);
      const std::vector<ShardRun> rest = Resume(make, saved, m);
      ExpectSameShapePerStep(rest);
      EXPECT_EQ(Union(rest), Union(full, static_cast<size_t>(t)));
      // Past the resumed epoch the state is an ordinary one of m shards.
      EXPECT_EQ(rest[0].state.epoch, 2);
      EXPECT_TRUE(rest[0].state.earlier_deals.empty());
    }
  }
}

// remainder="drop": what the m shards yield and count as dropped makes up
// the plan as the n shards' did (the plan's own drops counted by both).
TEST(ElasticTest, DropsOfTheResumedDealAreCounted) {
  const auto data = TokensDataset(RandomLengths(150, 50, 6));
  const Case c{AutoBucketsOptions{.max_shapes = 3, .batch_size = 4, .remainder = Remainder::kDrop},
               ShuffleMode::kGlobal};
  const auto make = [&](int64_t i, int64_t count, std::optional<LoaderState> start) {
    return std::make_unique<Loader>(data, Options(c, i, count, /*epochs=*/1), std::move(start));
  };
  std::vector<ShardRun> full;
  for (int64_t i = 0; i < 2; ++i) full.push_back(Take(*make(i, 2, std::nullopt)));
  std::vector<LoaderState> saved;
  std::vector<ShardRun> first;
  for (int64_t i = 0; i < 2; ++i) {
    first.push_back(Take(*make(i, 2, std::nullopt), 3));
    saved.push_back(first.back().state);
  }
  const std::vector<ShardRun> rest = Resume(make, saved, 3);
  EXPECT_GT(rest[0].state.dropped, 0);
  EXPECT_EQ(Union(full).size() + static_cast<size_t>(full[0].state.dropped),
            Union(first).size() + Union(rest).size() + static_cast<size_t>(rest[0].state.dropped));
}

// The shards before wrote the quarantine file when they entered epoch 0:
// shard 0 of the new count does not append the records again.
TEST(ElasticTest, AResumedEpochDoesNotQuarantineAgain) {
  auto data = TokensDataset({3, 0, 40, 5, 2, 7, 0, 4, 6, 1, 9, 2});
  const Case c{PadToMaxOptions{.batch_size = 2}, ShuffleMode::kGlobal};
  const std::string path =
      (std::filesystem::temp_directory_path() / "jaxbatch_elastic_quarantine_test.jsonl").string();
  std::remove(path.c_str());
  const auto options = [&](int64_t i, int64_t count) {
    LoaderOptions o = Options(c, i, count, /*epochs=*/1);
    o.schema.columns = {{.name = "tokens", .min_length = 1, .max_length = 10}};
    o.on_error = ErrorPolicy::kQuarantine;
    o.quarantine_path = path;
    return o;
  };
  std::vector<LoaderState> saved;
  for (int64_t i = 0; i < 2; ++i) {
    Loader loader(data, options(i, 2));
    testing::Drain(loader, 1);
    saved.push_back(loader.state());
  }
  for (int64_t j = 0; j < 3; ++j) {
    Loader loader(data, options(j, 3), ElasticStart(saved, j, 3));
    testing::Drain(loader);
    EXPECT_EQ(loader.state().quarantined, 3);  // counted from the restore
  }
  std::ifstream in(path);
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 3);  // once, by shard 0 of 2
  std::remove(path.c_str());
}

// A state saved after an elastic resume, in its remainder, resumes on a
// third shard count, and one given by a single shard does as every shard's.
TEST(ElasticTest, ResumesChainAndOneShardsStateIsEnough) {
  const auto data = TokensDataset(RandomLengths(200, 50, 4));
  const Case c = Cases()[2];  // Pack with split pieces
  const auto make = [&](int64_t i, int64_t count, std::optional<LoaderState> start) {
    return std::make_unique<Loader>(data, Options(c, i, count, /*epochs=*/1), std::move(start));
  };
  std::vector<ShardRun> full;
  for (int64_t i = 0; i < 4; ++i) full.push_back(Take(*make(i, 4, std::nullopt)));
  std::vector<LoaderState> on4;
  for (int64_t i = 0; i < 4; ++i) on4.push_back(Take(*make(i, 4, std::nullopt), 3).state);
  // On 3 shards from shard 2's state alone; 2 steps, then on 2 shards.
  std::vector<LoaderState> on3;
  Pieces got;
  for (int64_t j = 0; j < 3; ++j) {
    std::unique_ptr<Loader> loader = make(j, 3, ElasticStart({&on4[2], 1}, j, 3));
    const ShardRun run = Take(*loader, 2);
    EXPECT_EQ(run.state.earlier_deals, (std::vector<EarlierDeal>{{4, 3}}));
    EXPECT_EQ(run.state.step, 2);
    EXPECT_EQ(run.state.batches, 2);  // counted from the resume
    on3.push_back(run.state);
    got.merge(Union({run}));
  }
  const std::vector<ShardRun> rest = Resume(make, on3, 2);
  ExpectSameShapePerStep(rest);
  got.merge(Union(rest));
  EXPECT_EQ(got, Union(full, 3));
}

// Each of `count` shards' state after steps(shard) batches.
template <typename Steps>
std::vector<LoaderState> SavedAfter(const std::shared_ptr<const Dataset>& data, const Case& c,
                                    int64_t count, Steps steps) {
  std::vector<LoaderState> saved;
  for (int64_t i = 0; i < count; ++i) {
    Loader loader(data, Options(c, i, count));
    testing::Drain(loader, steps(i));
    saved.push_back(loader.state());
  }
  return saved;
}

// Same shard count: each shard's stream continues exactly as uninterrupted,
// whichever shard's state it is given.
TEST(ElasticTest, SameShardCountContinuesTheUninterruptedStream) {
  const auto data = TokensDataset(RandomLengths(150, 50, 2));
  const Case c = Cases()[0];
  const std::vector<LoaderState> saved = SavedAfter(data, c, 3, [](int64_t) { return 4; });
  for (int64_t j = 0; j < 3; ++j) {
    Loader uninterrupted(data, Options(c, j, 3));
    std::vector<std::string> want = testing::Drain(uninterrupted);
    want.erase(want.begin(), want.begin() + 4);
    Loader resumed(data, Options(c, j, 3), ElasticStart({&saved[(j + 1) % 3], 1}, j, 3));
    EXPECT_EQ(testing::Drain(resumed), want);
  }
}

// A mixture's block is dealt again from its cursor: the m shards yield the
// rest of the mixed stream the n shards were in.
TEST(ElasticTest, MixtureResumesMidBlockOnOtherShards) {
  auto mixture = std::make_shared<Mixture>();
  mixture->names = {"web", "code"};
  mixture->sources = {TokensDataset(RandomLengths(90, 30, 1)),
                      TokensDataset(RandomLengths(50, 90, 2))};
  mixture->options = {.stages = {{.start = 0, .shares = {0.6, 0.4}}},
                      .unit = MixtureUnit::kTokens,
                      .block_size = 96};
  const Case c{PackOptions{.row_length = 128, .rows_per_batch = 2, .too_long = TooLong::kSplit},
               ShuffleMode::kGlobal};
  const auto make = [&](int64_t i, int64_t count, std::optional<LoaderState> start) {
    return std::make_unique<Loader>(mixture, Options(c, i, count, /*epochs=*/3), std::move(start));
  };
  for (const auto [n, m] : {std::pair<int64_t, int64_t>{2, 3}, {3, 2}, {4, 1}}) {
    SCOPED_TRACE(StrCat("n=", n, " m=", m));
    std::vector<ShardRun> full;
    for (int64_t i = 0; i < n; ++i) full.push_back(Take(*make(i, n, std::nullopt)));
    // Mid-way into the second block.
    const int64_t t = make(0, n, std::nullopt)->Steps(0) + 1;
    std::vector<LoaderState> saved;
    for (int64_t i = 0; i < n; ++i) saved.push_back(Take(*make(i, n, std::nullopt), t).state);
    ASSERT_EQ(saved[0].epoch, 1);
    const std::vector<ShardRun> rest = Resume(make, saved, m);
    ExpectSameShapePerStep(rest);
    EXPECT_EQ(Union(rest), Union(full, static_cast<size_t>(t)));
  }
}

TEST(ElasticTest, RefusesStatesOfDifferentStepsStreamsOrShards) {
  const auto data = TokensDataset(RandomLengths(100, 40, 3));
  const Case c = Cases()[0];
  const std::vector<LoaderState> saved =
      SavedAfter(data, c, 3, [](int64_t i) { return i == 1 ? 3 : 2; });
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { ElasticStart(saved, 0, 2); },
      "the states were saved at different steps (shards 0, 2 at step 2 of epoch 0; shard 1 at "
      "step 3 of epoch 0)");
  std::vector<LoaderState> twice = {saved[0], saved[0]};
  ExpectThrowsWith<InvalidArgumentError>([&] { ElasticStart(twice, 0, 2); },
                                         "the state of shard 0 of 3 was given twice");
  std::vector<LoaderState> other = {saved[0], saved[2]};
  other[1].seed = 5;
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { ElasticStart(other, 0, 2); },
      "the states of shard 0 and shard 2 are of different streams (their seed differs)");
  LoaderState by_hand;
  ExpectThrowsWith<InvalidArgumentError>([&] { ElasticStart({&by_hand, 1}, 0, 2); },
                                         "made by hand");
  ExpectThrowsWith<InvalidArgumentError>([&] { ElasticStart({}, 0, 2); }, "found none");
  ExpectThrowsWith<InvalidArgumentError>([&] { ElasticStart({&saved[0], 1}, 2, 2); },
                                         "found (2, 2)");
  // The Loader checks the stream is its own, as for any state.
  LoaderOptions options = Options(c, 0, 2);
  options.schedule.seed = 99;
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { Loader(data, options, ElasticStart({&saved[0], 1}, 0, 2)); }, "seed");
}

TEST(ElasticTest, EarlierDealsRoundTripTheStateText) {
  LoaderState state;
  state.key =
      StreamKey{.num_examples = 10, .fingerprint = 0x1234, .planner = "PadToMax(batch_size=2)"};
  state.earlier_deals = {{4, 3}, {3, 1}};
  const std::string text = LoaderStateToJson(state);
  EXPECT_NE(text.find("\"earlier_deals\": [[4, 3], [3, 1]]"), std::string::npos) << text;
  EXPECT_EQ(LoaderStateFromJson(text).earlier_deals, state.earlier_deals);
  state.earlier_deals.clear();
  EXPECT_EQ(LoaderStateToJson(state).find("earlier_deals"), std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("[[4, 3]"), 7, "[[0, 3]");
  ExpectThrowsWith<InvalidArgumentError>([&] { LoaderStateFromJson(bad); },
                                         "earlier_deals shard_count must be >= 1, found 0");
}

}  // namespace
}  // namespace jaxbatch
