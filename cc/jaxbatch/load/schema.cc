#include "jaxbatch/load/schema.h"

#include <cmath>
#include <cstring>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// The first non-finite element of `count` at `data`, or -1.
int64_t FirstNonFinite(const uint8_t* data, int64_t count, DType dtype) {
  for (int64_t k = 0; k < count; ++k) {
    bool finite = true;
    switch (dtype) {
      case DType::kFloat16:
      case DType::kBFloat16: {
        uint16_t bits;
        std::memcpy(&bits, data + 2 * k, 2);
        const uint16_t exponent_mask = dtype == DType::kFloat16 ? 0x7c00 : 0x7f80;
        finite = (bits & exponent_mask) != exponent_mask;
        break;
      }
      case DType::kFloat32: {
        float v;
        std::memcpy(&v, data + 4 * k, 4);
        finite = std::isfinite(v);
        break;
      }
      case DType::kFloat64: {
        double v;
        std::memcpy(&v, data + 8 * k, 8);
        finite = std::isfinite(v);
        break;
      }
      default:
        break;
    }
    if (!finite) return k;
  }
  return -1;
}

// A rule broken by the whole column (wrong dtype or inner shape), or "".
std::string ColumnMismatch(const RaggedColumn& column, const ColumnSchema& rule) {
  if (rule.dtype && *rule.dtype != column.dtype()) {
    return StrCat("column '", column.name(), "': expected dtype ", DTypeName(*rule.dtype),
                  ", found ", DTypeName(column.dtype()));
  }
  if (rule.inner_shape && *rule.inner_shape != column.inner_shape()) {
    const size_t lead = column.is_fixed() ? 0 : 1;
    if (rule.inner_shape->size() != column.inner_shape().size()) {
      return StrCat("column '", column.name(), "': expected rank ", rule.inner_shape->size() + lead,
                    ", found rank ", column.inner_shape().size() + lead);
    }
    return StrCat("column '", column.name(), "': expected inner shape ",
                  ShapeText(*rule.inner_shape), ", found ", ShapeText(column.inner_shape()));
  }
  return "";
}

}  // namespace

std::vector<BadRecord> FindBadRecords(const Dataset& dataset, const Schema& schema) {
  struct Check {
    const RaggedColumn* column;
    const ColumnSchema* rule;
    std::string mismatch;
  };
  std::vector<Check> checks;
  for (const ColumnSchema& rule : schema.columns) {
    if (!dataset.has_column(rule.name)) {
      throw InvalidArgumentError(StrCat("schema: no column '", rule.name, "' in the dataset"));
    }
    if (rule.min_length < 0 || (rule.max_length >= 0 && rule.max_length < rule.min_length)) {
      throw InvalidArgumentError(StrCat("schema: column '", rule.name,
                                        "': expected 0 <= min_length <= max_length, found ",
                                        rule.min_length, " and ", rule.max_length));
    }
    const RaggedColumn& column = dataset.column(rule.name);
    checks.push_back({&column, &rule, ColumnMismatch(column, rule)});
  }
  std::vector<BadRecord> bad;
  for (int64_t i = 0; i < dataset.num_examples(); ++i) {
    for (const Check& check : checks) {
      const RaggedColumn& column = *check.column;
      const ColumnSchema& rule = *check.rule;
      std::string reason = check.mismatch;
      const int64_t length = column.length(i);
      if (reason.empty() && !column.is_fixed() && length < rule.min_length) {
        reason = StrCat("column '", column.name(), "': expected length >= ", rule.min_length,
                        ", found ", length);
      }
      if (reason.empty() && !column.is_fixed() && rule.max_length >= 0 &&
          length > rule.max_length) {
        reason = StrCat("column '", column.name(), "': expected length <= ", rule.max_length,
                        ", found ", length);
      }
      if (reason.empty() && rule.finite && IsFloating(column.dtype())) {
        const int64_t at =
            FirstNonFinite(column.example_data(i), length * column.inner_size(), column.dtype());
        if (at >= 0) {
          reason = StrCat("column '", column.name(),
                          "': expected finite values, found NaN or Inf at element ", at);
        }
      }
      if (!reason.empty()) {
        bad.push_back({i, std::move(reason)});
        break;
      }
    }
  }
  return bad;
}

}  // namespace jaxbatch
