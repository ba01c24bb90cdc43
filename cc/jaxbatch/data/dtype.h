// Element types a column may hold. The set matches what JAX arrays hold on
// accelerators: bool, signed and unsigned integers, float16, bfloat16,
// float32 and float64. Names are numpy's (and ml_dtypes' "bfloat16").
#ifndef JAXBATCH_DATA_DTYPE_H_
#define JAXBATCH_DATA_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

// Writes `value` converted to `dtype` into `out` (ItemSize(dtype) bytes).
// Throws InvalidArgumentError when an integer or bool type cannot hold
// `value` exactly; `what` names the value in that message.
void EncodeScalar(double value, DType dtype, void* out, std::string_view what);

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_DTYPE_H_
