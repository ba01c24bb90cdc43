#include "jaxbatch/collate/collator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "jaxbatch/base/arena.h"
#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/base/mapped_read.h"
#include "jaxbatch/base/threads.h"
#include "jaxbatch/collate/fill_rows.h"
#include "jaxbatch/collate/grid_collator.h"
#include "jaxbatch/collate/internal.h"
#include "jaxbatch/plan/aspect_buckets.h"

namespace jaxbatch {
namespace collate_internal {

// Fills `count` elements of `item_size` bytes at `out` with `pattern`.
void FillPattern(uint8_t* out, int64_t count, const uint8_t* pattern, size_t item_size, bool zero) {
  if (count <= 0) return;
  const auto bytes = static_cast<size_t>(count) * item_size;
  if (zero) {
    std::memset(out, 0, bytes);
    return;
  }
  std::memcpy(out, pattern, item_size);
  size_t filled = item_size;
  while (filled < bytes) {  // Doubling copies: O(log n) memcpy calls.
    const size_t chunk = std::min(filled, bytes - filled);
    std::memcpy(out + filled, out, chunk);
    filled += chunk;
  }
}

// Copies `rows` rows of example `e`. A column of zero-sized rows (an inner
// dimension of 0) may have no values buffer at all: memcpy from null, even
// of 0 bytes, is undefined, so nothing is copied then.
void CopyRows(uint8_t* out, const RaggedColumn& column, int64_t e, int64_t rows) {
  const int64_t bytes = rows * column.row_bytes();
  if (bytes > 0) std::memcpy(out, column.example_data(e), static_cast<size_t>(bytes));
}

PadValue EncodePad(const RaggedColumn& column, const CollateOptions& options) {
  Scalar value = options.default_pad_value;
  for (const auto& [name, v] : options.pad_values) {
    if (name == column.name()) value = v;
  }
  PadValue pad;
  try {
    EncodeScalar(value, column.dtype(), pad.bytes, "pad value");
  } catch (const InvalidArgumentError&) {
    // Again with the column's name in the message: built only on failure,
    // as a StrCat costs more than the encoding on every batch's path.
    EncodeScalar(value, column.dtype(), pad.bytes,
                 StrCat("pad value for column '", column.name(), "'"));
    throw;
  }
  pad.zero = std::all_of(pad.bytes, pad.bytes + ItemSize(column.dtype()),
                         [](uint8_t b) { return b == 0; });
  return pad;
}

void FillInParallel(int64_t items, int64_t bytes, const CollateOptions& options,
                    const std::function<void(int64_t, int64_t)>& fill) {
  const int64_t most =
      options.num_threads > 0
          ? options.num_threads
          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxThreads);
  const int64_t threads = std::clamp<int64_t>(
      std::min(most, bytes / std::max<int64_t>(options.min_bytes_per_thread, 1)), 1,
      std::max<int64_t>(items, 1));
  if (threads <= 1) return fill(0, items);
  // floor(items * t / threads) without forming items * t, which may pass
  // int64 for a batch of 2^62 rows.
  auto split = [&](int64_t t) { return items / threads * t + items % threads * t / threads; };
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  // The fillers only write their own rows, so a failed start leaves the
  // started threads to finish; StartThreads joins them and throws.
  // The fillers read the dataset, maybe a mapped file's: each in the
  // caller's scope, so a read past a truncated file's end counts there.
  MappedReadFaults* const reads = MappedReadScope::Current();
  std::vector<std::thread> pool = StartThreads(
      threads,
      [&](int64_t t) {
        try {
          std::optional<MappedReadScope> scope;
          if (reads != nullptr) scope.emplace(reads);
          fill(split(t), split(t + 1));
        } catch (...) {
          errors[static_cast<size_t>(t)] = std::current_exception();
        }
      },
      [] {}, "collate: num_threads");
  for (std::thread& thread : pool) thread.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void CheckNumThreads(const CollateOptions& options) {
  if (options.num_threads < 0) {
    throw InvalidArgumentError(StrCat(
        "collate: num_threads must be >= 1 (or 0 for automatic), found ", options.num_threads));
  }
  CheckThreadCount(options.num_threads, "collate: num_threads");
}

void CheckExample(const Dataset& dataset, int64_t example, int64_t batch) {
  if (example < 0 || example >= dataset.num_examples()) {
    throw OutOfRangeError(StrCat("collate: batch ", batch, " refers to example ", example,
                                 " but the dataset has ", dataset.num_examples(),
                                 " examples; was the plan made for another dataset?"));
  }
}

}  // namespace collate_internal

namespace {

using namespace collate_internal;  // NOLINT: this file's own helpers

// Rows shorter than this are cleared for the whole batch at once.
constexpr int64_t kBulkClearRowBytes = 512;

// The int32 outputs (lengths, segment ids, positions) hold lengths and
// segment counts up to this.
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

void CheckInt32(int64_t value, const char* what, const RaggedColumn& column, int64_t batch) {
  if (value > kMaxInt32) {
    throw InvalidArgumentError(StrCat("collate: batch ", batch, ", column '", column.name(),
                                      "': ", what, " ", value, " does not fit the int32 ",
                                      "lengths, segment ids and positions (at most ", kMaxInt32,
                                      ")"));
  }
}

// An output array's name: the column's with a suffix. Not StrCat, whose
// stream costs ~2,500 instructions a name, on the per-batch path.
// The row length of a packed column: the shape's, or with several features
// that of the feature `column` is or is declared aligned with (its own name
// first). Throws for a column that follows none: its lengths could be any.
int64_t PackedLength(const Dataset& dataset, const BatchLayout& layout, const RaggedColumn& column,
                     int64_t shape_length) {
  if (layout.feature_names.empty()) return shape_length;
  for (size_t f = 0; f < layout.feature_names.size(); ++f) {
    if (column.name() == layout.feature_names[f]) return layout.feature_row_lengths[f];
  }
  std::string names;
  for (size_t f = 0; f < layout.feature_names.size(); ++f) {
    if (dataset.AreAligned(column.name(), layout.feature_names[f])) {
      return layout.feature_row_lengths[f];
    }
    names += StrCat(f ? ", '" : "'", layout.feature_names[f], "'");
  }
  throw InvalidArgumentError(StrCat("collate: Pack packs the features ", names,
                                    ", each to its own row length, but ragged column '",
                                    column.name(),
                                    "' is none of them nor declared aligned with one; name it in "
                                    "row_length, declare it aligned with the feature it follows, "
                                    "or leave it out"));
}

std::string Suffixed(const std::string& name, std::string_view suffix) {
  std::string out;
  out.reserve(name.size() + suffix.size());
  out.append(name).append(suffix);
  return out;
}

std::vector<int64_t> WithInner(std::vector<int64_t> lead, const RaggedColumn& column) {
  lead.insert(lead.end(), column.inner_shape().begin(), column.inner_shape().end());
  return lead;
}

// The H x W a grid column is padded to in a batch of `shape`: the batch's
// own when the batch is planned by it (or a column aligned with it), L x L
// in a 1-D batch whose length column it is tied to (a pair feature beside
// its tokens), else its largest example's in the data, so its shape never
// changes (as a ragged column's that is not planned).
std::pair<int64_t, int64_t> GridExtent(const Dataset& dataset, const BatchShape& shape,
                                       const std::string& length_column,
                                       const RaggedColumn& column) {
  if (shape.width > 0 && dataset.AreAligned(column.name(), length_column)) {
    return {shape.length, shape.width};
  }
  if (shape.width == 0 && dataset.IsTiedSquare(column, length_column)) {
    return {shape.length, shape.length};
  }
  return {column.max_height(), column.max_width()};
}

// The extent of a 1-D ragged column tied to an axis of the grid length column
// of a grid batch (tokens beside the L x L feature the batch is planned by).
std::optional<int64_t> TiedToGridAxis(const Dataset& dataset, const BatchShape& shape,
                                      const std::string& length_column,
                                      const RaggedColumn& column) {
  const RaggedColumn& by = dataset.column(length_column);
  if (shape.width == 0 || !by.is_grid() || by.axes().size() != 2 || column.axes().size() != 1) {
    return std::nullopt;
  }
  if (column.axes()[0] == by.axes()[0]) return shape.length;
  if (column.axes()[0] == by.axes()[1]) return shape.width;
  return std::nullopt;
}

// Rows [r0, r1) of <k>_segment_starts from the lengths FillPackedRows wrote:
// the exclusive running sum, so a row's segments lie back to back from cell
// 0 and its unused slots (length 0) start where its real tokens end. Sums stay within
// the row length, which CheckInt32 has bounded.
void FillSegmentStarts(const int32_t* lengths, int32_t* starts, int64_t segments, int64_t r0,
                       int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    int32_t start = 0;
    for (int64_t s = r * segments; s < (r + 1) * segments; ++s) {
      starts[s] = start;
      start += lengths[s];
    }
  }
}

class BatchCollator {
 public:
  BatchCollator(const Dataset& dataset, const BatchView& view, const BatchLayout& layout,
                const CollateOptions& options)
      : dataset_(dataset),
        layout_(layout),
        view_(view),
        options_(options),
        length_column_(layout.length_column.empty() ? dataset.default_length_column()
                                                    : layout.length_column) {
    (void)dataset_.column(length_column_);  // Throws for an unknown column.
    CheckNumThreads(options_);
    CheckRows();
    // One compare an example (a negative one wraps past the count); the
    // message is built out of line for the first bad one.
    const auto count = static_cast<uint64_t>(dataset_.num_examples());
    for (int64_t e : view_.all_examples()) {
      if (static_cast<uint64_t>(e) >= count) CheckExample(dataset_, e, view_.index);
    }
  }

  std::vector<Array> Run() {
    std::vector<Array> out;
    for (const RaggedColumn& column : dataset_.columns()) {
      if (column.is_fixed()) {
        Fixed(column, out);
      } else if (column.is_grid()) {
        Grid(column, out);
      } else if (layout_.packed) {
        Packed(column, out);
      } else {
        Padded(column, out);
      }
    }
    ExampleIndex(out);
    int64_t bytes = 0;
    for (const Array& a : out) bytes += a.num_bytes();
    FillRows(bytes);
    return out;
  }

 private:
  // The arrays are sized by the shape: a hand-built plan or view with more
  // rows or more examples per row than slots would write past them.
  void CheckRows() const {
    if (view_.stored_rows() > rows()) {
      throw InvalidArgumentError(StrCat("collate: batch ", view_.index, " has ",
                                        view_.stored_rows(), " rows but its shape has ", rows()));
    }
    const int64_t* row_begin = view_.row_begin.data();
    const int64_t stored = view_.stored_rows(), most = slots();
    for (int64_t r = 0; r < stored; ++r) {
      const int64_t n = row_begin[r + 1] - row_begin[r];
      if (n > most) {
        throw InvalidArgumentError(StrCat("collate: batch ", view_.index, ", row ", r, " holds ", n,
                                          " examples but its shape has room for ", slots()));
      }
    }
  }

  Array Alloc(std::string name, DType dtype, std::vector<int64_t> shape) {
    return AllocateArray(std::move(name), dtype, std::move(shape), options_.allocator);
  }

  // Runs every column's filler over all rows: in one thread, or for a large
  // batch split by rows over up to options_.num_threads threads.
  void FillRows(int64_t bytes) {
    FillInParallel(rows(), bytes, options_, [&](int64_t r0, int64_t r1) {
      for (const auto& filler : fillers_) filler(r0, r1);
    });
  }

  int64_t rows() const { return view_.shape.rows; }
  int64_t slots() const { return layout_.packed ? view_.shape.segments : 1; }

  void Padded(const RaggedColumn& column, std::vector<Array>& out) {
    const bool planned = dataset_.AreAligned(column.name(), length_column_);
    if (!planned && !view_.starts.empty()) {
      // A piece's span is of the length column; another column has no piece.
      throw InvalidArgumentError(StrCat(
          "collate: a FixedBuckets(too_long=\"split\") batch cuts examples by the length column '",
          length_column_, "', but ragged column '", column.name(),
          "' has other lengths; drop it from the data or use too_long=\"truncate\" or \"skip\""));
    }
    const std::optional<int64_t> tied =
        TiedToGridAxis(dataset_, view_.shape, length_column_, column);
    const int64_t length = planned ? view_.shape.length : tied.value_or(column.max_length());
    CheckInt32(length, "padded length", column, view_.index);
    const PadValue pad = EncodePad(column, options_);
    const size_t item = ItemSize(column.dtype());
    Array values = Alloc(column.name(), column.dtype(), WithInner({rows(), length}, column));
    Array mask = Alloc(Suffixed(column.name(), kMaskSuffix), DType::kBool, {rows(), length});
    Array lengths = Alloc(Suffixed(column.name(), kLengthsSuffix), DType::kInt32, {rows()});
    // As a packed row's: one segment (id 1) per row, positions from 0.
    const bool segments = options_.padded_segments;
    Array segment_ids, positions;
    if (segments) {
      segment_ids =
          Alloc(Suffixed(column.name(), kSegmentIdsSuffix), DType::kInt32, {rows(), length});
      positions = Alloc(Suffixed(column.name(), kPositionsSuffix), DType::kInt32, {rows(), length});
    }
    const int64_t row_bytes = length * column.row_bytes();
    // Short rows: clear the whole batch once, then copy the examples in, so
    // each row costs one memcpy instead of four calls.
    const bool bulk = pad.zero && row_bytes < kBulkClearRowBytes;
    const bool truncate = (planned || tied) && layout_.allow_truncate;
    const PaddedFill fill{
        .row_begin = view_.row_begin.data(),
        .examples = view_.examples.data(),
        .stored_rows = view_.stored_rows(),
        .batch = view_.index,
        .cells = length,
        .item_row = column.row_bytes(),
        .row_bytes = row_bytes,
        .inner = column.inner_size(),
        .item = item,
        .pad = pad,
        .bulk = bulk,
        .truncate = truncate,
        .values = values.data,
        .mask = mask.data,
        .lengths = reinterpret_cast<int32_t*>(lengths.data),
        .ids = reinterpret_cast<int32_t*>(segment_ids.data),
        .positions = reinterpret_cast<int32_t*>(positions.data),
        .starts = view_.starts.empty() ? nullptr : view_.starts.data(),
        .piece_lengths = view_.starts.empty() ? nullptr : view_.piece_lengths.data(),
        .column = &column};
    // The first padded column writes example_index in its own pass (one
    // example per row), saving a pass of its own; index_data_ is allocated
    // by the time the fillers run.
    const bool takes_index = !index_taken_;
    index_taken_ = true;
    fillers_.push_back([fill, takes_index, this](int64_t r0, int64_t r1) {
      PaddedFill f = fill;
      f.index = takes_index ? index_data_ : nullptr;
      FillPaddedRows(f, r0, r1);
    });
    out.push_back(std::move(values));
    out.push_back(std::move(mask));
    out.push_back(std::move(lengths));
    if (segments) {
      out.push_back(std::move(segment_ids));
      out.push_back(std::move(positions));
    }
  }

  // A grid column (grid_collator.h): [rows, H, W, *inner], its mask and
  // (h, w) per row.
  void Grid(const RaggedColumn& column, std::vector<Array>& out) {
    if (layout_.packed || !view_.starts.empty()) {
      throw InvalidArgumentError(
          StrCat("collate: column '", column.name(), "' is a grid (examples [h, w, ...]), which ",
                 layout_.packed ? "Pack's rows of one variable axis" : "a batch of split pieces",
                 " cannot hold; pad it (PadToMax, AutoBuckets), use PatchPack, or leave it out"));
    }
    const auto [height, width] = GridExtent(dataset_, view_.shape, length_column_, column);
    CheckInt32(height, "padded height", column, view_.index);
    CheckInt32(width, "padded width", column, view_.index);
    Array values = Alloc(column.name(), column.dtype(), WithInner({rows(), height, width}, column));
    Array mask = Alloc(Suffixed(column.name(), kMaskSuffix), DType::kBool, {rows(), height, width});
    Array lengths = Alloc(Suffixed(column.name(), kLengthsSuffix), DType::kInt32, {rows(), 2});
    const bool planned = dataset_.AreAligned(column.name(), length_column_) ||
                         dataset_.IsTiedSquare(column, length_column_);
    const GridFill fill{.row_begin = view_.row_begin.data(),
                        .examples = view_.examples.data(),
                        .stored_rows = view_.stored_rows(),
                        .batch = view_.index,
                        .height = height,
                        .width = width,
                        .cell_bytes = column.row_bytes(),
                        .inner = column.inner_size(),
                        .item = ItemSize(column.dtype()),
                        .pad = EncodePad(column, options_),
                        .truncate = planned && layout_.allow_truncate,
                        .values = values.data,
                        .mask = mask.data,
                        .lengths = reinterpret_cast<int32_t*>(lengths.data),
                        .column = &column};
    const bool takes_index = !index_taken_;
    index_taken_ = true;
    fillers_.push_back([fill, takes_index, this](int64_t r0, int64_t r1) {
      GridFill f = fill;
      f.index = takes_index ? index_data_ : nullptr;
      FillGridRows(f, r0, r1);
    });
    out.push_back(std::move(values));
    out.push_back(std::move(mask));
    out.push_back(std::move(lengths));
  }

  void Packed(const RaggedColumn& column, std::vector<Array>& out) {
    if (layout_.feature_names.empty() && !dataset_.AreAligned(column.name(), length_column_)) {
      throw InvalidArgumentError(StrCat(
          "collate: packed batches need every ragged column aligned with the length column '",
          length_column_, "', but column '", column.name(),
          "' is not; declare it aligned or leave it out"));
    }
    const int64_t length = PackedLength(dataset_, layout_, column, view_.shape.length);
    const int64_t segments = view_.shape.segments;
    CheckInt32(length, "row length", column, view_.index);
    CheckInt32(segments, "segments per row", column, view_.index);
    const PadValue pad = EncodePad(column, options_);
    const size_t item = ItemSize(column.dtype());
    Array values = Alloc(column.name(), column.dtype(), WithInner({rows(), length}, column));
    Array segment_ids =
        Alloc(Suffixed(column.name(), kSegmentIdsSuffix), DType::kInt32, {rows(), length});
    Array positions =
        Alloc(Suffixed(column.name(), kPositionsSuffix), DType::kInt32, {rows(), length});
    Array lengths =
        Alloc(Suffixed(column.name(), kLengthsSuffix), DType::kInt32, {rows(), segments});
    Array starts =
        Alloc(Suffixed(column.name(), kSegmentStartsSuffix), DType::kInt32, {rows(), segments});
    const PackedFill fill{
        .row_begin = view_.row_begin.data(),
        .examples = view_.examples.data(),
        .stored_rows = view_.stored_rows(),
        .batch = view_.index,
        .cells = length,
        .segments = segments,
        .item_row = column.row_bytes(),
        .inner = column.inner_size(),
        .item = item,
        .pad = pad,
        .truncate = layout_.allow_truncate,
        .pieces = view_.pieces.empty() ? nullptr : view_.pieces.data(),
        .starts = view_.starts.empty() ? nullptr : view_.starts.data(),
        .piece_lengths = view_.starts.empty() ? nullptr : view_.piece_lengths.data(),
        .values = values.data,
        .ids = reinterpret_cast<int32_t*>(segment_ids.data),
        .positions = reinterpret_cast<int32_t*>(positions.data),
        .lengths = reinterpret_cast<int32_t*>(lengths.data),
        .column = &column};
    auto* starts_out = reinterpret_cast<int32_t*>(starts.data);
    fillers_.push_back([fill, starts_out](int64_t r0, int64_t r1) {
      FillPackedRows(fill, r0, r1);
      FillSegmentStarts(fill.lengths, starts_out, fill.segments, r0, r1);
    });
    out.push_back(std::move(values));
    out.push_back(std::move(segment_ids));
    out.push_back(std::move(positions));
    out.push_back(std::move(lengths));
    out.push_back(std::move(starts));
  }

  void Fixed(const RaggedColumn& column, std::vector<Array>& out) {
    const PadValue pad = EncodePad(column, options_);
    std::vector<int64_t> lead = {rows()};
    if (layout_.packed) lead.push_back(slots());
    Array values = Alloc(column.name(), column.dtype(), WithInner(lead, column));
    const int64_t bytes = column.row_bytes();
    uint8_t* values_out = values.data;
    fillers_.push_back([=, this, &column](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const std::span<const int64_t> examples = view_.row_examples(r);
        uint8_t* row = values_out + r * slots() * bytes;
        const auto n = static_cast<int64_t>(examples.size());
        for (int64_t s = 0; s < n; ++s) {
          CopyRows(row + s * bytes, column, examples[static_cast<size_t>(s)], 1);
        }
        FillPattern(row + n * bytes, (slots() - n) * column.inner_size(), pad.bytes,
                    ItemSize(column.dtype()), pad.zero);
      }
    });
    out.push_back(std::move(values));
  }

  // Allocates example_index (after the columns, so a shape too large for
  // them throws first); a padded batch's first ragged column fills it.
  void ExampleIndex(std::vector<Array>& out) {
    std::vector<int64_t> shape = {rows()};
    if (layout_.packed) shape.push_back(slots());
    Array index = Alloc(std::string(kExampleIndexName), DType::kInt64, shape);
    auto* index_out = reinterpret_cast<int64_t*>(index.data);
    index_data_ = index_out;
    out.push_back(std::move(index));
    if (layout_.split) ExamplePiece(shape, out);
    if (index_taken_) return;
    fillers_.push_back([=, this](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const std::span<const int64_t> examples = view_.row_examples(r);
        int64_t* row = index_out + r * slots();
        std::copy(examples.begin(), examples.end(), row);
        std::fill(row + examples.size(), row + slots(), -1);
      }
    });
  }

  // Which piece of its example each segment is (-1 for padding).
  void ExamplePiece(const std::vector<int64_t>& shape, std::vector<Array>& out) {
    Array piece = Alloc(std::string(kExamplePieceName), DType::kInt64, shape);
    auto* piece_out = reinterpret_cast<int64_t*>(piece.data);
    out.push_back(std::move(piece));
    fillers_.push_back([=, this](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t* row = piece_out + r * slots();
        int64_t n = 0;
        if (r < view_.stored_rows()) {
          for (int64_t q = view_.row_begin[r]; q < view_.row_begin[r + 1]; ++q) {
            row[n++] = view_.piece(q);
          }
        }
        std::fill(row + n, row + slots(), -1);
      }
    });
  }

  const Dataset& dataset_;
  const BatchLayout& layout_;
  BatchView view_;
  const CollateOptions& options_;
  std::string length_column_;
  // Whether a padded column's filler writes example_index, and where.
  bool index_taken_ = false;
  int64_t* index_data_ = nullptr;
  // Per column: fills rows [r0, r1) of the arrays it allocated.
  std::vector<std::function<void(int64_t, int64_t)>> fillers_;
};

}  // namespace

int64_t Array::num_bytes() const {
  int64_t n = static_cast<int64_t>(ItemSize(dtype));
  for (int64_t d : shape) n = SaturatingMul(n, d);
  return n;
}

Array AllocateArray(std::string name, DType dtype, std::vector<int64_t> shape,
                    const Allocator& allocator) {
  // Every dimension counts (a zero one included), so that a product that
  // wraps cannot hide behind an empty axis: the fillers index with them.
  int64_t bound = static_cast<int64_t>(ItemSize(dtype));
  for (int64_t d : shape) {
    const std::optional<int64_t> next =
        d < 0 ? std::nullopt : CheckedMul(bound, std::max<int64_t>(d, 1));
    if (!next) {
      std::string dims;
      for (int64_t e : shape) dims += StrCat(dims.empty() ? "" : ", ", e);
      throw InvalidArgumentError(StrCat("collate: array '", name, "' of shape [", dims,
                                        "] and dtype ", DTypeName(dtype), " needs more than ",
                                        kMaxSize, " bytes"));
    }
    bound = *next;
  }
  Array array;
  array.name = std::move(name);
  array.dtype = dtype;
  array.shape = std::move(shape);
  const auto bytes = static_cast<size_t>(std::max<int64_t>(array.num_bytes(), 1));
  array.owner =
      allocator ? allocator(bytes, &array.data) : SharedArena().Acquire(bytes, &array.data);
  return array;
}

int64_t CollatedBytes(const Dataset& dataset, const BatchShape& shape, const BatchLayout& layout,
                      bool padded_segments) {
  if (layout.graph) return GraphCollatedBytes(dataset, shape);
  const std::string& length_column =
      layout.length_column.empty() ? dataset.default_length_column() : layout.length_column;
  const int64_t rows = shape.rows;
  const int64_t slots = layout.packed ? shape.segments : 1;
  // Saturating: a batch past int64 bytes is simply more than any limit.
  auto array = [](std::initializer_list<int64_t> factors) {
    int64_t bytes = 1;
    for (int64_t f : factors) bytes = SaturatingMul(bytes, f);
    return std::max<int64_t>(bytes, 1);
  };
  auto add = [](int64_t& total, int64_t bytes) { total = SaturatingAdd(total, bytes); };
  int64_t total = array({rows, slots, 8});                // example_index
  if (layout.split) add(total, array({rows, slots, 8}));  // example_piece
  for (const RaggedColumn& column : dataset.columns()) {
    if (column.is_fixed()) {
      add(total, array({rows, slots, column.row_bytes()}));
    } else if (column.is_grid()) {
      const auto [height, width] = GridExtent(dataset, shape, length_column, column);
      add(total, GridCollatedBytes(column, rows, height, width));
    } else if (layout.packed) {
      const int64_t length = PackedLength(dataset, layout, column, shape.length);
      add(total, array({rows, length, column.row_bytes()}));
      add(total, array({rows, length, 4}));
      add(total, array({rows, length, 4}));
      add(total, array({rows, slots, 4}));
      add(total, array({rows, slots, 4}));  // segment starts
    } else {
      const int64_t length =
          dataset.AreAligned(column.name(), length_column)
              ? shape.length
              : TiedToGridAxis(dataset, shape, length_column, column).value_or(column.max_length());
      add(total, array({rows, length, column.row_bytes()}));
      add(total, array({rows, length}));
      add(total, array({rows, 4}));
      if (padded_segments) {
        add(total, array({rows, length, 4}));  // segment ids
        add(total, array({rows, length, 4}));  // positions
      }
    }
  }
  return total;
}

void CheckPadValues(const Dataset& dataset, const CollateOptions& options, std::string_view who) {
  for (const auto& [name, value] : options.pad_values) {
    if (dataset.has_column(name)) continue;
    std::string names;
    for (const RaggedColumn& column : dataset.columns()) {
      names += StrCat(names.empty() ? "'" : ", '", column.name(), "'");
    }
    throw InvalidArgumentError(StrCat(who, ": pad_value names column '", name,
                                      "', which the data does not have; columns are ", names));
  }
}

namespace {

// An AspectBuckets plan's examples must be at their resize targets: jaxbatch
// never resizes, and a smaller image would otherwise be padded unnoticed.
void CheckResized(const Dataset& dataset, const BatchPlan& plan, int64_t batch_index) {
  const std::string& name =
      plan.length_column.empty() ? dataset.default_length_column() : plan.length_column;
  const RaggedColumn& column = dataset.column(name);
  for (int64_t e : plan.batch(batch_index).all_examples()) {
    if (e < 0 || e >= dataset.num_examples()) continue;  // collation names it
    CheckResizedTo(plan.resize_to, e, column.height(e), column.width(e), name);
  }
}

}  // namespace

std::vector<Array> Collate(const Dataset& dataset, const BatchPlan& plan, int64_t batch_index,
                           const CollateOptions& options) {
  CheckPadValues(dataset, options, "collate");
  if (!plan.resize_to.empty()) CheckResized(dataset, plan, batch_index);
  const BatchLayout layout{.packed = plan.packed,
                           .allow_truncate = plan.allow_truncate,
                           .split = plan.split,
                           .length_column = plan.length_column,
                           .graph = plan.graph,
                           .feature_names = plan.feature_names,
                           .feature_row_lengths = plan.feature_row_lengths};
  return CollateView(dataset, plan.batch(batch_index), layout, options);
}

std::vector<Array> CollateView(const Dataset& dataset, const BatchView& view,
                               const BatchLayout& layout, const CollateOptions& options) {
  // The values may be a memory-mapped file's, truncated while they are read.
  return GuardMappedReads("collate", [&] {
    if (layout.graph) return CollateGraphs(dataset, view, options);
    return BatchCollator(dataset, view, layout, options).Run();
  });
}

}  // namespace jaxbatch
