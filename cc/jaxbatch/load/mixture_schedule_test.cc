#include "jaxbatch/load/mixture_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/base/wide.h"

namespace jaxbatch {
namespace {

using testing::ExpectThrowsWith;

// Grain's mix tests read sources in order (no shuffle).
constexpr SourceOrder kInOrder{.shuffle = ShuffleMode::kNone};

MixtureSchedule Examples(std::vector<int64_t> sizes, std::vector<std::string> names,
                         Exhaustion exhaustion = Exhaustion::kRestart,
                         SourceOrder order = kInOrder) {
  return MixtureSchedule(std::move(sizes), {}, MixtureUnit::kExamples, exhaustion, order,
                         std::move(names));
}

std::vector<MixtureDraw> DrawAll(const MixtureSchedule& schedule, MixtureCursor& cursor,
                                 int64_t count) {
  std::vector<MixtureDraw> out;
  schedule.Draw(cursor, count, &out);
  return out;
}

// Grain's sources are ranges: source s's example i is values[s] + i * step[s].
std::vector<int64_t> Values(const std::vector<MixtureDraw>& draws, std::vector<int64_t> first,
                            std::vector<int64_t> step) {
  std::vector<int64_t> out;
  for (const MixtureDraw& d : draws) {
    out.push_back(first[static_cast<size_t>(d.source)] +
                  d.example * step[static_cast<size_t>(d.source)]);
  }
  return out;
}

std::vector<int64_t> Weights(std::vector<double> shares) { return WeightsFromShares(shares); }

// mix_test.py, MixedMapDatasetTest: the even and odd numbers below 10 mixed,
// read past their end (MapDataset.repeat restarts them: "restart").
TEST(MixtureScheduleTest, GrainMapMixProportions) {
  const MixtureSchedule schedule = Examples({5, 5}, {"even", "odd"});
  const std::vector<std::pair<std::vector<double>, std::vector<int64_t>>> cases = {
      {{1, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {{2, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {{0.5, 0.5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {{0.75, 0.25}, {0, 2, 4, 1, 6, 8, 0, 3, 2, 4, 6, 5}},
      {{1, 2}, {0, 1, 3, 2, 5, 7, 4, 9, 1, 6, 3, 5, 8, 7}},
  };
  for (const auto& [shares, want] : cases) {
    MixtureCursor cursor = schedule.Start(Weights(shares));
    const auto draws = DrawAll(schedule, cursor, static_cast<int64_t>(want.size()));
    EXPECT_EQ(Values(draws, {0, 1}, {2, 2}), want) << shares[0] << ":" << shares[1];
  }
}

// MixedMapDatasetTest.test_mix_infinite_datasets: zeros and ones 4:1, that
// mixed 1:1 with ones, gives 400 zeros and 600 ones in 1,000 positions. A
// mixture of mixtures is one mixture of the leaves: 0.4 and 0.1 + 0.5.
TEST(MixtureScheduleTest, GrainNestedProportions) {
  const MixtureSchedule schedule = Examples({1, 1}, {"zeros", "ones"});
  MixtureCursor cursor = schedule.Start(Weights({0.4, 0.6}));
  const auto draws = DrawAll(schedule, cursor, 1000);
  const auto zeros =
      std::count_if(draws.begin(), draws.end(), [](const MixtureDraw& d) { return d.source == 0; });
  EXPECT_EQ(zeros, 400);
}

// MixedIterDatasetTest: the stream stops when a source that has run out
// is drawn ("stop").
TEST(MixtureScheduleTest, GrainIterMixStopsAtTheFirstExhaustedDraw) {
  const MixtureSchedule three = Examples({10, 20, 5}, {"a", "b", "c"}, Exhaustion::kStop);
  MixtureCursor cursor = three.Start(Weights({1, 1, 1}));
  EXPECT_EQ(DrawAll(three, cursor, 1000).size(), 17u);
  EXPECT_TRUE(cursor.ended);
  cursor = three.Start(Weights({1, 2, 1}));
  EXPECT_EQ(DrawAll(three, cursor, 1000).size(), 6u + 12u + 5u);
  const MixtureSchedule two = Examples({5, 10}, {"small", "large"}, Exhaustion::kStop);
  cursor = two.Start(Weights({1, 1}));
  EXPECT_EQ(DrawAll(two, cursor, 1000).size(), 10u);
  EXPECT_TRUE(DrawAll(two, cursor, 10).empty());
}

// MixedIterDatasetTest's checkpoint tests: ds1 = 0..9, ds2 = 10..19, ds3 =
// 20..29 (and ds4 = 30..39), "stop"; a restore keeps each source's draws
// (by name) and the position, under the new mixture.
TEST(MixtureScheduleTest, GrainRestoreWithChangedMixtures) {
  const std::vector<std::string> names = {"ds1", "ds2", "ds3"};
  const MixtureSchedule three = Examples({10, 10, 10}, names, Exhaustion::kStop);
  MixtureCursor cursor = three.Start(Weights({0.2, 0.3, 0.5}));
  EXPECT_EQ(Values(DrawAll(three, cursor, 10), {0, 10, 20}, {1, 1, 1}),
            (std::vector<int64_t>{0, 10, 20, 11, 21, 1, 22, 12, 23, 24}));
  const MixtureCursor saved = cursor;
  // The same weights: test_checkpoint_recovery_with_changed_weights.
  EXPECT_EQ(Values(DrawAll(three, cursor, 1000), {0, 10, 20}, {1, 1, 1}),
            (std::vector<int64_t>{2, 13, 25, 14, 26, 3, 27, 15, 28, 29, 4, 16}));
  // Fewer sources: test_checkpoint_recovery_with_fewer_datasets.
  const MixtureSchedule two = Examples({10, 10}, {"ds1", "ds2"}, Exhaustion::kStop);
  cursor = two.Resume(saved.position, names, saved.sources, Weights({0.2, 0.3}));
  EXPECT_EQ(Values(DrawAll(two, cursor, 1000), {0, 10}, {1, 1}),
            (std::vector<int64_t>{2, 13, 3, 14, 15, 4, 16, 5, 17, 18, 6, 19, 7}));
  // More sources: test_checkpoint_recovery_with_more_datasets.
  cursor = two.Start(Weights({1, 1}));
  EXPECT_EQ(Values(DrawAll(two, cursor, 10), {0, 10}, {1, 1}),
            (std::vector<int64_t>{0, 10, 1, 11, 2, 12, 3, 13, 4, 14}));
  const std::vector<std::string> two_names = {"ds1", "ds2"};
  cursor = three.Resume(cursor.position, two_names, cursor.sources, Weights({1, 1, 1}));
  EXPECT_EQ(Values(DrawAll(three, cursor, 1000), {0, 10, 20}, {1, 1, 1}),
            (std::vector<int64_t>{15, 20, 5, 16, 21, 6, 17, 22, 7, 18, 23, 8, 19, 24, 9}));
  // Another mixture: test_checkpoint_recovery_with_different_mixture.
  cursor = three.Start(Weights({1, 1, 1}));
  EXPECT_EQ(Values(DrawAll(three, cursor, 10), {0, 10, 20}, {1, 1, 1}),
            (std::vector<int64_t>{0, 10, 20, 1, 11, 21, 2, 12, 22, 3}));
  const MixtureSchedule other = Examples({10, 10}, {"ds2", "ds4"}, Exhaustion::kStop);
  cursor = other.Resume(cursor.position, names, cursor.sources, Weights({0.6, 0.4}));
  EXPECT_EQ(Values(DrawAll(other, cursor, 1000), {10, 30}, {1, 1}),
            (std::vector<int64_t>{13, 14, 30, 15, 31, 16, 17, 32, 18, 33, 19}));
}

// Random lengths per source, of different spreads.
std::vector<std::vector<int64_t>> RandomTokens(std::mt19937_64& rng, int64_t sources) {
  std::vector<std::vector<int64_t>> tokens(static_cast<size_t>(sources));
  for (int64_t s = 0; s < sources; ++s) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 60)(rng);
    const int64_t longest = std::uniform_int_distribution<int64_t>(1, 500)(rng);
    for (int64_t i = 0; i < n; ++i) {
      tokens[static_cast<size_t>(s)].push_back(
          std::uniform_int_distribution<int64_t>(0, longest)(rng));
    }
  }
  return tokens;
}

// The token schedule's bound, at every prefix: for each source s with
// weight W_s of W and longest example L_s,
//   -L_s <= tokens_s - (W_s / W) * tokens <= (W_s / W) * sum_j L_j,
// checked in integers (times W), over random lengths, weights and seeds.
TEST(MixtureScheduleTest, TokenSharesStayWithinTheBoundAtEveryPrefix) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t k = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    const auto tokens = RandomTokens(rng, k);
    std::vector<std::span<const int64_t>> spans(tokens.begin(), tokens.end());
    std::vector<int64_t> sizes, longest;
    std::vector<std::string> names;
    std::vector<double> shares;
    for (int64_t s = 0; s < k; ++s) {
      sizes.push_back(static_cast<int64_t>(tokens[static_cast<size_t>(s)].size()));
      longest.push_back(*std::max_element(tokens[static_cast<size_t>(s)].begin(),
                                          tokens[static_cast<size_t>(s)].end()));
      names.push_back(StrCat("s", s));
      shares.push_back(std::uniform_real_distribution<double>(0.01, 1.0)(rng));
    }
    const MixtureSchedule schedule(sizes, spans, MixtureUnit::kTokens, Exhaustion::kRestart,
                                   {.shuffle = ShuffleMode::kGlobal, .seed = rng()}, names);
    const std::vector<int64_t> w = Weights(shares);
    MixtureCursor cursor = schedule.Start(w);
    const auto draws = DrawAll(schedule, cursor, 3000);
    ASSERT_EQ(draws.size(), 3000u);
    Int128 total_weight = 0, sum_longest = 0;
    for (int64_t s = 0; s < k; ++s) {
      total_weight += w[static_cast<size_t>(s)];
      sum_longest += longest[static_cast<size_t>(s)];
    }
    std::vector<int64_t> got(static_cast<size_t>(k));
    int64_t all = 0;
    for (const MixtureDraw& d : draws) {
      const int64_t length = tokens[static_cast<size_t>(d.source)][static_cast<size_t>(d.example)];
      got[static_cast<size_t>(d.source)] += length;
      all += length;
      for (int64_t s = 0; s < k; ++s) {
        const auto i = static_cast<size_t>(s);
        const Int128 lag =
            static_cast<Int128>(got[i]) * total_weight - static_cast<Int128>(w[i]) * all;
        ASSERT_GE(lag, -static_cast<Int128>(longest[i]) * total_weight) << "trial " << trial;
        ASSERT_LE(lag, static_cast<Int128>(w[i]) * sum_longest) << "trial " << trial;
      }
    }
  }
}

// Each source's draws of one source epoch are each of its examples once,
// in every shuffle mode, and the epochs differ (a new shuffle each).
TEST(MixtureScheduleTest, EachExampleOncePerSourceEpoch) {
  for (const ShuffleMode shuffle :
       {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlock}) {
    const MixtureSchedule schedule = Examples({37, 10}, {"a", "b"}, Exhaustion::kRestart,
                                              {.shuffle = shuffle, .block_size = 8, .seed = 3});
    MixtureCursor cursor = schedule.Start(Weights({0.8, 0.2}));
    const auto draws = DrawAll(schedule, cursor, 1000);
    std::map<int64_t, std::vector<int64_t>> by_source;
    for (const MixtureDraw& d : draws) by_source[d.source].push_back(d.example);
    for (const auto& [source, examples] : by_source) {
      const int64_t n = schedule.size(source);
      std::vector<std::vector<int64_t>> epochs;
      for (size_t start = 0; start + static_cast<size_t>(n) <= examples.size();
           start += static_cast<size_t>(n)) {
        std::vector<int64_t> epoch(examples.begin() + static_cast<int64_t>(start),
                                   examples.begin() + static_cast<int64_t>(start) + n);
        epochs.push_back(epoch);
        std::sort(epoch.begin(), epoch.end());
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(epoch[static_cast<size_t>(i)], i);
      }
      ASSERT_GE(epochs.size(), 2u);
      if (shuffle != ShuffleMode::kNone) {
        EXPECT_NE(epochs[0], epochs[1]);
      }
    }
  }
}

// A cursor saved at any position continues the uninterrupted stream.
TEST(MixtureScheduleTest, ResumingFromACursorEqualsTheUninterruptedStream) {
  std::mt19937_64 rng(11);
  const auto tokens = RandomTokens(rng, 3);
  std::vector<std::span<const int64_t>> spans(tokens.begin(), tokens.end());
  const std::vector<int64_t> sizes = {static_cast<int64_t>(tokens[0].size()),
                                      static_cast<int64_t>(tokens[1].size()),
                                      static_cast<int64_t>(tokens[2].size())};
  for (const MixtureUnit unit : {MixtureUnit::kExamples, MixtureUnit::kTokens}) {
    for (const Exhaustion exhaustion :
         {Exhaustion::kRestart, Exhaustion::kStop, Exhaustion::kDrop}) {
      const MixtureSchedule schedule(sizes, spans, unit, exhaustion, {.seed = 5}, {"x", "y", "z"});
      MixtureCursor cursor = schedule.Start(Weights({0.5, 0.3, 0.2}));
      const auto whole = DrawAll(schedule, cursor, 400);
      for (int64_t at : {0, 1, 17, 60, 133}) {
        MixtureCursor resumed = schedule.Start(Weights({0.5, 0.3, 0.2}));
        auto head = DrawAll(schedule, resumed, at);
        const MixtureCursor saved = resumed;  // a copy: what a state holds
        MixtureCursor again = saved;
        const auto tail = DrawAll(schedule, again, 400 - at);
        head.insert(head.end(), tail.begin(), tail.end());
        ASSERT_EQ(head.size(), whole.size());
        for (size_t i = 0; i < whole.size(); ++i) {
          ASSERT_EQ(head[i].source, whole[i].source) << i;
          ASSERT_EQ(head[i].example, whole[i].example) << i;
        }
      }
    }
  }
}

// "drop": each source gives each example once, then is left out while the
// others keep their ratio; the stream ends when all are out.
TEST(MixtureScheduleTest, DropRenormalisesAndEndsWhenAllAreOut) {
  for (const MixtureUnit unit : {MixtureUnit::kExamples, MixtureUnit::kTokens}) {
    const std::vector<int64_t> a(30, 4), b(10, 4), c(50, 4);
    const MixtureSchedule schedule({30, 10, 50}, {a, b, c}, unit, Exhaustion::kDrop, {.seed = 1},
                                   {"a", "b", "c"});
    MixtureCursor cursor = schedule.Start(Weights({0.2, 0.6, 0.2}));
    const auto draws = DrawAll(schedule, cursor, 1000);
    ASSERT_EQ(draws.size(), 90u);
    EXPECT_TRUE(cursor.ended);
    std::set<std::pair<int64_t, int64_t>> seen;
    for (const MixtureDraw& d : draws) EXPECT_TRUE(seen.insert({d.source, d.example}).second);
    // After b is out (its 10 go first, at 60%), a and c alternate 1:1.
    int64_t last_b = 0;
    for (size_t i = 0; i < draws.size(); ++i) {
      if (draws[i].source == 1) last_b = static_cast<int64_t>(i);
    }
    EXPECT_LT(last_b, 20);
    int64_t a_after = 0, c_after = 0;
    for (size_t i = static_cast<size_t>(last_b) + 1; i < static_cast<size_t>(last_b) + 41; ++i) {
      (draws[i].source == 0 ? a_after : c_after) += 1;
    }
    EXPECT_LE(std::abs(a_after - c_after), 2);
  }
}

// A source keeps its order when others are added or removed: its shuffle is
// keyed by its name and the seed, not by its place.
TEST(MixtureScheduleTest, ASourcesOrderDependsOnItsNameAndTheSeed) {
  const SourceOrder order{.shuffle = ShuffleMode::kGlobal, .seed = 9};
  const MixtureSchedule one = Examples({100}, {"web"}, Exhaustion::kRestart, order);
  const MixtureSchedule two = Examples({7, 100}, {"code", "web"}, Exhaustion::kRestart, order);
  const MixtureSchedule reseeded =
      Examples({100}, {"web"}, Exhaustion::kRestart, {.shuffle = ShuffleMode::kGlobal, .seed = 10});
  std::vector<int64_t> a, b, c;
  for (int64_t k = 0; k < 250; ++k) {
    a.push_back(one.ExampleOf(0, k));
    b.push_back(two.ExampleOf(1, k));
    c.push_back(reseeded.ExampleOf(0, k));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// Weights that change (a stage, a resume) restart the token clocks: the
// new shares hold for the tokens drawn after, with the same bound.
TEST(MixtureScheduleTest, NewWeightsApplyToTheTokensAfterThem) {
  const std::vector<int64_t> a(500, 10), b(500, 10);
  const MixtureSchedule schedule({500, 500}, {a, b}, MixtureUnit::kTokens, Exhaustion::kRestart,
                                 {.seed = 2}, {"a", "b"});
  MixtureCursor cursor = schedule.Start(Weights({0.9, 0.1}));
  DrawAll(schedule, cursor, 200);
  schedule.SetWeights(cursor, Weights({0.5, 0.5}));
  const auto after = DrawAll(schedule, cursor, 100);
  const auto from_a =
      std::count_if(after.begin(), after.end(), [](const MixtureDraw& d) { return d.source == 0; });
  EXPECT_EQ(from_a, 50);  // not a catch-up of b's deficit under the old weights
}

TEST(MixtureScheduleTest, BadWeightsAndSourcesAreNamed) {
  const std::vector<std::string> names = {"web", "code"};
  const std::vector<double> negative = {0.5, -1};
  ExpectThrowsWith<InvalidArgumentError>([&] { WeightsFromShares(negative, names); },
                                         "the weight of source 'code' must be a finite number");
  const std::vector<double> zeros = {0, 0};
  ExpectThrowsWith<InvalidArgumentError>([&] { WeightsFromShares(zeros, names); },
                                         "expected a positive weight");
  const std::vector<double> tiny = {1, 1e-12};
  ExpectThrowsWith<InvalidArgumentError>([&] { WeightsFromShares(tiny, names); }, "ratio");
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { Examples({3, 0}, {"web", "code"}).Start(Weights({1, 1})); },
      "source 'code' has no examples but a positive weight");
  ExpectThrowsWith<InvalidArgumentError>([&] { Examples({3, 3}, {"web", "web"}); },
                                         "source 'web' appears twice");
  ExpectThrowsWith<InvalidArgumentError>([] { ParseExhaustion("loop"); },
                                         "exhaustion must be 'restart', 'stop' or 'drop'");
  ExpectThrowsWith<InvalidArgumentError>([] { ParseMixtureUnit("bytes"); },
                                         "unit must be 'tokens' or 'examples'");
  // A zero weight is allowed (the source is not drawn) while another is positive.
  const MixtureSchedule schedule = Examples({3, 3}, {"web", "code"});
  MixtureCursor cursor = schedule.Start({0, 5});
  for (const MixtureDraw& d : DrawAll(schedule, cursor, 20)) EXPECT_EQ(d.source, 1);
}

}  // namespace
}  // namespace jaxbatch
