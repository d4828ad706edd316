// Fuzz target: Mooncake-format trace lines (tools/eval/workload/mooncake.h, ReadMooncakeTrace) and
// the strict JSON line reader under them (json_line.h, ParseJson), both fed the same bytes.
// Invariants: ParseJson accepts or names a column, never nests past kMaxJsonDepth, and what it
// reads as a string survives JsonQuote → ParseJson; an accepted trace is ordered by arrival with
// finite times >= 0, and writing it (WriteMooncakeTrace) reads back to the same requests.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "tools/eval/workload/json_line.h"
#include "tools/eval/workload/mooncake.h"
#include "tools/eval/workload/workload.h"

namespace {

using cacheroute::workload::JsonValue;

int Depth(const JsonValue& v) {
  int deepest = 0;
  for (const JsonValue& item : v.items) deepest = std::max(deepest, Depth(item));
  for (const auto& [name, member] : v.members) deepest = std::max(deepest, Depth(member));
  return deepest + (v.type == JsonValue::Type::kArray || v.type == JsonValue::Type::kObject);
}

// Every string (values and member names) quoted and read back is itself.
void CheckStrings(const JsonValue& v) {
  auto check = [](const std::string& s) {
    absl::StatusOr<JsonValue> back = cacheroute::workload::ParseJson(cacheroute::workload::JsonQuote(s));
    FUZZ_CHECK(back.ok(), "JsonQuote of a decoded string does not parse: " + back.status().ToString());
    FUZZ_CHECK(back->type == JsonValue::Type::kString && back->text == s);
  };
  if (v.type == JsonValue::Type::kString) check(v.text);
  for (const JsonValue& item : v.items) CheckStrings(item);
  for (const auto& [name, member] : v.members) {
    check(name);
    CheckStrings(member);
  }
}

bool CloseTimes(double a, double b) {
  // Written to the microsecond in milliseconds ("%.3f").
  return std::abs(a - b) <= 1e-6 + 1e-12 * std::max(std::abs(a), std::abs(b));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute::workload;
  const std::string text(reinterpret_cast<const char*>(data), size);

  // The JSON reader on the whole input as one line.
  absl::StatusOr<JsonValue> json = ParseJson(text);
  if (json.ok()) {
    FUZZ_CHECK(Depth(*json) <= kMaxJsonDepth);
    CheckStrings(*json);
    if (json->type == JsonValue::Type::kNumber) {
      if (std::optional<uint64_t> n = json->AsUint64(); n.has_value() && json->AsDouble()) {
        FUZZ_CHECK(*n == 0 || *json->AsDouble() > 0);
      }
    }
  } else {
    FUZZ_CHECK(json.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(json.status().message().find("column") != std::string_view::npos,
               json.status().ToString());
  }

  // The trace reader on the input as a file of lines.
  std::istringstream in(text);
  absl::StatusOr<Workload> w = ReadMooncakeTrace(in, {}, "fuzz.jsonl");
  if (!w.ok()) {
    FUZZ_CHECK(w.status().code() == absl::StatusCode::kInvalidArgument, w.status().ToString());
    return 0;
  }
  FUZZ_CHECK(w->block_size >= 1);
  for (size_t i = 0; i < w->requests.size(); ++i) {
    const Request& r = w->requests[i];
    FUZZ_CHECK(std::isfinite(r.arrival_s) && r.arrival_s >= 0);
    FUZZ_CHECK(i == 0 || w->requests[i - 1].arrival_s <= r.arrival_s, "not ordered by arrival");
    FUZZ_CHECK(r.turn >= 1);
  }
  std::ostringstream out;
  FUZZ_CHECK(WriteMooncakeTrace(*w, out).ok());
  std::istringstream written(out.str());
  absl::StatusOr<Workload> back = ReadMooncakeTrace(written, {}, "written.jsonl");
  FUZZ_CHECK(back.ok(), "a written trace does not read back: " + back.status().ToString());
  FUZZ_CHECK(back->block_size == w->block_size);
  FUZZ_CHECK(back->requests.size() == w->requests.size());
  for (size_t i = 0; i < w->requests.size(); ++i) {
    const Request& a = w->requests[i];
    const Request& b = back->requests[i];
    FUZZ_CHECK(CloseTimes(a.arrival_s, b.arrival_s), "arrival changed in the round trip");
    FUZZ_CHECK(a.key == b.key && a.hash_ids == b.hash_ids && a.input_length == b.input_length &&
               a.output_length == b.output_length && a.thread_id == b.thread_id &&
               a.turn == b.turn && a.current_turn_length == b.current_turn_length,
               "a request changed in the round trip");
  }
  return 0;
}
