// Mooncake-format traces (kvcache-ai/Mooncake FAST'25 release): JSON lines of
//   {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [id, ...]}
// where hash_ids are chained prefix-block hashes (512 tokens per block in that release). Several
// benchmark tools replay this format, so the generator writes it too, adding "key", "block_size",
// "thread_id", "turn" and "current_turn_length"; readers of the original format ignore them.
//
// Usage:
//   absl::StatusOr<Workload> w = ReadMooncakeTraceFile("trace.jsonl", {.key_blocks = 2});
//   RescaleToQps(*w, 120);
//   WriteMooncakeTraceFile(*w, "fast.jsonl");
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::workload {

inline constexpr uint32_t kMooncakeBlockSize = 512;
inline constexpr uint32_t kDefaultKeyBlocks = 2;

struct TraceReadOptions {
  // Tokens per hash id for lines without a "block_size" field.
  uint32_t block_size = kMooncakeBlockSize;
  // The routing key is the first key_blocks hash ids (KeyFromBlocks). Unset: a line's "key" field
  // if it has one, else the first kDefaultKeyBlocks ids.
  std::optional<uint32_t> key_blocks;
};

// "h" followed by the first n ids joined by '-', e.g. "h12-873"; fewer if the request has fewer.
std::string KeyFromBlocks(std::span<const uint64_t> hash_ids, uint32_t n);

// Reads a whole trace. Blank lines are skipped; requests are ordered by arrival (stable).
// Requests without "thread_id" are each their own thread. Errors are InvalidArgument and name the
// source, the line number and the field, e.g. `trace.jsonl line 3: field "hash_ids": ...`.
absl::StatusOr<Workload> ReadMooncakeTrace(std::istream& in, const TraceReadOptions& options,
                                           std::string_view source = "trace");
absl::StatusOr<Workload> ReadMooncakeTraceFile(const std::string& path,
                                               const TraceReadOptions& options);

// One line per request, timestamps in milliseconds (to the microsecond).
absl::Status WriteMooncakeTrace(const Workload& workload, std::ostream& out);
absl::Status WriteMooncakeTraceFile(const Workload& workload, const std::string& path);

// Replaces hash ids by 0, 1, 2, … in order of first appearance, as the Mooncake release does:
// equal ids stay equal and distinct ones distinct, so prefix structure is kept, and the ids fit
// tools that read them as signed 64-bit (or smaller) integers.
void RemapHashIdsDense(Workload& workload);

// Multiplies every arrival time by `factor` (> 0): 0.5 doubles the request rate.
absl::Status ScaleArrivalTimes(Workload& workload, double factor);
// Scales arrival times so that requests / (last arrival - first arrival) becomes target_qps.
// FailedPrecondition when the trace spans no time.
absl::Status RescaleToQps(Workload& workload, double target_qps);

}  // namespace cacheroute::workload
