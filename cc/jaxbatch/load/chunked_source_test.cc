#include "jaxbatch/load/chunked_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/dataset_builder.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

// tokens (int32, ragged, the length column), noise (float32, ragged, not
// aligned: padded to its longest example) and label (int64, fixed).
Dataset ThreeColumns(size_t n, uint32_t seed) {
  const std::vector<int64_t> lengths = testing::RandomLengths(n, 30, seed);
  const std::vector<int64_t> noise_lengths = testing::RandomLengths(n, 9, seed + 1);
  std::vector<std::vector<int32_t>> tokens(n);
  std::vector<std::vector<float>> noise(n);
  std::vector<int64_t> labels(n);
  std::vector<RaggedColumn::Piece> t, z, l;
  for (size_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < lengths[i]; ++k) tokens[i].push_back(static_cast<int32_t>(i * 100 + k));
    for (int64_t k = 0; k < noise_lengths[i]; ++k)
      noise[i].push_back(0.5f * static_cast<float>(i + k));
    labels[i] = static_cast<int64_t>(i) * 7;
    t.push_back({tokens[i].data(), DType::kInt32, {lengths[i]}});
    z.push_back({noise[i].data(), DType::kFloat32, {noise_lengths[i]}});
    l.push_back({&labels[i], DType::kInt64, {}});
  }
  return Dataset({RaggedColumn::FromPieces("tokens", DType::kInt32, {}, false, t),
                  RaggedColumn::FromPieces("noise", DType::kFloat32, {}, false, z),
                  RaggedColumn::FromPieces("label", DType::kInt64, {}, true, l)});
}

std::shared_ptr<const ChunkedSource> Build(const std::vector<Dataset>& chunks, Schema schema = {}) {
  ChunkedSourceBuilder builder("tokens", std::move(schema));
  for (const Dataset& c : chunks) builder.Add(c);
  return std::make_shared<const ChunkedSource>(std::move(builder).Finish());
}

using testing::Drain;
using testing::Fingerprint;
using testing::kReaderStopped;
using testing::Split;
using Feeder = testing::ChunkFeeder;

TEST(ChunkedSourceTest, KeepsLengthsBoundariesAndBadRecordsOfEveryChunk) {
  const Dataset data = ThreeColumns(23, 3);
  const std::vector<Dataset> chunks = Split(data, 5);
  Schema schema{.columns = {{.name = "tokens", .max_length = 20}}};
  const auto source = Build(chunks, schema);
  EXPECT_EQ(source->num_examples(), 23);
  EXPECT_EQ(source->chunk_begin, (std::vector<int64_t>{0, 5, 10, 15, 20, 23}));
  EXPECT_EQ(source->lengths("tokens"), data.column("tokens").Lengths());
  EXPECT_EQ(source->lengths("noise"), data.column("noise").Lengths());
  EXPECT_THROW(source->lengths("label"), InvalidArgumentError);
  const std::vector<BadRecord> whole = FindBadRecords(data, schema);
  ASSERT_EQ(source->bad_records.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(source->bad_records[i].example, whole[i].example);
    EXPECT_EQ(source->bad_records[i].reason, whole[i].reason);
  }
  for (int64_t c = 0; c < source->num_chunks(); ++c) {
    EXPECT_EQ(source->chunk_bytes[static_cast<size_t>(c)],
              OwnedBytes(chunks[static_cast<size_t>(c)]));
  }
  EXPECT_EQ(source->ChunkOf(0), 0);
  EXPECT_EQ(source->ChunkOf(9), 1);
  EXPECT_EQ(source->ChunkOf(22), 4);
  // The prototype: tokens (aligned with itself) empty, noise as long as its longest.
  EXPECT_EQ(source->prototype->num_examples(), 1);
  EXPECT_EQ(source->prototype->column("tokens").length(0), 0);
  EXPECT_EQ(source->prototype->column("noise").length(0), data.column("noise").max_length());
}

TEST(ChunkedSourceTest, RefusesChunksWithOtherColumns) {
  ChunkedSourceBuilder builder("tokens", {});
  builder.Add(ThreeColumns(4, 1));
  EXPECT_THROW(builder.Add(*testing::TokensDataset({1, 2})), InvalidArgumentError);
  EXPECT_THROW(ChunkedSourceBuilder("tokens", {}).Finish(), InvalidArgumentError);
}

TEST(ChunkedSourceTest, CheckedChunkCopyFindsAChangedChunk) {
  const std::vector<Dataset> chunks = Split(ThreeColumns(10, 5), 5);
  const auto source = Build(chunks);
  const auto copy = CheckedChunkCopy(*source, 1, chunks[1], "data.parquet");
  EXPECT_EQ(copy->column("tokens").Lengths(), chunks[1].column("tokens").Lengths());
  try {
    CheckedChunkCopy(*source, 0, chunks[1], "data.parquet");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("data.parquet, chunk 0, example 0: column 'tokens'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("changed since"), std::string::npos) << e.what();
  }
}

// The stream over chunks is byte for byte the stream over the whole data,
// for every planner and shuffle, through a cache that holds few chunks.
TEST(ChunkedSourceTest, StreamEqualsTheInMemoryStream) {
  auto data = std::make_shared<const Dataset>(ThreeColumns(300, 9));
  const std::vector<Dataset> chunks = Split(*data, 16);
  const auto source = Build(chunks);
  const std::vector<PlannerOptions> planners = {
      PadToMaxOptions{.batch_size = 5}, AutoBucketsOptions{.max_shapes = 3, .token_budget = 128}};
  for (const PlannerOptions& planner : planners) {
    for (const ShuffleMode shuffle :
         {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlock}) {
      LoaderOptions o;
      o.schedule.planner = planner;
      o.schedule.shuffle = shuffle;
      o.schedule.block_size = 32;
      o.schedule.seed = 4;
      o.num_threads = 3;
      o.epochs = 2;
      o.prefetch = 2;
      o.host_memory_limit = 64 << 10;
      Loader whole(data, o);
      const std::vector<std::string> expected = Drain(whole);
      Loader streamed(source, o);
      Feeder feeder(streamed, chunks);
      EXPECT_EQ(Drain(streamed), expected);
      EXPECT_GE(streamed.chunk_reads(), source->num_chunks());
      EXPECT_GT(streamed.chunk_cache_bytes(), 0);
      streamed.Close();
    }
  }
}

// ThreeColumns without noise: packing needs every ragged column aligned
// with the length column.
std::shared_ptr<const Dataset> Packable(size_t n, uint32_t seed) {
  const Dataset three = ThreeColumns(n, seed);
  return std::make_shared<const Dataset>(
      std::vector<RaggedColumn>{three.column("tokens"), three.column("label")});
}

LoaderOptions PackedOptions() {
  LoaderOptions o;
  o.schedule.planner = PackOptions{.row_length = 32, .rows_per_batch = 2};
  o.num_threads = 2;
  o.host_memory_limit = 32 << 10;
  return o;
}

TEST(ChunkedSourceTest, PackedStreamAndRestoreEqualTheInMemoryStream) {
  const auto data = Packable(200, 2);
  const std::vector<Dataset> chunks = Split(*data, 10);
  const auto source = Build(chunks);
  const LoaderOptions o = PackedOptions();
  Loader whole(data, o);
  const std::vector<std::string> expected = Drain(whole);
  ASSERT_GT(expected.size(), 6u);
  LoaderState middle;
  {
    Loader streamed(source, o);
    Feeder feeder(streamed, chunks);
    std::vector<std::string> got;
    for (int i = 0; i < 5; ++i) got.push_back(Fingerprint(*streamed.Next()));
    middle = streamed.state();
    streamed.Close();
    EXPECT_EQ(got, std::vector<std::string>(expected.begin(), expected.begin() + 5));
  }
  Loader resumed(source, o, middle);
  Feeder feeder(resumed, chunks);
  EXPECT_EQ(Drain(resumed), std::vector<std::string>(expected.begin() + 5, expected.end()));
  resumed.Close();
}

TEST(ChunkedSourceTest, AFailedChunkEndsTheStreamWithItsMessage) {
  const std::vector<Dataset> chunks = Split(ThreeColumns(50, 1), 10);
  LoaderOptions o;
  o.schedule.planner = PadToMaxOptions{.batch_size = 4};
  o.schedule.shuffle = ShuffleMode::kNone;
  o.num_threads = 2;
  o.host_memory_limit = 64 << 10;
  Loader loader(Build(chunks), o);
  std::thread feeder([&] {
    while (true) {
      const int64_t c = loader.NextChunkRequest(std::chrono::milliseconds(5));
      if (c == ChunkCache::kClosed) return;
      if (c == 2) {
        loader.FailChunk(2, "data.parquet, row group 2: corrupt page");
      } else if (c >= 0) {
        loader.ProvideChunk(c, chunks[static_cast<size_t>(c)]);
      }
    }
  });
  int64_t batches = 0;
  try {
    while (loader.Next()) ++batches;
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "data.parquet, row group 2: corrupt page");
  }
  EXPECT_EQ(batches, 5);  // Examples 0..19 (chunks 0 and 1) in batches of 4.
  loader.Close();
  feeder.join();
}

// A Close() from another thread while Next() waits (here for chunks no
// feeder reads) ends the wait with an error, never as the end of the stream
// (which a training loop would take for success).
TEST(ChunkedSourceTest, CloseWhileNextWaitsThrowsInsteadOfEndingTheStream) {
  LoaderOptions o;
  o.schedule.planner = PadToMaxOptions{.batch_size = 4};
  o.num_threads = 2;
  o.host_memory_limit = 64 << 10;
  Loader loader(Build(Split(ThreeColumns(40, 1), 10)), o);  // No feeder: Next() waits.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    loader.Close();
  });
  const std::string message =
      testing::ReturnsWithin(std::chrono::seconds(60), "Loader::Next during Close",
                             [&] { return testing::ThrownMessage<Error>([&] { loader.Next(); }); });
  closer.join();
  EXPECT_TRUE(testing::Contains(message, "Loader: closed")) << message;
  EXPECT_THROW(loader.Next(), Error);
}

// Thousands of streaming loaders restored mid-epoch, read a little and closed
// at random moments, with random small delays in the consumer and the
// feeder, and in some cycles a reader that stops: every batch is the
// uninterrupted stream's, and every Close() returns (a close that landed
// while a worker used a chunk used to leave it waiting forever).
TEST(ChunkedSourceTest, RestoreReadCloseCyclesEqualTheStreamAndNeverHang) {
#if defined(__SANITIZE_THREAD__)
  constexpr int kCycles = 2000;  // About 3 times slower there, and as many closes that race.
#else
  constexpr int kCycles = 3000;
#endif
  const auto data = Packable(120, 6);
  const std::vector<Dataset> chunks = Split(*data, 8);
  const auto source = Build(chunks);
  LoaderOptions o = PackedOptions();
  o.prefetch = 2;
  // The reference: every batch, and the state before each.
  std::vector<std::string> expected;
  std::vector<LoaderState> before;
  {
    Loader whole(data, o);
    for (before.push_back(whole.state()); std::optional<LoadedBatch> b = whole.Next();) {
      expected.push_back(Fingerprint(*b));
      before.push_back(whole.state());
    }
  }
  ASSERT_GT(expected.size(), 8u);
  const auto pause = [](std::mt19937& rng) {
    const uint32_t roll = rng() % 4;
    if (roll == 1) std::this_thread::yield();
    if (roll == 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
  };
  int64_t batches = 0;
  int64_t stopped = 0;
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    std::mt19937 rng(static_cast<uint32_t>(cycle));
    const size_t start = rng() % expected.size();
    const int reads = static_cast<int>(rng() % 4);
    const int64_t stop_at = rng() % 5 == 0 ? static_cast<int64_t>(rng() % 6) : -1;
    std::mt19937 feeder_rng(static_cast<uint32_t>(cycle) + 1000003u);
    int64_t served = 0;
    Loader loader(source, o, before[start]);
    Feeder feeder(loader, chunks, [&](int64_t) {
      pause(feeder_rng);
      return served++ != stop_at;
    });
    for (int k = 0; k < reads; ++k) {
      pause(rng);
      std::optional<LoadedBatch> batch;
      try {
        batch = loader.Next();
      } catch (const IoError& e) {
        ASSERT_STREQ(e.what(), kReaderStopped) << "cycle " << cycle;
        ASSERT_GE(stop_at, 0) << "cycle " << cycle;
        ++stopped;
        break;
      }
      if (start + k >= expected.size()) {
        ASSERT_FALSE(batch) << "cycle " << cycle;
        break;
      }
      ASSERT_TRUE(batch) << "cycle " << cycle;
      ASSERT_EQ(Fingerprint(*batch), expected[start + k]) << "cycle " << cycle << ", batch " << k;
      ++batches;
    }
    pause(rng);
    testing::ReturnsWithin(std::chrono::seconds(60), StrCat("Loader::Close of cycle ", cycle),
                           [&] { loader.Close(); });
  }
  EXPECT_GT(batches, kCycles / 2);  // The cycles did read, not only open and close.
  EXPECT_GT(stopped, 0);
}

TEST(ChunkedSourceTest, RefusesALimitThatCannotHoldAChunk) {
  const std::vector<Dataset> chunks = Split(ThreeColumns(100, 1), 50);
  LoaderOptions o;
  o.schedule.planner = PadToMaxOptions{.batch_size = 4};
  o.num_threads = 1;
  o.collate.padded_segments = false;
  o.host_memory_limit = 9000;  // Holds the batches, not two chunks.
  try {
    Loader loader(Build(chunks), o);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("twice the largest chunk"), std::string::npos) << e.what();
  }
  o.host_memory_limit = 0;
  EXPECT_THROW(Loader(Build(chunks), o), InvalidArgumentError);
}

TEST(ChunkedSourceTest, AutomaticThreadsFitALimitThatExplicitOnesDoNot) {
  auto data = std::make_shared<const Dataset>(ThreeColumns(200, 3));
  const std::vector<Dataset> chunks = Split(*data, 25);
  LoaderOptions o;
  o.schedule.planner = PadToMaxOptions{.batch_size = 4};
  o.prefetch = 2;
  // The smallest limit (to 64 bytes) one thread streams in.
  o.num_threads = 1;
  int64_t limit = 1024;
  for (;; limit += 64) {
    ASSERT_LT(limit, int64_t{1} << 24);
    o.host_memory_limit = limit;
    try {
      Loader fits(Build(chunks), o);
      break;
    } catch (const InvalidArgumentError&) {
    }
  }
  o.num_threads = kMaxDefaultThreads;  // Asked for: refused, naming them.
  try {
    Loader loader(Build(chunks), o);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("num_threads = 8"), std::string::npos) << e.what();
  }
  o.num_threads = 0;  // Left to the loader: as many as the limit holds.
  Loader streamed(Build(chunks), o);
  EXPECT_EQ(streamed.num_threads(), 1);
  Feeder feeder(streamed, chunks);
  LoaderOptions whole = o;
  whole.host_memory_limit = 0;
  Loader in_memory(data, whole);
  EXPECT_EQ(Drain(streamed), Drain(in_memory));
  streamed.Close();
  o.host_memory_limit = 64 << 20;  // Room for all: the machine's count, as before.
  Loader roomy(Build(chunks), o);
  EXPECT_EQ(roomy.num_threads(),
            std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxDefaultThreads));
}

}  // namespace
}  // namespace jaxbatch
