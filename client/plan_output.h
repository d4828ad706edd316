// PlanOutput: renders a planner::Plan for `cacheroutectl plan` as JSON (a stable machine
// interface), CSV (one row per admitted key) or a table for a person at a terminal. The JSON
// schema and the CSV columns are specified in docs/cacheroutectl.md.
//
// A plan's key ids index `key_names` (see RankKeys in rates_csv.h). Formatting either produces
// the whole document or an error, never part of one: it fails with Internal if a key id has no
// name or a number in the plan is not finite.
//
// Usage:
//   absl::StatusOr<std::string> text =
//       FormatPlan(*plan, ranked.key_names, {.format = OutputFormat::kJson});
//   if (!text.ok()) return text.status();
//   std::cout << *text;
#pragma once

#include <cstddef>
#include <ostream>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/plan_builder.h"

namespace cacheroute::client {

enum class OutputFormat { kTable, kJson, kCsv };

// "table", "json" or "csv"; anything else is InvalidArgument naming the value.
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name);

struct OutputOptions {
  OutputFormat format = OutputFormat::kTable;
  size_t top = 10;  // table only: how many of the hottest assignments to list
};

// R above which the table shows a load histogram instead of one bar per destination.
inline constexpr size_t kMaxChartRows = 64;

absl::StatusOr<std::string> FormatPlan(const planner::Plan& plan,
                                       std::span<const std::string> key_names,
                                       const OutputOptions& options);

// Formats the whole document first, so `out` receives nothing when formatting fails.
absl::Status WritePlan(const planner::Plan& plan, std::span<const std::string> key_names,
                       const OutputOptions& options, std::ostream& out);

}  // namespace cacheroute::client
