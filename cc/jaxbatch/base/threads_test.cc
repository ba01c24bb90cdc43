// Tests for base/threads: thread counts are bounded, and a thread the system
// cannot start becomes an exception with the started threads joined.
#include "jaxbatch/base/threads.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// Address-space limits and sanitizers' shadow memory do not mix.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kCanLimitAddressSpace = false;
#else
constexpr bool kCanLimitAddressSpace = true;
#endif

TEST(ThreadsTest, StartsEveryThreadWithItsIndex) {
  std::vector<std::atomic<int>> ran(16);
  std::vector<std::thread> threads =
      StartThreads(16, [&](int64_t t) { ++ran[static_cast<size_t>(t)]; }, [] {}, "test");
  ASSERT_EQ(threads.size(), 16u);
  for (std::thread& t : threads) t.join();
  for (const auto& r : ran) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadsTest, CountAboveTheMaximumIsRefusedNamingTheOption) {
  EXPECT_NO_THROW(CheckThreadCount(kMaxThreads, "Loader: num_threads"));
  const std::string msg =
      ThrownMessage<InvalidArgumentError>([] { CheckThreadCount(1000000, "Loader: num_threads"); });
  EXPECT_TRUE(Contains(msg, "Loader: num_threads must be at most 1024 threads, found 1000000"))
      << msg;
}

// Runs in a child process: under a 1 GiB address space, 1000 threads of
// 8 MiB stacks cannot all start. The started ones block until stop() and
// must be joined before the Error; exit code 0 means all of that held.
void StartTooManyThreadsUnderALimit() {
  const rlimit limit{1u << 30, 1u << 30};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::exit(2);
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::atomic<int64_t> running{0};
  std::atomic<int64_t> finished{0};
  try {
    std::vector<std::thread> threads = StartThreads(
        1000,
        [&](int64_t) {
          ++running;
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop; });
          ++finished;
        },
        [&] {
          std::lock_guard<std::mutex> lock(mu);
          stop = true;
          cv.notify_all();
        },
        "test: num_threads");
    std::exit(3);  // All 1000 started: the limit did not bite.
  } catch (const Error& e) {
    const std::string msg = e.what();
    const bool named = Contains(msg, "test: num_threads=1000") && Contains(msg, "were stopped");
    std::exit(named && running.load() > 0 && finished.load() == running.load() ? 0 : 4);
  }
}

TEST(ThreadsDeathTest, ThreadThatCannotStartThrowsWithTheOthersJoined) {
  if (!kCanLimitAddressSpace) GTEST_SKIP() << "sanitizer build";
  EXPECT_EXIT(StartTooManyThreadsUnderALimit(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace jaxbatch
