// collate_bound: jaxbatch's collation against the physical bound of its work.
//
// For one dataset (a ragged int32 "tokens" column whose values are 0, 1, 2,
// ... so a misplaced copy shows) and one batch plan, two collators fill every
// batch of the plan with the same number of threads into preallocated,
// reused buffers:
//   jaxbatch  the core API: Collate(ds, plan, b, options) with an allocator
//             that hands out the same reused buffers every batch;
//   bound     the least work that writes the same arrays: per row one memcpy
//             of the example's bytes, one memset of the padding, and the
//             mask/lengths (padded) or segment ids/positions/lengths (packed)
//             and example_index written in the same pass, rows split over
//             the threads the same way.
// Every batch's arrays are first checked byte-equal between the two; then
// the two run alternately, batch by batch, for `reps` repetitions, and the
// program prints one JSON object: per-repetition seconds of each, and
// memcpy bandwidth of the machine (one thread, and `threads` threads) for
// context. bench/bench_core.py runs it and prints the table.
//
// Usage:
//   collate_bound (--lengths FILE | --synthetic N) --plan PLAN [--threads T] [--reps R]
//   FILE: raw little-endian int64 lengths (numpy's ndarray.tofile)
//   --synthetic N: N lognormal lengths (median 100, sigma 0.8, clipped to [1, 2048])
//   PLAN: autobuckets:MAX_SHAPES:TOKEN_BUDGET | pack:ROW_LENGTH:ROWS_PER_BATCH
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jaxbatch/jaxbatch.h"

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
    return {
        {{"tokens", {reinterpret_cast<uint8_t*>(tokens), cells * 4}},
         {"tokens_mask", {mask, cells}},
         {"tokens_lengths", {reinterpret_cast<uint8_t*>(lengths), static_cast<size_t>(rows) * 4}},
         {"example_index", {reinterpret_cast<uint8_t*>(index), static_cast<size_t>(rows) * 8}}}};
  }

  BoundArrays Packed(const BatchView& view, Slab& slab) const {
    const int64_t rows = view.shape.rows, length = view.shape.length, segs = view.shape.segments;
    const size_t cells = static_cast<size_t>(rows * length);
    const size_t slots = static_cast<size_t>(rows * segs);
    auto* tokens = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* ids = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* pos = reinterpret_cast<int32_t*>(slab.Take(cells * 4));
    auto* lens = reinterpret_cast<int32_t*>(slab.Take(slots * 4));
    auto* index = reinterpret_cast<int64_t*>(slab.Take(slots * 8));
    const int64_t bytes = static_cast<int64_t>(cells * 12 + slots * 12);
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
    });
    return {{{"tokens", {reinterpret_cast<uint8_t*>(tokens), cells * 4}},
             {"tokens_segment_ids", {reinterpret_cast<uint8_t*>(ids), cells * 4}},
             {"tokens_positions", {reinterpret_cast<uint8_t*>(pos), cells * 4}},
             {"tokens_lengths", {reinterpret_cast<uint8_t*>(lens), slots * 4}},
             {"example_index", {reinterpret_cast<uint8_t*>(index), slots * 8}}}};
  }

  const int32_t* values_;
  const int64_t* offsets_;
  int64_t max_threads_;
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
  int64_t synthetic = 0, threads = 2, reps = 5;
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
    } else {
      throw std::runtime_error("unknown flag " + flag);
    }
  }
  if (plan_spec.empty() || (lengths_path.empty() == (synthetic == 0)) || threads < 1 || reps < 1) {
    throw std::runtime_error(
        "usage: collate_bound (--lengths FILE | --synthetic N) --plan PLAN "
        "[--threads T] [--reps R]");
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
    const auto bytes = jaxbatch::CollatedBytes(ds, plan.batch(b).shape, layout);
    max_batch = std::max(max_batch, static_cast<size_t>(bytes));
    total_bytes += bytes;
  }
  const size_t slab_bytes = max_batch + 8 * kAlign;
  Slab jb_slab(slab_bytes), bound_slab(slab_bytes);
  jaxbatch::CollateOptions options;
  options.num_threads = threads;
  options.allocator = [&jb_slab](size_t bytes, uint8_t** data) {
    *data = jb_slab.Take(bytes);
    return std::shared_ptr<void>(std::shared_ptr<void>(), *data);  // Not owning: reused.
  };
  const Bound bound(values.data(), offsets.data(), threads);

  // Same bytes, every batch, before any timing.
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    jb_slab.Rewind();
    bound_slab.Rewind();
    const std::vector<Array> got = jaxbatch::Collate(ds, plan, b, options);
    const BoundArrays want = bound.Run(plan.batch(b), plan.packed, bound_slab);
    if (got.size() != want.arrays.size()) throw std::runtime_error("array counts differ");
    for (const auto& [name, span] : want.arrays) {
      auto it =
          std::find_if(got.begin(), got.end(), [&](const Array& a) { return a.name == name; });
      if (it == got.end() || static_cast<size_t>(it->num_bytes()) != span.second ||
          std::memcmp(it->data, span.first, span.second) != 0) {
        throw std::runtime_error("batch " + std::to_string(b) + ": '" + name + "' differs");
      }
    }
  }

  // Alternating batch by batch (and which goes first, rep by rep), so load
  // from elsewhere hits both alike; a repetition's time sums its batches.
  std::vector<double> jb_seconds, bound_seconds;
  for (int64_t rep = 0; rep < reps; ++rep) {
    double jb_total = 0, bound_total = 0;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      auto run_jb = [&] {
        jb_total += Seconds([&] {
          jb_slab.Rewind();
          jaxbatch::Collate(ds, plan, b, options);
        });
      };
      auto run_bound = [&] {
        bound_total += Seconds([&] {
          bound_slab.Rewind();
          bound.Run(plan.batch(b), plan.packed, bound_slab);
        });
      };
      if (rep % 2 == 0) {
        run_jb();
        run_bound();
      } else {
        run_bound();
        run_jb();
      }
    }
    jb_seconds.push_back(jb_total);
    bound_seconds.push_back(bound_total);
  }
  // Batch-sized buffers (the collators' case: their output buffers are reused).
  const double memcpy_1 = MemcpyGbPerS(max_batch, 1, jb_slab, bound_slab);
  const double memcpy_t = MemcpyGbPerS(max_batch, threads, jb_slab, bound_slab);

  std::printf("{\n  \"examples\": %lld,\n  \"tokens\": %lld,\n  \"plan\": \"%s\",\n",
              static_cast<long long>(n), static_cast<long long>(offsets.back()), plan_spec.c_str());
  std::printf("  \"batches\": %lld,\n  \"efficiency\": %.6f,\n  \"output_bytes\": %lld,\n",
              static_cast<long long>(plan.num_batches()), plan.stats.efficiency,
              static_cast<long long>(total_bytes));
  std::printf("  \"max_batch_bytes\": %lld,\n  \"threads\": %lld,\n  \"checked_equal\": true,\n",
              static_cast<long long>(max_batch), static_cast<long long>(threads));
  std::printf("  \"memcpy_gb_per_s_1_thread\": %.4f,\n  \"memcpy_gb_per_s_threads\": %.4f,\n",
              memcpy_1, memcpy_t);
  PrintList("jaxbatch_seconds", jb_seconds);
  PrintList("bound_seconds", bound_seconds, true);
  std::printf("}\n");
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
