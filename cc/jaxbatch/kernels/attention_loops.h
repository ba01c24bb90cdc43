// The inner loops of packed attention over one segment of one head, on
// float32 scratch buffers the caller (packed_attention.cc) has packed. They
// are plain loops over fixed-size register tiles that the compiler
// vectorises; attention_loops_impl.h defines them once and is compiled twice,
// for the baseline instruction set and, on x86-64, with AVX2 and FMA
// (chosen at run time), so a wheel built anywhere runs on any x86-64.
#ifndef JAXBATCH_KERNELS_ATTENTION_LOOPS_H_
#define JAXBATCH_KERNELS_ATTENTION_LOOPS_H_

#include <cstdint>

namespace jaxbatch::kernels::internal {

// Query tiles are kQueryTile rows; key columns are padded to kKeyTile.
inline constexpr int64_t kQueryTile = 4;
inline constexpr int64_t kKeyTile = 16;

inline int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// One segment of n tokens, head size h. Query-like buffers have
// RoundUp(n, kQueryTile) rows of h (the rows past n zero); transposed key-like
// buffers are [h, stride] with stride = RoundUp(n, kKeyTile) (the columns past
// n zero). Scores are in log2 units: q is pre-multiplied by scale * log2(e).
struct SegmentForward {
  int64_t n = 0, h = 0, stride = 0;
  bool causal = false;
  const float* q = nullptr;   // [rows, h], scaled
  const float* kt = nullptr;  // [h, stride]
  const float* v = nullptr;   // [n, h]
  float* scores = nullptr;    // scratch [kQueryTile, stride]
  float* probs = nullptr;     // scratch [kQueryTile, stride]
  float* out = nullptr;       // [rows, h]
  float* lse2 = nullptr;      // [rows]: log2 of each query's sum of 2^score
};

struct SegmentBackward {
  int64_t n = 0, h = 0, stride = 0;
  bool causal = false;
  const float* q = nullptr;      // [rows, h], scaled as in the forward pass
  const float* kt = nullptr;     // [h, stride]
  const float* k = nullptr;      // [n, h]
  const float* vt = nullptr;     // [h, stride]
  const float* d_out = nullptr;  // [rows, h]
  const float* lse2 = nullptr;   // [rows]
  const float* delta = nullptr;  // [rows]: rowsum(d_out * out)
  float* scores = nullptr;       // scratch [kQueryTile, stride], four of them
  float* probs = nullptr;
  float* d_probs = nullptr;
  float* d_scores = nullptr;
  float* d_q = nullptr;  // [rows, h]: sum_j dS_ij k_j (the caller scales)
  float* d_k = nullptr;  // [n, h]: sum_i dS_ij q_i (q scaled; the caller rescales)
  float* d_v = nullptr;  // [n, h]: sum_i P_ij dO_i
};

struct AttentionLoops {
  void (*forward)(const SegmentForward&);
  void (*backward)(const SegmentBackward&);
};

// Tests: run the baseline loops even where AVX2 is there (false: the best
// again). Not for concurrent use with running kernels.
void UseBaselineLoopsForTesting(bool baseline);

namespace baseline {
AttentionLoops Loops();
}  // namespace baseline
namespace avx2 {
AttentionLoops Loops();
}  // namespace avx2

}  // namespace jaxbatch::kernels::internal

#endif  // JAXBATCH_KERNELS_ATTENTION_LOOPS_H_
