// MappedReadScope: a read of a memory-mapped file that was truncated under
// the reader becomes an IoError naming the file instead of a SIGBUS that
// kills the process.
//
// numpy (np.load(mmap_mode="r")) and pyarrow (memory_map) map the files the
// engine then reads in place. Once another process truncates such a file,
// reading a page past its new end raises SIGBUS, whose default action kills
// the process. Checking the file's size before each read cannot prevent it:
// the truncation may land between the check and the read.
//
// While a thread is inside a scope, a SIGBUS that reports a read past the
// end of a file mapping (si_code BUS_ADRERR) is handled: the mapping's pages
// from the faulting one to its end are replaced by anonymous zero pages
// (every page after one past the end is past it too, so one fault per
// mapping), the fault is recorded in the scope's MappedReadFaults, and the
// read completes, finding zeros. Whoever owns the scope checks it after the
// reads and throws IoError naming the file rather than hand out what was
// read. Every other SIGBUS (outside a scope, sent by kill, a hardware error,
// a mapping that is not a file's) goes to the action installed before the
// first scope: a handler is called, the default action kills the process.
//
// Why zero pages rather than siglongjmp to a recovery point: jumping out of
// the read would skip the destructors of every frame in between (vectors,
// locks, std::function); returning lets them all unwind normally. So code
// that reads inside a scope must stay memory-safe when mapped bytes read as
// zeros: offsets from a mapping may then decrease, and a length computed
// from them must be clamped at 0 (RaggedColumn::Reader does).
//
// The handler is async-signal-safe and sanitizer-safe: raw system calls (no
// interceptor, no malloc), atomics, and a fixed table of the threads inside
// a scope (no thread_local, whose first use may allocate). A handler that is
// installed for SIGBUS after the first scope, and does not chain to the one
// before it, takes such faults first and the guard no longer applies.
//
// Example:
//   MappedReadFaults faults;
//   {
//     MappedReadScope scope(&faults);
//     std::memcpy(out, mapped, bytes);
//   }
//   faults.ThrowIfFaulted("collate");
//   // or, in one call:
//   GuardMappedReads("collate", [&] { std::memcpy(out, mapped, bytes); return 0; });
#ifndef JAXBATCH_BASE_MAPPED_READ_H_
#define JAXBATCH_BASE_MAPPED_READ_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace jaxbatch {

// What the reads of the scopes that share it hit: how many faults, and the
// first one's file. Its threads' scopes must end before it is destroyed.
class MappedReadFaults {
 public:
  MappedReadFaults() = default;
  MappedReadFaults(const MappedReadFaults&) = delete;
  MappedReadFaults& operator=(const MappedReadFaults&) = delete;

  // Sticky: true from the first fault on, so every later read of the same
  // mapping (now zeros, with no fault) is known to be lost too.
  bool faulted() const { return count_.load() > 0; }
  int64_t count() const { return count_.load(); }
  // "<who>: /data/d.arrow was truncated while it was read (...); <advice>".
  std::string Message(std::string_view who) const;
  // Throws IoError with Message(who) when faulted().
  void ThrowIfFaulted(std::string_view who) const;

 private:
  friend struct MappedReadHandler;
  static constexpr int kPathBytes = 4096;

  std::atomic<int64_t> count_{0};
  // The first fault's details: 0 none, 1 being written (by a handler on
  // another thread), 2 written.
  std::atomic<int> first_state_{0};
  uintptr_t region_begin_ = 0;  // its mapping, [begin, end), as /proc/self/maps had it
  uintptr_t region_end_ = 0;
  int region_prot_ = 0;
  uint64_t file_offset_ = 0;  // of the faulting byte in its file
  bool named_ = false;        // whether path_ holds the file's name
  char path_[kPathBytes];
};

// Guards this thread's reads of mapped files from its construction to its
// destruction (see the top of this file). Scopes nest on a thread: an inner
// one without `faults` records into the outer one's.
class MappedReadScope {
 public:
  // Records into `faults`; nullptr: into the enclosing scope's on this
  // thread, else into this scope's own (faults()). Throws Error when more
  // than kMaxThreads threads are inside scopes at once.
  explicit MappedReadScope(MappedReadFaults* faults = nullptr);
  ~MappedReadScope();
  MappedReadScope(const MappedReadScope&) = delete;
  MappedReadScope& operator=(const MappedReadScope&) = delete;

  MappedReadFaults& faults() { return *faults_; }
  // Where the scope this thread is inside records (nullptr outside any): what
  // a thread that reads on its behalf (a collation pool's) passes to its own.
  // Example:
  //   MappedReadFaults* parent = MappedReadScope::Current();
  //   std::thread helper([parent] {
  //     std::optional<MappedReadScope> scope;
  //     if (parent) scope.emplace(parent);
  //     Read();
  //   });
  static MappedReadFaults* Current();

  // Threads that may be inside scopes at once, in the whole process.
  static constexpr int kMaxThreads = 4096;

 private:
  MappedReadFaults own_;
  MappedReadFaults* faults_;
  MappedReadFaults* previous_;
};

// Runs fn() inside a MappedReadScope and throws IoError naming the file when
// a read faulted, even when fn() threw: what it threw followed from reading
// zeros (a length that no longer fits), not from the caller's input.
template <typename Fn>
auto GuardMappedReads(std::string_view who, Fn&& fn) {
  MappedReadScope scope;
  std::optional<decltype(fn())> result;
  try {
    result.emplace(fn());
  } catch (...) {
    scope.faults().ThrowIfFaulted(who);
    throw;
  }
  scope.faults().ThrowIfFaulted(who);
  return std::move(*result);
}

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_MAPPED_READ_H_
