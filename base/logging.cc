// See logging.h.
#include "base/logging.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include <nlohmann/json.hpp>

namespace cacheroute::base {
namespace {

bool json_format = false;

// A JSON string literal (nlohmann's escaping; invalid UTF-8 becomes U+FFFD).
std::string JsonString(absl::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

// Text values are quoted only when they contain spaces, quotes or '='.
std::string TextValue(absl::string_view s) {
  if (!s.empty() && s.find_first_of(" \"=\n") == absl::string_view::npos) return std::string(s);
  return JsonString(s);
}

}  // namespace

void SetLogFormat(absl::string_view format) { json_format = format == "json"; }

void LogEvent(absl::string_view level, absl::string_view event, const LogFields& fields) {
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line;
  if (json_format) {
    line = absl::StrCat("{\"ts\":", JsonString(ts), ",\"level\":", JsonString(level),
                        ",\"event\":", JsonString(event));
    for (const auto& [k, v] : fields)
      absl::StrAppend(&line, ",", JsonString(k), ":", JsonString(v));
    line += "}\n";
  } else {
    line = absl::StrCat(ts, " ", level, " ", event);
    for (const auto& [k, v] : fields) absl::StrAppend(&line, " ", k, "=", TextValue(v));
    line += "\n";
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace cacheroute::base
