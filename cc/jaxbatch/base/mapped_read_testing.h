// A file memory-mapped the way numpy and pyarrow map one, to truncate under
// a reader (tests only).
#ifndef JAXBATCH_BASE_MAPPED_READ_TESTING_H_
#define JAXBATCH_BASE_MAPPED_READ_TESTING_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace jaxbatch::testing {

inline int64_t PageBytes() { return static_cast<int64_t>(sysconf(_SC_PAGESIZE)); }

// `content` written to a temporary file named `name` and mapped read-only
// (MAP_SHARED, as np.load(mmap_mode="r") maps); unmapped and removed at the end.
class MappedTestFile {
 public:
  MappedTestFile(const std::string& name, const std::vector<uint8_t>& content)
      : path_((std::filesystem::temp_directory_path() / name).string()),
        bytes_(static_cast<int64_t>(content.size())) {
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(content.data()), bytes_);
    const int fd = open(path_.c_str(), O_RDONLY);
    void* data = mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (data == MAP_FAILED) throw std::runtime_error("mmap of " + path_ + " failed");
    data_ = static_cast<const uint8_t*>(data);
  }
  ~MappedTestFile() {
    munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(bytes_));
    std::filesystem::remove(path_);
  }
  MappedTestFile(const MappedTestFile&) = delete;
  MappedTestFile& operator=(const MappedTestFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return bytes_; }
  const std::string& path() const { return path_; }
  // What another process does to the file under its readers.
  void Truncate(int64_t bytes) const { std::filesystem::resize_file(path_, bytes); }

 private:
  std::string path_;
  int64_t bytes_;
  const uint8_t* data_ = nullptr;
};

// Byte i of a test file: never 0, so a byte read as zero was lost.
inline uint8_t PatternByte(int64_t i) { return static_cast<uint8_t>(1 + i % 251); }

inline std::vector<uint8_t> PatternBytes(int64_t bytes) {
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) out[static_cast<size_t>(i)] = PatternByte(i);
  return out;
}

// Reads [data, data + bytes) one byte at a time, in order: the first read
// past a truncated end is then the first byte of the first page past it.
inline std::vector<uint8_t> ReadInOrder(const uint8_t* data, int64_t bytes) {
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  const volatile uint8_t* in = data;
  for (int64_t i = 0; i < bytes; ++i) out[static_cast<size_t>(i)] = in[i];
  return out;
}

}  // namespace jaxbatch::testing

#endif  // JAXBATCH_BASE_MAPPED_READ_TESTING_H_
