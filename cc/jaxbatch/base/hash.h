// Hash64: a fast, stable 64-bit hash of bytes (xxHash64), for fingerprints
// and checksums.
//
// Its value is the same on every platform and build, so it may be stored: a
// job's journal records the Hash64 of each output file and of its input, and
// a loader state carries the hash of the data's lengths. It is not a
// cryptographic hash; it detects corruption and accidental change, not an
// adversary.
//
// Example:
//   uint64_t h = Hash64(values.data(), values.size() * sizeof(int64_t));
//   h = Hash64(offsets.data(), offsets.size() * sizeof(int64_t), /*seed=*/h);  // chained
#ifndef JAXBATCH_BASE_HASH_H_
#define JAXBATCH_BASE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace jaxbatch {

// xxHash64 of `size` bytes at `data` with `seed` (the reference algorithm:
// Hash64("", 0, 0) == 0xEF46DB3751D8E999).
uint64_t Hash64(const void* data, size_t size, uint64_t seed = 0);

// Hash64 of bytes that come in pieces: Update(a, n); Update(b, m); then
// Digest() is Hash64 of the n + m bytes laid end to end, with `seed` (for
// a column whose examples lie in several buffers).
//
// Example:
//   Hash64Stream h(seed);
//   for (const auto& piece : pieces) h.Update(piece.data(), piece.size());
//   uint64_t value = h.Digest();
class Hash64Stream {
 public:
  explicit Hash64Stream(uint64_t seed = 0);
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  uint64_t seed_;
  uint64_t v_[4];
  uint64_t total_ = 0;
  unsigned char buffer_[32];
  size_t buffered_ = 0;
};

// The hash of a whole file, read in chunks of kHashFileChunk bytes, each
// chunk's Hash64 seeded with the previous one's (seed 0 for the first; an
// empty file hashes to Hash64("", 0)). Throws IoError naming the file when
// it cannot be read.
inline constexpr size_t kHashFileChunk = size_t{1} << 20;
uint64_t HashFile(const std::string& path);

// The hash HashFile gives a file holding these `size` bytes (for a file
// already read into memory, so that what is checked is what is used).
uint64_t HashFileContents(const void* data, size_t size);

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_HASH_H_
