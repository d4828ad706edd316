// Test-only: a small Mooncake-format trace for the trace-driven study's tests.
#pragma once

#include <string>

#include "absl/strings/str_format.h"

namespace cacheroute::testing {

// `n` requests `gap_ms` apart from `start_ms`, request i in conversation i % 5 (its first two
// blocks: the shared block 0 and one of the conversation's), 1,100 prompt tokens in three
// 512-token blocks.
inline std::string SmallTrace(int n, int gap_ms, int start_ms = 0) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    absl::StrAppendFormat(&out,
                          "{\"timestamp\": %d, \"input_length\": 1100, \"output_length\": 20, "
                          "\"hash_ids\": [0, %d, %d]}\n",
                          start_ms + i * gap_ms, 1 + i % 5, 100 + i);
  }
  return out;
}

}  // namespace cacheroute::testing
