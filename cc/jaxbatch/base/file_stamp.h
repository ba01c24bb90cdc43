// FileStamp: what tells that the file at a path is no longer the one a
// reader opened: another file put there (renamed over it, copied in place
// of it) or the same file changed.
//
// Readers that keep a file open or mapped (a Loader's memory-mapped
// columns) or that open it again later (a pickled file-backed dataset in a
// worker process) stamp it when they first read it and compare stamps
// later. Size and modification time alone miss a replacement whose size is
// equal and whose modification time was restored (`cp -p`, `rsync -t`,
// `tar x` all restore it), so a stamp also holds the device and inode (the
// file's identity) and the status-change time, which no user call can set.
//
// The status-change time also moves on a chmod, a chown or a new hard link,
// which change no byte: such a file is then reported as changed. That is
// the safe side of the trade: a false "changed" costs a re-open, a missed
// replacement yields other values without an error.
//
// Example:
//   const std::optional<FileStamp> was = StampFile(path);
//   ...
//   const std::optional<FileStamp> now = StampFile(path);
//   if (!now) throw IoError(path + " no longer exists");
//   if (const std::string change = DescribeChange(*was, *now); !change.empty()) ...
#ifndef JAXBATCH_BASE_FILE_STAMP_H_
#define JAXBATCH_BASE_FILE_STAMP_H_

#include <cstdint>
#include <optional>
#include <string>

namespace jaxbatch {

struct FileStamp {
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t size = 0;
  int64_t modified_ns = 0;  // st_mtim: set by writes, and by anyone (utime)
  int64_t changed_ns = 0;   // st_ctim: set by the kernel on any change, by no one else

  // Whether both stamps name the same file (device and inode), changed or not.
  bool SameFile(const FileStamp& other) const {
    return device == other.device && inode == other.inode;
  }
  bool operator==(const FileStamp&) const = default;
};

// The stamp of the file at `path` (following symbolic links, as a reader
// opens it); nullopt when nothing is there (ENOENT, ENOTDIR). Throws IoError
// naming the path for any other failure (permission, a link loop).
std::optional<FileStamp> StampFile(const std::string& path);

// How the file went from `was` to `now`, for a message: "" when the stamps
// are equal; "replaced by another file (still 4096 bytes)" when device or
// inode differ (renamed over, or deleted and written anew); else "modified
// in place (now 100 bytes, was 4096)".
std::string DescribeChange(const FileStamp& was, const FileStamp& now);

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_FILE_STAMP_H_
