// XLA FFI handlers of packed attention (packed_attention.h) for the CPU
// platform, as the untyped function pointers jax.ffi.register_ffi_target
// takes in a capsule. This header names no XLA type, so the bindings that
// hand the pointers to Python include no XLA header.
//
// Example (Python, once per process):
//   jax.ffi.register_ffi_target("jaxbatch_packed_attention_fwd",
//                               _core.packed_attention_ffi()["forward"], platform="cpu")
#ifndef JAXBATCH_KERNELS_PACKED_ATTENTION_FFI_H_
#define JAXBATCH_KERNELS_PACKED_ATTENTION_FFI_H_

namespace jaxbatch::kernels {

// Forward: (q, k, v, lengths, starts; scale, causal, heads_first) -> (out, lse).
void* PackedAttentionForwardHandler();
// Backward: (q, k, v, lengths, starts, out, lse, d_out; same attributes) -> (dq, dk, dv).
void* PackedAttentionBackwardHandler();

}  // namespace jaxbatch::kernels

#endif  // JAXBATCH_KERNELS_PACKED_ATTENTION_FFI_H_
