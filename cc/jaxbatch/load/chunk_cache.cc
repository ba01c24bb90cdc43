#include "jaxbatch/load/chunk_cache.h"

#include <algorithm>
#include <utility>

#include "jaxbatch/base/error.h"

namespace jaxbatch {

ChunkCache::ChunkCache(std::vector<int64_t> chunk_bytes, int64_t capacity_bytes)
    : chunk_bytes_(std::move(chunk_bytes)), capacity_(capacity_bytes) {
  for (size_t c = 0; c < chunk_bytes_.size(); ++c) {
    if (chunk_bytes_[c] < 0 || chunk_bytes_[c] > capacity_) {
      throw InvalidArgumentError(StrCat("ChunkCache: chunk ", c, " holds ", chunk_bytes_[c],
                                        " bytes decoded; expected at most the capacity of ",
                                        capacity_, " bytes"));
    }
  }
  slots_.resize(chunk_bytes_.size());
}

void ChunkCache::CheckOpen() const {
  if (!failure_.empty()) throw IoError(failure_);
  if (closed_) throw Error("ChunkCache: closed");
}

void ChunkCache::Unwant(int64_t chunk, int64_t priority) {
  requests_.erase(requests_.find({priority, chunk}));
  Slot& slot = slots_[static_cast<size_t>(chunk)];
  if (--slot.wanted == 0 && slot.state == State::kLoaded) {
    slot.last_use = ++tick_;
    evictable_.insert({slot.last_use, chunk});
    feeder_cv_.notify_all();
  }
}

void ChunkCache::Evict(int64_t chunk) {
  Slot& slot = slots_[static_cast<size_t>(chunk)];
  evictable_.erase({slot.last_use, chunk});
  slot.state = State::kAbsent;
  slot.data.reset();
  bytes_ -= chunk_bytes_[static_cast<size_t>(chunk)];
}

void ChunkCache::ForEach(std::span<const int64_t> chunks, int64_t priority,
                         const std::function<void(int64_t chunk, const Dataset& data)>& use) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckOpen();
  for (const int64_t c : chunks) {
    if (c < 0 || c >= num_chunks()) {
      throw OutOfRangeError(
          StrCat("ChunkCache: chunk ", c, " out of range; there are ", num_chunks(), " chunks"));
    }
  }
  std::vector<int64_t> pending(chunks.begin(), chunks.end());
  for (const int64_t c : pending) {
    Slot& slot = slots_[static_cast<size_t>(c)];
    if (slot.wanted++ == 0 && slot.state == State::kLoaded) evictable_.erase({slot.last_use, c});
    requests_.insert({priority, c});
  }
  feeder_cv_.notify_all();
  // Whatever ends this call, the chunks it did not use are no longer wanted.
  struct Release {
    ChunkCache* cache;
    std::vector<int64_t>* pending;
    int64_t priority;
    ~Release() {
      for (const int64_t c : *pending) cache->Unwant(c, priority);
    }
  } release{this, &pending, priority};
  const auto find_ready = [&] {
    return std::find_if(pending.begin(), pending.end(), [&](int64_t c) {
      const State state = slots_[static_cast<size_t>(c)].state;
      return state == State::kLoaded || state == State::kFailed;
    });
  };
  while (!pending.empty()) {
    // The closed and failed states are checked on every pass, not only after
    // a wakeup: a Close() or Fail(message) that came while `use` ran (the
    // lock released) notified nobody, and once the feeder has seen it no
    // chunk ever arrives to wake this wait.
    loaded_cv_.wait(lock,
                    [&] { return closed_ || !failure_.empty() || find_ready() != pending.end(); });
    CheckOpen();
    const auto ready = find_ready();
    if (slots_[static_cast<size_t>(*ready)].state == State::kFailed) {
      throw IoError(slots_[static_cast<size_t>(*ready)].failure);
    }
    const int64_t c = *ready;
    *ready = pending.back();
    pending.pop_back();
    std::shared_ptr<const Dataset> data = slots_[static_cast<size_t>(c)].data;
    lock.unlock();
    try {
      use(c, *data);
    } catch (...) {
      data.reset();
      lock.lock();
      Unwant(c, priority);
      throw;
    }
    data.reset();  // Before the chunk may be evicted: its memory goes with it.
    lock.lock();
    Unwant(c, priority);
  }
}

int64_t ChunkCache::NextRequest(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (closed_ || !failure_.empty()) return kClosed;
    const auto wanted = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) {
      return slots_[static_cast<size_t>(r.second)].state == State::kAbsent;
    });
    if (wanted != requests_.end()) {
      const int64_t c = wanted->second;
      const int64_t bytes = chunk_bytes_[static_cast<size_t>(c)];
      int64_t evictable_bytes = 0;
      for (const auto& [use, e] : evictable_)
        evictable_bytes += chunk_bytes_[static_cast<size_t>(e)];
      if (bytes_ - evictable_bytes + bytes <= capacity_) {
        while (bytes_ + bytes > capacity_) Evict(evictable_.begin()->second);
        slots_[static_cast<size_t>(c)].state = State::kReading;
        bytes_ += bytes;
        peak_bytes_ = std::max(peak_bytes_, bytes_);
        return c;
      }
    }
    if (feeder_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return kNoRequest;
  }
}

void ChunkCache::Provide(int64_t chunk, std::shared_ptr<const Dataset> data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || !failure_.empty()) return;
  if (chunk < 0 || chunk >= num_chunks() ||
      slots_[static_cast<size_t>(chunk)].state != State::kReading) {
    throw InvalidArgumentError(StrCat("ChunkCache: chunk ", chunk,
                                      " was provided but is not being read; expected a chunk "
                                      "that NextRequest gave out"));
  }
  Slot& slot = slots_[static_cast<size_t>(chunk)];
  slot.state = State::kLoaded;
  slot.data = std::move(data);
  ++reads_;
  if (slot.wanted == 0) {
    slot.last_use = ++tick_;
    evictable_.insert({slot.last_use, chunk});
  }
  loaded_cv_.notify_all();
}

void ChunkCache::Fail(int64_t chunk, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (chunk < 0 || chunk >= num_chunks() ||
        slots_[static_cast<size_t>(chunk)].state != State::kReading) {
      throw InvalidArgumentError(StrCat("ChunkCache: chunk ", chunk,
                                        " failed but is not being read; expected a chunk that "
                                        "NextRequest gave out"));
    }
    Slot& slot = slots_[static_cast<size_t>(chunk)];
    slot.state = State::kFailed;
    slot.failure = message.empty() ? StrCat("ChunkCache: chunk ", chunk, " failed") : message;
    bytes_ -= chunk_bytes_[static_cast<size_t>(chunk)];
  }
  loaded_cv_.notify_all();
  feeder_cv_.notify_all();
}

void ChunkCache::Fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = message.empty() ? "ChunkCache: a chunk failed" : message;
  }
  loaded_cv_.notify_all();
  feeder_cv_.notify_all();
}

void ChunkCache::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  loaded_cv_.notify_all();
  feeder_cv_.notify_all();
}

int64_t ChunkCache::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

int64_t ChunkCache::bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t ChunkCache::peak_bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bytes_;
}

}  // namespace jaxbatch
