// OnlineOutput: how cacheroutectl's online commands render the planner's answers, as a table
// for a person or as JSON (docs/cacheroutectl.md specifies both). Pure: no gRPC calls and no
// clock; the current time is a parameter so output is reproducible in tests.
//
// Every JSON rendering is one object. `show` uses the `plan` schema (FormatRoutingTable);
// the others are single-line objects (JsonWriter), and `watch` prints one per version.
//
// Usage:
//   absl::StatusOr<OnlineFormat> format = ParseOnlineFormat(flag);
//   std::string text = FormatStatus(response, "127.0.0.1:50051", now_unix_ms, *format);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cacheroute/v1/admin.pb.h"
#include "cacheroute/v1/table.pb.h"

namespace cacheroute::client {

enum class OnlineFormat { kTable, kJson };

// "table" or "json"; InvalidArgument naming --format otherwise.
absl::StatusOr<OnlineFormat> ParseOnlineFormat(absl::string_view name);

// "EPOCH.NUMBER", both unsigned 64-bit integers, not both zero; InvalidArgument naming `flag`.
absl::StatusOr<v1::Version> ParseVersion(absl::string_view flag, absl::string_view text);
std::string VersionText(const v1::Version& version);  // "1800000000.3"; "none" for zero

// `status`: the planner's state; `now_unix_ms` gives the plan's and reports' ages.
std::string FormatStatus(const v1::GetStatusResponse& status, absl::string_view address,
                         int64_t now_unix_ms, OnlineFormat format);

// `destinations list`.
std::string FormatDestinations(const v1::GetStatusResponse& status, OnlineFormat format);

// `show`: a table like `plan`'s (top `top` keys), or the `plan` JSON schema plus "version".
// Internal if the table holds a non-finite number or a destination index out of range.
absl::StatusOr<std::string> FormatRoutingTable(const v1::RoutingTable& table, OnlineFormat format,
                                               size_t top);

// `explain`. `status` (may be null) supplies destination names when it describes the same
// version as `explain`.
std::string FormatExplain(const v1::ExplainResponse& explain, const v1::GetStatusResponse* status,
                          OnlineFormat format);

// `diff`: at most `top` keys of each kind in the table form; all of them in JSON.
std::string FormatDiff(const v1::DiffResponse& diff, OnlineFormat format, size_t top);

// One version received by `watch`.
struct WatchEvent {
  v1::Version version;
  bool full = false;
  v1::Version base;       // deltas only
  uint64_t keys = 0;      // admitted keys in the table after applying the update
  uint64_t upserts = 0;   // full: the table's assignments
  uint64_t removals = 0;  // full: 0
  uint64_t destinations = 0;
  int64_t built_unix_ms = 0;
};
std::string FormatWatchEvent(const WatchEvent& event, OnlineFormat format);

// Unix milliseconds as "2027-01-15 08:00:00 UTC"; "never" for 0.
std::string TimeText(int64_t unix_ms);
// "12s ago", "3m4s ago", "in 2s" (a clock ahead of ours); "" for 0.
std::string AgeText(int64_t unix_ms, int64_t now_unix_ms);

}  // namespace cacheroute::client
