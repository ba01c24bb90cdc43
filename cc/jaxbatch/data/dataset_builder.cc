#include "jaxbatch/data/dataset_builder.h"

#include <cstring>
#include <memory>
#include <utility>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// What a built column's memory lives in.
struct ColumnStorage {
  std::vector<uint8_t> values;
  std::vector<int64_t> offsets;
};

// Rows of examples [begin, end) of `column` (1 per example when fixed).
int64_t RowsOf(const RaggedColumn& column, int64_t begin, int64_t end) {
  int64_t rows = 0;
  for (int64_t i = begin; i < end; ++i) rows += column.length(i);
  return rows;
}

}  // namespace

DatasetBuilder::DatasetBuilder(const Dataset& like) : aligned_(like.aligned_groups()) {
  for (const RaggedColumn& c : like.columns()) {
    columns_.push_back(Column{.name = c.name(),
                              .dtype = c.dtype(),
                              .inner_shape = c.inner_shape(),
                              .fixed = c.is_fixed(),
                              .grid = c.is_grid(),
                              .axes = c.axes(),
                              .row_bytes = c.row_bytes(),
                              .values = {},
                              .offsets = {0},
                              .grid_shapes = {}});
  }
}

void DatasetBuilder::CheckColumns(const Dataset& from) const {
  const std::vector<RaggedColumn>& given = from.columns();
  if (given.size() != columns_.size()) {
    throw InvalidArgumentError(
        StrCat("DatasetBuilder: expected ", columns_.size(), " columns, found ", given.size()));
  }
  for (size_t c = 0; c < columns_.size(); ++c) {
    const Column& want = columns_[c];
    const RaggedColumn& got = given[c];
    if (got.name() != want.name || got.dtype() != want.dtype ||
        got.inner_shape() != want.inner_shape || got.is_fixed() != want.fixed ||
        got.is_grid() != want.grid || got.axes() != want.axes) {
      auto kind = [](bool fixed, bool grid) {
        return fixed ? ", fixed" : grid ? ", grid" : ", ragged";
      };
      throw InvalidArgumentError(
          StrCat("DatasetBuilder: column ", c, " is '", got.name(), "' (", DTypeName(got.dtype()),
                 kind(got.is_fixed(), got.is_grid()), ", ", got.inner_shape().size(),
                 " inner dims, ", got.axes().size(), " axis names); expected '", want.name, "' (",
                 DTypeName(want.dtype), kind(want.fixed, want.grid), ", ", want.inner_shape.size(),
                 " inner dims, ", want.axes.size(), " axis names)"));
    }
  }
}

void DatasetBuilder::Append(const Dataset& from, int64_t i) { AppendRange(from, i, i + 1); }

void DatasetBuilder::AppendRange(const Dataset& from, int64_t begin, int64_t end) {
  CheckColumns(from);
  if (begin < 0 || end > from.num_examples() || begin > end) {
    throw OutOfRangeError(StrCat("DatasetBuilder: examples [", begin, ", ", end,
                                 ") out of range; the dataset has ", from.num_examples()));
  }
  if (begin == end) return;
  for (size_t c = 0; c < columns_.size(); ++c) {
    Column& out = columns_[c];
    const RaggedColumn& in = from.columns()[c];
    if (in.contiguous()) {
      const uint8_t* data = in.example_data(begin);
      out.values.insert(out.values.end(), data, data + RowsOf(in, begin, end) * out.row_bytes);
    } else {
      for (int64_t e = begin; e < end; ++e) {
        const uint8_t* data = in.example_data(e);
        out.values.insert(out.values.end(), data, data + in.length(e) * out.row_bytes);
      }
    }
    if (!out.fixed) {
      const int64_t base = out.offsets.back();
      int64_t at = base;
      for (int64_t e = begin; e < end; ++e) out.offsets.push_back(at += in.length(e));
    }
    if (out.grid) {
      const std::span<const int64_t> shapes = in.grid_shapes();
      out.grid_shapes.insert(out.grid_shapes.end(), shapes.begin() + 2 * begin,
                             shapes.begin() + 2 * end);
    }
  }
  num_examples_ += end - begin;
}

int64_t DatasetBuilder::bytes() const {
  int64_t total = 0;
  for (const Column& c : columns_) {
    total += static_cast<int64_t>(c.values.size());
    if (!c.fixed) total += static_cast<int64_t>(c.offsets.size() * sizeof(int64_t));
    total += static_cast<int64_t>(c.grid_shapes.size() * sizeof(int64_t));
  }
  return total;
}

Dataset DatasetBuilder::Finish() && {
  std::vector<RaggedColumn> built;
  built.reserve(columns_.size());
  for (Column& c : columns_) {
    auto storage = std::make_shared<ColumnStorage>();
    storage->values = std::move(c.values);
    storage->offsets = std::move(c.offsets);
    const void* values = storage->values.data();
    if (c.fixed) {
      built.push_back(RaggedColumn::Fixed(std::move(c.name), c.dtype, std::move(c.inner_shape),
                                          values, num_examples_, storage));
    } else {
      const int64_t rows = storage->offsets.back();
      const int64_t* offsets = storage->offsets.data();
      RaggedColumn column =
          RaggedColumn::Ragged(std::move(c.name), c.dtype, std::move(c.inner_shape), values, rows,
                               offsets, num_examples_, storage);
      if (c.grid) column = RaggedColumn::Grid(std::move(column), std::move(c.grid_shapes));
      built.push_back(RaggedColumn::WithAxes(std::move(column), std::move(c.axes)));
    }
  }
  return Dataset(std::move(built), std::move(aligned_));
}

Dataset OwnedCopy(const Dataset& dataset) {
  DatasetBuilder builder(dataset);
  builder.AppendRange(dataset, 0, dataset.num_examples());
  return std::move(builder).Finish();
}

int64_t OwnedBytes(const Dataset& dataset) {
  int64_t total = 0;
  for (const RaggedColumn& c : dataset.columns()) {
    total += RowsOf(c, 0, c.num_examples()) * c.row_bytes();
    if (!c.is_fixed()) total += (c.num_examples() + 1) * static_cast<int64_t>(sizeof(int64_t));
    total += static_cast<int64_t>(c.grid_shapes().size() * sizeof(int64_t));
  }
  return total;
}

}  // namespace jaxbatch
