#include "jaxbatch/base/hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// The reference xxHash64 test vectors.
TEST(Hash64Test, MatchesReferenceVectors) {
  EXPECT_EQ(Hash64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Hash64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Hash64("abc", 3), 0x44BC2CF5AD770999ULL);
}

TEST(Hash64Test, EveryByteAndTheSeedMatter) {
  std::vector<unsigned char> bytes(100);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  const uint64_t base = Hash64(bytes.data(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] ^= 1;
    EXPECT_NE(Hash64(bytes.data(), bytes.size()), base) << "byte " << i;
    bytes[i] ^= 1;
  }
  EXPECT_NE(Hash64(bytes.data(), bytes.size(), 1), base);
  EXPECT_NE(Hash64(bytes.data(), bytes.size() - 1), base);
}

TEST(HashFileTest, ChainsChunks) {
  const auto path = std::filesystem::temp_directory_path() / "jaxbatch_hash_test.bin";
  std::string data(kHashFileChunk + 123, 'x');
  data[5] = 'y';
  std::ofstream(path, std::ios::binary) << data;
  const uint64_t first = Hash64(data.data(), kHashFileChunk);
  EXPECT_EQ(HashFile(path.string()), Hash64(data.data() + kHashFileChunk, 123, first));
  std::ofstream(path, std::ios::binary | std::ios::trunc);
  EXPECT_EQ(HashFile(path.string()), Hash64("", 0));
  std::filesystem::remove(path);
  EXPECT_THROW(HashFile(path.string()), IoError);
}

// A file read into memory hashes as HashFile hashes it on disk, at every
// size around the chunk boundary (empty, one byte short, exact, one over).
TEST(HashFileTest, ContentsHashLikeTheFile) {
  const auto path = std::filesystem::temp_directory_path() / "jaxbatch_hash_contents_test.bin";
  for (const size_t size : {size_t{0}, size_t{1}, kHashFileChunk - 1, kHashFileChunk,
                            kHashFileChunk + 1, 2 * kHashFileChunk}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + i / 251);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
    EXPECT_EQ(HashFileContents(data.data(), data.size()), HashFile(path.string())) << size;
  }
  std::filesystem::remove(path);
}

// Bytes given in pieces hash as the same bytes given at once, for every
// split of every length around the 32-byte stripe (pieces of 0 bytes too).
TEST(Hash64StreamTest, PiecesHashAsTheWhole) {
  std::string data(200, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  for (size_t size : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64},
                      size_t{65}, size_t{200}}) {
    for (size_t piece = 1; piece <= 40; ++piece) {
      Hash64Stream stream(/*seed=*/size);
      for (size_t at = 0; at < size; at += piece) {
        stream.Update(data.data() + at, std::min(piece, size - at));
        stream.Update(nullptr, 0);
      }
      EXPECT_EQ(stream.Digest(), Hash64(data.data(), size, size)) << size << " " << piece;
    }
  }
}

}  // namespace
}  // namespace jaxbatch
