// IndexShuffle: a seeded random permutation of [0, n) evaluated one index at
// a time in O(1) memory, so an epoch's shuffle of a billion examples costs
// nothing to store and a checkpoint needs only (seed, epoch, position).
//
// A 4-round Feistel network permutes [0, 4^k) for the smallest 4^k >= n;
// values >= n are walked (re-encrypted) until they land in range, which takes
// fewer than 4 steps on average and keeps it a bijection on [0, n).
//
// Example:
//   IndexShuffle shuffle(/*n=*/10, /*seed=*/42);
//   for (uint64_t i = 0; i < 10; ++i) visit(shuffle(i));  // each of 0..9 once
#ifndef JAXBATCH_LOAD_INDEX_SHUFFLE_H_
#define JAXBATCH_LOAD_INDEX_SHUFFLE_H_

#include <array>
#include <cstdint>

namespace jaxbatch {

// SplitMix64: a fast, well-mixed 64-bit hash (seed derivation, round keys).
uint64_t Mix64(uint64_t x);

class IndexShuffle {
 public:
  IndexShuffle(uint64_t n, uint64_t seed);
  uint64_t size() const { return n_; }
  // The i-th element of the permutation (i < size()).
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t Encrypt(uint64_t x) const;

  static constexpr int kRounds = 4;
  uint64_t n_;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
  std::array<uint64_t, kRounds> keys_{};
};

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_INDEX_SHUFFLE_H_
