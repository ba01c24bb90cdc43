// The loops declared in attention_loops.h, written once. A translation unit
// defines JAXBATCH_LOOPS_NAMESPACE (baseline, avx2) and JAXBATCH_LOOPS_TARGET
// (empty, or a target attribute) and includes this file. Every function here
// carries the target attribute and uses no standard-library template or
// inline function: an instantiation compiled for AVX2 could otherwise be the
// one the linker keeps for the baseline code too, and fault on an older CPU.
// No lambdas either (they would not inherit the attribute).
//
// Why plain loops: they need nothing pip or Debian would have to ship, and at
// a row of one full segment (the dense form's work) they ran 1.06-1.4x XLA's
// dense GEMMs, AVX2 1.5x the baseline loops (bench/bench_pack_rows.py
// --attention-only; docs/padding-and-masking.md). No GEMM library (Eigen,
// Highway, oneDNN) was measured against them.

#include "jaxbatch/kernels/attention_loops.h"

namespace jaxbatch::kernels::internal::JAXBATCH_LOOPS_NAMESPACE {
namespace {

#define TARGET JAXBATCH_LOOPS_TARGET

TARGET inline float FromBits(int32_t bits) {
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

TARGET inline int32_t ToBits(float f) {
  int32_t bits;
  __builtin_memcpy(&bits, &f, sizeof bits);
  return bits;
}

// 2^x without branches (so a loop of it vectorises): x rounded to n + f,
// f in [-0.5, 0.5], 2^f by its Taylor polynomial (relative error 1.2e-7),
// 2^n by the exponent bits. Below -126 it is 0, above 127 infinity, and a
// NaN stays NaN.
TARGET inline float Exp2(float x) {
  float c = x < -126.0f ? -126.0f : x;
  c = c > 127.0f ? 127.0f : c;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = c + magic;
  const int32_t n = ToBits(t) - ToBits(magic);
  const float f = c - (t - magic);
  float p = 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  float r = p * FromBits((n + 127) << 23);
  r = x < -126.0f ? 0.0f : r;
  r = x > 127.0f ? FromBits(0x7f800000) : r;
  return x != x ? x : r;
}

TARGET inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// s[r, j] = sum_d a[r, d] * bt[d, j] for kQueryTile rows of a ([rows, h])
// and the columns j < cols (a multiple of kKeyTile) of bt ([h, stride]).
template <int kH>
TARGET void TileTimesTransposed(const float* a, int64_t h_runtime, const float* bt, int64_t stride,
                                int64_t cols, float* s) {
  const int64_t h = kH ? kH : h_runtime;
  for (int64_t j = 0; j < cols; j += kKeyTile) {
    float acc[kQueryTile][kKeyTile] = {};
    for (int64_t d = 0; d < h; ++d) {
      const float* b = bt + d * stride + j;
      const float a0 = a[d], a1 = a[h + d], a2 = a[2 * h + d], a3 = a[3 * h + d];
      for (int x = 0; x < kKeyTile; ++x) {
        acc[0][x] += a0 * b[x];
        acc[1][x] += a1 * b[x];
        acc[2][x] += a2 * b[x];
        acc[3][x] += a3 * b[x];
      }
    }
    for (int r = 0; r < kQueryTile; ++r) {
      for (int x = 0; x < kKeyTile; ++x) s[r * stride + j + x] = acc[r][x];
    }
  }
}

// out[r, :] = sum_{j < cols} p[r, j] * b[j, :] for kQueryTile rows.
template <int kH>
TARGET void TileTimes(const float* p, int64_t stride, const float* b, int64_t h_runtime,
                      int64_t cols, float* out) {
  const int64_t h = kH ? kH : h_runtime;
  if constexpr (kH != 0 && kH <= 32) {
    for (int r = 0; r < kQueryTile; r += 2) {
      float acc0[kH] = {}, acc1[kH] = {};
      const float* p0 = p + r * stride;
      const float* p1 = p0 + stride;
      for (int64_t j = 0; j < cols; ++j) {
        const float* row = b + j * kH;
        const float w0 = p0[j], w1 = p1[j];
        for (int x = 0; x < kH; ++x) {
          acc0[x] += w0 * row[x];
          acc1[x] += w1 * row[x];
        }
      }
      for (int x = 0; x < kH; ++x) {
        out[r * kH + x] = acc0[x];
        out[(r + 1) * kH + x] = acc1[x];
      }
    }
  } else {
    for (int r = 0; r < kQueryTile; ++r) {
      float* o = out + r * h;
      for (int64_t x = 0; x < h; ++x) o[x] = 0.0f;
      const float* pr = p + r * stride;
      for (int64_t j = 0; j < cols; ++j) {
        const float* row = b + j * h;
        const float w = pr[j];
        for (int64_t x = 0; x < h; ++x) o[x] += w * row[x];
      }
    }
  }
}

// acc[j, :] += sum_r p[r, j] * a[r, :] for j < cols (the transposed product
// that gives dk and dv).
template <int kH>
TARGET void AccumulateTransposed(const float* p, int64_t stride, const float* a, int64_t h_runtime,
                                 int64_t cols, float* acc) {
  const int64_t h = kH ? kH : h_runtime;
  const float* a0 = a;
  const float* a1 = a + h;
  const float* a2 = a + 2 * h;
  const float* a3 = a + 3 * h;
  for (int64_t j = 0; j < cols; ++j) {
    const float w0 = p[j], w1 = p[stride + j], w2 = p[2 * stride + j], w3 = p[3 * stride + j];
    float* row = acc + j * h;
    for (int64_t x = 0; x < h; ++x) {
      row[x] += w0 * a0[x] + w1 * a1[x] + w2 * a2[x] + w3 * a3[x];
    }
  }
}

// The keys query tile i0 needs: all n, or up to its last query (causal).
TARGET inline int64_t KeyEnd(bool causal, int64_t n, int64_t i0) {
  return causal ? Min(n, i0 + kQueryTile) : n;
}

template <int kH>
TARGET void Forward(const SegmentForward& a) {
  const int64_t h = a.h;
  for (int64_t i0 = 0; i0 < a.n; i0 += kQueryTile) {
    const int64_t key_end = KeyEnd(a.causal, a.n, i0);
    const int64_t cols = RoundUp(key_end, kKeyTile);
    TileTimesTransposed<kH>(a.q + i0 * h, h, a.kt, a.stride, cols, a.scores);
    float inverse[kQueryTile];
    for (int64_t r = 0; r < kQueryTile; ++r) {
      const int64_t i = i0 + r;
      const float* s = a.scores + r * a.stride;
      float* p = a.probs + r * a.stride;
      const int64_t end = i >= a.n ? 0 : (a.causal ? i + 1 : a.n);
      // The comparison skips a NaN score; 2^(NaN - m) below carries it.
      float m = -FromBits(0x7f800000);
      for (int64_t j = 0; j < end; ++j) m = s[j] > m ? s[j] : m;
      for (int64_t j = 0; j < end; ++j) p[j] = Exp2(s[j] - m);
      for (int64_t j = end; j < cols; ++j) p[j] = 0.0f;
      float sum = 0.0f;
      for (int64_t j = 0; j < end; ++j) sum += p[j];
      inverse[r] = end ? 1.0f / sum : 0.0f;
      if (i < a.n) a.lse2[i] = m + __builtin_log2f(sum);
    }
    TileTimes<kH>(a.probs, a.stride, a.v, h, key_end, a.out + i0 * h);
    for (int64_t r = 0; r < kQueryTile; ++r) {
      float* o = a.out + (i0 + r) * h;
      for (int64_t x = 0; x < h; ++x) o[x] *= inverse[r];
    }
  }
}

template <int kH>
TARGET void Backward(const SegmentBackward& a) {
  const int64_t h = a.h;
  for (int64_t i0 = 0; i0 < a.n; i0 += kQueryTile) {
    const int64_t key_end = KeyEnd(a.causal, a.n, i0);
    const int64_t cols = RoundUp(key_end, kKeyTile);
    TileTimesTransposed<kH>(a.q + i0 * h, h, a.kt, a.stride, cols, a.scores);
    TileTimesTransposed<kH>(a.d_out + i0 * h, h, a.vt, a.stride, cols, a.d_probs);
    for (int64_t r = 0; r < kQueryTile; ++r) {
      const int64_t i = i0 + r;
      const float* s = a.scores + r * a.stride;
      const float* dp = a.d_probs + r * a.stride;
      float* p = a.probs + r * a.stride;
      float* ds = a.d_scores + r * a.stride;
      const int64_t end = i >= a.n ? 0 : (a.causal ? i + 1 : a.n);
      const float lse2 = end ? a.lse2[i] : 0.0f;
      const float delta = end ? a.delta[i] : 0.0f;
      for (int64_t j = 0; j < end; ++j) {
        p[j] = Exp2(s[j] - lse2);
        ds[j] = p[j] * (dp[j] - delta);
      }
      for (int64_t j = end; j < cols; ++j) p[j] = ds[j] = 0.0f;
    }
    TileTimes<kH>(a.d_scores, a.stride, a.k, h, key_end, a.d_q + i0 * h);
    AccumulateTransposed<kH>(a.probs, a.stride, a.d_out + i0 * h, h, key_end, a.d_v);
    AccumulateTransposed<kH>(a.d_scores, a.stride, a.q + i0 * h, h, key_end, a.d_k);
  }
}

TARGET void ForwardAnyHead(const SegmentForward& a) {
  switch (a.h) {
    case 16:
      return Forward<16>(a);
    case 32:
      return Forward<32>(a);
    case 64:
      return Forward<64>(a);
    case 128:
      return Forward<128>(a);
    default:
      return Forward<0>(a);
  }
}

TARGET void BackwardAnyHead(const SegmentBackward& a) {
  switch (a.h) {
    case 16:
      return Backward<16>(a);
    case 32:
      return Backward<32>(a);
    case 64:
      return Backward<64>(a);
    case 128:
      return Backward<128>(a);
    default:
      return Backward<0>(a);
  }
}

#undef TARGET

}  // namespace

AttentionLoops Loops() { return {&ForwardAnyHead, &BackwardAnyHead}; }

}  // namespace jaxbatch::kernels::internal::JAXBATCH_LOOPS_NAMESPACE
