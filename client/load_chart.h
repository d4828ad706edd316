// LoadChart: the per-destination expected-load chart of the online commands (`status`, `show`),
// drawn in the style of `cacheroutectl plan`'s table: one bar per destination scaled to the most
// loaded one, the load, its deviation from the mean and marks for the maximum and for drained
// destinations. Beyond kMaxChartRows destinations it prints quantiles and the most loaded
// destinations instead.
//
// The mean is taken over the destinations that are not drained (a drained one carries no planned
// load), as the planner's own mean_load is. Drained rows are marked with `drained_label`.
//
// Usage:
//   std::string out;
//   AppendLoadChart(&out, names, loads, drained);  // drained may be empty: none drained
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cacheroute::client {

// Requires names.size() == loads.size() and drained empty or of the same size; loads finite.
void AppendLoadChart(std::string* out, std::span<const std::string> names,
                     std::span<const double> loads, const std::vector<bool>& drained,
                     absl::string_view drained_label = "drained");

// `cells` character cells of eighth blocks for value/max, padded with spaces to `cells` columns;
// a non-zero value always shows at least one eighth.
std::string LoadBar(double value, double max, size_t cells);

// max / mean of the loads of destinations not drained; 1 when that mean is 0 (as PlanStats).
double LoadImbalance(std::span<const double> loads, const std::vector<bool>& drained);

// "  min …   p50 …   p90 …   p99 …   max …\n" of `sorted` (ascending, not empty), for the
// summaries of many destinations.
void AppendLoadQuantiles(std::string* out, std::span<const double> sorted);

// The (at most) five most loaded of `candidates`, destination indices into `loads`: the most
// loaded first, ties by the lower index. For the "most loaded:" lines of the summaries.
std::vector<uint32_t> MostLoaded(std::vector<uint32_t> candidates, std::span<const double> loads);

}  // namespace cacheroute::client
