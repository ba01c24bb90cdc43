#include "jaxbatch/data/view.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/fingerprint.h"

namespace jaxbatch {
namespace {

using testing::ExpectThrowsWith;

// Tokens of example i: i + 1 values i*10, i*10+1, ...; a fixed label i; an
// image of (1 + i % 2) x (i % 3) cells of i.
struct Data {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};
  std::vector<float> labels;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> pixel_offsets{0};
  std::vector<int64_t> shapes;

  explicit Data(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k <= i; ++k) tokens.push_back(static_cast<int32_t>(i * 10 + k));
      offsets.push_back(static_cast<int64_t>(tokens.size()));
      labels.push_back(static_cast<float>(i));
      const int64_t h = 1 + i % 2, w = i % 3;
      for (int64_t c = 0; c < h * w; ++c) pixels.push_back(static_cast<uint8_t>(i));
      pixel_offsets.push_back(static_cast<int64_t>(pixels.size()));
      shapes.push_back(h);
      shapes.push_back(w);
    }
  }
  Dataset Make() const {
    const auto n = static_cast<int64_t>(labels.size());
    RaggedColumn cells =
        RaggedColumn::Ragged("image", DType::kUInt8, {}, pixels.data(),
                             static_cast<int64_t>(pixels.size()), pixel_offsets.data(), n, nullptr);
    return Dataset(
        {RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(),
                              static_cast<int64_t>(tokens.size()), offsets.data(), n, nullptr),
         RaggedColumn::Fixed("label", DType::kFloat32, {}, labels.data(), n, nullptr),
         RaggedColumn::Grid(std::move(cells), shapes)});
  }
};

// Example `i` of `column` as bytes (its values), with its grid shape.
std::vector<uint8_t> Bytes(const RaggedColumn& column, int64_t i) {
  const auto size = static_cast<size_t>(column.length(i) * column.row_bytes());
  std::vector<uint8_t> out(size);
  if (size) std::memcpy(out.data(), column.example_data(i), size);
  return out;
}

// `view` holds exactly base's examples `index`, column by column.
void ExpectTakes(const Dataset& view, const Dataset& base, const std::vector<int64_t>& index) {
  ASSERT_EQ(view.num_examples(), static_cast<int64_t>(index.size()));
  for (const RaggedColumn& col : base.columns()) {
    const RaggedColumn& got = view.column(col.name());
    for (size_t k = 0; k < index.size(); ++k) {
      const auto i = static_cast<int64_t>(k);
      EXPECT_EQ(Bytes(got, i), Bytes(col, index[k])) << col.name() << " position " << k;
      EXPECT_EQ(got.length(i), col.length(index[k]));
      if (col.is_grid()) {
        EXPECT_EQ(got.height(i), col.height(index[k]));
        EXPECT_EQ(got.width(i), col.width(index[k]));
      }
    }
  }
}

TEST(ViewTest, SelectTakesTheIndexedExamples) {
  const Data data(7);
  const Dataset base = data.Make();
  const std::vector<int64_t> index = {6, 0, 3, 3, 1};
  const Dataset view = SelectExamples(base, index);
  ExpectTakes(view, base, index);
  EXPECT_EQ(view.column("tokens").max_length(), 7);
  EXPECT_EQ(view.column("image").max_height(), 2);
  // A view of a view takes from the original.
  const std::vector<int64_t> again = {4, 0};
  ExpectTakes(SelectExamples(view, again), base, {1, 6});
}

TEST(ViewTest, EmptySelectionIsEmpty) {
  const Data data(4);
  const Dataset view = SelectExamples(data.Make(), {});
  EXPECT_EQ(view.num_examples(), 0);
  EXPECT_EQ(view.column("tokens").max_length(), 0);
  EXPECT_EQ(SliceExamples(data.Make(), 2, 2).num_examples(), 0);
}

TEST(ViewTest, SliceAndShardTakeRanges) {
  const Data data(10);
  const Dataset base = data.Make();
  std::vector<int64_t> range(4);
  std::iota(range.begin(), range.end(), 3);
  const Dataset slice = SliceExamples(base, 3, 7);
  ExpectTakes(slice, base, range);
  EXPECT_TRUE(slice.column("tokens").contiguous());  // no index: the offsets, shifted
  // A slice of a selection (gathered) is one too.
  const std::vector<int64_t> index = {9, 8, 7, 6, 5};
  ExpectTakes(SliceExamples(SelectExamples(base, index), 1, 4), base, {8, 7, 6});
  // Shards: contiguous, sizes within one, covering every example once.
  std::vector<int64_t> seen;
  for (int64_t s = 0; s < 3; ++s) {
    const Dataset shard = ShardExamples(base, s, 3);
    EXPECT_GE(shard.num_examples(), 3);
    EXPECT_LE(shard.num_examples(), 4);
    for (int64_t i = 0; i < shard.num_examples(); ++i) {
      seen.push_back(static_cast<int64_t>(
          *reinterpret_cast<const float*>(shard.column("label").example_data(i))));
    }
  }
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  ExpectThrowsWith<InvalidArgumentError>([&] { ShardExamples(base, 3, 3); }, "index 3");
}

TEST(ViewTest, ConcatLaysDatasetsEndToEnd) {
  const Data a(3), b(5);
  const Dataset first = a.Make(), second = b.Make();
  const std::vector<const Dataset*> parts = {&first, &second};
  const Dataset both = ConcatDatasets(parts);
  ASSERT_EQ(both.num_examples(), 8);
  for (const RaggedColumn& col : first.columns()) {
    for (int64_t i = 0; i < 8; ++i) {
      const RaggedColumn& from = i < 3 ? col : second.column(col.name());
      EXPECT_EQ(Bytes(both.column(col.name()), i), Bytes(from, i < 3 ? i : i - 3));
    }
  }
  EXPECT_EQ(both.column("image").height(4), second.column("image").height(1));
}

TEST(ViewTest, ConcatRefusesOtherColumns) {
  const Data a(2);
  const Dataset first = a.Make();
  const std::vector<int64_t> offsets = {0, 1, 2};
  const std::vector<int64_t> tokens64 = {1, 2};
  const std::vector<float> labels = {0, 1};
  const Dataset wrong({RaggedColumn::Ragged("tokens", DType::kInt64, {}, tokens64.data(), 2,
                                            offsets.data(), 2, nullptr),
                       RaggedColumn::Fixed("label", DType::kFloat32, {}, labels.data(), 2, nullptr),
                       first.column("image")});
  const std::vector<const Dataset*> parts = {&first, &wrong};
  ExpectThrowsWith<InvalidArgumentError>([&] { ConcatDatasets(parts); },
                                         "column 'tokens' is int32[] ragged in dataset 0 but "
                                         "int64[] ragged in dataset 1");
  const Dataset fewer({first.column("tokens")});
  const std::vector<const Dataset*> short_parts = {&first, &fewer};
  ExpectThrowsWith<InvalidArgumentError>([&] { ConcatDatasets(short_parts); },
                                         "dataset 1 has 1 columns but dataset 0 has 3");
}

TEST(ViewTest, OutOfRangeIsNamed) {
  const Data data(3);
  const Dataset base = data.Make();
  const std::vector<int64_t> index = {0, 3};
  ExpectThrowsWith<OutOfRangeError>([&] { SelectExamples(base, index); },
                                    "position 1 selects example 3, expected one in [0, 3)");
  ExpectThrowsWith<OutOfRangeError>([&] { SliceExamples(base, 2, 4); }, "slice [2, 4)");
}

// Two views of equal lengths (and values) that take other examples differ in
// both fingerprints, so a state or job over one is refused on the other.
TEST(ViewTest, FingerprintsTellViewsApart) {
  std::vector<int32_t> tokens = {1, 1, 1, 1};
  std::vector<int64_t> offsets = {0, 1, 2, 3, 4};
  const Dataset base({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 4,
                                           offsets.data(), 4, nullptr)});
  const std::vector<int64_t> first = {0, 1}, second = {2, 3};
  const Dataset a = SelectExamples(base, first), b = SelectExamples(base, second);
  EXPECT_NE(LayoutFingerprint(a), LayoutFingerprint(b));
  EXPECT_NE(DatasetFingerprint(a), DatasetFingerprint(b));
  EXPECT_NE(LayoutFingerprint(SliceExamples(base, 0, 2)), LayoutFingerprint(a));
  // The same view made twice is the same.
  EXPECT_EQ(LayoutFingerprint(a), LayoutFingerprint(SelectExamples(base, first)));
  EXPECT_EQ(DatasetFingerprint(SliceExamples(base, 1, 3)),
            DatasetFingerprint(SliceExamples(base, 1, 3)));
  // Data that is no view keeps its fingerprint (view key 0).
  EXPECT_EQ(base.view_key(), 0u);
}

}  // namespace
}  // namespace jaxbatch
