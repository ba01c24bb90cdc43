// Collation: one planned batch of a dataset into padded, dense arrays.
//
// For a padded batch of shape rows x L, each ragged column becomes
//   <name>          [rows, L, *inner]  values, padding set to the pad value
//   <name>_mask     [rows, L]          bool, true on real elements
//   <name>_lengths  [rows]             int32
//   <name>_segment_ids [rows, L]       int32: 1 on real elements, 0 padding
//   <name>_positions   [rows, L]       int32: 0..length-1, 0 padding
// (a padded row is a packed row of one segment, so one attention and
// position code path serves both; CollateOptions::padded_segments = false
// leaves these two out: 8 of the 13 bytes an int32 column writes a cell)
// and for a packed batch (Pack) of shape rows x L with S segments per row
// (under too_long="split" a segment may be a piece of an example, its
// elements from piece * L on, positions from 0, and `example_piece`
// [rows, S] int64 says which piece)
//   <name>               [rows, L, *inner]
//   <name>_segment_ids   [rows, L]  int32: 1..n for the row's segments, 0 padding
//   <name>_positions     [rows, L]  int32: 0.. within each segment, 0 padding
//   <name>_lengths       [rows, S]  int32: each segment's length, 0 when unused
//   <name>_segment_starts [rows, S] int32: each segment's first cell; an
//                                    unused slot starts at the end of the
//                                    row's real tokens, not at L
//                                    (starts are the exclusive running sum
//                                    of lengths, so start + length is the
//                                    next start: the q/kv offsets of JAX's
//                                    cuDNN packed attention, and with the
//                                    row's end flash-attention's cu_seqlens)
// (Grain's names). Fixed columns are stacked ([rows, *inner], or
// [rows, S, *inner] packed) and `example_index` ([rows] or [rows, S], int64)
// maps every row or segment back to its example, -1 for padding.
//
// A ragged column that is neither the plan's length column nor aligned with
// it is padded to its longest example in the dataset, so its shape stays
// fixed; packing needs every ragged column aligned with the length column.
//
// Example:
//   BatchPlan plan = Plan(ds.column("tokens").Lengths(), options);
//   plan.length_column = "tokens";
//   std::vector<Array> arrays = Collate(ds, plan, 0, {});
#ifndef JAXBATCH_COLLATE_COLLATOR_H_
#define JAXBATCH_COLLATE_COLLATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/dtype.h"
#include "jaxbatch/data/output_names.h"
#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch {

// The names of what collation adds beside a column's values are
// data/output_names.h's (kMaskSuffix, kExampleIndexName, ...). The arrays
// of a batch come in no promised order: find them by name.

inline constexpr double kDefaultPadValue = 0.0;
inline constexpr bool kDefaultPaddedSegments = true;
inline constexpr int64_t kDefaultMinBytesPerThread = int64_t{4} << 20;

// A dense output array. `data` points into memory that `owner` keeps alive,
// so an array can be handed to numpy without a copy.
struct Array {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  uint8_t* data = nullptr;
  std::shared_ptr<void> owner;
  int64_t num_bytes() const;
};

// Hands out `bytes` of uninitialised memory: sets *data and returns its
// owner. A loader passes its BufferArena's Acquire to reuse buffers.
using Allocator = std::function<std::shared_ptr<void>(size_t bytes, uint8_t** data)>;

// Allocates an uninitialised array from `allocator` (SharedArena() when empty).
Array AllocateArray(std::string name, DType dtype, std::vector<int64_t> shape,
                    const Allocator& allocator = {});

struct CollateOptions {
  // Value written into padding, per column; others get default_pad_value.
  // Integers are carried exactly (int64's and uint64's extremes included).
  std::vector<std::pair<std::string, Scalar>> pad_values;
  Scalar default_pad_value = kDefaultPadValue;
  Allocator allocator;  // empty: SharedArena(), reused across calls
  // Threads one large batch may be filled with (split by rows, at least
  // min_bytes_per_thread of output each); 0: the CPU count. A loader, whose workers
  // already run batches in parallel, keeps 1. At most kMaxThreads (base/threads.h).
  int64_t num_threads = 1;
  int64_t min_bytes_per_thread = kDefaultMinBytesPerThread;
  // Whether padded batches carry <name>_segment_ids and <name>_positions.
  bool padded_segments = kDefaultPaddedSegments;
};

// How a batch's rows are laid out: what a collator needs of its plan.
struct BatchLayout {
  bool packed = false;
  bool allow_truncate = false;
  bool split = false;         // segments are pieces: adds example_piece
  std::string length_column;  // "" = the dataset's default length column
  bool graph = false;         // a graph batch (CollateGraphs)
  // Pack with several features (BatchPlan::feature_names): each ragged
  // column is laid out to the row length of the feature it is (or is
  // declared aligned with); a column aligned with none is refused.
  std::vector<std::string> feature_names = {};
  std::vector<int64_t> feature_row_lengths = {};
};

// Throws InvalidArgumentError, starting "<who>: ", when options.pad_values
// names a column `dataset` does not have (a typo would pad with the default).
void CheckPadValues(const Dataset& dataset, const CollateOptions& options, std::string_view who);

// Collates batch `batch_index` of `plan` over `dataset`. Throws
// OutOfRangeError for a batch or example index the dataset does not have,
// and InvalidArgumentError when an example does not fit the batch's shape
// (a plan made from other lengths) or a pad value does not fit a dtype.
std::vector<Array> Collate(const Dataset& dataset, const BatchPlan& plan, int64_t batch_index,
                           const CollateOptions& options);

// Bytes of every array Collate() returns for a batch of `shape` (what a
// memory limit must hold per batch), with CollateOptions::padded_segments.
int64_t CollatedBytes(const Dataset& dataset, const BatchShape& shape, const BatchLayout& layout,
                      bool padded_segments = kDefaultPaddedSegments);

// Collates one batch given as a view: a loader filters out bad examples
// (their rows become padding) and collates what remains.
std::vector<Array> CollateView(const Dataset& dataset, const BatchView& view,
                               const BatchLayout& layout, const CollateOptions& options);

// A graph batch of shape {rows = G graph slots, length = N node slots,
// edges = E edge slots} over a graph data set (data/graph.h), each stored
// row one graph, padded exactly as jraph.pad_with_graphs pads:
//   <node column>  [N, *inner]   the graphs' nodes back to back, then padding
//   <edge column>  [E, *inner]
//   senders, receivers [E]       offset by each graph's first node; padding
//                                edges run from and to the first padding node
//   n_node, n_edge [G] int32     the padding graph (slot k, after the k real
//                                graphs) holds every padding node and edge,
//                                the slots after it are empty graphs
//   <fixed column> [G, *inner]   one row per graph (globals, labels)
//   node_mask [N], edge_mask [E], graph_mask [G]  bool, true on real ones
//   node_graph [N] int32         each node's graph slot (padding: slot k)
//   graph_index [G] int64        the example in each slot, -1 for padding
// Throws InvalidArgumentError for more graphs, nodes or edges than the shape
// holds (at most G - 1, N - 1, E real), a graph whose columns disagree
// with its counts, or a sender or receiver that is not a node of its graph.
std::vector<Array> CollateGraphs(const Dataset& dataset, const BatchView& view,
                                 const CollateOptions& options);

// Bytes of every array CollateGraphs returns for a batch of `shape`.
int64_t GraphCollatedBytes(const Dataset& dataset, const BatchShape& shape);

}  // namespace jaxbatch

#endif  // JAXBATCH_COLLATE_COLLATOR_H_
