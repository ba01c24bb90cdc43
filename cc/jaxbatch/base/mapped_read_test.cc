#include "jaxbatch/base/mapped_read.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/mapped_read_testing.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::MappedTestFile;
using testing::PageBytes;
using testing::PatternBytes;
using testing::ReadInOrder;

// 8 pages of pattern bytes, truncated to 2.5 pages: pages 3 to 7 lie past
// the end (a read faults), the second half of page 2 reads as zeros.
constexpr int64_t kPages = 8;
int64_t TruncatedSize() { return 5 * PageBytes() / 2; }

TEST(MappedReadTest, AReadPastATruncatedEndIsAnIoErrorNamingTheFile) {
  MappedTestFile file("jaxbatch_mapped_read_error.bin", PatternBytes(kPages * PageBytes()));
  file.Truncate(TruncatedSize());
  const std::string message = testing::ThrownMessage<IoError>(
      [&] { GuardMappedReads("reader", [&] { return ReadInOrder(file.data(), file.size()); }); });
  EXPECT_TRUE(Contains(message, StrCat("reader: ", file.path(),
                                       " was truncated while it was "
                                       "read (a read of its memory map at byte ",
                                       3 * PageBytes(), " of the file")))
      << message;
  EXPECT_TRUE(Contains(message, "write new data to a new path")) << message;
}

// The read completes: the bytes before the new end as they were, zeros past
// it; one fault replaces the whole tail, and the faults stay recorded.
TEST(MappedReadTest, TheLostBytesReadAsZerosAndTheFaultIsSticky) {
  const std::vector<uint8_t> content = PatternBytes(kPages * PageBytes());
  MappedTestFile file("jaxbatch_mapped_read_zeros.bin", content);
  file.Truncate(TruncatedSize());
  MappedReadFaults faults;
  std::vector<uint8_t> read;
  {
    MappedReadScope scope(&faults);
    read = ReadInOrder(file.data(), file.size());
  }
  std::vector<uint8_t> expected(content.begin(), content.begin() + TruncatedSize());
  expected.resize(content.size(), 0);
  EXPECT_EQ(read, expected);
  EXPECT_EQ(faults.count(), 1);
  {
    MappedReadScope again(&faults);
    read = ReadInOrder(file.data(), file.size());  // Zeros now, with no fault.
  }
  EXPECT_EQ(read, expected);
  EXPECT_EQ(faults.count(), 1);
  EXPECT_TRUE(faults.faulted());
}

// Why the Loader re-checks its files' stamps after each batch: inside the
// last page the kernel gives zeros for bytes past the end, and no fault.
TEST(MappedReadTest, AReadInsideTheLastPageFindsZerosWithoutAFault) {
  MappedTestFile file("jaxbatch_mapped_read_last_page.bin", PatternBytes(kPages * PageBytes()));
  file.Truncate(TruncatedSize());
  MappedReadFaults faults;
  MappedReadScope scope(&faults);
  const std::vector<uint8_t> page = ReadInOrder(file.data() + 2 * PageBytes(), PageBytes());
  EXPECT_EQ(page[static_cast<size_t>(PageBytes() / 2 - 1)],
            testing::PatternByte(TruncatedSize() - 1));
  EXPECT_EQ(page[static_cast<size_t>(PageBytes() / 2)], 0);
  EXPECT_FALSE(faults.faulted());
}

// A thread that reads on a scope's behalf (a collation pool's) records there.
TEST(MappedReadTest, AHelperThreadRecordsIntoItsParentsFaults) {
  MappedTestFile file("jaxbatch_mapped_read_helper.bin", PatternBytes(kPages * PageBytes()));
  file.Truncate(TruncatedSize());
  MappedReadScope scope;
  MappedReadFaults* parent = MappedReadScope::Current();
  ASSERT_EQ(parent, &scope.faults());
  std::thread helper([&] {
    std::optional<MappedReadScope> own;
    if (parent != nullptr) own.emplace(parent);
    ReadInOrder(file.data(), file.size());
  });
  helper.join();
  EXPECT_TRUE(scope.faults().faulted());
  EXPECT_TRUE(Contains(scope.faults().Message("pool"), file.path()));
}

TEST(MappedReadTest, ANestedScopeRecordsIntoTheOuterOne) {
  MappedTestFile file("jaxbatch_mapped_read_nested.bin", PatternBytes(kPages * PageBytes()));
  file.Truncate(TruncatedSize());
  MappedReadFaults outer;
  {
    MappedReadScope scope(&outer);
    EXPECT_THROW(GuardMappedReads("inner", [&] { return ReadInOrder(file.data(), file.size()); }),
                 IoError);
  }
  EXPECT_TRUE(outer.faulted());
  EXPECT_EQ(MappedReadScope::Current(), nullptr);
}

// Readers of different files on many threads at once, each in a scope of
// its own: every one sees its own file's fault, and only its own.
TEST(MappedReadTest, ThreadsInScopesOfTheirOwnRecordTheirOwnFaults) {
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<MappedTestFile>> files;
  for (int t = 0; t < kThreads; ++t) {
    files.push_back(std::make_unique<MappedTestFile>(
        StrCat("jaxbatch_mapped_read_many_", t, ".bin"), PatternBytes(kPages * PageBytes())));
    if (t % 2 == 0) files.back()->Truncate(TruncatedSize());
  }
  std::vector<std::string> messages(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      MappedReadScope scope;
      ReadInOrder(files[t]->data(), files[t]->size());
      if (scope.faults().faulted()) messages[t] = scope.faults().Message("thread");
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(Contains(messages[t], files[t]->path()), t % 2 == 0) << t << ": " << messages[t];
  }
}

// The death tests run in a fresh process (threadsafe style re-executes the
// binary), where no scope has installed the handler yet.
constexpr int kFaultExit = 42;  // the handler installed before saw a fault
constexpr int kSentExit = 43;   // ... a SIGBUS sent by kill or raise

void ExitOnSigbus(int, siginfo_t* info, void*) {
  _exit(info->si_code == BUS_ADRERR ? kFaultExit : kSentExit);
}

void InstallExitOnSigbus() {
  struct sigaction action = {};
  action.sa_sigaction = ExitOnSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

void ReadPastTheEndOutsideAScope() {
  MappedTestFile file("jaxbatch_mapped_read_death.bin", PatternBytes(kPages * PageBytes()));
  {
    MappedReadScope installs_the_handler;
  }
  file.Truncate(TruncatedSize());
  ReadInOrder(file.data(), file.size());
}

TEST(MappedReadDeathTest, AFaultOutsideAScopeGoesToTheHandlerInstalledBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallExitOnSigbus();
        ReadPastTheEndOutsideAScope();
      },
      ::testing::ExitedWithCode(kFaultExit), "");
}

TEST(MappedReadDeathTest, ASigbusSentInsideAScopeGoesToTheHandlerInstalledBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallExitOnSigbus();
        MappedReadScope scope;
        raise(SIGBUS);
      },
      ::testing::ExitedWithCode(kSentExit), "");
}

// With no handler before, SIGBUS's default action: the process dies (under
// a sanitizer, whose own handler was there before, it reports and exits).
bool DiedOfTheFault(int status) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#else
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
}

TEST(MappedReadDeathTest, AFaultOutsideAScopeStillKillsByDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ReadPastTheEndOutsideAScope(), DiedOfTheFault, "");
}

}  // namespace
}  // namespace jaxbatch
