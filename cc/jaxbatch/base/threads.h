// Starting worker threads without aborting the process.
//
// std::thread throws std::system_error when the system cannot start one
// (too many threads, no address space for its stack); a thread count from a
// user can be absurd (10^6). Both must end as an exception the caller sees,
// with the threads already started stopped and joined, never as
// std::terminate. Loader and Collate start their threads through here.
//
// Example:
//   CheckThreadCount(options.num_threads, "Loader: num_threads");
//   workers_ = StartThreads(n, [this](int64_t) { WorkerLoop(); },
//                           [this] { Stop(); }, "Loader: num_threads");
#ifndef JAXBATCH_BASE_THREADS_H_
#define JAXBATCH_BASE_THREADS_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

namespace jaxbatch {

// The most threads one loader or one collation may start: far above any
// useful count, far below what exhausts a process.
inline constexpr int64_t kMaxThreads = 1024;

// Throws InvalidArgumentError naming `what` when `count` is above kMaxThreads.
void CheckThreadCount(int64_t count, std::string_view what);

// Starts `count` threads, thread t running body(t). When one cannot be
// started, calls `stop` (which must make the started threads return),
// joins them and throws Error naming `what`, the count and how many started.
std::vector<std::thread> StartThreads(int64_t count, const std::function<void(int64_t)>& body,
                                      const std::function<void()>& stop, std::string_view what);

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_THREADS_H_
