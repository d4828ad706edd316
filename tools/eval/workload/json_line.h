// A strict JSON (RFC 8259) reader for one line of a JSONL trace, on nlohmann's parser (its SAX
// events build a JsonValue). Numbers keep their text, so 64-bit integers (hash ids) are read
// without passing through a double. Nesting is limited to kMaxJsonDepth levels. Errors name the
// column.
//
// Usage:
//   absl::StatusOr<JsonValue> v = ParseJson(R"({"timestamp": 0, "hash_ids": [1, 2]})");
//   const JsonValue* ids = v->Find("hash_ids");
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cacheroute::workload {

inline constexpr int kMaxJsonDepth = 32;

// One member of an object; defined below. Not std::pair<std::string, JsonValue>: clang with
// libstdc++ cannot instantiate that pair while JsonValue is being defined (its constructor
// constraints recurse into the incomplete pair), so the header did not compile with clang.
struct JsonMember;

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;              // a number as written, or a string decoded to UTF-8
  std::vector<JsonValue> items;  // kArray
  std::vector<JsonMember> members;  // kObject, in document order

  // The last member named `name` (JSON leaves duplicates to the reader; the last one wins).
  const JsonValue* Find(std::string_view name) const;
  // The number as a double, if this is a number.
  std::optional<double> AsDouble() const;
  // The number as an unsigned integer, if this is a number written as an integer in range
  // (or with a zero fraction, like 3.0; 1e3 is accepted too).
  std::optional<uint64_t> AsUint64() const;
};

struct JsonMember {
  std::string name;
  JsonValue value;
};

// Parses exactly one JSON value (surrounding white space allowed). InvalidArgument on anything
// else, with the 1-based column of the problem.
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

// `text` as a JSON string literal, quotes included (nlohmann's escaping; invalid UTF-8 becomes U+FFFD).
std::string JsonQuote(std::string_view text);

}  // namespace cacheroute::workload
