#include "jaxbatch/base/file_stamp.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;

int64_t Nanoseconds(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * kNanosPerSecond + static_cast<int64_t>(t.tv_nsec);
}

std::string Sizes(const FileStamp& was, const FileStamp& now) {
  return now.size == was.size ? StrCat("still ", now.size, " bytes")
                              : StrCat("now ", now.size, " bytes, was ", was.size);
}

}  // namespace

std::optional<FileStamp> StampFile(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw IoError(StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  return FileStamp{.device = static_cast<uint64_t>(info.st_dev),
                   .inode = static_cast<uint64_t>(info.st_ino),
                   .size = static_cast<int64_t>(info.st_size),
                   .modified_ns = Nanoseconds(info.st_mtim),
                   .changed_ns = Nanoseconds(info.st_ctim)};
}

std::string DescribeChange(const FileStamp& was, const FileStamp& now) {
  if (now == was) return "";
  if (!now.SameFile(was)) {
    return StrCat("replaced by another file (", Sizes(was, now), ")");
  }
  return StrCat("modified in place (", Sizes(was, now), ")");
}

}  // namespace jaxbatch
