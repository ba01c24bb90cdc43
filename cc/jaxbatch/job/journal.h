// Journal: a job's durable, append-only log of completed work.
//
// A job (jb.run) writes its outputs in shards and, after each shard is safely
// on disk, appends one record saying so (the shard's file, size and hash, and
// the loader state to resume from). The journal is the commit point: work is
// done exactly when its record is in the journal, so a crash or kill -9 at
// any moment loses at most the work since the last record, and re-running
// redoes exactly that.
//
// On disk, each record is
//   magic "JBJ1" (4 bytes) | payload size (uint32, little-endian)
//   | Hash64 of the payload (uint64, little-endian) | payload bytes.
// Append() writes one record and fsyncs before it returns. Opening reads
// every whole record whose checksum holds, in order, up to the first that is
// torn or corrupt; what follows is described by damage().
//
// Two ways to open it:
//   - kWrite (a job's run): creates the file if absent and takes an
//     exclusive lock (flock), throwing IoError while another process holds
//     it. A damaged journal is left as found until the job repairs it with
//     Truncate(), after it has dealt with the files that the records past
//     the damage name (salvaged()): a crash between the two then still finds
//     them named. Append() refuses while the damage is there. A file that
//     does not begin with a record marker is not a journal (foreign()):
//     nothing is appended to it or cut from it.
//   - kRead (a reader of the output): opens read-only, takes no lock and
//     changes nothing, damaged or not, so a finished job reads from a
//     read-only filesystem and while its writer runs.
// Neither follows a symbolic link at `path`: a job's journal is a file it
// created itself.
//
// Example:
//   Journal journal("out/journal.jbj");
//   for (const std::string& record : journal.records()) Replay(record);
//   WriteFileAtomic("out/part-000003.parquet", bytes);
//   journal.Append(R"({"kind": "shard", "shard": 3, ...})");
#ifndef JAXBATCH_JOB_JOURNAL_H_
#define JAXBATCH_JOB_JOURNAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jaxbatch/job/files.h"  // IWYU pragma: export (WriteFileAtomic, SyncDirectory)

namespace jaxbatch {

inline constexpr uint32_t kJournalMagic = 0x314A424A;  // "JBJ1" in little-endian order
inline constexpr size_t kJournalHeaderBytes = 16;
// A bound on one record, so a corrupt size field cannot ask for gigabytes.
inline constexpr uint32_t kMaxJournalRecordBytes = uint32_t{64} << 20;

enum class JournalAccess { kWrite, kRead };

// Where a journal stops being valid, as found when it was opened.
struct JournalDamage {
  int64_t offset = -1;       // byte where the first invalid record starts; -1: none
  int64_t record = 0;        // its index (the valid records before it)
  int64_t bytes = 0;         // bytes from `offset` to the end of the file
  int64_t intact_after = 0;  // whole, valid records found after it (Journal::salvaged)
  std::string reason;        // what is wrong at `offset`

  bool damaged() const { return offset >= 0; }
  // Damage at the very end with nothing valid after it: what a crash during
  // an append (or a writer appending right now) leaves. Anything else is
  // corruption of records already committed.
  bool torn_tail() const { return damaged() && intact_after == 0; }
};

class Journal {
 public:
  // Opens the journal at `path` (see the overview for the two kinds of
  // access). Throws IoError naming the file when it cannot be opened, locked
  // or read, is a symbolic link or is not a regular file, and, for kRead,
  // when it does not exist.
  explicit Journal(std::string path, JournalAccess access = JournalAccess::kWrite);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The payloads of every valid record before any damage, oldest first.
  const std::vector<std::string>& records() const { return records_; }
  // What was wrong past the valid records when the journal was opened (kept
  // after a Truncate() repaired it, for the job's report).
  const JournalDamage& damage() const { return damage_; }
  // The payloads of the whole, valid records found after the damage (its
  // intact_after), oldest first: what they name is the job's even though
  // they no longer count as committed.
  const std::vector<std::string>& salvaged() const { return salvaged_; }
  // Whether damage found on opening is still in the file (Truncate cuts it).
  bool needs_repair() const { return needs_repair_; }
  // Whether the file, found non-empty, does not begin with a record marker
  // (or, shorter than one, with the start of one): no journal writer wrote
  // it, since every journal starts with a record and a crash can only cut
  // one short. Append() and Truncate() refuse to change such a file.
  bool foreign() const { return foreign_; }
  JournalAccess access() const { return access_; }
  const std::string& path() const { return path_; }

  // Appends one record and makes it durable (fsync) before returning.
  // Throws InvalidArgumentError for a payload over kMaxJournalRecordBytes,
  // IoError when the write or sync fails (the record is then cut off again),
  // the journal was opened for reading, is foreign() or still needs repair.
  void Append(std::string_view payload);

  // Keeps the first `count` records and removes the rest, and any damage
  // after them, durably: for a job that found the output of a later record
  // damaged and will redo it, or that repairs a damaged journal.
  // Throws OutOfRangeError when count > records().size(), IoError for a
  // journal opened for reading or foreign().
  void Truncate(size_t count);

  // Releases the lock and closes the file; further appends throw. Idempotent.
  void Close();

 private:
  void Load();
  void CutTo(int64_t size);
  void CheckWritable(std::string_view what) const;

  std::string path_;
  JournalAccess access_;
  int fd_ = -1;
  std::vector<std::string> records_;
  std::vector<int64_t> ends_;  // file offset just past each record
  JournalDamage damage_;
  std::vector<std::string> salvaged_;
  bool needs_repair_ = false;
  bool foreign_ = false;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_JOB_JOURNAL_H_
