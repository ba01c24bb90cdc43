// Small datasets, and batches as bytes, for the load/ tests.
#ifndef JAXBATCH_LOAD_TEST_UTIL_H_
#define JAXBATCH_LOAD_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "jaxbatch/data/dataset.h"
#include "jaxbatch/load/loader.h"

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

// A batch as plain bytes (each array's name and data), to compare streams exactly.
inline std::string Fingerprint(const LoadedBatch& batch) {
  std::string out;
  for (const Array& a : batch.arrays) {
    out += a.name;
    out.append(reinterpret_cast<const char*>(a.data), static_cast<size_t>(a.num_bytes()));
  }
  return out;
}

// The fingerprints of the loader's next `limit` batches (-1: all).
inline std::vector<std::string> Drain(Loader& loader, int64_t limit = -1) {
  std::vector<std::string> out;
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    std::optional<LoadedBatch> batch = loader.Next();
    if (!batch) break;
    out.push_back(Fingerprint(*batch));
  }
  return out;
}

}  // namespace jaxbatch::testing

#endif  // JAXBATCH_LOAD_TEST_UTIL_H_
