// Comma-separated lists on cacheroute-sim's command line (--loads, --seeds, --gateways, --hit,
// --osl):
// parsed whole or refused, the error naming the flag and the bad item.
//
// Usage:
//   absl::StatusOr<std::vector<double>> loads = ParseNumberList("30, 60,100", "--loads");
//   // "--seeds: bad seed \"x\" in \"1,x\""
//   absl::StatusOr<std::vector<uint64_t>> seeds = ParseSeedList("1,x", "--seeds");
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cacheroute::sim::study {

// Finite numbers; items may be padded with spaces.
absl::StatusOr<std::vector<double>> ParseNumberList(absl::string_view text, absl::string_view flag);
// Unsigned integers.
absl::StatusOr<std::vector<uint64_t>> ParseSeedList(absl::string_view text, absl::string_view flag);
// Unsigned integers below 2^32 (--gateways).
absl::StatusOr<std::vector<uint32_t>> ParseCountList(absl::string_view text,
                                                     absl::string_view flag);

}  // namespace cacheroute::sim::study
