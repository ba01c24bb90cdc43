// The attention loops with AVX2 and FMA, for x86-64 CPUs that have them
// (packed_attention.cc asks the CPU at run time); only this file's own
// functions carry the target (attention_loops_impl.h says why).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define JAXBATCH_LOOPS_NAMESPACE avx2
#define JAXBATCH_LOOPS_TARGET __attribute__((target("avx2,fma")))
#include "jaxbatch/kernels/attention_loops_impl.h"
#endif
