#include "jaxbatch/load/mixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/load/state_json.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::ExpectThrowsWith;
using testing::RandomLengths;
using testing::TokensDataset;

std::shared_ptr<const Mixture> TwoSources(std::vector<MixtureStage> stages, int64_t block = 50) {
  auto mixture = std::make_shared<Mixture>();
  mixture->names = {"web", "code"};
  mixture->sources = {TokensDataset(RandomLengths(70, 40, 1)),
                      TokensDataset(RandomLengths(30, 90, 2))};
  mixture->options = {
      .stages = std::move(stages), .unit = MixtureUnit::kTokens, .block_size = block};
  return mixture;
}

std::vector<int64_t> Tokens(const Mixture& mixture) {
  std::vector<int64_t> out;
  for (const auto& source : mixture.sources) {
    const std::vector<int64_t> lengths = source->column("tokens").Lengths();
    out.insert(out.end(), lengths.begin(), lengths.end());
  }
  return out;
}

TEST(MixtureTest, StagesAreCheckedWhereTheyAreGiven) {
  ExpectThrowsWith<InvalidArgumentError>(
      [] { ValidateMixture(*TwoSources({{0, {1, 1}}, {120, {1, 0}}})); },
      "stage 1 starts at position 120, which is not a block boundary (a multiple of "
      "block_size=50); the nearest are 100 and 150");
  ExpectThrowsWith<InvalidArgumentError>(
      [] { ValidateMixture(*TwoSources({{0, {1, 1}}, {100, {1, 0}}, {50, {1, 1}}})); },
      "stage 2 starts at 50, not after stage 1's 100");
  ExpectThrowsWith<InvalidArgumentError>([] { ValidateMixture(*TwoSources({{50, {1, 1}}})); },
                                         "first stage must start at position 0");
  ExpectThrowsWith<InvalidArgumentError>([] { ValidateMixture(*TwoSources({{0, {1}}})); },
                                         "stage 0 has 1 weights for 2 sources");
}

// Each block is planned from exactly the draws of its positions, and the
// stages' weights hold from their block on.
TEST(MixtureTest, BlocksPlanTheirDrawsAndStagesChangeTheWeights) {
  const auto mixture = TwoSources({{0, {0.5, 0.5}}, {100, {0.0, 1.0}}});
  const std::vector<int64_t> tokens = Tokens(*mixture);
  ScheduleOptions options{.planner = PackOptions{.row_length = 128, .rows_per_batch = 2},
                          .shuffle = ShuffleMode::kGlobal,
                          .seed = 4};
  MixtureStream stream(mixture, tokens, options, /*epochs=*/0);
  MixtureSchedule schedule({70, 30}, {std::span(tokens).first(70), std::span(tokens).subspan(70)},
                           MixtureUnit::kTokens, Exhaustion::kRestart,
                           {.shuffle = ShuffleMode::kGlobal, .seed = 4}, {"web", "code"});
  MixtureCursor cursor = schedule.Start(WeightsFromShares(std::vector<double>{0.5, 0.5}));
  for (int64_t block = 0; block < 4; ++block) {
    if (block == 2) schedule.SetWeights(cursor, {0, 1});
    std::vector<MixtureDraw> draws;
    schedule.Draw(cursor, 50, &draws);
    std::multiset<int64_t> want;
    for (const MixtureDraw& d : draws) want.insert(d.source == 0 ? d.example : 70 + d.example);
    const EpochSchedule planned = stream.PlanBlock(block, tokens, {}, options, {}, {});
    const std::multiset<int64_t> got(planned.plan.example_ids.begin(),
                                     planned.plan.example_ids.end());
    EXPECT_EQ(got, want) << "block " << block;
    if (block >= 2) {
      EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](int64_t e) { return e >= 70; }));
    }
  }
}

TEST(MixtureTest, FreezeShapesPicksBucketsAndSegmentsOnce) {
  const std::vector<int64_t> lengths = RandomLengths(500, 300, 5);
  std::vector<int64_t> sample(100);
  for (int64_t i = 0; i < 100; ++i) sample[static_cast<size_t>(i)] = i;
  const auto longest = std::max_element(lengths.begin(), lengths.end()) - lengths.begin();
  sample.push_back(longest);
  const PlannerOptions frozen = FreezeShapes(
      AutoBucketsOptions{.max_shapes = 4, .token_budget = 4096}, lengths, sample, {}, {});
  const auto* fixed = std::get_if<FixedBucketsOptions>(&frozen);
  ASSERT_NE(fixed, nullptr);
  EXPECT_LE(fixed->boundaries.size(), 4u);
  EXPECT_GE(fixed->boundaries.back(), lengths[static_cast<size_t>(longest)]);
  for (size_t k = 0; k < fixed->boundaries.size(); ++k) {
    EXPECT_LE(fixed->batch_sizes[k] * fixed->boundaries[k], 4096);
  }
  // Every block plans within them (no example too long for the last).
  const BatchPlan any = Plan(lengths, frozen);
  EXPECT_LE(any.shapes.size(), 4u);
  const PlannerOptions pack =
      FreezeShapes(PackOptions{.row_length = 512, .rows_per_batch = 2}, lengths, sample, {}, {});
  const BatchPlan sampled =
      Plan(lengths, PackOptions{.row_length = 512, .rows_per_batch = 2}, sample);
  EXPECT_EQ(std::get<PackOptions>(pack).max_segments_per_row, sampled.shapes.front().segments);
  const PlannerOptions chosen =
      FreezeShapes(PackOptions{.row_length = 512, .rows_per_batch = 2, .max_shapes = 3}, lengths,
                   sample, {}, {});
  const PackOptions& list = std::get<PackOptions>(chosen);
  EXPECT_FALSE(list.max_shapes);
  EXPECT_EQ(list.row_length_list.back(), 512);
  EXPECT_LE(list.row_length_list.size(), 3u);
}

// GraphBuckets, PatchPack and AspectBuckets freeze into their own given
// form: the shapes the sample's graphs choose, the images a row of the
// sample's plan holds, the buckets every image chooses.
TEST(MixtureTest, FreezeShapesGivesGraphShapesPatchSegmentsAndAspectBuckets) {
  const std::vector<int64_t> nodes = RandomLengths(400, 30, 6);
  std::vector<int64_t> edges(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) edges[i] = 2 * nodes[i];
  std::vector<int64_t> sample(120);
  for (int64_t i = 0; i < 120; ++i) sample[static_cast<size_t>(i)] = 2 * i;
  const GraphBucketsOptions buckets{.max_shapes = 3, .nodes = 200, .edges = 400, .graphs = 12};
  const auto graphs =
      std::get<GraphBucketsOptions>(FreezeShapes(buckets, nodes, sample, edges, {}));
  const std::vector<BatchShape> chosen = GraphBucketShapes(nodes, edges, sample, buckets);
  ASSERT_GT(chosen.size(), 1u);  // something to freeze
  EXPECT_EQ(graphs.shapes.size(), 3 * (chosen.size() - 1));
  EXPECT_EQ(GraphBucketShapes(nodes, edges, {1, 3}, graphs), chosen);
  EXPECT_EQ(std::get<GraphBucketsOptions>(FreezeShapes(graphs, nodes, sample, edges, {})), graphs);

  std::vector<int64_t> heights, widths;
  for (int64_t h : RandomLengths(300, 12, 7)) heights.push_back(4 * h);
  for (int64_t w : RandomLengths(300, 12, 8)) widths.push_back(4 * w);
  const PatchPackOptions patches{.patch = {4, 4}, .row_length = 200, .rows_per_batch = 2};
  const auto packed =
      std::get<PatchPackOptions>(FreezeShapes(patches, heights, sample, {}, widths));
  const BatchPlan sampled = Plan(heights, patches, sample, {}, widths);
  ASSERT_TRUE(packed.max_segments_per_row);
  EXPECT_EQ(*packed.max_segments_per_row, sampled.shapes.front().segments);
  // Every block's rows hold at most that many images.
  for (const BatchShape& shape : Plan(heights, packed, std::nullopt, {}, widths).shapes) {
    EXPECT_EQ(shape.segments, *packed.max_segments_per_row);
  }

  // Images at the buckets AspectBuckets(max_shapes=3) chooses for them.
  const AspectBucketsOptions aspect{
      .area = 64 * 64, .multiple = 16, .max_shapes = 3, .batch_size = 2};
  const std::vector<Resolution> resolutions = AspectResolutions(aspect.area, aspect.multiple);
  std::vector<int64_t> at_h, at_w, ids;
  for (size_t i = 0; i < 200; ++i) {
    const Resolution& r = resolutions[(i * 7) % resolutions.size()];
    at_h.push_back(r.height);
    at_w.push_back(r.width);
    ids.push_back(static_cast<int64_t>(i));
  }
  const std::vector<Resolution> want = ChooseAspectBuckets(at_h, at_w, ids, aspect);
  std::vector<int64_t> resized_h, resized_w;  // every image resized to its bucket
  for (size_t i = 0; i < at_h.size(); ++i) {
    const Resolution& r = want[static_cast<size_t>(NearestResolution(want, at_h[i], at_w[i]))];
    resized_h.push_back(r.height);
    resized_w.push_back(r.width);
  }
  const auto fixed =
      std::get<AspectBucketsOptions>(FreezeShapes(aspect, resized_h, sample, {}, resized_w));
  EXPECT_FALSE(fixed.max_shapes);
  const std::vector<int64_t> first = {0};  // given ratios: the buckets whatever the images
  EXPECT_EQ(ChooseAspectBuckets(resized_h, resized_w, first, fixed),
            ChooseAspectBuckets(resized_h, resized_w, ids, aspect));
  EXPECT_NO_THROW(CheckAspectExamplesFit(resized_h, resized_w, fixed));
}

// The mixture's part of a state reads back as written, and a text that
// breaks it is a clear error.
TEST(MixtureTest, StateTextRoundTripsAndRefusesBrokenMixtures) {
  LoaderOptions options;
  options.schedule.planner = PadToMaxOptions{.batch_size = 4};
  options.epochs = 0;
  Loader loader(TwoSources({{0, {0.7, 0.3}}}), options);
  testing::Drain(loader, 20);
  const LoaderState state = loader.state();
  ASSERT_TRUE(state.mixture);
  const std::string text = LoaderStateToJson(state);
  const LoaderState back = LoaderStateFromJson(text);
  ASSERT_TRUE(back.mixture);
  EXPECT_EQ(*back.mixture, *state.mixture);
  EXPECT_EQ(LoaderStateToJson(back), text);
  const auto broken = [&](const std::string& from, const std::string& to) {
    std::string copy = text;
    const size_t at = copy.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return copy.replace(at, from.size(), to);
  };
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { LoaderStateFromJson(broken("\"unit\": \"tokens\"", "\"unit\": \"bytes\"")); },
      "the state's mixture: Dataset.mix: unit must be 'tokens' or 'examples'");
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { LoaderStateFromJson(broken("\"ended\": false", "\"ended\": 0")); },
      "mixture ended must be true or false");
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { LoaderStateFromJson(broken("\"draws\": ", "\"drawn\": ")); },
      "mixture source lacks 'draws'");
  // A loader over one dataset refuses it, and the mixture refuses one
  // whose source changed.
  ExpectThrowsWith<InvalidArgumentError>(
      [&] { Loader(testing::TokensDataset({3, 4}), options, back); },
      "saved by a loader over a mixture");
  auto other = std::make_shared<Mixture>(*TwoSources({{0, {0.7, 0.3}}}));
  other->sources[1] = TokensDataset(RandomLengths(30, 90, 3));
  ExpectThrowsWith<InvalidArgumentError>([&] { Loader(other, options, back); },
                                         "the state's source 'code' (30 examples) is other data");
}

}  // namespace
}  // namespace jaxbatch
