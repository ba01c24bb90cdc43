#include "jaxbatch/data/fingerprint.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jaxbatch/base/hash.h"

namespace jaxbatch {
namespace {

// One int32 ragged column named `name` over `values` with `offsets`.
Dataset Tokens(const std::vector<int32_t>& values, const std::vector<int64_t>& offsets,
               const char* name = "tokens", DType dtype = DType::kInt32) {
  return Dataset(
      {RaggedColumn::Ragged(name, dtype, {}, values.data(), static_cast<int64_t>(values.size()),
                            offsets.data(), static_cast<int64_t>(offsets.size()) - 1, nullptr)});
}

TEST(DatasetFingerprintTest, EqualDataHashesAlikeWhateverTheLayout) {
  const std::vector<int32_t> values = {1, 2, 3, 4, 5};
  const std::vector<int32_t> shifted = {99, 98, 1, 2, 3, 4, 5};
  const std::vector<int64_t> offsets = {0, 2, 5}, shifted_offsets = {2, 4, 7};
  EXPECT_EQ(DatasetFingerprint(Tokens(values, offsets)),
            DatasetFingerprint(Tokens(shifted, shifted_offsets)));
}

// A column whose examples lie in two buffers (and come in another order)
// hashes as the same examples in one buffer.
TEST(DatasetFingerprintTest, GatheredColumnHashesAsOneBuffer) {
  const std::vector<int32_t> first = {1, 2, 3}, second = {4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<int64_t> first_offsets = {0, 1, 3}, second_offsets = {0, 9};
  const auto bytes = [](const std::vector<int32_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
  };
  const std::vector<RaggedColumn::Chunk> chunks = {{bytes(first), first_offsets, 2},
                                                   {bytes(second), second_offsets, 1}};
  const Dataset gathered(
      {RaggedColumn::Gathered("tokens", DType::kInt32, {}, false, chunks, {}, nullptr)});
  const std::vector<int32_t> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(DatasetFingerprint(gathered), DatasetFingerprint(Tokens(values, {0, 1, 3, 12})));
  const std::vector<int64_t> order = {2, 0};
  const Dataset reordered(
      {RaggedColumn::Gathered("tokens", DType::kInt32, {}, false, chunks, order, nullptr)});
  const std::vector<int32_t> reordered_values = {4, 5, 6, 7, 8, 9, 10, 11, 12, 1};
  EXPECT_EQ(DatasetFingerprint(reordered),
            DatasetFingerprint(Tokens(reordered_values, {0, 9, 10})));
}

TEST(DatasetFingerprintTest, AnyChangeChangesIt) {
  const std::vector<int32_t> values = {1, 2, 3, 4, 5};
  const std::vector<int64_t> offsets = {0, 2, 5};
  const uint64_t base = DatasetFingerprint(Tokens(values, offsets));
  EXPECT_NE(DatasetFingerprint(Tokens({1, 2, 3, 4, 6}, offsets)), base);  // a value
  EXPECT_NE(DatasetFingerprint(Tokens(values, {0, 3, 5})), base);         // a length
  EXPECT_NE(DatasetFingerprint(Tokens(values, offsets, "other")), base);  // a name
  EXPECT_NE(DatasetFingerprint(Tokens(values, offsets, "tokens", DType::kUInt32)), base);
  EXPECT_NE(DatasetFingerprint(Tokens(values, {0, 2, 5, 5})), base);  // an example
  const std::vector<int32_t> fixed_values = {1, 2};
  const Dataset fixed(
      {RaggedColumn::Fixed("tokens", DType::kInt32, {}, fixed_values.data(), 2, nullptr)});
  EXPECT_NE(DatasetFingerprint(fixed), DatasetFingerprint(Tokens(fixed_values, {0, 1, 2})));
}

TEST(DatasetFingerprintTest, EmptyDatasetHashes) {
  const std::vector<int32_t> values;
  EXPECT_EQ(DatasetFingerprint(Tokens(values, {0})), DatasetFingerprint(Tokens(values, {0})));
}

// What loader states of every release hold: the chain over
// "name:dtype:[inner]:kind" and the lengths, written out by hand.
TEST(LayoutFingerprintTest, IsTheStoredChainOverColumnsAndLengths) {
  const std::vector<int32_t> values = {1, 2, 3, 4, 5};
  const std::vector<int64_t> offsets = {0, 2, 5};
  const std::string text = "tokens:int32:[]:ragged";
  const std::vector<int64_t> lengths = {2, 3};
  const uint64_t expected =
      Hash64(lengths.data(), 16, Hash64(text.data(), text.size(), /*seed=*/0));
  EXPECT_EQ(LayoutFingerprint(Tokens(values, offsets)), expected);
  // Values do not count; lengths do.
  const std::vector<int32_t> other = {9, 9, 9, 9, 9};
  EXPECT_EQ(LayoutFingerprint(Tokens(other, offsets)), expected);
  EXPECT_NE(LayoutFingerprint(Tokens(values, {0, 1, 5})), expected);
  // Lengths from elsewhere (a streaming source) hash as the column's would.
  EXPECT_EQ(
      LayoutFingerprint(Tokens(other, {0, 5, 5}), [&](const RaggedColumn&) { return lengths; }),
      expected);
}

}  // namespace
}  // namespace jaxbatch
