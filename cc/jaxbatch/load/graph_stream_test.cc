// Graphs streamed chunk by chunk (ChunkedSourceBuilder::ForGraphs): the
// counts and bad graphs of the whole data, and the stream of reading it whole.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/graph.h"
#include "jaxbatch/load/chunked_source.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/test_util.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::Drain;
using testing::GraphsDataset;
using testing::Split;
using testing::ThrownMessage;
using Feeder = testing::ChunkFeeder;

std::shared_ptr<const ChunkedSource> BuildGraphs(const std::vector<Dataset>& chunks) {
  ChunkedSourceBuilder builder = ChunkedSourceBuilder::ForGraphs({});
  for (const Dataset& c : chunks) builder.Add(c);
  return std::make_shared<const ChunkedSource>(std::move(builder).Finish());
}

// 300 graphs of 1 to 12 nodes, four of them malformed (a sender past the
// graph's nodes), two in one chunk and one in the last.
std::shared_ptr<const Dataset> Graphs() {
  return GraphsDataset(testing::RandomLengths(300, 12, 7), {4, 20, 21, 299});
}

LoaderOptions GraphOptions(PlannerOptions planner, ShuffleMode shuffle) {
  LoaderOptions o;
  o.schedule.planner = std::move(planner);
  o.schedule.shuffle = shuffle;
  o.schedule.block_size = 40;
  o.schedule.seed = 3;
  o.num_threads = 2;
  o.epochs = 2;
  o.prefetch = 2;
  o.on_error = ErrorPolicy::kSkip;
  o.host_memory_limit = 64 << 10;
  return o;
}

TEST(GraphStreamTest, KeepsTheCountsAndBadGraphsOfTheWholeData) {
  const auto data = Graphs();
  const auto source = BuildGraphs(Split(*data, 16));
  const GraphColumns graph = FindGraphColumns(*data, "test");
  EXPECT_EQ(source->node_counts, NodeCounts(*data, graph));
  EXPECT_EQ(source->edge_counts, EdgeCounts(*data));
  const std::vector<GraphProblem> whole = FindBadGraphs(*data, graph);
  ASSERT_EQ(source->bad_records.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(source->bad_records[i].example, whole[i].example);
    EXPECT_EQ(source->bad_records[i].reason, whole[i].reason);
  }
  ASSERT_TRUE(source->graph.has_value());
  EXPECT_EQ(source->graph->nodes, graph.nodes);
  // No length column; the prototype is an empty graph.
  EXPECT_EQ(source->length_column, "");
  for (const RaggedColumn& c : source->prototype->columns()) {
    EXPECT_EQ(c.length(0), 0) << c.name();
  }
}

// Every graph planner and shuffle: the stream over chunks is byte for byte
// the stream over the whole data, bad graphs skipped alike.
TEST(GraphStreamTest, StreamEqualsTheInMemoryStream) {
  const auto data = Graphs();
  const std::vector<Dataset> chunks = Split(*data, 16);
  const auto source = BuildGraphs(chunks);
  std::vector<PlannerOptions> planners;
  for (const GraphAlgorithm algorithm :
       {GraphAlgorithm::kNextFit, GraphAlgorithm::kFirstFit, GraphAlgorithm::kBestFit}) {
    planners.push_back(
        GraphBudgetOptions{.nodes = 40, .edges = 40, .graphs = 6, .algorithm = algorithm});
  }
  planners.push_back(GraphBucketsOptions{.max_shapes = 3, .nodes = 40, .edges = 40, .graphs = 6});
  for (const PlannerOptions& planner : planners) {
    for (const ShuffleMode shuffle :
         {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlock}) {
      const LoaderOptions o = GraphOptions(planner, shuffle);
      Loader whole(data, o);
      const std::vector<std::string> expected = Drain(whole);
      ASSERT_GT(expected.size(), 20u);
      Loader streamed(source, o);
      Feeder feeder(streamed, chunks);
      EXPECT_EQ(Drain(streamed), expected) << PlannerKey(planner);
      EXPECT_EQ(streamed.state().skipped, whole.state().skipped);
      EXPECT_GE(streamed.chunk_reads(), source->num_chunks());
      streamed.Close();
    }
  }
}

TEST(GraphStreamTest, RestoresMidEpochFromTheWholeDataState) {
  const auto data = Graphs();
  const std::vector<Dataset> chunks = Split(*data, 16);
  const auto source = BuildGraphs(chunks);
  const LoaderOptions o =
      GraphOptions(GraphBudgetOptions{.nodes = 40, .edges = 40, .graphs = 6}, ShuffleMode::kGlobal);
  Loader whole(data, o);
  const std::vector<std::string> head = Drain(whole, 7);
  const LoaderState middle = whole.state();
  const std::vector<std::string> rest = Drain(whole);
  Loader resumed(source, o, middle);
  Feeder feeder(resumed, chunks);
  EXPECT_EQ(Drain(resumed), rest);
  resumed.Close();
}

// Graphs whose node counts are `nodes` and whose edges run from
// senders[i][k] to node 0 (a sender past the nodes makes a bad graph).
Dataset Wired(const std::vector<int64_t>& nodes, const std::vector<std::vector<int32_t>>& senders) {
  std::vector<std::vector<float>> x;
  std::vector<std::vector<int32_t>> receivers;
  std::vector<RaggedColumn::Piece> xs, ss, rs;
  for (size_t i = 0; i < nodes.size(); ++i) {
    x.emplace_back(static_cast<size_t>(nodes[i]), static_cast<float>(i));
    receivers.emplace_back(senders[i].size(), 0);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto m = static_cast<int64_t>(senders[i].size());
    xs.push_back({x[i].data(), DType::kFloat32, {nodes[i]}});
    ss.push_back({senders[i].data(), DType::kInt32, {m}});
    rs.push_back({receivers[i].data(), DType::kInt32, {m}});
  }
  return Dataset({RaggedColumn::FromPieces("nodes", DType::kFloat32, {}, false, xs),
                  RaggedColumn::FromPieces("senders", DType::kInt32, {}, false, ss),
                  RaggedColumn::FromPieces("receivers", DType::kInt32, {}, false, rs)});
}

// A chunk read again is checked graph by graph: a sender that now points
// past its graph's nodes (the same lengths) is a changed file, named.
TEST(GraphStreamTest, AChunkReadAgainWithANewBadGraphIsAChangedFile) {
  const std::vector<int64_t> nodes = {3, 4, 5, 6};
  const Dataset good = Wired(nodes, {{0, 1}, {2}, {4, 0}, {5}});
  const Dataset bad = Wired(nodes, {{0, 1}, {2}, {4, 0}, {6}});
  const auto source = BuildGraphs(Split(good, 2));
  EXPECT_TRUE(source->bad_records.empty());
  const std::vector<Dataset> again = Split(bad, 2);
  EXPECT_NO_THROW(CheckedChunkCopy(*source, 0, again[0], "g.parquet"));
  const std::string message =
      ThrownMessage<IoError>([&] { CheckedChunkCopy(*source, 1, again[1], "g.parquet"); });
  EXPECT_PRED2(Contains, message, "g.parquet, chunk 1, example 3: graph: senders[0] = 6");
  EXPECT_PRED2(Contains, message, "changed since");
  // A graph that was bad when the source was built stays a bad record.
  const auto bad_source = BuildGraphs(Split(bad, 2));
  ASSERT_EQ(bad_source->bad_records.size(), 1u);
  EXPECT_EQ(bad_source->bad_records[0].example, 3);
  EXPECT_NO_THROW(CheckedChunkCopy(*bad_source, 1, again[1], "g.parquet"));
}

TEST(GraphStreamTest, RefusesASourceThatIsNotForItsPlanner) {
  const auto data = Graphs();
  const std::vector<Dataset> chunks = Split(*data, 50);
  ChunkedSourceBuilder plain("nodes", {});
  for (const Dataset& c : chunks) plain.Add(c);
  const auto plain_source = std::make_shared<const ChunkedSource>(std::move(plain).Finish());
  const LoaderOptions graph_options =
      GraphOptions(GraphBudgetOptions{.nodes = 40, .edges = 40, .graphs = 6}, ShuffleMode::kNone);
  EXPECT_PRED2(Contains,
               ThrownMessage<InvalidArgumentError>([&] { Loader l(plain_source, graph_options); }),
               "GraphBudget plans by node and edge counts");
  LoaderOptions pad = graph_options;
  pad.schedule.planner = PadToMaxOptions{.batch_size = 4};
  EXPECT_PRED2(Contains,
               ThrownMessage<InvalidArgumentError>([&] { Loader l(BuildGraphs(chunks), pad); }),
               "built for graphs is planned by GraphBudget or GraphBuckets");
  ChunkedSourceBuilder tokens = ChunkedSourceBuilder::ForGraphs({});
  EXPECT_PRED2(Contains, ThrownMessage<InvalidArgumentError>([&] {
                 tokens.Add(*testing::TokensDataset({1, 2}));
               }),
               "ChunkedSource");
}

TEST(GraphStreamTest, ALimitTooSmallIsRefusedNamingWhatItMustHold) {
  const auto data = Graphs();
  const auto source = BuildGraphs(Split(*data, 16));
  LoaderOptions o =
      GraphOptions(GraphBudgetOptions{.nodes = 40, .edges = 40, .graphs = 6}, ShuffleMode::kNone);
  o.host_memory_limit = 2 << 10;
  EXPECT_PRED2(Contains, ThrownMessage<InvalidArgumentError>([&] { Loader l(source, o); }),
               "host_memory_limit 2048 bytes");
}

}  // namespace
}  // namespace jaxbatch
