// Dataset: named columns that all hold the same number of examples.
//
// Some ragged columns are aligned: they must have equal lengths in every
// example (tokens and their labels), so a planner that looks at one of them
// fits all of them. Validation happens once, in the constructor.
//
// Columns may name their variable axes (RaggedColumn::WithAxes): every axis
// of one name has one size in each example, so a pair feature named
// ("L", "L") is square and, beside tokens named "L", as long as the tokens
// on both axes. The constructor checks every tie.
//
// Example:
//   Dataset ds({std::move(tokens), std::move(labels)}, {{"tokens", "labels"}});
//   std::vector<int64_t> lengths = ds.column("tokens").Lengths();
#ifndef JAXBATCH_DATA_DATASET_H_
#define JAXBATCH_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jaxbatch/data/ragged_column.h"

namespace jaxbatch {

class Dataset {
 public:
  // Throws InvalidArgumentError for duplicate or empty names, example counts
  // that differ, an aligned group naming an unknown or fixed column, or
  // aligned columns whose lengths (or grid shapes) differ (naming the first
  // such example), or a tied axis whose sizes differ (naming the columns,
  // the example, the axes and both sizes). `first_example` numbers the
  // examples in those messages: a file's row group read as a data set of its
  // own names its examples as the whole file does.
  explicit Dataset(std::vector<RaggedColumn> columns,
                   std::vector<std::vector<std::string>> aligned = {}, int64_t first_example = 0);

  int64_t num_examples() const { return num_examples_; }
  const std::vector<RaggedColumn>& columns() const { return columns_; }
  const std::vector<std::vector<std::string>>& aligned_groups() const { return aligned_; }

  // Throws InvalidArgumentError listing the columns when `name` is unknown.
  const RaggedColumn& column(std::string_view name) const;
  bool has_column(std::string_view name) const;

  // The first ragged column: what a planner looks at by default. Throws
  // InvalidArgumentError when every column is fixed.
  const std::string& default_length_column() const;

  // The grid column's axes tie both to the 1-D ragged column `length_column`
  // (a pair feature [L, L] beside its tokens [L]).
  bool IsTiedSquare(const RaggedColumn& grid, std::string_view length_column) const;

  // True when `a` and `b` are the same column or declared aligned.
  bool AreAligned(std::string_view a, std::string_view b) const;

  // A view's identity (data/view.h): which examples of which data it takes,
  // mixed into its fingerprints so that a loader state or a job over one
  // view is refused on another. 0 for data that is no view.
  uint64_t view_key() const { return view_key_; }
  void set_view_key(uint64_t key) { view_key_ = key; }

 private:
  std::vector<RaggedColumn> columns_;
  std::vector<std::vector<std::string>> aligned_;
  int64_t num_examples_ = 0;
  uint64_t view_key_ = 0;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_DATASET_H_
