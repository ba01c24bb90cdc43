#include "jaxbatch/base/hash.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

// Little-endian loads, whatever the host (the hash is stored in files).
uint64_t Load64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t Load32(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}

uint64_t MergeRound(uint64_t acc, uint64_t value) {
  acc ^= Round(0, value);
  return acc * kP1 + kP4;
}

// Reads one 32-byte stripe into the four accumulators.
void Stripe(uint64_t v[4], const unsigned char* p) {
  v[0] = Round(v[0], Load64(p));
  v[1] = Round(v[1], Load64(p + 8));
  v[2] = Round(v[2], Load64(p + 16));
  v[3] = Round(v[3], Load64(p + 24));
}

void InitLanes(uint64_t v[4], uint64_t seed) {
  v[0] = seed + kP1 + kP2;
  v[1] = seed + kP2;
  v[2] = seed;
  v[3] = seed - kP1;
}

// The hash from the lanes (when `size` >= 32), the length and the last
// size % 32 bytes [p, end).
uint64_t Finish(const uint64_t v[4], uint64_t seed, uint64_t size, const unsigned char* p,
                const unsigned char* end) {
  uint64_t h;
  if (size >= 32) {
    h = std::rotl(v[0], 1) + std::rotl(v[1], 7) + std::rotl(v[2], 12) + std::rotl(v[3], 18);
    for (int k = 0; k < 4; ++k) h = MergeRound(h, v[k]);
  } else {
    h = seed + kP5;
  }
  h += size;
  while (end - p >= 8) {
    h ^= Round(0, Load64(p));
    h = std::rotl(h, 27) * kP1 + kP4;
    p += 8;
  }
  if (end - p >= 4) {
    h ^= Load32(p) * kP1;
    h = std::rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  while (p < end) {
    h ^= (*p) * kP5;
    h = std::rotl(h, 11) * kP1;
    ++p;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t Hash64(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + size;
  uint64_t v[4];
  InitLanes(v, seed);
  for (; end - p >= 32; p += 32) Stripe(v, p);
  return Finish(v, seed, size, p, end);
}

Hash64Stream::Hash64Stream(uint64_t seed) : seed_(seed) { InitLanes(v_, seed); }

void Hash64Stream::Update(const void* data, size_t size) {
  if (size == 0) return;  // data may be null
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + size;
  total_ += size;
  if (buffered_ > 0) {  // Fill the stripe a previous piece began.
    const size_t take = std::min(size, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    if (buffered_ < sizeof(buffer_)) return;
    Stripe(v_, buffer_);
    buffered_ = 0;
  }
  for (; end - p >= 32; p += 32) Stripe(v_, p);
  if (p < end) {
    std::memcpy(buffer_, p, static_cast<size_t>(end - p));
    buffered_ = static_cast<size_t>(end - p);
  }
}

uint64_t Hash64Stream::Digest() const {
  return Finish(v_, seed_, total_, buffer_, buffer_ + buffered_);
}

uint64_t HashFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    throw IoError(StrCat("cannot open ", path, " to hash it: ", std::strerror(errno)));
  }
  std::vector<unsigned char> chunk(kHashFileChunk);
  uint64_t h = 0;
  bool first = true;
  while (true) {
    const size_t n = std::fread(chunk.data(), 1, chunk.size(), file.get());
    if (n == 0 && !first) break;
    h = Hash64(chunk.data(), n, h);
    first = false;
    if (n < chunk.size()) break;
  }
  if (std::ferror(file.get())) {
    throw IoError(StrCat("cannot read ", path, " to hash it: ", std::strerror(errno)));
  }
  return h;
}

uint64_t HashFileContents(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = 0;
  size_t offset = 0;
  do {  // One Hash64 per chunk, as HashFile reads them; an empty file is one empty chunk.
    const size_t n = std::min(kHashFileChunk, size - offset);
    h = Hash64(bytes + offset, n, h);
    offset += n;
  } while (offset < size);
  return h;
}

}  // namespace jaxbatch
