// Test-only: a strict JSON reader, so tests can check that a program's JSON output is exactly one
// well-formed document and inspect it. A view of workload::ParseJson's values (nlohmann's parser
// underneath) in the shape the tests read: number as a double and as written, decoded strings,
// arrays and objects in document order.
//
// Usage:
//   std::optional<JsonValue> doc = ParseJson(text);  // nullopt unless `text` is one valid value
//   const JsonValue* loads = doc->Find("loads");
//   REQUIRE(loads->array.size() == 4);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/eval/workload/json_line.h"

namespace cacheroute::client::testing {

// An object's member is a struct, not a std::pair: clang cannot instantiate
// std::pair<std::string, JsonValue> while JsonValue is still being defined.
struct JsonMember;

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string number_text;  // the number as written (integers: in canonical form)
  std::string string;       // decoded
  std::vector<JsonValue> array;
  std::vector<JsonMember> object;  // in document order

  const JsonValue* Find(std::string_view name) const;
};

struct JsonMember {
  std::string name;
  JsonValue value;
};

inline const JsonValue* JsonValue::Find(std::string_view name) const {
  for (const JsonMember& member : object) {
    if (member.name == name) return &member.value;
  }
  return nullptr;
}

namespace json_internal {

inline JsonValue Convert(workload::JsonValue&& in) {
  using In = workload::JsonValue::Type;
  JsonValue out;
  switch (in.type) {
    case In::kNull:
      break;
    case In::kBool:
      out.type = JsonValue::Type::kBool;
      out.boolean = in.boolean;
      break;
    case In::kNumber:
      out.type = JsonValue::Type::kNumber;
      out.number = in.AsDouble().value_or(0.0);
      out.number_text = std::move(in.text);
      break;
    case In::kString:
      out.type = JsonValue::Type::kString;
      out.string = std::move(in.text);
      break;
    case In::kArray:
      out.type = JsonValue::Type::kArray;
      for (workload::JsonValue& item : in.items) out.array.push_back(Convert(std::move(item)));
      break;
    case In::kObject:
      out.type = JsonValue::Type::kObject;
      for (auto& [key, value] : in.members) {
        out.object.push_back({std::move(key), Convert(std::move(value))});
      }
      break;
  }
  return out;
}

}  // namespace json_internal

inline std::optional<JsonValue> ParseJson(std::string_view text) {
  absl::StatusOr<workload::JsonValue> parsed = workload::ParseJson(text);
  if (!parsed.ok()) return std::nullopt;
  return json_internal::Convert(*std::move(parsed));
}

}  // namespace cacheroute::client::testing
