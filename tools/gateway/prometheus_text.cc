// See prometheus_text.h.
#include "tools/gateway/prometheus_text.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace cacheroute::gateway {
namespace {

// The position just past the label set that starts at line[0] == '{', or npos when it does not
// close on this line. Quotes delimit label values, in which a backslash escapes the next byte.
size_t SkipLabels(absl::string_view line) {
  bool quoted = false;
  for (size_t i = 1; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == '}') {
      return i + 1;
    }
  }
  return absl::string_view::npos;
}

}  // namespace

std::optional<double> SumSamples(absl::string_view text, absl::string_view metric) {
  if (metric.empty()) return std::nullopt;
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#' || !absl::StartsWith(line, metric)) continue;
    absl::string_view rest = line.substr(metric.size());
    if (rest.empty()) continue;
    if (rest.front() == '{') {
      const size_t end = SkipLabels(rest);
      if (end == absl::string_view::npos) return std::nullopt;
      rest.remove_prefix(end);
    } else if (rest.front() != ' ' && rest.front() != '\t') {
      continue;  // another metric whose name starts with this one (e.g. …_total, …_bucket)
    }
    rest = absl::StripLeadingAsciiWhitespace(rest);
    const absl::string_view value = rest.substr(0, rest.find_first_of(" \t"));
    double v;
    if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) return std::nullopt;
    sum += v;
    found = true;
  }
  if (!found) return std::nullopt;
  return sum;
}

}  // namespace cacheroute::gateway
