#include "jaxbatch/plan/grid_planner.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/grid_buckets.h"

namespace jaxbatch {
namespace {

constexpr const char* kGridPlanners =
    "PadToMax or AutoBuckets (or AspectBuckets, for images you resize)";

// `size` (an example's height or width) rounded up to `multiple`; throws
// naming the option when that does not fit an int64.
int64_t RoundUpAxis(int64_t size, int64_t multiple, const char* planner) {
  const std::optional<int64_t> rounded = CheckedRoundUp(size, multiple);
  if (!rounded || *rounded > kMaxExtent) {
    throw InvalidArgumentError(StrCat(planner, ": pad_to_multiple=", multiple, " rounds size ",
                                      size, " up past ", kMaxExtent,
                                      ", the most a batch's int32 lengths can hold"));
  }
  return *rounded;
}

// Throws, naming the options in `why`, when a batch of rows x H x W cells
// does not fit an int64.
void CheckGridBatch(int64_t rows, int64_t height, int64_t width, const std::string& why) {
  if (!CheckedProduct({rows, height, width})) {
    throw InvalidArgumentError(StrCat(why, " makes a batch of ", rows, " x ", height, " x ", width,
                                      " cells, more than ", kMaxSize));
  }
}

// The rows of a kept partial batch of `count` examples: `count` rounded up
// to `rows_multiple` (at most a full batch, itself a multiple).
int64_t KeptGridRows(int64_t count, int64_t rows_multiple) {
  const int64_t partial = count % rows_multiple;
  return partial == 0 ? count : count - partial + rows_multiple;
}

// The shape of a PadToMax batch of `rows` whose largest example is
// `height` x `width` (each axis its own largest).
BatchShape PadToMaxGridShape(const PadToMaxOptions& o, int64_t rows, int64_t height,
                             int64_t width) {
  const int64_t h = RoundUpAxis(height, o.pad_to_multiple, "PadToMax");
  const int64_t w = RoundUpAxis(width, o.pad_to_multiple, "PadToMax");
  CheckGridBatch(
      rows, h, w,
      StrCat("PadToMax: batch_size=", o.batch_size, " with pad_to_multiple=", o.pad_to_multiple,
             " (", height, " x ", width, " padded to ", h, " x ", w, ")"));
  return {.rows = rows, .length = h, .width = w};
}

BatchPlan PlanGridPadToMax(std::span<const int64_t> heights, std::span<const int64_t> widths,
                           const std::vector<int64_t>& ids, const PadToMaxOptions& o) {
  PlanBuilder builder = PlanBuilder::Grid();
  const auto batch = static_cast<size_t>(o.batch_size);
  for (size_t start = 0; start < ids.size(); start += batch) {
    const size_t end = std::min(ids.size(), start + batch);
    const auto count = static_cast<int64_t>(end - start);
    if (count < o.batch_size && o.remainder == Remainder::kDrop) {
      for (size_t k = start; k < end; ++k) builder.Drop(ids[k]);
      break;
    }
    int64_t height = 0;
    int64_t width = 0;
    for (size_t k = start; k < end; ++k) {
      height = std::max(height, heights[static_cast<size_t>(ids[k])]);
      width = std::max(width, widths[static_cast<size_t>(ids[k])]);
    }
    const int64_t rows =
        o.remainder == Remainder::kKeep ? KeptGridRows(count, o.rows_multiple) : o.batch_size;
    builder.BeginBatch(PadToMaxGridShape(o, rows, height, width));
    for (size_t k = start; k < end; ++k) builder.AddRow(std::span<const int64_t>(&ids[k], 1));
    builder.EndBatch();
  }
  return std::move(builder).FinishGrid(heights, widths, static_cast<int64_t>(ids.size()));
}

// Rows per batch of an AutoBuckets shape of `cells` = H x W: batch_size,
// and/or token_budget // cells rounded down to rows_multiple (0: none fit).
int64_t GridRows(const AutoBucketsOptions& o, int64_t cells) {
  int64_t rows = o.batch_size.value_or(std::numeric_limits<int64_t>::max());
  if (o.token_budget)
    rows = std::min(rows, *o.token_budget / cells / o.rows_multiple * o.rows_multiple);
  return rows;
}

// Each example's size rounded up to pad_to_multiple, per axis.
std::vector<int64_t> RoundAxis(std::span<const int64_t> sizes, const AutoBucketsOptions& o) {
  std::vector<int64_t> out(sizes.size());
  for (size_t e = 0; e < sizes.size(); ++e) {
    out[e] = RoundUpAxis(sizes[e], o.pad_to_multiple, "AutoBuckets");
  }
  return out;
}

// Throws when the largest shape, (max h, max w), has no row in the budget or
// makes a batch past int64: naming it first makes raising the budget to what
// the error says enough, as every other shape is smaller.
void CheckLargestGridFits(std::span<const int64_t> heights, std::span<const int64_t> widths,
                          const AutoBucketsOptions& o) {
  const int64_t h = RoundUpAxis(*std::max_element(heights.begin(), heights.end()),
                                o.pad_to_multiple, "AutoBuckets");
  const int64_t w = RoundUpAxis(*std::max_element(widths.begin(), widths.end()), o.pad_to_multiple,
                                "AutoBuckets");
  const std::optional<int64_t> cells = CheckedMul(h, w);
  const std::string what =
      StrCat("the largest shape, ", h, " x ", w,
             " (the largest height and width, padded to pad_to_multiple=", o.pad_to_multiple, ")");
  if (!cells)
    throw InvalidArgumentError(StrCat("AutoBuckets: ", what, " has more cells than ", kMaxSize));
  const int64_t rows = GridRows(o, *cells);
  if (rows == 0) {
    const std::optional<int64_t> needed = CheckedMul(*cells, o.rows_multiple);
    throw InvalidArgumentError(StrCat(
        "AutoBuckets: token_budget ", *o.token_budget, " is smaller than ", what, " of ", *cells,
        " cells", o.rows_multiple > 1 ? StrCat(" x rows_multiple=", o.rows_multiple) : "",
        "; raise token_budget to at least ",
        needed ? StrCat(*needed) : StrCat("more than ", kMaxSize)));
  }
  CheckGridBatch(rows, h, w,
                 StrCat("AutoBuckets: batch_size=", o.batch_size.value_or(0), " with ", what));
}

// AutoBuckets over (h, w): the shapes of ChooseGridShapes over the planned
// examples, each example in the smallest-area one that holds it, each shape
// then cut to the bounding box of its examples (with the rows of the shape
// chosen). Batches fill per shape in `ids` order, like the 1-D AutoBuckets;
// a shape's last partial batch follows `remainder`; with "pad", smaller
// shapes' examples fill larger shapes' spare rows, as in 1-D.
BatchPlan PlanGridAutoBuckets(std::span<const int64_t> heights, std::span<const int64_t> widths,
                              const std::vector<int64_t>& ids, const AutoBucketsOptions& o) {
  PlanBuilder builder = PlanBuilder::Grid();
  if (ids.empty()) return std::move(builder).FinishGrid(heights, widths, 0);
  std::vector<int64_t> h, w;
  for (int64_t id : ids) {
    h.push_back(heights[static_cast<size_t>(id)]);
    w.push_back(widths[static_cast<size_t>(id)]);
  }
  CheckLargestGridFits(h, w, o);
  h = RoundAxis(h, o);
  w = RoundAxis(w, o);
  const bool pad = o.remainder == Remainder::kPad;
  // With remainder="pad", smaller shapes' last batches fill larger ones'
  // spare rows (ChooseGridBuckets; not when restoring an older state).
  const GridBuckets buckets = ChooseGridBuckets(
      h, w, o.max_shapes,
      [&](int64_t height, int64_t width, int64_t count) {
        const int64_t cells = SaturatingMul(height, width);
        return BucketCost(cells, count, GridRows(o, cells), pad);
      },
      [&](int64_t height, int64_t width) { return GridRows(o, SaturatingMul(height, width)); },
      pad && o.fill_remainders);
  const std::vector<int64_t>& shape_of = buckets.shape_of;
  const std::vector<GridShape>& boxes = buckets.boxes;
  std::vector<int64_t> rows = buckets.rows;
  if (pad && o.balance_batches && o.token_budget) {  // A budget's rows, spread evenly.
    std::vector<int64_t> counts(rows.size(), 0);
    for (int64_t s : shape_of) ++counts[static_cast<size_t>(s)];
    BalanceRows(counts, rows, o.rows_multiple);
  }
  std::vector<std::vector<int64_t>> pending(boxes.size());
  auto flush = [&](size_t s, int64_t batch_rows) {
    builder.BeginBatch({.rows = batch_rows, .length = boxes[s].height, .width = boxes[s].width});
    for (int64_t id : pending[s]) builder.AddRow(std::span<const int64_t>(&id, 1));
    builder.EndBatch();
    pending[s].clear();
  };
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto s = static_cast<size_t>(shape_of[p]);
    pending[s].push_back(ids[p]);
    if (static_cast<int64_t>(pending[s].size()) == rows[s]) flush(s, rows[s]);
  }
  for (size_t s = 0; s < pending.size(); ++s) {
    if (pending[s].empty()) continue;
    if (o.remainder == Remainder::kDrop) {
      for (int64_t id : pending[s]) builder.Drop(id);
      pending[s].clear();
    } else {
      const auto count = static_cast<int64_t>(pending[s].size());
      flush(s, pad ? rows[s] : KeptGridRows(count, o.rows_multiple));
    }
  }
  return std::move(builder).FinishGrid(heights, widths, static_cast<int64_t>(ids.size()));
}

}  // namespace

void CheckGridSizes(std::span<const int64_t> heights, std::span<const int64_t> widths,
                    const PlannerOptions& options) {
  if (std::holds_alternative<AspectBucketsOptions>(options)) return;  // checks its own sizes
  if (!std::holds_alternative<PadToMaxOptions>(options) &&
      !std::holds_alternative<AutoBucketsOptions>(options)) {
    throw InvalidArgumentError(StrCat(PlannerName(options),
                                      ": plans one length per example, but the data has two "
                                      "variable axes (height and width); use ",
                                      kGridPlanners));
  }
  if (widths.size() != heights.size()) {
    throw InvalidArgumentError(StrCat("plan: expected one width per height (", heights.size(),
                                      "), found ", widths.size(), " widths"));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 0) {
      throw InvalidArgumentError(
          StrCat("plan: example ", i, ": expected a width >= 0, found ", widths[i]));
    }
  }
}

void CheckGridExamplesFit(std::span<const int64_t> heights, std::span<const int64_t> widths,
                          const PlannerOptions& options) {
  CheckGridSizes(heights, widths, options);
  if (heights.empty()) return;
  if (const auto* o = std::get_if<PadToMaxOptions>(&options)) {
    PadToMaxGridShape(*o, o->batch_size, *std::max_element(heights.begin(), heights.end()),
                      *std::max_element(widths.begin(), widths.end()));
  }
  if (const auto* o = std::get_if<AutoBucketsOptions>(&options)) {
    CheckLargestGridFits(heights, widths, *o);
  }
  if (const auto* o = std::get_if<AspectBucketsOptions>(&options)) {
    CheckAspectExamplesFit(heights, widths, *o);
  }
}

BatchPlan PlanGrid(std::span<const int64_t> heights, std::span<const int64_t> widths,
                   const std::vector<int64_t>& ids, const PlannerOptions& options) {
  CheckGridSizes(heights, widths, options);
  if (const auto* o = std::get_if<AspectBucketsOptions>(&options)) {
    return PlanAspectBuckets(heights, widths, ids, *o);
  }
  if (const auto* o = std::get_if<AutoBucketsOptions>(&options)) {
    return PlanGridAutoBuckets(heights, widths, ids, *o);
  }
  return PlanGridPadToMax(heights, widths, ids, std::get<PadToMaxOptions>(options));
}

}  // namespace jaxbatch
