#include "jaxbatch/base/mapped_read.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// The threads inside a scope, found by the handler by thread id: a fixed
// table, since a signal handler may not allocate or touch thread_local
// storage (a dynamically loaded library's is allocated on first use).
struct Slot {
  std::atomic<int64_t> tid{0};  // 0: free
  std::atomic<MappedReadFaults*> faults{nullptr};
};
Slot g_slots[MappedReadScope::kMaxThreads];
std::atomic<int64_t> g_threads_in_scopes{0};

struct sigaction g_previous;  // SIGBUS's action before ours: every other fault goes there
uintptr_t g_page_bytes = 4096;

// What this thread knows of its scopes (never read by the handler).
struct ThreadScope {
  int64_t tid = 0;
  int slot = -1;
  int depth = 0;
  MappedReadFaults* faults = nullptr;
};
thread_local ThreadScope t_scope;

int64_t RawThreadId() { return static_cast<int64_t>(syscall(SYS_gettid)); }

int ClaimSlot(int64_t tid) {
  const auto start = static_cast<uint64_t>(tid) % MappedReadScope::kMaxThreads;
  for (int k = 0; k < MappedReadScope::kMaxThreads; ++k) {
    Slot& slot = g_slots[(start + static_cast<uint64_t>(k)) % MappedReadScope::kMaxThreads];
    int64_t free = 0;
    if (slot.tid.compare_exchange_strong(free, tid)) {
      g_threads_in_scopes.fetch_add(1);
      return static_cast<int>(&slot - g_slots);
    }
  }
  throw Error(StrCat("MappedReadScope: more than ", MappedReadScope::kMaxThreads,
                     " threads read memory-mapped data at once; use fewer threads"));
}

void ReleaseSlot(int slot) {
  g_slots[slot].faults.store(nullptr);
  g_slots[slot].tid.store(0);
  g_threads_in_scopes.fetch_sub(1);
}

// One line of /proc/self/maps.
struct Mapping {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  uint64_t offset = 0;  // of `begin` in the file
  uint64_t inode = 0;   // 0: not a file's
  int prot = 0;
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return 0;
}

// Parses /proc/self/maps as it is read, one character at a time (a line may
// span reads), into the mapping that holds `address`.
class MapsParser {
 public:
  MapsParser(uintptr_t address, char* path, int path_bytes)
      : address_(address), path_(path), path_bytes_(path_bytes) {}

  // Returns true once the line holding `address` is complete.
  bool Feed(char c) {
    if (c == '\n') {
      if (field_ >= kInode && field_ != kSkip) return true;
      *this = MapsParser(address_, path_, path_bytes_);
      return false;
    }
    switch (field_) {
      case kBegin:
        if (c == '-') {
          field_ = kEnd;
        } else {
          found_.begin = found_.begin * 16 + static_cast<uintptr_t>(HexDigit(c));
        }
        break;
      case kEnd:
        if (c == ' ') {
          field_ = found_.begin <= address_ && address_ < found_.end ? kPerms : kSkip;
        } else {
          found_.end = found_.end * 16 + static_cast<uintptr_t>(HexDigit(c));
        }
        break;
      case kPerms:
        if (c == ' ') field_ = kOffset;
        if (c == 'r') found_.prot |= PROT_READ;
        if (c == 'w') found_.prot |= PROT_WRITE;
        break;
      case kOffset:
        if (c == ' ') {
          field_ = kDevice;
        } else {
          found_.offset = found_.offset * 16 + static_cast<uint64_t>(HexDigit(c));
        }
        break;
      case kDevice:
        if (c == ' ') field_ = kInode;
        break;
      case kInode:
        if (c == ' ') {
          field_ = kPath;
        } else {
          found_.inode = found_.inode * 10 + static_cast<uint64_t>(c - '0');
        }
        break;
      case kPath:
        if (path_ != nullptr && (c != ' ' || path_length_ > 0) && path_length_ < path_bytes_ - 1) {
          path_[path_length_++] = c;
        }
        break;
      default:  // kSkip: another mapping's line
        break;
    }
    return false;
  }

  bool complete() const { return field_ >= kInode && field_ != kSkip; }
  const Mapping& found() const { return found_; }
  void TerminatePath() const {
    if (path_ != nullptr) path_[path_length_] = '\0';
  }

 private:
  enum Field { kBegin, kEnd, kPerms, kOffset, kDevice, kInode, kPath, kSkip };
  uintptr_t address_;
  char* path_;
  int path_bytes_;
  int path_length_ = 0;
  Field field_ = kBegin;
  Mapping found_;
};

enum class Lookup { kFound, kNotFound, kUnreadable };

// The mapping holding `address`, its file's name copied to `path` (when not
// null). Async-signal-safe: raw system calls and the stack only.
Lookup FindMapping(uintptr_t address, Mapping* mapping, char* path, int path_bytes) {
  const long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Lookup::kUnreadable;
  MapsParser parser(address, path, path_bytes);
  char buffer[512];
  bool found = false;
  Lookup result = Lookup::kNotFound;
  while (!found) {
    const long n = syscall(SYS_read, fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) result = Lookup::kUnreadable;
    if (n <= 0) break;
    for (long i = 0; i < n && !found; ++i) found = parser.Feed(buffer[i]);
  }
  syscall(SYS_close, fd);
  if (!found && !parser.complete()) return result;
  parser.TerminatePath();
  *mapping = parser.found();
  return Lookup::kFound;
}

}  // namespace

// The SIGBUS handler and what it needs of MappedReadFaults' internals.
struct MappedReadHandler {
  // Records the fault at `address` in `faults` and maps zero pages from its
  // page to the end of its file mapping; false when it is not a file
  // mapping's (or the pages cannot be mapped).
  static bool ZeroFill(MappedReadFaults& faults, uintptr_t address) {
    const uintptr_t page = address & ~(g_page_bytes - 1);
    uintptr_t end = 0;
    int prot = 0;
    if (faults.first_state_.load() == 2 && faults.region_begin_ <= address &&
        address < faults.region_end_) {
      end = faults.region_end_;
      prot = faults.region_prot_;
    } else {
      Mapping mapping;
      char path[MappedReadFaults::kPathBytes];
      const Lookup lookup = FindMapping(address, &mapping, path, sizeof(path));
      if (lookup == Lookup::kNotFound) return false;
      if (lookup == Lookup::kFound && mapping.inode == 0) {
        // Anonymous memory cannot fault so: another thread's fault on the same
        // mapping replaced the page since this one faulted. Run again, the
        // read finds the zeros; the fault still counts, for the bytes are lost.
        faults.count_.fetch_add(1);
        return true;
      }
      if (lookup == Lookup::kUnreadable) {  // No /proc: this page alone.
        mapping = Mapping{.begin = page, .end = page + g_page_bytes, .prot = PROT_READ};
      }
      end = mapping.end;
      prot = mapping.prot;
      int none = 0;
      if (faults.first_state_.compare_exchange_strong(none, 1)) {
        faults.region_begin_ = mapping.begin;
        faults.region_end_ = mapping.end;
        faults.region_prot_ = mapping.prot;
        faults.file_offset_ = mapping.offset + (address - mapping.begin);
        faults.named_ = lookup == Lookup::kFound;
        if (faults.named_) std::memcpy(faults.path_, path, sizeof(path));
        faults.first_state_.store(2);
      }
    }
    // Counted before the zeros appear: a thread that reads them (with no
    // fault of its own) then sees the count in the faults it shares.
    faults.count_.fetch_add(1);
    const long mapped =
        syscall(SYS_mmap, page, end - page, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return mapped == static_cast<long>(page);
  }

  static MappedReadFaults* FaultsOf(int64_t tid) {
    for (Slot& slot : g_slots) {
      if (slot.tid.load(std::memory_order_relaxed) == tid) return slot.faults.load();
    }
    return nullptr;
  }

  // What SIGBUS would have done without us.
  static void Chain(int sig, siginfo_t* info, void* context) {
    if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
    if ((g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler != SIG_DFL &&
        g_previous.sa_handler != SIG_IGN) {
      g_previous.sa_handler(sig);
      return;
    }
    const bool sent = info == nullptr || info->si_code <= 0;  // kill, tgkill, sigqueue
    if (sent && (g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler == SIG_IGN) {
      return;
    }
    // The default action (the kernel's too for an ignored fault): a fault
    // repeats when the read runs again on return, now fatal; a signal that
    // was sent is raised again.
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(sig, &fallback, nullptr);
    if (sent) raise(sig);
  }

  static void OnSigbus(int sig, siginfo_t* info, void* context) {
    const int saved_errno = errno;
    bool handled = false;
    if (info != nullptr && info->si_code == BUS_ADRERR && g_threads_in_scopes.load() > 0) {
      if (MappedReadFaults* faults = FaultsOf(RawThreadId())) {
        handled = ZeroFill(*faults, reinterpret_cast<uintptr_t>(info->si_addr));
      }
    }
    errno = saved_errno;
    if (!handled) Chain(sig, info, context);
  }

  static void InstallOnce() {
    static std::once_flag once;
    std::call_once(once, [] {
      g_page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      struct sigaction action = {};
      action.sa_sigaction = OnSigbus;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_SIGINFO | SA_RESTART;
      if (sigaction(SIGBUS, &action, &g_previous) != 0) {
        throw Error(
            StrCat("MappedReadScope: cannot install a SIGBUS handler: ", std::strerror(errno)));
      }
    });
  }
};

std::string MappedReadFaults::Message(std::string_view who) const {
  while (first_state_.load() == 1) std::this_thread::yield();  // A handler writes it now.
  const bool known = first_state_.load() == 2;
  const std::string file = known && named_ ? std::string(path_) : "a memory-mapped file";
  const std::string where =
      known && named_ ? StrCat(" at byte ", file_offset_, " of the file") : std::string();
  return StrCat(who, ": ", file, " was truncated while it was read (a read of its memory map",
                where,
                " found the file ended before it); the bytes past its new end are lost, and "
                "this process's mapping reads zeros there from now on: files must not be "
                "changed while they are read: write new data to a new path, and open it again");
}

void MappedReadFaults::ThrowIfFaulted(std::string_view who) const {
  if (faulted()) throw IoError(Message(who));
}

MappedReadScope::MappedReadScope(MappedReadFaults* faults) {
  MappedReadHandler::InstallOnce();
  ThreadScope& thread = t_scope;
  previous_ = thread.faults;
  faults_ = faults != nullptr ? faults : previous_ != nullptr ? previous_ : &own_;
  if (thread.depth == 0) {
    if (thread.tid == 0) thread.tid = RawThreadId();
    thread.slot = ClaimSlot(thread.tid);
  }
  g_slots[thread.slot].faults.store(faults_);
  thread.faults = faults_;
  ++thread.depth;
}

MappedReadScope::~MappedReadScope() {
  ThreadScope& thread = t_scope;
  --thread.depth;
  thread.faults = previous_;
  g_slots[thread.slot].faults.store(previous_);
  if (thread.depth == 0) {
    ReleaseSlot(thread.slot);
    thread.slot = -1;
  }
}

MappedReadFaults* MappedReadScope::Current() { return t_scope.faults; }

}  // namespace jaxbatch
