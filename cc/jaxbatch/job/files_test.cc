#include "jaxbatch/job/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/hash.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::ThrownMessage;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("jaxbatch_files_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

TEST_F(FilesTest, WriteFileAtomicReplacesWholeFiles) {
  const std::string target = (dir_ / "part-000000.bin").string();
  const std::vector<uint8_t> first = {1, 2, 3}, second = {9, 8, 7, 6};
  WriteFileAtomic(target, first);
  WriteFileAtomic(target, second);
  EXPECT_EQ(Read(target), std::string("\x09\x08\x07\x06"));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(Contains(entry.path().filename().string(), ".tmp")) << entry.path();
  }
  const std::string bad = (dir_ / "missing" / "x.bin").string();
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { WriteFileAtomic(bad, first); }), "missing"));
}

// Whatever sits where a temporary could go (a link to a file of the user's)
// is never written through: every temporary is created exclusively.
TEST_F(FilesTest, WriteFileAtomicNeverWritesThroughALink) {
  const fs::path precious = dir_ / "precious.txt";
  std::ofstream(precious) << "keep me";
  const std::string prefix = AtomicTempPrefix("out.bin");
  EXPECT_EQ(prefix, ".out.bin.tmp-");
  for (int i = 0; i < 4; ++i) {
    fs::create_symlink(precious,
                       dir_ / (prefix + std::to_string(::getpid()) + "-" + std::to_string(i)));
  }
  WriteFileAtomic((dir_ / "out.bin").string(), std::vector<uint8_t>{42});
  EXPECT_EQ(Read(precious), "keep me");
  EXPECT_EQ(Read(dir_ / "out.bin"), "\x2a");
}

TEST_F(FilesTest, ReadOwnedFileRefusesLinksAndOtherKinds) {
  const fs::path file = dir_ / "part.bin";
  std::ofstream(file, std::ios::binary) << std::string("a\0b", 3);
  EXPECT_EQ(ReadOwnedFile(file.string()), std::string("a\0b", 3));
  const std::string contents = ReadOwnedFile(file.string());
  EXPECT_EQ(HashFileContents(contents.data(), contents.size()), HashFile(file.string()));
  fs::create_symlink(file, dir_ / "link.bin");
  std::string message =
      ThrownMessage<IoError>([&] { ReadOwnedFile((dir_ / "link.bin").string()); });
  EXPECT_TRUE(Contains(message, "symbolic link")) << message;
  message = ThrownMessage<IoError>([&] { ReadOwnedFile(dir_.string()); });
  EXPECT_TRUE(Contains(message, "regular file")) << message;
  message = ThrownMessage<IoError>([&] { ReadOwnedFile((dir_ / "absent").string()); });
  EXPECT_TRUE(Contains(message, "absent")) << message;
}

TEST_F(FilesTest, PublishFileOnceKeepsTheFirstWritersFile) {
  const std::string path = (dir_ / "part-000003.parquet").string();
  EXPECT_TRUE(PublishFileOnce(path, std::vector<uint8_t>{1, 2, 3}));
  EXPECT_FALSE(PublishFileOnce(path, std::vector<uint8_t>{9}));
  EXPECT_EQ(Read(path), "\x01\x02\x03");
  // Nothing but the file: neither writer left its temporary behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FilesTest, PublishFileOnceHasOneWinnerAmongRacingWriters) {
  // Writers of one deterministic name (a retried unit and its duplicate):
  // exactly one creates it, whole, with its own bytes.
  constexpr int kWriters = 8;
  const std::string path = (dir_ / "unit.bin").string();
  std::vector<int> won(kWriters, 0);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const std::vector<uint8_t> bytes(4096, static_cast<uint8_t>('a' + w));
      won[static_cast<size_t>(w)] = PublishFileOnce(path, bytes) ? 1 : 0;
    });
  }
  for (std::thread& t : writers) t.join();
  int winners = 0, winner = -1;
  for (int w = 0; w < kWriters; ++w) {
    if (won[static_cast<size_t>(w)]) winners++, winner = w;
  }
  ASSERT_EQ(winners, 1);
  EXPECT_EQ(Read(path), std::string(4096, static_cast<char>('a' + winner)));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FilesTest, PublishFileOnceNeverWritesThroughALink) {
  const fs::path precious = dir_ / "precious.txt";
  std::ofstream(precious) << "keep me";
  fs::create_symlink(precious, dir_ / "out.bin");
  EXPECT_FALSE(PublishFileOnce((dir_ / "out.bin").string(), std::vector<uint8_t>{42}));
  EXPECT_EQ(Read(precious), "keep me");
  const std::string message = ThrownMessage<IoError>(
      [&] { PublishFileOnce((dir_ / "absent" / "x.bin").string(), std::vector<uint8_t>{1}); });
  EXPECT_TRUE(Contains(message, "absent")) << message;
}

}  // namespace
}  // namespace jaxbatch
