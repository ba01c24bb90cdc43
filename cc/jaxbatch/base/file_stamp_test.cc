#include "jaxbatch/base/file_stamp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

namespace fs = std::filesystem;

// File times come from a coarse clock (a few ms): a change within the same
// tick as the stamp would keep its times.
void NextClockTick() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

class FileStampTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           StrCat("jaxbatch_file_stamp_", ::testing::UnitTest::GetInstance()->random_seed(), "_",
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "data.bin").string();
    Write(path_, std::string(4096, 'x'));
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  FileStamp Stamp() const {
    const std::optional<FileStamp> stamp = StampFile(path_);
    EXPECT_TRUE(stamp.has_value());
    return stamp.value_or(FileStamp{});
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(FileStampTest, AnUnchangedFileKeepsItsStamp) {
  const FileStamp was = Stamp();
  EXPECT_EQ(was.size, 4096);
  EXPECT_NE(was.inode, 0u);
  NextClockTick();
  std::ifstream(path_).get();  // Reading changes nothing.
  EXPECT_EQ(Stamp(), was);
  EXPECT_EQ(DescribeChange(was, Stamp()), "");
}

// `cp -p`, `rsync -t` and `tar x` restore the modification time; a rename
// over the file keeps the size: neither may pass for the same file.
TEST_F(FileStampTest, AReplacementOfEqualSizeAndRestoredTimeIsReplaced) {
  const FileStamp was = Stamp();
  const auto modified = fs::last_write_time(path_);
  NextClockTick();
  const std::string other = (dir_ / "other.bin").string();
  Write(other, std::string(4096, 'y'));
  fs::last_write_time(other, modified);
  fs::rename(other, path_);
  const FileStamp now = Stamp();
  EXPECT_EQ(now.size, was.size);
  EXPECT_EQ(now.modified_ns, was.modified_ns);
  EXPECT_FALSE(now.SameFile(was));
  EXPECT_EQ(DescribeChange(was, now), "replaced by another file (still 4096 bytes)");
}

TEST_F(FileStampTest, AnInPlaceRewriteWithItsTimeRestoredIsModifiedInPlace) {
  const FileStamp was = Stamp();
  const auto modified = fs::last_write_time(path_);
  NextClockTick();
  Write(path_, std::string(4096, 'z'));  // As `cp -p` does: the same inode, rewritten.
  fs::last_write_time(path_, modified);
  const FileStamp now = Stamp();
  EXPECT_TRUE(now.SameFile(was));
  EXPECT_EQ(now.modified_ns, was.modified_ns);
  EXPECT_NE(now.changed_ns, was.changed_ns);
  EXPECT_EQ(DescribeChange(was, now), "modified in place (still 4096 bytes)");
  NextClockTick();
  fs::resize_file(path_, 100);
  EXPECT_EQ(DescribeChange(was, Stamp()), "modified in place (now 100 bytes, was 4096)");
}

// A chmod changes no byte but moves the status-change time: reported as a
// change, the safe side (see the header).
TEST_F(FileStampTest, AChmodCountsAsAChange) {
  const FileStamp was = Stamp();
  NextClockTick();
  fs::permissions(path_, fs::perms::owner_read, fs::perm_options::remove);
  EXPECT_EQ(DescribeChange(was, Stamp()), "modified in place (still 4096 bytes)");
}

TEST_F(FileStampTest, AMissingFileHasNoStamp) {
  EXPECT_FALSE(StampFile((dir_ / "absent").string()).has_value());
  EXPECT_FALSE(StampFile(path_ + "/below-a-file").has_value());  // ENOTDIR
}

}  // namespace
}  // namespace jaxbatch
