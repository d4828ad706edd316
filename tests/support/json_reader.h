// Test-only: a small strict JSON (RFC 8259) reader, so tests can check that the client's JSON
// output is exactly one well-formed document and inspect it. Not for production input: it is
// recursive and keeps every value in memory.
//
// Usage:
//   std::optional<JsonValue> doc = ParseJson(text);  // nullopt unless `text` is one valid value
//   const JsonValue* loads = doc->Find("loads");
//   REQUIRE(loads->array.size() == 4);
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cacheroute::client::testing {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string number_text;  // the number exactly as written
  std::string string;       // decoded
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in document order

  const JsonValue* Find(std::string_view name) const {
    for (const auto& [key, value] : object) {
      if (key == name) return &value;
    }
    return nullptr;
  }
};

namespace json_internal {

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  std::optional<JsonValue> ReadDocument() {
    JsonValue value;
    SkipSpace();
    if (!ReadValue(&value, 0)) return std::nullopt;
    SkipSpace();
    if (pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(std::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  bool ReadValue(JsonValue* value, int depth) {
    if (depth > kMaxDepth || pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (c == '{') return ReadObject(value, depth);
    if (c == '[') return ReadArray(value, depth);
    if (c == '"') {
      value->type = JsonValue::Type::kString;
      return ReadString(&value->string);
    }
    if (Consume("null")) return true;
    if (Consume("true") || Consume("false")) {
      value->type = JsonValue::Type::kBool;
      value->boolean = text_[pos_ - 4] == 't';
      return true;
    }
    return ReadNumber(value);
  }

  bool ReadObject(JsonValue* value, int depth) {
    value->type = JsonValue::Type::kObject;
    ++pos_;
    SkipSpace();
    if (Consume("}")) return true;
    while (true) {
      SkipSpace();
      std::string key;
      if (pos_ >= text_.size() || text_[pos_] != '"' || !ReadString(&key)) return false;
      SkipSpace();
      if (!Consume(":")) return false;
      SkipSpace();
      JsonValue member;
      if (!ReadValue(&member, depth + 1)) return false;
      value->object.emplace_back(std::move(key), std::move(member));
      SkipSpace();
      if (Consume("}")) return true;
      if (!Consume(",")) return false;
    }
  }

  bool ReadArray(JsonValue* value, int depth) {
    value->type = JsonValue::Type::kArray;
    ++pos_;
    SkipSpace();
    if (Consume("]")) return true;
    while (true) {
      SkipSpace();
      JsonValue element;
      if (!ReadValue(&element, depth + 1)) return false;
      value->array.push_back(std::move(element));
      SkipSpace();
      if (Consume("]")) return true;
      if (!Consume(",")) return false;
    }
  }

  bool ReadHex4(uint32_t* code) {
    if (pos_ + 4 > text_.size()) return false;
    const auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, *code, 16);
    if (ec != std::errc() || end != text_.data() + pos_ + 4) return false;
    pos_ += 4;
    return true;
  }

  static void AppendUtf8(std::string* out, uint32_t code) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  bool ReadString(std::string* out) {
    ++pos_;
    while (pos_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= text_.size()) return false;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t code = 0;
          if (!ReadHex4(&code)) return false;
          if (code >= 0xD800 && code <= 0xDBFF) {
            uint32_t low = 0;
            if (!Consume("\\u") || !ReadHex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code <= 0xDFFF) {
            return false;
          }
          AppendUtf8(out, code);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  bool ReadDigits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }

  // number = [ "-" ] ( "0" / [1-9] *DIGIT ) [ "." 1*DIGIT ] [ ( "e" / "E" ) [ "+" / "-" ] 1*DIGIT ]
  bool ReadNumber(JsonValue* value) {
    const size_t start = pos_;
    Consume("-");
    if (Consume("0")) {
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') return false;
    } else if (!ReadDigits()) {
      return false;
    }
    if (Consume(".") && !ReadDigits()) return false;
    if (Consume("e") || Consume("E")) {
      if (!Consume("+")) Consume("-");
      if (!ReadDigits()) return false;
    }
    value->type = JsonValue::Type::kNumber;
    value->number_text = std::string(text_.substr(start, pos_ - start));
    const auto [end, ec] =
        std::from_chars(text_.data() + start, text_.data() + pos_, value->number);
    return ec == std::errc() && end == text_.data() + pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace json_internal

inline std::optional<JsonValue> ParseJson(std::string_view text) {
  return json_internal::Reader(text).ReadDocument();
}

}  // namespace cacheroute::client::testing
