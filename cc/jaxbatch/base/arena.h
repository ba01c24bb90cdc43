// BufferArena: reusable output buffers for collated batches.
//
// A batch's arrays are allocated from the arena; when the last user (a numpy
// array in Python) lets go, the buffer goes back to the arena instead of the
// allocator, so a loader in steady state allocates nothing per batch
// (allocations() stops growing). An optional limit bounds the bytes handed
// out at once: Acquire() then waits until enough comes back.
//
// SharedArena() is the process-wide arena collation uses by default (when
// CollateOptions has no allocator), so repeated Collate() calls reuse memory
// instead of faulting in fresh pages; it pools at most kSharedArenaPoolBytes.
//
// Example:
//   BufferArena arena(/*limit_bytes=*/0);
//   uint8_t* data;
//   std::shared_ptr<void> owner = arena.Acquire(1 << 20, &data);
//   owner.reset();  // the buffer is free for the next Acquire of its size
#ifndef JAXBATCH_BASE_ARENA_H_
#define JAXBATCH_BASE_ARENA_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace jaxbatch {

inline constexpr int64_t kSharedArenaPoolBytes = int64_t{512} << 20;

class BufferArena {
 public:
  // limit_bytes = 0: no limit on bytes handed out at once.
  // max_pooled_bytes < 0: keep every released buffer for reuse; otherwise a
  // release that would pool more than that first frees the least recently
  // released buffers.
  explicit BufferArena(int64_t limit_bytes = 0, int64_t max_pooled_bytes = -1);
  ~BufferArena();
  BufferArena(const BufferArena&) = delete;
  BufferArena& operator=(const BufferArena&) = delete;

  // A buffer of `bytes` (a pooled one of that size if any); `*data` points at it, the returned
  // owner keeps it out of the pool. Waits while the limit would be exceeded. Throws
  // InvalidArgumentError when `bytes` alone exceeds the limit, and Error once Close() was called.
  std::shared_ptr<void> Acquire(size_t bytes, uint8_t** data);

  // Wakes and fails every waiting Acquire; later releases free their memory.
  void Close();

  int64_t allocations() const;   // buffers ever allocated
  int64_t bytes_in_use() const;  // bytes handed out now
  int64_t bytes_pooled() const;  // bytes waiting in the pool
  int64_t waiting() const;       // Acquire() calls blocked until bytes come back

 private:
  struct Pool;
  std::shared_ptr<Pool> pool_;
};

// The process-wide arena (never destroyed; buffers may outlive any caller).
BufferArena& SharedArena();

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_ARENA_H_
