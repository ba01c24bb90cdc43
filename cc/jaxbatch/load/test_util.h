// Small datasets for the load/ tests.
#ifndef JAXBATCH_LOAD_TEST_UTIL_H_
#define JAXBATCH_LOAD_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch::testing {

// A dataset with one int32 column "tokens": example i holds lengths[i]
// values, value k of example i is i * 1000 + k.
inline std::shared_ptr<const Dataset> TokensDataset(const std::vector<int64_t>& lengths) {
  auto values = std::make_shared<std::vector<int32_t>>();
  auto offsets = std::make_shared<std::vector<int64_t>>(1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (int64_t k = 0; k < lengths[i]; ++k) values->push_back(static_cast<int32_t>(i * 1000 + k));
    offsets->push_back(static_cast<int64_t>(values->size()));
  }
  auto owner = std::make_shared<std::pair<decltype(values), decltype(offsets)>>(values, offsets);
  return std::make_shared<const Dataset>(std::vector<RaggedColumn>{RaggedColumn::Ragged(
      "tokens", DType::kInt32, {}, values->data(), static_cast<int64_t>(values->size()),
      offsets->data(), static_cast<int64_t>(lengths.size()), owner)});
}

inline std::vector<int64_t> RandomLengths(size_t n, int64_t max_length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(1, max_length);
  std::vector<int64_t> lengths(n);
  for (int64_t& l : lengths) l = dist(rng);
  return lengths;
}

}  // namespace jaxbatch::testing

#endif  // JAXBATCH_LOAD_TEST_UTIL_H_
