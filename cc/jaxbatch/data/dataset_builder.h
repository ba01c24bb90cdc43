// DatasetBuilder: copies examples of datasets into a new dataset that owns
// its memory.
//
// A dataset usually points at memory someone else owns (numpy, Arrow). A
// loader that streams a data set larger than memory needs datasets that own
// theirs: a decoded chunk handed over by a reader (OwnedCopy), and the few
// examples of one batch gathered from several chunks (Append). Every
// example keeps its bytes exactly; offsets start again from 0.
//
// Example:
//   DatasetBuilder batch(chunk_a);  // same columns as every chunk
//   batch.Append(chunk_a, 7);
//   batch.Append(chunk_b, 0);
//   Dataset two = std::move(batch).Finish();
#ifndef JAXBATCH_DATA_DATASET_BUILDER_H_
#define JAXBATCH_DATA_DATASET_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "jaxbatch/data/dataset.h"

namespace jaxbatch {

class DatasetBuilder {
 public:
  // Takes the columns (names, dtypes, inner shapes, ragged or fixed) and the
  // aligned groups of `like`; holds no example yet.
  explicit DatasetBuilder(const Dataset& like);

  // Appends example `i` of `from` (one copy per column). Throws
  // InvalidArgumentError when `from`'s columns differ from `like`'s (in
  // order, name, dtype, inner shape, kind or axis names) and OutOfRangeError for an `i`
  // it does not have.
  void Append(const Dataset& from, int64_t i);
  // Appends examples [begin, end) of `from`: one copy per column.
  void AppendRange(const Dataset& from, int64_t begin, int64_t end);

  int64_t num_examples() const { return num_examples_; }
  // Bytes of values and offsets the built dataset holds.
  int64_t bytes() const;
  Dataset Finish() &&;

  // Throws InvalidArgumentError when `from`'s columns differ from `like`'s.
  void CheckColumns(const Dataset& from) const;

 private:
  struct Column {
    std::string name;
    DType dtype;
    std::vector<int64_t> inner_shape;
    bool fixed;
    bool grid;
    std::vector<std::string> axes;
    int64_t row_bytes;
    std::vector<uint8_t> values;
    std::vector<int64_t> offsets{0};
    std::vector<int64_t> grid_shapes;  // h, w per example of a grid column
  };
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> aligned_;
  int64_t num_examples_ = 0;
};

// Every example of `dataset` copied into memory the result owns.
Dataset OwnedCopy(const Dataset& dataset);

// Bytes OwnedCopy(dataset) holds: each column's values, and ragged columns'
// num_examples + 1 offsets.
int64_t OwnedBytes(const Dataset& dataset);

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_DATASET_BUILDER_H_
