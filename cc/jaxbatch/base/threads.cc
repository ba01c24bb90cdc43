#include "jaxbatch/base/threads.h"

#include <system_error>

#include "jaxbatch/base/error.h"

namespace jaxbatch {

void CheckThreadCount(int64_t count, std::string_view what) {
  if (count > kMaxThreads) {
    throw InvalidArgumentError(
        StrCat(what, " must be at most ", kMaxThreads, " threads, found ", count));
  }
}

std::vector<std::thread> StartThreads(int64_t count, const std::function<void(int64_t)>& body,
                                      const std::function<void()>& stop, std::string_view what) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t) {
    try {
      threads.emplace_back(body, t);
    } catch (const std::system_error& e) {
      stop();
      for (std::thread& thread : threads) thread.join();
      throw Error(StrCat(what, "=", count, ": the system could not start thread ", t + 1, " (",
                         e.what(), "); ", t,
                         " started were stopped; lower it or raise the process's limits"));
    }
  }
  return threads;
}

}  // namespace jaxbatch
