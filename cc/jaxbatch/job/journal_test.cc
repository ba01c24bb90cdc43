#include "jaxbatch/job/journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::ThrownMessage;

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("jaxbatch_journal_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "journal.jbj").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void SetBytes(const std::string& bytes) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }

  fs::path dir_;
  std::string path_;
};

const std::vector<std::string> kPayloads = {"first", "", std::string(1000, 'x'), "{\"a\": 1}"};

TEST_F(JournalTest, RecordsSurviveReopening) {
  {
    Journal journal(path_);
    EXPECT_TRUE(journal.records().empty());
    for (const std::string& p : kPayloads) journal.Append(p);
    EXPECT_EQ(journal.records(), kPayloads);
  }
  Journal journal(path_);
  EXPECT_EQ(journal.records(), kPayloads);
  EXPECT_EQ(journal.discarded_bytes(), 0);
  journal.Append("more");
  EXPECT_EQ(journal.records().back(), "more");
}

// A crash can stop an append after any byte: every prefix of the file must
// open as the records that were whole, and the next append must work.
TEST_F(JournalTest, EveryTornTailIsCutOff) {
  {
    Journal journal(path_);
    for (const std::string& p : kPayloads) journal.Append(p);
  }
  const std::string whole = Bytes();
  std::vector<size_t> ends;
  size_t offset = 0;
  for (const std::string& p : kPayloads) ends.push_back(offset += kJournalHeaderBytes + p.size());
  for (size_t cut = 0; cut <= whole.size(); ++cut) {
    SetBytes(whole.substr(0, cut));
    size_t whole_records = 0;
    while (whole_records < ends.size() && ends[whole_records] <= cut) ++whole_records;
    Journal journal(path_);
    ASSERT_EQ(journal.records().size(), whole_records) << "cut at " << cut;
    const size_t kept = whole_records == 0 ? 0 : ends[whole_records - 1];
    EXPECT_EQ(journal.discarded_bytes(), static_cast<int64_t>(cut - kept));
    EXPECT_EQ(journal.discarded_reason().empty(), cut == kept);
    journal.Append("after");
    journal.Close();
    Journal again(path_);
    ASSERT_EQ(again.records().size(), whole_records + 1);
    EXPECT_EQ(again.records().back(), "after");
  }
}

TEST_F(JournalTest, CorruptRecordEndsTheLog) {
  {
    Journal journal(path_);
    for (const std::string& p : kPayloads) journal.Append(p);
  }
  std::string bytes = Bytes();
  const size_t second_payload = 2 * kJournalHeaderBytes + kPayloads[0].size();
  bytes[second_payload + kPayloads[2].size() / 2 + kJournalHeaderBytes] ^= 0x40;  // in record 3
  SetBytes(bytes);
  Journal journal(path_);
  EXPECT_EQ(journal.records(), std::vector<std::string>(kPayloads.begin(), kPayloads.begin() + 2));
  EXPECT_TRUE(Contains(journal.discarded_reason(), "checksum")) << journal.discarded_reason();
  EXPECT_EQ(static_cast<size_t>(journal.discarded_bytes()), bytes.size() - second_payload);
}

TEST_F(JournalTest, GarbageAndHugeSizesAreRefusedNotAllocated) {
  SetBytes("this is not a journal at all");
  {
    Journal journal(path_);
    EXPECT_TRUE(journal.records().empty());
    EXPECT_TRUE(Contains(journal.discarded_reason(), "no record marker"));
  }
  std::string header(kJournalHeaderBytes, '\0');
  header[0] = 'J', header[1] = 'B', header[2] = 'J', header[3] = '1';
  header[4] = header[5] = header[6] = header[7] = '\xff';  // 4 GiB payload
  SetBytes(header);
  Journal journal(path_);
  EXPECT_TRUE(journal.records().empty());
  EXPECT_TRUE(Contains(journal.discarded_reason(), "record size")) << journal.discarded_reason();
}

TEST_F(JournalTest, TruncateKeepsAPrefixDurably) {
  {
    Journal journal(path_);
    for (const std::string& p : kPayloads) journal.Append(p);
    journal.Truncate(1);
    EXPECT_EQ(journal.records(), std::vector<std::string>{"first"});
    journal.Append("second");
    EXPECT_TRUE(Contains(ThrownMessage<OutOfRangeError>([&] { journal.Truncate(3); }),
                         "cannot keep 3 records of 2"));
  }
  Journal journal(path_);
  EXPECT_EQ(journal.records(), (std::vector<std::string>{"first", "second"}));
  journal.Truncate(0);
  EXPECT_TRUE(journal.records().empty());
  EXPECT_TRUE(Bytes().empty());
}

TEST_F(JournalTest, OneProcessAtATime) {
  Journal journal(path_);
  const std::string message = ThrownMessage<IoError>([&] { Journal second(path_); });
  EXPECT_TRUE(Contains(message, "another process is running this job")) << message;
  journal.Close();
  Journal after(path_);  // The lock went with Close().
  EXPECT_TRUE(after.records().empty());
}

TEST_F(JournalTest, ClosedJournalRefusesAppends) {
  Journal journal(path_);
  journal.Close();
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { journal.Append("x"); }), "closed"));
}

TEST_F(JournalTest, UnopenablePathsNameTheFile) {
  const std::string missing = (dir_ / "no" / "such" / "journal.jbj").string();
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { Journal j(missing); }), missing));
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { Journal j(dir_.string()); }), dir_.string()));
}

TEST_F(JournalTest, WriteFileAtomicReplacesWholeFiles) {
  const std::string target = (dir_ / "part-000000.bin").string();
  const std::vector<uint8_t> first = {1, 2, 3}, second = {9, 8, 7, 6};
  WriteFileAtomic(target, first);
  WriteFileAtomic(target, second);
  std::ifstream in(target, std::ios::binary);
  EXPECT_EQ(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}), second);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(Contains(entry.path().filename().string(), ".tmp")) << entry.path();
  }
  const std::string bad = (dir_ / "missing" / "x.bin").string();
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { WriteFileAtomic(bad, first); }), "missing"));
}

}  // namespace
}  // namespace jaxbatch
