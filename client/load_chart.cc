// See load_chart.h. The bar drawing follows plan_output.cc (eighth blocks, 40 cells, a non-zero
// load is never invisible), so `plan`, `show` and `status` read the same.
#include "client/load_chart.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/plan_output.h"
#include "client/text_format.h"

namespace cacheroute::client {
namespace {

constexpr size_t kBarCells = 40;
constexpr size_t kMaxNameColumns = 24;
constexpr const char* kEighths[] = {"▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

}  // namespace

std::string LoadBar(double value, double max, size_t cells) {
  size_t eighths = 0;
  if (max > 0 && value > 0) {
    eighths = static_cast<size_t>(std::lround(value / max * static_cast<double>(cells * 8)));
    eighths = std::clamp<size_t>(eighths, 1, cells * 8);
  }
  std::string out;
  for (size_t i = 0; i < eighths / 8; ++i) out.append(kEighths[7]);
  size_t used = eighths / 8;
  if (eighths % 8 != 0) {
    out.append(kEighths[eighths % 8 - 1]);
    ++used;
  }
  out.append(cells - used, ' ');
  return out;
}

namespace {

std::string Pad(absl::string_view s, size_t columns, size_t width, bool left) {
  const std::string fill(width > columns ? width - columns : 0, ' ');
  return left ? absl::StrCat(fill, s) : absl::StrCat(s, fill);
}

bool IsDrained(const std::vector<bool>& drained, size_t r) {
  return r < drained.size() && drained[r];
}

double MeanLoad(std::span<const double> loads, const std::vector<bool>& drained) {
  double total = 0;
  size_t active = 0;
  for (size_t r = 0; r < loads.size(); ++r) {
    if (IsDrained(drained, r)) continue;
    total += loads[r];
    ++active;
  }
  return active == 0 ? 0.0 : total / static_cast<double>(active);
}

void AppendBars(std::string* out, std::span<const std::string> names, std::span<const double> loads,
                const std::vector<bool>& drained, absl::string_view drained_label, double max_load,
                double mean_load) {
  std::vector<std::string> shown(names.size()), values(loads.size());
  std::vector<size_t> name_columns(names.size());
  size_t name_w = 4, value_w = 4;
  for (size_t r = 0; r < names.size(); ++r) {
    shown[r] = DisplayText(names[r], kMaxNameColumns, &name_columns[r]);
    name_w = std::max(name_w, name_columns[r]);
    values[r] = Num(loads[r]);
    value_w = std::max(value_w, values[r].size());
  }
  const size_t dest_w = std::max<size_t>(4, absl::StrCat(loads.size() - 1).size());
  absl::StrAppendFormat(out, "  %*s  %s  %s  %s  vs mean\n", dest_w, "dest",
                        Pad("name", 4, name_w, false), std::string(kBarCells, ' '),
                        Pad("load", 4, value_w, true));
  for (size_t r = 0; r < loads.size(); ++r) {
    std::string tail;
    if (IsDrained(drained, r)) {
      tail = absl::StrCat("  ", drained_label);
    } else {
      const double deviation = mean_load > 0 ? 100.0 * (loads[r] / mean_load - 1.0) : 0.0;
      tail = absl::StrFormat("  %+7.2f%%%s", deviation,
                             loads[r] == max_load && max_load > 0 ? "  ◀ max" : "");
    }
    absl::StrAppendFormat(out, "  %*d  %s  %s  %s%s\n", dest_w, r,
                          Pad(shown[r], name_columns[r], name_w, false),
                          LoadBar(loads[r], max_load, kBarCells),
                          Pad(values[r], values[r].size(), value_w, true), tail);
  }
}

void AppendSummaryForMany(std::string* out, std::span<const std::string> names,
                          std::span<const double> loads, const std::vector<bool>& drained,
                          absl::string_view drained_label) {
  std::vector<uint32_t> active;
  for (uint32_t r = 0; r < loads.size(); ++r) {
    if (!IsDrained(drained, r)) active.push_back(r);
  }
  if (!active.empty()) {
    std::vector<double> sorted;
    for (const uint32_t r : active) sorted.push_back(loads[r]);
    std::sort(sorted.begin(), sorted.end());
    AppendLoadQuantiles(out, sorted);
    std::vector<std::string> hottest;
    for (const uint32_t r : MostLoaded(active, loads)) {
      hottest.push_back(
          absl::StrFormat("#%d %s %s", r, DisplayText(names[r], kMaxNameColumns), Num(loads[r])));
    }
    absl::StrAppend(out, "  most loaded: ", absl::StrJoin(hottest, ", "), "\n");
  }
  std::vector<std::string> drained_names;
  for (uint32_t r = 0; r < loads.size(); ++r) {
    if (IsDrained(drained, r)) {
      drained_names.push_back(absl::StrCat("#", r, " ", DisplayText(names[r], kMaxNameColumns)));
    }
  }
  if (!drained_names.empty()) {
    absl::StrAppend(out, "  ", drained_label, " (", drained_names.size(),
                    "): ", absl::StrJoin(drained_names, ", "), "\n");
  }
}

}  // namespace

void AppendLoadQuantiles(std::string* out, std::span<const double> sorted) {
  const auto quantile = [&](double q) {
    return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
  };
  absl::StrAppendFormat(out, "  min %s   p50 %s   p90 %s   p99 %s   max %s\n", Num(sorted.front()),
                        Num(quantile(0.5)), Num(quantile(0.9)), Num(quantile(0.99)),
                        Num(sorted.back()));
}

std::vector<uint32_t> MostLoaded(std::vector<uint32_t> candidates, std::span<const double> loads) {
  constexpr size_t kListed = 5;
  const size_t listed = std::min(kListed, candidates.size());
  std::partial_sort(
      candidates.begin(), candidates.begin() + listed, candidates.end(),
      [&](uint32_t a, uint32_t b) { return loads[a] != loads[b] ? loads[a] > loads[b] : a < b; });
  candidates.resize(listed);
  return candidates;
}

double LoadImbalance(std::span<const double> loads, const std::vector<bool>& drained) {
  const double mean = MeanLoad(loads, drained);
  if (mean <= 0) return 1.0;
  double max_load = 0;
  for (size_t r = 0; r < loads.size(); ++r) {
    if (!IsDrained(drained, r)) max_load = std::max(max_load, loads[r]);
  }
  return max_load / mean;
}

void AppendLoadChart(std::string* out, std::span<const std::string> names,
                     std::span<const double> loads, const std::vector<bool>& drained,
                     absl::string_view drained_label) {
  if (loads.empty()) return;
  const double max_load = *std::max_element(loads.begin(), loads.end());
  const double mean_load = MeanLoad(loads, drained);
  absl::StrAppendFormat(out, "\nExpected load per destination (max %s, mean %s)\n", Num(max_load),
                        Num(mean_load));
  if (loads.size() <= kMaxChartRows) {
    AppendBars(out, names, loads, drained, drained_label, max_load, mean_load);
  } else {
    AppendSummaryForMany(out, names, loads, drained, drained_label);
  }
}

}  // namespace cacheroute::client
