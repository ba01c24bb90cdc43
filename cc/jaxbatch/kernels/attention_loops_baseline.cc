// The attention loops for the instruction set the library is built for
// (x86-64's baseline SSE2 in a wheel).
#define JAXBATCH_LOOPS_NAMESPACE baseline
#define JAXBATCH_LOOPS_TARGET
#include "jaxbatch/kernels/attention_loops_impl.h"
