#include "jaxbatch/job/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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

// Writes all of `data` at `offset`, retrying short writes.
bool WriteAll(int fd, const uint8_t* data, size_t size, int64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    offset += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string Folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

Journal::Journal(std::string path) : path_(std::move(path)) {
  const bool existed = std::filesystem::exists(path_);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(StrCat("journal ", path_, ": cannot open: ", Errno()));
  struct stat info;
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw IoError(StrCat("journal ", path_, ": expected a regular file"));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
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
    if (!existed) SyncDirectory(Folder(path_));
    Load();
  } catch (...) {
    Close();
    throw;
  }
}

Journal::~Journal() { Close(); }

void Journal::Close() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
}

void Journal::Load() {
  struct stat info;
  if (::fstat(fd_, &info) != 0) throw IoError(StrCat("journal ", path_, ": ", Errno()));
  const int64_t size = info.st_size;
  std::string bytes(static_cast<size_t>(size), '\0');
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, bytes.data() + done, static_cast<size_t>(size - done), done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError(StrCat("journal ", path_, ": cannot read: ", Errno()));
    done += n;
  }
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  int64_t offset = 0;
  while (offset < size) {
    const int64_t left = size - offset;
    if (left < static_cast<int64_t>(kJournalHeaderBytes)) {
      discarded_reason_ = StrCat("a torn record header at byte ", offset);
      break;
    }
    const uint8_t* header = data + offset;
    if (GetLittleEndian(header, 4) != kJournalMagic) {
      discarded_reason_ = StrCat("no record marker at byte ", offset);
      break;
    }
    const uint64_t length = GetLittleEndian(header + 4, 4);
    const uint64_t checksum = GetLittleEndian(header + 8, 8);
    if (length > kMaxJournalRecordBytes) {
      discarded_reason_ = StrCat("a record size of ", length, " bytes at byte ", offset);
      break;
    }
    if (static_cast<int64_t>(length) > left - static_cast<int64_t>(kJournalHeaderBytes)) {
      discarded_reason_ = StrCat("a torn record at byte ", offset, " (", length,
                                 " bytes announced, ", left - kJournalHeaderBytes, " present)");
      break;
    }
    const uint8_t* payload = header + kJournalHeaderBytes;
    if (Hash64(payload, length) != checksum) {
      discarded_reason_ = StrCat("a record at byte ", offset, " whose checksum does not match");
      break;
    }
    records_.emplace_back(reinterpret_cast<const char*>(payload), length);
    offset += static_cast<int64_t>(kJournalHeaderBytes + length);
    ends_.push_back(offset);
  }
  if (offset < size) {
    discarded_bytes_ = size - offset;
    CutTo(offset);
  }
}

void Journal::CutTo(int64_t size) {
  if (::ftruncate(fd_, size) != 0 || ::fsync(fd_) != 0) {
    throw IoError(StrCat("journal ", path_, ": cannot truncate to ", size, " bytes: ", Errno()));
  }
}

void Journal::Append(std::string_view payload) {
  if (fd_ < 0) throw IoError(StrCat("journal ", path_, ": closed"));
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
  if (!WriteAll(fd_, header, record.size(), start) || ::fsync(fd_) != 0) {
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
  if (fd_ < 0) throw IoError(StrCat("journal ", path_, ": closed"));
  CutTo(count == 0 ? 0 : ends_[count - 1]);
  records_.resize(count);
  ends_.resize(count);
}

void SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(StrCat("cannot open folder ", path, " to sync it: ", Errno()));
  const int result = ::fsync(fd);
  const std::string error = result != 0 ? Errno() : "";
  ::close(fd);
  if (result != 0) throw IoError(StrCat("cannot sync folder ", path, ": ", error));
}

void WriteFileAtomic(const std::string& path, std::span<const uint8_t> data) {
  const std::string folder = Folder(path);
  const std::string name = std::filesystem::path(path).filename().string();
  const std::string temp = StrCat(folder, "/.", name, ".tmp-", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(StrCat("cannot create ", temp, ": ", Errno()));
  const bool ok = WriteAll(fd, data.data(), data.size(), 0) && ::fsync(fd) == 0;
  const std::string error = ok ? "" : Errno();
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = ok ? Errno() : error;
    ::unlink(temp.c_str());
    throw IoError(StrCat("cannot write ", path, ": ", reason));
  }
  SyncDirectory(folder);
}

}  // namespace jaxbatch
