#include "jaxbatch/data/view.h"

#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/hash.h"
#include "jaxbatch/base/wide.h"

namespace jaxbatch {
namespace {

// Salts of the three kinds of view, so a slice and a selection of the same
// examples still differ.
constexpr uint64_t kSelectSalt = 0x73656c656374ull;  // "select"
constexpr uint64_t kSliceSalt = 0x736c696365ull;     // "slice"
constexpr uint64_t kConcatSalt = 0x636f6e636174ull;  // "concat"

// The key of a view of `kind` over data whose key is `parent`, with `words`
// saying which examples it takes.
uint64_t ViewKey(uint64_t kind, uint64_t parent, std::span<const int64_t> words) {
  uint64_t h = Hash64(&kind, sizeof(kind), parent);
  h = Hash64(words.data(), words.size() * sizeof(int64_t), h);
  return h == 0 ? 1 : h;  // 0 means "no view"
}

Dataset Rebuild(const Dataset& base, std::vector<RaggedColumn> columns, uint64_t key) {
  Dataset view(std::move(columns), base.aligned_groups());
  view.set_view_key(key);
  return view;
}

std::string Describe(const RaggedColumn& c) {
  std::string inner;
  for (int64_t d : c.inner_shape()) inner += (inner.empty() ? "" : ", ") + std::to_string(d);
  std::string axes;
  for (const std::string& a : c.axes()) axes += (axes.empty() ? "" : ", ") + a;
  return StrCat(DTypeName(c.dtype()), "[", inner, "] ",
                c.is_fixed() ? "fixed" : (c.is_grid() ? "grid" : "ragged"),
                axes.empty() ? std::string() : StrCat(" axes (", axes, ")"));
}

}  // namespace

Dataset SelectExamples(const Dataset& base, std::span<const int64_t> index) {
  std::vector<RaggedColumn> columns;
  columns.reserve(base.columns().size());
  for (const RaggedColumn& c : base.columns()) columns.push_back(RaggedColumn::Select(c, index));
  const int64_t n = base.num_examples();
  std::vector<int64_t> words = {n};
  words.insert(words.end(), index.begin(), index.end());
  return Rebuild(base, std::move(columns), ViewKey(kSelectSalt, base.view_key(), words));
}

Dataset SliceExamples(const Dataset& base, int64_t begin, int64_t end) {
  std::vector<RaggedColumn> columns;
  columns.reserve(base.columns().size());
  for (const RaggedColumn& c : base.columns()) {
    columns.push_back(RaggedColumn::Slice(c, begin, end));
  }
  const int64_t words[] = {base.num_examples(), begin, end};
  return Rebuild(base, std::move(columns), ViewKey(kSliceSalt, base.view_key(), words));
}

Dataset ShardExamples(const Dataset& base, int64_t index, int64_t count) {
  if (count < 1 || index < 0 || index >= count) {
    throw InvalidArgumentError(StrCat("Dataset.shard: expected 0 <= index < count, found index ",
                                      index, " and count ", count));
  }
  const int64_t n = base.num_examples();
  return SliceExamples(base, MulDiv(n, index, count), MulDiv(n, index + 1, count));
}

Dataset ConcatDatasets(std::span<const Dataset* const> parts) {
  if (parts.empty()) {
    throw InvalidArgumentError("Dataset.concat: expected at least one dataset, found none");
  }
  const Dataset& first = *parts[0];
  std::vector<int64_t> words;
  for (size_t p = 0; p < parts.size(); ++p) {
    const Dataset& part = *parts[p];
    const auto& cols = part.columns();
    if (cols.size() != first.columns().size()) {
      throw InvalidArgumentError(StrCat("Dataset.concat: dataset ", p, " has ", cols.size(),
                                        " columns but dataset 0 has ", first.columns().size()));
    }
    for (size_t c = 0; c < cols.size(); ++c) {
      const RaggedColumn& want = first.columns()[c];
      const RaggedColumn& found = cols[c];
      if (found.name() != want.name()) {
        throw InvalidArgumentError(StrCat("Dataset.concat: dataset ", p, "'s column ", c, " is '",
                                          found.name(), "' but dataset 0's is '", want.name(),
                                          "'; the datasets need the same columns in one order"));
      }
      if (Describe(found) != Describe(want)) {
        throw InvalidArgumentError(StrCat("Dataset.concat: column '", want.name(), "' is ",
                                          Describe(want), " in dataset 0 but ", Describe(found),
                                          " in dataset ", p));
      }
    }
    if (part.aligned_groups() != first.aligned_groups()) {
      throw InvalidArgumentError(StrCat("Dataset.concat: dataset ", p,
                                        " declares other aligned column groups than dataset 0"));
    }
    words.push_back(part.num_examples());
    words.push_back(static_cast<int64_t>(part.view_key()));
  }
  std::vector<RaggedColumn> columns;
  std::vector<const RaggedColumn*> column_parts(parts.size());
  for (size_t c = 0; c < first.columns().size(); ++c) {
    for (size_t p = 0; p < parts.size(); ++p) column_parts[p] = &parts[p]->columns()[c];
    columns.push_back(RaggedColumn::Concat(column_parts));
  }
  return Rebuild(first, std::move(columns), ViewKey(kConcatSalt, 0, words));
}

}  // namespace jaxbatch
