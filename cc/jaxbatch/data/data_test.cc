// Tests for data/: dtype encoding, RaggedColumn and Dataset.
//
// Float encodings are checked against an obviously-correct reference: every
// finite float16 and bfloat16 bit pattern is decoded with ldexp and must
// encode back to itself, and the midpoint of two neighbours must round to the
// even one.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/dtype.h"
#include "jaxbatch/data/ragged_column.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

template <typename T>
T Encode(double value, DType dtype) {
  T out{};
  EncodeScalar(value, dtype, &out, "value");
  return out;
}

// ---- dtype ----------------------------------------------------------------

TEST(DTypeTest, NamesSizesAndParsingRoundTrip) {
  const std::vector<std::pair<DType, size_t>> all = {
      {DType::kBool, 1},    {DType::kInt8, 1},    {DType::kInt16, 2},    {DType::kInt32, 4},
      {DType::kInt64, 8},   {DType::kUInt8, 1},   {DType::kUInt16, 2},   {DType::kUInt32, 4},
      {DType::kUInt64, 8},  {DType::kFloat16, 2}, {DType::kBFloat16, 2}, {DType::kFloat32, 4},
      {DType::kFloat64, 8},
  };
  for (const auto& [dtype, size] : all) {
    EXPECT_EQ(ItemSize(dtype), size) << DTypeName(dtype);
    EXPECT_EQ(ParseDType(DTypeName(dtype), "test"), dtype);
  }
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(DTypeName(DType::kUInt64), "uint64");
  EXPECT_TRUE(IsFloating(DType::kFloat16));
  EXPECT_TRUE(IsFloating(DType::kBFloat16));
  EXPECT_TRUE(IsFloating(DType::kFloat32));
  EXPECT_TRUE(IsFloating(DType::kFloat64));
  EXPECT_FALSE(IsFloating(DType::kInt32));
  EXPECT_FALSE(IsFloating(DType::kBool));
}

TEST(DTypeTest, ParseUnknownNameNamesWhatAndListsSupported) {
  const std::string msg =
      ThrownMessage<InvalidArgumentError>([] { ParseDType("complex64", "column 'x'"); });
  EXPECT_TRUE(Contains(msg, "column 'x'")) << msg;
  EXPECT_TRUE(Contains(msg, "complex64")) << msg;
  EXPECT_TRUE(Contains(msg, "bfloat16")) << msg;
  EXPECT_TRUE(Contains(msg, "int32")) << msg;
}

TEST(DTypeTest, Float16KnownBitPatterns) {
  EXPECT_EQ(Encode<uint16_t>(1.0, DType::kFloat16), 0x3C00);
  EXPECT_EQ(Encode<uint16_t>(-2.5, DType::kFloat16), 0xC100);
  EXPECT_EQ(Encode<uint16_t>(0.0, DType::kFloat16), 0x0000);
  EXPECT_EQ(Encode<uint16_t>(-0.0, DType::kFloat16), 0x8000);
  EXPECT_EQ(Encode<uint16_t>(2.0, DType::kFloat16), 0x4000);
  EXPECT_EQ(Encode<uint16_t>(0.5, DType::kFloat16), 0x3800);
  EXPECT_EQ(Encode<uint16_t>(65504.0, DType::kFloat16), 0x7BFF);  // Largest finite.
  EXPECT_EQ(Encode<uint16_t>(65519.0, DType::kFloat16), 0x7BFF);  // Rounds down.
  EXPECT_EQ(Encode<uint16_t>(65520.0, DType::kFloat16), 0x7C00);  // Rounds to inf.
  EXPECT_EQ(Encode<uint16_t>(1e6, DType::kFloat16), 0x7C00);
  EXPECT_EQ(Encode<uint16_t>(-1e6, DType::kFloat16), 0xFC00);
  EXPECT_EQ(Encode<uint16_t>(std::numeric_limits<double>::infinity(), DType::kFloat16), 0x7C00);
  EXPECT_EQ(Encode<uint16_t>(-std::numeric_limits<double>::infinity(), DType::kFloat16), 0xFC00);
  EXPECT_EQ(Encode<uint16_t>(std::ldexp(1.0, -14), DType::kFloat16), 0x0400);  // Min normal.
  EXPECT_EQ(Encode<uint16_t>(std::ldexp(1.0, -24), DType::kFloat16), 0x0001);  // Min subnormal.
  EXPECT_EQ(Encode<uint16_t>(std::ldexp(1.0, -25), DType::kFloat16), 0x0000);  // Tie to even.
  EXPECT_EQ(Encode<uint16_t>(std::ldexp(3.0, -25), DType::kFloat16), 0x0002);  // Tie to even.
  EXPECT_EQ(Encode<uint16_t>(1.0 + std::ldexp(1.0, -11), DType::kFloat16), 0x3C00);  // Tie.
  EXPECT_EQ(Encode<uint16_t>(1.0 + std::ldexp(3.0, -11), DType::kFloat16), 0x3C02);  // Tie.
  EXPECT_EQ(Encode<uint16_t>(0.1, DType::kFloat16), 0x2E66);
  const uint16_t nan = Encode<uint16_t>(std::nan(""), DType::kFloat16);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(DTypeTest, BFloat16KnownBitPatterns) {
  EXPECT_EQ(Encode<uint16_t>(1.0, DType::kBFloat16), 0x3F80);
  EXPECT_EQ(Encode<uint16_t>(-2.5, DType::kBFloat16), 0xC020);
  EXPECT_EQ(Encode<uint16_t>(-1.0, DType::kBFloat16), 0xBF80);
  EXPECT_EQ(Encode<uint16_t>(3.0, DType::kBFloat16), 0x4040);
  EXPECT_EQ(Encode<uint16_t>(0.0, DType::kBFloat16), 0x0000);
  EXPECT_EQ(Encode<uint16_t>(-0.0, DType::kBFloat16), 0x8000);
  EXPECT_EQ(Encode<uint16_t>(std::numeric_limits<double>::infinity(), DType::kBFloat16), 0x7F80);
  EXPECT_EQ(Encode<uint16_t>(1.0 + std::ldexp(1.0, -8), DType::kBFloat16), 0x3F80);  // Tie.
  EXPECT_EQ(Encode<uint16_t>(1.0 + std::ldexp(3.0, -8), DType::kBFloat16), 0x3F82);  // Tie.
  EXPECT_EQ(Encode<uint16_t>(1.0 + std::ldexp(3.0, -9), DType::kBFloat16), 0x3F81);  // Up.
  const uint16_t nan = Encode<uint16_t>(std::nan(""), DType::kBFloat16);
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
}

// Reference decoder for IEEE binary16: sign * mantissa * 2^exponent.
double HalfToDouble(uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(DTypeTest, Float16EveryFinitePatternRoundTripsAndMidpointsRoundToEven) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    if ((half & 0x7C00) == 0x7C00) continue;  // Inf and NaN.
    ASSERT_EQ(Encode<uint16_t>(HalfToDouble(half), DType::kFloat16), half) << bits;
    // The midpoint to the next larger magnitude rounds to the even pattern.
    const auto next = static_cast<uint16_t>(half + 1);
    if ((next & 0x7C00) == 0x7C00) continue;
    const double mid = (HalfToDouble(half) + HalfToDouble(next)) / 2;
    const uint16_t even = (half & 1) ? next : half;
    ASSERT_EQ(Encode<uint16_t>(mid, DType::kFloat16), even) << bits;
  }
}

TEST(DTypeTest, BFloat16EveryFinitePatternRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto bf = static_cast<uint16_t>(bits);
    if ((bf & 0x7F80) == 0x7F80) continue;  // Inf and NaN.
    const float value = std::bit_cast<float>(static_cast<uint32_t>(bf) << 16);
    ASSERT_EQ(Encode<uint16_t>(value, DType::kBFloat16), bf) << bits;
  }
}

TEST(DTypeTest, FloatAndIntegerEncodings) {
  EXPECT_EQ(Encode<float>(-1.5, DType::kFloat32), -1.5f);
  EXPECT_EQ(Encode<double>(0.1, DType::kFloat64), 0.1);
  EXPECT_EQ(Encode<int8_t>(-128, DType::kInt8), -128);
  EXPECT_EQ(Encode<int8_t>(127, DType::kInt8), 127);
  EXPECT_EQ(Encode<uint8_t>(255, DType::kUInt8), 255);
  EXPECT_EQ(Encode<int16_t>(-32768, DType::kInt16), -32768);
  EXPECT_EQ(Encode<uint16_t>(65535, DType::kUInt16), 65535);
  EXPECT_EQ(Encode<int32_t>(-100, DType::kInt32), -100);
  EXPECT_EQ(Encode<int32_t>(2147483647.0, DType::kInt32), 2147483647);
  EXPECT_EQ(Encode<int32_t>(-2147483648.0, DType::kInt32), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(Encode<uint32_t>(4294967295.0, DType::kUInt32), 4294967295u);
  EXPECT_EQ(Encode<int64_t>(-9223372036854775808.0, DType::kInt64),
            std::numeric_limits<int64_t>::min());
  // The largest doubles below 2^63 and 2^64.
  EXPECT_EQ(Encode<int64_t>(9223372036854774784.0, DType::kInt64), 9223372036854774784LL);
  EXPECT_EQ(Encode<uint64_t>(18446744073709549568.0, DType::kUInt64), 18446744073709549568ULL);
  EXPECT_EQ(Encode<uint8_t>(1.0, DType::kBool), 1);
  EXPECT_EQ(Encode<uint8_t>(0.0, DType::kBool), 0);
}

TEST(DTypeTest, IntegerScalarsAreCarriedExactly) {
  // Through a double, 2^53 + 1 became 2^53, and int64's and uint64's largest
  // values (which round up to 2^63 and 2^64) were refused.
  auto encode = [](const Scalar& value, DType dtype) {
    uint64_t out = 0;
    EncodeScalar(value, dtype, &out, "value");
    return out;
  };
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
  constexpr uint64_t kUInt64Max = std::numeric_limits<uint64_t>::max();
  const int64_t above_double = (int64_t{1} << 53) + 1;
  EXPECT_EQ(static_cast<int64_t>(encode(above_double, DType::kInt64)), above_double);
  EXPECT_EQ(static_cast<int64_t>(encode(kInt64Max, DType::kInt64)), kInt64Max);
  EXPECT_EQ(static_cast<int64_t>(encode(kInt64Min, DType::kInt64)), kInt64Min);
  EXPECT_EQ(encode(kUInt64Max, DType::kUInt64), kUInt64Max);
  EXPECT_EQ(encode(uint64_t{kInt64Max} + 1, DType::kUInt64), uint64_t{1} << 63);
  EXPECT_EQ(static_cast<uint32_t>(encode(uint64_t{4294967295u}, DType::kUInt32)), 4294967295u);
  EXPECT_EQ(static_cast<uint8_t>(encode(int64_t{1}, DType::kBool)), 1);
  EXPECT_EQ(static_cast<uint8_t>(encode(true, DType::kBool)), 1);
  // An integer into a float type rounds to the nearest, as numpy does.
  EXPECT_EQ(std::bit_cast<double>(encode(kUInt64Max, DType::kFloat64)), 18446744073709551616.0);
  EXPECT_EQ(std::bit_cast<double>(encode(int64_t{-3}, DType::kFloat64)), -3.0);
  // Out of range, exactly: one past each end.
  const std::vector<std::pair<Scalar, DType>> bad = {{uint64_t{kInt64Max} + 1, DType::kInt64},
                                                     {int64_t{-1}, DType::kUInt64},
                                                     {int64_t{128}, DType::kInt8},
                                                     {uint64_t{256}, DType::kUInt8},
                                                     {int64_t{2}, DType::kBool},
                                                     {int64_t{-2147483649}, DType::kInt32}};
  for (const auto& [value, dtype] : bad) {
    uint64_t out = 0;
    const std::string msg = ThrownMessage<InvalidArgumentError>(
        [&] { EncodeScalar(value, dtype, &out, "pad value for column 'c'"); });
    EXPECT_TRUE(Contains(msg, "pad value for column 'c'")) << msg;
  }
  const std::string msg =
      ThrownMessage<InvalidArgumentError>([&] { encode(uint64_t{kInt64Max} + 1, DType::kInt64); });
  EXPECT_TRUE(Contains(msg, "int64, found 9223372036854775808")) << msg;
}

TEST(DTypeTest, IntegerOutOfRangeThrowsNamingTheValue) {
  const std::vector<std::pair<double, DType>> bad = {
      {128, DType::kInt8},
      {-129, DType::kInt8},
      {-1, DType::kUInt8},
      {256, DType::kUInt8},
      {32768, DType::kInt16},
      {65536, DType::kUInt16},
      {2147483648.0, DType::kInt32},
      {-2147483649.0, DType::kInt32},
      {4294967296.0, DType::kUInt32},
      {-1, DType::kUInt64},
      {1.5, DType::kInt32},
      {std::nan(""), DType::kInt64},
      {std::numeric_limits<double>::infinity(), DType::kInt32},
      {9223372036854775808.0, DType::kInt64},    // 2^63: one past int64's max.
      {18446744073709551616.0, DType::kUInt64},  // 2^64: one past uint64's max.
      {2, DType::kBool},
      {0.5, DType::kBool},
  };
  for (const auto& [value, dtype] : bad) {
    uint8_t out[8] = {};
    const std::string msg = ThrownMessage<InvalidArgumentError>(
        [&] { EncodeScalar(value, dtype, out, "pad value for column 'c'"); });
    EXPECT_TRUE(Contains(msg, "pad value for column 'c'")) << value << " " << DTypeName(dtype);
    if (dtype != DType::kBool) {
      EXPECT_TRUE(Contains(msg, std::string(DTypeName(dtype)))) << msg;
    }
  }
}

// ---- RaggedColumn ---------------------------------------------------------

TEST(RaggedColumnTest, RaggedPointsAtValuesAndOffsets) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const std::vector<int64_t> offsets = {0, 3, 3, 5};
  const RaggedColumn col =
      RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 5, offsets.data(), 3,
                           /*owner=*/nullptr);
  EXPECT_EQ(col.name(), "tokens");
  EXPECT_EQ(col.dtype(), DType::kInt32);
  EXPECT_FALSE(col.is_fixed());
  EXPECT_EQ(col.num_examples(), 3);
  EXPECT_EQ(col.inner_size(), 1);
  EXPECT_EQ(col.row_bytes(), 4);
  EXPECT_EQ(col.max_length(), 3);
  EXPECT_EQ(col.Lengths(), (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(col.example_data(0), reinterpret_cast<const uint8_t*>(&tokens[0]));
  EXPECT_EQ(col.example_data(2), reinterpret_cast<const uint8_t*>(&tokens[3]));
}

template <typename T>
std::span<const uint8_t> BytesOf(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Example i of a gathered column is example order[i] of its chunks laid end
// to end, read in place: compared with the obvious copy into one buffer.
TEST(RaggedColumnTest, GatheredReadsChunksInPlaceInTheGivenOrder) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8, 9};
  const std::vector<int64_t> a_offsets = {0, 2, 2, 5}, b_offsets = {1, 3, 4};  // b from row 1
  const std::vector<RaggedColumn::Chunk> chunks = {{BytesOf(a), a_offsets, 3},
                                                   {BytesOf(b), b_offsets, 2}};
  // Flat: [1 2] [] [3 4 5] [7 8] [9]
  const std::vector<std::vector<int32_t>> flat = {{1, 2}, {}, {3, 4, 5}, {7, 8}, {9}};
  const std::vector<int64_t> order = {4, 0, 3, 3, 1, 2};
  for (const bool reorder : {false, true}) {
    const RaggedColumn col = RaggedColumn::Gathered(
        "tokens", DType::kInt32, {}, false, chunks,
        reorder ? std::optional<std::span<const int64_t>>(order) : std::nullopt, nullptr);
    ASSERT_EQ(col.num_examples(), reorder ? 6 : 5);
    EXPECT_FALSE(col.contiguous());
    EXPECT_EQ(col.max_length(), reorder ? 3 : 3);
    for (int64_t i = 0; i < col.num_examples(); ++i) {
      const std::vector<int32_t>& want = flat[reorder ? order[i] : i];
      ASSERT_EQ(col.length(i), static_cast<int64_t>(want.size())) << i;
      std::vector<int32_t> got(want.size());
      if (!got.empty()) std::memcpy(got.data(), col.example_data(i), got.size() * 4);
      EXPECT_EQ(got, want) << i;
    }
  }
  // In place: example 0 (unordered) is the first byte of chunk a.
  const RaggedColumn col =
      RaggedColumn::Gathered("tokens", DType::kInt32, {}, false, chunks, {}, nullptr);
  EXPECT_EQ(col.example_data(3), reinterpret_cast<const uint8_t*>(&b[1]));
  EXPECT_EQ(col.num_examples(), 5);
  // An empty order (a mapping that keeps no row) is no example, not "as they are".
  const RaggedColumn none = RaggedColumn::Gathered("tokens", DType::kInt32, {}, false, chunks,
                                                   std::span<const int64_t>(), nullptr);
  EXPECT_EQ(none.num_examples(), 0);
  EXPECT_EQ(none.max_length(), 0);
}

// CopyValues lays every example's bytes back to back in example order:
// compared with the examples read one by one, for a gathered (reordered)
// column, a contiguous one that starts past its buffer's first row, and a
// fixed one.
TEST(RaggedColumnTest, CopyValuesIsTheExamplesBackToBack) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8, 9};
  const std::vector<int64_t> a_offsets = {0, 2, 2, 5}, b_offsets = {1, 3, 4};
  const std::vector<RaggedColumn::Chunk> chunks = {{BytesOf(a), a_offsets, 3},
                                                   {BytesOf(b), b_offsets, 2}};
  const std::vector<int64_t> order = {4, 0, 3, 3, 1, 2};
  const std::vector<int64_t> tail_offsets = {1, 3, 5};
  const std::vector<RaggedColumn> columns = {
      RaggedColumn::Gathered("g", DType::kInt32, {}, false, chunks, order, nullptr),
      RaggedColumn::Ragged("r", DType::kInt32, {}, BytesOf(a), tail_offsets, nullptr),
      RaggedColumn::Fixed("f", DType::kInt32, {}, BytesOf(b), 4, nullptr)};
  for (const RaggedColumn& col : columns) {
    std::vector<uint8_t> want;
    for (int64_t i = 0; i < col.num_examples(); ++i) {
      const uint8_t* data = col.example_data(i);
      want.insert(want.end(), data, data + col.length(i) * col.row_bytes());
    }
    EXPECT_EQ(col.CopyValues(), want) << col.name();
  }
  EXPECT_EQ(columns[0].CopyValues().size(), 10u * 4u);  // [9] [1 2] [7 8] [7 8] [] [3 4 5]
}

TEST(RaggedColumnTest, GatheredFixedChunksAndBadInputNameTheExample) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  const std::vector<RaggedColumn::Chunk> chunks = {{BytesOf(a), {}, 2}, {BytesOf(b), {}, 1}};
  const std::vector<int64_t> order = {2, 1};
  const RaggedColumn col =
      RaggedColumn::Gathered("xy", DType::kFloat32, {2}, true, chunks, order, nullptr);
  ASSERT_EQ(col.num_examples(), 2);
  EXPECT_EQ(col.length(0), 1);
  EXPECT_EQ(col.example_data(0), reinterpret_cast<const uint8_t*>(&b[0]));
  EXPECT_EQ(col.example_data(1), reinterpret_cast<const uint8_t*>(&a[2]));
  // An order entry past the data.
  const std::vector<int64_t> bad_order = {0, 3};
  std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Gathered("xy", DType::kFloat32, {2}, true, chunks, bad_order, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "column 'xy', example 1")) << msg;
  EXPECT_TRUE(Contains(msg, "[0, 3)")) << msg;
  // A chunk that claims more elements than its buffer holds.
  const std::vector<RaggedColumn::Chunk> short_chunk = {{BytesOf(a), {}, 2}, {BytesOf(b), {}, 2}};
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::Gathered("xy", DType::kFloat32, {2}, true, short_chunk, {}, nullptr); });
  EXPECT_TRUE(Contains(msg, "first example is 2")) << msg;
  // Ragged offsets past a chunk's values.
  const std::vector<int32_t> v = {1, 2};
  const std::vector<int64_t> past = {0, 3};
  const std::vector<RaggedColumn::Chunk> past_chunk = {{BytesOf(v), past, 1}};
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::Gathered("tokens", DType::kInt32, {}, false, past_chunk, {}, nullptr); });
  EXPECT_TRUE(Contains(msg, "offsets run past the values")) << msg;
}

TEST(RaggedColumnTest, RaggedWithInnerShapeAndNonZeroFirstOffset) {
  // 7 rows of shape (2, 3); the column is a slice starting at row 2.
  std::vector<float> values(7 * 6);
  for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
  const std::vector<int64_t> offsets = {2, 4, 7};
  const RaggedColumn col = RaggedColumn::Ragged("x", DType::kFloat32, {2, 3}, values.data(), 7,
                                                offsets.data(), 2, nullptr);
  EXPECT_EQ(col.inner_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(col.inner_size(), 6);
  EXPECT_EQ(col.row_bytes(), 24);
  EXPECT_EQ(col.Lengths(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(col.max_length(), 3);
  EXPECT_EQ(col.example_data(0), reinterpret_cast<const uint8_t*>(&values[12]));
  EXPECT_EQ(col.example_data(1), reinterpret_cast<const uint8_t*>(&values[24]));
}

TEST(RaggedColumnTest, KeepsOwnerAlive) {
  auto storage = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{7, 8, 9});
  const std::vector<int64_t> offsets = {0, 1, 3};
  std::weak_ptr<std::vector<int64_t>> watch = storage;
  {
    const RaggedColumn col = RaggedColumn::Ragged("v", DType::kInt64, {}, storage->data(), 3,
                                                  offsets.data(), 2, storage);
    storage.reset();
    EXPECT_FALSE(watch.expired());
    int64_t second = 0;
    std::memcpy(&second, col.example_data(1), sizeof(second));
    EXPECT_EQ(second, 8);
  }
  EXPECT_TRUE(watch.expired());
}

TEST(RaggedColumnTest, FixedHasOneRowPerExample) {
  const std::vector<double> values = {1, 2, 3, 4, 5, 6};
  const RaggedColumn col =
      RaggedColumn::Fixed("pair", DType::kFloat64, {2}, values.data(), 3, nullptr);
  EXPECT_TRUE(col.is_fixed());
  EXPECT_EQ(col.num_examples(), 3);
  EXPECT_EQ(col.row_bytes(), 16);
  EXPECT_EQ(col.max_length(), 1);
  EXPECT_EQ(col.Lengths(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(col.example_data(2), reinterpret_cast<const uint8_t*>(&values[4]));
  const RaggedColumn empty = RaggedColumn::Fixed("e", DType::kInt8, {}, nullptr, 0, nullptr);
  EXPECT_EQ(empty.max_length(), 0);
  EXPECT_TRUE(empty.Lengths().empty());
}

TEST(RaggedColumnTest, FromPiecesCopiesRaggedPieces) {
  std::vector<int16_t> a = {1, 2, 3, 4, 5, 6};
  const std::vector<int16_t> c = {7, 8, 9};
  const std::vector<RaggedColumn::Piece> pieces = {
      {a.data(), DType::kInt16, {2, 3}},
      {nullptr, DType::kInt16, {0, 3}},
      {c.data(), DType::kInt16, {1, 3}},
  };
  const RaggedColumn col = RaggedColumn::FromPieces("p", DType::kInt16, {3}, false, pieces);
  a[0] = 100;  // The column holds its own copy.
  EXPECT_FALSE(col.is_fixed());
  EXPECT_EQ(col.Lengths(), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(col.max_length(), 2);
  std::vector<int16_t> first(6), last(3);
  std::memcpy(first.data(), col.example_data(0), 12);
  std::memcpy(last.data(), col.example_data(2), 6);
  EXPECT_EQ(first, (std::vector<int16_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(last, c);
}

TEST(RaggedColumnTest, FromPiecesCopiesFixedPieces) {
  const std::vector<float> a = {1, 2}, b = {3, 4};
  const std::vector<RaggedColumn::Piece> pieces = {{a.data(), DType::kFloat32, {2}},
                                                   {b.data(), DType::kFloat32, {2}}};
  const RaggedColumn col = RaggedColumn::FromPieces("f", DType::kFloat32, {2}, true, pieces);
  EXPECT_TRUE(col.is_fixed());
  EXPECT_EQ(col.num_examples(), 2);
  std::vector<float> second(2);
  std::memcpy(second.data(), col.example_data(1), 8);
  EXPECT_EQ(second, b);
}

TEST(RaggedColumnTest, DecreasingOffsetsNameColumnAndExample) {
  const std::vector<int32_t> values(5);
  const std::vector<int64_t> offsets = {0, 3, 2, 5};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Ragged("tokens", DType::kInt32, {}, values.data(), 5, offsets.data(), 3, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "column 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
}

TEST(RaggedColumnTest, OffsetsPastValuesNameColumnAndExample) {
  const std::vector<int32_t> values(5);
  const std::vector<int64_t> offsets = {0, 3, 6};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Ragged("tokens", DType::kInt32, {}, values.data(), 5, offsets.data(), 2, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "column 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
  EXPECT_TRUE(Contains(msg, "5 rows")) << msg;
}

TEST(RaggedColumnTest, NegativeFirstOffsetNamesColumnAndExample) {
  const std::vector<int32_t> values(5);
  const std::vector<int64_t> offsets = {-1, 2};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Ragged("ids", DType::kInt32, {}, values.data(), 5, offsets.data(), 1, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "column 'ids'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 0")) << msg;
}

// The crafted Arrow file of issue 15: offsets that claim 10,000,000 values
// over a values buffer of 40 bytes. The buffer is its own heap allocation,
// so under AddressSanitizer any read past it would fail the test.
TEST(RaggedColumnTest, OffsetsPastTheValuesBufferThrowNamingItsSize) {
  const auto values = std::make_unique<uint8_t[]>(40);  // 10 int32
  const std::vector<int64_t> offsets = {0, 5'000'000, 10'000'000};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Ragged("tokens", DType::kInt32, {}, {values.get(), 40}, offsets, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "column 'tokens', example 0")) << msg;
  EXPECT_TRUE(Contains(msg, "offsets[1]=5000000")) << msg;
  EXPECT_TRUE(Contains(msg, "10 rows (a values buffer of 40 bytes, rows of 4 bytes)")) << msg;
}

TEST(RaggedColumnTest, ValuesBufferBoundsOffsetsByWholeRows) {
  // 47 bytes hold one row of shape (2, 3) float32 (24 bytes), not two.
  const auto values = std::make_unique<uint8_t[]>(47);
  const std::vector<int64_t> fits = {0, 1};
  const RaggedColumn col =
      RaggedColumn::Ragged("x", DType::kFloat32, {2, 3}, {values.get(), 47}, fits, nullptr);
  EXPECT_EQ(col.Lengths(), (std::vector<int64_t>{1}));
  EXPECT_EQ(col.example_data(0), values.get());
  const std::vector<int64_t> past = {1, 2};
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Ragged("x", DType::kFloat32, {2, 3}, {values.get(), 47}, past, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "offsets[1]=2 but values hold 1 rows")) << msg;
  // No offsets at all, and rows of zero bytes (nothing to read past).
  EXPECT_THROW(RaggedColumn::Ragged("x", DType::kInt8, {}, {values.get(), 47}, {}, nullptr),
               InvalidArgumentError);
  const std::vector<int64_t> empty_rows = {0, 1'000'000};
  EXPECT_EQ(RaggedColumn::Ragged("e", DType::kInt8, {0}, {}, empty_rows, nullptr).max_length(),
            1'000'000);
}

TEST(RaggedColumnTest, FixedPastTheValuesBufferThrowsNamingItsSize) {
  const auto values = std::make_unique<uint8_t[]>(40);
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    RaggedColumn::Fixed("label", DType::kInt64, {}, {values.get(), 40}, 10'000'000, nullptr);
  });
  EXPECT_TRUE(Contains(msg, "column 'label'")) << msg;
  EXPECT_TRUE(Contains(msg, "expected 10000000 examples of 8 bytes")) << msg;
  EXPECT_TRUE(Contains(msg, "holds 40 bytes (5 examples)")) << msg;
  const RaggedColumn fits =
      RaggedColumn::Fixed("label", DType::kInt64, {}, {values.get(), 40}, 5, nullptr);
  EXPECT_EQ(fits.num_examples(), 5);
}

TEST(RaggedColumnTest, NegativeInnerDimensionThrows) {
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [] { RaggedColumn::Fixed("neg", DType::kInt32, {2, -1}, nullptr, 0, nullptr); });
  EXPECT_TRUE(Contains(msg, "column 'neg'")) << msg;
}

TEST(RaggedColumnTest, FromPiecesWrongDTypeNamesColumnAndExample) {
  const std::vector<int32_t> a = {1, 2};
  const std::vector<float> b = {1, 2};
  const std::vector<RaggedColumn::Piece> pieces = {{a.data(), DType::kInt32, {2}},
                                                   {b.data(), DType::kFloat32, {2}}};
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::FromPieces("tokens", DType::kInt32, {}, false, pieces); });
  EXPECT_TRUE(Contains(msg, "column 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
  EXPECT_TRUE(Contains(msg, "int32")) << msg;
  EXPECT_TRUE(Contains(msg, "float32")) << msg;
}

TEST(RaggedColumnTest, FromPiecesWrongRankNamesColumnAndExample) {
  const std::vector<float> data(6);
  const std::vector<RaggedColumn::Piece> pieces = {{data.data(), DType::kFloat32, {2, 3}},
                                                   {data.data(), DType::kFloat32, {1, 3}},
                                                   {data.data(), DType::kFloat32, {3}}};
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::FromPieces("emb", DType::kFloat32, {3}, false, pieces); });
  EXPECT_TRUE(Contains(msg, "column 'emb'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 2")) << msg;
  EXPECT_TRUE(Contains(msg, "rank 2")) << msg;
  EXPECT_TRUE(Contains(msg, "(n, 3)")) << msg;
}

TEST(RaggedColumnTest, FromPiecesWrongInnerShapeNamesColumnAndExample) {
  const std::vector<float> data(8);
  const std::vector<RaggedColumn::Piece> pieces = {{data.data(), DType::kFloat32, {2, 4}}};
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::FromPieces("emb", DType::kFloat32, {3}, false, pieces); });
  EXPECT_TRUE(Contains(msg, "column 'emb'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 0")) << msg;
  EXPECT_TRUE(Contains(msg, "(2, 4)")) << msg;
}

TEST(RaggedColumnTest, FromPiecesNegativeLeadingDimensionNamesTheExample) {
  const std::vector<int32_t> data(4);
  // Offsets 0, 1, -2, -1: the total goes negative before any check sees it.
  const std::vector<RaggedColumn::Piece> pieces = {{data.data(), DType::kInt32, {1}},
                                                   {data.data(), DType::kInt32, {-3}},
                                                   {data.data(), DType::kInt32, {1}}};
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::FromPieces("tokens", DType::kInt32, {}, false, pieces); });
  EXPECT_TRUE(Contains(msg, "column 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
}

TEST(RaggedColumnTest, FromPiecesFixedWithLeadingAxisThrows) {
  const std::vector<float> data(4);
  const std::vector<RaggedColumn::Piece> pieces = {{data.data(), DType::kFloat32, {2}},
                                                   {data.data(), DType::kFloat32, {1, 2}}};
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::FromPieces("feat", DType::kFloat32, {2}, true, pieces); });
  EXPECT_TRUE(Contains(msg, "column 'feat'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;
}

// ---- Dataset --------------------------------------------------------------

// Columns over vectors that outlive them.
struct Fixture {
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> offsets = {0, 2, 2, 6};        // lengths 2, 0, 4
  std::vector<int64_t> other_offsets = {0, 2, 3, 6};  // lengths 2, 1, 3
  std::vector<int64_t> ids = {10, 11, 12};

  RaggedColumn Ragged(const std::string& name, const std::vector<int64_t>& offs) const {
    return RaggedColumn::Ragged(name, DType::kInt32, {}, tokens.data(), 6, offs.data(),
                                static_cast<int64_t>(offs.size()) - 1, nullptr);
  }
  RaggedColumn Fixed(const std::string& name, int64_t n = 3) const {
    return RaggedColumn::Fixed(name, DType::kInt64, {}, ids.data(), n, nullptr);
  }
};

TEST(DatasetTest, HoldsColumnsAndAlignment) {
  const Fixture f;
  const Dataset ds({f.Fixed("id"), f.Ragged("tokens", f.offsets), f.Ragged("labels", f.offsets),
                    f.Ragged("other", f.other_offsets)},
                   {{"tokens", "labels"}});
  EXPECT_EQ(ds.num_examples(), 3);
  EXPECT_EQ(ds.columns().size(), 4u);
  EXPECT_EQ(ds.column("labels").Lengths(), (std::vector<int64_t>{2, 0, 4}));
  EXPECT_TRUE(ds.has_column("other"));
  EXPECT_FALSE(ds.has_column("nope"));
  EXPECT_EQ(ds.default_length_column(), "tokens");  // The first ragged column.
  EXPECT_TRUE(ds.AreAligned("tokens", "labels"));
  EXPECT_TRUE(ds.AreAligned("labels", "tokens"));
  EXPECT_TRUE(ds.AreAligned("other", "other"));
  EXPECT_FALSE(ds.AreAligned("tokens", "other"));
  EXPECT_EQ(ds.aligned_groups().size(), 1u);
}

TEST(DatasetTest, UnknownColumnListsColumns) {
  const Fixture f;
  const Dataset ds({f.Ragged("tokens", f.offsets), f.Fixed("id")});
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] { ds.column("labels"); });
  EXPECT_TRUE(Contains(msg, "'labels'")) << msg;
  EXPECT_TRUE(Contains(msg, "'tokens', 'id'")) << msg;
}

TEST(DatasetTest, AllFixedHasNoDefaultLengthColumn) {
  const Fixture f;
  const Dataset ds({f.Fixed("id")});
  EXPECT_THROW(ds.default_length_column(), InvalidArgumentError);
}

TEST(DatasetTest, DifferingExampleCountsNameBothColumns) {
  const Fixture f;
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Ragged("tokens", f.offsets), f.Fixed("id", 2)}); });
  EXPECT_TRUE(Contains(msg, "'tokens' has 3")) << msg;
  EXPECT_TRUE(Contains(msg, "'id' has 2")) << msg;
}

TEST(DatasetTest, ColumnsNamedLikeCollateOutputsThrowNamingBoth) {
  const Fixture f;
  for (const char* name :
       {"tokens_lengths", "tokens_mask", "tokens_segment_ids", "tokens_positions"}) {
    const std::string msg = ThrownMessage<InvalidArgumentError>(
        [&] { Dataset({f.Ragged("tokens", f.offsets), f.Fixed(name)}); });
    EXPECT_TRUE(Contains(msg, StrCat("column '", name, "' collides"))) << msg;
    EXPECT_TRUE(Contains(msg, "ragged column 'tokens'")) << msg;
  }
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Ragged("tokens", f.offsets), f.Fixed("example_index")}); });
  EXPECT_TRUE(Contains(msg, "column 'example_index' collides")) << msg;
  // A fixed column gets no derived outputs: "id_mask" beside a fixed "id" is fine.
  EXPECT_NO_THROW(Dataset({f.Ragged("tokens", f.offsets), f.Fixed("id"), f.Fixed("id_mask")}));
}

TEST(DatasetTest, DuplicateEmptyAndMissingColumnsThrow) {
  const Fixture f;
  const std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Ragged("tokens", f.offsets), f.Ragged("tokens", f.other_offsets)}); });
  EXPECT_TRUE(Contains(msg, "'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "twice")) << msg;
  EXPECT_THROW(Dataset({f.Fixed("")}), InvalidArgumentError);
  EXPECT_THROW(Dataset({}), InvalidArgumentError);
}

TEST(DatasetTest, AlignedColumnsWithDifferentLengthsNameTheExample) {
  const Fixture f;
  const std::string msg = ThrownMessage<InvalidArgumentError>([&] {
    Dataset({f.Ragged("tokens", f.offsets), f.Ragged("labels", f.other_offsets)},
            {{"tokens", "labels"}});
  });
  EXPECT_TRUE(Contains(msg, "'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "'labels'")) << msg;
  EXPECT_TRUE(Contains(msg, "example 1")) << msg;  // Lengths 0 vs 1.
}

TEST(DatasetTest, AlignedUnknownOrFixedColumnThrows) {
  const Fixture f;
  std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Ragged("tokens", f.offsets)}, {{"tokens", "labels"}}); });
  EXPECT_TRUE(Contains(msg, "'labels'")) << msg;
  EXPECT_TRUE(Contains(msg, "'tokens'")) << msg;
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Ragged("tokens", f.offsets), f.Fixed("id")}, {{"tokens", "id"}}); });
  EXPECT_TRUE(Contains(msg, "'id'")) << msg;
  EXPECT_TRUE(Contains(msg, "fixed")) << msg;
}

}  // namespace
}  // namespace jaxbatch
