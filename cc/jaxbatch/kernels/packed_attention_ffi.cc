// The XLA FFI edge of packed attention (packed_attention.h): decodes XLA's
// buffers and attributes into a PackedAttentionShape and spans, checks them,
// and runs the (row, head) items on XLA's intra-op thread pool. Registered
// for the CPU platform from Python (jaxbatch/_src/ops/attention_kernel.py)
// with the capsules the extension module hands out.
//
// Operands: q, k, v as [..., L, N, H] (heads_first = 0) or [..., N, L, H]
// (heads_first = 1), every leading axis a row; lengths and starts [..., S]
// int32. Attributes: scale (f32), causal and heads_first (i64, 0 or 1).
#include "jaxbatch/kernels/packed_attention_ffi.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "jaxbatch/kernels/packed_attention.h"
#include "xla/ffi/api/ffi.h"

namespace jaxbatch::kernels {
namespace {

namespace ffi = xla::ffi;

// Runs fn(first, end) over [0, items) in chunks, on the pool's threads and
// the calling one. XLA may run a scheduled task later, on the caller's
// thread, or never in parallel, so the caller claims chunks too and waits
// only for chunks already claimed; a task that starts after the last chunk
// was claimed finds nothing to do and touches nothing but the shared state.
template <typename F>
void ParallelFor(ffi::ThreadPool& pool, int64_t items, const F& fn) {
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t chunks = std::min<int64_t>(items, threads * 4);
  if (chunks <= 1 || threads == 1) {
    fn(0, items);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    int64_t done = 0;
    std::mutex mu;
    std::condition_variable all_done;
  };
  auto state = std::make_shared<State>();
  auto work = [state, chunks, items, &fn] {
    for (int64_t c; (c = state->next.fetch_add(1)) < chunks;) {
      fn(items * c / chunks, items * (c + 1) / chunks);
      std::lock_guard lock(state->mu);
      if (++state->done == chunks) state->all_done.notify_all();
    }
  };
  for (int64_t t = 1; t < threads; ++t) {
    auto task = work;  // each task owns its copy (and a share of the state)
    pool.Schedule(std::move(task));
  }
  work();
  std::unique_lock lock(state->mu);
  state->all_done.wait(lock, [&] { return state->done == chunks; });
}

// The shape of a call from q's and lengths' dimensions.
ffi::Unexpected<ffi::Error> Refuse(const std::string& message) {
  return ffi::Unexpected<ffi::Error>(ffi::Error::InvalidArgument(message));
}

ffi::ErrorOr<PackedAttentionShape> ShapeOf(const ffi::AnyBuffer& q, const ffi::AnyBuffer& lengths,
                                           float scale, int64_t causal, int64_t heads_first) {
  const auto dims = q.dimensions();
  const auto seg = lengths.dimensions();
  if (dims.size() < 3 || seg.size() != dims.size() - 2) {
    return Refuse(
        "packed attention: q must be [..., L, N, H] and segment lengths [..., S], found ranks " +
        std::to_string(dims.size()) + " and " + std::to_string(seg.size()));
  }
  PackedAttentionShape shape;
  shape.rows = 1;
  for (size_t i = 0; i + 3 < dims.size(); ++i) {
    if (dims[i] != seg[i]) {
      return Refuse("packed attention: q's and the segments' row axes differ");
    }
    shape.rows *= dims[i];
  }
  const size_t r = dims.size() - 3;
  shape.layout = heads_first ? AttentionLayout::kBNTH : AttentionLayout::kBTNH;
  shape.length = heads_first ? dims[r + 1] : dims[r];
  shape.heads = heads_first ? dims[r] : dims[r + 1];
  shape.head_size = dims[r + 2];
  shape.segments = seg[seg.size() - 1];
  shape.scale = scale;
  shape.causal = causal != 0;
  if (std::string bad = shape.Validate(); !bad.empty()) {
    return Refuse(bad);
  }
  return shape;
}

// The shape of a call, once every buffer is checked: q-like buffers (k, v,
// out, gradients) all q's dtype (float32 or bfloat16) and size, segments
// int32 of [rows, S], lse float32 of [rows, heads, L].
ffi::ErrorOr<PackedAttentionShape> Prepare(const ffi::AnyBuffer& q,
                                           std::initializer_list<const ffi::AnyBuffer*> like_q,
                                           const ffi::AnyBuffer& lengths,
                                           const ffi::AnyBuffer& starts, size_t lse_count,
                                           float scale, int64_t causal, int64_t heads_first) {
  auto shape = ShapeOf(q, lengths, scale, causal, heads_first);
  if (shape.has_error()) return shape;
  if (q.element_type() != ffi::DataType::F32 && q.element_type() != ffi::DataType::BF16) {
    return Refuse("packed attention: q, k and v must be float32 or bfloat16");
  }
  if (lengths.element_type() != ffi::DataType::S32 || starts.element_type() != ffi::DataType::S32) {
    return Refuse("packed attention: segment lengths and starts must be int32");
  }
  for (const ffi::AnyBuffer* b : like_q) {
    if (b->element_type() != q.element_type() || b->element_count() != q.element_count()) {
      return Refuse("packed attention: q, k, v, out and the gradients differ in dtype or size");
    }
  }
  const std::string sizes =
      SizesError(*shape, q.element_count(), q.element_count(), q.element_count(),
                 lengths.element_count(), starts.element_count(), lse_count);
  if (!sizes.empty()) return Refuse(sizes);
  return shape;
}

template <typename T>
std::span<T> Span(const ffi::AnyBuffer& b) {
  return {static_cast<T*>(b.untyped_data()), b.element_count()};
}

template <typename T>
std::span<const T> ConstSpan(const ffi::AnyBuffer& b) {
  return {static_cast<const T*>(b.untyped_data()), b.element_count()};
}

template <typename T>
PackedAttentionInputs<T> InputsOf(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k,
                                  const ffi::AnyBuffer& v, const ffi::AnyBuffer& lengths,
                                  const ffi::AnyBuffer& starts) {
  return {ConstSpan<T>(q),
          ConstSpan<T>(k),
          ConstSpan<T>(v),
          {ConstSpan<int32_t>(lengths), ConstSpan<int32_t>(starts)}};
}

template <typename T>
void RunForward(ffi::ThreadPool& pool, const PackedAttentionShape& shape,
                const PackedAttentionInputs<T>& in, std::span<T> out, std::span<float> lse) {
  ParallelFor(pool, shape.Items(), [&](int64_t first, int64_t end) {
    PackedAttentionForward<T>(shape, in, out, lse, first, end);
  });
}

ffi::Error Forward(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer lengths,
                   ffi::AnyBuffer starts, float scale, int64_t causal, int64_t heads_first,
                   ffi::ThreadPool pool, ffi::Result<ffi::AnyBuffer> out,
                   ffi::Result<ffi::Buffer<ffi::F32>> lse) {
  const auto shape = Prepare(q, {&k, &v, &*out}, lengths, starts, lse->element_count(), scale,
                             causal, heads_first);
  if (shape.has_error()) return shape.error();
  const std::span<float> lse_span(lse->typed_data(), lse->element_count());
  if (q.element_type() == ffi::DataType::F32) {
    RunForward<float>(pool, *shape, InputsOf<float>(q, k, v, lengths, starts), Span<float>(*out),
                      lse_span);
  } else {
    RunForward<BFloat16>(pool, *shape, InputsOf<BFloat16>(q, k, v, lengths, starts),
                         Span<BFloat16>(*out), lse_span);
  }
  return ffi::Error::Success();
}

template <typename T>
void RunBackward(ffi::ThreadPool& pool, const PackedAttentionShape& shape,
                 const PackedAttentionInputs<T>& in, const ffi::AnyBuffer& out,
                 std::span<const float> lse, const ffi::AnyBuffer& d_out, ffi::AnyBuffer& dq,
                 ffi::AnyBuffer& dk, ffi::AnyBuffer& dv) {
  const auto o = ConstSpan<T>(out), g = ConstSpan<T>(d_out);
  const auto sq = Span<T>(dq), sk = Span<T>(dk), sv = Span<T>(dv);
  ParallelFor(pool, shape.Items(), [&](int64_t first, int64_t end) {
    PackedAttentionBackward<T>(shape, in, o, lse, g, sq, sk, sv, first, end);
  });
}

ffi::Error Backward(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer lengths,
                    ffi::AnyBuffer starts, ffi::AnyBuffer out, ffi::Buffer<ffi::F32> lse,
                    ffi::AnyBuffer d_out, float scale, int64_t causal, int64_t heads_first,
                    ffi::ThreadPool pool, ffi::Result<ffi::AnyBuffer> dq,
                    ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv) {
  const auto shape = Prepare(q, {&k, &v, &out, &d_out, &*dq, &*dk, &*dv}, lengths, starts,
                             lse.element_count(), scale, causal, heads_first);
  if (shape.has_error()) return shape.error();
  const std::span<const float> lse_span(lse.typed_data(), lse.element_count());
  if (q.element_type() == ffi::DataType::F32) {
    RunBackward<float>(pool, *shape, InputsOf<float>(q, k, v, lengths, starts), out, lse_span,
                       d_out, *dq, *dk, *dv);
  } else {
    RunBackward<BFloat16>(pool, *shape, InputsOf<BFloat16>(q, k, v, lengths, starts), out, lse_span,
                          d_out, *dq, *dk, *dv);
  }
  return ffi::Error::Success();
}

// q, k, v, segment lengths and starts (int32): both handlers' first operands.
template <typename B>
auto WithInputs(B binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>();
}

// scale, causal, heads_first and XLA's thread pool: both handlers' next.
template <typename B>
auto WithAttributes(B binding) {
  return std::move(binding)
      .template Attr<float>("scale")
      .template Attr<int64_t>("causal")
      .template Attr<int64_t>("heads_first")
      .template Ctx<ffi::ThreadPool>();
}

}  // namespace

// (inputs; attributes) -> (out, lse).
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxbatchPackedAttentionForward, Forward,
                              WithAttributes(WithInputs(ffi::Ffi::Bind()))
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

// (inputs, out, lse, d_out; attributes) -> (dq, dk, dv).
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxbatchPackedAttentionBackward, Backward,
                              WithAttributes(WithInputs(ffi::Ffi::Bind())
                                                 .Arg<ffi::AnyBuffer>()
                                                 .Arg<ffi::Buffer<ffi::F32>>()
                                                 .Arg<ffi::AnyBuffer>())
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

}  // namespace jaxbatch::kernels

namespace jaxbatch::kernels {
void* PackedAttentionForwardHandler() {
  return reinterpret_cast<void*>(&JaxbatchPackedAttentionForward);
}
void* PackedAttentionBackwardHandler() {
  return reinterpret_cast<void*>(&JaxbatchPackedAttentionBackward);
}
}  // namespace jaxbatch::kernels
