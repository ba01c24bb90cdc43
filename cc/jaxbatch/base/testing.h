// Helpers shared by the GoogleTest suites (tests only).
#ifndef JAXBATCH_BASE_TESTING_H_
#define JAXBATCH_BASE_TESTING_H_

#include <gtest/gtest.h>

#include <string>

namespace jaxbatch::testing {

// The message of the E that `f` throws ("" and a test failure when none).
template <typename E, typename F>
std::string ThrownMessage(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception, none was thrown";
  return "";
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace jaxbatch::testing

#endif  // JAXBATCH_BASE_TESTING_H_
