// JSON for the engine's small text forms (a loader state, load/state_json.h):
// a strict RFC 8259 reader whose values keep their source text, so messages
// can show what was found and integers of any size are read exactly by the
// caller, and the string quoting its writers use.
//
// Example:
//   const JsonValue v = ParseJson(text, "Loader: the state");
//   if (v.kind != JsonValue::kObject) throw ...("expected an object, found ", DescribeJson(v));
#ifndef JAXBATCH_BASE_JSON_H_
#define JAXBATCH_BASE_JSON_H_

#include <string>
#include <string_view>
#include <vector>

namespace jaxbatch {

// A parsed JSON value. It views the text it was parsed from (`raw`), which
// must outlive it.
struct JsonValue {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string_view raw;
  bool integral = false;          // a number without fraction or exponent
  std::string text;               // a string's decoded value (UTF-8)
  std::vector<JsonValue> items;   // an array's; an object's values
  std::vector<std::string> keys;  // an object's keys, one per item, in order
};

// Nesting deeper than this is refused before it can exhaust the stack.
inline constexpr int kMaxJsonDepth = 16;

// The value `text` holds. Throws InvalidArgumentError "<what> is not valid
// JSON: <problem> at byte N of M" for anything else (NaN, a trailing comma,
// a lone surrogate, text after the value, nesting past kMaxJsonDepth).
JsonValue ParseJson(std::string_view text, std::string_view what);

// What a value is, for messages: "null", "bool true", "7", "float 1.5",
// "string \"x\"", "array [0]", "object {...}" (its text cut at 80 characters).
std::string DescribeJson(const JsonValue& value);

// Appends `text` as a quoted JSON string (UTF-8 passes through).
void AppendJsonString(std::string& out, std::string_view text);

// 0..15, or -1 for a character that is not a hex digit.
int HexDigit(char c);

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_JSON_H_
