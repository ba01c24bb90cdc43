// ChunkCache: decoded chunks of a data set larger than memory (Parquet row
// groups), held within a byte budget and shared by a loader's workers.
//
// The core cannot decode a chunk itself (pyarrow does, in a Python thread),
// so the cache is a meeting point between two sides:
//   - workers ask for the chunks a batch touches (ForEach) and use each one
//     as it arrives, in any order; a chunk is pinned while some worker still
//     wants it, so it is never evicted under a worker's feet;
//   - a feeder thread asks which chunk to read next (NextRequest), decodes
//     it and hands it over (Provide) as a Dataset that owns its memory.
// NextRequest gives out the most urgent wanted chunk (lowest priority number:
// a loader passes the batch's sequence number, so the batch the consumer
// waits for comes first), and only once the chunk fits the budget after
// evicting the least recently used chunks nobody wants. Every byte it counts
// is a chunk loaded or being read, so loaded + reading <= capacity holds at
// all times. A chunk larger than the whole capacity is refused up front:
// it could never load.
//
// Fail(chunk, message) marks a chunk that cannot be read: every ForEach
// that needs it throws IoError with the message, while others go on (so a
// loader yields every batch before the first that needs it). Fail(message)
// fails every chunk (the reader itself stopped). Close() wakes everyone.
//
// Example (a feeder thread):
//   while (true) {
//     const int64_t chunk = cache.NextRequest(std::chrono::milliseconds(50));
//     if (chunk == ChunkCache::kClosed) break;
//     if (chunk >= 0) cache.Provide(chunk, std::make_shared<const Dataset>(Decode(chunk)));
//   }
#ifndef JAXBATCH_LOAD_CHUNK_CACHE_H_
#define JAXBATCH_LOAD_CHUNK_CACHE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch {

class ChunkCache {
 public:
  static constexpr int64_t kNoRequest = -1;  // NextRequest timed out
  static constexpr int64_t kClosed = -2;     // the cache is closed: the feeder ends

  // `chunk_bytes[c]`: the bytes chunk c holds once decoded. Throws
  // InvalidArgumentError naming the first chunk larger than `capacity_bytes`.
  ChunkCache(std::vector<int64_t> chunk_bytes, int64_t capacity_bytes);
  ChunkCache(const ChunkCache&) = delete;
  ChunkCache& operator=(const ChunkCache&) = delete;

  // Calls use(chunk, data) once for each of `chunks` (distinct indices), in
  // the order they become available, from the calling thread. Throws IoError
  // with the message of a failed chunk it needs (or of Fail(message)), Error
  // after Close(), OutOfRangeError for an unknown chunk,
  // and whatever `use` throws (the chunks it did not use are released).
  void ForEach(std::span<const int64_t> chunks, int64_t priority,
               const std::function<void(int64_t chunk, const Dataset& data)>& use);

  // The next chunk to read (it then counts as reading until Provide), or
  // kNoRequest after `timeout`, or kClosed once closed or failed.
  int64_t NextRequest(std::chrono::milliseconds timeout);
  // Hands over a chunk NextRequest gave out. Ignored once closed or failed.
  // Throws InvalidArgumentError for a chunk that is not being read.
  void Provide(int64_t chunk, std::shared_ptr<const Dataset> data);
  // Fails `chunk` (one NextRequest gave out) with `message`.
  void Fail(int64_t chunk, const std::string& message);
  void Fail(const std::string& message);
  void Close();

  int64_t capacity_bytes() const { return capacity_; }
  int64_t num_chunks() const { return static_cast<int64_t>(slots_.size()); }
  int64_t reads() const;       // chunks provided so far (a chunk read twice counts twice)
  int64_t bytes_held() const;  // bytes of chunks loaded or being read now
  int64_t peak_bytes_held() const;

 private:
  enum class State { kAbsent, kReading, kLoaded, kFailed };
  struct Slot {
    State state = State::kAbsent;
    std::shared_ptr<const Dataset> data;
    int64_t wanted = 0;  // ForEach calls that still need this chunk
    int64_t last_use = 0;
    std::string failure;  // kFailed: why
  };

  // A request's chunk is no longer needed by one caller; called with mu_ held.
  void Unwant(int64_t chunk, int64_t priority);
  void Evict(int64_t chunk);
  void CheckOpen() const;

  const std::vector<int64_t> chunk_bytes_;
  const int64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable loaded_cv_;  // a chunk loaded, or closed/failed
  std::condition_variable feeder_cv_;  // a request or free space arrived
  std::vector<Slot> slots_;
  std::multiset<std::pair<int64_t, int64_t>> requests_;  // (priority, chunk) per wanting call
  std::set<std::pair<int64_t, int64_t>> evictable_;      // (last use, chunk): loaded, unwanted
  int64_t bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t reads_ = 0;
  int64_t tick_ = 0;
  bool closed_ = false;
  std::string failure_;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_CHUNK_CACHE_H_
