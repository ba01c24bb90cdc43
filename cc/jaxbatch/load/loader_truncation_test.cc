// A Loader whose data is memory-mapped files truncated while it reads them:
// every run ends with the reference's batches or an IoError naming the
// file, never a signal (base/mapped_read.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/mapped_read_testing.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/test_util.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::MappedTestFile;

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// One int32 column "tokens" whose values (and offsets, when `map_offsets`)
// are files mapped the way np.load(mmap_mode="r") maps them.
struct MappedTokens {
  std::shared_ptr<MappedTestFile> values;
  std::shared_ptr<MappedTestFile> offsets;  // null: in memory
  std::shared_ptr<const Dataset> dataset;
};

MappedTokens MakeMappedTokens(const std::vector<int64_t>& lengths, bool map_offsets,
                              const std::string& name) {
  std::vector<int32_t> values;
  std::vector<int64_t> offsets = {0};
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (int64_t k = 0; k < lengths[i]; ++k) values.push_back(static_cast<int32_t>(i * 1000 + k));
    offsets.push_back(static_cast<int64_t>(values.size()));
  }
  MappedTokens out;
  out.values = std::make_shared<MappedTestFile>(name + ".values.bin", Bytes(values));
  auto in_memory = std::make_shared<std::vector<int64_t>>(offsets);
  const int64_t* offset_data = in_memory->data();
  if (map_offsets) {
    out.offsets = std::make_shared<MappedTestFile>(name + ".offsets.bin", Bytes(offsets));
    offset_data = reinterpret_cast<const int64_t*>(out.offsets->data());
  }
  auto owner =
      std::make_shared<std::tuple<std::shared_ptr<MappedTestFile>, std::shared_ptr<MappedTestFile>,
                                  decltype(in_memory)>>(out.values, out.offsets, in_memory);
  out.dataset = std::make_shared<const Dataset>(std::vector<RaggedColumn>{RaggedColumn::Ragged(
      "tokens", DType::kInt32, {}, out.values->data(), static_cast<int64_t>(values.size()),
      offset_data, static_cast<int64_t>(lengths.size()), owner)});
  return out;
}

LoaderOptions Options(int64_t threads) {
  LoaderOptions o;
  o.schedule.planner = PadToMaxOptions{.batch_size = 32};
  o.schedule.shuffle = ShuffleMode::kNone;
  o.num_threads = threads;
  o.prefetch = 2;
  return o;
}

// A file the loader does not know of (no stamp to check): the first read
// past its end is the error, from the handler, naming the file.
TEST(LoaderTruncationTest, AnUnlistedFileTruncatedUnderTheLoaderIsAnIoErrorNamingIt) {
  for (const int64_t threads : {1, 2}) {
    const MappedTokens data =
        MakeMappedTokens(testing::RandomLengths(600, 64, 3), false, "jaxbatch_unlisted");
    data.values->Truncate(0);
    Loader loader(data.dataset, Options(threads));
    const std::string message = testing::ThrownMessage<IoError>([&] { testing::Drain(loader); });
    EXPECT_TRUE(Contains(message, StrCat("Loader: ", data.values->path(), " was truncated")))
        << threads << " threads: " << message;
  }
}

// Offsets read when the loader starts (lengths, bad records) fail it there.
TEST(LoaderTruncationTest, OffsetsTruncatedBeforeTheLoaderStartsFailItsConstruction) {
  const MappedTokens data =
      MakeMappedTokens(testing::RandomLengths(3000, 8, 4), true, "jaxbatch_offsets");
  data.offsets->Truncate(0);
  const std::string message =
      testing::ThrownMessage<IoError>([&] { Loader loader(data.dataset, Options(2)); });
  EXPECT_TRUE(Contains(message, StrCat("Loader: ", data.offsets->path(), " was truncated")))
      << message;
}

// A batch large enough to be filled by a pool of threads: their faults
// count in the caller's scope, and collate names the file.
TEST(LoaderTruncationTest, CollationPoolThreadsReadingATruncatedFileNameIt) {
  const std::vector<int64_t> lengths = testing::RandomLengths(400, 64, 7);
  const MappedTokens data = MakeMappedTokens(lengths, false, "jaxbatch_pool");
  BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 400});
  plan.length_column = "tokens";
  CollateOptions pool;
  pool.num_threads = 3;
  pool.min_bytes_per_thread = 1;
  data.values->Truncate(data.values->size() / 3);
  const std::string message =
      testing::ThrownMessage<IoError>([&] { Collate(*data.dataset, plan, 0, pool); });
  EXPECT_TRUE(Contains(message, StrCat("collate: ", data.values->path(), " was truncated")))
      << message;
}

// Values or offsets truncated to a random size at a random moment while
// 1 or 2 workers read them: each run yields the reference's batches up to
// where it stops, and stops only at its end or with an IoError naming the
// truncated file.
TEST(LoaderTruncationTest, TruncatedAtRandomMomentsEveryRunEndsWellOrNamesTheFile) {
  constexpr int kTrials = 16;
  const std::vector<int64_t> lengths = testing::RandomLengths(3000, 96, 5);
  std::mt19937 rng(6);
  for (const int64_t threads : {1, 2}) {
    std::vector<std::string> reference;
    std::chrono::nanoseconds took{};
    {
      const MappedTokens data = MakeMappedTokens(lengths, true, "jaxbatch_reference");
      Loader loader(data.dataset, Options(threads));
      const auto start = std::chrono::steady_clock::now();
      reference = testing::Drain(loader);
      took = std::chrono::steady_clock::now() - start;
    }
    int errors = 0;
    for (int trial = 0; trial < kTrials; ++trial) {
      const MappedTokens data = MakeMappedTokens(lengths, true, "jaxbatch_truncated");
      const MappedTestFile& victim = trial % 2 == 0 ? *data.values : *data.offsets;
      const auto delay = std::chrono::nanoseconds(
          std::uniform_int_distribution<int64_t>(0, took.count() * 13 / 10)(rng));
      const int64_t size = std::uniform_int_distribution<int64_t>(0, victim.size() - 1)(rng);
      LoaderOptions options = Options(threads);
      options.mapped_files = {data.values->path(), data.offsets->path()};
      Loader loader(data.dataset, options);
      std::thread truncate([&] {
        std::this_thread::sleep_for(delay);
        victim.Truncate(size);
      });
      std::vector<std::string> batches;
      std::string error;
      try {
        while (std::optional<LoadedBatch> batch = loader.Next()) {
          batches.push_back(testing::Fingerprint(*batch));
        }
      } catch (const IoError& e) {
        error = e.what();
      }
      truncate.join();
      const std::string where = StrCat(threads, " threads, trial ", trial);
      ASSERT_LE(batches.size(), reference.size()) << where;
      for (size_t b = 0; b < batches.size(); ++b) {
        ASSERT_EQ(batches[b], reference[b]) << where << ": batch " << b;
      }
      if (error.empty()) {
        EXPECT_EQ(batches.size(), reference.size()) << where;
      } else {
        ++errors;
        EXPECT_TRUE(Contains(error, victim.path())) << where << ": " << error;
      }
    }
    EXPECT_GT(errors, 0) << threads << " threads: no truncation landed while the loader read";
  }
}

}  // namespace
}  // namespace jaxbatch
