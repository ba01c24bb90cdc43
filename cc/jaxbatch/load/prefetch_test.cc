#include "jaxbatch/load/prefetch.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

std::vector<const uint8_t*> Lines(const Dataset& dataset, const std::vector<int64_t>& examples) {
  std::vector<const uint8_t*> out;
  ForEachPrefetchLine(dataset, examples, [&](const uint8_t* line) { out.push_back(line); });
  return out;
}

// The reference: each example's bytes, a line every 64, at most 1 KiB.
std::vector<const uint8_t*> Expected(const Dataset& dataset, const std::vector<int64_t>& examples) {
  std::vector<const uint8_t*> out;
  for (const RaggedColumn& column : dataset.columns()) {
    for (int64_t e : examples) {
      const int64_t bytes = column.length(e) * column.row_bytes();
      for (int64_t k = 0; k * 64 < bytes && k * 64 < 1024; ++k) {
        out.push_back(column.example_data(e) + k * 64);
      }
    }
  }
  return out;
}

TEST(PrefetchTest, NamesTheFirstKibOfEachExampleLineByLine) {
  // int32: 1 value is one line, 16 fill one, 17 spill into a second, 256
  // are exactly 1 KiB, 300 are cut to 1 KiB.
  const auto dataset = testing::TokensDataset({1, 16, 17, 256, 300, 0, 40});
  const std::vector<int64_t> examples = {4, 0, 2, 5, 3, 1, 6};
  const std::vector<const uint8_t*> lines = Lines(*dataset, examples);
  EXPECT_EQ(lines, Expected(*dataset, examples));
  // 16 + 1 + 2 + 0 + 16 + 1 + 3 lines, in the order of the examples.
  EXPECT_EQ(lines.size(), 39u);
  EXPECT_EQ(lines.front(), dataset->column("tokens").example_data(4));
}

TEST(PrefetchTest, NeverNamesAByteOutsideTheBatchExamples) {
  const std::vector<int64_t> lengths = testing::RandomLengths(200, 700, 7);
  const auto dataset = testing::TokensDataset(lengths);
  const RaggedColumn& column = dataset->column("tokens");
  std::vector<int64_t> examples;
  for (int64_t e = 199; e >= 0; e -= 3) examples.push_back(e);
  for (const uint8_t* line : Lines(*dataset, examples)) {
    bool inside = false;
    for (int64_t e : examples) {
      const uint8_t* begin = column.example_data(e);
      inside = inside || (line >= begin && line < begin + column.length(e) * column.row_bytes());
    }
    EXPECT_TRUE(inside);
  }
  EXPECT_EQ(Lines(*dataset, examples), Expected(*dataset, examples));
}

TEST(PrefetchTest, CoversFixedColumnsAndAnEmptyBatch) {
  auto tokens = testing::TokensDataset({3, 5});
  auto labels = std::make_shared<std::vector<float>>(2 * 40);  // 160 bytes an example
  std::vector<RaggedColumn> columns = tokens->columns();
  columns.push_back(RaggedColumn::Fixed("label", DType::kFloat32, {40}, labels->data(), 2, labels));
  const Dataset dataset(std::move(columns));
  const std::vector<const uint8_t*> lines = Lines(dataset, {1, 0});
  EXPECT_EQ(lines, Expected(dataset, {1, 0}));
  EXPECT_EQ(lines.size(), 2u + 3u * 2u);  // one token line each, three label lines each
  EXPECT_TRUE(Lines(dataset, {}).empty());
  PrefetchExamples(dataset, std::vector<int64_t>{1, 0});  // hints only: nothing to observe
}

}  // namespace
}  // namespace jaxbatch
