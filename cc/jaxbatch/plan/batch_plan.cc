#include "jaxbatch/plan/batch_plan.h"

#include <algorithm>
#include <optional>
#include <string>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"

namespace jaxbatch {

void CheckExtent(int64_t value, std::string_view planner, std::string_view option,
                 std::string_view held_by) {
  if (value > kMaxExtent) {
    throw InvalidArgumentError(StrCat(planner, ": ", option, "=", value, " exceeds ", kMaxExtent,
                                      ", the most a batch's int32 ", held_by, " can hold"));
  }
}

BatchView BatchPlan::batch(int64_t b) const {
  if (b < 0 || b >= num_batches()) {
    throw OutOfRangeError(
        StrCat("BatchPlan: batch ", b, " out of range; the plan has ", num_batches(), " batches"));
  }
  BatchView view;
  view.index = b;
  view.shape = shapes[static_cast<size_t>(batch_shape_ids[static_cast<size_t>(b)])];
  const auto first = static_cast<size_t>(batch_row_begin[static_cast<size_t>(b)]);
  const auto last = static_cast<size_t>(batch_row_begin[static_cast<size_t>(b) + 1]);
  view.row_begin = std::span<const int64_t>(row_example_begin).subspan(first, last - first + 1);
  view.examples = example_ids;
  view.pieces = example_pieces;
  view.starts = piece_starts;
  view.piece_lengths = piece_lengths;
  return view;
}

namespace {

// `what` names the shape in the error: "batch 3" or "shape 1".
void CheckShape(const BatchShape& shape, const std::string& what) {
  if (shape.rows < 0 || shape.length < 0 || shape.segments < 0 || shape.edges < 0 ||
      !CheckedMul(shape.rows, shape.length) || !CheckedMul(shape.rows, shape.segments)) {
    throw InvalidArgumentError(StrCat("BatchPlan: ", what, " of ", shape.rows, " rows x ",
                                      shape.length, " elements x ", shape.segments,
                                      " segments: expected sizes >= 0 whose products fit int64"));
  }
  const std::optional<int64_t> cells = CheckedMul(shape.length, shape.width);
  if (shape.width < 0 || !cells || !CheckedMul(shape.rows, *cells)) {
    throw InvalidArgumentError(StrCat("BatchPlan: ", what, " of ", shape.rows, " rows x ",
                                      shape.length, " x ", shape.width,
                                      " cells: expected sizes >= 0 whose product fits int64"));
  }
}

// A grid plan's shapes all have a width (> 0) and its rows one example
// each; every other plan's shapes have none.
void CheckGridShapes(const BatchPlan& plan) {
  if (plan.grid && (plan.packed || plan.graph || plan.split)) {
    throw InvalidArgumentError(
        "BatchPlan: a grid plan cannot also be packed, a graph plan or split");
  }
  for (size_t s = 0; s < plan.shapes.size(); ++s) {
    if ((plan.shapes[s].width > 0) != plan.grid) {
      throw InvalidArgumentError(
          StrCat("BatchPlan: shape ", s, " has width ", plan.shapes[s].width, ", expected ",
                 plan.grid ? "> 0 (the plan is a grid plan)" : "0 (the plan is not a grid plan)"));
    }
  }
}

// Checks that `begin` starts at 0, never decreases and ends at `end`.
void CheckBegins(std::span<const int64_t> begin, int64_t end, const char* name, const char* what) {
  if (begin.empty() || begin.front() != 0) {
    throw InvalidArgumentError(StrCat("BatchPlan: ", name, " must start at 0"));
  }
  for (size_t i = 1; i < begin.size(); ++i) {
    if (begin[i] < begin[i - 1]) {
      throw InvalidArgumentError(StrCat("BatchPlan: ", name, " decreases at ", what, " ", i - 1,
                                        " (", begin[i - 1], " then ", begin[i], ")"));
    }
  }
  if (begin.back() != end) {
    throw InvalidArgumentError(
        StrCat("BatchPlan: ", name, " ends at ", begin.back(), ", expected ", end));
  }
}

// A concat_then_split plan's spans: one start and length per segment of a
// split plan, each >= 0, and no row holding more elements than its shape.
// Each span is checked against its example's length where the data is
// (collate).
void CheckPieceSpans(const BatchPlan& plan) {
  if (plan.piece_starts.empty() && plan.piece_lengths.empty()) return;
  if (!plan.split || plan.piece_starts.size() != plan.example_ids.size() ||
      plan.piece_lengths.size() != plan.example_ids.size()) {
    throw InvalidArgumentError(StrCat(
        "BatchPlan: piece_starts has ", plan.piece_starts.size(), " and piece_lengths ",
        plan.piece_lengths.size(), " entries, expected ", plan.example_ids.size(),
        " each (one per example id of a split plan)", plan.split ? "" : "; the plan is not split"));
  }
  for (size_t i = 0; i < plan.piece_starts.size(); ++i) {
    if (plan.piece_starts[i] < 0 || plan.piece_lengths[i] < 0) {
      throw InvalidArgumentError(StrCat("BatchPlan: piece at ", i, " starts at ",
                                        plan.piece_starts[i], " with length ",
                                        plan.piece_lengths[i], "; expected both >= 0"));
    }
  }
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      int64_t used = 0;
      for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
        used = SaturatingAdd(used, view.piece_lengths[static_cast<size_t>(q)]);
      }
      if (used > view.shape.length) {
        throw InvalidArgumentError(StrCat("BatchPlan: batch ", b, ", row ", r, " holds pieces of ",
                                          used, " elements, more than its length ",
                                          view.shape.length));
      }
    }
  }
}

}  // namespace

void CheckPlan(const BatchPlan& plan) {
  const int64_t batches = plan.num_batches();
  for (size_t s = 0; s < plan.shapes.size(); ++s) {
    CheckShape(plan.shapes[s], StrCat("shape ", s));
  }
  CheckGridShapes(plan);
  // A collator sizes each feature's arrays by its row length.
  if (plan.feature_names.size() != plan.feature_row_lengths.size()) {
    throw InvalidArgumentError(StrCat("BatchPlan: ", plan.feature_names.size(),
                                      " feature names but ", plan.feature_row_lengths.size(),
                                      " feature row lengths"));
  }
  for (size_t f = 0; f < plan.feature_row_lengths.size(); ++f) {
    const int64_t length = plan.feature_row_lengths[f];
    if (length <= 0 || length > kMaxExtent) {
      throw InvalidArgumentError(StrCat("BatchPlan: feature '", plan.feature_names[f],
                                        "' has row length ", length, ", expected 1 to ",
                                        kMaxExtent));
    }
  }
  if (static_cast<int64_t>(plan.batch_row_begin.size()) != batches + 1) {
    throw InvalidArgumentError(StrCat("BatchPlan: batch_row_begin has ",
                                      plan.batch_row_begin.size(), " entries, expected ",
                                      batches + 1, " (batches + 1)"));
  }
  const auto stored_rows = static_cast<int64_t>(plan.row_example_begin.size()) - 1;
  CheckBegins(plan.batch_row_begin, stored_rows, "batch_row_begin", "batch");
  CheckBegins(plan.row_example_begin, static_cast<int64_t>(plan.example_ids.size()),
              "row_example_begin", "row");
  for (int64_t b = 0; b < batches; ++b) {
    const int32_t id = plan.batch_shape_ids[static_cast<size_t>(b)];
    if (id < 0 || static_cast<size_t>(id) >= plan.shapes.size()) {
      throw InvalidArgumentError(StrCat("BatchPlan: batch ", b, " has shape ", id,
                                        ", expected one of the ", plan.shapes.size(), " shapes"));
    }
    const BatchView view = plan.batch(b);
    if (view.stored_rows() > view.shape.rows) {
      throw InvalidArgumentError(StrCat("BatchPlan: batch ", b, " stores ", view.stored_rows(),
                                        " rows but its shape has ", view.shape.rows));
    }
    for (int64_t r = 0; r < view.stored_rows() && !plan.packed && !plan.graph; ++r) {
      if (view.row_examples(r).size() > 1) {
        throw InvalidArgumentError(StrCat("BatchPlan: batch ", b, ", row ", r, " holds ",
                                          view.row_examples(r).size(),
                                          " examples, but the plan is not packed"));
      }
    }
  }
  if (plan.split && plan.example_pieces.size() != plan.example_ids.size()) {
    throw InvalidArgumentError(StrCat("BatchPlan: example_pieces has ", plan.example_pieces.size(),
                                      " entries, expected ", plan.example_ids.size(),
                                      " (one per example id of a split plan)"));
  }
  if (!plan.split && !plan.example_pieces.empty()) {
    throw InvalidArgumentError(StrCat("BatchPlan: example_pieces has ", plan.example_pieces.size(),
                                      " entries, but the plan is not split"));
  }
  for (size_t i = 0; i < plan.example_pieces.size(); ++i) {
    if (plan.example_pieces[i] < 0) {
      throw InvalidArgumentError(
          StrCat("BatchPlan: piece ", plan.example_pieces[i], " at ", i, " is negative"));
    }
  }
  CheckPieceSpans(plan);
  for (size_t i = 0; i < plan.example_ids.size(); ++i) {
    if (plan.example_ids[i] < 0) {
      throw InvalidArgumentError(
          StrCat("BatchPlan: example id ", plan.example_ids[i], " at ", i, " is negative"));
    }
  }
  if (plan.stats.batches != batches) {
    throw InvalidArgumentError(
        StrCat("BatchPlan: stats count ", plan.stats.batches, " batches, the plan has ", batches));
  }
}

void PlanBuilder::BeginBatch(const BatchShape& shape) {
  // Planners check their options first and name them; this is the backstop
  // for a hand-built plan.
  CheckShape(shape, StrCat("batch ", plan_.num_batches()));
  auto it = std::find(plan_.shapes.begin(), plan_.shapes.end(), shape);
  if (it == plan_.shapes.end()) {
    plan_.shapes.push_back(shape);
    it = plan_.shapes.end() - 1;
  }
  plan_.batch_shape_ids.push_back(static_cast<int32_t>(it - plan_.shapes.begin()));
  rows_in_batch_ = 0;
}

void PlanBuilder::AddRow(std::span<const int64_t> examples) {
  plan_.example_ids.insert(plan_.example_ids.end(), examples.begin(), examples.end());
  plan_.row_example_begin.push_back(static_cast<int64_t>(plan_.example_ids.size()));
  ++rows_in_batch_;
}

void PlanBuilder::AddRow(std::span<const int64_t> examples, std::span<const int64_t> pieces) {
  plan_.example_pieces.insert(plan_.example_pieces.end(), pieces.begin(), pieces.end());
  AddRow(examples);
}

void PlanBuilder::AddRow(std::span<const int64_t> examples, std::span<const int64_t> pieces,
                         std::span<const int64_t> starts, std::span<const int64_t> lengths) {
  plan_.piece_starts.insert(plan_.piece_starts.end(), starts.begin(), starts.end());
  plan_.piece_lengths.insert(plan_.piece_lengths.end(), lengths.begin(), lengths.end());
  AddRow(examples, pieces);
}

void PlanBuilder::EndBatch() {
  const BatchShape& shape = plan_.shapes[static_cast<size_t>(plan_.batch_shape_ids.back())];
  if (rows_in_batch_ > shape.rows) {
    throw InvalidArgumentError(StrCat("BatchPlan: batch ", plan_.num_batches() - 1, " got ",
                                      rows_in_batch_, " rows but its shape has ", shape.rows));
  }
  // The rows after the last one added are padding and are not stored.
  plan_.batch_row_begin.push_back(static_cast<int64_t>(plan_.row_example_begin.size()) - 1);
}

namespace {

double Ratio(int64_t real, int64_t padded) {
  return padded == 0 ? 1.0 : static_cast<double>(real) / static_cast<double>(padded);
}

}  // namespace

int64_t PaddedElements(const BatchShape& shape, bool graph) {
  if (graph) return shape.length;
  const int64_t elements = SaturatingMul(shape.rows, shape.length);
  return shape.width > 0 ? SaturatingMul(elements, shape.width) : elements;
}

int64_t ExamplesStarted(const BatchView& view) {
  const std::span<const int64_t> all = view.all_examples();
  if (view.pieces.empty()) return static_cast<int64_t>(all.size());
  const auto first = static_cast<size_t>(view.row_begin.front());
  return std::count(view.pieces.begin() + first, view.pieces.begin() + first + all.size(), 0);
}

PieceSpan SegmentSpan(const BatchView& view, int64_t q, int64_t length) {
  if (!view.starts.empty()) {
    return {view.starts[static_cast<size_t>(q)], view.piece_lengths[static_cast<size_t>(q)]};
  }
  if (view.pieces.empty()) return {0, length};
  return PieceOf(length, view.piece(q), view.shape.length);
}

int64_t SegmentLength(const BatchView& view, std::span<const int64_t> lengths, int64_t q) {
  const int64_t length = lengths[static_cast<size_t>(view.examples[static_cast<size_t>(q)])];
  return SegmentSpan(view, q, length).length;
}

namespace {

// The cells of an example of `height` x `width` that a grid batch of
// `shape` holds: cut to the shape on each axis.
int64_t GridCells(const BatchShape& shape, int64_t height, int64_t width) {
  return SaturatingMul(std::min(height, shape.length), std::min(width, shape.width));
}

}  // namespace

int64_t RealElements(const BatchView& view, std::span<const int64_t> lengths, bool graph,
                     std::span<const int64_t> widths) {
  int64_t real = 0;
  if (view.shape.width > 0) {
    for (int64_t e : view.all_examples()) {
      const auto i = static_cast<size_t>(e);
      real = SaturatingAdd(real, GridCells(view.shape, lengths[i], widths[i]));
    }
    return real;
  }
  for (int64_t r = 0; r < view.stored_rows(); ++r) {
    int64_t used = 0;
    for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
      const int64_t length = SegmentLength(view, lengths, q);
      used = SaturatingAdd(used, graph ? length : std::min(length, view.shape.length - used));
    }
    real = SaturatingAdd(real, used);
  }
  return real;
}

void PlanBuilder::StartStats(int64_t num_examples) {
  PlanStats& stats = plan_.stats;
  stats.examples = num_examples;
  stats.batches = plan_.num_batches();
  stats.shapes = static_cast<int64_t>(plan_.shapes.size());
  stats.batches_per_shape.assign(plan_.shapes.size(), 0);
  stats.dropped = static_cast<int64_t>(plan_.dropped_examples.size());
  stats.skipped = static_cast<int64_t>(plan_.skipped_examples.size());
}

namespace {

// The loop every Finish shares: each batch counted in batches_per_shape and
// handed to `count` (with the stats) for what its kind of plan counts, then
// the efficiency of real over padded elements.
template <typename CountBatch>
BatchPlan CountBatches(BatchPlan& plan, CountBatch count) {
  PlanStats& stats = plan.stats;
  for (int64_t b = 0; b < stats.batches; ++b) {
    const BatchView view = plan.batch(b);
    ++stats.batches_per_shape[static_cast<size_t>(plan.batch_shape_ids[static_cast<size_t>(b)])];
    count(view, stats);
  }
  stats.efficiency = Ratio(stats.real_elements, stats.padded_elements);
  return std::move(plan);
}

}  // namespace

BatchPlan PlanBuilder::FinishGraphs(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                                    int64_t num_examples) && {
  StartStats(num_examples);
  BatchPlan plan = CountBatches(plan_, [&](const BatchView& view, PlanStats& stats) {
    stats.padded_elements = SaturatingAdd(stats.padded_elements, view.shape.length);
    stats.padded_edges = SaturatingAdd(stats.padded_edges, view.shape.edges);
    stats.padded_graphs = SaturatingAdd(stats.padded_graphs, view.shape.rows);
    for (int64_t e : view.all_examples()) {
      stats.real_elements = SaturatingAdd(stats.real_elements, nodes[static_cast<size_t>(e)]);
      stats.real_edges = SaturatingAdd(stats.real_edges, edges[static_cast<size_t>(e)]);
      ++stats.real_graphs;
    }
  });
  plan.stats.occupied_elements = plan.stats.padded_elements;
  return plan;
}

BatchPlan PlanBuilder::FinishGrid(std::span<const int64_t> heights, std::span<const int64_t> widths,
                                  int64_t num_examples) && {
  StartStats(num_examples);
  return CountBatches(plan_, [&](const BatchView& view, PlanStats& stats) {
    const int64_t cells = SaturatingMul(view.shape.length, view.shape.width);
    stats.padded_elements = SaturatingAdd(stats.padded_elements, PaddedElements(view.shape, false));
    for (int64_t e : view.all_examples()) {
      const auto i = static_cast<size_t>(e);
      if (heights[i] > view.shape.length || widths[i] > view.shape.width) ++stats.truncated;
      stats.real_elements =
          SaturatingAdd(stats.real_elements, GridCells(view.shape, heights[i], widths[i]));
      stats.occupied_elements = SaturatingAdd(stats.occupied_elements, cells);
    }
  });
}

BatchPlan PlanBuilder::Finish(std::span<const int64_t> lengths, int64_t num_examples) && {
  StartStats(num_examples);
  return CountBatches(plan_, [&](const BatchView& view, PlanStats& stats) {
    stats.padded_elements =
        SaturatingAdd(stats.padded_elements, SaturatingMul(view.shape.rows, view.shape.length));
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      int64_t used = 0;
      for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
        const int64_t length = SegmentLength(view, lengths, q);
        const int64_t take = std::min(length, view.shape.length - used);
        if (take < length) ++stats.truncated;
        used += take;
      }
      stats.real_elements = SaturatingAdd(stats.real_elements, used);
      if (!view.row_examples(r).empty()) {
        stats.occupied_elements = SaturatingAdd(stats.occupied_elements, view.shape.length);
      }
    }
  });
}

}  // namespace jaxbatch
