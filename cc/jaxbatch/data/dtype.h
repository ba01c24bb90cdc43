// Element types a column may hold. The set matches what JAX arrays hold on
// accelerators: bool, signed and unsigned integers, float16, bfloat16,
// float32 and float64. Names are numpy's (and ml_dtypes' "bfloat16").
#ifndef JAXBATCH_DATA_DTYPE_H_
#define JAXBATCH_DATA_DTYPE_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace jaxbatch {

enum class DType : uint8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};

// Bytes per element.
size_t ItemSize(DType dtype);

// numpy's name for the type ("int32", "bfloat16", ...).
std::string_view DTypeName(DType dtype);

// Parses a numpy dtype name; throws InvalidArgumentError naming `what` and
// listing the supported names when `name` is not one of them.
DType ParseDType(std::string_view name, std::string_view what);

// True for float16, bfloat16, float32, float64.
bool IsFloating(DType dtype);

// One value as a caller gave it: an exact signed or unsigned 64-bit integer,
// or a float. Integers are not routed through a double, so 2^53 + 1 stays
// itself and int64's and uint64's largest values are representable.
// Example:
//   Scalar pad = uint64_t{18446744073709551615u};  // or -1, or 0.5
class Scalar {
 public:
  using Value = std::variant<int64_t, uint64_t, double>;
  Scalar() = default;
  Scalar(double value) : value_(value) {}  // NOLINT: implicit, like the number itself
  template <std::integral T>
  Scalar(T value) {  // NOLINT: implicit, like the number itself
    if constexpr (std::is_signed_v<T> || std::is_same_v<T, bool>) {
      value_ = static_cast<int64_t>(value);
    } else {
      value_ = static_cast<uint64_t>(value);
    }
  }
  const Value& value() const { return value_; }
  friend bool operator==(const Scalar&, const Scalar&) = default;

 private:
  Value value_ = int64_t{0};
};

// Writes `value` converted to `dtype` into `out` (ItemSize(dtype) bytes).
// Integers are range-checked exactly; a float into an integer or bool type
// must be integral and in range; an integer into a float type rounds to the
// nearest value, as numpy does. Throws InvalidArgumentError when `dtype`
// cannot hold `value`; `what` names the value in that message.
void EncodeScalar(const Scalar& value, DType dtype, void* out, std::string_view what);

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_DTYPE_H_
