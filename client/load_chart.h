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

}  // namespace cacheroute::client
