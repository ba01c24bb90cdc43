#include "jaxbatch/load/index_shuffle.h"

namespace jaxbatch {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

IndexShuffle::IndexShuffle(uint64_t n, uint64_t seed) : n_(n) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  half_bits_ = (bits + 1) / 2;
  if (half_bits_ == 0) half_bits_ = 1;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t key = Mix64(seed);
  for (uint64_t& k : keys_) {
    key = Mix64(key);
    k = key;
  }
}

uint64_t IndexShuffle::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t key : keys_) {
    const uint64_t next = left ^ (Mix64(right ^ key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexShuffle::operator()(uint64_t i) const {
  uint64_t x = Encrypt(i);
  while (x >= n_) x = Encrypt(x);  // Cycle walking stays inside [0, n).
  return x;
}

}  // namespace jaxbatch
