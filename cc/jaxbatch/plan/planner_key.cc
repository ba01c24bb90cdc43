#include "jaxbatch/plan/planner_key.h"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// A parsed value: None, an integer, a quoted string, a list of integers or
// a dict of quoted names to integers (Pack's per-feature row lengths).
struct Value {
  enum class Kind { kNone, kInt, kString, kList, kDict } kind = Kind::kNone;
  int64_t integer = 0;
  std::string text;
  std::vector<int64_t> list;
  std::vector<std::pair<std::string, int64_t>> dict;
};

constexpr const char* kRemainderNames[] = {"pad", "keep", "drop"};
constexpr const char* kTooLongNames[] = {"error", "truncate", "skip", "split"};
constexpr const char* kAlgorithmNames[] = {"first_fit", "best_fit", "concat_then_split"};
constexpr const char* kGraphAlgorithmNames[] = {"next_fit", "first_fit", "best_fit"};
constexpr const char* kTooBigNames[] = {"error", "skip"};
constexpr const char* kPartialPatchesNames[] = {"error", "pad"};

// One field of a planner's key: how it is written (nullopt: left out) and read.
template <typename T>
struct Field {
  const char* name;
  std::function<std::optional<std::string>(const T&)> write;
  std::function<void(T&, const Value&, std::string_view key)> read;
};

[[noreturn]] void Refuse(std::string_view key, std::string_view what) {
  throw InvalidArgumentError(StrCat("planner key '", key, "': ", what));
}

int64_t AsInt(const Value& v, std::string_view key, const char* field) {
  if (v.kind != Value::Kind::kInt) Refuse(key, StrCat(field, " must be an integer"));
  return v.integer;
}

template <typename T>
Field<T> Count(const char* name, int64_t T::* member, bool added = false, int64_t fallback = 0) {
  return {name,
          [=](const T& o) -> std::optional<std::string> {
            if (added && o.*member == fallback) return std::nullopt;
            return StrCat(o.*member);
          },
          [=](T& o, const Value& v, std::string_view key) { o.*member = AsInt(v, key, name); }};
}

template <typename T>
Field<T> Optional(const char* name, std::optional<int64_t> T::* member, bool added = false) {
  return {name,
          [=](const T& o) -> std::optional<std::string> {
            if (!(o.*member)) {
              if (added) return std::nullopt;
              return std::string("None");
            }
            return StrCat(*(o.*member));
          },
          [=](T& o, const Value& v, std::string_view key) {
            if (v.kind == Value::Kind::kNone) {
              o.*member = std::nullopt;
            } else {
              o.*member = AsInt(v, key, name);
            }
          }};
}

template <typename T, typename E, size_t N>
Field<T> Choice(const char* name, E T::* member, const char* const (&names)[N]) {
  return {name,
          [=, &names](const T& o) -> std::optional<std::string> {
            const auto index = static_cast<size_t>(o.*member);
            return StrCat("'", index < N ? names[index] : "?", "'");
          },
          [=, &names](T& o, const Value& v, std::string_view key) {
            for (size_t i = 0; i < N; ++i) {
              if (v.kind == Value::Kind::kString && v.text == names[i]) {
                o.*member = static_cast<E>(i);
                return;
              }
            }
            std::string allowed;
            for (size_t i = 0; i < N; ++i) allowed += StrCat(i ? ", " : "", "'", names[i], "'");
            Refuse(key, StrCat(name, " must be one of ", allowed));
          }};
}

// A list of integers as Python writes it: [96, 256].
std::string ListText(const std::vector<int64_t>& list) {
  std::string out = "[";
  for (size_t i = 0; i < list.size(); ++i) out += StrCat(i ? ", " : "", list[i]);
  return out + "]";
}

// `added`: a list added after keys were first stored, written only when
// not empty (its default), so older keys stay the keys of the same options.
template <typename T>
Field<T> List(const char* name, std::vector<int64_t> T::* member, bool added = false) {
  return {name,
          [=](const T& o) -> std::optional<std::string> {
            if (added && (o.*member).empty()) return std::nullopt;
            return ListText(o.*member);
          },
          [=](T& o, const Value& v, std::string_view key) {
            if (v.kind != Value::Kind::kList) Refuse(key, StrCat(name, " must be a list"));
            o.*member = v.list;
          }};
}

const std::vector<Field<PadToMaxOptions>>& FieldsOf(const PadToMaxOptions*) {
  using O = PadToMaxOptions;
  static const std::vector<Field<O>> fields = {
      Count<O>("batch_size", &O::batch_size), Count<O>("pad_to_multiple", &O::pad_to_multiple),
      Choice<O>("remainder", &O::remainder, kRemainderNames),
      Count<O>("rows_multiple", &O::rows_multiple, true, kDefaultRowsMultiple)};
  return fields;
}

const std::vector<Field<FixedBucketsOptions>>& FieldsOf(const FixedBucketsOptions*) {
  using O = FixedBucketsOptions;
  static const std::vector<Field<O>> fields = {
      List<O>("boundaries", &O::boundaries),
      Optional<O>("batch_size", &O::batch_size),
      Optional<O>("token_budget", &O::token_budget),
      Choice<O>("remainder", &O::remainder, kRemainderNames),
      Choice<O>("too_long", &O::too_long, kTooLongNames),
      Count<O>("rows_multiple", &O::rows_multiple, true, kDefaultRowsMultiple),
      List<O>("batch_sizes", &O::batch_sizes, true)};
  return fields;
}

const std::vector<Field<AutoBucketsOptions>>& FieldsOf(const AutoBucketsOptions*) {
  using O = AutoBucketsOptions;
  static const std::vector<Field<O>> fields = {
      Count<O>("max_shapes", &O::max_shapes),
      Optional<O>("token_budget", &O::token_budget),
      Optional<O>("batch_size", &O::batch_size),
      Count<O>("pad_to_multiple", &O::pad_to_multiple),
      Choice<O>("remainder", &O::remainder, kRemainderNames),
      Count<O>("rows_multiple", &O::rows_multiple, true, kDefaultRowsMultiple)};
  return fields;
}

// Pack's row_length: an integer, or for several features a dict of each
// feature's row length, written in name order as Python writes a dict:
// row_length={'inputs': 512, 'targets': 128}.
Field<PackOptions> PackRowLength() {
  return {"row_length",
          [](const PackOptions& o) -> std::optional<std::string> {
            if (!o.row_length_list.empty()) return ListText(o.row_length_list);
            if (o.row_lengths.empty()) return StrCat(o.row_length);
            std::string out = "{";
            for (const auto& [name, length] : o.row_lengths) {
              out += StrCat(out.size() > 1 ? ", " : "", "'", name, "': ", length);
            }
            return out + "}";
          },
          [](PackOptions& o, const Value& v, std::string_view key) {
            if (v.kind == Value::Kind::kList) {  // a few row lengths: row_length the largest
              o.row_length_list = v.list;
              o.row_length = v.list.empty() ? 0 : v.list.back();
              return;
            }
            if (v.kind != Value::Kind::kDict) {
              o.row_length = AsInt(v, key, "row_length");
              return;
            }
            for (const auto& [name, length] : v.dict) {
              if (!o.row_lengths.emplace(name, length).second) {
                Refuse(key, StrCat("row_length names feature '", name, "' twice"));
              }
            }
          }};
}

// Pack's and PatchPack's rows_per_batch: an integer, or None (0) beside a
// token_budget.
template <typename O>
Field<O> RowsPerBatchField() {
  Field<O> count = Count<O>("rows_per_batch", &O::rows_per_batch);
  return {"rows_per_batch",
          [=](const O& o) -> std::optional<std::string> {
            if (o.rows_per_batch == 0 && o.token_budget) return std::string("None");
            return count.write(o);
          },
          [=](O& o, const Value& v, std::string_view key) {
            if (v.kind == Value::Kind::kNone) {
              o.rows_per_batch = 0;
            } else {
              count.read(o, v, key);
            }
          }};
}

const std::vector<Field<PackOptions>>& FieldsOf(const PackOptions*) {
  using O = PackOptions;
  static const std::vector<Field<O>> fields = {
      PackRowLength(),
      RowsPerBatchField<O>(),
      Optional<O>("max_segments_per_row", &O::max_segments_per_row),
      Choice<O>("algorithm", &O::algorithm, kAlgorithmNames),
      Optional<O>("lookahead", &O::lookahead),
      Choice<O>("too_long", &O::too_long, kTooLongNames),
      Choice<O>("remainder", &O::remainder, kRemainderNames),
      Count<O>("rows_multiple", &O::rows_multiple, true, kDefaultRowsMultiple),
      Optional<O>("open_rows", &O::open_rows, true),
      Optional<O>("token_budget", &O::token_budget, true),
      Optional<O>("max_shapes", &O::max_shapes, true),
      Count<O>("attention_percent", &O::attention_percent, true, kDefaultAttentionPercent)};
  return fields;
}

const std::vector<Field<PatchPackOptions>>& FieldsOf(const PatchPackOptions*) {
  using O = PatchPackOptions;
  static const std::vector<Field<O>> fields = {
      List<O>("patch", &O::patch),
      Count<O>("row_length", &O::row_length),
      RowsPerBatchField<O>(),
      Optional<O>("token_budget", &O::token_budget),
      Optional<O>("max_segments_per_row", &O::max_segments_per_row),
      Choice<O>("algorithm", &O::algorithm, kAlgorithmNames),
      Optional<O>("lookahead", &O::lookahead),
      Optional<O>("open_rows", &O::open_rows),
      Choice<O>("too_long", &O::too_long, kTooLongNames),
      Choice<O>("partial_patches", &O::partial_patches, kPartialPatchesNames),
      Count<O>("drop_percent", &O::drop_percent),
      Count<O>("drop_seed", &O::drop_seed),
      Choice<O>("remainder", &O::remainder, kRemainderNames),
      Count<O>("rows_multiple", &O::rows_multiple)};
  return fields;
}

// ratios are (width, height) pairs, written flat: ratios=[4, 3, 1, 1].
const std::vector<Field<AspectBucketsOptions>>& FieldsOf(const AspectBucketsOptions*) {
  using O = AspectBucketsOptions;
  static const std::vector<Field<O>> fields = {
      Count<O>("area", &O::area),
      Count<O>("multiple", &O::multiple),
      List<O>("ratios", &O::ratios),
      Optional<O>("max_shapes", &O::max_shapes),
      Optional<O>("batch_size", &O::batch_size),
      Optional<O>("token_budget", &O::token_budget),
      Choice<O>("remainder", &O::remainder, kRemainderNames),
      Count<O>("rows_multiple", &O::rows_multiple)};
  return fields;
}

template <typename O>
const std::vector<Field<O>>& GraphFields() {
  static const std::vector<Field<O>> fields = [] {
    std::vector<Field<O>> out;
    if constexpr (std::is_same_v<O, GraphBucketsOptions>) {
      out.push_back(Count<O>("max_shapes", &O::max_shapes));
    }
    out.push_back(Count<O>("nodes", &O::nodes));
    out.push_back(Count<O>("edges", &O::edges));
    out.push_back(Count<O>("graphs", &O::graphs));
    out.push_back(Choice<O>("algorithm", &O::algorithm, kGraphAlgorithmNames));
    out.push_back(Optional<O>("open_batches", &O::open_batches));
    out.push_back(Choice<O>("too_big", &O::too_big, kTooBigNames));
    if constexpr (std::is_same_v<O, GraphBucketsOptions>) {
      out.push_back(List<O>("shapes", &O::shapes, true));
    }
    return out;
  }();
  return fields;
}

const std::vector<Field<GraphBudgetOptions>>& FieldsOf(const GraphBudgetOptions*) {
  return GraphFields<GraphBudgetOptions>();
}

const std::vector<Field<GraphBucketsOptions>>& FieldsOf(const GraphBucketsOptions*) {
  return GraphFields<GraphBucketsOptions>();
}

// A cursor over a key's text.
class Reader {
 public:
  explicit Reader(std::string_view key) : key_(key) {}

  bool AtEnd() {
    SkipSpace();
    return pos_ == key_.size();
  }
  bool Take(char c) {
    SkipSpace();
    if (pos_ < key_.size() && key_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Take(c)) Fail(StrCat("expected '", c, "'"));
  }
  std::string Name() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < key_.size() && (std::isalnum(static_cast<unsigned char>(key_[pos_])) ||
                                  key_[pos_] == '_' || key_[pos_] == '.')) {
      ++pos_;
    }
    if (start == pos_) Fail("expected a name");
    return std::string(key_.substr(start, pos_ - start));
  }
  Value ReadValue() {
    SkipSpace();
    Value v;
    if (pos_ >= key_.size()) Fail("expected a value");
    const char c = key_[pos_];
    if (c == '\'' || c == '"') {
      const size_t end = key_.find(c, pos_ + 1);
      if (end == std::string_view::npos) Fail("unterminated string");
      v.kind = Value::Kind::kString;
      v.text = std::string(key_.substr(pos_ + 1, end - pos_ - 1));
      pos_ = end + 1;
      return v;
    }
    if (c == '{') return Dict();
    if (c == '[' || c == '(') {
      const char close = c == '[' ? ']' : ')';
      ++pos_;
      v.kind = Value::Kind::kList;
      while (!Take(close)) {
        if (!v.list.empty()) {
          Expect(',');
          if (Take(close)) break;  // (8,)
        }
        v.list.push_back(Integer());
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      const std::string word = Name();
      if (word == "None") return v;
      // A numpy integer as Python 3 prints it with numpy 2: np.int64(8).
      if (word.starts_with("np.") || word.starts_with("numpy.")) {
        Expect('(');
        v.kind = Value::Kind::kInt;
        v.integer = Integer();
        Expect(')');
        return v;
      }
      Fail(StrCat("unexpected '", word, "'"));
    }
    v.kind = Value::Kind::kInt;
    v.integer = Integer();
    return v;
  }
  [[noreturn]] void Fail(std::string_view what) const {
    Refuse(key_, StrCat(what, " at character ", pos_));
  }

 private:
  // {'name': integer, ...}
  Value Dict() {
    Expect('{');
    Value v;
    v.kind = Value::Kind::kDict;
    while (!Take('}')) {
      if (!v.dict.empty()) {
        Expect(',');
        if (Take('}')) break;
      }
      const Value name = ReadValue();
      if (name.kind != Value::Kind::kString) Fail("expected a quoted feature name");
      Expect(':');
      v.dict.emplace_back(name.text, Integer());
    }
    return v;
  }
  void SkipSpace() {
    while (pos_ < key_.size() && std::isspace(static_cast<unsigned char>(key_[pos_]))) ++pos_;
  }
  int64_t Integer() {
    SkipSpace();
    if (pos_ < key_.size() && std::isalpha(static_cast<unsigned char>(key_[pos_]))) {
      const Value v = ReadValue();  // np.int64(8) inside a list
      if (v.kind != Value::Kind::kInt) Fail("expected an integer");
      return v.integer;
    }
    int64_t value = 0;
    const char* begin = key_.data() + pos_;
    const auto [end, error] = std::from_chars(begin, key_.data() + key_.size(), value);
    if (error != std::errc() || end == begin) Fail("expected an integer");
    pos_ += static_cast<size_t>(end - begin);
    return value;
  }

  std::string_view key_;
  size_t pos_ = 0;
};

template <typename T>
T ParseFields(Reader& reader, std::string_view key) {
  const auto& fields = FieldsOf(static_cast<const T*>(nullptr));
  T options;
  std::vector<bool> seen(fields.size(), false);
  reader.Expect('(');
  bool first = true;
  while (!reader.Take(')')) {
    if (!first) reader.Expect(',');
    first = false;
    const std::string name = reader.Name();
    reader.Expect('=');
    const Value value = reader.ReadValue();
    size_t k = 0;
    while (k < fields.size() && name != fields[k].name) ++k;
    if (k == fields.size()) Refuse(key, StrCat("unknown field '", name, "'"));
    if (seen[k]) Refuse(key, StrCat("field '", name, "' given twice"));
    seen[k] = true;
    fields[k].read(options, value, key);
  }
  return options;
}

}  // namespace

std::string PlannerKey(const PlannerOptions& options) {
  return std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        std::string out = StrCat(PlannerName(options), "(");
        bool first = true;
        for (const Field<T>& field : FieldsOf(static_cast<const T*>(nullptr))) {
          const std::optional<std::string> text = field.write(o);
          if (!text) continue;
          out += StrCat(first ? "" : ", ", field.name, "=", *text);
          first = false;
        }
        return out + ")";
      },
      options);
}

PlannerOptions ParsePlannerKey(std::string_view key) {
  Reader reader(key);
  const std::string name = reader.Name();
  PlannerOptions options;
  if (name == "PadToMax") {
    options = ParseFields<PadToMaxOptions>(reader, key);
  } else if (name == "FixedBuckets") {
    options = ParseFields<FixedBucketsOptions>(reader, key);
  } else if (name == "AutoBuckets") {
    options = ParseFields<AutoBucketsOptions>(reader, key);
  } else if (name == "Pack") {
    options = ParseFields<PackOptions>(reader, key);
  } else if (name == "GraphBudget") {
    options = ParseFields<GraphBudgetOptions>(reader, key);
  } else if (name == "GraphBuckets") {
    options = ParseFields<GraphBucketsOptions>(reader, key);
  } else if (name == "PatchPack") {
    options = ParseFields<PatchPackOptions>(reader, key);
  } else if (name == "AspectBuckets") {
    options = ParseFields<AspectBucketsOptions>(reader, key);
  } else {
    Refuse(key, StrCat("unknown planner '", name,
                       "'; expected PadToMax, FixedBuckets, AutoBuckets, Pack, GraphBudget, "
                       "GraphBuckets, PatchPack or AspectBuckets"));
  }
  if (!reader.AtEnd()) reader.Fail("unexpected text after the planner");
  return options;
}

}  // namespace jaxbatch
