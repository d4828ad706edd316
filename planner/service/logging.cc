// See logging.h.
#include "planner/service/logging.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cacheroute::service {
namespace {

bool json_format = false;

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
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

}  // namespace cacheroute::service
