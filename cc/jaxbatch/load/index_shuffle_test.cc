#include "jaxbatch/load/index_shuffle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace jaxbatch {
namespace {

std::vector<uint64_t> Permutation(uint64_t n, uint64_t seed) {
  const IndexShuffle shuffle(n, seed);
  std::vector<uint64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = shuffle(i);
  return out;
}

TEST(IndexShuffleTest, IsAPermutationForManySizes) {
  for (uint64_t n : {0u, 1u, 2u, 3u, 5u, 16u, 17u, 100u, 1000u, 4097u}) {
    std::vector<uint64_t> perm = Permutation(n, 7);
    std::sort(perm.begin(), perm.end());
    std::vector<uint64_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(perm, expected) << "n=" << n;
  }
}

TEST(IndexShuffleTest, DeterministicPerSeedAndDifferentAcrossSeeds) {
  EXPECT_EQ(Permutation(1000, 1), Permutation(1000, 1));
  EXPECT_NE(Permutation(1000, 1), Permutation(1000, 2));
  std::vector<uint64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(Permutation(1000, 1), identity);
}

TEST(IndexShuffleTest, PositionsAreRoughlyUniform) {
  // Where element 0 lands over many seeds: every tenth of the range is hit.
  constexpr uint64_t kN = 100;
  std::vector<int> hits(10, 0);
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    std::vector<uint64_t> perm = Permutation(kN, seed);
    const auto at = std::find(perm.begin(), perm.end(), 0u) - perm.begin();
    ++hits[static_cast<size_t>(at / 10)];
  }
  for (int h : hits) {
    EXPECT_GT(h, 100);  // 200 expected per bucket
    EXPECT_LT(h, 320);
  }
}

}  // namespace
}  // namespace jaxbatch
