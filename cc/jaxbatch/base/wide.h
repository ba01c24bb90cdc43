// 128-bit integers, for products of two int64 counts that must be exact
// (a proportion of a position, a weight times a token count) where a double
// would round differently on another machine and an int64 would wrap.
//
// Example:
//   const int64_t begin = MulDiv(num_examples, index, count);  // floor(n * i / c)
#ifndef JAXBATCH_BASE_WIDE_H_
#define JAXBATCH_BASE_WIDE_H_

#include <cstdint>

namespace jaxbatch {

// GCC's and Clang's 128-bit integers (__extension__: not ISO C++).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 Uint128;

// floor(a * b / c) for a, b >= 0 and c > 0, the product taken in 128 bits;
// the caller makes sure the result fits an int64 (b <= c does).
inline int64_t MulDiv(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<Uint128>(a) * static_cast<Uint128>(b) /
                              static_cast<Uint128>(c));
}

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_WIDE_H_
