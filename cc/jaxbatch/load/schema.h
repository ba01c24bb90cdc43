// Schema: what a valid example looks like, checked before it is batched.
//
// Per column: dtype, inner shape, a minimum and maximum length, and whether
// floating values must be finite. Unset fields are inferred from the data
// (a column's dtype and inner shape) or not checked. A record that breaks
// any rule gets a reason string naming the column, what was expected and
// what was found; the loader's error policy decides what happens to it.
//
// Example:
//   Schema schema{.columns = {{.name = "tokens", .min_length = 1, .max_length = 512}}};
//   std::vector<BadRecord> bad = FindBadRecords(dataset, schema);
#ifndef JAXBATCH_LOAD_SCHEMA_H_
#define JAXBATCH_LOAD_SCHEMA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/dtype.h"

namespace jaxbatch {

struct ColumnSchema {
  std::string name;
  std::optional<DType> dtype = std::nullopt;                       // unset: the column's own
  std::optional<std::vector<int64_t>> inner_shape = std::nullopt;  // unset: the column's own
  int64_t min_length = 0;
  int64_t max_length = -1;  // -1: no maximum
  bool finite = false;      // NaN/Inf in a floating column is an error
};

struct Schema {
  std::vector<ColumnSchema> columns;
};

struct BadRecord {
  int64_t example = 0;
  std::string reason;  // "column 'x': expected ..., found ..."
};

// Every example of `dataset` that breaks `schema`, in index order, with the
// first broken rule's reason. Throws InvalidArgumentError for a schema
// naming a column the dataset lacks.
std::vector<BadRecord> FindBadRecords(const Dataset& dataset, const Schema& schema);

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_SCHEMA_H_
