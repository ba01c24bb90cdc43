#include "jaxbatch/load/loader.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <thread>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/fingerprint.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::Drain;
using testing::Fingerprint;
using testing::GraphsDataset;
using testing::RandomLengths;
using testing::ThrownMessage;

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

// Graph planners through the loader: the stream is the same for any thread
// count and after a restore, every good graph once per epoch, a bad one
// skipped and counted.
TEST(LoaderTest, GraphBatchesStreamRestoreAndSkipBadGraphs) {
  const std::vector<int64_t> nodes = RandomLengths(300, 12, 17);
  const auto ds = GraphsDataset(nodes, {7, 150});
  LoaderOptions options;
  options.schedule.planner =
      GraphBucketsOptions{.max_shapes = 3, .nodes = 60, .edges = 60, .graphs = 9};
  options.schedule.seed = 4;
  options.epochs = 2;
  options.on_error = ErrorPolicy::kSkip;
  options.num_threads = 1;
  Loader one(ds, options);
  const std::vector<std::string> stream = Drain(one);
  ASSERT_FALSE(stream.empty());
  EXPECT_EQ(one.state().skipped, 2 * 2);  // counted in every epoch entered
  EXPECT_EQ(one.state().examples, 2 * 298);
  options.num_threads = 4;
  Loader many(ds, options);
  EXPECT_EQ(Drain(many), stream);
  for (size_t cut : {size_t{1}, stream.size() / 2, stream.size() - 1}) {
    Loader head(ds, options);
    Drain(head, static_cast<int64_t>(cut));
    Loader rest(ds, options, head.state());
    std::vector<std::string> whole(stream.begin(), stream.begin() + static_cast<int64_t>(cut));
    const std::vector<std::string> tail = Drain(rest);
    whole.insert(whole.end(), tail.begin(), tail.end());
    EXPECT_EQ(whole, stream) << "restored after " << cut;
  }
  options.on_error = ErrorPolicy::kRaise;
  Loader raising(ds, options);
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { raising.Next(); }),
                       "example 7: graph: senders["));
  options.schedule.planner = PackOptions{.row_length = 16, .rows_per_batch = 2};
  options.length_column = "nodes";
  EXPECT_NO_THROW(Loader(ds, options).Close());  // sequence planners still read the columns
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

// A state saved before version 3 (AutoBuckets left remainder rows empty)
// continues the stream it began, every later epoch too, and what it saves
// stays that version; a version-3 state plans with the rows filled.
TEST(LoaderTest, AnOlderStateKeepsTheBucketsItWasPlannedWith) {
  auto ds = testing::TokensDataset(testing::RandomLengths(90, 40, 6));
  const AutoBucketsOptions filled{.max_shapes = 3, .batch_size = 8};
  AutoBucketsOptions unfilled = filled;
  unfilled.fill_remainders = false;  // The planner of versions 1 and 2.
  Loader old_run(ds, Options(unfilled, 2));
  const std::vector<std::string> before = Drain(old_run);
  Loader new_run(ds, Options(filled, 2));
  const std::vector<std::string> now = Drain(new_run);
  ASSERT_NE(before, now);  // Filling changes this data's plan.
  for (size_t k : {size_t{1}, before.size() / 2}) {
    Loader first(ds, Options(unfilled, 1));
    Drain(first, static_cast<int64_t>(k));
    LoaderState saved = first.state();
    ASSERT_TRUE(saved.key);
    saved.key->version = 2;
    Loader resumed(ds, Options(filled, 2), saved);
    EXPECT_EQ(Drain(resumed), std::vector<std::string>(
                                  before.begin() + static_cast<std::ptrdiff_t>(k), before.end()))
        << "restored after " << k << " batches";
    EXPECT_EQ(resumed.state().key->version, 2);
  }
  Loader first(ds, Options(filled, 1));
  Drain(first, 1);
  Loader resumed(ds, Options(filled, 2), first.state());
  EXPECT_EQ(resumed.state().key->version, kLoaderStateVersion);
  EXPECT_EQ(Drain(resumed), std::vector<std::string>(now.begin() + 1, now.end()));
}

// A state saved before version 4 (a budget's rows were not balanced)
// continues the stream it began with the budget's rows, and stays that
// version; every planner that balances is restored so.
TEST(LoaderTest, AnOlderStateKeepsTheBudgetsRows) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 90; ++i) lengths.push_back(1 + i % 40);
  auto ds = testing::TokensDataset(lengths);
  const std::vector<PlannerOptions> planners = {
      PackOptions{.row_length = 64, .token_budget = 64 * 12},
      AutoBucketsOptions{.max_shapes = 1, .token_budget = 440},
      FixedBucketsOptions{.boundaries = {20, 40}, .token_budget = 320}};
  for (const PlannerOptions& balanced : planners) {
    PlannerOptions unbalanced = balanced;
    std::visit(
        [](auto& o) {
          if constexpr (requires { o.balance_batches; }) o.balance_batches = false;
        },
        unbalanced);
    Loader old_run(ds, Options(unbalanced, 2));
    const std::vector<std::string> before = Drain(old_run);
    ASSERT_GT(before.size(), 3u) << PlannerName(balanced);
    Loader new_run(ds, Options(balanced, 2));
    ASSERT_TRUE(before != Drain(new_run)) << PlannerName(balanced);  // Balancing changes it.
    Loader first(ds, Options(unbalanced, 1));
    Drain(first, 3);
    LoaderState saved = first.state();
    ASSERT_TRUE(saved.key);
    saved.key->version = 3;
    Loader resumed(ds, Options(balanced, 2), saved);
    EXPECT_TRUE(Drain(resumed) == std::vector<std::string>(before.begin() + 3, before.end()))
        << PlannerName(balanced);
    EXPECT_EQ(resumed.state().key->version, 3);
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
  // each of 6 arrays (tokens, mask, lengths, segment ids, positions,
  // example_index). After 1000 batches the arena has allocated a handful of
  // sets, not one per batch; one set of slack covers a buffer whose release
  // races a new claim.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(loader.Next());
  const int64_t after_1000 = loader.arena().allocations();
  EXPECT_LE(after_1000, (o.prefetch + 2) * 6);
  EXPECT_GE(after_1000, 6);
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

// The planner's error reaches the caller with its message, now when the
// Loader is made (errors that do come from a worker, a failed chunk or a
// changed mapped file, are ChunkedSourceTest's and MappedFile...'s).
TEST(LoaderTest, PlannerErrorReachesTheCallerWithItsMessage) {
  auto ds = testing::TokensDataset({3, 50, 4});
  try {
    Loader loader(ds, Options(PackOptions{.row_length = 10, .rows_per_batch = 1}, 2, 1));
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

// The thread count once it reaches `expected`, or after 2 s. A joined
// thread can linger in /proc/self/task for a moment: join() returns when the
// kernel clears the thread's tid, slightly before the task is released.
int SettledThreadCount(int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int count = ThreadCount();
  while (count != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    count = ThreadCount();
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
    EXPECT_EQ(SettledThreadCount(before), before);
    EXPECT_THROW(loader.Next(), Error);  // Closed before the end (epochs = 0: it has none).
  }
  {
    Loader loader(ds, Options(PadToMaxOptions{.batch_size = 4}, 3, 0));
    ASSERT_TRUE(loader.Next());
  }  // Destroyed mid-stream with batches in flight.
  EXPECT_EQ(SettledThreadCount(before), before);
}

TEST(LoaderTest, CloseFromTwoThreadsAtOnce) {
  auto ds = testing::TokensDataset(std::vector<int64_t>(100, 4));
  Loader loader(ds, Options(PadToMaxOptions{.batch_size = 4}, 3, 0));
  ASSERT_TRUE(loader.Next());
  std::thread other([&] { loader.Close(); });
  loader.Close();
  other.join();
  EXPECT_EQ(loader.num_threads(), 0);
  EXPECT_THROW(loader.Next(), Error);
}

// Next() after Close() says the loader was closed, so a stream cut short never
// passes for one that ended; a stream the consumer saw end stays ended.
TEST(LoaderTest, NextAfterCloseThrowsUnlessTheStreamHadEnded) {
  auto ds = testing::TokensDataset(testing::RandomLengths(40, 10, 3));
  Loader cut(ds, Options(PadToMaxOptions{.batch_size = 4}, 2, 1));
  ASSERT_TRUE(cut.Next());
  cut.Close();
  for (int call = 0; call < 2; ++call) {
    const std::string message = testing::ThrownMessage<Error>([&] { cut.Next(); });
    EXPECT_TRUE(testing::Contains(message, "Loader: closed; Next() after Close()")) << message;
  }
  Loader ended(ds, Options(PadToMaxOptions{.batch_size = 4}, 2, 1));
  EXPECT_EQ(Drain(ended).size(), 10u);
  ended.Close();
  EXPECT_FALSE(ended.Next());
  EXPECT_FALSE(ended.Next());
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
  o = Options(PadToMaxOptions{.batch_size = 4}, 1000000);
  const std::string msg = testing::ThrownMessage<InvalidArgumentError>([&] { Loader(ds, o); });
  EXPECT_NE(msg.find("num_threads must be at most 1024"), std::string::npos) << msg;
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// In a child process under a 1 GiB address space, 1000 workers cannot all
// start: the loader throws Error (not std::terminate) naming num_threads,
// with the started workers joined; exit code 0 means all of that held.
void LoaderWithTooManyThreadsUnderALimit() {
  auto ds = testing::TokensDataset({1, 2, 3});
  const rlimit limit{1u << 30, 1u << 30};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::exit(2);
  try {
    Loader loader(ds, Options(PadToMaxOptions{.batch_size = 4}, 1000));
    std::exit(3);
  } catch (const InvalidArgumentError&) {
    std::exit(5);
  } catch (const Error& e) {
    std::exit(std::string(e.what()).find("Loader: num_threads=1000") != std::string::npos ? 0 : 4);
  }
}

TEST(LoaderDeathTest, WorkerThatCannotStartThrowsInsteadOfAborting) {
  EXPECT_EXIT(LoaderWithTooManyThreadsUnderALimit(), ::testing::ExitedWithCode(0), "");
}
#endif

TEST(LoaderTest, KeepingEveryBufferTheLimitAllowsThrowsInsteadOfWaitingForever) {
  // 40 examples of length 1..4, int32: PadToMax(4) batches of at most 4*4*4 +
  // mask 16 + lengths 16 + example_index 32 = 128 bytes (without segment
  // ids and positions); 624 bytes hold 4.
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 40; ++i) lengths.push_back(i % 4 + 1);
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 4}, /*threads=*/2, /*epochs=*/1);
  o.collate.padded_segments = false;
  o.prefetch = 1;
  o.host_memory_limit = 624;
  Loader loader(testing::TokensDataset(lengths), o);
  std::vector<LoadedBatch> kept;
  try {
    while (std::optional<LoadedBatch> batch = loader.Next()) kept.push_back(std::move(*batch));
    FAIL() << "expected an error once the caller holds every buffer";
  } catch (const Error& e) {
    EXPECT_EQ(kept.size(), 4u);
    EXPECT_NE(std::string(e.what()).find("host_memory_limit=624 holds 4 batches of up to 128 "
                                         "bytes and all are still referenced by the caller"),
              std::string::npos)
        << e.what();
  }
  // Letting go of the batches lets the stream go on, to its end.
  kept.clear();
  int64_t examples = 16;
  while (std::optional<LoadedBatch> batch = loader.Next()) examples += batch->examples;
  EXPECT_EQ(examples, 40);
}

TEST(LoaderTest, TryNextReturnsFalseWhenNoBatchIsReadyWithinItsTimeout) {
  std::vector<int64_t> lengths(40, 4);
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 4}, /*threads=*/1, /*epochs=*/1);
  o.collate.padded_segments = false;  // 128-byte batches, as above
  o.prefetch = 1;
  o.host_memory_limit = 624;
  Loader loader(testing::TokensDataset(lengths), o);
  std::vector<std::optional<LoadedBatch>> kept(4);
  for (std::optional<LoadedBatch>& batch : kept) {
    while (!loader.TryNext(std::chrono::milliseconds(10), &batch)) {
    }
    ASSERT_TRUE(batch);
  }
  // The worker waits for memory the kept batches hold: nothing comes, and
  // TryNext returns after its timeout (well within kMemoryStallGrace).
  std::optional<LoadedBatch> next;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(loader.TryNext(std::chrono::milliseconds(20), &next));
  EXPECT_LT(std::chrono::steady_clock::now() - start, kMemoryStallGrace);
  kept.clear();
  EXPECT_TRUE(loader.TryNext(std::chrono::milliseconds(5000), &next));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->step, 4);
}

// One thread, one batch ahead, over data read from `path` (4096 bytes, made here).
LoaderOptions MappedFileOptions(const std::string& path) {
  std::ofstream(path, std::ios::binary) << std::string(4096, 'x');
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 2}, /*threads=*/1, /*epochs=*/1);
  o.prefetch = 1;
  o.mapped_files = {path};
  return o;
}

TEST(LoaderTest, MappedFileChangedWhileLoadingFailsNamingIt) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "jaxbatch_loader_mapped.bin").string();
  LoaderOptions o = MappedFileOptions(path);
  Loader loader(testing::TokensDataset(std::vector<int64_t>(20, 3)), o);
  ASSERT_TRUE(loader.Next());
  std::filesystem::resize_file(path, 100);  // Truncated, as by another process.
  try {
    // Batches collated before the change still come; then the error.
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(loader.Next());
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(StrCat("Loader: ", path,
                                                " changed while the loader reads it: modified "
                                                "in place (now 100 bytes, was 4096)")),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
  o.mapped_files = {path};
  EXPECT_THROW(Loader(testing::TokensDataset({1, 2}), o), IoError);  // Gone before the start.
}

// A file renamed over a mapped one (same size, its time restored, as
// `rsync -t` leaves it) is another file: "replaced", not "modified in place".
TEST(LoaderTest, MappedFileRenamedOverIsReportedReplaced) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "jaxbatch_loader_replaced.bin").string();
  const std::string other = (dir / "jaxbatch_loader_replacement.bin").string();
  Loader loader(testing::TokensDataset(std::vector<int64_t>(20, 3)), MappedFileOptions(path));
  ASSERT_TRUE(loader.Next());
  std::ofstream(other, std::ios::binary) << std::string(4096, 'y');
  std::filesystem::last_write_time(other, std::filesystem::last_write_time(path));
  std::filesystem::rename(other, path);
  const std::string message = testing::ThrownMessage<IoError>([&] {
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(loader.Next());
  });
  EXPECT_NE(message.find(StrCat("Loader: ", path,
                                " changed while the loader reads it: replaced by another file "
                                "(still 4096 bytes)")),
            std::string::npos)
      << message;
  std::filesystem::remove(path);
}

// What the loader says it will yield is what it yields: steps per epoch,
// all steps, and the shapes in first-use order, for every planner, shuffle
// and shard (a shuffled packer's epochs can differ).
TEST(LoaderTest, StepsAndShapesAreWhatTheStreamYields) {
  const auto ds = testing::TokensDataset(testing::RandomLengths(97, 30, 8));
  for (const PlannerOptions& planner : AllPlanners()) {
    for (const ShuffleMode shuffle :
         {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlock}) {
      for (const int64_t shards : {1, 3}) {
        LoaderOptions o = Options(planner, 2, /*epochs=*/3);
        o.schedule.shuffle = shuffle;
        o.schedule.block_size = 16;
        o.schedule.shard_index = shards - 1;
        o.schedule.shard_count = shards;
        Loader loader(ds, o);
        const std::vector<BatchShape> planned = loader.PlannedShapes();
        std::vector<int64_t> steps(3, 0);
        std::vector<BatchShape> shapes;
        while (std::optional<LoadedBatch> batch = loader.Next()) {
          ++steps[static_cast<size_t>(batch->epoch)];
          EXPECT_EQ(batch->packed, std::holds_alternative<PackOptions>(planner));
          if (std::find(shapes.begin(), shapes.end(), batch->shape) == shapes.end()) {
            shapes.push_back(batch->shape);
          }
          // The batch's arrays have its shape.
          EXPECT_EQ(batch->arrays[0].shape[0], batch->shape.rows);
          EXPECT_EQ(batch->arrays[0].shape[1], batch->shape.length);
        }
        SCOPED_TRACE(::testing::Message() << PlannerName(planner) << " shuffle "
                                          << ShuffleModeName(shuffle) << " shards " << shards);
        int64_t total = 0;
        for (int64_t e = 0; e < 3; ++e) {
          EXPECT_EQ(loader.Steps(e), steps[static_cast<size_t>(e)]) << "epoch " << e;
          total += steps[static_cast<size_t>(e)];
        }
        EXPECT_EQ(loader.TotalSteps(), total);
        EXPECT_EQ(planned, shapes);
        EXPECT_TRUE(loader.PlannedShapes().empty());  // Ended: no shape is to come.
      }
    }
  }
  LoaderOptions endless = Options(PadToMaxOptions{.batch_size = 4}, 1, /*epochs=*/0);
  Loader forever(ds, endless);
  EXPECT_TRUE(testing::Contains(
      testing::ThrownMessage<InvalidArgumentError>([&] { forever.TotalSteps(); }), "endless"));
  EXPECT_EQ(forever.Steps(5), 25);
  Loader two(ds, Options(PadToMaxOptions{.batch_size = 4}, 1, 2));
  EXPECT_THROW(two.Steps(2), OutOfRangeError);
}

// A state carries the key of the stream it came from: restoring it into a
// loader of another stream is refused naming what differs, as Python shows it.
TEST(LoaderTest, AStateOfAnotherStreamIsRefusedNamingWhatDiffers) {
  const auto ds = testing::TokensDataset(testing::RandomLengths(60, 20, 3));
  const LoaderOptions o = Options(AutoBucketsOptions{.max_shapes = 3, .batch_size = 4}, 1);
  LoaderState saved;
  {
    Loader loader(ds, o);
    loader.Next();
    saved = loader.state();
  }
  ASSERT_TRUE(saved.key);
  EXPECT_EQ(saved.key->planner,
            "AutoBuckets(max_shapes=3, token_budget=None, batch_size=4, pad_to_multiple=1, "
            "remainder='pad')");
  EXPECT_EQ(saved.key->fingerprint, LayoutFingerprint(*ds));
  const auto refused = [&](const std::shared_ptr<const Dataset>& data, LoaderOptions options,
                           const LoaderState& state) {
    return testing::ThrownMessage<InvalidArgumentError>([&] { Loader(data, options, state); });
  };
  Loader same(ds, o, saved);  // The same stream restores.
  LoaderOptions other = o;
  other.schedule.planner = AutoBucketsOptions{.max_shapes = 4, .batch_size = 4};
  EXPECT_TRUE(testing::Contains(refused(ds, other, saved),
                                "the state was saved with planner AutoBuckets(max_shapes=3"));
  other = o;
  other.schedule.shuffle = ShuffleMode::kNone;
  EXPECT_TRUE(testing::Contains(refused(ds, other, saved),
                                "saved with shuffle='global' but this loader has shuffle='none'"));
  other = o;
  other.schedule.shard_count = 2;
  EXPECT_TRUE(testing::Contains(refused(ds, other, saved),
                                "shard=[0, 1] but this loader has "
                                "shard=[0, 2]"));
  EXPECT_TRUE(testing::Contains(
      refused(testing::TokensDataset(testing::RandomLengths(61, 20, 3)), o, saved),
      "saved for 60 examples but this source has 61"));
  EXPECT_TRUE(testing::Contains(
      refused(testing::TokensDataset(testing::RandomLengths(60, 20, 4)), o, saved),
      "saved for other data (fingerprint"));
  LoaderState unreadable = saved;
  unreadable.key->planner = "Sorted(batch_size=4)";
  EXPECT_TRUE(testing::Contains(refused(ds, o, unreadable), "planner cannot be read"));
  LoaderState future = saved;
  future.key->version = 9;
  EXPECT_TRUE(testing::Contains(refused(ds, o, future), StrCat("expected a state of version ",
                                                               kLoaderStateVersion, ", found 9")));
  // A key an earlier release stored (fields in another order, one left out)
  // names the same planner.
  LoaderState older = saved;
  older.key->planner = "AutoBuckets(batch_size=4, max_shapes=3)";
  Loader restored(ds, o, older);
  EXPECT_EQ(restored.state().key->planner, saved.key->planner);
  // Every state of version 3 on holds its data's fingerprint: one without is
  // refused, not restored onto other data of the same size (as on main); a
  // version-2 state, saved before fingerprints, is checked by its size.
  LoaderState unprinted = saved;
  unprinted.key->fingerprint.reset();
  const auto same_size = testing::TokensDataset(testing::RandomLengths(60, 20, 4));
  EXPECT_EQ(refused(same_size, o, unprinted),
            StrCat("Loader: the state (version ", kLoaderStateVersion,
                   ") has no fingerprint, which every state of its version "
                   "holds; expected a state from Loader::state()"));
  unprinted.key->version = 2;
  Loader checked_by_size(ds, o, unprinted);
}

TEST(LoaderTest, StartStatePastTheEndOrNegativeIsRefused) {
  const auto ds = testing::TokensDataset(std::vector<int64_t>(30, 3));
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 8}, /*threads=*/1, /*epochs=*/2);
  const auto refused = [&](LoaderState state, const std::string& message) {
    state.seed = o.schedule.seed;
    try {
      Loader loader(ds, o, state);
      ADD_FAILURE() << "expected InvalidArgumentError: " << message;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused({.epoch = 0, .step = 4}, "step 4 is past the end of epoch 0, which has 4 steps");
  refused({.epoch = 2, .step = 1}, "position (epoch 2, step 1) is past the end of the stream");
  refused({.epoch = 3}, "expected epoch < 2 (epochs=2) or epoch 2 with step 0");
  refused({.epoch = 0, .step = 0, .dropped = -1}, "the state's dropped must be >= 0, found -1");
  o.epochs = 0;  // forever: an epoch whose counts would overflow int64 is refused
  refused({.epoch = std::numeric_limits<int64_t>::max()}, "past the end of the stream");
  Loader at_end(ds, Options(PadToMaxOptions{.batch_size = 8}, 1, 2),
                LoaderState{.seed = o.schedule.seed, .epoch = 2});
  EXPECT_FALSE(at_end.Next());
  Loader last_step(ds, Options(PadToMaxOptions{.batch_size = 8}, 1, 2),
                   LoaderState{.seed = o.schedule.seed, .epoch = 1, .step = 3});
  std::optional<LoadedBatch> batch = last_step.Next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->step, 3);
  EXPECT_FALSE(last_step.Next());
}

// Data no batch of the planner can hold under too_big / too_long "error" is
// named when the Loader is made, before any thread plans; under "skip" it is
// counted in `skipped` as Plan() counts it, and max_errors ignores it.
TEST(LoaderTest, TooBigOrTooLongIsNamedWhenMadeAndSkippedIsCounted) {
  const auto graphs = GraphsDataset({3, 4, 40, 5, 50});
  LoaderOptions o = Options(GraphBudgetOptions{.nodes = 20, .edges = 30, .graphs = 4}, 1);
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { Loader loader(graphs, o); }),
                       "GraphBudget: graph 2 has 40 nodes and 39 edges, but a batch holds at "
                       "most 19 real nodes"));
  o.schedule.planner =
      GraphBudgetOptions{.nodes = 20, .edges = 30, .graphs = 4, .too_big = TooBig::kSkip};
  o.max_errors = 0;
  Loader skipping(graphs, o);
  Drain(skipping);
  const std::vector<int64_t> nodes = {3, 4, 40, 5, 50};
  const BatchPlan plan = Plan(nodes, o.schedule.planner, {}, std::vector<int64_t>{2, 3, 39, 4, 49});
  ASSERT_EQ(plan.stats.skipped, 2);
  EXPECT_EQ(skipping.state().skipped, 2 * plan.stats.skipped);  // two epochs
  EXPECT_EQ(skipping.state().dropped, 0);
  EXPECT_EQ(skipping.state().examples, 2 * 3);

  const auto tokens = testing::TokensDataset({3, 9, 4, 12});
  for (const auto& [planner, message] : std::vector<std::pair<PlannerOptions, std::string>>{
           {PackOptions{.row_length = 8, .rows_per_batch = 2},
            "Pack: example 1 has length 9, longer than row_length 8"},
           {FixedBucketsOptions{.boundaries = {4, 8}, .batch_size = 2},
            "FixedBuckets: example 1 has length 9, longer than the last boundary 8"},
           {AutoBucketsOptions{.max_shapes = 2, .token_budget = 10},
            "AutoBuckets: token_budget 10 is smaller than the longest example (example 3"}}) {
    EXPECT_TRUE(Contains(
        ThrownMessage<InvalidArgumentError>([&] { Loader loader(tokens, Options(planner, 1)); }),
        message));
  }
}

// A stream ended by an error has no shape to come, as one at its end.
TEST(LoaderTest, PlannedShapesAreNoneOnceTheStreamEndedAtAnError) {
  const auto ds = GraphsDataset({3, 4, 5}, {1});
  LoaderOptions o = Options(GraphBudgetOptions{.nodes = 20, .edges = 30, .graphs = 4}, 1);
  Loader loader(ds, o);
  EXPECT_FALSE(loader.PlannedShapes().empty());
  EXPECT_THROW(loader.Next(), InvalidArgumentError);  // graph 1 is bad, on_error raise
  EXPECT_TRUE(loader.PlannedShapes().empty());
  EXPECT_FALSE(loader.Next().has_value());
}

// Option errors start with the call the user wrote (jb.run checks the
// options of the Loader it opens, before it makes its folder).
TEST(LoaderTest, OptionErrorsNameTheCaller) {
  LoaderOptions o = Options(PadToMaxOptions{.batch_size = 4}, 1);
  o.num_threads = -1;
  EXPECT_TRUE(
      Contains(ThrownMessage<InvalidArgumentError>([&] { ValidateLoaderOptions(o, "jb.run"); }),
               "jb.run: num_threads must be >= 1 (or 0 for automatic), found -1"));
  o.num_threads = 1;
  o.schedule.block_size = 0;
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { ValidateLoaderOptions(o); }),
                       "Loader: block_size must be >= 1, found 0"));
}

}  // namespace
}  // namespace jaxbatch
