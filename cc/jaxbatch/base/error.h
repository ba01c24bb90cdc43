// The core's few exception types. Every error the engine raises is one of
// these; the Python bindings map them in one place (cc/bindings/module.cc):
// InvalidArgumentError -> ValueError, OutOfRangeError -> IndexError,
// IoError -> OSError, any other Error -> RuntimeError.
//
// Messages say what (column, option), where (example, batch, file), what was
// expected and what was found, so they can be shown to a user as they are.
#ifndef JAXBATCH_BASE_ERROR_H_
#define JAXBATCH_BASE_ERROR_H_

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace jaxbatch {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input: a value the caller passed or data the caller owns.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// An index past the end of a sequence (a batch, an example, a column).
class OutOfRangeError : public Error {
 public:
  using Error::Error;
};

// A file or stream that cannot be read or written.
class IoError : public Error {
 public:
  using Error::Error;
};

// Builds a message from streamable parts.
// Example: throw InvalidArgumentError(StrCat("column '", name, "': ..."));
template <typename... Parts>
std::string StrCat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_ERROR_H_
