#include "jaxbatch/plan/planner.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/concat_split.h"
#include "jaxbatch/plan/grid_planner.h"
#include "jaxbatch/plan/order.h"
#include "jaxbatch/plan/pack_features.h"
#include "jaxbatch/plan/pack_lengths.h"
#include "jaxbatch/plan/packer.h"

namespace jaxbatch {
namespace {

// `length` rounded up to `multiple`; throws naming the option when the
// rounded length does not fit an int64.
int64_t RoundUp(int64_t length, int64_t multiple, const char* planner) {
  const std::optional<int64_t> rounded = CheckedRoundUp(length, multiple);
  if (!rounded) {
    throw InvalidArgumentError(StrCat(planner, ": pad_to_multiple=", multiple, " rounds length ",
                                      length, " up past ", kMaxSize));
  }
  return *rounded;
}

// Throws, naming the options in `why`, when a batch of `rows` x `length`
// (and `rows` x `segments` per-segment outputs) does not fit an int64: its
// element and byte counts would wrap.
void CheckBatchSize(int64_t rows, int64_t length, int64_t segments, const std::string& why) {
  if (!CheckedMul(rows, length) || !CheckedMul(rows, segments)) {
    throw InvalidArgumentError(StrCat(why, " makes a batch of ", rows, " x ",
                                      std::max(length, segments), " elements, more than ",
                                      kMaxSize));
  }
}

void RequirePositive(int64_t value, const char* planner, const char* option) {
  if (value <= 0) {
    throw InvalidArgumentError(
        StrCat(planner, ": ", option, " must be a positive integer, found ", value));
  }
}

// An option a planner may go without: unset, or > 0.
void RequirePositiveIfSet(const std::optional<int64_t>& value, const char* planner,
                          const char* option) {
  if (value && *value <= 0) {
    throw InvalidArgumentError(StrCat(planner, ": ", option, " must be a positive integer, found ",
                                      *value, " (leave it unset for none)"));
  }
}

void RequireBatchSizeOrBudget(const std::optional<int64_t>& batch_size,
                              const std::optional<int64_t>& token_budget, const char* planner) {
  RequirePositiveIfSet(batch_size, planner, "batch_size");
  RequirePositiveIfSet(token_budget, planner, "token_budget");
  if (!batch_size && !token_budget) {
    throw InvalidArgumentError(
        StrCat(planner, ": expected batch_size or token_budget, found neither"));
  }
}

// Throws unless `rows` (the option named `option`) is a multiple of
// `rows_multiple`, which must be > 0.
void CheckRowsMultiple(int64_t rows, int64_t rows_multiple, const char* planner,
                       const char* option) {
  RequirePositive(rows_multiple, planner, "rows_multiple");
  if (rows > 0 && rows % rows_multiple != 0) {
    const std::optional<int64_t> next = CheckedMul(rows / rows_multiple + 1, rows_multiple);
    throw InvalidArgumentError(StrCat(
        planner, ": ", option, "=", rows, " is not a multiple of rows_multiple=", rows_multiple,
        next ? StrCat("; use a multiple, such as ", *next) : std::string()));
  }
}

// The rows of a kept partial batch of `count` examples: `count` rounded up
// to `rows_multiple`: at most a full batch, itself a multiple, so it cannot wrap.
int64_t KeptRows(int64_t count, int64_t rows_multiple) {
  const int64_t partial = count % rows_multiple;
  return partial == 0 ? count : count - partial + rows_multiple;
}

// The ids to plan (order.h), the lengths checked first.
std::vector<int64_t> ResolveOrder(std::span<const int64_t> lengths, PlanOrder order) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      throw InvalidArgumentError(
          StrCat("plan: example ", i, ": expected a length >= 0, found ", lengths[i]));
    }
  }
  return PlanIds(static_cast<int64_t>(lengths.size()), order);
}

[[noreturn]] void ThrowTooLong(int64_t id, int64_t length, int64_t limit, const char* planner,
                               const char* what) {
  throw InvalidArgumentError(StrCat(planner, ": example ", id, " has length ", length,
                                    ", longer than ", what, " ", limit,
                                    "; pass too_long=\"truncate\" or \"skip\" to allow it"));
}

}  // namespace

// Applies a TooLong policy to example `id` of length `length` > `limit`.
// Returns true when the example is still planned (truncated).
bool HandleTooLong(TooLong policy, int64_t id, int64_t length, int64_t limit, const char* planner,
                   const char* what, PlanBuilder& builder) {
  switch (policy) {
    case TooLong::kError:
      ThrowTooLong(id, length, limit, planner, what);
    case TooLong::kTruncate:
      builder.set_allow_truncate(true);
      return true;
    case TooLong::kSkip:
      builder.Skip(id);
      return false;
    case TooLong::kSplit:  // Pack and FixedBuckets split their pieces themselves.
      if (builder.split()) return true;
      throw InvalidArgumentError(
          StrCat(planner, ": too_long=\"split\" is for Pack and FixedBuckets only"));
  }
  return false;
}

namespace {

// Emits the examples of one bucket (or the whole stream) as batches of
// `rows` rows of `length`, with the last partial batch per `remainder`.
class BucketBatcher {
 public:
  BucketBatcher(int64_t length, int64_t rows, int64_t rows_multiple)
      : length_(length), rows_(rows), rows_multiple_(rows_multiple) {}

  // Adds an example; emits a batch when `rows` are collected.
  void Add(int64_t id, PlanBuilder& builder) {
    pending_.push_back(id);
    if (static_cast<int64_t>(pending_.size()) == rows_) Flush(rows_, builder);
  }

  // Adds piece `piece` of example `id`, elements `span` of it (a split plan).
  void AddPiece(int64_t id, int64_t piece, PieceSpan span, PlanBuilder& builder) {
    pending_pieces_.push_back({piece, span.start, span.length});
    Add(id, builder);
  }

  void Finish(Remainder remainder, PlanBuilder& builder) {
    if (pending_.empty()) return;
    switch (remainder) {
      case Remainder::kPad:
        Flush(rows_, builder);
        break;
      case Remainder::kKeep:
        Flush(KeptRows(static_cast<int64_t>(pending_.size()), rows_multiple_), builder);
        break;
      case Remainder::kDrop:
        for (int64_t id : pending_) builder.Drop(id);
        pending_.clear();
        break;
    }
  }

 private:
  void Flush(int64_t rows, PlanBuilder& builder) {
    builder.BeginBatch({.rows = rows, .length = length_});
    for (size_t i = 0; i < pending_.size(); ++i) {
      const std::span<const int64_t> id(&pending_[i], 1);
      if (pending_pieces_.empty()) {
        builder.AddRow(id);
      } else {
        const std::array<int64_t, 3>& p = pending_pieces_[i];
        builder.AddRow(id, {&p[0], 1}, {&p[1], 1}, {&p[2], 1});
      }
    }
    builder.EndBatch();
    pending_.clear();
    pending_pieces_.clear();
  }

  int64_t length_;
  int64_t rows_;
  int64_t rows_multiple_;
  std::vector<int64_t> pending_;
  // A split plan's (piece, start, length) per pending id; empty otherwise.
  std::vector<std::array<int64_t, 3>> pending_pieces_;
};

// Rows per batch for a bucket of `length` under a batch size and/or budget:
// the budget's rows rounded down to `rows_multiple` (a batch_size is one).
// `what` names the length in the error of a budget too small for one row.
int64_t RowsForLength(int64_t length, int64_t batch_size, int64_t token_budget,
                      int64_t rows_multiple, const char* planner, const std::string& what) {
  int64_t rows = batch_size > 0 ? batch_size : std::numeric_limits<int64_t>::max();
  if (token_budget > 0) {
    const int64_t fitting = token_budget / length / rows_multiple * rows_multiple;
    if (fitting == 0) {
      const std::optional<int64_t> needed = CheckedMul(length, rows_multiple);
      throw InvalidArgumentError(
          StrCat(planner, ": token_budget ", token_budget, " is smaller than ", what,
                 rows_multiple > 1 ? StrCat(" x rows_multiple=", rows_multiple) : std::string(),
                 "; raise token_budget to at least ",
                 needed ? StrCat(*needed) : StrCat("more than ", kMaxSize)));
    }
    rows = std::min(rows, fitting);
  }
  return rows;
}

// Each bucket's rows per batch; throws, naming the options, when a batch of
// a bucket does not fit an int64 (`multiple`: AutoBuckets' pad_to_multiple).
std::vector<int64_t> BucketRows(const std::vector<int64_t>& boundaries, int64_t batch_size,
                                int64_t token_budget, int64_t multiple, int64_t rows_multiple,
                                const char* planner) {
  std::vector<int64_t> rows(boundaries.size());
  for (size_t k = 0; k < boundaries.size(); ++k) {
    rows[k] = RowsForLength(boundaries[k], batch_size, token_budget, rows_multiple, planner,
                            StrCat("bucket length ", boundaries[k]));
    CheckBatchSize(
        rows[k], boundaries[k], 0,
        StrCat(planner, ": batch_size=", batch_size, " with boundaries[", k, "]=", boundaries[k],
               multiple > 1 ? StrCat(" (from pad_to_multiple=", multiple, ")") : ""));
  }
  return rows;
}

// Moves examples into the empty rows of longer buckets' last batches
// (FillRemainders): `bucket_of[p]` is the bucket of ids[p], -1 when left
// out. The examples a bucket gives are its longest (ties: the first in
// order), so the same examples move whatever the order.
void FillBucketRemainders(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                          std::span<const int64_t> rows, std::vector<int64_t>& bucket_of) {
  std::vector<std::vector<size_t>> members(rows.size());
  for (size_t p = 0; p < ids.size(); ++p) {
    if (bucket_of[p] >= 0) members[static_cast<size_t>(bucket_of[p])].push_back(p);
  }
  std::vector<int64_t> counts(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    std::stable_sort(members[k].begin(), members[k].end(), [&](size_t a, size_t b) {
      return lengths[static_cast<size_t>(ids[a])] > lengths[static_cast<size_t>(ids[b])];
    });
    counts[k] = static_cast<int64_t>(members[k].size());
  }
  std::vector<size_t> taken(rows.size(), 0);
  FillRemainders(counts, rows, [&](size_t from, size_t to, int64_t n) {
    for (int64_t q = 0; q < n; ++q)
      bucket_of[members[from][taken[from]++]] = static_cast<int64_t>(to);
  });
}

// Plans buckets with the given boundaries: the common tail of FixedBuckets
// and AutoBuckets. An example goes to the first boundary >= its length
// (`rounded` lengths for AutoBuckets' pad_to_multiple), or with
// `fill_remainders` (and Remainder::kPad) maybe to a longer one's last
// batch (FillBucketRemainders).
// `rows[k]` is bucket k's rows per batch (BucketRows, or FixedBuckets'
// batch_sizes).
std::vector<BucketBatcher> MakeBuckets(const std::vector<int64_t>& boundaries,
                                       const std::vector<int64_t>& rows, int64_t rows_multiple) {
  std::vector<BucketBatcher> buckets;
  for (size_t k = 0; k < boundaries.size(); ++k) {
    buckets.emplace_back(boundaries[k], rows[k], rows_multiple);
  }
  return buckets;
}

// FixedBuckets(too_long="split"): an example longer than the last boundary
// L is cut into pieces of L (PieceOf), the last shorter; each piece goes to
// the first boundary >= its length, padded like an example of that length.
// Every segment stores its span (piece_starts, piece_lengths): a short last
// piece's bucket is shorter than L, so its start does not follow from it.
// remainder="drop" is refused (ValidateFixedBuckets): it would drop pieces.
// `balance`: each bucket's rows balanced over its pieces (balance.h).
BatchPlan PlanSplitBuckets(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                           const std::vector<int64_t>& boundaries, std::vector<int64_t> rows,
                           int64_t rows_multiple, Remainder remainder, bool balance) {
  PlanBuilder builder(/*packed=*/false);
  builder.set_split(true);
  const int64_t cut = boundaries.back();
  auto for_each_piece = [&](const auto& visit) {
    for (int64_t id : ids) {
      const int64_t length = lengths[static_cast<size_t>(id)];
      for (int64_t k = 0; k < PieceCount(length, cut); ++k) {
        const PieceSpan span = PieceOf(length, k, cut);
        visit(id, k, span,
              static_cast<size_t>(
                  std::lower_bound(boundaries.begin(), boundaries.end(), span.length) -
                  boundaries.begin()));
      }
    }
  };
  if (balance && remainder == Remainder::kPad) {
    std::vector<int64_t> counts(boundaries.size(), 0);
    for_each_piece([&](int64_t, int64_t, PieceSpan, size_t bucket) { ++counts[bucket]; });
    BalanceRows(counts, rows, rows_multiple);
  }
  std::vector<BucketBatcher> buckets = MakeBuckets(boundaries, rows, rows_multiple);
  for_each_piece([&](int64_t id, int64_t k, PieceSpan span, size_t bucket) {
    buckets[bucket].AddPiece(id, k, span, builder);
  });
  for (BucketBatcher& bucket : buckets) bucket.Finish(remainder, builder);
  return std::move(builder).Finish(lengths, static_cast<int64_t>(ids.size()));
}

// With `balance` (and Remainder::kPad), each bucket's rows are then
// balanced over the examples it holds (balance.h).
BatchPlan PlanBuckets(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                      const std::vector<int64_t>& boundaries, const std::vector<int64_t>& rows,
                      int64_t multiple, int64_t rows_multiple, Remainder remainder,
                      TooLong too_long, const char* planner, bool fill_remainders = false,
                      bool balance = false) {
  PlanBuilder builder(/*packed=*/false);
  std::vector<int64_t> lengths_of(boundaries);  // what each bucket pads to
  std::vector<int64_t> bucket_of(ids.size(), -1);
  for (size_t p = 0; p < ids.size(); ++p) {
    const int64_t id = ids[p];
    const int64_t length = lengths[static_cast<size_t>(id)];
    const int64_t key = RoundUp(length, multiple, planner);
    auto it = std::lower_bound(boundaries.begin(), boundaries.end(), key);
    if (it == boundaries.end()) {
      if (boundaries.empty() || !HandleTooLong(too_long, id, length, boundaries.back(), planner,
                                               "the last boundary", builder)) {
        continue;
      }
      --it;
    }
    bucket_of[p] = it - boundaries.begin();
  }
  if (fill_remainders && remainder == Remainder::kPad) {
    FillBucketRemainders(lengths, ids, rows, bucket_of);
    // A bucket whose longest examples moved up pads to its longest left
    // (with its boundary's rows, which that length fits): the same length
    // whatever the order, since which examples move does not depend on it.
    std::vector<int64_t> longest(boundaries.size(), 0);
    for (size_t p = 0; p < ids.size(); ++p) {
      if (bucket_of[p] < 0) continue;
      int64_t& l = longest[static_cast<size_t>(bucket_of[p])];
      l = std::max(l, RoundUp(lengths[static_cast<size_t>(ids[p])], multiple, planner));
    }
    for (size_t k = 0; k < boundaries.size(); ++k) {
      if (longest[k] > 0) lengths_of[k] = longest[k];
    }
  }
  std::vector<int64_t> batch_rows = rows;
  if (balance && remainder == Remainder::kPad) {
    std::vector<int64_t> counts(boundaries.size(), 0);
    for (int64_t bucket : bucket_of) {
      if (bucket >= 0) ++counts[static_cast<size_t>(bucket)];
    }
    BalanceRows(counts, batch_rows, rows_multiple);
  }
  std::vector<BucketBatcher> buckets = MakeBuckets(lengths_of, batch_rows, rows_multiple);
  for (size_t p = 0; p < ids.size(); ++p) {
    if (bucket_of[p] >= 0) buckets[static_cast<size_t>(bucket_of[p])].Add(ids[p], builder);
  }
  for (BucketBatcher& bucket : buckets) bucket.Finish(remainder, builder);
  return std::move(builder).Finish(lengths, static_cast<int64_t>(ids.size()));
}

// Every padded length is at least pad_to_multiple: past kMaxExtent none fits.
constexpr const char* kPaddedInt32 = "lengths and positions";

void ValidatePadToMax(const PadToMaxOptions& o) {
  RequirePositive(o.batch_size, "PadToMax", "batch_size");
  RequirePositive(o.pad_to_multiple, "PadToMax", "pad_to_multiple");
  CheckExtent(o.pad_to_multiple, "PadToMax", "pad_to_multiple", kPaddedInt32);
  CheckRowsMultiple(o.batch_size, o.rows_multiple, "PadToMax", "batch_size");
}

// The length a PadToMax batch whose longest example is `longest` pads to;
// throws, naming the options, when a batch of it does not fit an int64.
int64_t PadToMaxLength(const PadToMaxOptions& o, int64_t rows, int64_t longest) {
  const int64_t length = RoundUp(longest, o.pad_to_multiple, "PadToMax");
  CheckBatchSize(rows, length, 0,
                 StrCat("PadToMax: batch_size=", o.batch_size, " with pad_to_multiple=",
                        o.pad_to_multiple, " (length ", longest, " padded to ", length, ")"));
  return length;
}

BatchPlan PlanPadToMax(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                       const PadToMaxOptions& o) {
  PlanBuilder builder(/*packed=*/false);
  for (size_t start = 0; start < ids.size(); start += static_cast<size_t>(o.batch_size)) {
    const size_t end = std::min(ids.size(), start + static_cast<size_t>(o.batch_size));
    const auto count = static_cast<int64_t>(end - start);
    if (count < o.batch_size && o.remainder == Remainder::kDrop) {
      for (size_t k = start; k < end; ++k) builder.Drop(ids[k]);
      break;
    }
    int64_t longest = 0;
    for (size_t k = start; k < end; ++k) {
      longest = std::max(longest, lengths[static_cast<size_t>(ids[k])]);
    }
    const int64_t rows =
        o.remainder == Remainder::kKeep ? KeptRows(count, o.rows_multiple) : o.batch_size;
    const int64_t length = PadToMaxLength(o, rows, longest);
    builder.BeginBatch({.rows = rows, .length = length});
    for (size_t k = start; k < end; ++k) builder.AddRow(std::span<const int64_t>(&ids[k], 1));
    builder.EndBatch();
  }
  return std::move(builder).Finish(lengths, static_cast<int64_t>(ids.size()));
}

// The rows of each bucket from per-bucket batch_sizes (tf.data's
// bucket_batch_sizes): one per boundary, each > 0, a multiple of
// rows_multiple, and a batch of it at its boundary within int64.
std::vector<int64_t> PerBucketRows(const FixedBucketsOptions& o) {
  if (o.batch_size || o.token_budget) {
    throw InvalidArgumentError(StrCat("FixedBuckets: give batch_sizes or ",
                                      o.batch_size ? "batch_size" : "token_budget",
                                      ", not both; found batch_sizes with ",
                                      o.batch_size ? StrCat("batch_size=", *o.batch_size)
                                                   : StrCat("token_budget=", *o.token_budget)));
  }
  if (o.batch_sizes.size() != o.boundaries.size()) {
    throw InvalidArgumentError(StrCat("FixedBuckets: expected one batch size per boundary (",
                                      o.boundaries.size(),
                                      "; the last boundary closes the last bucket), found ",
                                      o.batch_sizes.size(), " batch_sizes"));
  }
  for (size_t k = 0; k < o.batch_sizes.size(); ++k) {
    const std::string option = StrCat("batch_sizes[", k, "]");
    RequirePositive(o.batch_sizes[k], "FixedBuckets", option.c_str());
    CheckRowsMultiple(o.batch_sizes[k], o.rows_multiple, "FixedBuckets", option.c_str());
    CheckBatchSize(o.batch_sizes[k], o.boundaries[k], 0,
                   StrCat("FixedBuckets: ", option, "=", o.batch_sizes[k], " with boundaries[", k,
                          "]=", o.boundaries[k]));
  }
  return o.batch_sizes;
}

// Each bucket's rows per batch: batch_sizes, or from batch_size and/or
// token_budget. Throws what ValidatePlannerOptions throws for them.
std::vector<int64_t> FixedBucketRows(const FixedBucketsOptions& o) {
  if (!o.batch_sizes.empty()) return PerBucketRows(o);
  RequireBatchSizeOrBudget(o.batch_size, o.token_budget, "FixedBuckets");
  CheckRowsMultiple(o.batch_size.value_or(0), o.rows_multiple, "FixedBuckets", "batch_size");
  // The longest bucket needs the most: name it first, so that raising the
  // budget to what the error says is enough.
  RowsForLength(o.boundaries.back(), o.batch_size.value_or(0), o.token_budget.value_or(0),
                o.rows_multiple, "FixedBuckets", StrCat("the last boundary ", o.boundaries.back()));
  return BucketRows(o.boundaries, o.batch_size.value_or(0), o.token_budget.value_or(0), 1,
                    o.rows_multiple, "FixedBuckets");
}

void ValidateFixedBuckets(const FixedBucketsOptions& o) {
  if (o.too_long == TooLong::kSplit && o.remainder == Remainder::kDrop) {
    throw InvalidArgumentError(
        "FixedBuckets: too_long=\"split\" with remainder=\"drop\" would drop some pieces of an "
        "example whose other pieces are yielded; use remainder=\"pad\" or \"keep\"");
  }
  if (o.boundaries.empty()) {
    throw InvalidArgumentError("FixedBuckets: expected at least one boundary, found none");
  }
  for (size_t k = 0; k < o.boundaries.size(); ++k) {
    if (o.boundaries[k] <= 0 || (k > 0 && o.boundaries[k] <= o.boundaries[k - 1])) {
      throw InvalidArgumentError(
          StrCat("FixedBuckets: boundaries must be positive and strictly "
                 "increasing, found boundaries[",
                 k, "] = ", o.boundaries[k]));
    }
  }
  CheckExtent(o.boundaries.back(), "FixedBuckets",
              StrCat("boundaries[", o.boundaries.size() - 1, "]"), kPaddedInt32);
  FixedBucketRows(o);
}

BatchPlan PlanFixedBuckets(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                           const FixedBucketsOptions& o) {
  // A budget's rows are balanced; batch_size and batch_sizes are the user's.
  const bool balance = o.balance_batches && o.token_budget.has_value();
  if (o.too_long == TooLong::kSplit) {
    return PlanSplitBuckets(lengths, ids, o.boundaries, FixedBucketRows(o), o.rows_multiple,
                            o.remainder, balance);
  }
  return PlanBuckets(lengths, ids, o.boundaries, FixedBucketRows(o), 1, o.rows_multiple,
                     o.remainder, o.too_long, "FixedBuckets", false, balance);
}

void ValidateAutoBuckets(const AutoBucketsOptions& o) {
  RequirePositive(o.max_shapes, "AutoBuckets", "max_shapes");
  RequirePositive(o.pad_to_multiple, "AutoBuckets", "pad_to_multiple");
  CheckExtent(o.pad_to_multiple, "AutoBuckets", "pad_to_multiple", kPaddedInt32);
  RequireBatchSizeOrBudget(o.batch_size, o.token_budget, "AutoBuckets");
  CheckRowsMultiple(o.batch_size.value_or(0), o.rows_multiple, "AutoBuckets", "batch_size");
}

// Throws when a budget has no row for example `longest`, the longest
// planned: every bucket is at most its length, so naming it first makes
// raising the budget to what the error says enough.
void CheckLongestFits(std::span<const int64_t> lengths, int64_t longest,
                      const AutoBucketsOptions& o) {
  const int64_t length = lengths[static_cast<size_t>(longest)];
  const int64_t rounded = RoundUp(length, o.pad_to_multiple, "AutoBuckets");
  const std::string what =
      StrCat("the longest example (example ", longest, ", length ", length,
             rounded != length ? StrCat(" padded to ", rounded) : std::string(), ")");
  const int64_t rows = RowsForLength(rounded, o.batch_size.value_or(0), o.token_budget.value_or(0),
                                     o.rows_multiple, "AutoBuckets", what);
  CheckBatchSize(
      rows, rounded, 0,
      StrCat(
          "AutoBuckets: batch_size=", o.batch_size.value_or(0), " with ", what,
          o.pad_to_multiple > 1 ? StrCat(" (from pad_to_multiple=", o.pad_to_multiple, ")") : ""));
}

BatchPlan PlanAutoBuckets(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                          const AutoBucketsOptions& o) {
  const int64_t batch_size = o.batch_size.value_or(0);
  const int64_t token_budget = o.token_budget.value_or(0);
  if (!ids.empty()) {
    CheckLongestFits(lengths,
                     *std::max_element(ids.begin(), ids.end(),
                                       [&](int64_t a, int64_t b) {
                                         return lengths[static_cast<size_t>(a)] <
                                                lengths[static_cast<size_t>(b)];
                                       }),
                     o);
  }
  const LengthHistogram histogram = RoundedHistogram(lengths, ids, o.pad_to_multiple);
  auto rows_for_length = [&](int64_t length) {
    return RowsForLength(length, batch_size, token_budget, o.rows_multiple, "AutoBuckets",
                         StrCat("bucket length ", length));
  };
  // With remainder pad the last batches' empty rows take shorter examples.
  const bool pad = o.remainder == Remainder::kPad;
  const bool fill = pad && o.fill_remainders;
  const std::vector<int64_t> boundaries =
      fill ? FilledBoundaries(histogram, o.max_shapes, rows_for_length)
           : OptimalBoundaries(histogram, o.max_shapes, rows_for_length, pad);
  const std::vector<int64_t> rows = BucketRows(boundaries, batch_size, token_budget,
                                               o.pad_to_multiple, o.rows_multiple, "AutoBuckets");
  return PlanBuckets(lengths, ids, boundaries, rows, o.pad_to_multiple, o.rows_multiple,
                     o.remainder, TooLong::kError, "AutoBuckets", fill,
                     o.balance_batches && token_budget > 0);
}

}  // namespace

// The per-segment axis when the user sets none: the most examples any row
// can hold (the k smallest lengths summing to at most row_length), rounded
// up to a power of two and capped at row_length. It depends on the lengths
// alone, not their order, so every epoch and shard gets the same shape; and
// it is below row_length unless over half a row's worth of examples have
// length <= 2, so per-segment outputs rarely look per-token (jb.unbatch
// refuses to guess when they do).
int64_t DefaultSegments(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                        int64_t row_length) {
  std::vector<int64_t> sorted;
  sorted.reserve(ids.size());
  for (int64_t id : ids) sorted.push_back(lengths[static_cast<size_t>(id)]);
  std::sort(sorted.begin(), sorted.end());
  int64_t count = 0;
  int64_t used = 0;
  for (int64_t length : sorted) {
    if (count == row_length || length > row_length - used) break;
    used += length;
    ++count;
  }
  int64_t segments = 1;
  while (segments < count) segments *= 2;
  return std::min(segments, row_length);
}

namespace {

void ValidatePack(const PackOptions& o) {
  if (!o.row_lengths.empty()) {
    ValidatePackFeatures(o);
  } else {
    RequirePositive(o.row_length, "Pack", "row_length");
    CheckExtent(o.row_length, "Pack", "row_length", "lengths, segment ids and positions");
  }
  if (PacksSeveralLengths(o)) {
    ValidatePackLengths(o);  // the list, the budget and each row length's batch
  } else {
    RequirePositive(o.rows_per_batch, "Pack", "rows_per_batch");
    CheckRowsMultiple(o.rows_per_batch, o.rows_multiple, "Pack", "rows_per_batch");
  }
  RequirePositiveIfSet(o.max_segments_per_row, "Pack", "max_segments_per_row");
  if (o.max_segments_per_row) {
    CheckExtent(*o.max_segments_per_row, "Pack", "max_segments_per_row", "segment ids");
  }
  RequirePositiveIfSet(o.lookahead, "Pack", "lookahead");
  if (o.too_long == TooLong::kSplit && o.remainder == Remainder::kDrop) {
    throw InvalidArgumentError(
        "Pack: too_long=\"split\" with remainder=\"drop\" would drop some pieces of an example "
        "whose other pieces are yielded; use remainder=\"pad\" or \"keep\"");
  }
  RequirePositiveIfSet(o.open_rows, "Pack", "open_rows");
  if (o.algorithm == PackAlgorithm::kConcatThenSplit) ValidateConcatThenSplit(o);
  if (o.open_rows && o.lookahead) {
    throw InvalidArgumentError(StrCat("Pack: give lookahead (", *o.lookahead, ") or open_rows (",
                                      *o.open_rows, "), not both"));
  }
  // The largest segment axis this plan could have (the default is at most
  // row_length): every size product below fits in int64.
  const int64_t max_segments = o.max_segments_per_row.value_or(o.row_length);
  CheckBatchSize(o.rows_per_batch, o.row_length, max_segments,
                 StrCat("Pack: rows_per_batch=", o.rows_per_batch, " with row_length=",
                        o.row_length, " and max_segments_per_row=", max_segments));
}

// too_long="split"'s packing items: each example cut into pieces of at
// most row_length (PieceOf), piece i of the list standing for piece
// `piece[i]` of example `example[i]`, in the examples' order and each
// example's pieces in order.
struct Pieces {
  std::vector<int64_t> lengths, ids, example, piece;
};

Pieces SplitIntoPieces(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                       int64_t row_length) {
  Pieces p;
  for (int64_t id : ids) {
    const int64_t length = lengths[static_cast<size_t>(id)];
    const int64_t count = PieceCount(length, row_length);
    for (int64_t k = 0; k < count; ++k) {
      p.ids.push_back(static_cast<int64_t>(p.lengths.size()));
      p.lengths.push_back(PieceOf(length, k, row_length).length);
      p.example.push_back(id);
      p.piece.push_back(k);
    }
  }
  return p;
}

// Adds packed row `r`: its examples, or for a split plan its pieces' examples and pieces.
void AddPackedRow(const PackedRows& rows, int64_t r, const Pieces* pieces, PlanBuilder& builder) {
  const auto begin = static_cast<size_t>(rows.row_begin[static_cast<size_t>(r)]);
  const auto end = static_cast<size_t>(rows.row_begin[static_cast<size_t>(r) + 1]);
  const std::span<const int64_t> items =
      std::span<const int64_t>(rows.example_ids).subspan(begin, end - begin);
  if (pieces == nullptr) return builder.AddRow(items);
  std::vector<int64_t> examples, piece;
  for (int64_t i : items) {
    examples.push_back(pieces->example[static_cast<size_t>(i)]);
    piece.push_back(pieces->piece[static_cast<size_t>(i)]);
  }
  builder.AddRow(examples, piece);
}

BatchPlan PlanPack(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                   const PackOptions& o) {
  if (o.algorithm == PackAlgorithm::kConcatThenSplit) return PlanConcatThenSplit(lengths, ids, o);
  if (PacksSeveralLengths(o)) return PlanPackLengths(lengths, ids, o);
  PlanBuilder builder(/*packed=*/true);
  builder.set_split(o.too_long == TooLong::kSplit);
  std::vector<int64_t> kept;
  kept.reserve(ids.size());
  for (int64_t id : ids) {
    const int64_t length = lengths[static_cast<size_t>(id)];
    if (length > o.row_length &&
        !HandleTooLong(o.too_long, id, length, o.row_length, "Pack", "row_length", builder)) {
      continue;
    }
    kept.push_back(id);
  }
  // Under "split" the packer sees pieces, each of its own id; else examples.
  const Pieces pieces = builder.split() ? SplitIntoPieces(lengths, kept, o.row_length) : Pieces{};
  const Pieces* split = builder.split() ? &pieces : nullptr;
  const std::span<const int64_t> item_lengths = split ? pieces.lengths : lengths;
  const std::vector<int64_t>& items = split ? pieces.ids : kept;
  const int64_t segments = o.max_segments_per_row
                               ? *o.max_segments_per_row
                               : DefaultSegments(item_lengths, items, o.row_length);
  const PackedRows rows = PackRowsWith(item_lengths, items, o.row_length, segments, o.algorithm,
                                       o.lookahead, o.open_rows);
  AddPackedBatches(
      rows, o, {.rows = o.rows_per_batch, .length = o.row_length, .segments = segments},
      [&](int64_t r) { AddPackedRow(rows, r, split, builder); }, builder);
  return std::move(builder).Finish(lengths, static_cast<int64_t>(ids.size()));
}

}  // namespace

const char* PlannerName(const PlannerOptions& options) {
  static constexpr const char* kNames[] = {"PadToMax",  "FixedBuckets", "AutoBuckets",
                                           "Pack",      "GraphBudget",  "GraphBuckets",
                                           "PatchPack", "AspectBuckets"};
  return kNames[options.index()];
}

bool IsGraphPlanner(const PlannerOptions& options) {
  return std::holds_alternative<GraphBudgetOptions>(options) ||
         std::holds_alternative<GraphBucketsOptions>(options);
}

bool YieldsPieces(const PlannerOptions& options) {
  if (const auto* patches = std::get_if<PatchPackOptions>(&options)) {
    return patches->too_long == TooLong::kSplit;
  }
  if (const auto* pack = std::get_if<PackOptions>(&options)) {
    return pack->too_long == TooLong::kSplit || pack->algorithm == PackAlgorithm::kConcatThenSplit;
  }
  const auto* fixed = std::get_if<FixedBucketsOptions>(&options);
  return fixed != nullptr && fixed->too_long == TooLong::kSplit;
}

void ValidatePlannerOptions(const PlannerOptions& options) {
  std::visit(
      [](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, PadToMaxOptions>) ValidatePadToMax(o);
        if constexpr (std::is_same_v<T, FixedBucketsOptions>) ValidateFixedBuckets(o);
        if constexpr (std::is_same_v<T, AutoBucketsOptions>) ValidateAutoBuckets(o);
        if constexpr (std::is_same_v<T, PackOptions>) ValidatePack(o);
        if constexpr (std::is_same_v<T, GraphBudgetOptions>) ValidateGraphBudget(o);
        if constexpr (std::is_same_v<T, GraphBucketsOptions>) ValidateGraphBuckets(o);
        if constexpr (std::is_same_v<T, PatchPackOptions>) ValidatePatchPack(o);
        if constexpr (std::is_same_v<T, AspectBucketsOptions>) ValidateAspectBuckets(o);
      },
      options);
}

namespace {

// The first example (by index) longer than `limit`, or -1.
int64_t FirstLonger(std::span<const int64_t> lengths, int64_t limit) {
  const auto it =
      std::find_if(lengths.begin(), lengths.end(), [&](int64_t l) { return l > limit; });
  return it == lengths.end() ? -1 : it - lengths.begin();
}

int64_t Longest(std::span<const int64_t> lengths) {
  return std::max_element(lengths.begin(), lengths.end()) - lengths.begin();
}

}  // namespace

void CheckExamplesFit(std::span<const int64_t> lengths, const PlannerOptions& options,
                      std::span<const int64_t> edges, std::span<const int64_t> widths) {
  // PatchPack plans images by height and width, whatever the other planners do with them.
  if (const auto* patches = std::get_if<PatchPackOptions>(&options)) {
    return CheckPatchesFit(lengths, widths, *patches);
  }
  if (!widths.empty()) return CheckGridExamplesFit(lengths, widths, options);
  if (lengths.empty()) return;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, PadToMaxOptions>) {
          PadToMaxLength(o, o.batch_size, lengths[static_cast<size_t>(Longest(lengths))]);
        }
        if constexpr (std::is_same_v<T, FixedBucketsOptions>) {
          const int64_t id = FirstLonger(lengths, o.boundaries.back());
          if (id >= 0 && o.too_long == TooLong::kError) {
            ThrowTooLong(id, lengths[static_cast<size_t>(id)], o.boundaries.back(), "FixedBuckets",
                         "the last boundary");
          }
        }
        if constexpr (std::is_same_v<T, AutoBucketsOptions>) {
          CheckLongestFits(lengths, Longest(lengths), o);
        }
        if constexpr (std::is_same_v<T, PackOptions>) {
          if (!o.row_lengths.empty()) return CheckPackFeaturesFit(lengths, edges, o);
          const int64_t id = FirstLonger(lengths, o.row_length);
          // concat_then_split cuts every example at row ends.
          if (id >= 0 && o.too_long == TooLong::kError &&
              o.algorithm != PackAlgorithm::kConcatThenSplit) {
            ThrowTooLong(id, lengths[static_cast<size_t>(id)], o.row_length, "Pack", "row_length");
          }
        }
        if constexpr (std::is_same_v<T, GraphBudgetOptions> ||
                      std::is_same_v<T, GraphBucketsOptions>) {
          CheckGraphsFit(lengths, edges, o);
        }
        if constexpr (std::is_same_v<T, AspectBucketsOptions>) {
          CheckAspectExamplesFit(lengths, widths, o);  // no widths: the error naming them
        }
      },
      options);
}

BatchPlan Plan(std::span<const int64_t> lengths, const PlannerOptions& options, PlanOrder order,
               std::span<const int64_t> edges, std::span<const int64_t> widths) {
  ValidatePlannerOptions(options);
  if (const auto* patches = std::get_if<PatchPackOptions>(&options)) {
    return PlanPatchPack(lengths, widths, ResolveOrder(lengths, order), *patches);
  }
  if (!widths.empty()) {
    CheckGridSizes(lengths, widths, options);
    return PlanGrid(lengths, widths, ResolveOrder(lengths, order), options);
  }
  const std::vector<int64_t> ids = ResolveOrder(lengths, order);
  return std::visit(
      [&](const auto& o) -> BatchPlan {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, PadToMaxOptions>) return PlanPadToMax(lengths, ids, o);
        if constexpr (std::is_same_v<T, FixedBucketsOptions>) {
          return PlanFixedBuckets(lengths, ids, o);
        }
        if constexpr (std::is_same_v<T, AutoBucketsOptions>) {
          return PlanAutoBuckets(lengths, ids, o);
        }
        if constexpr (std::is_same_v<T, PackOptions>) {
          // Several features: `edges` holds the features after the first.
          return o.row_lengths.empty() ? PlanPack(lengths, ids, o)
                                       : PlanPackFeatures(lengths, edges, ids, o);
        }
        if constexpr (std::is_same_v<T, GraphBudgetOptions>) {
          return PlanGraphBudget(lengths, edges, ids, o);
        }
        if constexpr (std::is_same_v<T, GraphBucketsOptions>) {
          return PlanGraphBuckets(lengths, edges, ids, o);
        }
        if constexpr (std::is_same_v<T, PatchPackOptions>) {
          return PlanPatchPack(lengths, widths, ids, o);  // no widths: the error naming them
        }
        if constexpr (std::is_same_v<T, AspectBucketsOptions>) {
          return PlanAspectBuckets(lengths, widths, ids, o);  // likewise
        }
      },
      options);
}

}  // namespace jaxbatch
