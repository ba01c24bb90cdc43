// ChunkedSource: a data set read chunk by chunk (Parquet row groups), for a
// loader whose data does not fit in memory.
//
// Planning needs only lengths, so a chunked source keeps, for the whole data
// set: every ragged column's lengths, the chunks' example boundaries and
// decoded sizes, the bad records the schema finds, and a one-example
// `prototype` that gives collation the columns' types and fixed shapes. A
// builder fills it one decoded chunk at a time (memory stays at one chunk);
// a loader then asks for chunks again as batches touch them (chunk_cache.h)
// and gathers each batch's examples into a small dataset of its own
// (GatherBatch), which collates exactly as the whole data set would.
//
// Example:
//   ChunkedSourceBuilder builder("tokens", schema);
//   for (int64_t g = 0; g < row_groups; ++g) builder.Add(DecodeRowGroup(g));
//   auto source = std::make_shared<const ChunkedSource>(std::move(builder).Finish());
//
// A source of graphs (ChunkedSourceBuilder::ForGraphs, for GraphBudget and
// GraphBuckets) also keeps each graph's node and edge count, taken from
// the list columns' lengths (or n_node / n_edge) of each chunk as it is
// added, and counts every malformed graph (FindBadGraphs) among the bad
// records, so a plan over the counts is the plan over the whole data.
#ifndef JAXBATCH_LOAD_CHUNKED_SOURCE_H_
#define JAXBATCH_LOAD_CHUNKED_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/graph.h"
#include "jaxbatch/load/chunk_cache.h"
#include "jaxbatch/load/schema.h"
#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch {

struct ChunkedSource {
  // One example per column, of the data's dtypes, inner shapes and aligned
  // groups. A ragged column aligned with the length column has length 0; any
  // other ragged column is as long as its longest example in the whole data
  // (zeros), because collation pads such a column to that length.
  std::shared_ptr<const Dataset> prototype;
  std::string length_column;
  std::vector<int64_t> chunk_begin{0};  // chunk c holds examples [chunk_begin[c], chunk_begin[c+1])
  std::vector<int64_t> chunk_bytes;     // OwnedBytes of each decoded chunk
  // Every ragged column's lengths over the whole data, in column order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> ragged_lengths;
  // Every grid column's h_0, w_0, h_1, w_1, ... over the whole data.
  std::vector<std::pair<std::string, std::vector<int64_t>>> grid_shapes;
  std::vector<BadRecord> bad_records;  // whole-data example indices, in order
  // Every value's fingerprint: DatasetFingerprint of each chunk, chained in
  // chunk order (what a job keys a streamed input on).
  uint64_t fingerprint = 0;
  // A source of graphs: its columns' roles, and each graph's node and edge
  // count over the whole data (NodeCounts, EdgeCounts). Empty otherwise.
  std::optional<GraphColumns> graph;
  std::vector<int64_t> node_counts;
  std::vector<int64_t> edge_counts;

  int64_t num_examples() const { return chunk_begin.back(); }
  int64_t num_chunks() const { return static_cast<int64_t>(chunk_bytes.size()); }
  // The chunk holding `example` (which must be in range).
  int64_t ChunkOf(int64_t example) const;
  // Throws InvalidArgumentError naming the ragged columns when `column` is not one.
  const std::vector<int64_t>& lengths(std::string_view column) const;
  // A grid column's heights and widths over the whole data; throws
  // InvalidArgumentError naming the grid columns when `column` is not one.
  std::vector<int64_t> heights(std::string_view column) const;
  std::vector<int64_t> widths(std::string_view column) const;
};

class ChunkedSourceBuilder {
 public:
  // `length_column` "" = the first chunk's default length column. The schema
  // is applied to each chunk as it is added (FindBadRecords).
  ChunkedSourceBuilder(std::string length_column, Schema schema);
  // A source of graphs, planned by node and edge counts (no length column).
  // Add throws InvalidArgumentError when the first chunk's columns do not
  // name a graph (FindGraphColumns).
  static ChunkedSourceBuilder ForGraphs(Schema schema);

  // Adds the next chunk. Throws InvalidArgumentError naming the chunk when
  // its columns differ from the first chunk's, or what FindBadRecords throws.
  void Add(const Dataset& chunk);
  // Throws InvalidArgumentError when no chunk was added.
  ChunkedSource Finish() &&;

 private:
  std::string length_column_;
  Schema schema_;
  ChunkedSource source_;
  std::optional<Dataset> first_;  // the first chunk's columns (no examples kept)
  std::vector<int64_t> max_lengths_;
  std::vector<std::pair<int64_t, int64_t>> max_shapes_;  // per grid column: largest h, w
  bool graphs_ = false;

  void AddGraphs(const Dataset& chunk, std::vector<BadRecord>& bad);
};

// Checks a chunk decoded again against what the source recorded for it (the
// number of examples, the columns, every ragged column's lengths; for
// graphs also each graph's node and edge count, and that no graph is
// malformed that was not a bad record) and returns a copy that owns its
// memory. Throws IoError naming `where` and the chunk when they differ (the
// file changed since it was opened).
std::shared_ptr<const Dataset> CheckedChunkCopy(const ChunkedSource& source, int64_t chunk,
                                                const Dataset& decoded, const std::string& where);

// One batch's examples, gathered from their chunks into a dataset of their
// own (followed by the prototype's example), and the batch's view renumbered
// into it: collating `view()` over `dataset` gives exactly what collating the
// original view over the whole data would.
struct GatheredBatch {
  std::shared_ptr<const Dataset> dataset;
  BatchView original;
  std::vector<int64_t> examples;   // the view's examples, renumbered
  std::vector<int64_t> row_begin;  // the view's row_begin, from 0
  BatchView view() const;
  // Collation numbers `example_index` (`graph_index` for graphs) within
  // `dataset`: this maps it back to the whole data's example indices (-1,
  // padding, stays).
  void RestoreExampleIndex(std::vector<Array>& arrays) const;
};

// Gathers `view`'s examples through `cache`, one chunk at a time (each chunk
// is pinned only while its examples are copied). `priority` orders the
// cache's reads (lower first).
GatheredBatch GatherBatch(const ChunkedSource& source, ChunkCache& cache, const BatchView& view,
                          int64_t priority);

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_CHUNKED_SOURCE_H_
