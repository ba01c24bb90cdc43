#include "jaxbatch/kernels/packed_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "jaxbatch/kernels/attention_loops.h"

namespace jaxbatch::kernels {
namespace {

// A case: the shape, its segments and random q, k, v, d_out (float32).
struct Case {
  PackedAttentionShape shape;
  std::vector<int32_t> lengths, starts;
  std::vector<float> q, k, v, d_out;

  Case(PackedAttentionShape s, const std::vector<std::vector<int32_t>>& row_lengths, int seed)
      : shape(s) {
    shape.segments = 0;
    for (const auto& r : row_lengths) shape.segments = std::max<int64_t>(shape.segments, r.size());
    shape.rows = static_cast<int64_t>(row_lengths.size());
    for (const auto& r : row_lengths) {
      int32_t at = 0;
      for (int64_t slot = 0; slot < shape.segments; ++slot) {
        const int32_t n = slot < static_cast<int64_t>(r.size()) ? r[slot] : 0;
        lengths.push_back(n);
        starts.push_back(at);
        at += n;
      }
    }
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (auto* x : {&q, &k, &v, &d_out}) {
      x->resize(shape.Elements());
      for (float& e : *x) e = normal(rng);
    }
  }
  int64_t At(int64_t r, int64_t t, int64_t n, int64_t h) const {
    const auto& s = shape;
    return s.layout == AttentionLayout::kBTNH
               ? ((r * s.length + t) * s.heads + n) * s.head_size + h
               : ((r * s.heads + n) * s.length + t) * s.head_size + h;
  }
  PackedAttentionInputs<float> Inputs() const { return {q, k, v, {lengths, starts}}; }
};

// Forward and backward in double, query by query, over its own segment's
// keys (the earlier ones, causal): the obviously-correct version.
struct Expected {
  std::vector<double> out, lse, dq, dk, dv;
};
Expected Reference(const Case& c) {
  const auto& s = c.shape;
  Expected ref;
  ref.out.assign(s.Elements(), 0), ref.dq = ref.dk = ref.dv = ref.out;
  ref.lse.assign(s.rows * s.heads * s.length, 0);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t slot = 0; slot < s.segments; ++slot) {
      const int64_t a = c.starts[r * s.segments + slot], n = c.lengths[r * s.segments + slot];
      for (int64_t head = 0; head < s.heads; ++head) {
        for (int64_t i = a; i < a + n; ++i) {
          const int64_t end = s.causal ? i + 1 : a + n;
          std::vector<double> p(end - a);
          double m = -INFINITY, sum = 0, delta = 0;
          for (int64_t j = a; j < end; ++j) {
            double dot = 0;
            for (int64_t x = 0; x < s.head_size; ++x) {
              dot += double(c.q[c.At(r, i, head, x)]) * c.k[c.At(r, j, head, x)];
            }
            p[j - a] = dot * s.scale;
            m = std::max(m, p[j - a]);
          }
          for (double& e : p) sum += (e = std::exp(e - m));
          for (double& e : p) e /= sum;
          ref.lse[(r * s.heads + head) * s.length + i] = m + std::log(sum);
          for (int64_t x = 0; x < s.head_size; ++x) {
            double o = 0;
            for (int64_t j = a; j < end; ++j) o += p[j - a] * c.v[c.At(r, j, head, x)];
            ref.out[c.At(r, i, head, x)] = o;
            delta += o * c.d_out[c.At(r, i, head, x)];
          }
          for (int64_t j = a; j < end; ++j) {
            double dp = 0;
            for (int64_t x = 0; x < s.head_size; ++x) {
              dp += double(c.d_out[c.At(r, i, head, x)]) * c.v[c.At(r, j, head, x)];
              ref.dv[c.At(r, j, head, x)] += p[j - a] * c.d_out[c.At(r, i, head, x)];
            }
            const double ds = p[j - a] * (dp - delta) * s.scale;
            for (int64_t x = 0; x < s.head_size; ++x) {
              ref.dq[c.At(r, i, head, x)] += ds * c.k[c.At(r, j, head, x)];
              ref.dk[c.At(r, j, head, x)] += ds * c.q[c.At(r, i, head, x)];
            }
          }
        }
      }
    }
  }
  return ref;
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

// The kernel over items split in `parts` ranges, each on its own thread.
Result RunKernel(const Case& c, int parts = 1) {
  const auto& s = c.shape;
  Result got;
  got.out.assign(s.Elements(), -1), got.dq = got.dk = got.dv = got.out;
  got.lse.assign(s.rows * s.heads * s.length, -1);
  const int64_t items = s.Items();
  std::vector<std::thread> threads;
  for (int p = 0; p < parts; ++p) {
    threads.emplace_back([&, p] {
      PackedAttentionForward<float>(s, c.Inputs(), got.out, got.lse, items * p / parts,
                                    items * (p + 1) / parts);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int p = 0; p < parts; ++p) {
    threads.emplace_back([&, p] {
      PackedAttentionBackward<float>(s, c.Inputs(), got.out, got.lse, c.d_out, got.dq, got.dk,
                                     got.dv, items * p / parts, items * (p + 1) / parts);
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

void ExpectMatchesReference(const Case& c, double tol = 2e-5) {
  const Result got = RunKernel(c);
  const Expected want = Reference(c);
  ExpectNear(got.out, want.out, tol, "out");
  ExpectNear(got.lse, want.lse, tol, "lse");
  ExpectNear(got.dq, want.dq, tol * 10, "dq");
  ExpectNear(got.dk, want.dk, tol * 10, "dk");
  ExpectNear(got.dv, want.dv, tol * 10, "dv");
}

PackedAttentionShape Shape(int64_t length, int64_t heads, int64_t head_size, bool causal,
                           AttentionLayout layout = AttentionLayout::kBTNH) {
  PackedAttentionShape s;
  s.length = length, s.heads = heads, s.head_size = head_size, s.causal = causal;
  s.layout = layout, s.scale = 1.0f / std::sqrt(float(head_size));
  return s;
}

// Empty slots, one-token segments, a full row, an empty row, and segments
// longer than a tile, for every tiled head size and an odd one.
const std::vector<std::vector<int32_t>> kRows = {{5, 1, 17, 0}, {40},    {1, 1, 1}, {},
                                                 {0, 0, 33},    {20, 20}};

TEST(PackedAttention, MatchesTheReferenceForEveryHeadSizeLayoutAndMask) {
  for (int64_t head_size : {32, 64, 16, 128, 5}) {
    for (bool causal : {false, true}) {
      for (auto layout : {AttentionLayout::kBTNH, AttentionLayout::kBNTH}) {
        SCOPED_TRACE(testing::Message() << "head size " << head_size << " causal " << causal
                                        << " BNTH " << (layout == AttentionLayout::kBNTH));
        ExpectMatchesReference(Case(Shape(40, 2, head_size, causal, layout), kRows, 1));
      }
    }
  }
}

TEST(PackedAttention, TheBaselineLoopsMatchTheReferenceToo) {
  // Where the CPU has AVX2 the test above ran those loops; these are the
  // ones a CPU without it runs.
  internal::UseBaselineLoopsForTesting(true);
  EXPECT_FALSE(PackedAttentionUsesAvx2());
  for (int64_t head_size : {32, 7}) {
    ExpectMatchesReference(Case(Shape(40, 2, head_size, true), kRows, 7));
    ExpectMatchesReference(Case(Shape(40, 2, head_size, false, AttentionLayout::kBNTH), kRows, 8));
  }
  internal::UseBaselineLoopsForTesting(false);
}

TEST(PackedAttention, PaddingCellsAreExactZeros) {
  const Case c(Shape(40, 3, 32, false), kRows, 2);
  const Result got = RunKernel(c);
  for (int64_t r = 0; r < c.shape.rows; ++r) {
    int64_t used = 0;
    for (int64_t s = 0; s < c.shape.segments; ++s) used += c.lengths[r * c.shape.segments + s];
    for (int64_t t = used; t < c.shape.length; ++t) {
      for (int64_t n = 0; n < c.shape.heads; ++n) {
        for (int64_t x = 0; x < c.shape.head_size; ++x) {
          const int64_t at = c.At(r, t, n, x);
          ASSERT_EQ(got.out[at], 0.0f);
          ASSERT_EQ(got.dq[at], 0.0f);
          ASSERT_EQ(got.dk[at], 0.0f);
          ASSERT_EQ(got.dv[at], 0.0f);
        }
      }
    }
  }
}

// Bit-equal where it must be: every other segment, and padding, whatever
// non-finite value one segment (or a padding cell) holds.
TEST(PackedAttention, ANonFiniteInputNeverLeavesItsSegment) {
  const float kValues[] = {std::numeric_limits<float>::quiet_NaN(), -INFINITY};
  for (bool causal : {false, true}) {
    const Case clean(Shape(40, 2, 32, causal), kRows, 3);
    const Result want = RunKernel(clean);
    // Row 0 holds segments [0,5) [5,6) [6,23) and padding from 23.
    for (int64_t token : {2, 10, 30}) {
      for (int tensor = 0; tensor < 4; ++tensor) {
        for (float value : kValues) {
          Case dirty = clean;
          std::vector<float>* x[] = {&dirty.q, &dirty.k, &dirty.v, &dirty.d_out};
          (*x[tensor])[dirty.At(0, token, 1, 3)] = value;
          const Result got = RunKernel(dirty);
          const int64_t first = token < 5 ? 0 : token < 6 ? 5 : token < 23 ? 6 : 23;
          const int64_t end = token < 5 ? 5 : token < 6 ? 6 : token < 23 ? 23 : 40;
          for (size_t i = 0; i < want.out.size(); ++i) {
            const int64_t t =
                clean.shape.layout == AttentionLayout::kBTNH ? (i / (2 * 32)) % 40 : (i / 32) % 40;
            const bool head = (i / 32) % 2 == 1;  // the planted head; the other is untouched
            const bool same_segment = i < size_t(40 * 2 * 32) && head && t >= first && t < end;
            if (same_segment && token < 23) continue;
            SCOPED_TRACE(testing::Message() << "token " << token << " tensor " << tensor
                                            << " value " << value << " cell " << i);
            auto bits = [](float f) {
              uint32_t b;
              std::memcpy(&b, &f, 4);
              return b;
            };
            ASSERT_EQ(bits(got.out[i]), bits(want.out[i]));
            ASSERT_EQ(bits(got.dq[i]), bits(want.dq[i]));
            ASSERT_EQ(bits(got.dk[i]), bits(want.dk[i]));
            ASSERT_EQ(bits(got.dv[i]), bits(want.dv[i]));
          }
        }
      }
    }
  }
}

TEST(PackedAttention, ItemsSplitOverThreadsEqualOneThread) {
  const Case c(Shape(40, 5, 32, true), kRows, 4);
  const Result one = RunKernel(c, 1), four = RunKernel(c, 4);
  EXPECT_EQ(one.out, four.out);
  EXPECT_EQ(one.lse, four.lse);
  EXPECT_EQ(one.dq, four.dq);
  EXPECT_EQ(one.dk, four.dk);
  EXPECT_EQ(one.dv, four.dv);
}

TEST(PackedAttention, BFloat16AccumulatesInFloat32) {
  Case c(Shape(40, 2, 32, false), kRows, 5);
  auto to_bf16 = [](const std::vector<float>& x) {
    std::vector<BFloat16> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t b;
      std::memcpy(&b, &x[i], 4);
      out[i].bits = static_cast<uint16_t>(b >> 16);  // truncated: c's values become exact
    }
    return out;
  };
  auto to_f32 = [](const std::vector<BFloat16>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint32_t b = uint32_t{x[i].bits} << 16;
      std::memcpy(&out[i], &b, 4);
    }
    return out;
  };
  const auto q = to_bf16(c.q), k = to_bf16(c.k), v = to_bf16(c.v), d_out = to_bf16(c.d_out);
  c.q = to_f32(q), c.k = to_f32(k), c.v = to_f32(v), c.d_out = to_f32(d_out);
  const Expected want = Reference(c);
  std::vector<BFloat16> out(c.shape.Elements()), dq(out.size()), dk(out.size()), dv(out.size());
  std::vector<float> lse(c.shape.rows * c.shape.heads * c.shape.length);
  const PackedAttentionInputs<BFloat16> in{q, k, v, {c.lengths, c.starts}};
  PackedAttentionForward<BFloat16>(c.shape, in, out, lse, 0, c.shape.Items());
  PackedAttentionBackward<BFloat16>(c.shape, in, out, lse, d_out, dq, dk, dv, 0, c.shape.Items());
  // bfloat16 keeps 8 bits: outputs within 2^-8 relative, plus the rounding
  // of out that the backward pass reads.
  ExpectNear(to_f32(out), want.out, 1e-2, "out");
  ExpectNear(lse, want.lse, 1e-5, "lse");
  ExpectNear(to_f32(dv), want.dv, 2e-2, "dv");
  ExpectNear(to_f32(dq), want.dq, 5e-2, "dq");
  ExpectNear(to_f32(dk), want.dk, 5e-2, "dk");
}

TEST(PackedAttention, SlotsOutsideTheRowAreClampedNotRead) {
  Case c(Shape(16, 1, 8, false), {{4, 4}}, 6);
  c.starts = {-5, 14};  // [0, 4) and [14, 16) after clamping
  c.lengths = {4, 1000};
  const Result got = RunKernel(c);
  Case same = c;
  same.starts = {0, 14};
  same.lengths = {4, 2};
  const Result want = RunKernel(same);
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.dk, want.dk);
}

TEST(PackedAttention, ValidateAndSizesNameWhatIsWrong) {
  PackedAttentionShape s = Shape(16, 2, 8, false);
  s.rows = 3, s.segments = 2;
  EXPECT_EQ(s.Validate(), "");
  PackedAttentionShape bad = s;
  bad.head_size = 0;
  EXPECT_EQ(bad.Validate(), "packed attention: the head size must be in [1, 16777216], found 0");
  bad = s;
  bad.scale = INFINITY;
  EXPECT_EQ(bad.Validate(), "packed attention: scale must be finite");
  const int64_t e = s.Elements();
  EXPECT_EQ(SizesError(s, e, e, e, 6, 6, 96), "");
  EXPECT_EQ(SizesError(s, e, e, e - 1, 6, 6, 96),
            "packed attention: value holds 767 elements, expected 768");
  EXPECT_EQ(SizesError(s, e, e, e, 6, 5, 96),
            "packed attention: segment starts holds 5 elements, expected 6");
}

}  // namespace
}  // namespace jaxbatch::kernels
