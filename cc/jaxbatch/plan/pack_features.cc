#include "jaxbatch/plan/pack_features.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/feature_packer.h"

namespace jaxbatch {
namespace {

// "{'inputs': 512, 'targets': 128}", as the key and Python write it.
std::string RowLengthsText(const PackOptions& o) {
  std::string out = "{";
  for (const auto& [name, length] : o.row_lengths) {
    out += StrCat(out.size() > 1 ? ", " : "", "'", name, "': ", length);
  }
  return out + "}";
}

// Every feature's lengths, each cut to its row length, feature-major.
std::vector<int64_t> CutLengths(std::span<const int64_t> lengths, std::span<const int64_t> others,
                                const std::vector<int64_t>& row_lengths) {
  const size_t n = lengths.size();
  std::vector<int64_t> cut(n * row_lengths.size());
  for (size_t f = 0; f < row_lengths.size(); ++f) {
    const std::span<const int64_t> feature = f == 0 ? lengths : others.subspan((f - 1) * n, n);
    for (size_t i = 0; i < n; ++i) cut[f * n + i] = std::min(feature[i], row_lengths[f]);
  }
  return cut;
}

std::vector<int64_t> RowLengths(const PackOptions& o) {
  std::vector<int64_t> out;
  for (const auto& entry : o.row_lengths) out.push_back(entry.second);
  return out;
}

std::vector<std::string> FeatureNames(const PackOptions& o) {
  std::vector<std::string> out;
  for (const auto& entry : o.row_lengths) out.push_back(entry.first);
  return out;
}

// The first feature of example `id` longer than its row length, or -1.
int64_t LongFeature(std::span<const int64_t> lengths, std::span<const int64_t> others,
                    const std::vector<int64_t>& row_lengths, int64_t id) {
  const auto n = static_cast<int64_t>(lengths.size());
  for (size_t f = 0; f < row_lengths.size(); ++f) {
    const int64_t length = f == 0
                               ? lengths[static_cast<size_t>(id)]
                               : others[(f - 1) * static_cast<size_t>(n) + static_cast<size_t>(id)];
    if (length > row_lengths[f]) return static_cast<int64_t>(f);
  }
  return -1;
}

[[noreturn]] void ThrowFeatureTooLong(const PackOptions& o, int64_t id, int64_t f,
                                      std::span<const int64_t> lengths,
                                      std::span<const int64_t> others) {
  const std::vector<std::string> names = FeatureNames(o);
  const std::vector<int64_t> rows = RowLengths(o);
  const size_t n = lengths.size();
  const int64_t length = f == 0 ? lengths[static_cast<size_t>(id)]
                                : others[static_cast<size_t>(f - 1) * n + static_cast<size_t>(id)];
  throw InvalidArgumentError(StrCat("Pack: example ", id, " has ", length, " elements in feature '",
                                    names[static_cast<size_t>(f)], "', longer than its row length ",
                                    rows[static_cast<size_t>(f)],
                                    "; pass too_long=\"truncate\" or \"skip\" to allow it"));
}

void CheckOthersSize(std::span<const int64_t> lengths, std::span<const int64_t> others,
                     const PackOptions& o) {
  const size_t expected = lengths.size() * (o.row_lengths.size() - 1);
  if (others.size() != expected) {
    throw InvalidArgumentError(
        StrCat("Pack: row_length=", RowLengthsText(o), " plans ", o.row_lengths.size(),
               " features: expected the other features' lengths, ", lengths.size(), " each (",
               expected, " in all), found ", others.size()));
  }
  for (size_t k = 0; k < others.size(); ++k) {
    if (others[k] < 0) {
      throw InvalidArgumentError(StrCat("plan: example ", k % lengths.size(), " of feature '",
                                        FeatureNames(o)[k / lengths.size() + 1],
                                        "': expected a length >= 0, found ", others[k]));
    }
  }
}

// The per-segment axis when unset: the least over the features of the most
// examples a row of that feature holds (DefaultSegments's rule), rounded up
// to a power of two. From the lengths alone, so every epoch gets it.
int64_t FeatureSegments(const std::vector<int64_t>& cut, size_t n,
                        const std::vector<int64_t>& row_lengths, const std::vector<int64_t>& ids) {
  int64_t most = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> sorted;
  for (size_t f = 0; f < row_lengths.size(); ++f) {
    sorted.clear();
    for (int64_t id : ids) sorted.push_back(cut[f * n + static_cast<size_t>(id)]);
    std::sort(sorted.begin(), sorted.end());
    int64_t count = 0, used = 0;
    for (int64_t length : sorted) {
      if (count == row_lengths[f] || length > row_lengths[f] - used) break;
      used += length;
      ++count;
    }
    most = std::min(most, count);
  }
  int64_t segments = 1;
  while (segments < most) segments *= 2;
  return std::min(segments, *std::min_element(row_lengths.begin(), row_lengths.end()));
}

}  // namespace

void ValidatePackFeatures(const PackOptions& o) {
  if (o.row_length != 0) {
    throw InvalidArgumentError(StrCat("Pack: give row_length as one integer (", o.row_length,
                                      ") or as each feature's row length (", RowLengthsText(o),
                                      "), not both"));
  }
  int64_t total = 0;
  for (const auto& [name, length] : o.row_lengths) {
    if (name.empty() || name.find_first_of("'\"") != std::string::npos) {
      throw InvalidArgumentError(StrCat("Pack: row_length names feature '", name,
                                        "'; expected a column name, not empty and without quotes"));
    }
    if (length <= 0) {
      throw InvalidArgumentError(
          StrCat("Pack: row_length['", name, "'] must be a positive integer, found ", length));
    }
    CheckExtent(length, "Pack", StrCat("row_length['", name, "']"),
                "lengths, segment ids and positions");
    const std::optional<int64_t> sum = CheckedAdd(total, length);
    const std::optional<int64_t> elements = sum ? CheckedMul(*sum, o.rows_per_batch) : std::nullopt;
    if (!elements) {
      throw InvalidArgumentError(StrCat("Pack: rows_per_batch=", o.rows_per_batch,
                                        " with row_length=", RowLengthsText(o),
                                        " makes batches of more than ", kMaxSize, " elements"));
    }
    total = *sum;
  }
  if (o.token_budget) {
    throw InvalidArgumentError(StrCat(
        "Pack: token_budget=", *o.token_budget,
        " with several features (row_length=", RowLengthsText(o),
        ") is not supported: a budget sizes batches by one row length (token_budget // L rows), "
        "and each feature has its own, so no one row count keeps every feature within it; give "
        "rows_per_batch"));
  }
  if (o.max_shapes) {
    throw InvalidArgumentError(
        StrCat("Pack: max_shapes=", *o.max_shapes,
               " with several features (row_length=", RowLengthsText(o),
               ") is not supported: max_shapes chooses a few row lengths for one column from its "
               "lengths, and each feature keeps the one row length given; leave max_shapes unset"));
  }
  if (!o.row_length_list.empty()) {
    throw InvalidArgumentError(
        StrCat("Pack: several row lengths for one column (a row_length list) and several features "
               "(row_length=",
               RowLengthsText(o), ") cannot be combined: each feature has one row length"));
  }
  if (o.too_long == TooLong::kSplit) {
    throw InvalidArgumentError(StrCat(
        "Pack: too_long=\"split\" with several features (row_length=", RowLengthsText(o),
        ") is not supported: each feature would be cut at its own row length, so the pieces "
        "of one feature would not pair with the pieces of another and example k could not be "
        "segment k in every feature; use too_long=\"truncate\" (seqio's trim_and_pack) or "
        "\"skip\""));
  }
  if (o.algorithm == PackAlgorithm::kConcatThenSplit) {
    throw InvalidArgumentError(StrCat(
        "Pack: algorithm=\"concat_then_split\" with several features (row_length=",
        RowLengthsText(o),
        ") is not supported: each feature's stream would be cut at its own row ends, so a row "
        "of inputs and the row of targets beside it would hold different examples; use "
        "\"first_fit\" or \"best_fit\""));
  }
}

void CheckPackFeaturesFit(std::span<const int64_t> lengths, std::span<const int64_t> others,
                          const PackOptions& o) {
  CheckOthersSize(lengths, others, o);
  if (o.too_long != TooLong::kError) return;
  const std::vector<int64_t> rows = RowLengths(o);
  for (size_t id = 0; id < lengths.size(); ++id) {
    const int64_t f = LongFeature(lengths, others, rows, static_cast<int64_t>(id));
    if (f >= 0) ThrowFeatureTooLong(o, static_cast<int64_t>(id), f, lengths, others);
  }
}

std::vector<int64_t> PackFeatureTotals(std::span<const int64_t> lengths,
                                       std::span<const int64_t> others, const PackOptions& o) {
  const std::vector<int64_t> cut = CutLengths(lengths, others, RowLengths(o));
  std::vector<int64_t> totals(lengths.size(), 0);
  for (size_t k = 0; k < cut.size(); ++k) totals[k % lengths.size()] += cut[k];
  return totals;
}

void AddPackedBatches(const PackedRows& rows, const PackOptions& o, const BatchShape& shape,
                      const std::function<void(int64_t)>& add_row, PlanBuilder& builder) {
  const int64_t num_rows = rows.num_rows();
  for (int64_t first = 0; first < num_rows; first += o.rows_per_batch) {
    const int64_t count = std::min(o.rows_per_batch, num_rows - first);
    if (count < o.rows_per_batch && o.remainder == Remainder::kDrop) {
      for (int64_t k = rows.row_begin[static_cast<size_t>(first)]; k < rows.row_begin.back(); ++k) {
        builder.Drop(rows.example_ids[static_cast<size_t>(k)]);
      }
      break;
    }
    // A kept remainder's rows round up to rows_multiple (a divisor of rows_per_batch).
    const int64_t kept = (count + o.rows_multiple - 1) / o.rows_multiple * o.rows_multiple;
    BatchShape batch = shape;
    batch.rows = o.remainder == Remainder::kKeep ? kept : o.rows_per_batch;
    builder.BeginBatch(batch);
    for (int64_t r = first; r < first + count; ++r) add_row(r);
    builder.EndBatch();
  }
}

BatchPlan PlanPackFeatures(std::span<const int64_t> lengths, std::span<const int64_t> others,
                           const std::vector<int64_t>& ids, const PackOptions& o) {
  CheckOthersSize(lengths, others, o);
  const std::vector<int64_t> row_lengths = RowLengths(o);
  PlanBuilder builder(/*packed=*/true);
  builder.set_features(FeatureNames(o), row_lengths);
  std::vector<int64_t> kept;
  for (int64_t id : ids) {
    const int64_t f = LongFeature(lengths, others, row_lengths, id);
    if (f >= 0) {
      if (o.too_long == TooLong::kError) ThrowFeatureTooLong(o, id, f, lengths, others);
      if (o.too_long == TooLong::kSkip) {
        builder.Skip(id);
        continue;
      }
      builder.set_allow_truncate(true);
    }
    kept.push_back(id);
  }
  const size_t n = lengths.size();
  const std::vector<int64_t> cut = CutLengths(lengths, others, row_lengths);
  const int64_t segments =
      o.max_segments_per_row ? *o.max_segments_per_row : FeatureSegments(cut, n, row_lengths, kept);
  const FeatureLengths features{
      .lengths = cut, .num_examples = static_cast<int64_t>(n), .capacities = row_lengths};
  const PackedRows rows = PackFeatureRows(features, kept, segments, o.algorithm,
                                          o.lookahead.value_or(0), o.open_rows.value_or(0));
  int64_t row_length = 0;
  for (int64_t length : row_lengths) row_length += length;
  AddPackedBatches(
      rows, o, {.rows = o.rows_per_batch, .length = row_length, .segments = segments},
      [&](int64_t r) {
        const auto begin = static_cast<size_t>(rows.row_begin[static_cast<size_t>(r)]);
        const auto end = static_cast<size_t>(rows.row_begin[static_cast<size_t>(r) + 1]);
        builder.AddRow(std::span<const int64_t>(rows.example_ids).subspan(begin, end - begin));
      },
      builder);
  // Stats count every feature's elements, each cut to its row length, and
  // an example cut in any feature once.
  BatchPlan plan = std::move(builder).Finish(PackFeatureTotals(lengths, others, o),
                                             static_cast<int64_t>(ids.size()));
  plan.stats.truncated = 0;
  if (plan.allow_truncate) {
    for (int64_t id : plan.example_ids) {
      if (LongFeature(lengths, others, row_lengths, id) >= 0) ++plan.stats.truncated;
    }
  }
  return plan;
}

}  // namespace jaxbatch
