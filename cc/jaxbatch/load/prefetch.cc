#include "jaxbatch/load/prefetch.h"

namespace jaxbatch {

void PrefetchExamples(const Dataset& dataset, std::span<const int64_t> examples) {
#if defined(__GNUC__) || defined(__clang__)
  ForEachPrefetchLine(dataset, examples, [](const uint8_t* line) { __builtin_prefetch(line); });
#else
  (void)dataset;
  (void)examples;
#endif
}

}  // namespace jaxbatch
