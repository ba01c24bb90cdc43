// Overflow-checked size arithmetic, in one place.
//
// Batch sizes, lengths and byte counts come from users and data, and their
// products (rows x length x item size) can pass 2^63: a wrapped product
// would size a buffer too small and the copy after it would write past it.
// Every size product in the planners and the collator goes through these.
//
// Example:
//   const std::optional<int64_t> elements = CheckedMul(rows, length);
//   if (!elements) throw InvalidArgumentError(StrCat("batch_size=", rows, " makes ..."));
#ifndef JAXBATCH_BASE_CHECKED_H_
#define JAXBATCH_BASE_CHECKED_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>

namespace jaxbatch {

inline constexpr int64_t kMaxSize = std::numeric_limits<int64_t>::max();

// a * b, or nullopt when it does not fit an int64.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of `factors`, or nullopt when it (or a partial product) does
// not fit an int64.
inline std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t out = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(out, f, &out)) return std::nullopt;
  }
  return out;
}

// a + b, or nullopt when it does not fit an int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// For counts >= 0 that may only grow (stats, costs): the sum or product,
// held at kMaxSize instead of wrapping negative.
inline int64_t SaturatingAdd(int64_t a, int64_t b) { return CheckedAdd(a, b).value_or(kMaxSize); }
inline int64_t SaturatingMul(int64_t a, int64_t b) { return CheckedMul(a, b).value_or(kMaxSize); }

// `value` >= 0 rounded up to a multiple of `multiple` > 0 (at least one
// multiple), or nullopt when that does not fit an int64.
inline std::optional<int64_t> CheckedRoundUp(int64_t value, int64_t multiple) {
  const int64_t units = value / multiple + (value % multiple != 0 ? 1 : 0);
  return CheckedMul(units > 0 ? units : 1, multiple);
}

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_CHECKED_H_
