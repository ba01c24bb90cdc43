#include "jaxbatch/data/fingerprint.h"

#include <string>
#include <vector>

#include "jaxbatch/base/hash.h"
#include "jaxbatch/data/dtype.h"

namespace jaxbatch {
namespace {

uint64_t HashString(const std::string& s, uint64_t seed) {
  const uint64_t size = s.size();
  return Hash64(s.data(), s.size(), Hash64(&size, sizeof(size), seed));
}

}  // namespace

uint64_t DatasetFingerprint(const Dataset& dataset) {
  const int64_t n = dataset.num_examples();
  uint64_t h = Hash64(&n, sizeof(n), 0);
  for (const RaggedColumn& column : dataset.columns()) {
    h = HashString(column.name(), h);
    h = HashString(std::string(DTypeName(column.dtype())), h);
    const std::vector<int64_t>& inner = column.inner_shape();
    const int64_t rank = static_cast<int64_t>(inner.size());
    h = Hash64(&rank, sizeof(rank), h);
    h = Hash64(inner.data(), inner.size() * sizeof(int64_t), h);
    const uint8_t fixed = column.is_fixed() ? 1 : 0;
    h = Hash64(&fixed, 1, h);
    const std::vector<int64_t> lengths = column.Lengths();
    h = Hash64(lengths.data(), lengths.size() * sizeof(int64_t), h);
    // A grid column's shapes and any axis names (absent before grids, so
    // older fingerprints stand).
    const std::span<const int64_t> shapes = column.grid_shapes();
    if (!shapes.empty()) h = Hash64(shapes.data(), shapes.size() * sizeof(int64_t), h);
    for (const std::string& axis : column.axes()) h = HashString(axis, h);
    int64_t rows = 0;
    for (int64_t length : lengths) rows += length;
    if (n > 0 && column.contiguous()) {
      h = Hash64(column.example_data(0), static_cast<size_t>(rows * column.row_bytes()), h);
    } else if (n > 0) {  // The same bytes, from several buffers.
      Hash64Stream stream(h);
      for (int64_t e = 0; e < n; ++e) {
        stream.Update(column.example_data(e),
                      static_cast<size_t>(column.length(e) * column.row_bytes()));
      }
      h = stream.Digest();
    }
  }
  // A view's key (absent before views, so older fingerprints stand).
  const uint64_t view = dataset.view_key();
  if (view != 0) h = Hash64(&view, sizeof(view), h);
  return h;
}

uint64_t LayoutFingerprint(const Dataset& columns, const LengthsOf& lengths_of) {
  uint64_t h = 0;
  for (const RaggedColumn& column : columns.columns()) {
    std::string inner = "[";
    for (size_t k = 0; k < column.inner_shape().size(); ++k) {
      inner += (k ? ", " : "") + std::to_string(column.inner_shape()[k]);
    }
    const std::string text = column.name() + ":" + std::string(DTypeName(column.dtype())) + ":" +
                             inner + "]:" + (column.is_fixed() ? "fixed" : "ragged");
    h = Hash64(text.data(), text.size(), h);
    if (!column.is_fixed()) {
      const std::vector<int64_t> lengths = lengths_of(column);
      h = Hash64(lengths.data(), lengths.size() * sizeof(int64_t), h);
    }
    const std::span<const int64_t> shapes = column.grid_shapes();
    if (!shapes.empty()) h = Hash64(shapes.data(), shapes.size() * sizeof(int64_t), h);
  }
  const uint64_t view = columns.view_key();
  if (view != 0) h = Hash64(&view, sizeof(view), h);
  return h;
}

uint64_t LayoutFingerprint(const Dataset& dataset) {
  return LayoutFingerprint(dataset, [](const RaggedColumn& c) { return c.Lengths(); });
}

}  // namespace jaxbatch
