// BatchPlan: which examples go into which batch, and each batch's shape.
//
// A plan is made by a planner (planner.h) from example lengths alone. It is
// stored flat, so a plan over millions of examples is a few vectors:
//   batch b stores rows [batch_row_begin[b], batch_row_begin[b+1]);
//   stored row r holds examples example_ids[row_example_begin[r] .. row_example_begin[r+1]).
// A padded plan has at most one example per row; a packed plan (Pack) has
// several examples, its segments, per row. Every batch has exactly
// shapes[batch_shape_ids[b]].rows rows, but only its leading rows that hold
// examples are stored: the padding rows after them are implicit, so a plan's
// size is O(examples + batches) whatever the batch size (a batch of 2^31 rows
// over 4 examples stores 4 rows).
// A split plan (Pack with too_long="split") stores pieces, not examples: a
// segment is piece example_pieces[q] of example example_ids[q], elements
// [piece * L, min((piece + 1) * L, length)) of it for the plan's row length
// L (PieceSpan), so a piece is (example, start, length) without storing
// more than its index. A concat_then_split plan cuts pieces at row ends, at
// any offset: it stores each segment's start and length as well
// (piece_starts, piece_lengths, parallel to example_ids), still O(segments).
#ifndef JAXBATCH_PLAN_BATCH_PLAN_H_
#define JAXBATCH_PLAN_BATCH_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jaxbatch {

// The most a batch extent can be that int32 outputs hold: a padded or row
// length (`<name>_lengths`, positions), segments per row (segment ids), a
// graph batch's node, edge and graph slots (n_node, n_edge, senders,
// receivers and node_graph hold them). Planner options past it are refused
// when they are made, not at the first batch.
inline constexpr int64_t kMaxExtent = std::numeric_limits<int32_t>::max();

// Throws InvalidArgumentError when `value`, given as `planner`'s `option`,
// exceeds kMaxExtent; `held_by` names the int32 outputs that hold it.
// Example: CheckExtent(o.row_length, "Pack", "row_length", "positions");
void CheckExtent(int64_t value, std::string_view planner, std::string_view option,
                 std::string_view held_by);

// A batch's padded shape: `rows` x `length` elements, and for packed rows
// `segments` = the most examples one row can hold (0 when not packed). A
// graph batch (graph_planner.h) has `rows` graph slots, `length` node slots
// and `edges` edge slots. A grid batch (images [h, w, ...], pair features
// [L, L, ...]) pads every example to `length` x `width` cells: H = length,
// W = width; `width` is 0 for every other batch.
struct BatchShape {
  int64_t rows = 0;
  int64_t length = 0;
  int64_t segments = 0;
  int64_t edges = 0;
  int64_t width = 0;
  friend bool operator==(const BatchShape&, const BatchShape&) = default;
};

// What a plan costs: every example is in a batch or counted as dropped
// (remainder="drop") or skipped (too_long="skip").
struct PlanStats {
  int64_t examples = 0;  // examples the planner was given
  int64_t batches = 0;
  int64_t shapes = 0;  // distinct batch shapes = compilations
  // Element counts saturate at 2^63 - 1 rather than wrap (a plan of huge
  // batches): they are never negative. A grid plan counts cells (h x w).
  int64_t real_elements = 0;    // sum of (possibly truncated) lengths placed
  int64_t padded_elements = 0;  // sum over batches of rows * length
  double efficiency = 0.0;      // real / padded (1.0 for an empty plan)
  // Elements of rows that hold an example: padded_elements less the empty
  // rows that fill partial batches. real / occupied is the bucketing's own
  // efficiency, before the remainder policy's padding rows.
  int64_t occupied_elements = 0;
  std::vector<int64_t> batches_per_shape;
  int64_t dropped = 0;    // examples left out by remainder="drop"
  int64_t skipped = 0;    // examples left out by too_long="skip"
  int64_t truncated = 0;  // examples cut to the shape by too_long="truncate"
  // Graph plans: real_elements / padded_elements count nodes, and these
  // edges and graphs (all 0 for other plans).
  int64_t real_edges = 0;
  int64_t padded_edges = 0;
  int64_t real_graphs = 0;
  int64_t padded_graphs = 0;
};

// One batch of a plan, viewed without a copy.
struct BatchView {
  int64_t index = 0;
  BatchShape shape;
  // Each segment's piece, parallel to `examples`; empty unless the plan is
  // split (every segment then piece 0, the whole example).
  std::span<const int64_t> pieces;
  int64_t piece(int64_t q) const { return pieces.empty() ? 0 : pieces[static_cast<size_t>(q)]; }
  // A concat_then_split plan's explicit spans, parallel to `examples`;
  // empty otherwise (a split plan's spans follow from the piece: PieceOf).
  std::span<const int64_t> starts;
  std::span<const int64_t> piece_lengths;
  // Row r of this batch holds examples row_examples(r); empty for padding.
  // Only the leading stored_rows() rows are stored; the rest, up to
  // shape.rows, are padding.
  std::span<const int64_t> row_begin;  // stored_rows() + 1 entries into `examples`
  std::span<const int64_t> examples;   // the plan's flat example ids
  int64_t stored_rows() const { return static_cast<int64_t>(row_begin.size()) - 1; }
  std::span<const int64_t> row_examples(int64_t r) const {
    if (r >= stored_rows()) return {};
    return examples.subspan(static_cast<size_t>(row_begin[r]),
                            static_cast<size_t>(row_begin[r + 1] - row_begin[r]));
  }
  // Every example of the batch, row by row.
  std::span<const int64_t> all_examples() const {
    return examples.subspan(static_cast<size_t>(row_begin.front()),
                            static_cast<size_t>(row_begin.back() - row_begin.front()));
  }
};

// Where piece `piece` of an example of `length` elements starts and how
// many elements it has, for rows of `row_length`: pieces are cut at
// multiples of row_length, so every piece but the last is full.
struct PieceSpan {
  int64_t start = 0;
  int64_t length = 0;
};
inline PieceSpan PieceOf(int64_t length, int64_t piece, int64_t row_length) {
  const int64_t start = piece * row_length;
  return {start, start >= length ? 0 : std::min(row_length, length - start)};
}
// The pieces an example of `length` is split into (at least one).
inline int64_t PieceCount(int64_t length, int64_t row_length) {
  return length <= row_length ? 1 : (length - 1) / row_length + 1;
}
// The elements of its example that segment `q` of `view` (an index into
// view.examples) holds, for an example of `length`: the whole example, a
// split plan's piece (PieceOf), or a concat_then_split plan's stored span.
PieceSpan SegmentSpan(const BatchView& view, int64_t q, int64_t length);

// Elements a batch pads to: rows x length (x width for a grid batch), or a
// graph batch's node slots.
int64_t PaddedElements(const BatchShape& shape, bool graph);
// Real elements of `view`: each example's length (from `lengths`, by
// example id), cut to what its row has room for as a collator cuts it. A
// grid batch (shape.width > 0) reads `lengths` as heights and `widths` as
// widths and counts min(h, H) x min(w, W) cells per example.
int64_t RealElements(const BatchView& view, std::span<const int64_t> lengths, bool graph,
                     std::span<const int64_t> widths = {});
// The examples a batch counts: its segments, less a split plan's pieces
// after the first, so that each example counts once over a plan.
int64_t ExamplesStarted(const BatchView& view);
// The elements segment `q` (an index into view.examples) holds: its
// example's length, or its piece's for a split plan.
int64_t SegmentLength(const BatchView& view, std::span<const int64_t> lengths, int64_t q);

class BatchPlan {
 public:
  bool packed = false;
  // Graph batches (graph_planner.h): each stored row is one graph.
  bool graph = false;
  // Grid batches (grid_planner.h): every shape has width > 0, a row holds
  // one example padded to length x width cells.
  bool grid = false;
  // True when too_long="truncate": a collator may cut examples to the shape.
  bool allow_truncate = false;
  // True when too_long="split": segments are pieces (example_pieces), and
  // collation adds example_piece.
  bool split = false;
  // The column whose lengths made the plan ("" when planned from lengths).
  std::string length_column;
  // Pack with several features (pack_features.h): each feature's name and
  // row length, in name order; the shapes' `length` is their sum. Empty
  // for one feature.
  std::vector<std::string> feature_names;
  std::vector<int64_t> feature_row_lengths;
  std::vector<BatchShape> shapes;
  std::vector<int32_t> batch_shape_ids;
  std::vector<int64_t> batch_row_begin{0};
  std::vector<int64_t> row_example_begin{0};
  std::vector<int64_t> example_ids;
  // Parallel to example_ids when split (else empty): each segment's piece.
  std::vector<int64_t> example_pieces;
  // Parallel to example_ids for a concat_then_split plan (else empty): each
  // segment's first element within its example and its element count.
  std::vector<int64_t> piece_starts;
  std::vector<int64_t> piece_lengths;
  std::vector<int64_t> dropped_examples;
  std::vector<int64_t> skipped_examples;
  // AspectBuckets (aspect_buckets.h): each example's resize target, h and w
  // per example id ((0, 0) when not planned); collating an example not at
  // its target is an error. Empty for every other planner.
  std::vector<int64_t> resize_to;
  PlanStats stats;

  int64_t num_batches() const { return static_cast<int64_t>(batch_shape_ids.size()); }
  // Throws OutOfRangeError when `b` is not a batch of this plan.
  BatchView batch(int64_t b) const;
};

// Checks that a plan's vectors fit together, as a planner leaves them: a
// plan rebuilt from its parts (a pickle sent to a worker process) is checked
// before anything indexes with it. Throws InvalidArgumentError naming the
// vector and the batch or row that does not fit. Example ids are only
// checked to be >= 0: collate checks them against its dataset.
//
// Example:
//   BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 2});
//   CheckPlan(plan);  // passes: a planner's plan always fits
void CheckPlan(const BatchPlan& plan);

// Builds a BatchPlan batch by batch, deduplicating shapes.
// Example:
//   PlanBuilder builder(/*packed=*/false);
//   builder.BeginBatch({.rows = 2, .length = 8});
//   builder.AddRow(std::vector<int64_t>{4});
//   builder.EndBatch();  // the second row is padding
//   BatchPlan plan = std::move(builder).Finish(lengths);
class PlanBuilder {
 public:
  explicit PlanBuilder(bool packed) { plan_.packed = packed; }
  // A builder of graph batches: rows are graphs.
  static PlanBuilder Graphs() {
    PlanBuilder builder(false);
    builder.plan_.graph = true;
    return builder;
  }
  // A builder of grid batches: shapes with width > 0, one example a row.
  static PlanBuilder Grid() {
    PlanBuilder builder(false);
    builder.plan_.grid = true;
    return builder;
  }
  void BeginBatch(const BatchShape& shape);
  void AddRow(std::span<const int64_t> examples);
  // A split plan's row: segment q is piece pieces[q] of examples[q].
  void AddRow(std::span<const int64_t> examples, std::span<const int64_t> pieces);
  // A concat_then_split row: segment q is elements [starts[q], starts[q] +
  // lengths[q]) of examples[q], its piece pieces[q].
  void AddRow(std::span<const int64_t> examples, std::span<const int64_t> pieces,
              std::span<const int64_t> starts, std::span<const int64_t> lengths);
  // Ends the batch; the rows not added up to shape.rows are padding (not
  // stored). Throws InvalidArgumentError when more rows were added.
  void EndBatch();
  void Drop(int64_t example) { plan_.dropped_examples.push_back(example); }
  void Skip(int64_t example) { plan_.skipped_examples.push_back(example); }
  void set_allow_truncate(bool allow) { plan_.allow_truncate = allow; }
  void set_split(bool split) { plan_.split = split; }
  void set_features(std::vector<std::string> names, std::vector<int64_t> row_lengths) {
    plan_.feature_names = std::move(names);
    plan_.feature_row_lengths = std::move(row_lengths);
  }
  bool split() const { return plan_.split; }
  // Computes stats from `lengths` (indexed by example id).
  BatchPlan Finish(std::span<const int64_t> lengths, int64_t num_examples) &&;
  // Finish for grid batches, from each example's height and width.
  BatchPlan FinishGrid(std::span<const int64_t> heights, std::span<const int64_t> widths,
                       int64_t num_examples) &&;
  // Finish for graph batches, from each graph's node and edge count.
  BatchPlan FinishGraphs(std::span<const int64_t> nodes, std::span<const int64_t> edges,
                         int64_t num_examples) &&;

 private:
  void StartStats(int64_t num_examples);
  BatchPlan plan_;
  int64_t rows_in_batch_ = 0;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_PLAN_BATCH_PLAN_H_
