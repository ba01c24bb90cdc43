#include "jaxbatch/load/loader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "jaxbatch/base/error.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

// A batch as plain bytes, to compare streams exactly.
std::string Fingerprint(const LoadedBatch& batch) {
  std::string out;
  for (const Array& a : batch.arrays) {
    out += a.name;
    out.append(reinterpret_cast<const char*>(a.data), static_cast<size_t>(a.num_bytes()));
  }
  return out;
}

std::vector<std::string> Drain(Loader& loader, int64_t limit = -1) {
  std::vector<std::string> out;
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    std::optional<LoadedBatch> batch = loader.Next();
    if (!batch) break;
    out.push_back(Fingerprint(*batch));
  }
  return out;
}

LoaderOptions Options(PlannerOptions planner, int64_t threads, int64_t epochs = 2) {
  LoaderOptions o;
  o.schedule.planner = std::move(planner);
  o.schedule.seed = 11;
  o.num_threads = threads;
  o.epochs = epochs;
  o.prefetch = 3;
  return o;
}

const std::vector<PlannerOptions>& AllPlanners() {
  static const std::vector<PlannerOptions> planners = {
      PadToMaxOptions{.batch_size = 5},
      FixedBucketsOptions{.boundaries = {8, 16, 32}, .batch_size = 4},
      AutoBucketsOptions{.max_shapes = 3, .token_budget = 128},
      PackOptions{.row_length = 32, .rows_per_batch = 2}};
  return planners;
}

TEST(LoaderTest, StreamIsIdenticalWhateverTheThreadCount) {
  auto ds = testing::TokensDataset(testing::RandomLengths(200, 30, 5));
  for (const PlannerOptions& planner : AllPlanners()) {
    Loader one(ds, Options(planner, 1));
    const std::vector<std::string> reference = Drain(one);
    ASSERT_FALSE(reference.empty());
    for (int64_t threads : {2, 4}) {
      Loader many(ds, Options(planner, threads));
      EXPECT_EQ(Drain(many), reference) << threads << " threads";
    }
  }
}

TEST(LoaderTest, RestoreAtEveryStepContinuesTheSameStream) {
  auto ds = testing::TokensDataset(testing::RandomLengths(60, 30, 8));
  for (const PlannerOptions& planner : AllPlanners()) {
    Loader full(ds, Options(planner, 2));
    const std::vector<std::string> reference = Drain(full);
    const LoaderState end = full.state();
    for (size_t k = 0; k <= reference.size(); ++k) {
      Loader first(ds, Options(planner, 1));
      Drain(first, static_cast<int64_t>(k));
      const LoaderState saved = first.state();
      first.Close();
      Loader resumed(ds, Options(planner, 3), saved);
      std::vector<std::string> rest = Drain(resumed);
      std::vector<std::string> expected(reference.begin() + static_cast<std::ptrdiff_t>(k),
                                        reference.end());
      ASSERT_EQ(rest, expected) << "restored after " << k << " batches";
      const LoaderState final_state = resumed.state();
      EXPECT_EQ(final_state.examples, end.examples);
      EXPECT_EQ(final_state.batches, end.batches);
      EXPECT_EQ(final_state.dropped, end.dropped);
    }
  }
}

TEST(LoaderTest, EveryExampleOncePerEpochAndCountsAddUp) {
  auto ds = testing::TokensDataset(testing::RandomLengths(97, 30, 2));
  Loader loader(ds,
                Options(PadToMaxOptions{.batch_size = 10, .remainder = Remainder::kDrop}, 2, 1));
  std::multiset<int64_t> seen;
  while (std::optional<LoadedBatch> batch = loader.Next()) {
    const Array& index = batch->arrays.back();
    ASSERT_EQ(index.name, "example_index");
    const auto* ids = reinterpret_cast<const int64_t*>(index.data);
    for (int64_t r = 0; r < index.shape[0]; ++r) {
      if (ids[r] >= 0) seen.insert(ids[r]);
    }
  }
  const LoaderState s = loader.state();
  EXPECT_EQ(static_cast<int64_t>(seen.size()), s.examples);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());
  EXPECT_EQ(s.examples + s.dropped, 97);
  EXPECT_EQ(s.dropped, 7);
}

TEST(LoaderTest, SteadyStateAllocatesNoNewBuffers) {
  auto ds = testing::TokensDataset(std::vector<int64_t>(400, 16));
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 8}, 2, 0);
  Loader loader(ds, o);
  // About prefetch batches ahead plus the one the consumer holds are alive,
  // each of 4 arrays (tokens, mask, lengths, example_index). After 1000
  // batches the arena has allocated a handful of sets, not one per batch;
  // one set of slack covers a buffer whose release races a new claim.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(loader.Next());
  const int64_t after_1000 = loader.arena().allocations();
  EXPECT_LE(after_1000, (o.prefetch + 2) * 4);
  EXPECT_GE(after_1000, 4);
}

TEST(LoaderTest, BadRecordsRaiseSkipOrQuarantine) {
  auto ds = testing::TokensDataset({3, 0, 40, 5, 2, 7});
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 2}, 2, 1);
  o.schedule.shuffle = ShuffleMode::kNone;
  o.schema.columns = {{.name = "tokens", .min_length = 1, .max_length = 10}};
  o.source = "train.parquet";
  {
    Loader loader(ds, o);
    try {
      loader.Next();
      FAIL() << "expected a bad-record error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "train.parquet, example 1: column 'tokens': expected length >= 1, found 0"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(loader.Next());  // The stream ended.
  }
  o.on_error = ErrorPolicy::kSkip;
  {
    Loader loader(ds, o);
    Drain(loader);
    const LoaderState s = loader.state();
    EXPECT_EQ(s.skipped, 2);
    EXPECT_EQ(s.examples, 4);
    EXPECT_TRUE(loader.quarantine().empty());
  }
  o.on_error = ErrorPolicy::kQuarantine;
  const std::string path =
      (std::filesystem::temp_directory_path() / "jaxbatch_quarantine_test.jsonl").string();
  std::remove(path.c_str());
  o.quarantine_path = path;
  {
    Loader loader(ds, o);
    Drain(loader);
    EXPECT_EQ(loader.state().quarantined, 2);
    const std::vector<BadRecord> q = loader.quarantine();
    ASSERT_EQ(q.size(), 2u);
    EXPECT_EQ(q[1].example, 2);
    EXPECT_EQ(q[1].reason, "column 'tokens': expected length <= 10, found 40");
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line,
            "{\"source\": \"train.parquet\", \"example\": 1, \"reason\": \"column 'tokens': "
            "expected length >= 1, found 0\"}");
  o.on_error = ErrorPolicy::kSkip;
  o.quarantine_path.clear();
  o.max_errors = 1;
  Loader limited(ds, o);
  EXPECT_THROW(limited.Next(), Error);
}

TEST(LoaderTest, ShardsShareAQuarantineFileWithoutDuplicates) {
  auto ds = testing::TokensDataset({3, 0, 40, 5, 2, 7, 0, 4});
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 2}, 2, 1);
  o.schema.columns = {{.name = "tokens", .min_length = 1, .max_length = 10}};
  o.on_error = ErrorPolicy::kQuarantine;
  const std::string path =
      (std::filesystem::temp_directory_path() / "jaxbatch_quarantine_shards_test.jsonl").string();
  std::remove(path.c_str());
  o.quarantine_path = path;
  o.schedule.shard_count = 3;
  for (int64_t shard = 0; shard < 3; ++shard) {
    o.schedule.shard_index = shard;
    Loader loader(ds, o);
    Drain(loader);
    EXPECT_EQ(loader.quarantine().size(), 3u);  // Every shard reports every bad record.
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);  // ... and the file holds each one once.
  EXPECT_NE(lines[0].find("\"example\": 1,"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("\"example\": 6,"), std::string::npos) << lines[2];
}

TEST(LoaderTest, WorkerErrorReachesTheConsumerWithItsMessage) {
  auto ds = testing::TokensDataset({3, 50, 4});
  Loader loader(ds, Options(PackOptions{.row_length = 10, .rows_per_batch = 1}, 2, 1));
  try {
    loader.Next();
    FAIL() << "expected the planner's error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(
        std::string(e.what()).find("Pack: example 1 has length 50, longer than row_length 10"),
        std::string::npos);
  }
}

int ThreadCount() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

TEST(LoaderTest, CloseAndDestructionEndEveryThread) {
  auto ds = testing::TokensDataset(std::vector<int64_t>(100, 4));
  const int before = ThreadCount();
  {
    Loader loader(ds, Options(PadToMaxOptions{.batch_size = 4}, 4, 0));
    ASSERT_TRUE(loader.Next());
    EXPECT_EQ(ThreadCount(), before + 4);
    loader.Close();
    EXPECT_EQ(ThreadCount(), before);
    EXPECT_FALSE(loader.Next());
  }
  {
    Loader loader(ds, Options(PadToMaxOptions{.batch_size = 4}, 3, 0));
    ASSERT_TRUE(loader.Next());
  }  // Destroyed mid-stream with batches in flight.
  EXPECT_EQ(ThreadCount(), before);
}

TEST(LoaderTest, CloseFromTwoThreadsAtOnce) {
  auto ds = testing::TokensDataset(std::vector<int64_t>(100, 4));
  Loader loader(ds, Options(PadToMaxOptions{.batch_size = 4}, 3, 0));
  ASSERT_TRUE(loader.Next());
  std::thread other([&] { loader.Close(); });
  loader.Close();
  other.join();
  EXPECT_EQ(loader.num_threads(), 0);
  EXPECT_FALSE(loader.Next());
}

TEST(LoaderTest, BadOptionsThrowBeforeAnyThreadStarts) {
  auto ds = testing::TokensDataset({1, 2});
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 4}, 2);
  o.prefetch = 0;
  EXPECT_THROW(Loader(ds, o), InvalidArgumentError);
  o = Options(PadToMaxOptions{.batch_size = 4}, 2);
  o.schedule.shard_index = 3;
  o.schedule.shard_count = 2;
  EXPECT_THROW(Loader(ds, o), InvalidArgumentError);
  o = Options(PadToMaxOptions{.batch_size = 4}, 2);
  LoaderState wrong_seed;
  wrong_seed.seed = 99;
  EXPECT_THROW(Loader(ds, o, wrong_seed), InvalidArgumentError);
}

}  // namespace
}  // namespace jaxbatch
