#include "jaxbatch/job/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/hash.h"

namespace jaxbatch {
namespace {

std::string Errno() { return std::strerror(errno); }

void PutLittleEndian(uint64_t value, int bytes, uint8_t* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLittleEndian(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | in[i];
  return value;
}

std::string Folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// The whole record at `offset` of `data[0, size)`: its payload size, or -1
// with `*reason` saying what is wrong there.
int64_t RecordAt(const uint8_t* data, int64_t size, int64_t offset, std::string* reason) {
  const int64_t left = size - offset;
  if (left < static_cast<int64_t>(kJournalHeaderBytes)) {
    *reason = StrCat("a torn record header at byte ", offset, " (", left, " of ",
                     kJournalHeaderBytes, " bytes present)");
    return -1;
  }
  const uint8_t* header = data + offset;
  if (GetLittleEndian(header, 4) != kJournalMagic) {
    *reason = StrCat("no record marker at byte ", offset);
    return -1;
  }
  const auto length = static_cast<int64_t>(GetLittleEndian(header + 4, 4));
  if (length > static_cast<int64_t>(kMaxJournalRecordBytes)) {
    *reason = StrCat("a record size of ", length, " bytes at byte ", offset, " (at most ",
                     kMaxJournalRecordBytes, ")");
    return -1;
  }
  if (length > left - static_cast<int64_t>(kJournalHeaderBytes)) {
    *reason = StrCat("a torn record at byte ", offset, " (", length, " bytes announced, ",
                     left - static_cast<int64_t>(kJournalHeaderBytes), " present)");
    return -1;
  }
  if (Hash64(header + kJournalHeaderBytes, static_cast<size_t>(length)) !=
      GetLittleEndian(header + 8, 8)) {
    *reason = StrCat("a record at byte ", offset, " whose checksum does not match");
    return -1;
  }
  return length;
}

// Whether `data[0, size)` begins with a record marker, or with the start of
// one when it is shorter (a first append cut short): what every journal
// writer leaves, and nothing else is likely to.
bool BeginsWithMarker(const uint8_t* data, int64_t size) {
  uint8_t marker[4];
  PutLittleEndian(kJournalMagic, 4, marker);
  return std::memcmp(data, marker, static_cast<size_t>(std::min<int64_t>(size, 4))) == 0;
}

// The payloads of whole records after damage at `from`: each is looked for
// at every later record marker, so a few corrupt bytes in the middle are told
// apart from a torn tail (nothing valid after it).
std::vector<std::string> IntactRecordsAfter(const uint8_t* data, int64_t size, int64_t from) {
  std::vector<std::string> found;
  std::string ignored;
  for (int64_t offset = from + 1; offset + 4 <= size;) {
    const int64_t length = GetLittleEndian(data + offset, 4) == kJournalMagic
                               ? RecordAt(data, size, offset, &ignored)
                               : -1;
    if (length < 0) {
      ++offset;
      continue;
    }
    found.emplace_back(reinterpret_cast<const char*>(data) + offset + kJournalHeaderBytes,
                       static_cast<size_t>(length));
    offset += static_cast<int64_t>(kJournalHeaderBytes) + length;
  }
  return found;
}

}  // namespace

Journal::Journal(std::string path, JournalAccess access) : path_(std::move(path)), access_(access) {
  const bool write = access_ == JournalAccess::kWrite;
  const bool existed = std::filesystem::is_symlink(path_) || std::filesystem::exists(path_);
  fd_ = OpenOwnedFile(path_, write ? O_RDWR | O_CREAT : O_RDONLY);
  if (write && ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw IoError(StrCat("journal ", path_,
                           ": another process is running this job (the journal is locked); "
                           "wait for it to finish or stop it"));
    }
    throw IoError(StrCat("journal ", path_, ": cannot lock: ", std::strerror(error)));
  }
  try {
    if (write && !existed) SyncDirectory(Folder(path_));
    Load();
  } catch (...) {
    Close();
    throw;
  }
}

Journal::~Journal() { Close(); }

void Journal::Close() {
  if (fd_ >= 0) {
    if (access_ == JournalAccess::kWrite) ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
}

void Journal::Load() {
  // A reader racing a writer's repair may read less than the size it saw.
  const std::string bytes = ReadToEnd(fd_, path_);
  const auto done = static_cast<int64_t>(bytes.size());
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  foreign_ = done > 0 && !BeginsWithMarker(data, done);
  int64_t offset = 0;
  std::string reason;
  while (offset < done) {
    const int64_t length = RecordAt(data, done, offset, &reason);
    if (length < 0) break;
    records_.emplace_back(bytes.data() + offset + kJournalHeaderBytes, static_cast<size_t>(length));
    offset += static_cast<int64_t>(kJournalHeaderBytes) + length;
    ends_.push_back(offset);
  }
  if (offset < done) {
    salvaged_ = IntactRecordsAfter(data, done, offset);
    damage_ = JournalDamage{.offset = offset,
                            .record = static_cast<int64_t>(records_.size()),
                            .bytes = done - offset,
                            .intact_after = static_cast<int64_t>(salvaged_.size()),
                            .reason = std::move(reason)};
    needs_repair_ = true;
  }
}

void Journal::CheckWritable(std::string_view what) const {
  if (fd_ < 0) throw IoError(StrCat("journal ", path_, ": closed"));
  if (access_ != JournalAccess::kWrite) {
    throw IoError(StrCat("journal ", path_, ": opened for reading; cannot ", what));
  }
  if (foreign_) {
    throw IoError(StrCat(path_,
                         " does not begin with a journal record marker, so no jaxbatch job "
                         "wrote it: it is left as it is (cannot ",
                         what, ")"));
  }
}

void Journal::CutTo(int64_t size) {
  if (::ftruncate(fd_, size) != 0 || ::fsync(fd_) != 0) {
    throw IoError(StrCat("journal ", path_, ": cannot truncate to ", size, " bytes: ", Errno()));
  }
}

void Journal::Append(std::string_view payload) {
  CheckWritable("append");
  if (needs_repair_) {
    throw IoError(StrCat("journal ", path_, ": damaged at byte ", damage_.offset, " (",
                         damage_.reason,
                         "); nothing is appended before the damage is cut off (re-running "
                         "the job does so)"));
  }
  if (payload.size() > kMaxJournalRecordBytes) {
    throw InvalidArgumentError(StrCat("journal ", path_, ": a record of ", payload.size(),
                                      " bytes; at most ", kMaxJournalRecordBytes, " are allowed"));
  }
  const int64_t start = ends_.empty() ? 0 : ends_.back();
  std::string record(kJournalHeaderBytes + payload.size(), '\0');
  auto* header = reinterpret_cast<uint8_t*>(record.data());
  PutLittleEndian(kJournalMagic, 4, header);
  PutLittleEndian(payload.size(), 4, header + 4);
  PutLittleEndian(Hash64(payload.data(), payload.size()), 8, header + 8);
  std::memcpy(record.data() + kJournalHeaderBytes, payload.data(), payload.size());
  if (!WriteAllAt(fd_, header, record.size(), start) || ::fsync(fd_) != 0) {
    const std::string error = Errno();
    CutTo(start);  // Leave no partial record behind us.
    throw IoError(StrCat("journal ", path_, ": cannot append a record: ", error));
  }
  records_.emplace_back(payload);
  ends_.push_back(start + static_cast<int64_t>(record.size()));
}

void Journal::Truncate(size_t count) {
  if (count > records_.size()) {
    throw OutOfRangeError(
        StrCat("journal ", path_, ": cannot keep ", count, " records of ", records_.size()));
  }
  CheckWritable("truncate it");
  CutTo(count == 0 ? 0 : ends_[count - 1]);
  records_.resize(count);
  ends_.resize(count);
  needs_repair_ = false;
}

}  // namespace jaxbatch
