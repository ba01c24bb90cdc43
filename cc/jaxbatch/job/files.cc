#include "jaxbatch/job/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// Attempts at a fresh temporary name before giving up (each name is unique
// to this process and call, so a clash means a stale file of a dead process
// with the same pid, or a file planted there).
constexpr int kTempNameAttempts = 16;

std::string Errno() { return std::strerror(errno); }

std::string Folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

bool WriteAllAt(int fd, const uint8_t* data, size_t size, int64_t offset) {
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

std::string AtomicTempPrefix(std::string_view name) { return StrCat(".", name, ".tmp-"); }

void SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(StrCat("cannot open folder ", path, " to sync it: ", Errno()));
  const int result = ::fsync(fd);
  const std::string error = result != 0 ? Errno() : "";
  ::close(fd);
  if (result != 0) throw IoError(StrCat("cannot sync folder ", path, ": ", error));
}

namespace {

// The temporary beside `path` that WriteFileAtomic and PublishFileOnce fill:
// created exclusively and without following links (never write through a
// file or link that someone else put at its name), `data` written and
// synced. Returns its path; throws IoError (the temporary removed).
std::string WriteTemporary(const std::string& path, std::span<const uint8_t> data) {
  static std::atomic<uint64_t> counter{0};
  const std::string folder = Folder(path);
  const std::string name = std::filesystem::path(path).filename().string();
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < kTempNameAttempts && fd < 0; ++attempt) {
    temp = StrCat(folder, "/", AtomicTempPrefix(name), ::getpid(), "-", counter++);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw IoError(StrCat("cannot create ", temp, ": ", Errno()));
  const bool ok = WriteAllAt(fd, data.data(), data.size(), 0) && ::fsync(fd) == 0;
  const std::string error = ok ? "" : Errno();
  ::close(fd);
  if (!ok) {
    ::unlink(temp.c_str());
    throw IoError(StrCat("cannot write ", path, ": ", error));
  }
  return temp;
}

}  // namespace

void WriteFileAtomic(const std::string& path, std::span<const uint8_t> data) {
  const std::string temp = WriteTemporary(path, data);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = Errno();
    ::unlink(temp.c_str());
    throw IoError(StrCat("cannot write ", path, ": ", reason));
  }
  SyncDirectory(Folder(path));
}

bool PublishFileOnce(const std::string& path, std::span<const uint8_t> data) {
  const std::string temp = WriteTemporary(path, data);
  // link() never replaces: of writers racing for one name, exactly one wins.
  const bool created = ::link(temp.c_str(), path.c_str()) == 0;
  const int error = created ? 0 : errno;
  ::unlink(temp.c_str());
  if (!created && error != EEXIST) {
    throw IoError(StrCat("cannot write ", path, ": ", std::strerror(error)));
  }
  SyncDirectory(Folder(path));
  return created;
}

int OpenOwnedFile(const std::string& path, int flags, unsigned mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    if (errno == ELOOP) {
      throw IoError(StrCat(path,
                           " is a symbolic link; a job's files are regular files it wrote "
                           "itself, so it is not followed (remove the link)"));
    }
    throw IoError(StrCat("cannot open ", path, ": ", Errno()));
  }
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw IoError(StrCat(path, ": expected a regular file"));
  }
  return fd;
}

std::string ReadToEnd(int fd, const std::string& path) {
  struct stat info;
  if (::fstat(fd, &info) != 0) throw IoError(StrCat("cannot read ", path, ": ", Errno()));
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError(StrCat("cannot read ", path, ": ", Errno()));
    if (n == 0) break;  // It shrank meanwhile: what is there is what was read.
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

std::string ReadOwnedFile(const std::string& path) {
  const int fd = OpenOwnedFile(path, O_RDONLY);
  try {
    std::string bytes = ReadToEnd(fd, path);
    ::close(fd);
    return bytes;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace jaxbatch
