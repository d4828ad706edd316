// RatesCsv: the per-key rate file that `cacheroutectl plan` reads, and the mapping of its string
// keys onto the planner's 64-bit key ids.
//
// Format (docs/cacheroutectl.md): a header line that is exactly `key,rate`, then one `key,rate`
// record per line; or, for byte-aware planning, `key,rate,reusable_tokens` or
// `key,rate,reusable_tokens,prompt_tokens` and records with those fields (a blank size: not
// measured; sizes finite and ≥ 0, reusable ≤ prompt). Accepted: a UTF-8 byte-order mark, `\r\n`
// line ends, blank lines anywhere, RFC 4180 double-quoted fields (`""` is a literal quote; a quoted
// field may span lines). Keys are non-empty UTF-8 kept byte for byte (no trimming); spaces and tabs
// around a rate are trimmed. Rates must parse completely as a decimal or exponent-form double and
// be finite and ≥ 0 (-0 becomes 0).
//
// Errors are InvalidArgument and name the line, the field and the value, e.g.
//   line 17: field 'rate': "abc" is not a number
//   line 12: field 'key': duplicate key "foo" (first on line 3)
// The first error in file order is reported. A record's line is the line it starts on.
//
// Usage:
//   absl::StatusOr<RatesCsv> csv = ParseRatesCsv(text);
//   if (!csv.ok()) return csv.status();
//   RankedRates ranked = RankKeys(*std::move(csv));
//   ... BuildPlan(ranked.rates, config) ...; ranked.key_names[plan.key(i)] is the string key.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/plan_builder.h"

namespace cacheroute::client {

struct RatesCsv {
  std::vector<std::string> keys;  // distinct, non-empty UTF-8, in file order
  std::vector<double> rates;      // rates[i] is the rate of keys[i]; finite and ≥ 0
  // tokens[i]: keys[i]'s sizes, when the header has the size columns; else empty.
  std::vector<planner::KeyTokens> tokens;
};

// Parses the whole text of a rates file.
absl::StatusOr<RatesCsv> ParseRatesCsv(absl::string_view text);

// The planner breaks rate ties by key id ascending, and "key ascending" must mean string order,
// so a key's id is its rank among the input keys in byte-wise (memcmp) order. For UTF-8 keys that
// is also code-point order.
struct RankedRates {
  std::vector<std::string> key_names;      // key_names[id] is the key with that id; ascending
  std::vector<planner::KeyRate> rates;     // in file order
  std::vector<planner::KeyTokens> tokens;  // in file order, like RatesCsv::tokens
};

RankedRates RankKeys(RatesCsv csv);

}  // namespace cacheroute::client
