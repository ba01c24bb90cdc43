// Small datasets, and batches as bytes, for the load/ tests.
#ifndef JAXBATCH_LOAD_TEST_UTIL_H_
#define JAXBATCH_LOAD_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/dataset_builder.h"
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

// A graph dataset: graph i has nodes[i] nodes (column "nodes", float32
// values i * 1000 + k) and a chain of nodes[i] - 1 edges (senders k,
// receivers k + 1); graphs listed in `bad` get a sender past their nodes.
inline std::shared_ptr<const Dataset> GraphsDataset(const std::vector<int64_t>& nodes,
                                                    const std::vector<int64_t>& bad = {}) {
  auto x = std::make_shared<std::vector<float>>();
  auto senders = std::make_shared<std::vector<int32_t>>();
  auto receivers = std::make_shared<std::vector<int32_t>>();
  auto node_offsets = std::make_shared<std::vector<int64_t>>(1, 0);
  auto edge_offsets = std::make_shared<std::vector<int64_t>>(1, 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int64_t k = 0; k < nodes[i]; ++k) x->push_back(static_cast<float>(i * 1000 + k));
    for (int64_t k = 0; k + 1 < nodes[i]; ++k) {
      senders->push_back(static_cast<int32_t>(k));
      receivers->push_back(static_cast<int32_t>(k + 1));
    }
    if (std::find(bad.begin(), bad.end(), static_cast<int64_t>(i)) != bad.end()) {
      senders->push_back(static_cast<int32_t>(nodes[i]));
      receivers->push_back(0);
    }
    node_offsets->push_back(static_cast<int64_t>(x->size()));
    edge_offsets->push_back(static_cast<int64_t>(senders->size()));
  }
  auto owner = std::make_shared<std::tuple<decltype(x), decltype(senders), decltype(receivers),
                                           decltype(node_offsets), decltype(edge_offsets)>>(
      x, senders, receivers, node_offsets, edge_offsets);
  const auto n = static_cast<int64_t>(nodes.size());
  const auto m = static_cast<int64_t>(senders->size());
  return std::make_shared<const Dataset>(std::vector<RaggedColumn>{
      RaggedColumn::Ragged("nodes", DType::kFloat32, {}, x->data(), static_cast<int64_t>(x->size()),
                           node_offsets->data(), n, owner),
      RaggedColumn::Ragged("senders", DType::kInt32, {}, senders->data(), m, edge_offsets->data(),
                           n, owner),
      RaggedColumn::Ragged("receivers", DType::kInt32, {}, receivers->data(), m,
                           edge_offsets->data(), n, owner)});
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

// The batch's array `name`; OutOfRangeError naming it when there is none.
inline const Array& FindArray(const LoadedBatch& batch, std::string_view name) {
  for (const Array& a : batch.arrays) {
    if (a.name == name) return a;
  }
  throw OutOfRangeError(StrCat("the batch has no array ", name));
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

// The data split into chunks of `size` examples (the last one shorter).
inline std::vector<Dataset> Split(const Dataset& data, int64_t size) {
  std::vector<Dataset> chunks;
  for (int64_t b = 0; b < data.num_examples(); b += size) {
    DatasetBuilder builder(data);
    builder.AppendRange(data, b, std::min(b + size, data.num_examples()));
    chunks.push_back(std::move(builder).Finish());
  }
  return chunks;
}

inline constexpr char kReaderStopped[] = "data.parquet: the reader stopped";

// Serves a streaming loader's chunk requests from `chunks` until it closes.
// `serve(chunk)`, when given, runs before each chunk is handed over (to
// pause, say); when it returns false the reader stops instead, as a feeder
// that dies does: FailChunk(-1, kReaderStopped), and the feeder ends.
class ChunkFeeder {
 public:
  ChunkFeeder(Loader& loader, const std::vector<Dataset>& chunks,
              std::function<bool(int64_t chunk)> serve = {})
      : thread_([&loader, &chunks, serve = std::move(serve)] {
          while (true) {
            const int64_t c = loader.NextChunkRequest(std::chrono::milliseconds(5));
            if (c == ChunkCache::kClosed) return;
            if (c < 0) continue;
            if (serve && !serve(c)) {
              loader.FailChunk(-1, kReaderStopped);
              return;
            }
            loader.ProvideChunk(c, chunks[static_cast<size_t>(c)]);
          }
        }) {}
  ~ChunkFeeder() { thread_.join(); }

 private:
  std::thread thread_;
};

}  // namespace jaxbatch::testing

#endif  // JAXBATCH_LOAD_TEST_UTIL_H_
