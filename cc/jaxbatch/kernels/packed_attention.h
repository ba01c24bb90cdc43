// Dot-product attention over packed rows that computes only within segments.
//
// A packed row of `length` tokens holds up to `segments` sequences laid out
// as (start, length) slots. For every row, head and segment this computes
// that segment's queries against that segment's keys only (the earlier ones,
// `causal`), a numerically stable softmax and the weighted sum of that
// segment's values; cells outside every segment (padding) get exact zeros. A
// NaN or Inf in one segment never reaches another segment or the padding: no
// product across segments is ever formed. Work is proportional to the sum of
// the squared segment lengths, not to length squared.
//
// The backward pass is FlashAttention-2's: the forward pass keeps each
// query's log-sum-exp of scores, the backward pass recomputes the
// probabilities from it and gives dq, dk and dv.
//
// The functions are pure: plain spans in, plain spans out, no threads. The
// unit of parallel work is one (row, head) pair ("item"); callers split
// [0, Items()) into ranges and run them on their own threads (the XLA FFI
// edge, packed_attention_ffi.cc, on XLA's thread pool). Inner loops run with
// AVX2 and FMA where the CPU has them (checked at run time), else with the
// baseline x86-64 (or other) instruction set the library was built for.
//
// Example:
//   PackedAttentionShape shape{.rows = 2, .length = 256, .heads = 12,
//                              .head_size = 32, .segments = 8};
//   std::string bad = shape.Validate();  // "" when usable
//   PackedAttentionForward<float>(shape, {q, k, v, lengths, starts}, out, lse,
//                                 0, shape.Items());
#ifndef JAXBATCH_KERNELS_PACKED_ATTENTION_H_
#define JAXBATCH_KERNELS_PACKED_ATTENTION_H_

#include <cstdint>
#include <span>
#include <string>

namespace jaxbatch::kernels {

// bfloat16 as stored: the upper 16 bits of a float32. Computation widens to
// float32; results are rounded to nearest even.
struct BFloat16 {
  uint16_t bits;
};

// Where a token's head vector lies: [rows, length, heads, head_size]
// (jax.nn.dot_product_attention's BTNH) or [rows, heads, length, head_size].
enum class AttentionLayout { kBTNH, kBNTH };

struct PackedAttentionShape {
  int64_t rows = 0;
  int64_t length = 0;  // tokens a row (L)
  int64_t heads = 0;
  int64_t head_size = 0;
  int64_t segments = 0;  // (start, length) slots a row (S)
  AttentionLayout layout = AttentionLayout::kBTNH;
  float scale = 1.0f;  // applied to q.k
  bool causal = false;

  // Units of parallel work: (row, head) pairs.
  int64_t Items() const { return rows * heads; }
  // Elements of q (and k, v, out): rows * length * heads * head_size.
  int64_t Elements() const { return rows * length * heads * head_size; }
  // "" when every extent is usable (positive, L, H, S at most 2^24, the
  // product without overflow), else what is wrong.
  std::string Validate() const;
};

// Segment slots [rows, segments]: starts[r, s] and lengths[r, s]. A slot is
// clamped into [0, length) (a negative length is empty), so no input can
// reach memory outside the row; slots should not overlap (a batch's never
// do): where they do, the later one's results are kept.
struct PackedSegments {
  std::span<const int32_t> lengths;
  std::span<const int32_t> starts;
};

template <typename T>
struct PackedAttentionInputs {
  std::span<const T> query;
  std::span<const T> key;
  std::span<const T> value;
  PackedSegments segments;
};

// out (q's shape) and lse [rows, heads, length] float32 (natural log; 0 in
// padding) for the items [first_item, end_item). Spans must have the
// shape's sizes (SizesError says which does not).
template <typename T>
void PackedAttentionForward(const PackedAttentionShape& shape, const PackedAttentionInputs<T>& in,
                            std::span<T> out, std::span<float> lse, int64_t first_item,
                            int64_t end_item);

// dq, dk, dv (q's shape; 0 in padding) from the forward pass's inputs, its
// out and lse, and d_out, for the items [first_item, end_item).
template <typename T>
void PackedAttentionBackward(const PackedAttentionShape& shape, const PackedAttentionInputs<T>& in,
                             std::span<const T> out, std::span<const float> lse,
                             std::span<const T> d_out, std::span<T> d_query, std::span<T> d_key,
                             std::span<T> d_value, int64_t first_item, int64_t end_item);

// "" when every span has the size `shape` needs (q/k/v/out-like spans
// Elements(), segments rows * segments, lse rows * heads * length), else a
// message naming the first that does not.
std::string SizesError(const PackedAttentionShape& shape, int64_t query, int64_t key, int64_t value,
                       int64_t lengths, int64_t starts, int64_t lse);

// Whether the inner loops run with AVX2 and FMA on this CPU.
bool PackedAttentionUsesAvx2();

}  // namespace jaxbatch::kernels

#endif  // JAXBATCH_KERNELS_PACKED_ATTENTION_H_
