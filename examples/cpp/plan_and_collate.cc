// plan_and_collate: the jaxbatch core without Python.
//
// Builds a dataset of token sequences (with aligned labels and a fixed
// per-example id) from std::vectors, plans it twice (AutoBuckets under a
// token budget, then sequence packing), collates every batch, checks that
// every example comes back exactly once with its own tokens, and prints the
// plans' stats and one batch. Exits non-zero when anything is inconsistent,
// so ctest runs it as a test.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jaxbatch/jaxbatch.h"

namespace {

using jaxbatch::Array;
using jaxbatch::BatchPlan;
using jaxbatch::Dataset;
using jaxbatch::DType;
using jaxbatch::RaggedColumn;

constexpr int64_t kNumExamples = 4000;
constexpr int64_t kMaxLength = 128;
constexpr int32_t kLabelPad = -100;

const Array* FindArray(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& array : arrays) {
    if (array.name == name) return &array;
  }
  return nullptr;
}

template <typename T>
T At(const Array& array, int64_t index) {
  T value;
  std::memcpy(&value, array.data + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return value;
}

// Collates every batch of `plan` and checks it against the source vectors.
// Returns the number of problems found.
int CheckPlan(const char* title, const Dataset& ds, const BatchPlan& plan,
              const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets) {
  const jaxbatch::PlanStats& stats = plan.stats;
  std::printf(
      "%s: %lld examples -> %lld batches, %lld shapes, efficiency %.3f "
      "(%lld real / %lld padded elements), dropped %lld, skipped %lld\n",
      title, static_cast<long long>(stats.examples), static_cast<long long>(stats.batches),
      static_cast<long long>(stats.shapes), stats.efficiency,
      static_cast<long long>(stats.real_elements), static_cast<long long>(stats.padded_elements),
      static_cast<long long>(stats.dropped), static_cast<long long>(stats.skipped));
  for (size_t s = 0; s < plan.shapes.size(); ++s) {
    std::printf("  shape %zu: %lld rows x %lld%s, %lld batches\n", s,
                static_cast<long long>(plan.shapes[s].rows),
                static_cast<long long>(plan.shapes[s].length), plan.packed ? " (packed)" : "",
                static_cast<long long>(stats.batches_per_shape[s]));
  }

  int problems = 0;
  auto fail = [&](const std::string& what) {
    if (++problems <= 10) std::fprintf(stderr, "%s: %s\n", title, what.c_str());
  };
  std::vector<int> seen(kNumExamples, 0);
  jaxbatch::CollateOptions options;
  options.pad_values = {{"labels", kLabelPad}};
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const std::vector<Array> arrays = jaxbatch::Collate(ds, plan, b, options);
    const Array* values = FindArray(arrays, "tokens");
    const Array* labels = FindArray(arrays, "labels");
    const Array* index = FindArray(arrays, "example_index");
    const Array* id = FindArray(arrays, "id");
    if (!values || !labels || !index || !id) {
      fail("batch " + std::to_string(b) + " lacks an array");
      continue;
    }
    const int64_t rows = values->shape[0];
    const int64_t length = values->shape[1];
    const int64_t slots = plan.packed ? index->shape[1] : 1;
    if (rows * length > 4096) fail("batch " + std::to_string(b) + " is over the token budget");
    for (int64_t r = 0; r < rows; ++r) {
      int64_t position = 0;  // Where the next example starts in this row.
      for (int64_t s = 0; s < slots; ++s) {
        const int64_t e = At<int64_t>(*index, r * slots + s);
        if (e < 0) continue;
        if (e >= kNumExamples || ++seen[static_cast<size_t>(e)] != 1) {
          fail("example " + std::to_string(e) + " seen twice or out of range");
          continue;
        }
        if (At<int64_t>(*id, r * slots + s) != e) fail("id column does not match example_index");
        const int64_t n = offsets[static_cast<size_t>(e) + 1] - offsets[static_cast<size_t>(e)];
        for (int64_t t = 0; t < n; ++t) {
          const int32_t want = tokens[static_cast<size_t>(offsets[static_cast<size_t>(e)] + t)];
          if (At<int32_t>(*values, r * length + position + t) != want) {
            fail("example " + std::to_string(e) + " has a wrong token");
            break;
          }
        }
        position += n;
      }
      for (int64_t t = position; t < length; ++t) {
        if (At<int32_t>(*labels, r * length + t) != kLabelPad) {
          fail("batch " + std::to_string(b) + " has padding that is not the label pad");
          break;
        }
      }
    }
  }
  for (int64_t e = 0; e < kNumExamples; ++e) {
    if (seen[static_cast<size_t>(e)] != 1) fail("example " + std::to_string(e) + " is missing");
  }
  return problems;
}

// Prints the first rows of batch 0 of a plan.
void PrintBatch(const Dataset& ds, const BatchPlan& plan) {
  const std::vector<Array> arrays = jaxbatch::Collate(ds, plan, 0, {});
  for (const Array& array : arrays) {
    std::string shape;
    for (int64_t d : array.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("  %-20s %-8s [%s]\n", array.name.c_str(),
                std::string(jaxbatch::DTypeName(array.dtype)).c_str(), shape.c_str());
  }
  const Array* tokens = FindArray(arrays, "tokens");
  const Array* segment_ids = FindArray(arrays, "tokens_segment_ids");
  const int64_t length = tokens->shape[1];
  for (int64_t r = 0; r < std::min<int64_t>(2, tokens->shape[0]); ++r) {
    std::printf("  row %lld tokens:", static_cast<long long>(r));
    for (int64_t t = 0; t < std::min<int64_t>(16, length); ++t) {
      std::printf(" %d", At<int32_t>(*tokens, r * length + t));
    }
    std::printf("%s\n", length > 16 ? " ..." : "");
    if (segment_ids) {
      std::printf("  row %lld segments:", static_cast<long long>(r));
      for (int64_t t = 0; t < std::min<int64_t>(16, length); ++t) {
        std::printf(" %d", At<int32_t>(*segment_ids, r * length + t));
      }
      std::printf("%s\n", length > 16 ? " ..." : "");
    }
  }
}

}  // namespace

int main() {
  try {
    // Token sequences of mostly short, sometimes long lengths, as text is.
    std::mt19937 rng(2024);
    std::geometric_distribution<int64_t> short_length(1.0 / 24);
    std::vector<int64_t> offsets = {0};
    std::vector<int32_t> tokens, labels;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < kNumExamples; ++i) {
      const int64_t length = std::min<int64_t>(kMaxLength, 1 + short_length(rng));
      for (int64_t t = 0; t < length; ++t) {
        tokens.push_back(static_cast<int32_t>(1 + (i * 31 + t) % 30000));
        labels.push_back(static_cast<int32_t>(t % 7));
      }
      offsets.push_back(static_cast<int64_t>(tokens.size()));
      ids.push_back(i);
    }
    const auto rows = static_cast<int64_t>(tokens.size());
    const Dataset ds(
        {RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), rows, offsets.data(),
                              kNumExamples, /*owner=*/nullptr),
         RaggedColumn::Ragged("labels", DType::kInt32, {}, labels.data(), rows, offsets.data(),
                              kNumExamples, nullptr),
         RaggedColumn::Fixed("id", DType::kInt64, {}, ids.data(), kNumExamples, nullptr)},
        {{"tokens", "labels"}});
    const std::vector<int64_t> lengths = ds.column("tokens").Lengths();

    BatchPlan buckets = jaxbatch::Plan(
        lengths,
        jaxbatch::AutoBucketsOptions{.max_shapes = 4, .token_budget = 4096, .pad_to_multiple = 8});
    buckets.length_column = "tokens";
    BatchPlan packed = jaxbatch::Plan(
        lengths, jaxbatch::PackOptions{
                     .row_length = kMaxLength, .rows_per_batch = 32, .max_segments_per_row = 8});
    packed.length_column = "tokens";

    int problems = CheckPlan("AutoBuckets", ds, buckets, tokens, offsets);
    problems += CheckPlan("Pack", ds, packed, tokens, offsets);
    if (buckets.stats.shapes > 4) {
      std::fprintf(stderr, "AutoBuckets: %lld shapes, more than max_shapes 4\n",
                   static_cast<long long>(buckets.stats.shapes));
      ++problems;
    }
    for (const BatchPlan* plan : {&buckets, &packed}) {
      if (plan->stats.real_elements != rows) {  // Nothing dropped, skipped or cut.
        std::fprintf(stderr, "a plan holds %lld of %lld tokens\n",
                     static_cast<long long>(plan->stats.real_elements),
                     static_cast<long long>(rows));
        ++problems;
      }
    }
    std::printf("Pack, batch 0:\n");
    PrintBatch(ds, packed);
    if (problems > 0) {
      std::fprintf(stderr, "plan_and_collate: %d problems\n", problems);
      return 1;
    }
    std::printf("plan_and_collate: ok\n");
    return 0;
  } catch (const jaxbatch::Error& e) {
    std::fprintf(stderr, "plan_and_collate: %s\n", e.what());
    return 1;
  }
}
