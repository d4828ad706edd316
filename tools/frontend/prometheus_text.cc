// See prometheus_text.h.
#include "tools/frontend/prometheus_text.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace cacheroute::frontend {
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

// A line as a sample of `metric`: kOther when it is not one (a comment, another metric, one whose
// name only starts with this one's), kBroken when its label set does not close; otherwise its
// label set (between the braces, `labelled` when it has braces) and what follows it.
struct SampleLine {
  enum Kind : uint8_t { kOther, kBroken, kSample } kind = kOther;
  bool labelled = false;
  absl::string_view labels;
  absl::string_view rest;
};

SampleLine ParseSampleLine(absl::string_view line, absl::string_view metric) {
  line = absl::StripAsciiWhitespace(line);
  if (line.empty() || line.front() == '#' || !absl::StartsWith(line, metric)) return {};
  absl::string_view rest = line.substr(metric.size());
  if (rest.empty()) return {};
  SampleLine sample;
  sample.kind = SampleLine::kSample;
  if (rest.front() == '{') {
    const size_t end = SkipLabels(rest);
    if (end == absl::string_view::npos) {
      sample.kind = SampleLine::kBroken;
      return sample;
    }
    sample.labelled = true;
    sample.labels = rest.substr(1, end - 2);
    rest.remove_prefix(end);
  } else if (rest.front() != ' ' && rest.front() != '\t') {
    return {};  // another metric whose name starts with this one (e.g. …_total, …_bucket)
  }
  sample.rest = rest;
  return sample;
}

// The label set of the first labelled sample of `metric`, or nullopt.
std::optional<absl::string_view> FirstLabels(absl::string_view text, absl::string_view metric) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const SampleLine sample = ParseSampleLine(line, metric);
    if (sample.kind == SampleLine::kBroken) return std::nullopt;
    if (sample.kind == SampleLine::kSample && sample.labelled) return sample.labels;
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> LabelNumber(absl::string_view text, absl::string_view metric,
                                  absl::string_view label) {
  if (metric.empty() || label.empty()) return std::nullopt;
  const std::optional<absl::string_view> labels = FirstLabels(text, metric);
  if (!labels.has_value()) return std::nullopt;
  // name="value" pairs separated by commas; numbers need no escapes, so a value with a backslash
  // is not one.
  absl::string_view rest = *labels;
  while (!rest.empty()) {
    rest = absl::StripLeadingAsciiWhitespace(rest);
    const size_t eq = rest.find('=');
    if (eq == absl::string_view::npos || eq + 1 >= rest.size() || rest[eq + 1] != '"') break;
    const absl::string_view name = absl::StripAsciiWhitespace(rest.substr(0, eq));
    size_t close = eq + 2;
    while (close < rest.size() && rest[close] != '"') close += rest[close] == '\\' ? 2 : 1;
    if (close >= rest.size()) break;
    const absl::string_view value = rest.substr(eq + 2, close - eq - 2);
    if (name == label) {
      double v;
      if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) return std::nullopt;
      return v;
    }
    rest.remove_prefix(close + 1);
    rest = absl::StripLeadingAsciiWhitespace(rest);
    if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
  }
  return std::nullopt;
}

std::optional<double> SumSamples(absl::string_view text, absl::string_view metric) {
  if (metric.empty()) return std::nullopt;
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const SampleLine sample = ParseSampleLine(line, metric);
    if (sample.kind == SampleLine::kBroken) return std::nullopt;
    if (sample.kind == SampleLine::kOther) continue;
    const absl::string_view rest = absl::StripLeadingAsciiWhitespace(sample.rest);
    const absl::string_view value = rest.substr(0, rest.find_first_of(" \t"));
    double v;
    if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) return std::nullopt;
    sum += v;
    found = true;
  }
  if (!found) return std::nullopt;
  return sum;
}

}  // namespace cacheroute::frontend
