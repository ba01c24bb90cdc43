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

namespace {}  // namespace

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
  col.SetGathered(std::move(index));
  col.owner_ = std::move(owner);
  return col;
}

namespace {

// Every owner a concatenated column reads through, kept alive together.
struct Owners {
  std::vector<Keepalive> owners;
};

}  // namespace

// A gathered column's fields from `index` (its starts and, unless fixed,
// lengths): the examples it reads, wherever they lie.
void RaggedColumn::SetGathered(std::shared_ptr<GatherIndex> index) {
  num_examples_ = static_cast<int64_t>(index->starts.size());
  max_length_ = fixed_ ? (num_examples_ > 0 ? 1 : 0) : 0;
  for (int64_t length : index->lengths) max_length_ = std::max(max_length_, length);
  // A gathered column with no examples still reads as gathered (a non-null index).
  static const uint8_t* const kNoStarts[1] = {nullptr};
  static const int64_t kNoLengths[1] = {0};
  values_ = nullptr;
  offsets_ = nullptr;
  starts_ = index->starts.empty() ? kNoStarts : index->starts.data();
  lengths_ = index->lengths.empty() ? kNoLengths : index->lengths.data();
  gather_ = std::move(index);
}

void RaggedColumn::SetGridShapes(std::vector<int64_t> shapes) {
  max_height_ = max_width_ = 0;
  for (size_t k = 0; k + 1 < shapes.size(); k += 2) {
    max_height_ = std::max(max_height_, shapes[k]);
    max_width_ = std::max(max_width_, shapes[k + 1]);
  }
  grid_ = std::make_shared<const std::vector<int64_t>>(std::move(shapes));
}

RaggedColumn RaggedColumn::Select(const RaggedColumn& base, std::span<const int64_t> index) {
  auto gathered = std::make_shared<GatherIndex>();
  gathered->starts.reserve(index.size());
  if (!base.fixed_) gathered->lengths.reserve(index.size());
  std::vector<int64_t> shapes;
  if (base.is_grid()) shapes.reserve(2 * index.size());
  const Reader read = base.reader();
  for (size_t i = 0; i < index.size(); ++i) {
    const int64_t e = index[i];
    if (e < 0 || e >= base.num_examples_) {
      throw OutOfRangeError(StrCat("column '", base.name_, "': position ", i, " selects example ",
                                   e, ", expected one in [0, ", base.num_examples_, ")"));
    }
    gathered->starts.push_back(read.data(e));
    if (!base.fixed_) gathered->lengths.push_back(read.length(e));
    if (base.is_grid()) {
      shapes.push_back(base.height(e));
      shapes.push_back(base.width(e));
    }
  }
  RaggedColumn col = base;  // name, dtype, shape, axes and the owner of the values
  col.SetGathered(std::move(gathered));
  if (base.is_grid()) col.SetGridShapes(std::move(shapes));
  return col;
}

RaggedColumn RaggedColumn::Slice(const RaggedColumn& base, int64_t begin, int64_t end) {
  if (begin < 0 || end < begin || end > base.num_examples_) {
    throw OutOfRangeError(
        StrCat("column '", base.name_, "': slice [", begin, ", ", end,
               ") out of range; expected 0 <= begin <= end <= ", base.num_examples_));
  }
  RaggedColumn col = base;
  if (base.starts_ != nullptr) {  // Gathered: the same index, from `begin` (held by gather_).
    col.starts_ = base.starts_ + begin;
    if (!base.fixed_) col.lengths_ = base.lengths_ + begin;
  } else if (base.fixed_) {
    col.values_ = base.values_ + begin * base.row_bytes_;
  } else {
    col.offsets_ = base.offsets_ + begin;
  }
  col.num_examples_ = end - begin;
  col.max_length_ = 0;
  for (int64_t i = 0; i < col.num_examples_; ++i) {
    col.max_length_ = std::max(col.max_length_, col.length(i));
  }
  if (base.is_grid()) {
    const std::span<const int64_t> all = base.grid_shapes();
    col.SetGridShapes(std::vector<int64_t>(all.begin() + 2 * begin, all.begin() + 2 * end));
  }
  return col;
}

RaggedColumn RaggedColumn::Concat(std::span<const RaggedColumn* const> parts) {
  if (parts.empty())
    throw InvalidArgumentError("RaggedColumn::Concat: expected a part, found none");
  const RaggedColumn& first = *parts[0];
  auto gathered = std::make_shared<GatherIndex>();
  auto owners = std::make_shared<Owners>();
  std::vector<int64_t> shapes;
  for (size_t p = 0; p < parts.size(); ++p) {
    const RaggedColumn& part = *parts[p];
    if (part.name_ != first.name_ || part.dtype_ != first.dtype_ ||
        part.inner_shape_ != first.inner_shape_ || part.fixed_ != first.fixed_ ||
        part.is_grid() != first.is_grid()) {
      throw InvalidArgumentError(
          StrCat("column '", first.name_, "': part ", p,
                 " differs from part 0 in name, dtype, inner shape or kind"));
    }
    const Reader read = part.reader();
    for (int64_t e = 0; e < part.num_examples_; ++e) {
      gathered->starts.push_back(read.data(e));
      if (!part.fixed_) gathered->lengths.push_back(read.length(e));
    }
    const std::span<const int64_t> grid = part.grid_shapes();
    shapes.insert(shapes.end(), grid.begin(), grid.end());
    owners->owners.push_back(part.owner_);
  }
  RaggedColumn col = first;
  col.SetGathered(std::move(gathered));
  if (first.is_grid()) col.SetGridShapes(std::move(shapes));
  col.owner_ = std::move(owners);
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
