// collate_bound: jaxbatch's collation against the physical bound of its work.
//
// For one dataset (a ragged int32 "tokens" column whose values are 0, 1, 2,
// ... so a misplaced copy shows) and one batch plan, three collators fill
// every batch of the plan with the same number of threads into preallocated,
// reused buffers:
//   jaxbatch  the core API: Collate(ds, plan, b, options) with an allocator
//             that hands out the same reused buffers every batch;
//   simple    the simple bound, the least work that writes the same arrays:
//             per row one memcpy of the example's bytes, one memset of the
//             padding, and the mask/lengths (padded) or segment
//             ids/positions/lengths (packed) and example_index written in
//             the same pass, rows split over fresh threads per batch the
//             same way;
//   fast      the fast bound, that pass as an expert would tune it: a
//             persistent thread pool (same thread count), software prefetch
//             of the examples ahead, short rows cleared in bulk, and
//             optionally non-temporal stores (FastConfig below).
// Every batch's arrays are first checked byte-equal between jaxbatch and
// each bound; then they run in turn, batch by batch, for `reps`
// repetitions, and the program prints one JSON object: per-repetition
// seconds of each (jaxbatch_seconds, bound_seconds for the simple bound,
// fast_bound_seconds, and `variants`: the fast bound with other configs, to
// measure each trick), and memcpy bandwidth of the machine (one thread, and
// `threads` threads) for context. bench/bench_core.py runs it and prints the
// table.
//
// Usage:
//   collate_bound (--lengths FILE | --synthetic N) --plan PLAN [--threads T] [--reps R]
//                 [--fast CONFIG] [--variant CONFIG]... [--evict-mb MB]
//   FILE: raw little-endian int64 lengths (numpy's ndarray.tofile)
//   --synthetic N: N lognormal lengths (median 100, sigma 0.8, clipped to [1, 2048])
//   PLAN: autobuckets:MAX_SHAPES:TOKEN_BUDGET | pack:ROW_LENGTH:ROWS_PER_BATCH
//   CONFIG: KEY=VALUE,... over the fast bound's defaults (FastConfig), e.g.
//           --variant pool=0 --variant prefetch=0 --variant bulk=0 --variant nt=0
//   --evict-mb MB: read MB of other memory before each timed batch (untimed),
//           so that every collator starts with cold caches.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/jaxbatch.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace {

using jaxbatch::Array;
using jaxbatch::BatchPlan;
using jaxbatch::BatchView;
using jaxbatch::Dataset;

constexpr size_t kAlign = 64;

// One preallocated buffer handed out front to back and rewound per batch, so
// both collators write into the same already-faulted memory every batch.
class Slab {
 public:
  explicit Slab(size_t bytes) : bytes_(bytes), data_(new uint8_t[bytes + kAlign]) {
    std::memset(data_.get(), 0, bytes + kAlign);  // Fault every page in now.
  }
  void Rewind() { used_ = 0; }
  uint8_t* Take(size_t bytes) {
    auto base = reinterpret_cast<uintptr_t>(data_.get());
    const size_t start = ((base + used_ + kAlign - 1) & ~(kAlign - 1)) - base;
    if (start + bytes > bytes_ + kAlign) throw std::runtime_error("slab too small");
    used_ = start + bytes;
    return data_.get() + start;
  }

 private:
  size_t bytes_;
  size_t used_ = 0;
  std::unique_ptr<uint8_t[]> data_;
};

// Runs body(r0, r1) over rows [0, rows) split into `threads` ranges, the
// way the collator splits them (floor(rows * t / threads)).
void ForRows(int64_t rows, int64_t threads, const std::function<void(int64_t, int64_t)>& body) {
  auto split = [&](int64_t t) { return rows / threads * t + rows % threads * t / threads; };
  if (threads <= 1) return body(0, rows);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { body(split(t), split(t + 1)); });
  }
  for (std::thread& thread : pool) thread.join();
}

// The threads the collator uses for a batch of `bytes` (collator.cc's rule).
int64_t ThreadsFor(int64_t bytes, int64_t rows, int64_t max_threads) {
  return std::clamp<int64_t>(std::min(max_threads, bytes / jaxbatch::kDefaultMinBytesPerThread), 1,
                             std::max<int64_t>(rows, 1));
}

struct BoundArrays {
  std::vector<std::pair<std::string, std::pair<uint8_t*, size_t>>> arrays;
};

// The arrays a padded batch of the "tokens" column holds, as Collate names them.
BoundArrays PaddedArrays(int32_t* tokens, uint8_t* mask, int32_t* lengths, int64_t* index,
                         size_t cells, int64_t rows) {
  const auto n = static_cast<size_t>(rows);
  return {{{"tokens", {reinterpret_cast<uint8_t*>(tokens), cells * 4}},
           {"tokens_mask", {mask, cells}},
           {"tokens_lengths", {reinterpret_cast<uint8_t*>(lengths), n * 4}},
           {"example_index", {reinterpret_cast<uint8_t*>(index), n * 8}}}};
}

// The arrays a packed batch holds: `cells` tokens, `slots` segment slots.
BoundArrays PackedArrays(int32_t* tokens, int32_t* ids, int32_t* pos, int32_t* lens,
                         int32_t* starts, int64_t* index, size_t cells, size_t slots) {
  return {{{"tokens", {reinterpret_cast<uint8_t*>(tokens), cells * 4}},
           {"tokens_segment_ids", {reinterpret_cast<uint8_t*>(ids), cells * 4}},
           {"tokens_positions", {reinterpret_cast<uint8_t*>(pos), cells * 4}},
           {"tokens_lengths", {reinterpret_cast<uint8_t*>(lens), slots * 4}},
           {"tokens_segment_starts", {reinterpret_cast<uint8_t*>(starts), slots * 4}},
           {"example_index", {reinterpret_cast<uint8_t*>(index), slots * 8}}}};
}

// Rows [r0, r1) of the segment starts: the running sum of the lengths
// before each slot, as the collator writes them.
void FillStarts(const int32_t* lens, int32_t* starts, int64_t segs, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    int32_t start = 0;
    for (int64_t s = r * segs; s < (r + 1) * segs; ++s) {
      starts[s] = start;
      start += lens[s];
    }
  }
}

// The bound: the same arrays as Collate() for a single int32 ragged column,
// written in one pass per row.
class Bound {
 public:
  Bound(const int32_t* values, const int64_t* offsets, int64_t max_threads)
      : values_(values), offsets_(offsets), max_threads_(max_threads) {}

  BoundArrays Run(const BatchView& view, bool packed, Slab& slab) const {
    return packed ? Packed(view, slab) : Padded(view, slab);
  }

 private:
  BoundArrays Padded(const BatchView& view, Slab& slab) const {
    const int64_t rows = view.shape.rows, length = view.shape.length;
    const size_t cells = static_cast<size_t>(rows * length);
    auto* tokens = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    uint8_t* mask = slab.Take(cells);
    auto* lengths = reinterpret_cast<int32_t*>(slab.Take(static_cast<size_t>(rows) * 4));
    auto* index = reinterpret_cast<int64_t*>(slab.Take(static_cast<size_t>(rows) * 8));
    const int64_t bytes = static_cast<int64_t>(cells * 5) + rows * 12;
    ForRows(rows, ThreadsFor(bytes, rows, max_threads_), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const std::span<const int64_t> ex = view.row_examples(r);
        const int64_t e = ex.empty() ? -1 : ex[0];
        const int64_t n = e < 0 ? 0 : offsets_[e + 1] - offsets_[e];
        int32_t* row = tokens + r * length;
        if (n > 0) std::memcpy(row, values_ + offsets_[e], static_cast<size_t>(n) * 4);
        std::memset(row + n, 0, static_cast<size_t>(length - n) * 4);
        std::memset(mask + r * length, 1, static_cast<size_t>(n));
        std::memset(mask + r * length + n, 0, static_cast<size_t>(length - n));
        lengths[r] = static_cast<int32_t>(n);
        index[r] = e;
      }
    });
    return PaddedArrays(tokens, mask, lengths, index, cells, rows);
  }

  BoundArrays Packed(const BatchView& view, Slab& slab) const {
    const int64_t rows = view.shape.rows, length = view.shape.length, segs = view.shape.segments;
    const size_t cells = static_cast<size_t>(rows * length);
    const size_t slots = static_cast<size_t>(rows * segs);
    auto* tokens = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* ids = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* pos = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* lens = reinterpret_cast<int32_t*>(slab.Take(slots * 4));
    auto* starts = reinterpret_cast<int32_t*>(slab.Take(slots * 4));
    auto* index = reinterpret_cast<int64_t*>(slab.Take(slots * 8));
    const int64_t bytes = static_cast<int64_t>(cells * 12 + slots * 16);
    ForRows(rows, ThreadsFor(bytes, rows, max_threads_), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const std::span<const int64_t> ex = view.row_examples(r);
        int32_t* row = tokens + r * length;
        int32_t* row_ids = ids + r * length;
        int32_t* row_pos = pos + r * length;
        int64_t used = 0;
        int32_t s = 0;
        for (int64_t e : ex) {
          const int64_t n = offsets_[e + 1] - offsets_[e];
          if (n > 0) std::memcpy(row + used, values_ + offsets_[e], static_cast<size_t>(n) * 4);
          ++s;
          for (int64_t k = 0; k < n; ++k) {
            row_ids[used + k] = s;
            row_pos[used + k] = static_cast<int32_t>(k);
          }
          lens[r * segs + s - 1] = static_cast<int32_t>(n);
          index[r * segs + s - 1] = e;
          used += n;
        }
        const auto tail = static_cast<size_t>(length - used) * 4;
        std::memset(row + used, 0, tail);
        std::memset(row_ids + used, 0, tail);
        std::memset(row_pos + used, 0, tail);
        std::fill(lens + r * segs + s, lens + (r + 1) * segs, 0);
        std::fill(index + r * segs + s, index + (r + 1) * segs, -1);
      }
      FillStarts(lens, starts, segs, r0, r1);
    });
    return PackedArrays(tokens, ids, pos, lens, starts, index, cells, slots);
  }

  const int32_t* values_;
  const int64_t* offsets_;
  int64_t max_threads_;
};

// ------------------------------------------------------------ the fast bound

#if defined(__SSE2__)
inline void Pause() { _mm_pause(); }
#else
inline void Pause() {}
#endif

// Persistent workers for the fast bound: threads - 1 made once and woken per
// batch; the calling thread takes part 0. A waiting thread spins `spin`
// pauses before it sleeps (C++20 atomic wait), so that back-to-back batches
// skip the futex while an idle pool does not hold a core for long.
class Pool {
 public:
  Pool(int64_t threads, int64_t spin) : spin_(spin) {
    for (int64_t t = 1; t < threads; ++t) workers_.emplace_back([this, t] { Work(t); });
  }
  ~Pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Runs job(t) for t in [0, n) and returns when every part is done; n is at
  // most the pool's threads. Every worker wakes; those at t >= n skip.
  void Run(int64_t n, const std::function<void(int64_t)>& job) {
    if (n <= 1 || workers_.empty()) return job(0);
    job_ = &job;
    parts_ = n;
    pending_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    job(0);
    for (int64_t i = 0;; ++i) {
      const uint32_t left = pending_.load(std::memory_order_acquire);
      if (left == 0) break;
      if (i < spin_) {
        Pause();
      } else {
        pending_.wait(left, std::memory_order_acquire);
      }
    }
  }

 private:
  void Work(int64_t t) {
    uint32_t seen = 0;
    for (;;) {
      for (int64_t i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
        if (i < spin_) {
          Pause();
        } else {
          generation_.wait(seen, std::memory_order_acquire);
        }
      }
      // Run() waits for every worker, so the generation moved by exactly one.
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (t < parts_) (*job_)(t);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  int64_t spin_;
  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t parts_ = 0;
};

// Runs job(t) for t in [0, n) on n fresh threads, as ForRows and the collator do.
void Spawn(int64_t n, const std::function<void(int64_t)>& job) {
  if (n <= 1) return job(0);
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < n; ++t) threads.emplace_back([&job, t] { job(t); });
  for (std::thread& thread : threads) thread.join();
}

// Copies `bytes` with non-temporal 16-byte stores where the destination is
// aligned (plain stores for the unaligned head and the tail), so the batch
// bypasses the caches and its lines are not read for ownership first.
void StreamCopy(uint8_t* dst, const uint8_t* src, size_t bytes) {
#if defined(__SSE2__)
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    for (size_t k = 0; k < 64; k += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + k)));
    }
  }
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void StoreFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// The fast bound's tricks, each of which can be turned off to measure it
// (--variant KEY=VALUE,...):
//   pool=1          persistent threads (0: fresh threads per batch);
//   spin=N          pauses a pool thread spins before it sleeps;
//   prefetch=D      software prefetch of the example D examples ahead (0: none);
//   prefetch_bytes=B  of each such example's first B bytes;
//   bulk=B          rows of under B bytes of tokens: the batch's arrays are
//                   cleared once and only the real data written, instead of
//                   a memset of each row's tail (0: never; a large B: always);
//   nt=B            batches of at least B bytes composed in an L1 block and
//                   written out with non-temporal stores (off: never).
struct FastConfig {
  bool pool = true;
  int64_t spin = 2000;
  int64_t prefetch = 8;
  int64_t prefetch_bytes = 512;
  int64_t bulk = 512;
  int64_t nt = std::numeric_limits<int64_t>::max();

  std::string Name() const {
    const std::string nt_name =
        nt == std::numeric_limits<int64_t>::max() ? "off" : std::to_string(nt);
    return "pool=" + std::to_string(pool) + ",spin=" + std::to_string(spin) +
           ",prefetch=" + std::to_string(prefetch) +
           ",prefetch_bytes=" + std::to_string(prefetch_bytes) + ",bulk=" + std::to_string(bulk) +
           ",nt=" + nt_name;
  }

  // "key=value,..." over the defaults.
  static FastConfig Parse(const std::string& spec) {
    FastConfig c;
    size_t at = 0;
    while (at < spec.size()) {
      const size_t comma = std::min(spec.find(',', at), spec.size());
      const std::string item = spec.substr(at, comma - at);
      at = comma + 1;
      const size_t eq = item.find('=');
      if (eq == std::string::npos)
        throw std::runtime_error("--variant: expected KEY=VALUE: " + item);
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      const int64_t v = value == "off" ? std::numeric_limits<int64_t>::max() : std::stoll(value);
      if (key == "pool") {
        c.pool = v != 0;
      } else if (key == "spin") {
        c.spin = v;
      } else if (key == "prefetch") {
        c.prefetch = v;
      } else if (key == "prefetch_bytes") {
        c.prefetch_bytes = v;
      } else if (key == "bulk") {
        c.bulk = v;
      } else if (key == "nt") {
        c.nt = v;
      } else {
        throw std::runtime_error("--variant: unknown key " + key);
      }
    }
    return c;
  }
};

// What an expert would write for the same arrays: the bound's one pass per
// row, plus the tricks of FastConfig.
class FastBound {
 public:
  FastBound(const int32_t* values, const int64_t* offsets, int64_t max_threads, FastConfig config)
      : values_(values),
        offsets_(offsets),
        max_threads_(max_threads),
        config_(config),
        pool_(config.pool ? max_threads : 1, config.spin) {}

  BoundArrays Run(const BatchView& view, bool packed, Slab& slab) {
    return packed ? Packed(view, slab) : Padded(view, slab);
  }

 private:
  static constexpr size_t kBlockBytes = 16 << 10;  // An L1-resident block per array.

  void Parallel(int64_t rows, int64_t bytes, const std::function<void(int64_t, int64_t)>& body) {
    const int64_t threads = ThreadsFor(bytes, rows, max_threads_);
    auto split = [&](int64_t t) { return rows / threads * t + rows % threads * t / threads; };
    const std::function<void(int64_t)> job = [&](int64_t t) { body(split(t), split(t + 1)); };
    if (config_.pool) {
      pool_.Run(threads, job);
    } else {
      Spawn(threads, job);
    }
  }

  void PrefetchExample(int64_t e) const {
    const auto* p = reinterpret_cast<const char*>(values_ + offsets_[e]);
    const int64_t bytes = std::min((offsets_[e + 1] - offsets_[e]) * 4, config_.prefetch_bytes);
    const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
    for (auto line = first; line < reinterpret_cast<uintptr_t>(p) + bytes; line += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
    }
  }

  // Prefetches the examples at flat positions [from, to) of the view.
  void PrefetchRange(const BatchView& view, int64_t from, int64_t to) const {
    to = std::min(to, view.row_begin.back());
    for (int64_t q = from; q < to; ++q) PrefetchExample(view.examples[static_cast<size_t>(q)]);
  }

  // Rows [r0, r1) of a padded batch: tokens and mask at row r0 (a block or
  // the batch's own arrays), lengths and index of the whole batch.
  void PaddedRows(const BatchView& view, int64_t r0, int64_t r1, int32_t* tokens, uint8_t* mask,
                  int32_t* lengths, int64_t* index) const {
    const int64_t length = view.shape.length, stored = view.stored_rows();
    const int64_t ahead = config_.prefetch;
    const bool bulk = length * 4 < config_.bulk;
    if (bulk) {
      std::memset(tokens, 0, static_cast<size_t>((r1 - r0) * length) * 4);
      std::memset(mask, 0, static_cast<size_t>((r1 - r0) * length));
    }
    if (ahead > 0 && r0 < stored) {
      PrefetchRange(view, view.row_begin[r0], view.row_begin[std::min(r0 + ahead, stored)]);
    }
    for (int64_t r = r0; r < r1; ++r) {
      if (ahead > 0 && r + ahead < stored) {
        const int64_t q = view.row_begin[r + ahead];
        PrefetchRange(view, q, std::min(q + 1, view.row_begin[r + ahead + 1]));
      }
      int64_t e = -1, n = 0;
      if (r < stored && view.row_begin[r] < view.row_begin[r + 1]) {
        e = view.examples[static_cast<size_t>(view.row_begin[r])];
        n = offsets_[e + 1] - offsets_[e];
      }
      int32_t* row = tokens + (r - r0) * length;
      uint8_t* row_mask = mask + (r - r0) * length;
      if (n > 0) std::memcpy(row, values_ + offsets_[e], static_cast<size_t>(n) * 4);
      std::memset(row_mask, 1, static_cast<size_t>(n));
      if (!bulk) {
        std::memset(row + n, 0, static_cast<size_t>(length - n) * 4);
        std::memset(row_mask + n, 0, static_cast<size_t>(length - n));
      }
      lengths[r] = static_cast<int32_t>(n);
      index[r] = e;
    }
  }

  BoundArrays Padded(const BatchView& view, Slab& slab) {
    const int64_t rows = view.shape.rows, length = view.shape.length;
    const size_t cells = static_cast<size_t>(rows * length);
    auto* tokens = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    uint8_t* mask = slab.Take(cells);
    auto* lengths = reinterpret_cast<int32_t*>(slab.Take(static_cast<size_t>(rows) * 4));
    auto* index = reinterpret_cast<int64_t*>(slab.Take(static_cast<size_t>(rows) * 8));
    const int64_t bytes = static_cast<int64_t>(cells * 5) + rows * 12;
    const bool nt = bytes >= config_.nt;
    Parallel(rows, bytes, [&](int64_t r0, int64_t r1) {
      if (!nt) {
        PaddedRows(view, r0, r1, tokens + r0 * length, mask + r0 * length, lengths, index);
        return;
      }
      const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(kBlockBytes) / (length * 4));
      thread_local std::vector<int32_t> scratch;
      scratch.resize(static_cast<size_t>(block * length * 2));
      auto* scratch_mask = reinterpret_cast<uint8_t*>(scratch.data() + block * length);
      for (int64_t b0 = r0; b0 < r1; b0 += block) {
        const int64_t b1 = std::min(r1, b0 + block);
        PaddedRows(view, b0, b1, scratch.data(), scratch_mask, lengths, index);
        const auto n = static_cast<size_t>((b1 - b0) * length);
        StreamCopy(reinterpret_cast<uint8_t*>(tokens + b0 * length),
                   reinterpret_cast<const uint8_t*>(scratch.data()), n * 4);
        StreamCopy(mask + b0 * length, scratch_mask, n);
      }
      StoreFence();
    });
    return PaddedArrays(tokens, mask, lengths, index, cells, rows);
  }

  // Rows [r0, r1) of a packed batch: tokens, ids and positions at row r0,
  // lengths and index of the whole batch.
  void PackedRows(const BatchView& view, int64_t r0, int64_t r1, int32_t* tokens, int32_t* ids,
                  int32_t* pos, int32_t* lens, int64_t* index) const {
    const int64_t length = view.shape.length, segs = view.shape.segments;
    const int64_t stored = view.stored_rows(), ahead = config_.prefetch;
    const bool bulk = length * 4 < config_.bulk;
    const auto row_cells = static_cast<size_t>((r1 - r0) * length);
    if (bulk) {
      std::memset(tokens, 0, row_cells * 4);
      std::memset(ids, 0, row_cells * 4);
      std::memset(pos, 0, row_cells * 4);
    }
    if (ahead > 0 && r0 < stored) {
      PrefetchRange(view, view.row_begin[r0], view.row_begin[r0] + ahead);
    }
    for (int64_t r = r0; r < r1; ++r) {
      int32_t* row = tokens + (r - r0) * length;
      int32_t* row_ids = ids + (r - r0) * length;
      int32_t* row_pos = pos + (r - r0) * length;
      int64_t used = 0;
      int32_t s = 0;
      const int64_t q0 = r < stored ? view.row_begin[r] : 0;
      const int64_t q1 = r < stored ? view.row_begin[r + 1] : 0;
      for (int64_t q = q0; q < q1; ++q) {
        if (ahead > 0) PrefetchRange(view, q + ahead, q + ahead + 1);
        const int64_t e = view.examples[static_cast<size_t>(q)];
        const int64_t n = offsets_[e + 1] - offsets_[e];
        if (n > 0) std::memcpy(row + used, values_ + offsets_[e], static_cast<size_t>(n) * 4);
        ++s;
        int32_t* seg_ids = row_ids + used;
        int32_t* seg_pos = row_pos + used;
        for (int64_t k = 0; k < n; ++k) {
          seg_ids[k] = s;
          seg_pos[k] = static_cast<int32_t>(k);
        }
        lens[r * segs + s - 1] = static_cast<int32_t>(n);
        index[r * segs + s - 1] = e;
        used += n;
      }
      if (!bulk) {
        const auto tail = static_cast<size_t>(length - used) * 4;
        std::memset(row + used, 0, tail);
        std::memset(row_ids + used, 0, tail);
        std::memset(row_pos + used, 0, tail);
      }
      std::fill(lens + r * segs + s, lens + (r + 1) * segs, 0);
      std::fill(index + r * segs + s, index + (r + 1) * segs, -1);
    }
  }

  BoundArrays Packed(const BatchView& view, Slab& slab) {
    const int64_t rows = view.shape.rows, length = view.shape.length, segs = view.shape.segments;
    const size_t cells = static_cast<size_t>(rows * length);
    const size_t slots = static_cast<size_t>(rows * segs);
    auto* tokens = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* ids = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* pos = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* lens = reinterpret_cast<int32_t*>(slab.Take(slots * 4));
    auto* starts = reinterpret_cast<int32_t*>(slab.Take(slots * 4));
    auto* index = reinterpret_cast<int64_t*>(slab.Take(slots * 8));
    const int64_t bytes = static_cast<int64_t>(cells * 12 + slots * 16);
    const bool nt = bytes >= config_.nt;
    Parallel(rows, bytes, [&](int64_t r0, int64_t r1) {
      if (!nt) {
        const int64_t at = r0 * length;
        PackedRows(view, r0, r1, tokens + at, ids + at, pos + at, lens, index);
        FillStarts(lens, starts, segs, r0, r1);
        return;
      }
      const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(kBlockBytes) / (length * 4));
      const int64_t block_cells = block * length;
      thread_local std::vector<int32_t> scratch;
      scratch.resize(static_cast<size_t>(block_cells * 3));
      int32_t* s_tokens = scratch.data();
      for (int64_t b0 = r0; b0 < r1; b0 += block) {
        const int64_t b1 = std::min(r1, b0 + block);
        PackedRows(view, b0, b1, s_tokens, s_tokens + block_cells, s_tokens + 2 * block_cells, lens,
                   index);
        const auto n = static_cast<size_t>((b1 - b0) * length) * 4;
        const int64_t at = b0 * length;
        StreamCopy(reinterpret_cast<uint8_t*>(tokens + at),
                   reinterpret_cast<const uint8_t*>(s_tokens), n);
        StreamCopy(reinterpret_cast<uint8_t*>(ids + at),
                   reinterpret_cast<const uint8_t*>(s_tokens + block_cells), n);
        StreamCopy(reinterpret_cast<uint8_t*>(pos + at),
                   reinterpret_cast<const uint8_t*>(s_tokens + 2 * block_cells), n);
      }
      FillStarts(lens, starts, segs, r0, r1);
      StoreFence();
    });
    return PackedArrays(tokens, ids, pos, lens, starts, index, cells, slots);
  }

  const int32_t* values_;
  const int64_t* offsets_;
  int64_t max_threads_;
  FastConfig config_;
  Pool pool_;
};

std::vector<int64_t> ReadLengths(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open " + path);
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<int64_t> lengths(bytes / sizeof(int64_t));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(lengths.data()), static_cast<std::streamsize>(bytes));
  return lengths;
}

std::vector<int64_t> SyntheticLengths(int64_t n) {
  std::mt19937_64 rng(0);
  std::lognormal_distribution<double> dist(std::log(100.0), 0.8);
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t& l : lengths) l = std::clamp<int64_t>(std::llround(dist(rng)), 1, 2048);
  return lengths;
}

jaxbatch::PlannerOptions ParsePlan(const std::string& spec) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (size_t colon; (colon = spec.find(':', at)) != std::string::npos; at = colon + 1) {
    parts.push_back(spec.substr(at, colon - at));
  }
  parts.push_back(spec.substr(at));
  if (parts.size() == 3 && parts[0] == "autobuckets") {
    return jaxbatch::AutoBucketsOptions{.max_shapes = std::stoll(parts[1]),
                                        .token_budget = std::stoll(parts[2])};
  }
  if (parts.size() == 3 && parts[0] == "pack") {
    return jaxbatch::PackOptions{.row_length = std::stoll(parts[1]),
                                 .rows_per_batch = std::stoll(parts[2])};
  }
  throw std::runtime_error("--plan: expected autobuckets:S:BUDGET or pack:L:ROWS, found " + spec);
}

double Seconds(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best-of-3 memcpy bandwidth over `bytes`, split over `threads` threads.
double MemcpyGbPerS(size_t bytes, int64_t threads, Slab& src_slab, Slab& dst_slab) {
  src_slab.Rewind();
  dst_slab.Rewind();
  uint8_t* src = src_slab.Take(bytes);
  uint8_t* dst = dst_slab.Take(bytes);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    best = std::min(best, Seconds([&] {
                      ForRows(static_cast<int64_t>(bytes), threads, [&](int64_t a, int64_t b) {
                        std::memcpy(dst + a, src + a, static_cast<size_t>(b - a));
                      });
                    }));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

void PrintList(const char* name, const std::vector<double>& values, bool last = false) {
  std::printf("  \"%s\": [", name);
  for (size_t i = 0; i < values.size(); ++i) std::printf("%s%.9f", i ? ", " : "", values[i]);
  std::printf("]%s\n", last ? "" : ",");
}

int Main(int argc, char** argv) {
  std::string lengths_path, plan_spec;
  int64_t synthetic = 0, threads = 2, reps = 5, evict_mb = 0;
  FastConfig fast_config;
  std::vector<std::string> variant_specs;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--lengths") {
      lengths_path = value;
    } else if (flag == "--synthetic") {
      synthetic = std::stoll(value);
    } else if (flag == "--plan") {
      plan_spec = value;
    } else if (flag == "--threads") {
      threads = std::stoll(value);
    } else if (flag == "--reps") {
      reps = std::stoll(value);
    } else if (flag == "--fast") {
      fast_config = FastConfig::Parse(value);
    } else if (flag == "--variant") {
      variant_specs.push_back(value);
    } else if (flag == "--evict-mb") {
      evict_mb = std::stoll(value);
    } else {
      throw std::runtime_error("unknown flag " + flag);
    }
  }
  if (plan_spec.empty() || (lengths_path.empty() == (synthetic == 0)) || threads < 1 || reps < 1 ||
      evict_mb < 0) {
    throw std::runtime_error(
        "usage: collate_bound (--lengths FILE | --synthetic N) --plan PLAN "
        "[--threads T] [--reps R] [--fast CONFIG] [--variant CONFIG]... [--evict-mb MB]");
  }
  const std::vector<int64_t> lengths =
      lengths_path.empty() ? SyntheticLengths(synthetic) : ReadLengths(lengths_path);
  const auto n = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> offsets(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), offsets.begin() + 1);
  std::vector<int32_t> values(static_cast<size_t>(offsets.back()));
  std::iota(values.begin(), values.end(), 0);
  const Dataset ds(
      {jaxbatch::RaggedColumn::Ragged("tokens", jaxbatch::DType::kInt32, {}, values.data(),
                                      offsets.back(), offsets.data(), n, nullptr)});
  const BatchPlan plan = jaxbatch::Plan(lengths, ParsePlan(plan_spec));
  const jaxbatch::BatchLayout layout{.packed = plan.packed, .length_column = ""};

  size_t max_batch = 0;
  int64_t total_bytes = 0;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const auto bytes = jaxbatch::CollatedBytes(ds, plan.batch(b).shape, layout,
                                               /*padded_segments=*/false);
    max_batch = std::max(max_batch, static_cast<size_t>(bytes));
    total_bytes += bytes;
  }
  const size_t slab_bytes = max_batch + 8 * kAlign;
  jaxbatch::CollateOptions options;
  options.num_threads = threads;
  // The bound writes what a padded batch needs (tokens, lengths, indices), so
  // jaxbatch is timed without the optional per-token segment ids and positions.
  options.padded_segments = false;
  Slab jb_slab(slab_bytes);
  options.allocator = [&jb_slab](size_t bytes, uint8_t** data) {
    *data = jb_slab.Take(bytes);
    return std::shared_ptr<void>(std::shared_ptr<void>(), *data);  // Not owning: reused.
  };
  const Bound bound(values.data(), offsets.data(), threads);
  std::vector<FastConfig> fast_configs = {fast_config};
  for (const std::string& spec : variant_specs) fast_configs.push_back(FastConfig::Parse(spec));
  std::vector<std::unique_ptr<FastBound>> fast;
  for (const FastConfig& c : fast_configs) {
    fast.push_back(std::make_unique<FastBound>(values.data(), offsets.data(), threads, c));
  }

  // The contenders, each writing into its own reused slab: jaxbatch, the
  // simple bound, the fast bound and any --variant of it.
  struct Contender {
    std::string name;
    std::function<BoundArrays(int64_t, Slab&)> run;  // The bounds' arrays (none for jaxbatch).
    std::unique_ptr<Slab> slab;
    std::vector<double> seconds;
  };
  std::vector<Contender> contenders;
  contenders.push_back({"jaxbatch",
                        [&](int64_t b, Slab&) {
                          jaxbatch::Collate(ds, plan, b, options);
                          return BoundArrays{};
                        },
                        nullptr,
                        {}});
  contenders.push_back(
      {"simple",
       [&](int64_t b, Slab& slab) { return bound.Run(plan.batch(b), plan.packed, slab); },
       std::make_unique<Slab>(slab_bytes),
       {}});
  for (size_t i = 0; i < fast.size(); ++i) {
    contenders.push_back(
        {fast_configs[i].Name(),
         [&, i](int64_t b, Slab& slab) { return fast[i]->Run(plan.batch(b), plan.packed, slab); },
         std::make_unique<Slab>(slab_bytes),
         {}});
  }
  auto slab_of = [&](Contender& c) -> Slab& { return c.slab ? *c.slab : jb_slab; };

  // Same bytes, every batch, before any timing.
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    jb_slab.Rewind();
    const std::vector<Array> got = jaxbatch::Collate(ds, plan, b, options);
    for (size_t c = 1; c < contenders.size(); ++c) {
      contenders[c].slab->Rewind();
      const BoundArrays want = contenders[c].run(b, *contenders[c].slab);
      if (got.size() != want.arrays.size()) throw std::runtime_error("array counts differ");
      for (const auto& [name, span] : want.arrays) {
        auto it =
            std::find_if(got.begin(), got.end(), [&](const Array& a) { return a.name == name; });
        if (it == got.end() || static_cast<size_t>(it->num_bytes()) != span.second ||
            std::memcmp(it->data, span.first, span.second) != 0) {
          throw std::runtime_error("batch " + std::to_string(b) + ": '" + name + "' differs (" +
                                   contenders[c].name + ")");
        }
      }
    }
  }

  // Batch by batch, every contender in turn, in an order shuffled afresh for
  // each batch (fixed seed): whoever goes first reads the batch's examples
  // from memory and the others may find them cached, and each finds the
  // caches as its predecessor left them, so each is first, and follows each
  // other, alike. Optionally a buffer larger than the cache is read before
  // each (untimed), so that every contender starts cold. A repetition's time
  // sums its batches.
  std::vector<uint8_t> evict(static_cast<size_t>(evict_mb) << 20, 1);
  volatile uint64_t evict_sink = 0;
  const size_t count = contenders.size();
  std::vector<size_t> turn(count);
  std::iota(turn.begin(), turn.end(), 0);
  std::mt19937_64 rng(1);
  for (int64_t rep = 0; rep < reps; ++rep) {
    std::vector<double> totals(count, 0.0);
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      std::shuffle(turn.begin(), turn.end(), rng);
      for (const size_t c : turn) {
        if (!evict.empty()) {
          uint64_t sum = 0;
          for (size_t i = 0; i < evict.size(); i += 64) sum += evict[i];
          evict_sink = evict_sink + sum;
        }
        Slab& slab = slab_of(contenders[c]);
        totals[c] += Seconds([&] {
          slab.Rewind();
          contenders[c].run(b, slab);
        });
      }
    }
    for (size_t c = 0; c < count; ++c) contenders[c].seconds.push_back(totals[c]);
  }
  // Batch-sized buffers (the collators' case: their output buffers are reused).
  Slab& memcpy_dst = *contenders[1].slab;
  const double memcpy_1 = MemcpyGbPerS(max_batch, 1, jb_slab, memcpy_dst);
  const double memcpy_t = MemcpyGbPerS(max_batch, threads, jb_slab, memcpy_dst);

  std::printf("{\n  \"examples\": %lld,\n  \"tokens\": %lld,\n  \"plan\": \"%s\",\n",
              static_cast<long long>(n), static_cast<long long>(offsets.back()), plan_spec.c_str());
  std::printf("  \"batches\": %lld,\n  \"efficiency\": %.6f,\n  \"output_bytes\": %lld,\n",
              static_cast<long long>(plan.num_batches()), plan.stats.efficiency,
              static_cast<long long>(total_bytes));
  std::printf("  \"max_batch_bytes\": %lld,\n  \"threads\": %lld,\n  \"checked_equal\": true,\n",
              static_cast<long long>(max_batch), static_cast<long long>(threads));
  std::printf("  \"memcpy_gb_per_s_1_thread\": %.4f,\n  \"memcpy_gb_per_s_threads\": %.4f,\n",
              memcpy_1, memcpy_t);
  std::printf("  \"evict_mb\": %lld,\n  \"fast_bound_config\": \"%s\",\n",
              static_cast<long long>(evict_mb), fast_configs[0].Name().c_str());
  PrintList("jaxbatch_seconds", contenders[0].seconds);
  PrintList("bound_seconds", contenders[1].seconds);
  PrintList("fast_bound_seconds", contenders[2].seconds);
  std::printf("  \"variants\": [");
  for (size_t c = 3; c < count; ++c) {
    std::printf("%s\n    {\"config\": \"%s\", \"seconds\": [", c > 3 ? "," : "",
                contenders[c].name.c_str());
    for (size_t i = 0; i < contenders[c].seconds.size(); ++i) {
      std::printf("%s%.9f", i ? ", " : "", contenders[c].seconds[i]);
    }
    std::printf("]}");
  }
  std::printf("%s]\n}\n", count > 3 ? "\n  " : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collate_bound: %s\n", e.what());
    return 1;
  }
}
