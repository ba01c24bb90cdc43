#include "jaxbatch/data/dataset.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

#include "jaxbatch/base/error.h"
#include "jaxbatch/data/output_names.h"

namespace jaxbatch {
namespace {

std::string JoinNames(const std::vector<RaggedColumn>& columns) {
  std::string out;
  for (const RaggedColumn& c : columns) out += (out.empty() ? "'" : ", '") + c.name() + "'";
  return out.empty() ? "none" : out;
}

// Collation names its outputs after the columns (`<k>_lengths`, `<k>_mask`,
// `<k>_segment_ids`, `<k>_positions`, `<k>_segment_starts` for a ragged column k, and
// `example_index`); a column of one of those names would be overwritten.
void CheckNoOutputCollision(const std::vector<RaggedColumn>& columns) {
  for (const RaggedColumn& col : columns) {
    if (col.name() == kExampleIndexName) {
      throw InvalidArgumentError(
          "Dataset: column 'example_index' collides with the output collation adds to every "
          "batch; rename the column");
    }
    for (const RaggedColumn& ragged : columns) {
      if (ragged.is_fixed()) continue;
      for (std::string_view suffix : kOutputSuffixes) {
        if (col.name() == ragged.name() + std::string(suffix)) {
          throw InvalidArgumentError(StrCat(
              "Dataset: column '", col.name(), "' collides with the output '", col.name(),
              "' that collation derives from ragged column '", ragged.name(), "'; rename one"));
        }
      }
    }
  }
}

// Size of variable axis `axis` of `col` in example i.
int64_t AxisSize(const RaggedColumn& col, size_t axis, int64_t i) {
  if (!col.is_grid()) return col.length(i);
  return axis == 0 ? col.height(i) : col.width(i);
}

// Every use of one axis name, as (column, axis); the first use is the
// reference the others are checked against.
struct AxisUse {
  const RaggedColumn* column;
  size_t axis;
};

void CheckAxes(const std::vector<RaggedColumn>& columns, int64_t num_examples,
               int64_t first_example) {
  std::vector<std::pair<std::string, std::vector<AxisUse>>> names;
  for (const RaggedColumn& col : columns) {
    for (size_t a = 0; a < col.axes().size(); ++a) {
      auto it = std::find_if(names.begin(), names.end(),
                             [&](const auto& n) { return n.first == col.axes()[a]; });
      if (it == names.end()) it = names.insert(names.end(), {col.axes()[a], {}});
      it->second.push_back({&col, a});
    }
  }
  for (const auto& [axis, uses] : names) {
    const AxisUse& ref = uses[0];
    for (size_t u = 1; u < uses.size(); ++u) {
      const AxisUse& use = uses[u];
      for (int64_t i = 0; i < num_examples; ++i) {
        const int64_t want = AxisSize(*ref.column, ref.axis, i);
        const int64_t found = AxisSize(*use.column, use.axis, i);
        if (want == found) continue;
        throw InvalidArgumentError(StrCat(
            "Dataset: example ", first_example + i, ": axis '", axis,
            "' is tied but its sizes differ: column '", ref.column->name(), "' axis ", ref.axis,
            " is ", want, ", column '", use.column->name(), "' axis ", use.axis, " is ", found));
      }
    }
  }
}

}  // namespace

Dataset::Dataset(std::vector<RaggedColumn> columns, std::vector<std::vector<std::string>> aligned,
                 int64_t first_example)
    : columns_(std::move(columns)), aligned_(std::move(aligned)) {
  if (columns_.empty())
    throw InvalidArgumentError("Dataset: expected at least one column, found none");
  num_examples_ = columns_[0].num_examples();
  for (size_t c = 0; c < columns_.size(); ++c) {
    const RaggedColumn& col = columns_[c];
    if (col.name().empty()) throw InvalidArgumentError("Dataset: a column has an empty name");
    for (size_t d = 0; d < c; ++d) {
      if (columns_[d].name() == col.name()) {
        throw InvalidArgumentError(StrCat("Dataset: column '", col.name(), "' appears twice"));
      }
    }
    if (col.num_examples() != num_examples_) {
      throw InvalidArgumentError(StrCat("Dataset: columns must have the same number of examples: '",
                                        columns_[0].name(), "' has ", num_examples_, " but '",
                                        col.name(), "' has ", col.num_examples()));
    }
  }
  CheckNoOutputCollision(columns_);
  CheckAxes(columns_, num_examples_, first_example);
  for (const std::vector<std::string>& group : aligned_) {
    if (group.empty()) continue;
    for (const std::string& name : group) {
      if (!has_column(name)) {
        throw InvalidArgumentError(StrCat("Dataset: aligned column '", name,
                                          "' is not a column; columns are ", JoinNames(columns_)));
      }
      if (column(name).is_fixed()) {
        throw InvalidArgumentError(StrCat("Dataset: aligned column '", name,
                                          "' is fixed-shape; only ragged columns can be aligned"));
      }
    }
    const RaggedColumn& first = column(group[0]);
    for (size_t g = 1; g < group.size(); ++g) {
      const RaggedColumn& other = column(group[g]);
      if (first.is_grid() != other.is_grid()) {
        throw InvalidArgumentError(StrCat("Dataset: aligned columns '", first.name(), "' and '",
                                          other.name(), "' must both be grid columns or neither"));
      }
      for (int64_t i = 0; i < num_examples_; ++i) {
        if (first.is_grid() &&
            (first.height(i) != other.height(i) || first.width(i) != other.width(i))) {
          throw InvalidArgumentError(
              StrCat("Dataset: aligned grid columns '", first.name(), "' and '", other.name(),
                     "' differ at example ", first_example + i, ": '", first.name(), "' is ",
                     first.height(i), " x ", first.width(i), ", '", other.name(), "' is ",
                     other.height(i), " x ", other.width(i)));
        }
        if (first.length(i) != other.length(i)) {
          throw InvalidArgumentError(StrCat("Dataset: aligned columns '", first.name(), "' and '",
                                            other.name(), "' differ at example ", first_example + i,
                                            ": '", first.name(), "' has length ", first.length(i),
                                            ", '", other.name(), "' has length ", other.length(i)));
        }
      }
    }
  }
}

bool Dataset::IsTiedSquare(const RaggedColumn& grid, std::string_view length_column) const {
  if (!grid.is_grid() || grid.axes().size() != 2 || grid.axes()[0] != grid.axes()[1]) return false;
  if (!has_column(length_column)) return false;
  const RaggedColumn& by = column(length_column);
  return !by.is_grid() && by.axes().size() == 1 && by.axes()[0] == grid.axes()[0];
}

const RaggedColumn& Dataset::column(std::string_view name) const {
  for (const RaggedColumn& col : columns_) {
    if (col.name() == name) return col;
  }
  throw InvalidArgumentError(
      StrCat("Dataset: no column '", name, "'; columns are ", JoinNames(columns_)));
}

bool Dataset::has_column(std::string_view name) const {
  return std::any_of(columns_.begin(), columns_.end(),
                     [&](const RaggedColumn& c) { return c.name() == name; });
}

const std::string& Dataset::default_length_column() const {
  for (const RaggedColumn& col : columns_) {
    if (!col.is_fixed()) return col.name();
  }
  throw InvalidArgumentError(StrCat(
      "Dataset: every column is fixed-shape, so there are no lengths to plan by; columns are ",
      JoinNames(columns_)));
}

bool Dataset::AreAligned(std::string_view a, std::string_view b) const {
  if (a == b) return true;
  for (const std::vector<std::string>& group : aligned_) {
    const bool has_a = std::find(group.begin(), group.end(), a) != group.end();
    const bool has_b = std::find(group.begin(), group.end(), b) != group.end();
    if (has_a && has_b) return true;
  }
  return false;
}

}  // namespace jaxbatch
