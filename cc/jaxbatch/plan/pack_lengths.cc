#include "jaxbatch/plan/pack_lengths.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/packer.h"

namespace jaxbatch {
namespace {

// The items the groups pack: an example, or under too_long="split" a piece
// of one (its elements [start, start + length)), in input order.
struct Items {
  std::vector<int64_t> example, piece, start, length;
  void Add(int64_t id, int64_t k, int64_t first, int64_t count) {
    example.push_back(id);
    piece.push_back(k);
    start.push_back(first);
    length.push_back(count);
  }
};

// A group's rows: each a list of item indices.
using Rows = std::vector<std::vector<int64_t>>;

Items CollectItems(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                   const PackOptions& o, PlanBuilder& builder) {
  Items items;
  for (int64_t id : ids) {
    const int64_t length = lengths[static_cast<size_t>(id)];
    if (length > o.row_length &&
        !HandleTooLong(o.too_long, id, length, o.row_length, "Pack", "row_length", builder)) {
      continue;
    }
    if (!builder.split()) {  // Truncated to the largest row, as a collator cuts it.
      items.Add(id, 0, 0, std::min(length, o.row_length));
      continue;
    }
    for (int64_t k = 0; k < PieceCount(length, o.row_length); ++k) {
      const PieceSpan span = PieceOf(length, k, o.row_length);
      items.Add(id, k, span.start, span.length);
    }
  }
  return items;
}

Rows PackGroup(const Items& items, std::span<const int64_t> group, int64_t row_length,
               int64_t segments, const PackOptions& o) {
  const PackedRows packed = PackRowsWith(items.length, group, row_length, segments, o.algorithm,
                                         o.lookahead, o.open_rows);
  Rows rows(static_cast<size_t>(packed.num_rows()));
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].assign(packed.example_ids.begin() + packed.row_begin[r],
                   packed.example_ids.begin() + packed.row_begin[r + 1]);
  }
  return rows;
}

// Rows in a group's last batch when it is partial, else 0.
int64_t PartialRows(const Rows& rows, int64_t per_batch) {
  return static_cast<int64_t>(rows.size()) % per_batch;
}

// Longest group first: its last batch's empty rows take each shorter
// group's last-batch rows, re-packed into its longer rows, when they all fit.
void FillLastBatches(const Items& items, const std::vector<int64_t>& row_lengths,
                     const std::vector<int64_t>& per_batch, const std::vector<int64_t>& segments,
                     const PackOptions& o, std::vector<Rows>& groups) {
  for (size_t g = groups.size(); g-- > 1;) {
    const int64_t partial = PartialRows(groups[g], per_batch[g]);
    int64_t empty = partial == 0 ? 0 : per_batch[g] - partial;
    for (size_t h = g; h-- > 0 && empty > 0;) {
      const int64_t tail = PartialRows(groups[h], per_batch[h]);
      if (tail == 0) continue;
      std::vector<int64_t> moved;
      for (auto r = groups[h].end() - tail; r != groups[h].end(); ++r) {
        moved.insert(moved.end(), r->begin(), r->end());
      }
      Rows repacked = PackGroup(items, moved, row_lengths[g], segments[g], o);
      if (static_cast<int64_t>(repacked.size()) > empty) continue;
      groups[h].resize(groups[h].size() - static_cast<size_t>(tail));
      empty -= static_cast<int64_t>(repacked.size());
      for (auto& row : repacked) groups[g].push_back(std::move(row));
    }
  }
}

// One batch to emit: rows [first, first + count) of group `group`.
struct PendingBatch {
  int64_t first_item = 0;  // the input position of its earliest segment
  size_t group = 0;
  int64_t first = 0, count = 0;
};

std::vector<PendingBatch> Batches(const std::vector<Rows>& groups,
                                  const std::vector<int64_t>& per_batch) {
  std::vector<PendingBatch> batches;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto num_rows = static_cast<int64_t>(groups[g].size());
    for (int64_t first = 0; first < num_rows; first += per_batch[g]) {
      PendingBatch batch{std::numeric_limits<int64_t>::max(), g, first,
                         std::min(per_batch[g], num_rows - first)};
      for (int64_t r = first; r < first + batch.count; ++r) {
        for (int64_t item : groups[g][static_cast<size_t>(r)]) {
          batch.first_item = std::min(batch.first_item, item);
        }
      }
      batches.push_back(batch);
    }
  }
  std::stable_sort(
      batches.begin(), batches.end(),
      [](const PendingBatch& a, const PendingBatch& b) { return a.first_item < b.first_item; });
  return batches;
}

void AddRow(const Items& items, const std::vector<int64_t>& row, PlanBuilder& builder) {
  std::vector<int64_t> example, piece, start, length;
  for (int64_t i : row) {
    const auto k = static_cast<size_t>(i);
    example.push_back(items.example[k]);
    piece.push_back(items.piece[k]);
    start.push_back(items.start[k]);
    length.push_back(items.length[k]);
  }
  if (!builder.split()) return builder.AddRow(example);
  builder.AddRow(example, piece, start, length);
}

void Require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgumentError(StrCat("Pack: ", what));
}

}  // namespace

bool PacksSeveralLengths(const PackOptions& o) {
  return !o.row_length_list.empty() || o.token_budget.has_value() || o.max_shapes.has_value();
}

std::vector<int64_t> PackRowLengths(const PackOptions& o, std::span<const int64_t> lengths) {
  if (o.max_shapes) {
    return ChoosePackRowLengths(lengths, o.row_length, *o.max_shapes, o.attention_percent);
  }
  if (o.row_length_list.empty()) return {o.row_length};
  return o.row_length_list;
}

std::vector<int64_t> ChoosePackRowLengths(std::span<const int64_t> lengths, int64_t row_length,
                                          int64_t max_shapes, int64_t attention_percent) {
  const int64_t step = (row_length + 1023) / 1024;
  const auto candidate = [&](int64_t length) {
    const int64_t l = std::clamp<int64_t>(length, 1, row_length);
    return std::min(row_length, (l + step - 1) / step * step);
  };
  std::map<int64_t, double> tokens{{row_length, 0.0}};  // per candidate
  for (int64_t length : lengths) {
    tokens[candidate(length)] += static_cast<double>(std::min(length, row_length));
  }
  std::vector<int64_t> cand;
  std::vector<double> prefix{0.0};  // tokens of the candidates before j
  for (const auto& [c, t] : tokens) {
    cand.push_back(c);
    prefix.push_back(prefix.back() + t);
  }
  const auto m = cand.size();
  const double a = static_cast<double>(attention_percent);
  const auto cost = [&](double t, int64_t length) {
    const double l = static_cast<double>(length);
    return std::ceil(t / l) * l * ((100.0 - a) * static_cast<double>(row_length) + a * l);
  };
  // best[k][j]: the least cost of the lengths up to cand[j] with at most k
  // + 1 row lengths, the largest cand[j]; from[k][j]: the row length before.
  const auto shapes = static_cast<size_t>(std::min<int64_t>(max_shapes, static_cast<int64_t>(m)));
  std::vector<std::vector<double>> best(shapes, std::vector<double>(m));
  std::vector<std::vector<int64_t>> from(shapes, std::vector<int64_t>(m, -1));
  for (size_t j = 0; j < m; ++j) best[0][j] = cost(prefix[j + 1], cand[j]);
  for (size_t k = 1; k < shapes; ++k) {
    for (size_t j = 0; j < m; ++j) {
      best[k][j] = best[k - 1][j];
      from[k][j] = from[k - 1][j];
      for (size_t i = 0; i < j; ++i) {
        const double c = best[k - 1][i] + cost(prefix[j + 1] - prefix[i + 1], cand[j]);
        if (c < best[k][j]) {
          best[k][j] = c;
          from[k][j] = static_cast<int64_t>(i);
        }
      }
    }
  }
  std::vector<int64_t> chosen;
  for (int64_t j = static_cast<int64_t>(m) - 1, k = static_cast<int64_t>(shapes) - 1; j >= 0; --k) {
    chosen.push_back(cand[static_cast<size_t>(j)]);
    // from[k][j] was set at the level that chose it; the levels below still hold it.
    j = from[static_cast<size_t>(k)][static_cast<size_t>(j)];
  }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
}

int64_t PackRowsPerBatch(const PackOptions& o, int64_t row_length) {
  if (!o.token_budget) return o.rows_per_batch;
  return *o.token_budget / row_length / o.rows_multiple * o.rows_multiple;
}

void ValidatePackLengths(const PackOptions& o) {
  Require(o.row_lengths.empty(),
          "row_length is a list of row lengths for one column or a dict of features' row "
          "lengths, not both");
  Require(o.algorithm != PackAlgorithm::kConcatThenSplit,
          "algorithm=\"concat_then_split\" fills every row to one row_length; it takes no "
          "row_length list or token_budget");
  if (o.max_shapes) {
    Require(o.row_length_list.empty(),
            "give a row_length list or max_shapes (to choose them), not both");
    Require(*o.max_shapes > 0,
            StrCat("max_shapes must be a positive integer, found ", *o.max_shapes));
  }
  Require(o.attention_percent >= 0 && o.attention_percent < 100,
          StrCat("attention_percent must be in 0..99, found ", o.attention_percent));
  const std::vector<int64_t>& list = o.row_length_list;
  for (size_t k = 0; k < list.size(); ++k) {
    Require(list[k] > 0 && list[k] <= kMaxExtent,
            StrCat("row_length[", k, "] must be in 1..", kMaxExtent, ", found ", list[k]));
    Require(k == 0 || list[k] > list[k - 1],
            StrCat("row_length must be strictly increasing, found ", list[k - (k > 0)], " then ",
                   list[k], " at ", k));
  }
  Require(list.empty() || list.back() == o.row_length,
          StrCat("row_length (", o.row_length, ") must be the largest of the row_length list (",
                 list.empty() ? 0 : list.back(), ")"));
  if (o.token_budget) {
    Require(*o.token_budget > 0,
            StrCat("token_budget must be a positive integer, found ", *o.token_budget));
    Require(o.rows_per_batch == 0, StrCat("give rows_per_batch (", o.rows_per_batch,
                                          ") or token_budget (", *o.token_budget, "), not both"));
  } else {
    Require(o.rows_per_batch > 0, StrCat("rows_per_batch must be a positive integer, found ",
                                         o.rows_per_batch, " (or give token_budget)"));
    Require(o.rows_per_batch % o.rows_multiple == 0,
            StrCat("rows_per_batch=", o.rows_per_batch,
                   " must be a multiple of rows_multiple=", o.rows_multiple));
  }
  // Chosen row lengths are at most row_length: they hold its rows too.
  for (int64_t row_length : list.empty() ? std::vector<int64_t>{o.row_length} : list) {
    const int64_t rows = PackRowsPerBatch(o, row_length);
    Require(rows > 0,
            StrCat("token_budget ", o.token_budget.value_or(0), " holds no row of row_length ",
                   row_length, " (", o.rows_multiple, " rows for rows_multiple=", o.rows_multiple,
                   "); raise it to at least ",
                   CheckedMul(row_length, o.rows_multiple).value_or(kMaxSize)));
  }
}

BatchPlan PlanPackLengths(std::span<const int64_t> lengths, const std::vector<int64_t>& ids,
                          const PackOptions& o) {
  PlanBuilder builder(/*packed=*/true);
  builder.set_split(o.too_long == TooLong::kSplit);
  const Items items = CollectItems(lengths, ids, o, builder);
  const std::vector<int64_t> row_lengths = PackRowLengths(o, lengths);
  std::vector<std::vector<int64_t>> members(row_lengths.size());
  std::vector<int64_t> all(items.length.size());
  for (size_t i = 0; i < all.size(); ++i) {
    all[i] = static_cast<int64_t>(i);
    const auto g = std::lower_bound(row_lengths.begin(), row_lengths.end(), items.length[i]) -
                   row_lengths.begin();
    members[static_cast<size_t>(g)].push_back(all[i]);
  }
  std::vector<int64_t> per_batch, segments;
  std::vector<Rows> groups;
  for (size_t g = 0; g < row_lengths.size(); ++g) {
    per_batch.push_back(PackRowsPerBatch(o, row_lengths[g]));
    // Over every item, not the group's: rows filled from shorter groups
    // hold their items, and the lengths alone fix the shape.
    segments.push_back(
        o.max_segments_per_row.value_or(DefaultSegments(items.length, all, row_lengths[g])));
    groups.push_back(PackGroup(items, members[g], row_lengths[g], segments[g], o));
  }
  if (o.remainder == Remainder::kPad) {
    FillLastBatches(items, row_lengths, per_batch, segments, o, groups);
    // Then each group's rows spread evenly under the budget (balance.h).
    if (o.balance_batches && o.token_budget &&
        !PackingFollowsOrder(o.algorithm, o.lookahead, o.open_rows)) {
      std::vector<int64_t> counts;
      for (const Rows& rows : groups) counts.push_back(static_cast<int64_t>(rows.size()));
      BalanceRows(counts, per_batch, o.rows_multiple);
    }
  }
  for (const PendingBatch& batch : Batches(groups, per_batch)) {
    const Rows& rows = groups[batch.group];
    if (batch.count < per_batch[batch.group] && o.remainder == Remainder::kDrop) {
      for (int64_t r = batch.first; r < batch.first + batch.count; ++r) {
        for (int64_t i : rows[static_cast<size_t>(r)]) {
          builder.Drop(items.example[static_cast<size_t>(i)]);
        }
      }
      continue;
    }
    const int64_t kept = (batch.count + o.rows_multiple - 1) / o.rows_multiple * o.rows_multiple;
    builder.BeginBatch({.rows = o.remainder == Remainder::kKeep ? kept : per_batch[batch.group],
                        .length = row_lengths[batch.group],
                        .segments = segments[batch.group]});
    for (int64_t r = batch.first; r < batch.first + batch.count; ++r) {
      AddRow(items, rows[static_cast<size_t>(r)], builder);
    }
    builder.EndBatch();
  }
  return std::move(builder).Finish(lengths, static_cast<int64_t>(ids.size()));
}

}  // namespace jaxbatch
