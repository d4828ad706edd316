// Structured logs for the planner process: one line per event on stderr, either
//   2026-11-30T04:00:00.123Z info table_published version=1764.3 build_ms=2.1
// or, with SetLogFormat("json"),
//   {"ts":"2026-11-30T04:00:00.123Z","level":"info","event":"table_published","version":"1764.3"}
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace cacheroute::base {

using LogFields = std::vector<std::pair<std::string, std::string>>;

// "text" (the default) or "json". Not thread-safe: call once at start-up.
void SetLogFormat(absl::string_view format);
void LogEvent(absl::string_view level, absl::string_view event, const LogFields& fields = {});

}  // namespace cacheroute::base
