#include "jaxbatch/load/state_json.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/load/schedule.h"

namespace jaxbatch {
namespace {

// -- the fields ----------------------------------------------------------------

struct Counter {
  const char* name;
  int64_t LoaderState::* field;
  bool optional;  // absent in states saved before it was added: counts from 0
};

// In the order states list them (seed first, then these).
constexpr std::array<Counter, 13> kCounters{{
    {"epoch", &LoaderState::epoch, false},
    {"step", &LoaderState::step, false},
    {"batches", &LoaderState::batches, false},
    {"examples", &LoaderState::examples, false},
    {"skipped", &LoaderState::skipped, false},
    {"quarantined", &LoaderState::quarantined, false},
    {"dropped", &LoaderState::dropped, false},
    {"padding_batches", &LoaderState::padding_batches, false},
    {"truncated", &LoaderState::truncated, true},
    {"real_elements", &LoaderState::real_elements, true},
    {"padded_elements", &LoaderState::padded_elements, true},
    {"real_edges", &LoaderState::real_edges, true},
    {"padded_edges", &LoaderState::padded_edges, true},
}};

// Listed first when missing, as a state's identity is what a reader looks for.
constexpr std::array<const char*, 3> kKeyFirst{"version", "num_examples", "planner"};
constexpr std::array<const char*, 3> kKeyLast{"shuffle", "block_size", "shard"};

// -- writing -------------------------------------------------------------------

void AppendQuoted(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", u);
      out += escaped;
    } else {
      out += c;  // UTF-8 passes through: JSON text is UTF-8.
    }
  }
  out += '"';
}

void AppendKey(std::string& out, const char* name) {
  out += out.size() == 1 ? "" : ", ";
  AppendQuoted(out, name);
  out += ": ";
}

// -- reading: a small JSON parser ---------------------------------------------

// 0..15, or -1 for a character that is not a hex digit.
int HexDigit(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

// A parsed JSON value; `raw` is its text, for messages.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string_view raw;
  bool integral = false;          // a number without fraction or exponent
  std::string text;               // a string's decoded value
  std::vector<Json> items;        // an array's; an object's values
  std::vector<std::string> keys;  // an object's keys, one per item
};

// A state is flat; one level more (the shard) and room for keys a later
// release may add. Deeper nesting is refused before it can exhaust the stack.
constexpr int kMaxDepth = 16;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json Document() {
    Json value = Value(0);
    SkipSpace();
    if (pos_ != text_.size()) Fail("text after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw InvalidArgumentError(StrCat("Loader: the state is not valid JSON: ", what, " at byte ",
                                      pos_, " of ", text_.size()));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Eat(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void Expect(char c) {
    if (!Eat(c)) {
      Fail(pos_ < text_.size() ? StrCat("expected '", c, "', found '", text_[pos_], "'")
                               : StrCat("expected '", c, "', found the end of the text"));
    }
  }

  Json Value(int depth) {
    if (depth > kMaxDepth) Fail(StrCat("nested deeper than ", kMaxDepth, " levels"));
    SkipSpace();
    if (pos_ == text_.size()) Fail("expected a value, found the end of the text");
    const size_t start = pos_;
    Json v;
    const char c = text_[pos_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      if (!Eat('}')) {
        do {
          SkipSpace();
          if (pos_ == text_.size() || text_[pos_] != '"') Fail("expected a quoted key");
          std::string key = String();
          Expect(':');
          v.keys.push_back(std::move(key));
          v.items.push_back(Value(depth + 1));
        } while (Eat(','));
        Expect('}');
      }
    } else if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      if (!Eat(']')) {
        do {
          v.items.push_back(Value(depth + 1));
        } while (Eat(','));
        Expect(']');
      }
    } else if (c == '"') {
      v.kind = Json::kString;
      v.text = String();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::kNumber;
      v.integral = Number();
    } else if (Word("true") || Word("false")) {
      v.kind = Json::kBool;
    } else if (Word("null")) {
      v.kind = Json::kNull;
    } else {
      Fail(StrCat("unexpected '", c, "'"));
    }
    v.raw = text_.substr(start, pos_ - start);
    return v;
  }

  bool Word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool Digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }

  // JSON's number grammar; true when it is an integer (no fraction, no exponent).
  bool Number() {
    if (text_[pos_] == '-') ++pos_;
    const size_t int_start = pos_;
    if (!Digits()) Fail("expected digits");
    if (text_[int_start] == '0' && pos_ - int_start > 1) Fail("a number with a leading zero");
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!Digits()) Fail("expected digits after '.'");
      integral = false;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!Digits()) Fail("expected digits in the exponent");
      integral = false;
    }
    return integral;
  }

  uint32_t Hex4() {
    if (text_.size() - pos_ < 4) Fail("a \\u escape cut short");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const int digit = HexDigit(text_[pos_]);
      if (digit < 0) Fail("a \\u escape with a non-hex digit");
      code = code * 16 + static_cast<uint32_t>(digit);
    }
    return code;
  }

  static void AppendUtf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  // A quoted string at pos_, decoded (what Python's json.dumps escapes included).
  std::string String() {
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ == text_.size()) Fail("a string without its closing quote");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) Fail("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ == text_.size()) Fail("a string without its closing quote");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t code = Hex4();
          if (code >= 0xd800 && code < 0xdc00 && text_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            const uint32_t low = Hex4();
            if (low < 0xdc00 || low >= 0xe000) Fail("a \\u surrogate pair without its low half");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          } else if (code >= 0xd800 && code < 0xe000) {
            Fail("a lone \\u surrogate");
          }
          AppendUtf8(out, code);
          break;
        }
        default:
          Fail(StrCat("an unknown escape '\\", e, "'"));
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// -- reading: the fields -------------------------------------------------------

// What a value is, for messages: its JSON type and (cut short) its text.
std::string Found(const Json& v) {
  constexpr size_t kShown = 80;
  std::string raw(v.raw.substr(0, kShown));
  if (v.raw.size() > kShown) raw += "...";
  switch (v.kind) {
    case Json::kNull:
      return "null";
    case Json::kBool:
      return StrCat("bool ", raw);
    case Json::kNumber:
      return v.integral ? raw : StrCat("float ", raw);
    case Json::kString:
      return StrCat("string ", raw);
    case Json::kArray:
      return StrCat("array ", raw);
    case Json::kObject:
      return StrCat("object ", raw);
  }
  return raw;
}

// An integer in [0, 2^bits) (bits 63 or 64); InvalidArgumentError naming `name` otherwise.
uint64_t UnsignedField(const Json& v, const char* name, int bits) {
  if (v.kind != Json::kNumber || !v.integral) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", name, " must be an int, found ", Found(v)));
  }
  const uint64_t max = bits == 64 ? std::numeric_limits<uint64_t>::max()
                                  : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  bool in_range = v.raw[0] != '-' || v.raw == "-0";
  uint64_t value = 0;
  for (size_t i = v.raw[0] == '-' ? 1 : 0; in_range && i < v.raw.size(); ++i) {
    const auto digit = static_cast<uint64_t>(v.raw[i] - '0');
    in_range = value <= (max - digit) / 10;
    value = value * 10 + digit;
  }
  if (!in_range) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", name, " must be in [0, 2**", bits, "), found ", Found(v)));
  }
  return value;
}

int64_t CounterField(const Json& v, const char* name) {
  return static_cast<int64_t>(UnsignedField(v, name, 63));
}

const std::string& StringField(const Json& v, const char* name) {
  if (v.kind != Json::kString) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", name, " must be a string, found ", Found(v)));
  }
  return v.text;
}

std::optional<uint64_t> FingerprintField(const Json& v) {
  if (v.kind == Json::kNull) return std::nullopt;  // as a state saved before it was added
  bool hex = v.kind == Json::kString && !v.text.empty() && v.text.size() <= 16;
  uint64_t value = 0;
  for (size_t i = 0; hex && i < v.text.size(); ++i) {
    const int digit = HexDigit(v.text[i]);
    hex = digit >= 0;
    value = value * 16 + static_cast<uint64_t>(digit);
  }
  if (!hex) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's fingerprint must be 16 hex digits, found ", Found(v)));
  }
  return value;
}

ShuffleMode ShuffleField(const Json& v) {
  const std::string& name = StringField(v, "shuffle");
  try {
    return ParseShuffleMode(name);
  } catch (const InvalidArgumentError&) {
    throw InvalidArgumentError(StrCat(
        "Loader: the state's shuffle must be 'none', 'global' or 'block', found '", name, "'"));
  }
}

std::pair<int64_t, int64_t> ShardField(const Json& v) {
  if (v.kind != Json::kArray || v.items.size() != 2) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's shard must be [index, count], found ", v.raw.substr(0, 80)));
  }
  return {CounterField(v.items[0], "shard"), CounterField(v.items[1], "shard")};
}

// The object's members by name; refuses a key given twice (which one would win
// depends on the reader).
class Members {
 public:
  explicit Members(const Json& object) : object_(object) {
    std::set<std::string_view> seen;
    for (const std::string& key : object.keys) {
      if (!seen.insert(key).second) {
        throw InvalidArgumentError(StrCat("Loader: the state has '", key.substr(0, 80), "' twice"));
      }
    }
  }

  const Json* Find(std::string_view name) const {
    for (size_t i = 0; i < object_.keys.size(); ++i) {
      if (object_.keys[i] == name) return &object_.items[i];
    }
    return nullptr;
  }

  const Json& Get(std::string_view name) const { return *Find(name); }

 private:
  const Json& object_;
};

void CheckNothingMissing(const Members& members) {
  std::vector<const char*> required(kKeyFirst.begin(), kKeyFirst.end());
  required.push_back("seed");
  for (const Counter& c : kCounters) {
    if (!c.optional) required.push_back(c.name);
  }
  required.insert(required.end(), kKeyLast.begin(), kKeyLast.end());
  std::string missing;
  for (const char* name : required) {
    if (!members.Find(name)) missing += StrCat(missing.empty() ? "" : ", ", "'", name, "'");
  }
  if (!missing.empty()) {
    throw InvalidArgumentError(StrCat("Loader: the state lacks ", missing,
                                      "; expected a state from get_state() (Loader::state())"));
  }
}

}  // namespace

std::string LoaderStateToJson(const LoaderState& state) {
  if (!state.key) {
    throw InvalidArgumentError(
        "Loader: a LoaderState without its StreamKey (one made by hand) has no text form; save "
        "what Loader::state() returns");
  }
  const StreamKey& key = *state.key;
  std::string out = "{";
  AppendKey(out, "seed");
  out += std::to_string(state.seed);
  for (const Counter& c : kCounters) {
    AppendKey(out, c.name);
    out += std::to_string(state.*c.field);
  }
  AppendKey(out, "version");
  out += std::to_string(key.version);
  AppendKey(out, "num_examples");
  out += std::to_string(key.num_examples);
  AppendKey(out, "fingerprint");
  if (key.fingerprint) {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(*key.fingerprint));
    AppendQuoted(out, hex);
  } else {
    out += "null";
  }
  AppendKey(out, "planner");
  AppendQuoted(out, key.planner);
  AppendKey(out, "shuffle");
  AppendQuoted(out, ShuffleModeName(key.shuffle));
  AppendKey(out, "block_size");
  out += std::to_string(key.block_size);
  AppendKey(out, "shard");
  out += StrCat("[", key.shard_index, ", ", key.shard_count, "]");
  out += "}";
  return out;
}

LoaderState LoaderStateFromJson(std::string_view text) {
  if (text.size() > kMaxStateJsonBytes) {
    throw InvalidArgumentError(StrCat("Loader: the state text holds ", text.size(),
                                      " bytes, more than kMaxStateJsonBytes = ", kMaxStateJsonBytes,
                                      " (a state is a few hundred)"));
  }
  const Json document = Parser(text).Document();
  if (document.kind != Json::kObject) {
    throw InvalidArgumentError(StrCat("Loader: the state must be a JSON object from get_state(), ",
                                      "found ", Found(document)));
  }
  const Members members(document);
  CheckNothingMissing(members);
  LoaderState state;
  state.seed = UnsignedField(members.Get("seed"), "seed", 64);
  for (const Counter& c : kCounters) {
    if (const Json* v = members.Find(c.name)) state.*c.field = CounterField(*v, c.name);
  }
  StreamKey key;
  key.version = CounterField(members.Get("version"), "version");
  key.num_examples = CounterField(members.Get("num_examples"), "num_examples");
  if (const Json* v = members.Find("fingerprint")) key.fingerprint = FingerprintField(*v);
  key.planner = StringField(members.Get("planner"), "planner");
  key.shuffle = ShuffleField(members.Get("shuffle"));
  key.block_size = CounterField(members.Get("block_size"), "block_size");
  std::tie(key.shard_index, key.shard_count) = ShardField(members.Get("shard"));
  state.key = std::move(key);
  return state;
}

}  // namespace jaxbatch
