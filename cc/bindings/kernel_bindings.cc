// Binds kernels/: the XLA FFI handlers' function pointers in capsules, for
// jax.ffi.register_ffi_target (jaxbatch/_src/ops/attention_kernel.py).
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "jaxbatch/kernels/packed_attention.h"
#include "jaxbatch/kernels/packed_attention_ffi.h"

namespace jaxbatch::bindings {

void BindKernels(nb::module_& m) {
  m.def(
      "packed_attention_ffi",
      [] {
        nb::dict targets;
        targets["forward"] = nb::capsule(kernels::PackedAttentionForwardHandler());
        targets["backward"] = nb::capsule(kernels::PackedAttentionBackwardHandler());
        return targets;
      },
      "The CPU packed-attention kernel's XLA FFI handlers: {'forward', 'backward'} -> capsule.");
  m.def("packed_attention_uses_avx2", &kernels::PackedAttentionUsesAvx2,
        "Whether the packed-attention kernel's inner loops run with AVX2 and FMA on this CPU.");
}

}  // namespace jaxbatch::bindings
