#include "jaxbatch/load/chunk_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using std::chrono::milliseconds;

// Chunk c of the test: c + 1 examples of length 1 whose value is c * 1000 + k.
std::shared_ptr<const Dataset> Chunk(int64_t c) {
  std::vector<int64_t> lengths(static_cast<size_t>(c + 1), 1);
  return testing::TokensDataset(lengths);
}

// A feeder thread serving every request until the cache closes, recording
// the bytes held at each read (which must stay within the capacity).
struct Feeder {
  ChunkCache& cache;
  std::vector<int64_t> reads;
  int64_t most_held = 0;
  std::thread thread;
  explicit Feeder(ChunkCache& c) : cache(c) {
    thread = std::thread([this] {
      while (true) {
        const int64_t chunk = cache.NextRequest(milliseconds(5));
        if (chunk == ChunkCache::kClosed) return;
        if (chunk == ChunkCache::kNoRequest) continue;
        reads.push_back(chunk);
        most_held = std::max(most_held, cache.bytes_held());
        cache.Provide(chunk, Chunk(chunk));
      }
    });
  }
  ~Feeder() {
    cache.Close();
    thread.join();
  }
};

TEST(ChunkCacheTest, RefusesAChunkLargerThanTheCapacity) {
  try {
    ChunkCache cache({10, 30, 10}, 20);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 1 holds 30 bytes"), std::string::npos) << e.what();
  }
}

TEST(ChunkCacheTest, EveryChunkArrivesOnceWithItsData) {
  ChunkCache cache(std::vector<int64_t>(6, 10), 20);
  Feeder feeder(cache);
  std::map<int64_t, int64_t> seen;  // chunk -> its examples
  const std::vector<int64_t> wanted = {4, 0, 5, 2};
  cache.ForEach(wanted, 0, [&](int64_t c, const Dataset& data) {
    EXPECT_EQ(seen.count(c), 0u);
    seen[c] = data.num_examples();
  });
  EXPECT_EQ(seen, (std::map<int64_t, int64_t>{{0, 1}, {2, 3}, {4, 5}, {5, 6}}));
}

TEST(ChunkCacheTest, ReusesCachedChunksAndEvictsTheLeastRecentlyUsed) {
  ChunkCache cache(std::vector<int64_t>(4, 10), 20);  // Holds two chunks.
  Feeder feeder(cache);
  auto use = [&](std::vector<int64_t> chunks) {
    cache.ForEach(chunks, 0, [](int64_t, const Dataset&) {});
  };
  use({0});
  use({1});
  use({0});  // Cached: no read.
  EXPECT_EQ(cache.reads(), 2);
  use({2});  // Evicts 1, the least recently used.
  use({0});  // Still cached.
  EXPECT_EQ(cache.reads(), 3);
  use({1});  // Read again.
  EXPECT_EQ(cache.reads(), 4);
  EXPECT_LE(cache.peak_bytes_held(), 20);
}

TEST(ChunkCacheTest, ManyWorkersManyChunksStayWithinTheCapacity) {
  // 8 workers each want 5 of 12 chunks while the cache holds 3: every worker
  // gets all of its chunks and the bytes held never pass the capacity.
  ChunkCache cache(std::vector<int64_t>(12, 100), 300);
  Feeder feeder(cache);
  std::atomic<int64_t> uses{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 8; ++w) {
    workers.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        std::vector<int64_t> chunks;
        for (int k = 0; k < 5; ++k) chunks.push_back((w * 3 + round + k * 2) % 12);
        std::sort(chunks.begin(), chunks.end());
        chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
        const auto expected = static_cast<int64_t>(chunks.size());
        int64_t got = 0;
        cache.ForEach(chunks, round * 8 + w, [&](int64_t c, const Dataset& data) {
          EXPECT_EQ(data.num_examples(), c + 1);
          ++got;
        });
        EXPECT_EQ(got, expected);
        uses += got;
      }
    });
  }
  for (std::thread& t : workers) t.join();
  EXPECT_GT(uses.load(), 0);
  EXPECT_LE(cache.peak_bytes_held(), 300);
  EXPECT_LE(feeder.most_held, 300);
}

TEST(ChunkCacheTest, FailureReachesWaitingWorkersWithItsMessage) {
  ChunkCache cache(std::vector<int64_t>(3, 10), 30);
  std::thread failer([&] {
    while (cache.NextRequest(milliseconds(5)) == ChunkCache::kNoRequest) {
    }
    cache.Fail("row group 1 of data.parquet: corrupt page");
  });
  try {
    cache.ForEach(std::vector<int64_t>{1}, 0, [](int64_t, const Dataset&) {});
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "row group 1 of data.parquet: corrupt page");
  }
  failer.join();
  EXPECT_EQ(cache.NextRequest(milliseconds(1)), ChunkCache::kClosed);
  EXPECT_THROW(cache.ForEach(std::vector<int64_t>{0}, 0, [](int64_t, const Dataset&) {}), IoError);
}

TEST(ChunkCacheTest, AFailedChunkFailsOnlyWhoNeedsIt) {
  ChunkCache cache(std::vector<int64_t>(3, 10), 30);
  std::thread feeder([&] {
    while (true) {
      const int64_t c = cache.NextRequest(milliseconds(5));
      if (c == ChunkCache::kClosed) return;
      if (c == 1) cache.Fail(1, "row group 1: corrupt page");
      if (c == 0 || c == 2) cache.Provide(c, Chunk(c));
    }
  });
  try {
    cache.ForEach(std::vector<int64_t>{0, 1}, 0, [](int64_t, const Dataset&) {});
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "row group 1: corrupt page");
  }
  int64_t used = 0;
  cache.ForEach(std::vector<int64_t>{2, 0}, 1, [&](int64_t, const Dataset&) { ++used; });
  EXPECT_EQ(used, 2);
  EXPECT_THROW(cache.ForEach(std::vector<int64_t>{1}, 2, [](int64_t, const Dataset&) {}), IoError);
  cache.Close();
  feeder.join();
}

TEST(ChunkCacheTest, AnErrorInUseReleasesTheChunks) {
  ChunkCache cache(std::vector<int64_t>(2, 10), 10);  // Holds one chunk.
  Feeder feeder(cache);
  EXPECT_THROW(cache.ForEach(std::vector<int64_t>{0, 1}, 0,
                             [](int64_t, const Dataset&) { throw InvalidArgumentError("x"); }),
               InvalidArgumentError);
  // Neither chunk is still wanted: the other chunk can load in their place.
  int64_t used = 0;
  cache.ForEach(std::vector<int64_t>{1, 0}, 0, [&](int64_t, const Dataset&) { ++used; });
  EXPECT_EQ(used, 2);
}

TEST(ChunkCacheTest, CloseWakesAWaitingWorker) {
  ChunkCache cache(std::vector<int64_t>(1, 10), 10);
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    cache.Close();
  });
  EXPECT_THROW(cache.ForEach(std::vector<int64_t>{0}, 0, [](int64_t, const Dataset&) {}), Error);
  closer.join();
}

// The interleaving that hung streaming loaders' close: Close() (or
// Fail(message)) lands while the worker uses one chunk, outside the lock, and
// the feeder then ends, so the chunk the worker still needs never comes. The
// worker must see the close before it waits for that chunk, not sleep
// through a notification that came while nobody waited.
TEST(ChunkCacheTest, CloseOrFailWhileAWorkerUsesAChunkEndsItsWait) {
  for (const bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "Fail(message)" : "Close()");
    ChunkCache cache(std::vector<int64_t>(2, 10), 20);
    std::future<std::string> worker = std::async(std::launch::async, [&]() -> std::string {
      try {
        cache.ForEach(std::vector<int64_t>{0, 1}, 0, [&](int64_t chunk, const Dataset&) {
          EXPECT_EQ(chunk, 0);
          // From another thread, finished before this use returns.
          std::thread([&] { fail ? cache.Fail("the reader stopped") : cache.Close(); }).join();
        });
      } catch (const IoError& e) {
        return StrCat("IoError: ", e.what());
      } catch (const Error& e) {
        return StrCat("Error: ", e.what());
      }
      return "returned";
    });
    // The feeder reads chunk 0 only (the most urgent: same priority, lower
    // index), then is gone.
    ASSERT_EQ(cache.NextRequest(milliseconds(60000)), 0);
    cache.Provide(0, Chunk(0));
    const std::string outcome = testing::ReturnsWithin(
        std::chrono::seconds(60), "ChunkCache::ForEach after a close during use",
        [&] { return worker.get(); });
    EXPECT_EQ(outcome, fail ? "IoError: the reader stopped" : "Error: ChunkCache: closed");
    EXPECT_EQ(cache.NextRequest(milliseconds(1)), ChunkCache::kClosed);
  }
}

TEST(ChunkCacheTest, RefusesUnknownChunksAndUnrequestedProvides) {
  ChunkCache cache(std::vector<int64_t>(2, 10), 10);
  EXPECT_THROW(cache.ForEach(std::vector<int64_t>{2}, 0, [](int64_t, const Dataset&) {}),
               OutOfRangeError);
  EXPECT_THROW(cache.Provide(0, Chunk(0)), InvalidArgumentError);
  EXPECT_EQ(cache.NextRequest(milliseconds(1)), ChunkCache::kNoRequest);
}

}  // namespace
}  // namespace jaxbatch
