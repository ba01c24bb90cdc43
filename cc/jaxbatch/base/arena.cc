#include "jaxbatch/base/arena.h"

#include "jaxbatch/base/error.h"

namespace jaxbatch {

// Shared with every outstanding buffer's deleter, so a buffer released after
// the arena is gone still finds its pool.
struct BufferArena::Pool {
  std::mutex mu;
  std::condition_variable released;
  struct Pooled {
    std::unique_ptr<uint8_t[]> buffer;
    uint64_t released_at = 0;  // for evicting the least recently released
  };
  std::multimap<size_t, Pooled> free;  // capacity -> buffer
  uint64_t clock = 0;
  int64_t limit = 0;
  int64_t max_pooled = -1;
  int64_t allocations = 0;
  int64_t in_use = 0;
  int64_t pooled = 0;
  int64_t waiting = 0;  // Acquire() calls blocked on the limit
  bool closed = false;

  void Release(uint8_t* data, size_t capacity) {
    std::unique_ptr<uint8_t[]> buffer(data);
    {
      std::lock_guard<std::mutex> lock(mu);
      in_use -= static_cast<int64_t>(capacity);
      const auto bytes = static_cast<int64_t>(capacity);
      if (!closed && (max_pooled < 0 || bytes <= max_pooled)) {
        // Over the cap, the least recently released buffers go first: sizes
        // a planner no longer produces make room for the ones in use now.
        while (max_pooled >= 0 && pooled + bytes > max_pooled && !free.empty()) {
          auto oldest = free.begin();
          for (auto it = free.begin(); it != free.end(); ++it) {
            if (it->second.released_at < oldest->second.released_at) oldest = it;
          }
          pooled -= static_cast<int64_t>(oldest->first);
          free.erase(oldest);
        }
        pooled += bytes;
        free.emplace(capacity, Pooled{std::move(buffer), ++clock});
      }
    }
    released.notify_all();
  }
};

BufferArena::BufferArena(int64_t limit_bytes, int64_t max_pooled_bytes)
    : pool_(std::make_shared<Pool>()) {
  pool_->limit = limit_bytes;
  pool_->max_pooled = max_pooled_bytes;
}

BufferArena& SharedArena() {
  static BufferArena* arena = new BufferArena(0, kSharedArenaPoolBytes);
  return *arena;
}

BufferArena::~BufferArena() { Close(); }

std::shared_ptr<void> BufferArena::Acquire(size_t bytes, uint8_t** data) {
  bytes = bytes == 0 ? 1 : bytes;
  std::unique_lock<std::mutex> lock(pool_->mu);
  Pool& pool = *pool_;
  if (pool.limit > 0 && static_cast<int64_t>(bytes) > pool.limit) {
    throw InvalidArgumentError(StrCat("host_memory_limit: one buffer needs ", bytes,
                                      " bytes but the limit is ", pool.limit,
                                      " bytes; raise host_memory_limit"));
  }
  // Buffers are reused by exact size: a planner's few shapes give a few
  // sizes, so each size's pool holds what is alive at once and no more.
  const size_t capacity = bytes;
  const auto fits = [&] {
    return pool.closed || pool.limit == 0 ||
           pool.in_use + static_cast<int64_t>(capacity) <= pool.limit;
  };
  if (!fits()) {
    ++pool.waiting;
    pool.released.wait(lock, fits);
    --pool.waiting;
  }
  if (pool.closed) throw Error("BufferArena: closed");
  std::unique_ptr<uint8_t[]> buffer;
  auto it = pool.free.find(capacity);
  if (it != pool.free.end()) {
    buffer = std::move(it->second.buffer);
    pool.free.erase(it);
    pool.pooled -= static_cast<int64_t>(capacity);
  } else {
    // Free pooled memory first when a limit is set and the pool holds it.
    while (pool.limit > 0 && !pool.free.empty() &&
           pool.in_use + pool.pooled + static_cast<int64_t>(capacity) > pool.limit) {
      pool.pooled -= static_cast<int64_t>(pool.free.begin()->first);
      pool.free.erase(pool.free.begin());
    }
    buffer = std::make_unique_for_overwrite<uint8_t[]>(capacity);
    ++pool.allocations;
  }
  pool.in_use += static_cast<int64_t>(capacity);
  *data = buffer.get();
  std::shared_ptr<Pool> keep = pool_;
  return std::shared_ptr<void>(buffer.release(), [keep, capacity](void* p) {
    keep->Release(static_cast<uint8_t*>(p), capacity);
  });
}

void BufferArena::Close() {
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    pool_->closed = true;
    pool_->free.clear();
    pool_->pooled = 0;
  }
  pool_->released.notify_all();
}

int64_t BufferArena::allocations() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->allocations;
}

int64_t BufferArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->in_use;
}

int64_t BufferArena::waiting() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->waiting;
}

int64_t BufferArena::bytes_pooled() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->pooled;
}

}  // namespace jaxbatch
