// The Loader over a mixture: batches hold exactly the schedule's draws,
// tagged with their source; the stream is the same for any thread count and
// resumes exactly; a resume into other weights or sources finishes its block
// and then draws each source where it left off.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/output_names.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::Drain;
using testing::ExpectThrowsWith;
using testing::FindArray;
using testing::RandomLengths;
using testing::TokensDataset;

struct Sources {
  std::vector<std::string> names = {"web", "code", "math"};
  std::vector<std::shared_ptr<const Dataset>> data = {TokensDataset(RandomLengths(90, 30, 1)),
                                                      TokensDataset(RandomLengths(40, 120, 2)),
                                                      TokensDataset(RandomLengths(25, 60, 3))};
};

std::shared_ptr<const Mixture> MakeMixture(const Sources& sources, std::vector<double> shares,
                                           MixtureUnit unit = MixtureUnit::kTokens,
                                           Exhaustion exhaustion = Exhaustion::kRestart,
                                           int64_t block = 64) {
  auto mixture = std::make_shared<Mixture>();
  mixture->names = sources.names;
  mixture->sources = sources.data;
  mixture->options = {.stages = {{.start = 0, .shares = std::move(shares)}},
                      .unit = unit,
                      .exhaustion = exhaustion,
                      .block_size = block};
  return mixture;
}

LoaderOptions Options(PlannerOptions planner, int64_t epochs = 3, int64_t threads = 2) {
  LoaderOptions o;
  o.schedule.planner = std::move(planner);
  o.schedule.seed = 17;
  o.epochs = epochs;
  o.num_threads = threads;
  return o;
}

// Each (source, example) a batch holds, read from source_index and
// example_index, checked against the tokens (value k of example i is
// i * 1000 + k in every source).
std::vector<std::pair<int64_t, int64_t>> Held(const LoadedBatch& batch) {
  const Array& ids = FindArray(batch, kExampleIndexName);
  const Array& sources = FindArray(batch, kSourceIndexName);
  const Array& tokens = FindArray(batch, "tokens");
  const auto* id = reinterpret_cast<const int64_t*>(ids.data);
  const auto* source = reinterpret_cast<const int32_t*>(sources.data);
  const auto* value = reinterpret_cast<const int32_t*>(tokens.data);
  EXPECT_EQ(sources.shape, ids.shape);
  std::vector<std::pair<int64_t, int64_t>> held;
  for (int64_t i = 0; i < ids.num_bytes() / 8; ++i) {
    EXPECT_EQ(id[i] < 0, source[i] < 0);
    if (id[i] >= 0) held.emplace_back(source[i], id[i]);
  }
  // Padded rows (PadToMax: one example a row): the row's first token is
  // example * 1000.
  if (ids.shape.size() == 1) {
    const int64_t row = tokens.shape[1];
    for (int64_t r = 0; r < ids.shape[0]; ++r) {
      if (id[r] >= 0) {
        EXPECT_EQ(value[r * row], id[r] * 1000) << "row " << r;
      }
    }
  }
  return held;
}

TEST(LoaderMixtureTest, BatchesHoldTheScheduleDrawsWithTheirSource) {
  const Sources sources;
  const auto mixture = MakeMixture(sources, {0.5, 0.3, 0.2}, MixtureUnit::kExamples);
  LoaderOptions options = Options(PadToMaxOptions{.batch_size = 8}, /*epochs=*/2);
  Loader loader(mixture, options);
  std::multiset<std::pair<int64_t, int64_t>> got;
  while (std::optional<LoadedBatch> batch = loader.Next()) {
    for (const auto& held : Held(*batch)) got.insert(held);
  }
  // The schedule alone, over the same positions: 2 x 155 draws.
  std::vector<std::span<const int64_t>> none;
  MixtureSchedule schedule({90, 40, 25}, {}, MixtureUnit::kExamples, Exhaustion::kRestart,
                           {.shuffle = ShuffleMode::kGlobal, .seed = 17}, sources.names);
  MixtureCursor cursor = schedule.Start(WeightsFromShares(std::vector<double>{0.5, 0.3, 0.2}));
  std::vector<MixtureDraw> draws;
  schedule.Draw(cursor, 310, &draws);
  std::multiset<std::pair<int64_t, int64_t>> want;
  for (const MixtureDraw& d : draws) want.insert({d.source, d.example});
  EXPECT_EQ(got, want);
  const LoaderState state = loader.state();
  ASSERT_TRUE(state.mixture);
  EXPECT_EQ(state.examples, 310);
  int64_t yielded = 0;
  for (const MixtureSourceState& s : state.mixture->sources) yielded += s.examples;
  EXPECT_EQ(yielded, 310);
}

TEST(LoaderMixtureTest, SameStreamForAnyThreadCountAndResumedAtAnyStep) {
  const Sources sources;
  const std::vector<PlannerOptions> planners = {
      PackOptions{.row_length = 128, .rows_per_batch = 2},
      PackOptions{.row_length = 64, .rows_per_batch = 2, .too_long = TooLong::kSplit},
      PackOptions{
          .row_length = 64, .rows_per_batch = 2, .algorithm = PackAlgorithm::kConcatThenSplit},
      AutoBucketsOptions{.max_shapes = 3, .token_budget = 512}};
  for (const PlannerOptions& planner : planners) {
    const auto mixture = MakeMixture(sources, {0.5, 0.3, 0.2});
    Loader one(mixture, Options(planner, 2, 1));
    const std::vector<std::string> whole = Drain(one);
    Loader four(mixture, Options(planner, 2, 4));
    EXPECT_EQ(Drain(four), whole) << PlannerName(planner);
    for (int64_t at : {int64_t{1}, int64_t{7}, static_cast<int64_t>(whole.size()) / 2}) {
      Loader head(mixture, Options(planner, 2));
      Drain(head, at);
      const LoaderState saved = head.state();
      Loader tail(mixture, Options(planner, 2), saved);
      std::vector<std::string> rest = Drain(tail);
      ASSERT_EQ(rest.size(), whole.size() - static_cast<size_t>(at)) << PlannerName(planner);
      EXPECT_TRUE(std::equal(rest.begin(), rest.end(), whole.begin() + at))
          << PlannerName(planner) << " at " << at;
    }
  }
}

// Every source's examples over a resume that changes the weights (and adds
// a source, and drops one to weight 0): the block it was saved in ends as
// it began, and each source's draws continue its own order: the examples it
// gave, before and after, are exactly its first draws, none repeated or
// skipped.
TEST(LoaderMixtureTest, ResumeIntoAnotherMixtureRepeatsAndSkipsNothing) {
  Sources two;
  two.names = {"web", "code"};
  two.data.resize(2);
  const auto before = MakeMixture(two, {0.7, 0.3}, MixtureUnit::kExamples);
  LoaderOptions options = Options(PadToMaxOptions{.batch_size = 4}, /*epochs=*/0);
  Loader whole(before, options);
  Loader head(before, options);
  std::map<int64_t, std::vector<int64_t>> given;  // by source name index in `three`
  for (int step = 0; step < 10; ++step) {         // block 0 (64 draws) and into block 1
    whole.Next();
    for (const auto& [s, e] : Held(*head.Next())) given[s].push_back(e);
  }
  const LoaderState saved = head.state();
  EXPECT_EQ(saved.epoch, 0);
  EXPECT_GT(saved.step, 0);
  Sources three;  // web, code, math: math is new
  const auto after = MakeMixture(three, {0.2, 0.0, 0.8}, MixtureUnit::kExamples);
  Loader tail(after, options, saved);
  const std::vector<std::string> changes = tail.mixture_changes();
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0], "mixture: source 'web' weight 70.0% -> 20.0% from block 1 (position 64)");
  EXPECT_EQ(changes[2], "mixture: source 'math' added at 80.0% from block 1 (position 64)");
  // The rest of block 0 is the uninterrupted stream's.
  const int64_t block0 = tail.Steps(0);
  for (int64_t t = saved.step; t < block0; ++t) {
    const LoadedBatch a = *tail.Next();
    EXPECT_EQ(testing::Fingerprint(a), testing::Fingerprint(*whole.Next()));
    for (const auto& [s, e] : Held(a)) given[s].push_back(e);
  }
  // Whole blocks on: what each source gave is then a prefix of its draws.
  for (int64_t block = 1; block <= 4; ++block) {
    for (int64_t t = 0; t < tail.Steps(block); ++t) {
      for (const auto& [s, e] : Held(*tail.Next())) given[s].push_back(e);
    }
  }
  EXPECT_EQ(tail.state().step, 0);
  MixtureSchedule order({90, 40, 25}, {}, MixtureUnit::kExamples, Exhaustion::kRestart,
                        {.shuffle = ShuffleMode::kGlobal, .seed = 17}, three.names);
  for (auto& [s, examples] : given) {
    std::vector<int64_t> want;
    for (int64_t k = 0; k < static_cast<int64_t>(examples.size()); ++k) {
      want.push_back(order.ExampleOf(s, k));
    }
    std::sort(examples.begin(), examples.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(examples, want) << three.names[static_cast<size_t>(s)];
  }
  EXPECT_GT(given[2].size(), 150u);  // math, new, took 80% of 4 blocks
}

TEST(LoaderMixtureTest, RemovingASourceMidBlockIsRefusedButAtABlockStartWorks) {
  const Sources three;
  const auto before = MakeMixture(three, {0.4, 0.3, 0.3}, MixtureUnit::kExamples);
  LoaderOptions options = Options(PadToMaxOptions{.batch_size = 4}, 0);
  Loader head(before, options);
  Drain(head, 3);
  Sources two;
  two.names = {"web", "code"};
  two.data.resize(2);
  const auto after = MakeMixture(two, {0.5, 0.5}, MixtureUnit::kExamples);
  ExpectThrowsWith<InvalidArgumentError>([&] { Loader(after, options, head.state()); },
                                         "source 'math', which this mixture lacks");
  Drain(head, head.Steps(0) - 3);  // the rest of block 0: the state is at block 1, step 0
  EXPECT_EQ(head.state().step, 0);
  Loader tail(after, options, head.state());
  const std::vector<std::string> changes = tail.mixture_changes();
  EXPECT_NE(std::find(changes.begin(), changes.end(),
                      StrCat("mixture: source 'math' removed from block 1 (position 64); it had ",
                             "yielded ", head.state().mixture->sources[2].examples, " examples")),
            changes.end());
  EXPECT_EQ(Drain(tail, 5).size(), 5u);
}

TEST(LoaderMixtureTest, StopAndDropEndTheStream) {
  const Sources sources;
  for (const Exhaustion exhaustion : {Exhaustion::kStop, Exhaustion::kDrop}) {
    const auto mixture = MakeMixture(sources, {1, 1, 1}, MixtureUnit::kExamples, exhaustion);
    Loader loader(mixture, Options(PadToMaxOptions{.batch_size = 8}, 1));
    Drain(loader);
    // stop: 25 of each, then web and code once more before math, run out, is
    // drawn again (Grain's iterator: 17 of 10, 20, 5);
    // drop: every example once.
    EXPECT_EQ(loader.state().examples, exhaustion == Exhaustion::kStop ? 77 : 155);
    EXPECT_EQ(loader.TotalSteps(), loader.state().batches);
    ExpectThrowsWith<InvalidArgumentError>(
        [&] { Loader(mixture, Options(PadToMaxOptions{.batch_size = 8}, 2)); },
        "epochs must be 1, found 2");
  }
}

// One pass drawn alone (what jb.run processes) is the Loader's stream: one
// batch a block (PadToMax keeps a block's order), so the batches in order
// hold the pass's draws in order, for every exhaustion; each draw's tokens
// are its example's length.
TEST(LoaderMixtureTest, DrawnPassIsTheLoadersStreamInOrder) {
  const Sources sources;
  for (const Exhaustion exhaustion : {Exhaustion::kRestart, Exhaustion::kStop, Exhaustion::kDrop}) {
    const auto mixture = MakeMixture(sources, {0.5, 0.3, 0.2}, MixtureUnit::kTokens, exhaustion);
    Loader loader(mixture, Options(PadToMaxOptions{.batch_size = 64}, 1));
    const Loader::MixturePass pass = loader.DrawMixturePass();
    std::vector<std::pair<int64_t, int64_t>> streamed;
    while (std::optional<LoadedBatch> batch = loader.Next()) {
      for (const auto& held : Held(*batch)) streamed.push_back(held);
    }
    ASSERT_EQ(pass.sources.size(), streamed.size()) << ExhaustionName(exhaustion);
    for (size_t p = 0; p < streamed.size(); ++p) {
      ASSERT_EQ(std::make_pair(pass.sources[p], pass.examples[p]), streamed[p])
          << ExhaustionName(exhaustion) << " position " << p;
      const auto& source = *sources.data[static_cast<size_t>(pass.sources[p])];
      EXPECT_EQ(pass.tokens[p], source.column("tokens").Lengths()[pass.examples[p]]);
    }
    EXPECT_EQ(pass.weights, WeightsFromShares(std::vector<double>{0.5, 0.3, 0.2}));
  }
  Loader endless(MakeMixture(sources, {1, 1, 1}), Options(PadToMaxOptions{.batch_size = 8}, 0));
  ExpectThrowsWith<InvalidArgumentError>([&] { endless.DrawMixturePass(); }, "never ends");
  Loader one(sources.data[0], Options(PadToMaxOptions{.batch_size = 8}, 1));
  ExpectThrowsWith<InvalidArgumentError>([&] { one.DrawMixturePass(); }, "one dataset");
}

TEST(LoaderMixtureTest, RefusesSourcesOfOtherColumns) {
  const Sources sources;
  Sources other = sources;
  other.data[1] = testing::GraphsDataset({3, 4});
  ExpectThrowsWith<InvalidArgumentError>([&] { ConcatSources(MakeMixture(other, {1, 1, 1})); },
                                         "dataset 1 is 'code'");
}

// GraphBuckets over a mixture of graph sources: every block's batches take
// the shapes the first draws chose (at most max_shapes in all, the budget
// among them), and each graph drawn is in them once per draw.
TEST(LoaderMixtureTest, GraphBucketsKeepTheShapesTheFirstDrawsChose) {
  Sources graphs;
  graphs.data = {testing::GraphsDataset(RandomLengths(60, 12, 4)),
                 testing::GraphsDataset(RandomLengths(30, 40, 5)),
                 testing::GraphsDataset(RandomLengths(20, 6, 6))};
  const GraphBucketsOptions buckets{.max_shapes = 3, .nodes = 120, .edges = 120, .graphs = 9};
  Loader loader(MakeMixture(graphs, {0.5, 0.3, 0.2}, MixtureUnit::kExamples, Exhaustion::kRestart,
                            /*block=*/32),
                Options(buckets, /*epochs=*/2));
  std::vector<BatchShape> shapes;
  int64_t graphs_seen = 0;
  while (std::optional<LoadedBatch> batch = loader.Next()) {
    if (std::find(shapes.begin(), shapes.end(), batch->shape) == shapes.end()) {
      shapes.push_back(batch->shape);
    }
    const Array& ids = FindArray(*batch, kGraphIndexName);
    const Array& source = FindArray(*batch, kSourceIndexName);
    const auto* id = reinterpret_cast<const int64_t*>(ids.data);
    const auto* from = reinterpret_cast<const int32_t*>(source.data);
    for (int64_t i = 0; i < ids.num_bytes() / 8; ++i) {
      if (id[i] < 0) continue;
      ++graphs_seen;
      EXPECT_LT(id[i], graphs.data[static_cast<size_t>(from[i])]->num_examples());
    }
  }
  EXPECT_EQ(graphs_seen, 2 * (60 + 30 + 20));
  EXPECT_LE(shapes.size(), 3u);
  EXPECT_GT(shapes.size(), 1u);  // smaller shapes than the budget were chosen and used
}

// AutoBuckets picks its boundaries once: every block's shapes are among
// them. A token budget's rows are the budget's in every block: balanced
// over one block's rows (balance.h) they would change from block to block,
// a shape (and a compilation) each time.
TEST(LoaderMixtureTest, DataDependentShapesArePickedOnce) {
  const Sources sources;
  const auto mixture = MakeMixture(sources, {0.5, 0.3, 0.2});
  const std::pair<PlannerOptions, size_t> planners[] = {
      {AutoBucketsOptions{.max_shapes = 3, .token_budget = 512}, 3},
      {FixedBucketsOptions{.boundaries = {32, 64, 128}, .token_budget = 1024}, 3},
      {PackOptions{.row_length = 128, .token_budget = 1024}, 1},
  };
  for (const auto& [planner, most] : planners) {
    Loader loader(mixture, Options(planner, 4));
    std::vector<BatchShape> shapes;
    while (std::optional<LoadedBatch> batch = loader.Next()) {
      if (std::find(shapes.begin(), shapes.end(), batch->shape) == shapes.end()) {
        shapes.push_back(batch->shape);
      }
    }
    EXPECT_LE(shapes.size(), most) << PlannerName(planner);
  }
}

}  // namespace
}  // namespace jaxbatch
