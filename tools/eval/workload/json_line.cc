// See json_line.h.
#include "tools/eval/workload/json_line.h"

#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cacheroute::workload {
namespace {

// Builds a JsonValue from nlohmann's SAX events (its parser is iterative, so depth is bounded
// here, not by the stack). Numbers keep their text: floats as written, integers formatted.
class Builder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return Scalar(JsonValue{}); }
  bool boolean(bool value) override {
    JsonValue v;
    v.type = JsonValue::Type::kBool;
    v.boolean = value;
    return Scalar(std::move(v));
  }
  bool number_integer(number_integer_t value) override { return Number(absl::StrCat(value)); }
  bool number_unsigned(number_unsigned_t value) override { return Number(absl::StrCat(value)); }
  bool number_float(number_float_t, const string_t& text) override { return Number(text); }
  bool string(string_t& value) override {
    JsonValue v;
    v.type = JsonValue::Type::kString;
    v.text = std::move(value);
    return Scalar(std::move(v));
  }
  bool binary(binary_t&) override { return false; }  // not produced by the JSON parser
  bool start_object(std::size_t) override { return Open(JsonValue::Type::kObject); }
  bool key(string_t& name) override {
    stack_.back()->members.push_back({std::move(name), JsonValue{}});
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(JsonValue::Type::kArray); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    if (error_.empty()) {
      error_ = e.what();
      // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error …": keep
      // what follows the position, which the message below gives as a column of its own.
      if (const size_t colon = error_.find(": "); colon != std::string::npos) {
        error_ = error_.substr(colon + 2);
      }
      position_ = position;
    }
    return false;
  }

  absl::StatusOr<JsonValue> Result(bool ok) {
    if (!error_.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("column %d: %s", position_, error_));
    }
    if (!ok || !done_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("column %d: nested more than %d levels deep", position_, kMaxJsonDepth));
    }
    return std::move(root_);
  }
  void set_position(size_t position) { position_ = position; }

 private:
  // Where the next value goes: the root, the last key's value, or a new array item.
  JsonValue* Slot() {
    if (stack_.empty()) return &root_;
    JsonValue* parent = stack_.back();
    if (parent->type == JsonValue::Type::kArray) return &parent->items.emplace_back();
    return &parent->members.back().value;
  }
  bool Scalar(JsonValue value) {
    *Slot() = std::move(value);
    done_ = stack_.empty();
    return true;
  }
  bool Number(std::string text) {
    JsonValue v;
    v.type = JsonValue::Type::kNumber;
    v.text = std::move(text);
    return Scalar(std::move(v));
  }
  bool Open(JsonValue::Type type) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth)) return false;
    JsonValue* slot = Slot();
    slot->type = type;
    stack_.push_back(slot);
    return true;
  }
  bool Close() {
    stack_.pop_back();
    done_ = stack_.empty();
    return true;
  }

  JsonValue root_;
  std::vector<JsonValue*> stack_;  // open arrays and objects; items never move while open
  bool done_ = false;
  std::string error_;
  size_t position_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(std::string_view name) const {
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    if (it->name == name) return &it->value;
  }
  return nullptr;
}

std::optional<double> JsonValue::AsDouble() const {
  if (type != Type::kNumber) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<uint64_t> JsonValue::AsUint64() const {
  if (type != Type::kNumber) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && end == text.data() + text.size()) return v;
  // 3.0, 1e3 or -0: accept when the value is integral, not negative and exactly representable.
  const std::optional<double> d = AsDouble();
  if (!d || *d != std::floor(*d) || *d < 0 || *d >= 0x1.0p53) return std::nullopt;
  return static_cast<uint64_t>(*d);
}

absl::StatusOr<JsonValue> ParseJson(std::string_view text) {
  Builder builder;
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder,
                                            nlohmann::json::input_format_t::json, /*strict=*/true);
  return builder.Result(ok);
}

std::string JsonQuote(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cacheroute::workload
