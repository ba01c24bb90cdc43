#include "jaxbatch/load/schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "jaxbatch/base/error.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

TEST(SchemaTest, LengthRulesNameColumnExpectedAndFound) {
  auto ds = testing::TokensDataset({3, 0, 9, 4});
  Schema schema{.columns = {{.name = "tokens", .min_length = 1, .max_length = 5}}};
  const std::vector<BadRecord> bad = FindBadRecords(*ds, schema);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].example, 1);
  EXPECT_EQ(bad[0].reason, "column 'tokens': expected length >= 1, found 0");
  EXPECT_EQ(bad[1].example, 2);
  EXPECT_EQ(bad[1].reason, "column 'tokens': expected length <= 5, found 9");
}

TEST(SchemaTest, DtypeAndInnerShapeMismatchFailEveryExample) {
  auto ds = testing::TokensDataset({1, 2});
  Schema dtype{.columns = {{.name = "tokens", .dtype = DType::kFloat32}}};
  const std::vector<BadRecord> bad = FindBadRecords(*ds, dtype);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[1].reason, "column 'tokens': expected dtype float32, found int32");
  Schema rank{.columns = {{.name = "tokens", .inner_shape = std::vector<int64_t>{3}}}};
  EXPECT_EQ(FindBadRecords(*ds, rank)[0].reason, "column 'tokens': expected rank 2, found rank 1");
  EXPECT_THROW(FindBadRecords(*ds, Schema{.columns = {{.name = "nope"}}}), InvalidArgumentError);
}

TEST(SchemaTest, FiniteFindsNanAndInfInEveryFloatType) {
  std::vector<float> values = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f,
                               std::numeric_limits<float>::infinity()};
  std::vector<int64_t> offsets = {0, 1, 3, 4};
  Dataset ds({RaggedColumn::Ragged("x", DType::kFloat32, {}, values.data(), 4, offsets.data(), 3,
                                   nullptr)});
  const std::vector<BadRecord> bad =
      FindBadRecords(ds, Schema{.columns = {{.name = "x", .finite = true}}});
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].example, 1);
  EXPECT_EQ(bad[0].reason, "column 'x': expected finite values, found NaN or Inf at element 0");
  EXPECT_EQ(bad[1].example, 2);
  std::vector<uint16_t> halves = {0x3c00, 0x7c00, 0x7e00, 0x0001};  // 1, inf, nan, tiny
  std::vector<int64_t> half_offsets = {0, 1, 2, 3, 4};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    if (dtype == DType::kBFloat16) halves = {0x3f80, 0x7f80, 0x7fc0, 0x0001};
    Dataset h(
        {RaggedColumn::Ragged("h", dtype, {}, halves.data(), 4, half_offsets.data(), 4, nullptr)});
    const std::vector<BadRecord> hb =
        FindBadRecords(h, Schema{.columns = {{.name = "h", .finite = true}}});
    ASSERT_EQ(hb.size(), 2u);
    EXPECT_EQ(hb[0].example, 1);
    EXPECT_EQ(hb[1].example, 2);
  }
}

}  // namespace
}  // namespace jaxbatch
