// See mooncake.h.
#include "tools/eval/workload/mooncake.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <istream>
#include <ostream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/eval/workload/json_line.h"

namespace cacheroute::workload {
namespace {

class LineError {
 public:
  LineError(std::string_view source, int line) : source_(source), line_(line) {}

  absl::Status operator()(std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrFormat("%s line %d: %s", source_, line_, message));
  }
  absl::Status Field(std::string_view field, std::string_view message) const {
    return (*this)(absl::StrFormat("field \"%s\": %s", field, message));
  }

 private:
  std::string_view source_;
  int line_;
};

std::string Shown(const JsonValue& v) {
  switch (v.type) {
    case JsonValue::Type::kNumber:
      return v.text;
    case JsonValue::Type::kString:
      return JsonQuote(v.text);
    case JsonValue::Type::kBool:
      return v.boolean ? "true" : "false";
    case JsonValue::Type::kNull:
      return "null";
    case JsonValue::Type::kArray:
      return "an array";
    case JsonValue::Type::kObject:
      return "an object";
  }
  return "?";
}

// A required or optional unsigned field no larger than `max`.
absl::Status ReadUnsigned(const JsonValue& line, std::string_view name, uint64_t max,
                          const LineError& error, bool required, std::optional<uint64_t>* out) {
  const JsonValue* v = line.Find(name);
  if (v == nullptr) {
    if (required) return error.Field(name, "missing");
    return absl::OkStatus();
  }
  const std::optional<uint64_t> n = v->AsUint64();
  if (!n || *n > max) {
    return error.Field(name,
                       absl::StrFormat("expected an integer in [0, %d], got %s", max, Shown(*v)));
  }
  *out = n;
  return absl::OkStatus();
}

std::string FormatMilliseconds(double seconds) {
  const double ms = seconds * 1000.0;
  const double rounded = std::round(ms);
  if (std::abs(ms - rounded) < 1e-6 && std::abs(rounded) < 9e15) {
    return absl::StrFormat("%.0f", rounded);
  }
  std::string text = absl::StrFormat("%.3f", ms);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

}  // namespace

std::string KeyFromBlocks(std::span<const uint64_t> hash_ids, uint32_t n) {
  std::string key = "h";
  const size_t count = std::min<size_t>(n, hash_ids.size());
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) key += '-';
    absl::StrAppend(&key, hash_ids[i]);
  }
  return key;
}

absl::StatusOr<Workload> ReadMooncakeTrace(std::istream& in, const TraceReadOptions& options,
                                           std::string_view source) {
  if (options.block_size < 1) return absl::InvalidArgumentError("block_size must be >= 1, got 0");
  Workload workload;
  workload.block_size = options.block_size;
  std::optional<uint32_t> file_block_size;
  std::string text;
  int line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    const LineError error(source, line_number);
    absl::StatusOr<JsonValue> line = ParseJson(text);
    if (!line.ok()) return error(absl::StrCat("malformed JSON: ", line.status().message()));
    if (line->type != JsonValue::Type::kObject) return error("expected a JSON object");

    Request r;
    const JsonValue* ts = line->Find("timestamp");
    if (ts == nullptr) return error.Field("timestamp", "missing");
    const std::optional<double> ms = ts->AsDouble();
    if (!ms || *ms < 0) {
      return error.Field("timestamp", "expected a number of milliseconds >= 0, got " + Shown(*ts));
    }
    r.arrival_s = *ms / 1000.0;
    std::optional<uint64_t> value;
    if (auto s = ReadUnsigned(*line, "input_length", UINT32_MAX, error, true, &value); !s.ok()) {
      return s;
    }
    r.input_length = static_cast<uint32_t>(*value);
    if (auto s = ReadUnsigned(*line, "output_length", UINT32_MAX, error, true, &value); !s.ok()) {
      return s;
    }
    r.output_length = static_cast<uint32_t>(*value);

    const JsonValue* ids = line->Find("hash_ids");
    if (ids == nullptr) return error.Field("hash_ids", "missing");
    if (ids->type != JsonValue::Type::kArray) {
      return error.Field("hash_ids",
                         "expected an array of non-negative integers, got " + Shown(*ids));
    }
    r.hash_ids.reserve(ids->items.size());
    for (size_t i = 0; i < ids->items.size(); ++i) {
      const std::optional<uint64_t> id = ids->items[i].AsUint64();
      if (!id) {
        return error.Field("hash_ids", absl::StrFormat("element %d: expected a non-negative "
                                                       "integer, got %s",
                                                       i, Shown(ids->items[i])));
      }
      r.hash_ids.push_back(*id);
    }

    std::optional<uint64_t> block_size;
    if (auto s = ReadUnsigned(*line, "block_size", 1 << 20, error, false, &block_size); !s.ok()) {
      return s;
    }
    if (block_size) {
      if (*block_size == 0) return error.Field("block_size", "expected an integer >= 1, got 0");
      if (file_block_size && *file_block_size != *block_size) {
        return error.Field("block_size", absl::StrFormat("%d differs from %d on earlier lines",
                                                         *block_size, *file_block_size));
      }
      file_block_size = static_cast<uint32_t>(*block_size);
    }

    const JsonValue* key = line->Find("key");
    if (key != nullptr && key->type != JsonValue::Type::kString) {
      return error.Field("key", "expected a string, got " + Shown(*key));
    }
    if (options.key_blocks) {
      r.key = KeyFromBlocks(r.hash_ids, *options.key_blocks);
    } else if (key != nullptr) {
      r.key = key->text;
    } else {
      r.key = KeyFromBlocks(r.hash_ids, kDefaultKeyBlocks);
    }

    std::optional<uint64_t> thread_id, turn, current_turn;
    if (auto s = ReadUnsigned(*line, "thread_id", UINT64_MAX, error, false, &thread_id); !s.ok()) {
      return s;
    }
    if (auto s = ReadUnsigned(*line, "turn", UINT32_MAX, error, false, &turn); !s.ok()) return s;
    if (turn && *turn == 0) return error.Field("turn", "expected an integer >= 1, got 0");
    if (auto s =
            ReadUnsigned(*line, "current_turn_length", UINT32_MAX, error, false, &current_turn);
        !s.ok()) {
      return s;
    }
    // Without thread ids every request is its own thread.
    r.thread_id = thread_id ? *thread_id : workload.requests.size();
    r.turn = turn ? static_cast<uint32_t>(*turn) : 1;
    r.current_turn_length = current_turn ? static_cast<uint32_t>(*current_turn) : 0;
    workload.requests.push_back(std::move(r));
  }
  if (in.bad()) return absl::DataLossError(absl::StrFormat("%s: read error", source));
  if (file_block_size) workload.block_size = *file_block_size;
  std::stable_sort(workload.requests.begin(), workload.requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  return workload;
}

absl::StatusOr<Workload> ReadMooncakeTraceFile(const std::string& path,
                                               const TraceReadOptions& options) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open trace \"%s\"", path));
  return ReadMooncakeTrace(in, options, path);
}

absl::Status WriteMooncakeTrace(const Workload& workload, std::ostream& out) {
  std::string line;
  for (const Request& r : workload.requests) {
    line.clear();
    absl::StrAppend(&line, "{\"timestamp\": ", FormatMilliseconds(r.arrival_s),
                    ", \"input_length\": ", r.input_length,
                    ", \"output_length\": ", r.output_length, ", \"hash_ids\": [");
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      if (i > 0) line += ", ";
      absl::StrAppend(&line, r.hash_ids[i]);
    }
    absl::StrAppend(&line, "], \"key\": ", JsonQuote(r.key),
                    ", \"block_size\": ", workload.block_size, ", \"thread_id\": ", r.thread_id,
                    ", \"turn\": ", r.turn);
    if (r.current_turn_length > 0) {
      absl::StrAppend(&line, ", \"current_turn_length\": ", r.current_turn_length);
    }
    line += "}\n";
    out << line;
  }
  out.flush();
  if (!out) return absl::DataLossError("writing the trace failed");
  return absl::OkStatus();
}

absl::Status WriteMooncakeTraceFile(const Workload& workload, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::NotFoundError(absl::StrFormat("cannot create \"%s\"", path));
  if (absl::Status s = WriteMooncakeTrace(workload, out); !s.ok()) {
    return absl::DataLossError(absl::StrFormat("writing \"%s\" failed", path));
  }
  return absl::OkStatus();
}

void RemapHashIdsDense(Workload& workload) {
  absl::flat_hash_map<uint64_t, uint64_t> dense;
  for (Request& r : workload.requests) {
    for (uint64_t& id : r.hash_ids) id = dense.try_emplace(id, dense.size()).first->second;
  }
}

absl::Status ScaleArrivalTimes(Workload& workload, double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("time scale factor must be a finite number > 0, got %g", factor));
  }
  for (Request& r : workload.requests) r.arrival_s *= factor;
  return absl::OkStatus();
}

absl::Status RescaleToQps(Workload& workload, double target_qps) {
  if (!(target_qps > 0) || !std::isfinite(target_qps)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target QPS must be a finite number > 0, got %g", target_qps));
  }
  if (workload.requests.size() < 2) {
    return absl::FailedPreconditionError("a trace needs two requests to have a rate");
  }
  const auto [lo, hi] = std::minmax_element(
      workload.requests.begin(), workload.requests.end(),
      [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  const double span = hi->arrival_s - lo->arrival_s;
  if (!(span > 0)) return absl::FailedPreconditionError("the trace's requests all arrive at once");
  const double qps = static_cast<double>(workload.requests.size()) / span;
  return ScaleArrivalTimes(workload, qps / target_qps);
}

}  // namespace cacheroute::workload
