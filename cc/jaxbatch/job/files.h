// Files a job owns: written whole or not at all, read without following
// links, and named so that a job can tell its own temporaries from anything
// else in its folder.
//
// A job (jb.run) never touches a file it did not write. Its writes go through
// WriteFileAtomic, whose temporary sits beside the target under a name made
// by AtomicTempPrefix(target name) + a unique suffix, so that after a crash
// the job (and only the job) recognises and removes it. Its reads go through
// ReadOwnedFile, which refuses a symbolic link: a job's files are regular
// files it wrote itself, and a link planted in their place must not redirect
// a read (or, for a writer, the hash it checks) to some other file.
//
// Example:
//   WriteFileAtomic("out/part-000003.parquet", bytes);
//   const std::string back = ReadOwnedFile("out/part-000003.parquet");
//   assert(HashFileContents(back.data(), back.size()) == recorded_hash);
#ifndef JAXBATCH_JOB_FILES_H_
#define JAXBATCH_JOB_FILES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace jaxbatch {

// Writes `data` to `path` so that, whatever happens, the file is afterwards
// either absent (or its old contents) or whole: a temporary file beside it
// (created exclusively, never through a link), fsync, rename over `path`,
// fsync of the folder. Throws IoError naming the file on failure (and
// removes the temporary file).
void WriteFileAtomic(const std::string& path, std::span<const uint8_t> data);

// Writes `data` to `path` only if nothing is there yet, whole or not at all:
// a temporary file beside it (as WriteFileAtomic's), fsync, then a hard link
// to `path` that fails if `path` exists, the temporary removed and the
// folder synced. Returns true when this call created `path`, false when it
// already existed (its content is left as it is: the first writer of a
// deterministic name wins, so a retried or duplicated writer can never
// replace it or leave it partial). Throws IoError naming the file on failure
// (the temporary removed).
// Example:
//   if (!PublishFileOnce("out/part-000003.parquet", bytes)) {
//     const std::string there = ReadOwnedFile("out/part-000003.parquet");  // the winner's
//   }
bool PublishFileOnce(const std::string& path, std::span<const uint8_t> data);

// The start of every temporary name WriteFileAtomic uses for a file named
// `name` (a file name, not a path): ".<name>.tmp-".
std::string AtomicTempPrefix(std::string_view name);

// Writes all `size` bytes of `data` to `fd` at `offset` (pwrite, retrying
// short writes and EINTR); false with errno set when the write fails.
bool WriteAllAt(int fd, const uint8_t* data, size_t size, int64_t offset);

// fsync of a folder, so that files created, renamed or removed in it stay so
// after a crash. Throws IoError naming the folder.
void SyncDirectory(const std::string& path);

// Opens the file at `path` with `flags` (plus O_NOFOLLOW and O_CLOEXEC;
// `mode` when O_CREAT creates it) and checks that it is a regular file.
// Throws IoError naming the file when it is a symbolic link, not a regular
// file, or cannot be opened. The caller closes the descriptor.
int OpenOwnedFile(const std::string& path, int flags, unsigned mode = 0644);

// What `fd` (of the file at `path`, for messages) holds from its start to
// its end; shorter than its size when it shrinks meanwhile. Throws IoError.
std::string ReadToEnd(int fd, const std::string& path);

// The whole content of the regular file at `path`, opened read-only and
// without following a symbolic link. Throws IoError naming the file when it
// is missing, a symbolic link, not a regular file, or cannot be read.
std::string ReadOwnedFile(const std::string& path);

}  // namespace jaxbatch

#endif  // JAXBATCH_JOB_FILES_H_
