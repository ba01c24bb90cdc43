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
  EXPECT_FALSE(journal.damage().damaged());
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
    EXPECT_EQ(journal.damage().damaged(), cut != kept);
    if (cut != kept) {
      EXPECT_EQ(journal.damage().bytes, static_cast<int64_t>(cut - kept));
      EXPECT_EQ(journal.damage().offset, static_cast<int64_t>(kept));
      EXPECT_EQ(journal.damage().record, static_cast<int64_t>(whole_records));
      EXPECT_TRUE(journal.damage().torn_tail()) << "cut at " << cut;
    }
    EXPECT_EQ(journal.needs_repair(), cut != kept);
    EXPECT_EQ(Bytes().size(), cut);  // Opening changes nothing, even for a writer.
    if (cut != kept) {
      const std::string message = ThrownMessage<IoError>([&] { journal.Append("x"); });
      EXPECT_TRUE(Contains(message, "damage is cut off")) << message;
      EXPECT_FALSE(Contains(message, "Truncate")) << message;  // No method's name.
    }
    // A crash during the first append leaves the start of a record: the
    // journal's own, to repair, never taken for another program's file.
    EXPECT_FALSE(journal.foreign()) << "cut at " << cut;
    journal.Truncate(journal.records().size());
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
  const JournalDamage& damage = journal.damage();
  EXPECT_TRUE(Contains(damage.reason, "checksum")) << damage.reason;
  EXPECT_EQ(static_cast<size_t>(damage.bytes), bytes.size() - second_payload);
  EXPECT_EQ(damage.record, 2);
  EXPECT_EQ(damage.intact_after, 1);  // Record 4 is whole: corruption, not a torn tail.
  EXPECT_FALSE(damage.torn_tail());
  EXPECT_EQ(journal.salvaged(), std::vector<std::string>{kPayloads[3]});
  journal.Truncate(2);  // The repair.
  EXPECT_EQ(Bytes().size(), second_payload);
  EXPECT_FALSE(journal.needs_repair());
  EXPECT_TRUE(journal.damage().damaged());  // Still told, for the report.
}

TEST_F(JournalTest, GarbageAndHugeSizesAreRefusedNotAllocated) {
  SetBytes("this is not a journal at all");
  {
    Journal journal(path_);
    EXPECT_TRUE(journal.records().empty());
    EXPECT_TRUE(Contains(journal.damage().reason, "no record marker"));
  }
  std::string header(kJournalHeaderBytes, '\0');
  header[0] = 'J', header[1] = 'B', header[2] = 'J', header[3] = '1';
  header[4] = header[5] = header[6] = header[7] = '\xff';  // 4 GiB payload
  SetBytes(header);
  Journal journal(path_);
  EXPECT_TRUE(journal.records().empty());
  EXPECT_TRUE(Contains(journal.damage().reason, "record size")) << journal.damage().reason;
}

// A file that does not begin with a record marker was written by someone
// else: a writer opens it (to say so) but neither appends nor cuts.
TEST_F(JournalTest, AForeignFileIsNeverChanged) {
  for (const std::string& bytes : {std::string("this is not a journal at all"), std::string("X"),
                                   std::string("JBJ2 and more")}) {
    SetBytes(bytes);
    Journal journal(path_);
    EXPECT_TRUE(journal.foreign()) << bytes;
    EXPECT_TRUE(journal.records().empty());
    const std::string message = ThrownMessage<IoError>([&] { journal.Truncate(0); });
    EXPECT_TRUE(Contains(message, "does not begin with a journal record marker")) << message;
    EXPECT_THROW(journal.Append("x"), IoError);
    EXPECT_EQ(Bytes(), bytes);
  }
  SetBytes("");  // What a writer leaves when it stops before its first append.
  Journal journal(path_);
  EXPECT_FALSE(journal.foreign());
  journal.Append("first");
  EXPECT_EQ(journal.records(), std::vector<std::string>{"first"});
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

// A reader sees the same records as a writer but changes nothing: not a torn
// tail, not corruption in the middle, at any byte a flip lands on.
TEST_F(JournalTest, ReadersNeverChangeTheFile) {
  {
    Journal journal(path_);
    for (const std::string& p : kPayloads) journal.Append(p);
  }
  const std::string whole = Bytes();
  for (size_t at = 0; at < whole.size(); ++at) {
    std::string bytes = whole;
    bytes[at] ^= 0x01;
    SetBytes(bytes);
    Journal reader(path_, JournalAccess::kRead);
    EXPECT_TRUE(reader.damage().damaged()) << "flip at " << at;
    EXPECT_LT(reader.records().size(), kPayloads.size()) << "flip at " << at;
    EXPECT_EQ(reader.damage().offset + reader.damage().bytes, static_cast<int64_t>(bytes.size()));
    // Intact records follow a flip in any record but the last.
    const bool last_record = at >= whole.size() - kJournalHeaderBytes - kPayloads.back().size();
    EXPECT_EQ(reader.damage().torn_tail(), last_record) << "flip at " << at;
    EXPECT_EQ(Bytes(), bytes) << "flip at " << at;
  }
}

TEST_F(JournalTest, AReaderTakesNoLockAndCannotWrite) {
  Journal writer(path_);
  writer.Append("first");
  Journal reader(path_, JournalAccess::kRead);  // While the writer holds the lock.
  EXPECT_EQ(reader.records(), std::vector<std::string>{"first"});
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { reader.Append("x"); }), "for reading"));
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { reader.Truncate(0); }), "for reading"));
  writer.Close();
  Journal again(path_);  // The reader never held the writer's lock.
  EXPECT_EQ(again.records().size(), 1u);
}

TEST_F(JournalTest, AReaderNeedsAnExistingJournal) {
  const std::string message =
      ThrownMessage<IoError>([&] { Journal j(path_, JournalAccess::kRead); });
  EXPECT_TRUE(Contains(message, path_)) << message;
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(JournalTest, SymbolicLinksAreNotFollowed) {
  const std::string target = (dir_ / "precious.txt").string();
  std::ofstream(target) << "not a journal";
  fs::create_symlink(target, path_);
  for (const JournalAccess access : {JournalAccess::kWrite, JournalAccess::kRead}) {
    const std::string message = ThrownMessage<IoError>([&] { Journal j(path_, access); });
    EXPECT_TRUE(Contains(message, "symbolic link")) << message;
  }
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a journal");
  fs::remove(path_);
  fs::create_symlink(dir_ / "dangling", path_);  // Not created through a dangling link either.
  EXPECT_TRUE(Contains(ThrownMessage<IoError>([&] { Journal j(path_); }), "symbolic link"));
  EXPECT_FALSE(fs::exists(dir_ / "dangling"));
}

}  // namespace
}  // namespace jaxbatch
