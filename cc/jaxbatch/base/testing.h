// Helpers shared by the GoogleTest suites (tests only).
#ifndef JAXBATCH_BASE_TESTING_H_
#define JAXBATCH_BASE_TESTING_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <string_view>
#include <utility>

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

// Runs `body` on a thread of its own and returns what it returns (rethrowing
// what it throws). A call still running after `limit` is a hang, and a hung
// test holds the whole suite: the binary then aborts, naming `what`, so the
// run fails at once instead of at the suite's timeout.
// Example:
//   testing::ReturnsWithin(std::chrono::seconds(60), "Loader::Close", [&] { loader.Close(); });
template <typename F>
auto ReturnsWithin(std::chrono::seconds limit, std::string_view what, F&& body) {
  auto result = std::async(std::launch::async, std::forward<F>(body));
  if (result.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "%.*s did not return within %lld s: a wait nobody wakes; aborting\n",
                 static_cast<int>(what.size()), what.data(), static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  return result.get();
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Expects `f` to throw an E whose message has `part`.
template <typename E, typename F>
void ExpectThrowsWith(F&& f, const std::string& part) {
  const std::string message = ThrownMessage<E>(std::forward<F>(f));
  EXPECT_TRUE(Contains(message, part)) << message;
}

}  // namespace jaxbatch::testing

#endif  // JAXBATCH_BASE_TESTING_H_
