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
// Append() writes one record and fsyncs before it returns. A crash during an
// append leaves a torn record at the end; opening reads every whole record
// whose checksum holds, in order, stops at the first that is torn or corrupt
// and cuts the file there (reported by discarded_bytes()), so the next
// append continues a valid log.
//
// One process at a time: the constructor takes an exclusive lock (flock) on
// the file and throws IoError when another process holds it.
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
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace jaxbatch {

inline constexpr uint32_t kJournalMagic = 0x314A424A;  // "JBJ1" in little-endian order
inline constexpr size_t kJournalHeaderBytes = 16;
// A bound on one record, so a corrupt size field cannot ask for gigabytes.
inline constexpr uint32_t kMaxJournalRecordBytes = uint32_t{64} << 20;

class Journal {
 public:
  // Opens the journal at `path`, creating it (and syncing its folder) when
  // absent. Throws IoError naming the file when it cannot be opened, locked
  // or read.
  explicit Journal(std::string path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The payloads of every valid record, oldest first.
  const std::vector<std::string>& records() const { return records_; }
  // Bytes cut off the end when the journal was opened (a torn or corrupt
  // tail), and why; 0 and "" when the file was whole.
  int64_t discarded_bytes() const { return discarded_bytes_; }
  const std::string& discarded_reason() const { return discarded_reason_; }
  const std::string& path() const { return path_; }

  // Appends one record and makes it durable (fsync) before returning.
  // Throws InvalidArgumentError for a payload over kMaxJournalRecordBytes,
  // IoError when the write or sync fails (the record is then cut off again).
  void Append(std::string_view payload);

  // Keeps the first `count` records and removes the rest, durably: for a
  // job that found the output of a later record damaged and will redo it.
  // Throws OutOfRangeError when count > records().size().
  void Truncate(size_t count);

  // Releases the lock and closes the file; further appends throw. Idempotent.
  void Close();

 private:
  void Load();
  void CutTo(int64_t size);

  std::string path_;
  int fd_ = -1;
  std::vector<std::string> records_;
  std::vector<int64_t> ends_;  // file offset just past each record
  int64_t discarded_bytes_ = 0;
  std::string discarded_reason_;
};

// Writes `data` to `path` so that, whatever happens, the file is afterwards
// either absent (or its old contents) or whole: a temporary file beside it,
// fsync, rename over `path`, fsync of the folder. Throws IoError naming the
// file on failure (and removes the temporary file).
void WriteFileAtomic(const std::string& path, std::span<const uint8_t> data);

// fsync of a folder, so that files created, renamed or removed in it stay so
// after a crash. Throws IoError naming the folder.
void SyncDirectory(const std::string& path);

}  // namespace jaxbatch

#endif  // JAXBATCH_JOB_JOURNAL_H_
