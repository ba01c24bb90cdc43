#include "jaxbatch/base/json.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  JsonValue Document() {
    JsonValue value = Value(0);
    SkipSpace();
    if (pos_ != text_.size()) Fail("text after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw InvalidArgumentError(
        StrCat(what_, " is not valid JSON: ", what, " at byte ", pos_, " of ", text_.size()));
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

  JsonValue Value(int depth) {
    if (depth > kMaxJsonDepth) Fail(StrCat("nested deeper than ", kMaxJsonDepth, " levels"));
    SkipSpace();
    if (pos_ == text_.size()) Fail("expected a value, found the end of the text");
    const size_t start = pos_;
    JsonValue v;
    const char c = text_[pos_];
    if (c == '{') {
      v.kind = JsonValue::kObject;
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
      v.kind = JsonValue::kArray;
      ++pos_;
      if (!Eat(']')) {
        do {
          v.items.push_back(Value(depth + 1));
        } while (Eat(','));
        Expect(']');
      }
    } else if (c == '"') {
      v.kind = JsonValue::kString;
      v.text = String();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::kNumber;
      v.integral = Number();
    } else if (Word("true") || Word("false")) {
      v.kind = JsonValue::kBool;
    } else if (Word("null")) {
      v.kind = JsonValue::kNull;
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
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue ParseJson(std::string_view text, std::string_view what) {
  return Parser(text, what).Document();
}

std::string DescribeJson(const JsonValue& v) {
  constexpr size_t kShown = 80;
  std::string raw(v.raw.substr(0, kShown));
  if (v.raw.size() > kShown) raw += "...";
  switch (v.kind) {
    case JsonValue::kNull:
      return "null";
    case JsonValue::kBool:
      return StrCat("bool ", raw);
    case JsonValue::kNumber:
      return v.integral ? raw : StrCat("float ", raw);
    case JsonValue::kString:
      return StrCat("string ", raw);
    case JsonValue::kArray:
      return StrCat("array ", raw);
    case JsonValue::kObject:
      return StrCat("object ", raw);
  }
  return raw;
}

void AppendJsonString(std::string& out, std::string_view text) {
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

int HexDigit(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

}  // namespace jaxbatch
