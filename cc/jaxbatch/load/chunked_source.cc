#include "jaxbatch/load/chunked_source.h"

#include <algorithm>
#include <utility>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/hash.h"
#include "jaxbatch/data/dataset_builder.h"
#include "jaxbatch/data/fingerprint.h"

namespace jaxbatch {

int64_t ChunkedSource::ChunkOf(int64_t example) const {
  return std::upper_bound(chunk_begin.begin(), chunk_begin.end(), example) - chunk_begin.begin() -
         1;
}

const std::vector<int64_t>& ChunkedSource::lengths(std::string_view column) const {
  std::string names;
  for (const auto& [name, values] : ragged_lengths) {
    if (name == column) return values;
    names += (names.empty() ? "'" : ", '") + name + "'";
  }
  throw InvalidArgumentError(
      StrCat("ChunkedSource: no ragged column '", column, "'; the ragged columns are ", names));
}

namespace {

// Axis `axis` (0: heights, 1: widths) of a grid column's shapes.
std::vector<int64_t> GridAxis(const ChunkedSource& source, std::string_view column, int axis) {
  std::string names;
  for (const auto& [name, shapes] : source.grid_shapes) {
    if (name != column) {
      names += (names.empty() ? "'" : ", '") + name + "'";
      continue;
    }
    std::vector<int64_t> out(shapes.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] = shapes[2 * i + axis];
    return out;
  }
  throw InvalidArgumentError(StrCat("ChunkedSource: no grid column '", column,
                                    "'; the grid columns are ", names.empty() ? "none" : names));
}

// Whether `c` names an axis `by` (the length column) names: it is then
// padded to the batch's extent on that axis, never to its longest example.
bool SharesAnAxis(const RaggedColumn& c, const RaggedColumn& by) {
  for (const std::string& axis : c.axes()) {
    if (std::find(by.axes().begin(), by.axes().end(), axis) != by.axes().end()) return true;
  }
  return false;
}

}  // namespace

std::vector<int64_t> ChunkedSource::heights(std::string_view column) const {
  return GridAxis(*this, column, 0);
}

std::vector<int64_t> ChunkedSource::widths(std::string_view column) const {
  return GridAxis(*this, column, 1);
}

ChunkedSourceBuilder::ChunkedSourceBuilder(std::string length_column, Schema schema)
    : length_column_(std::move(length_column)), schema_(std::move(schema)) {}

ChunkedSourceBuilder ChunkedSourceBuilder::ForGraphs(Schema schema) {
  ChunkedSourceBuilder builder("", std::move(schema));
  builder.graphs_ = true;
  return builder;
}

void ChunkedSourceBuilder::AddGraphs(const Dataset& chunk, std::vector<BadRecord>& bad) {
  // The roles come from the columns alone, so the first chunk's hold for all.
  if (!source_.graph) source_.graph = FindGraphColumns(chunk, "ChunkedSource");
  const GraphColumns& graph = *source_.graph;
  const std::vector<int64_t> nodes = NodeCounts(chunk, graph);
  const std::vector<int64_t> edges = EdgeCounts(chunk);
  source_.node_counts.insert(source_.node_counts.end(), nodes.begin(), nodes.end());
  source_.edge_counts.insert(source_.edge_counts.end(), edges.begin(), edges.end());
  // Before the schema's records: a graph both rules refuse is recorded with
  // its graph reason, as a Loader over the whole data records it.
  for (GraphProblem& p : FindBadGraphs(chunk, graph)) {
    bad.push_back(BadRecord{p.example, std::move(p.reason)});
  }
}

void ChunkedSourceBuilder::Add(const Dataset& chunk) {
  const int64_t index = source_.num_chunks();
  const uint64_t chunk_fingerprint = DatasetFingerprint(chunk);
  source_.fingerprint = Hash64(&chunk_fingerprint, sizeof(chunk_fingerprint), source_.fingerprint);
  if (!first_) {
    if (length_column_.empty() && !graphs_) length_column_ = chunk.default_length_column();
    if (!graphs_ && chunk.column(length_column_).is_fixed()) {
      throw InvalidArgumentError(StrCat("ChunkedSource: column '", length_column_,
                                        "' is fixed-shape; batching by length needs a ragged "
                                        "column, such as '",
                                        chunk.default_length_column(), "'"));
    }
    first_ = DatasetBuilder(chunk).Finish();  // The columns, no examples.
    for (const RaggedColumn& c : chunk.columns()) {
      if (!c.is_fixed()) source_.ragged_lengths.emplace_back(c.name(), std::vector<int64_t>{});
      if (c.is_grid()) source_.grid_shapes.emplace_back(c.name(), std::vector<int64_t>{});
    }
    max_lengths_.assign(source_.ragged_lengths.size(), 0);
    max_shapes_.assign(source_.grid_shapes.size(), {0, 0});
  } else {
    try {
      DatasetBuilder(*first_).CheckColumns(chunk);
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError(
          StrCat("ChunkedSource: chunk ", index, " has other columns than chunk 0: ", e.what()));
    }
  }
  const int64_t base = source_.num_examples();
  std::vector<BadRecord> bad;
  if (graphs_) AddGraphs(chunk, bad);
  for (BadRecord& r : FindBadRecords(chunk, schema_)) bad.push_back(std::move(r));
  // In example order, one record per example (its first reason).
  std::stable_sort(bad.begin(), bad.end(),
                   [](const BadRecord& a, const BadRecord& b) { return a.example < b.example; });
  for (BadRecord& r : bad) {
    if (!source_.bad_records.empty() && source_.bad_records.back().example == base + r.example) {
      continue;
    }
    r.example += base;
    source_.bad_records.push_back(std::move(r));
  }
  for (size_t k = 0; k < source_.ragged_lengths.size(); ++k) {
    const RaggedColumn& column = chunk.column(source_.ragged_lengths[k].first);
    std::vector<int64_t>& lengths = source_.ragged_lengths[k].second;
    for (int64_t i = 0; i < column.num_examples(); ++i) lengths.push_back(column.length(i));
    max_lengths_[k] = std::max(max_lengths_[k], column.max_length());
  }
  for (size_t k = 0; k < source_.grid_shapes.size(); ++k) {
    const RaggedColumn& column = chunk.column(source_.grid_shapes[k].first);
    const std::span<const int64_t> shapes = column.grid_shapes();
    source_.grid_shapes[k].second.insert(source_.grid_shapes[k].second.end(), shapes.begin(),
                                         shapes.end());
    max_shapes_[k] = {std::max(max_shapes_[k].first, column.max_height()),
                      std::max(max_shapes_[k].second, column.max_width())};
  }
  source_.chunk_bytes.push_back(OwnedBytes(chunk));
  source_.chunk_begin.push_back(base + chunk.num_examples());
}

ChunkedSource ChunkedSourceBuilder::Finish() && {
  if (!first_) throw InvalidArgumentError("ChunkedSource: expected at least one chunk, found none");
  // The prototype example: zeros, as long as collation pads each column.
  std::vector<RaggedColumn> columns;
  size_t ragged = 0, grid = 0;
  for (const RaggedColumn& c : first_->columns()) {
    int64_t rows = 1;
    std::vector<int64_t> grid_shape;  // a grid column's (h, w)
    if (!c.is_fixed()) {
      // Graph collation pads to the budget, never to a column's longest:
      // the prototype of graphs is an empty graph. A column that takes the
      // batch's extent (planned by, aligned or tied) is empty too.
      const bool empty = graphs_ || first_->AreAligned(c.name(), length_column_) ||
                         first_->IsTiedSquare(c, length_column_) ||
                         SharesAnAxis(c, first_->column(length_column_));
      rows = empty ? 0 : max_lengths_[ragged];
      ++ragged;
      if (c.is_grid()) {
        const auto [h, w] = empty ? std::pair<int64_t, int64_t>{0, 0} : max_shapes_[grid];
        grid_shape = {h, w};
        rows = h * w;
        ++grid;
      }
    }
    const std::vector<uint8_t> zeros(static_cast<size_t>(rows * c.row_bytes()));
    std::vector<int64_t> shape = c.inner_shape();
    if (!c.is_fixed()) shape.insert(shape.begin(), rows);
    const RaggedColumn::Piece piece{zeros.data(), c.dtype(), shape};
    RaggedColumn column = RaggedColumn::FromPieces(c.name(), c.dtype(), c.inner_shape(),
                                                   c.is_fixed(), std::span(&piece, 1));
    if (c.is_grid()) column = RaggedColumn::Grid(std::move(column), std::move(grid_shape));
    columns.push_back(RaggedColumn::WithAxes(std::move(column), c.axes()));
  }
  source_.prototype = std::make_shared<const Dataset>(std::move(columns), first_->aligned_groups());
  source_.length_column = length_column_;
  return std::move(source_);
}

namespace {

// A graph chunk read again has the node counts it had, and no malformed
// graph that was not a bad record when the source was built.
void CheckGraphsUnchanged(const ChunkedSource& source, int64_t chunk, const Dataset& decoded,
                          const std::string& where, const std::string& changed) {
  const int64_t begin = source.chunk_begin[static_cast<size_t>(chunk)];
  const std::vector<int64_t> nodes = NodeCounts(decoded, *source.graph);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t want = source.node_counts[static_cast<size_t>(begin) + i];
    if (nodes[i] != want) {
      throw IoError(StrCat(where, ", chunk ", chunk, ", graph ", begin + static_cast<int64_t>(i),
                           ": expected ", want, " nodes, found ", nodes[i], changed));
    }
  }
  const auto is_bad = [&](int64_t example) {
    return std::binary_search(
        source.bad_records.begin(), source.bad_records.end(), BadRecord{example, ""},
        [](const BadRecord& a, const BadRecord& b) { return a.example < b.example; });
  };
  for (const GraphProblem& p : FindBadGraphs(decoded, *source.graph)) {
    if (!is_bad(begin + p.example)) {
      throw IoError(StrCat(where, ", chunk ", chunk, ", example ", begin + p.example, ": ",
                           p.reason, changed));
    }
  }
}

}  // namespace

std::shared_ptr<const Dataset> CheckedChunkCopy(const ChunkedSource& source, int64_t chunk,
                                                const Dataset& decoded, const std::string& where) {
  if (chunk < 0 || chunk >= source.num_chunks()) {
    throw OutOfRangeError(StrCat(where, ": chunk ", chunk, " out of range; there are ",
                                 source.num_chunks(), " chunks"));
  }
  const std::string changed = "; the file changed since the loader opened it";
  const int64_t begin = source.chunk_begin[static_cast<size_t>(chunk)];
  const int64_t expected = source.chunk_begin[static_cast<size_t>(chunk) + 1] - begin;
  if (decoded.num_examples() != expected) {
    throw IoError(StrCat(where, ", chunk ", chunk, ": expected ", expected, " examples, found ",
                         decoded.num_examples(), changed));
  }
  try {
    DatasetBuilder(*source.prototype).CheckColumns(decoded);
  } catch (const InvalidArgumentError& e) {
    throw IoError(StrCat(where, ", chunk ", chunk, ": ", e.what(), changed));
  }
  for (const auto& [name, lengths] : source.ragged_lengths) {
    const RaggedColumn& column = decoded.column(name);
    for (int64_t i = 0; i < expected; ++i) {
      const int64_t want = lengths[static_cast<size_t>(begin + i)];
      if (column.length(i) != want) {
        throw IoError(StrCat(where, ", chunk ", chunk, ", example ", begin + i, ": column '", name,
                             "' expected length ", want, ", found ", column.length(i), changed));
      }
    }
  }
  if (source.graph) CheckGraphsUnchanged(source, chunk, decoded, where, changed);
  return std::make_shared<const Dataset>(OwnedCopy(decoded));
}

BatchView GatheredBatch::view() const {
  BatchView v = original;
  v.row_begin = row_begin;
  v.examples = examples;
  // A split plan's pieces, rebased with the rows (parallel to `examples`).
  if (!original.pieces.empty() && !original.row_begin.empty()) {
    const auto first = static_cast<size_t>(original.row_begin.front());
    v.pieces = original.pieces.subspan(first, examples.size());
    if (!original.starts.empty()) {  // concat_then_split's spans, rebased alike
      v.starts = original.starts.subspan(first, examples.size());
      v.piece_lengths = original.piece_lengths.subspan(first, examples.size());
    }
  }
  return v;
}

void GatheredBatch::RestoreExampleIndex(std::vector<Array>& arrays) const {
  std::vector<int64_t> original_of(examples.size() + 1, -1);
  const std::span<const int64_t> all =
      original.row_begin.empty() ? std::span<const int64_t>() : original.all_examples();
  for (size_t k = 0; k < examples.size(); ++k) {
    original_of[static_cast<size_t>(examples[k])] = all[k];
  }
  for (Array& a : arrays) {
    if (a.name != kExampleIndexName && a.name != kGraphIndexName) continue;
    auto* ids = reinterpret_cast<int64_t*>(a.data);
    const int64_t n = a.num_bytes() / static_cast<int64_t>(sizeof(int64_t));
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] >= 0) ids[i] = original_of[static_cast<size_t>(ids[i])];
    }
  }
}

GatheredBatch GatherBatch(const ChunkedSource& source, ChunkCache& cache, const BatchView& view,
                          int64_t priority) {
  GatheredBatch out;
  out.original = view;
  const std::span<const int64_t> all =
      view.row_begin.empty() ? std::span<const int64_t>() : view.all_examples();
  // (chunk, position in `all`), grouped by chunk.
  std::vector<std::pair<int64_t, int64_t>> order;
  order.reserve(all.size());
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k] < 0 || all[k] >= source.num_examples()) {
      throw OutOfRangeError(StrCat("GatherBatch: batch ", view.index, " names example ", all[k],
                                   " but the source has ", source.num_examples()));
    }
    order.emplace_back(source.ChunkOf(all[k]), static_cast<int64_t>(k));
  }
  std::sort(order.begin(), order.end());
  std::vector<int64_t> chunks;
  for (const auto& [chunk, k] : order) {
    if (chunks.empty() || chunks.back() != chunk) chunks.push_back(chunk);
  }
  DatasetBuilder builder(*source.prototype);
  out.examples.assign(all.size(), -1);
  int64_t next = 0;
  cache.ForEach(chunks, priority, [&](int64_t chunk, const Dataset& data) {
    const int64_t begin = source.chunk_begin[static_cast<size_t>(chunk)];
    auto it = std::lower_bound(order.begin(), order.end(), std::pair<int64_t, int64_t>{chunk, 0});
    for (; it != order.end() && it->first == chunk; ++it) {
      builder.Append(data, all[static_cast<size_t>(it->second)] - begin);
      out.examples[static_cast<size_t>(it->second)] = next++;
    }
  });
  builder.Append(*source.prototype, 0);  // Keeps the columns' padded lengths.
  out.dataset = std::make_shared<const Dataset>(std::move(builder).Finish());
  for (const int64_t r : view.row_begin) out.row_begin.push_back(r - view.row_begin.front());
  return out;
}

}  // namespace jaxbatch
