#include "jaxbatch/data/ragged_column.h"

#include <algorithm>
#include <cstring>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

std::string ShapeString(std::span<const int64_t> shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) out += ",";
    if (i + 1 < shape.size()) out += " ";
  }
  return out + ")";
}

// Owned storage for FromPieces: values and offsets in one allocation's keepalive.
struct OwnedStorage {
  std::vector<uint8_t> values;
  std::vector<int64_t> offsets;
};

}  // namespace

void RaggedColumn::InitShape(std::vector<int64_t> inner_shape) {
  for (size_t d = 0; d < inner_shape.size(); ++d) {
    if (inner_shape[d] < 0) {
      throw InvalidArgumentError(StrCat("column '", name_, "': inner dimension ", d,
                                        " must be >= 0, found ", inner_shape[d]));
    }
  }
  inner_shape_ = std::move(inner_shape);
  inner_size_ = 1;
  for (int64_t d : inner_shape_) inner_size_ *= d;
  row_bytes_ = inner_size_ * static_cast<int64_t>(ItemSize(dtype_));
}

void RaggedColumn::SetOffsets(const int64_t* offsets, int64_t num_examples, int64_t num_value_rows,
                              int64_t values_bytes) {
  if (num_examples < 0 || (num_examples > 0 && offsets == nullptr)) {
    throw InvalidArgumentError(
        StrCat("column '", name_, "': expected num_examples + 1 offsets, found none"));
  }
  if (num_examples > 0 && offsets[0] < 0) {
    throw InvalidArgumentError(
        StrCat("column '", name_, "', example 0: expected offsets[0] >= 0, found ", offsets[0]));
  }
  int64_t max_length = 0;
  for (int64_t i = 0; i < num_examples; ++i) {
    if (offsets[i + 1] < offsets[i]) {
      throw InvalidArgumentError(
          StrCat("column '", name_, "', example ", i, ": offsets must not decrease, found offsets[",
                 i, "]=", offsets[i], " > offsets[", i + 1, "]=", offsets[i + 1]));
    }
    if (offsets[i + 1] > num_value_rows) {
      const std::string held =
          values_bytes < 0 ? StrCat(num_value_rows, " rows")
                           : StrCat(num_value_rows, " rows (a values buffer of ", values_bytes,
                                    " bytes, rows of ", row_bytes_, " bytes)");
      throw InvalidArgumentError(StrCat("column '", name_, "', example ", i,
                                        ": offsets run past the values: offsets[", i + 1,
                                        "]=", offsets[i + 1], " but values hold ", held));
    }
    max_length = std::max(max_length, offsets[i + 1] - offsets[i]);
  }
  num_examples_ = num_examples;
  max_length_ = max_length;
  offsets_ = offsets;
}

RaggedColumn RaggedColumn::Ragged(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                                  const void* values, int64_t num_value_rows,
                                  const int64_t* offsets, int64_t num_examples, Keepalive owner) {
  RaggedColumn col;
  col.name_ = std::move(name);
  col.dtype_ = dtype;
  col.InitShape(std::move(inner_shape));
  col.SetOffsets(offsets, num_examples, num_value_rows, /*values_bytes=*/-1);
  col.values_ = static_cast<const uint8_t*>(values);
  col.owner_ = std::move(owner);
  return col;
}

RaggedColumn RaggedColumn::Ragged(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                                  std::span<const uint8_t> values, std::span<const int64_t> offsets,
                                  Keepalive owner) {
  RaggedColumn col;
  col.name_ = std::move(name);
  col.dtype_ = dtype;
  col.InitShape(std::move(inner_shape));
  // No offsets at all is num_examples -1, which SetOffsets refuses.
  const auto bytes = static_cast<int64_t>(values.size());
  // Rows of zero bytes (an inner dimension of 0) never run past the values.
  const int64_t rows = col.row_bytes_ > 0 ? bytes / col.row_bytes_ : kMaxSize;
  col.SetOffsets(offsets.data(), static_cast<int64_t>(offsets.size()) - 1, rows, bytes);
  col.values_ = values.data();
  col.owner_ = std::move(owner);
  return col;
}

RaggedColumn RaggedColumn::Fixed(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                                 const void* values, int64_t num_examples, Keepalive owner) {
  RaggedColumn col;
  col.name_ = std::move(name);
  col.dtype_ = dtype;
  col.InitShape(std::move(inner_shape));
  if (num_examples < 0) {
    throw InvalidArgumentError(
        StrCat("column '", col.name_, "': num_examples must be >= 0, found ", num_examples));
  }
  col.fixed_ = true;
  col.num_examples_ = num_examples;
  col.max_length_ = num_examples > 0 ? 1 : 0;
  col.values_ = static_cast<const uint8_t*>(values);
  col.owner_ = std::move(owner);
  return col;
}

RaggedColumn RaggedColumn::Fixed(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                                 std::span<const uint8_t> values, int64_t num_examples,
                                 Keepalive owner) {
  RaggedColumn col = Fixed(std::move(name), dtype, std::move(inner_shape), values.data(),
                           num_examples, std::move(owner));
  const auto bytes = static_cast<int64_t>(values.size());
  const int64_t held = col.row_bytes_ > 0 ? bytes / col.row_bytes_ : kMaxSize;
  if (num_examples > held) {
    throw InvalidArgumentError(
        StrCat("column '", col.name_, "': expected ", num_examples, " examples of ", col.row_bytes_,
               " bytes, but the values buffer holds ", bytes, " bytes (", held, " examples)"));
  }
  return col;
}

RaggedColumn RaggedColumn::FromPieces(std::string name, DType dtype,
                                      std::vector<int64_t> inner_shape, bool fixed,
                                      std::span<const Piece> pieces) {
  const size_t rank = inner_shape.size() + (fixed ? 0 : 1);
  auto storage = std::make_shared<OwnedStorage>();
  storage->offsets.reserve(pieces.size() + 1);
  storage->offsets.push_back(0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    if (piece.dtype != dtype) {
      throw InvalidArgumentError(StrCat("column '", name, "', example ", i, ": expected dtype ",
                                        DTypeName(dtype), ", found ", DTypeName(piece.dtype)));
    }
    const std::span<const int64_t> inner =
        std::span<const int64_t>(piece.shape).subspan(fixed || piece.shape.empty() ? 0 : 1);
    if (piece.shape.size() != rank ||
        !std::equal(inner.begin(), inner.end(), inner_shape.begin(), inner_shape.end())) {
      // "(n, 3)": the variable leading axis shown as n.
      std::string want = fixed ? ShapeString(inner_shape) : "(n";
      if (!fixed) {
        for (int64_t d : inner_shape) want += ", " + std::to_string(d);
        want += inner_shape.empty() ? ",)" : ")";
      }
      throw InvalidArgumentError(StrCat(
          "column '", name, "', example ", i, ": expected an array of rank ", rank, " and shape ",
          want, ", found rank ", piece.shape.size(), " and shape ", ShapeString(piece.shape)));
    }
    const int64_t rows = fixed ? 1 : piece.shape[0];
    if (rows < 0) {
      throw InvalidArgumentError(StrCat("column '", name, "', example ", i,
                                        ": expected a leading dimension >= 0, found ", rows));
    }
    storage->offsets.push_back(storage->offsets.back() + rows);
  }
  RaggedColumn col;
  col.name_ = std::move(name);
  col.dtype_ = dtype;
  col.InitShape(std::move(inner_shape));
  storage->values.resize(static_cast<size_t>(storage->offsets.back() * col.row_bytes_));
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t bytes = (storage->offsets[i + 1] - storage->offsets[i]) * col.row_bytes_;
    if (bytes > 0) {
      std::memcpy(storage->values.data() + storage->offsets[i] * col.row_bytes_, pieces[i].data,
                  static_cast<size_t>(bytes));
    }
  }
  const auto num_examples = static_cast<int64_t>(pieces.size());
  const void* values = storage->values.data();
  const int64_t* offsets = storage->offsets.data();
  const int64_t rows = storage->offsets.back();
  std::vector<int64_t> inner = col.inner_shape_;
  if (fixed) return Fixed(col.name_, dtype, std::move(inner), values, num_examples, storage);
  return Ragged(col.name_, dtype, std::move(inner), values, rows, offsets, num_examples, storage);
}

namespace {

// A gathered column's index: where each example starts and its rows.
struct GatherIndex {
  std::vector<const uint8_t*> starts;
  std::vector<int64_t> lengths;
};

}  // namespace

RaggedColumn RaggedColumn::Gathered(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                                    bool fixed, std::span<const Chunk> chunks,
                                    std::optional<std::span<const int64_t>> order,
                                    Keepalive owner) {
  // Each chunk is checked as a one-buffer column is; `flat` is every
  // example of the chunks, in chunk order.
  auto flat = std::make_shared<GatherIndex>();
  int64_t first = 0;
  for (const Chunk& chunk : chunks) {
    RaggedColumn part;
    try {
      part = fixed ? Fixed(name, dtype, inner_shape, chunk.values, chunk.num_examples, nullptr)
                   : Ragged(name, dtype, inner_shape, chunk.values, chunk.offsets, nullptr);
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError(
          StrCat(e.what(), " (in the chunk whose first example is ", first, " of the column)"));
    }
    if (!fixed && part.num_examples() != chunk.num_examples) {
      throw InvalidArgumentError(StrCat("column '", name, "', chunk at example ", first,
                                        ": expected ", chunk.num_examples + 1, " offsets, found ",
                                        chunk.offsets.size()));
    }
    for (int64_t i = 0; i < part.num_examples(); ++i) {
      flat->starts.push_back(part.example_data(i));
      if (!fixed) flat->lengths.push_back(part.length(i));
    }
    first += part.num_examples();
  }
  std::shared_ptr<GatherIndex> index = flat;
  if (order) {  // An empty order is a column of no examples, not "as they are".
    index = std::make_shared<GatherIndex>();
    index->starts.reserve(order->size());
    if (!fixed) index->lengths.reserve(order->size());
    for (size_t i = 0; i < order->size(); ++i) {
      const int64_t e = (*order)[i];
      if (e < 0 || e >= first) {
        throw InvalidArgumentError(StrCat("column '", name, "', example ", i,
                                          ": its index in the data is ", e,
                                          ", expected one in [0, ", first, ")"));
      }
      index->starts.push_back(flat->starts[e]);
      if (!fixed) index->lengths.push_back(flat->lengths[e]);
    }
  }
  RaggedColumn col;
  col.name_ = std::move(name);
  col.dtype_ = dtype;
  col.InitShape(std::move(inner_shape));
  col.fixed_ = fixed;
  col.num_examples_ = static_cast<int64_t>(index->starts.size());
  col.max_length_ = fixed ? (col.num_examples_ > 0 ? 1 : 0) : 0;
  for (int64_t length : index->lengths) col.max_length_ = std::max(col.max_length_, length);
  // A gathered column with no examples still reads as gathered (a non-null index).
  static const uint8_t* const kNoStarts[1] = {nullptr};
  static const int64_t kNoLengths[1] = {0};
  col.starts_ = index->starts.empty() ? kNoStarts : index->starts.data();
  col.lengths_ = index->lengths.empty() ? kNoLengths : index->lengths.data();
  col.gather_ = std::move(index);
  col.owner_ = std::move(owner);
  return col;
}

RaggedColumn RaggedColumn::Grid(RaggedColumn cells, std::vector<int64_t> shapes) {
  const std::string& name = cells.name_;
  if (cells.fixed_) {
    throw InvalidArgumentError(
        StrCat("column '", name, "': a grid column needs ragged cells, found a fixed column"));
  }
  const int64_t n = cells.num_examples_;
  if (static_cast<int64_t>(shapes.size()) != 2 * n) {
    throw InvalidArgumentError(StrCat("column '", name, "': expected 2 sizes (h, w) for each of ",
                                      n, " examples, found ", shapes.size(), " sizes"));
  }
  cells.max_height_ = cells.max_width_ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t h = shapes[2 * i];
    const int64_t w = shapes[2 * i + 1];
    if (h < 0 || w < 0) {
      throw InvalidArgumentError(StrCat("column '", name, "', example ", i,
                                        ": expected sizes (h, w) >= 0, found (", h, ", ", w, ")"));
    }
    cells.max_height_ = std::max(cells.max_height_, h);
    cells.max_width_ = std::max(cells.max_width_, w);
    const int64_t cells_i = cells.length(i);
    if (CheckedMul(h, w) != cells_i) {
      throw InvalidArgumentError(StrCat("column '", name, "', example ", i, ": its shape (", h,
                                        ", ", w, ") has ", h, " x ", w, " cells but its offsets ",
                                        "hold ", cells_i));
    }
  }
  cells.grid_ = std::make_shared<const std::vector<int64_t>>(std::move(shapes));
  if (cells.axes_.size() == 1) cells.axes_.clear();  // a 1-D name no longer fits
  return cells;
}

RaggedColumn RaggedColumn::WithAxes(RaggedColumn column, std::vector<std::string> axes) {
  if (axes.empty()) {
    column.axes_.clear();
    return column;
  }
  const size_t want = column.is_grid() ? 2 : 1;
  if (column.fixed_ || axes.size() != want) {
    throw InvalidArgumentError(StrCat("column '", column.name_, "': expected ",
                                      column.fixed_ ? 0 : want, " axis names for a ",
                                      column.fixed_      ? "fixed"
                                      : column.is_grid() ? "grid"
                                                         : "ragged",
                                      " column, found ", axes.size()));
  }
  for (const std::string& axis : axes) {
    if (axis.empty()) {
      throw InvalidArgumentError(StrCat("column '", column.name_, "': an axis name is empty"));
    }
  }
  column.axes_ = std::move(axes);
  return column;
}

std::span<const int64_t> RaggedColumn::grid_shapes() const {
  if (grid_ == nullptr) return {};
  return {grid_->data(), grid_->size()};
}

std::vector<int64_t> RaggedColumn::Heights() const {
  if (!is_grid()) return Lengths();
  std::vector<int64_t> out(static_cast<size_t>(num_examples_));
  for (int64_t i = 0; i < num_examples_; ++i) out[i] = height(i);
  return out;
}

std::vector<int64_t> RaggedColumn::Widths() const {
  std::vector<int64_t> out(static_cast<size_t>(num_examples_), 1);
  if (!is_grid()) return out;
  for (int64_t i = 0; i < num_examples_; ++i) out[i] = width(i);
  return out;
}

std::vector<int64_t> RaggedColumn::Lengths() const {
  std::vector<int64_t> lengths(static_cast<size_t>(num_examples_));
  for (int64_t i = 0; i < num_examples_; ++i) lengths[i] = length(i);
  return lengths;
}

std::vector<uint8_t> RaggedColumn::CopyValues() const {
  int64_t rows = 0;
  for (int64_t i = 0; i < num_examples_; ++i) rows += length(i);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes_));
  if (contiguous()) {  // One block: example 0's first byte to the last's end.
    if (!out.empty()) std::memcpy(out.data(), example_data(0), out.size());
    return out;
  }
  size_t at = 0;
  for (int64_t i = 0; i < num_examples_; ++i) {
    const auto bytes = static_cast<size_t>(length(i) * row_bytes_);
    if (bytes != 0) std::memcpy(out.data() + at, example_data(i), bytes);
    at += bytes;
  }
  return out;
}

}  // namespace jaxbatch
