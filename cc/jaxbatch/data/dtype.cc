#include "jaxbatch/data/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <utility>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::kBool, "bool", 1},
    {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt8, "uint8", 1},
    {DType::kUInt16, "uint16", 2},
    {DType::kUInt32, "uint32", 4},
    {DType::kUInt64, "uint64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
}};

// IEEE binary16 from float, round to nearest even.
uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN.
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // Overflow.
  if (abs < 0x38800000u) {  // Subnormal or zero in half precision.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // 2^24.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// The value as text, integers exactly, floats with enough digits to tell
// 2^63 from 2^63 - 1.
std::string ScalarText(const Scalar& scalar) {
  return std::visit(
      [](auto value) {
        std::ostringstream out;
        out << std::setprecision(17) << value;
        return out.str();
      },
      scalar.value());
}

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

template <typename T>
void EncodeInteger(const Scalar& scalar, void* out, std::string_view what, DType dtype) {
  T v{};
  const bool fits = std::visit(
      [&](auto value) {
        if constexpr (std::is_same_v<decltype(value), double>) {
          // T's max (2^digits - 1) rounds up to 2^digits as a double for
          // 64-bit types, so compare against 2^digits exclusively: casting
          // 2^63 to int64 is undefined behaviour.
          const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits);
          const bool ok = std::isfinite(value) && value == std::floor(value) &&
                          value >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                          value < limit;
          if (ok) v = static_cast<T>(value);
          return ok;
        } else {
          const bool ok = std::in_range<T>(value);
          if (ok) v = static_cast<T>(value);
          return ok;
        }
      },
      scalar.value());
  if (!fits) {
    throw InvalidArgumentError(StrCat(what, ": expected a value representable as ",
                                      DTypeName(dtype), ", found ", ScalarText(scalar)));
  }
  std::memcpy(out, &v, sizeof(T));
}

}  // namespace

size_t ItemSize(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].size; }

std::string_view DTypeName(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].name; }

DType ParseDType(std::string_view name, std::string_view what) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  std::string supported;
  for (const DTypeInfo& info : kDTypes) {
    supported += supported.empty() ? "" : ", ";
    supported += info.name;
  }
  throw InvalidArgumentError(
      StrCat(what, ": unsupported dtype '", name, "'; expected one of ", supported));
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 || dtype == DType::kFloat32 ||
         dtype == DType::kFloat64;
}

void EncodeScalar(const Scalar& scalar, DType dtype, void* out, std::string_view what) {
  // Every float type takes the value as a double (an integer rounds to the
  // nearest, as numpy does).
  const double value = std::visit([](auto v) { return static_cast<double>(v); }, scalar.value());
  switch (dtype) {
    case DType::kBool: {
      const bool zero = std::visit([](auto v) { return v == 0; }, scalar.value());
      const bool one = std::visit([](auto v) { return v == 1; }, scalar.value());
      if (!zero && !one) {
        throw InvalidArgumentError(
            StrCat(what, ": expected 0 or 1 for a bool column, found ", ScalarText(scalar)));
      }
      const uint8_t v = one;
      std::memcpy(out, &v, 1);
      return;
    }
    case DType::kInt8:
      return EncodeInteger<int8_t>(scalar, out, what, dtype);
    case DType::kInt16:
      return EncodeInteger<int16_t>(scalar, out, what, dtype);
    case DType::kInt32:
      return EncodeInteger<int32_t>(scalar, out, what, dtype);
    case DType::kInt64:
      return EncodeInteger<int64_t>(scalar, out, what, dtype);
    case DType::kUInt8:
      return EncodeInteger<uint8_t>(scalar, out, what, dtype);
    case DType::kUInt16:
      return EncodeInteger<uint16_t>(scalar, out, what, dtype);
    case DType::kUInt32:
      return EncodeInteger<uint32_t>(scalar, out, what, dtype);
    case DType::kUInt64:
      return EncodeInteger<uint64_t>(scalar, out, what, dtype);
    case DType::kFloat16: {
      const uint16_t v = FloatToHalf(static_cast<float>(value));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t v = FloatToBFloat16(static_cast<float>(value));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(out, &v, 4);
      return;
    }
    case DType::kFloat64:
      std::memcpy(out, &value, 8);
      return;
  }
}

}  // namespace jaxbatch
