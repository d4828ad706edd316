// Exposition: writes Prometheus' text exposition format 0.0.4, the one writer behind the /metrics
// pages of the planner, the gateway and the engine emulator.
//
// Usage:
//   Exposition page("cacheroute_planner_");                 // prefix of every metric name
//   page.Counter("reports_total", "Rate reports accepted.", 12);
//   page.Family("in_flight", "gauge", "Requests in flight per destination.");
//   page.Sample("in_flight", 3, Exposition::Label("destination", name));
//   page.Histogram("ttft_seconds", bounds, counts, sum, "");  // counts: per bucket, +Inf last
//   std::string text = page.Take();
//
// Contract: label values are escaped (backslash, quote, newline) by Label/LabelValue; numbers are
// printed in the shortest form that reads back as the same double (0.0005, not
// 0.00050000000000000001; `le` bounds too), infinities and NaN as +Inf, -Inf and NaN; `labels`
// given to the constructor go first in every sample. Family must come before its samples (the
// caller's order is kept).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace cacheroute::base {

class Exposition {
 public:
  explicit Exposition(std::string prefix = "", std::string labels = "")
      : prefix_(std::move(prefix)), labels_(std::move(labels)) {}

  void Family(absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&text_, "# HELP ", prefix_, name, " ", help, "\n# TYPE ", prefix_, name, " ",
                    type, "\n");
  }
  void Sample(absl::string_view name, double value, absl::string_view labels = "") {
    const bool any = !labels_.empty() || !labels.empty();
    const bool both = !labels_.empty() && !labels.empty();
    absl::StrAppend(&text_, prefix_, name, any ? "{" : "", labels_, both ? "," : "", labels,
                    any ? "}" : "", " ", Number(value), "\n");
  }
  void Gauge(absl::string_view name, absl::string_view help, double value) {
    Family(name, "gauge", help);
    Sample(name, value);
  }
  void Counter(absl::string_view name, absl::string_view help, double value) {
    Family(name, "counter", help);
    Sample(name, value);
  }
  // The samples of one histogram (its Family written before): `counts` has bounds.size() + 1
  // per-bucket counts (the last for +Inf), written cumulatively, then _sum and _count.
  void Histogram(absl::string_view name, std::span<const double> bounds,
                 std::span<const uint64_t> counts, double sum, absl::string_view labels) {
    uint64_t cumulative = 0;
    const std::string before_le = labels.empty() ? "" : absl::StrCat(labels, ",");
    for (size_t b = 0; b < counts.size(); ++b) {
      cumulative += counts[b];
      const std::string le = b < bounds.size() ? Number(bounds[b]) : "+Inf";
      Sample(absl::StrCat(name, "_bucket"), static_cast<double>(cumulative),
             absl::StrCat(before_le, "le=\"", le, "\""));
    }
    Sample(absl::StrCat(name, "_sum"), sum, labels);
    Sample(absl::StrCat(name, "_count"), static_cast<double>(cumulative), labels);
  }
  std::string Take() { return std::move(text_); }

  // The exposition format's label-value escapes: backslash, double quote and line feed.
  static std::string LabelValue(absl::string_view v) {
    return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
  }
  // key="value", the value escaped.
  static std::string Label(absl::string_view key, absl::string_view value) {
    return absl::StrCat(key, "=\"", LabelValue(value), "\"");
  }
  static std::string Number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    // Plain decimals between 1e-7 and 1e21 (as JavaScript prints numbers), else scientific.
    const double magnitude = std::fabs(v);
    const bool fixed = v == 0 || (magnitude >= 1e-7 && magnitude < 1e21);
    char buffer[64];
    const std::to_chars_result r =
        std::to_chars(buffer, buffer + sizeof buffer, v,
                      fixed ? std::chars_format::fixed : std::chars_format::scientific);
    return std::string(buffer, r.ptr);
  }

 private:
  const std::string prefix_;
  const std::string labels_;
  std::string text_;
};

}  // namespace cacheroute::base
