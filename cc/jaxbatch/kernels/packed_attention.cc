#include "jaxbatch/kernels/packed_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "jaxbatch/kernels/attention_loops.h"

namespace jaxbatch::kernels {
namespace {

using internal::AttentionLoops;
using internal::kKeyTile;
using internal::kQueryTile;
using internal::RoundUp;

constexpr float kLog2E = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// L, H and S at most 2^24: every index below fits comfortably in int64 and
// every float32 count is exact.
constexpr int64_t kMaxExtent = int64_t{1} << 24;

// The loops this CPU runs: AVX2 and FMA where it has them, unless the
// environment says JAXBATCH_ATTENTION_LOOPS=baseline (to measure the
// difference) or a test forced one.
std::atomic<const AttentionLoops*>& ChosenLoops() {
  static const AttentionLoops baseline = internal::baseline::Loops();
  static const AttentionLoops best = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const char* env = std::getenv("JAXBATCH_ATTENTION_LOOPS");
    __builtin_cpu_init();
    if ((env == nullptr || std::string_view(env) != "baseline") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma")) {
      return internal::avx2::Loops();
    }
#endif
    return baseline;
  }();
  static std::atomic<const AttentionLoops*> chosen{&best};
  return chosen;
}

const AttentionLoops& Loops() { return *ChosenLoops().load(std::memory_order_relaxed); }

inline float Widen(float x) { return x; }
inline float Widen(BFloat16 x) {
  const uint32_t bits = uint32_t{x.bits} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
T Narrow(float x);
template <>
float Narrow<float>(float x) {
  return x;
}
template <>
BFloat16 Narrow<BFloat16>(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (std::isnan(x)) return {static_cast<uint16_t>((bits >> 16) | 0x40)};  // stays a NaN
  bits += 0x7fff + ((bits >> 16) & 1);                                     // round to nearest even
  return {static_cast<uint16_t>(bits >> 16)};
}

// Where (row, head)'s token t starts in a q-shaped buffer.
struct HeadCells {
  int64_t base, token_stride;
  HeadCells(const PackedAttentionShape& s, int64_t row, int64_t head) {
    if (s.layout == AttentionLayout::kBTNH) {
      base = (row * s.length * s.heads + head) * s.head_size;
      token_stride = s.heads * s.head_size;
    } else {
      base = (row * s.heads + head) * s.length * s.head_size;
      token_stride = s.head_size;
    }
  }
  int64_t operator()(int64_t t) const { return base + t * token_stride; }
};

// Slot s of a row, clamped into the row: [first, first + n).
struct Slot {
  int64_t first, n;
};
Slot SlotOf(const PackedAttentionShape& shape, const PackedSegments& seg, int64_t row, int64_t s) {
  const int64_t at = row * shape.segments + s;
  const int64_t first = std::clamp<int64_t>(seg.starts[at], 0, shape.length);
  const int64_t n = std::clamp<int64_t>(seg.lengths[at], 0, shape.length - first);
  return {first, n};
}

// Float32 scratch for one segment of up to `length` tokens.
struct Scratch {
  int64_t rows, stride, h;
  std::vector<float> q, kt, k, v, vt, d_out, out, lse2, delta, tiles, d_q, d_k, d_v;
  Scratch(const PackedAttentionShape& s, bool backward)
      : rows(RoundUp(s.length, kQueryTile)), stride(RoundUp(s.length, kKeyTile)), h(s.head_size) {
    q.resize(rows * h);
    kt.resize(h * stride);
    v.resize(stride * h);
    out.resize(rows * h);
    lse2.resize(rows);
    tiles.resize((backward ? 4 : 2) * kQueryTile * stride);
    if (backward) {
      k.resize(stride * h);
      vt.resize(h * stride);
      d_out.resize(rows * h);
      delta.resize(rows);
      d_q.resize(rows * h);
      d_k.resize(stride * h);
      d_v.resize(stride * h);
    }
  }
};

// q (scaled), its zero rows to the tile's end, and k transposed with zero
// columns to the tile's end.
template <typename T>
void PackQueryAndKeys(const PackedAttentionShape& shape, const PackedAttentionInputs<T>& in,
                      const HeadCells& cells, Slot slot, int64_t stride, Scratch& w) {
  const int64_t h = shape.head_size;
  const float q_scale = shape.scale * kLog2E;
  const int64_t rows = RoundUp(slot.n, kQueryTile);
  for (int64_t i = 0; i < slot.n; ++i) {
    const int64_t at = cells(slot.first + i);
    for (int64_t x = 0; x < h; ++x) {
      w.q[i * h + x] = Widen(in.query[at + x]) * q_scale;
      w.kt[x * stride + i] = Widen(in.key[at + x]);
    }
  }
  std::fill(w.q.begin() + slot.n * h, w.q.begin() + rows * h, 0.0f);
  for (int64_t x = 0; x < h; ++x) {
    std::fill(w.kt.begin() + x * stride + slot.n, w.kt.begin() + (x + 1) * stride, 0.0f);
  }
}

// Calls begin(row, cells, item) for each item in [first, end), then
// segment(slot, stride) for each of its nonempty slots.
template <typename Begin, typename Segment>
void ForEachSegment(const PackedAttentionShape& shape, const PackedSegments& segments,
                    int64_t first, int64_t end, const Begin& begin, const Segment& segment) {
  for (int64_t item = first; item < end; ++item) {
    const int64_t row = item / shape.heads;
    const HeadCells cells(shape, row, item % shape.heads);
    begin(cells, item);
    for (int64_t s = 0; s < shape.segments; ++s) {
      const Slot slot = SlotOf(shape, segments, row, s);
      if (slot.n > 0) segment(cells, item, slot, RoundUp(slot.n, kKeyTile));
    }
  }
}

template <typename T>
void ZeroCells(const PackedAttentionShape& shape, const HeadCells& cells, std::span<T> x) {
  for (int64_t t = 0; t < shape.length; ++t) {
    std::fill_n(x.begin() + cells(t), shape.head_size, Narrow<T>(0.0f));
  }
}

}  // namespace

std::string PackedAttentionShape::Validate() const {
  const auto bad = [](const char* what, int64_t v, int64_t lo, int64_t hi) {
    return std::string("packed attention: ") + what + " must be in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "], found " + std::to_string(v);
  };
  if (rows < 0 || rows > kMaxExtent) return bad("rows", rows, 0, kMaxExtent);
  if (length < 1 || length > kMaxExtent) return bad("the row length", length, 1, kMaxExtent);
  if (heads < 1 || heads > kMaxExtent) return bad("heads", heads, 1, kMaxExtent);
  if (head_size < 1 || head_size > kMaxExtent) {
    return bad("the head size", head_size, 1, kMaxExtent);
  }
  if (segments < 0 || segments > kMaxExtent) return bad("segments", segments, 0, kMaxExtent);
  const double elements = double(rows) * double(length) * double(heads) * double(head_size);
  if (elements > double(std::numeric_limits<int64_t>::max() / 8)) {
    return "packed attention: rows x length x heads x head size overflows (" +
           std::to_string(elements) + " elements)";
  }
  if (!std::isfinite(scale)) return "packed attention: scale must be finite";
  return "";
}

std::string SizesError(const PackedAttentionShape& shape, int64_t query, int64_t key, int64_t value,
                       int64_t lengths, int64_t starts, int64_t lse) {
  const int64_t want[] = {shape.Elements(),
                          shape.Elements(),
                          shape.Elements(),
                          shape.rows * shape.segments,
                          shape.rows * shape.segments,
                          shape.rows * shape.heads * shape.length};
  const int64_t got[] = {query, key, value, lengths, starts, lse};
  const char* names[] = {"query", "key", "value", "segment lengths", "segment starts", "lse"};
  for (int i = 0; i < 6; ++i) {
    if (got[i] != want[i]) {
      return std::string("packed attention: ") + names[i] + " holds " + std::to_string(got[i]) +
             " elements, expected " + std::to_string(want[i]);
    }
  }
  return "";
}

bool PackedAttentionUsesAvx2() { return Loops().forward != internal::baseline::Loops().forward; }

namespace internal {
void UseBaselineLoopsForTesting(bool baseline) {
  static const AttentionLoops* best = ChosenLoops().load();
  static const AttentionLoops base = baseline::Loops();
  ChosenLoops().store(baseline ? &base : best);
}
}  // namespace internal

template <typename T>
void PackedAttentionForward(const PackedAttentionShape& shape, const PackedAttentionInputs<T>& in,
                            std::span<T> out, std::span<float> lse, int64_t first_item,
                            int64_t end_item) {
  const AttentionLoops& loops = Loops();
  Scratch w(shape, /*backward=*/false);
  const int64_t h = shape.head_size;
  const auto begin = [&](const HeadCells& cells, int64_t item) {
    ZeroCells(shape, cells, out);
    std::fill_n(lse.begin() + item * shape.length, shape.length, 0.0f);
  };
  const auto segment = [&](const HeadCells& cells, int64_t item, Slot slot, int64_t stride) {
    PackQueryAndKeys(shape, in, cells, slot, stride, w);
    for (int64_t i = 0; i < slot.n; ++i) {
      const int64_t at = cells(slot.first + i);
      for (int64_t x = 0; x < h; ++x) w.v[i * h + x] = Widen(in.value[at + x]);
    }
    internal::SegmentForward a;
    a.n = slot.n, a.h = h, a.stride = stride, a.causal = shape.causal;
    a.q = w.q.data(), a.kt = w.kt.data(), a.v = w.v.data();
    a.scores = w.tiles.data(), a.probs = w.tiles.data() + kQueryTile * stride;
    a.out = w.out.data(), a.lse2 = w.lse2.data();
    loops.forward(a);
    float* item_lse = lse.data() + item * shape.length;
    for (int64_t i = 0; i < slot.n; ++i) {
      const int64_t at = cells(slot.first + i);
      for (int64_t x = 0; x < h; ++x) out[at + x] = Narrow<T>(w.out[i * h + x]);
      item_lse[slot.first + i] = w.lse2[i] * kLn2;
    }
  };
  ForEachSegment(shape, in.segments, first_item, end_item, begin, segment);
}

template <typename T>
void PackedAttentionBackward(const PackedAttentionShape& shape, const PackedAttentionInputs<T>& in,
                             std::span<const T> out, std::span<const float> lse,
                             std::span<const T> d_out, std::span<T> d_query, std::span<T> d_key,
                             std::span<T> d_value, int64_t first_item, int64_t end_item) {
  const AttentionLoops& loops = Loops();
  Scratch w(shape, /*backward=*/true);
  const int64_t h = shape.head_size;
  const auto begin = [&](const HeadCells& cells, int64_t) {
    ZeroCells(shape, cells, d_query);
    ZeroCells(shape, cells, d_key);
    ZeroCells(shape, cells, d_value);
  };
  const auto segment = [&](const HeadCells& cells, int64_t item, Slot slot, int64_t stride) {
    const float* item_lse = lse.data() + item * shape.length;
    const int64_t rows = RoundUp(slot.n, kQueryTile);
    PackQueryAndKeys(shape, in, cells, slot, stride, w);
    for (int64_t i = 0; i < slot.n; ++i) {
      const int64_t at = cells(slot.first + i);
      float delta = 0.0f;
      for (int64_t x = 0; x < h; ++x) {
        const float g = Widen(d_out[at + x]);
        w.d_out[i * h + x] = g;
        delta += g * Widen(out[at + x]);
        w.k[i * h + x] = Widen(in.key[at + x]);
        w.vt[x * stride + i] = Widen(in.value[at + x]);
      }
      w.delta[i] = delta;
      w.lse2[i] = item_lse[slot.first + i] * kLog2E;
    }
    std::fill(w.d_out.begin() + slot.n * h, w.d_out.begin() + rows * h, 0.0f);
    for (int64_t x = 0; x < h; ++x) {
      std::fill(w.vt.begin() + x * stride + slot.n, w.vt.begin() + (x + 1) * stride, 0.0f);
    }
    std::fill_n(w.d_k.begin(), slot.n * h, 0.0f);
    std::fill_n(w.d_v.begin(), slot.n * h, 0.0f);
    internal::SegmentBackward a;
    a.n = slot.n, a.h = h, a.stride = stride, a.causal = shape.causal;
    a.q = w.q.data(), a.kt = w.kt.data(), a.k = w.k.data(), a.vt = w.vt.data();
    a.d_out = w.d_out.data(), a.lse2 = w.lse2.data(), a.delta = w.delta.data();
    float* tiles = w.tiles.data();
    a.scores = tiles, a.probs = tiles + kQueryTile * stride;
    a.d_probs = tiles + 2 * kQueryTile * stride, a.d_scores = tiles + 3 * kQueryTile * stride;
    a.d_q = w.d_q.data(), a.d_k = w.d_k.data(), a.d_v = w.d_v.data();
    loops.backward(a);
    // dq = scale * dS k; dk = scale * dS^T q, and the packed q carried
    // scale * log2(e), so ln(2) undoes the rest.
    for (int64_t i = 0; i < slot.n; ++i) {
      const int64_t at = cells(slot.first + i);
      for (int64_t x = 0; x < h; ++x) {
        d_query[at + x] = Narrow<T>(w.d_q[i * h + x] * shape.scale);
        d_key[at + x] = Narrow<T>(w.d_k[i * h + x] * kLn2);
        d_value[at + x] = Narrow<T>(w.d_v[i * h + x]);
      }
    }
  };
  ForEachSegment(shape, in.segments, first_item, end_item, begin, segment);
}

template void PackedAttentionForward<float>(const PackedAttentionShape&,
                                            const PackedAttentionInputs<float>&, std::span<float>,
                                            std::span<float>, int64_t, int64_t);
template void PackedAttentionForward<BFloat16>(const PackedAttentionShape&,
                                               const PackedAttentionInputs<BFloat16>&,
                                               std::span<BFloat16>, std::span<float>, int64_t,
                                               int64_t);
template void PackedAttentionBackward<float>(const PackedAttentionShape&,
                                             const PackedAttentionInputs<float>&,
                                             std::span<const float>, std::span<const float>,
                                             std::span<const float>, std::span<float>,
                                             std::span<float>, std::span<float>, int64_t, int64_t);
template void PackedAttentionBackward<BFloat16>(const PackedAttentionShape&,
                                                const PackedAttentionInputs<BFloat16>&,
                                                std::span<const BFloat16>, std::span<const float>,
                                                std::span<const BFloat16>, std::span<BFloat16>,
                                                std::span<BFloat16>, std::span<BFloat16>, int64_t,
                                                int64_t);

}  // namespace jaxbatch::kernels
