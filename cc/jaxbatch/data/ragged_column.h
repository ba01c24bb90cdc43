// RaggedColumn: one named feature of a dataset.
//
// A ragged column stores every example's rows back to back in one values
// buffer, and int64 offsets mark where each example starts: example i is
// rows [offsets[i], offsets[i+1]) of values, each row of `inner_shape`. That
// is the layout of an Arrow list array, so Arrow and numpy data come in
// without a copy: the column only points at the memory and holds `owner`
// (a numpy array, an Arrow buffer) alive.
//
// A fixed column has one element of `inner_shape` per example and no
// offsets (a stacked numpy array of shape [num_examples, *inner_shape]).
//
// A gathered column (Gathered) points at several such buffers, the chunks
// of an Arrow chunked array (the record batches of a memory-mapped file),
// and may take its examples in another order (a Hugging Face dataset's
// indices mapping after select, shuffle or filter): it keeps, per example,
// where its rows start and how many there are (16 bytes an example), and
// copies no value.
//
// A grid column (Grid) has two variable axes: example i is an array
// [h_i, w_i, *inner_shape] (an image, an L x L pair feature). Its values are
// laid out as a ragged column's whose rows are the h_i * w_i cells in
// row-major order, so offsets count cells and row_bytes is one cell; the
// column also keeps each example's (h_i, w_i).
//
// A ragged or grid column may name its variable axes ("L" for tokens,
// ("L", "L") for their pair feature, ("h", "w") for an image); a name that
// appears twice in a dataset is a tie, which the Dataset checks.
//
// Example:
//   std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
//   std::vector<int64_t> offsets = {0, 3, 3, 5};  // lengths 3, 0, 2
//   RaggedColumn col = RaggedColumn::Ragged("tokens", DType::kInt32, {},
//       tokens.data(), 5, offsets.data(), 3, /*owner=*/nullptr);
#ifndef JAXBATCH_DATA_RAGGED_COLUMN_H_
#define JAXBATCH_DATA_RAGGED_COLUMN_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jaxbatch/data/dtype.h"

namespace jaxbatch {

// Keeps externally owned memory alive for as long as a column uses it.
using Keepalive = std::shared_ptr<const void>;

class RaggedColumn {
 public:
  // One example's array, for FromPieces: `shape` includes the leading
  // (variable) axis for a ragged column and not for a fixed one.
  struct Piece {
    const void* data;
    DType dtype;
    std::vector<int64_t> shape;
  };

  // Points at `values` (num_value_rows rows of inner_shape) and
  // `offsets` (num_examples + 1 entries). Throws InvalidArgumentError
  // naming the column and example when offsets decrease, are negative or
  // run past the values.
  static RaggedColumn Ragged(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                             const void* values, int64_t num_value_rows, const int64_t* offsets,
                             int64_t num_examples, Keepalive owner);

  // Points at `values`: num_examples elements of inner_shape.
  static RaggedColumn Fixed(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                            const void* values, int64_t num_examples, Keepalive owner);

  // The same two over a values buffer of known size (an Arrow buffer, a
  // numpy array): the rows it holds are values.size() / row_bytes, whatever
  // a source declares, so data that claims more values than its buffer
  // has (a crafted Arrow file) is refused instead of read past the buffer's
  // end. Ragged takes num_examples + 1 offsets and throws
  // InvalidArgumentError naming the column, the example, the offset and
  // the buffer's size; Fixed throws when the buffer holds fewer than
  // num_examples elements.
  //
  // Example (an Arrow list<int32> column's buffers):
  //   RaggedColumn::Ragged("tokens", DType::kInt32, {}, {values, values_bytes},
  //                        {offsets, num_examples + 1}, owner);
  static RaggedColumn Ragged(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                             std::span<const uint8_t> values, std::span<const int64_t> offsets,
                             Keepalive owner);
  static RaggedColumn Fixed(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                            std::span<const uint8_t> values, int64_t num_examples, Keepalive owner);

  // One chunk of a gathered column: the bytes of its values and, for a
  // ragged column, its num_examples + 1 offsets into them (rows from the
  // chunk's first value); a fixed chunk has no offsets and num_examples
  // elements.
  struct Chunk {
    std::span<const uint8_t> values;
    std::span<const int64_t> offsets;
    int64_t num_examples = 0;
  };

  // A column over `chunks`, read in place: each chunk is checked as Ragged
  // or Fixed check one buffer (the error names the chunk's first example
  // in the whole column). Example i is example order[i] of the chunks laid
  // end to end (an empty order: no examples), or example i when there is
  // no order; an order entry outside [0, examples in the chunks) throws
  // InvalidArgumentError naming it.
  //
  // Example (two record batches of an Arrow list<int32> column, reversed):
  //   std::vector<RaggedColumn::Chunk> chunks = {{values0, offsets0, 2}, {values1, offsets1, 1}};
  //   std::vector<int64_t> order = {2, 1, 0};
  //   RaggedColumn col = RaggedColumn::Gathered("tokens", DType::kInt32, {}, false, chunks,
  //                                             order, owner);
  static RaggedColumn Gathered(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                               bool fixed, std::span<const Chunk> chunks,
                               std::optional<std::span<const int64_t>> order, Keepalive owner);

  // Views of columns, read in place (data/view.h builds datasets of them).
  // Select: examples index[0], index[1], ... of `base` (repeats allowed), as
  // a gathered column (16 bytes an example) keeping `base`'s memory alive.
  // Throws OutOfRangeError naming the column and the position of an index
  // outside [0, base.num_examples()).
  static RaggedColumn Select(const RaggedColumn& base, std::span<const int64_t> index);
  // Examples [begin, end) of `base`: O(1) for a column of one buffer or a
  // gathered one (a grid's shapes are copied). Throws OutOfRangeError for a
  // range outside [0, base.num_examples()].
  static RaggedColumn Slice(const RaggedColumn& base, int64_t begin, int64_t end);
  // `parts`' examples one after the other, as a gathered column. The parts
  // must agree in name, dtype, inner shape and kind (InvalidArgumentError
  // naming the first part that does not); axes are the first part's.
  static RaggedColumn Concat(std::span<const RaggedColumn* const> parts);

  // Copies per-example arrays into one owned buffer (one copy). Every piece
  // must have `dtype` and rank/inner shape matching `inner_shape`; the error
  // names the first example that does not.
  static RaggedColumn FromPieces(std::string name, DType dtype, std::vector<int64_t> inner_shape,
                                 bool fixed, std::span<const Piece> pieces);

  // `cells` (a ragged column of any kind whose rows are cells) as a grid
  // column: `shapes` holds h_0, w_0, h_1, w_1, ... (two per example).
  // Throws InvalidArgumentError naming the column, the example and the sizes
  // when a shape is negative or h_i * w_i is not example i's cell count, or
  // when `cells` is fixed.
  //
  // Example (two images of 2 x 3 and 1 x 1 RGB pixels):
  //   std::vector<int64_t> offsets = {0, 6, 7};
  //   RaggedColumn cells = RaggedColumn::Ragged("image", DType::kUint8, {3}, pixels, 7,
  //                                             offsets.data(), 2, owner);
  //   RaggedColumn image = RaggedColumn::Grid(std::move(cells), {2, 3, 1, 1});
  static RaggedColumn Grid(RaggedColumn cells, std::vector<int64_t> shapes);

  // `column` with its variable axes named (one name for a ragged column,
  // two for a grid column; none: unnamed). Throws InvalidArgumentError
  // naming the column for a fixed column, a wrong count or an empty name.
  static RaggedColumn WithAxes(RaggedColumn column, std::vector<std::string> axes);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& inner_shape() const { return inner_shape_; }
  bool is_fixed() const { return fixed_; }
  int64_t num_examples() const { return num_examples_; }
  // Elements in one row of the variable axis (product of inner_shape).
  int64_t inner_size() const { return inner_size_; }
  // Bytes in one row of the variable axis (or one fixed element).
  int64_t row_bytes() const { return row_bytes_; }
  // The column's addressing by value, for a hot loop: a local copy the
  // compiler need not reload after every store through a pointer (as it
  // must reload this column's members, which a memcpy might have written).
  struct Reader {
    const uint8_t* values;
    const int64_t* offsets;
    const uint8_t* const* starts;
    const int64_t* lengths;
    int64_t row_bytes;
    bool fixed;

    // Never negative, even when the offsets are a memory-mapped file's that
    // was truncated while it was read: its lost bytes read as zeros (see
    // base/mapped_read.h), and a negative length would move writes outside
    // their row. Each offset is then its own value or 0, so a clamped length
    // stays within the values.
    int64_t length(int64_t i) const {
      if (fixed) return 1;
      return starts != nullptr ? lengths[i] : std::max<int64_t>(offsets[i + 1] - offsets[i], 0);
    }
    const uint8_t* data(int64_t i) const {
      if (starts != nullptr) return starts[i];
      return values + (fixed ? i : offsets[i]) * row_bytes;
    }
  };
  Reader reader() const { return {values_, offsets_, starts_, lengths_, row_bytes_, fixed_}; }
  // Rows of example i (1 for a fixed column).
  int64_t length(int64_t i) const { return reader().length(i); }
  int64_t max_length() const { return max_length_; }
  // First byte of example i.
  const uint8_t* example_data(int64_t i) const { return reader().data(i); }
  // Whether examples [begin, end) lie back to back from example_data(begin)
  // (always, but in a gathered column).
  bool contiguous() const { return starts_ == nullptr; }
  // Whether examples are [h_i, w_i, *inner_shape] arrays (see Grid).
  bool is_grid() const { return grid_ != nullptr; }
  // Example i's two variable sizes; only for a grid column.
  int64_t height(int64_t i) const { return (*grid_)[static_cast<size_t>(2 * i)]; }
  int64_t width(int64_t i) const { return (*grid_)[static_cast<size_t>(2 * i + 1)]; }
  // The largest height and width of any example (0 when not a grid).
  int64_t max_height() const { return max_height_; }
  int64_t max_width() const { return max_width_; }
  // h_0, w_0, h_1, w_1, ... (empty when not a grid column).
  std::span<const int64_t> grid_shapes() const;
  // Every example's heights or widths, as a planner takes them (for a
  // ragged column: its lengths, and widths of 1).
  std::vector<int64_t> Heights() const;
  std::vector<int64_t> Widths() const;
  // The declared names of the variable axes (empty: none declared).
  const std::vector<std::string>& axes() const { return axes_; }
  // Lengths of every example, as a planner takes them.
  std::vector<int64_t> Lengths() const;
  // Every example's bytes back to back, in example order (a gathered
  // column's too): with offsets from Lengths(), what Ragged or Fixed rebuild
  // the column from, as a pickle does. One copy of the values.
  std::vector<uint8_t> CopyValues() const;

 private:
  RaggedColumn() = default;
  struct GatherIndex {
    std::vector<const uint8_t*> starts;
    std::vector<int64_t> lengths;
  };
  void SetGathered(std::shared_ptr<GatherIndex> index);
  void SetGridShapes(std::vector<int64_t> shapes);
  void InitShape(std::vector<int64_t> inner_shape);
  // Checks offsets[0..num_examples] against `num_value_rows` and sets the
  // column's examples; `values_bytes` (-1: unknown) names the buffer's size.
  void SetOffsets(const int64_t* offsets, int64_t num_examples, int64_t num_value_rows,
                  int64_t values_bytes);

  std::string name_;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> inner_shape_;
  bool fixed_ = false;
  int64_t num_examples_ = 0;
  int64_t inner_size_ = 1;
  int64_t row_bytes_ = 0;
  int64_t max_length_ = 0;
  const uint8_t* values_ = nullptr;
  const int64_t* offsets_ = nullptr;
  // A gathered column's per-example first bytes and lengths (null otherwise),
  // held by gather_.
  const uint8_t* const* starts_ = nullptr;
  const int64_t* lengths_ = nullptr;
  std::shared_ptr<const void> gather_;
  // A grid column's h_0, w_0, h_1, w_1, ...; null otherwise.
  std::shared_ptr<const std::vector<int64_t>> grid_;
  int64_t max_height_ = 0;
  int64_t max_width_ = 0;
  std::vector<std::string> axes_;
  Keepalive owner_;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_RAGGED_COLUMN_H_
