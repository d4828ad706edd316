// The three renderings of a Plan; see plan_output.h and docs/cacheroutectl.md.
#include "client/plan_output.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "client/load_chart.h"
#include "client/text_format.h"

namespace cacheroute::client {
namespace {

using planner::Plan;
using planner::PlanStats;

constexpr size_t kMaxKeyColumns = 40;
constexpr size_t kMaxListedDestinations = 8;
constexpr size_t kLoadBarCells = 40;
constexpr size_t kHistogramBins = 16;
constexpr size_t kHistogramBarCells = 30;
// Eighth blocks, 1/8 to 8/8 of a cell.

absl::Status CheckPlan(const Plan& plan, std::span<const std::string> key_names) {
  const auto not_finite = [](absl::string_view what) {
    return absl::InternalError(absl::StrCat("plan has a non-finite ", what));
  };
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan.key(i) >= key_names.size()) {
      return absl::InternalError(
          absl::StrFormat("plan key id %d has no name (%d names)", plan.key(i), key_names.size()));
    }
    if (!std::isfinite(plan.rate(i))) return not_finite("rate");
  }
  for (const double load : plan.loads()) {
    if (!std::isfinite(load)) return not_finite("load");
  }
  const PlanStats& s = plan.stats();
  for (const double v : {s.total_rate, s.admitted_rate, s.cold_tail_rate, s.max_load, s.mean_load,
                         s.imbalance, s.build_seconds}) {
    if (!std::isfinite(v)) return not_finite("statistic");
  }
  return absl::OkStatus();
}

// ---- JSON ----

void AppendJsonField(std::string* out, absl::string_view name, double value, bool last = false) {
  absl::StrAppend(out, "    \"", name, "\": ");
  AppendShortestDouble(out, value);
  out->append(last ? "\n" : ",\n");
}

void AppendJsonField(std::string* out, absl::string_view name, uint64_t value, bool last = false) {
  absl::StrAppend(out, "    \"", name, "\": ", value, last ? "\n" : ",\n");
}

std::string FormatJson(const Plan& plan, std::span<const std::string> key_names) {
  std::string out = "{\n  \"assignments\": [";
  for (size_t i = 0; i < plan.size(); ++i) {
    out.append(i == 0 ? "\n    {\"key\": " : ",\n    {\"key\": ");
    AppendJsonString(&out, key_names[plan.key(i)]);
    out.append(", \"rate\": ");
    AppendShortestDouble(&out, plan.rate(i));
    absl::StrAppend(&out, ", \"destinations\": [", absl::StrJoin(plan.destinations(i), ", "), "]");
    if (plan.stats().byte_aware) {
      for (const auto& [name, value] :
           {std::pair{"reusable_tokens", plan.reusable_tokens(i)},
            std::pair{"saved_work", plan.saved_work(i)}, std::pair{"work", plan.work(i)}}) {
        absl::StrAppend(&out, ", \"", name, "\": ");
        AppendShortestDouble(&out, value);
      }
    }
    out.append("}");
  }
  out.append(plan.size() == 0 ? "],\n" : "\n  ],\n");
  out.append("  \"loads\": [");
  for (size_t r = 0; r < plan.loads().size(); ++r) {
    if (r > 0) out.append(", ");
    AppendShortestDouble(&out, plan.loads()[r]);
  }
  out.append("],\n  \"stats\": {\n");
  const PlanStats& s = plan.stats();
  AppendJsonField(&out, "admitted_keys", s.admitted_keys);
  AppendJsonField(&out, "slots_used", s.slots_used);
  AppendJsonField(&out, "slot_capacity", s.slot_capacity);
  AppendJsonField(&out, "imbalance", s.imbalance);
  AppendJsonField(&out, "cold_tail_rate", s.cold_tail_rate);
  AppendJsonField(&out, "build_seconds", s.build_seconds);
  AppendJsonField(&out, "input_keys", s.input_keys);
  AppendJsonField(&out, "capped_keys", s.capped_keys);
  AppendJsonField(&out, "total_rate", s.total_rate);
  AppendJsonField(&out, "admitted_rate", s.admitted_rate);
  AppendJsonField(&out, "max_load", s.max_load);
  AppendJsonField(&out, "mean_load", s.mean_load);
  AppendJsonField(&out, "destinations", uint64_t{plan.config().destinations});
  AppendJsonField(&out, "q_cap", plan.config().q_cap);
  AppendJsonField(&out, "slots_per_destination", plan.config().slots_per_destination,
                  /*last=*/!s.byte_aware);
  if (s.byte_aware) {
    AppendJsonField(&out, "kv_budget_tokens", plan.config().kv_budget_tokens);
    AppendJsonField(&out, "kv_budget", s.kv_budget);
    AppendJsonField(&out, "kv_used", s.kv_used);
    AppendJsonField(&out, "saved_work", s.saved_work);
    AppendJsonField(&out, "possible_saved_work", s.possible_saved_work);
    AppendJsonField(&out, "total_work", s.total_work);
    AppendJsonField(&out, "work_imbalance", s.work_imbalance);
    AppendJsonField(&out, "measured_keys", s.measured_keys);
    AppendJsonField(&out, "turnover_seconds", s.turnover_seconds, /*last=*/true);
  }
  out.append("  }\n}\n");
  return out;
}

// ---- CSV ----

std::string FormatCsv(const Plan& plan, std::span<const std::string> key_names) {
  const bool bytes = plan.stats().byte_aware;
  std::string out = bytes ? "key,rate,k,destinations,reusable_tokens,saved_work,work\n"
                          : "key,rate,k,destinations\n";
  for (size_t i = 0; i < plan.size(); ++i) {
    absl::StrAppend(&out, CsvField(key_names[plan.key(i)]), ",");
    AppendShortestDouble(&out, plan.rate(i));
    absl::StrAppend(&out, ",", plan.destinations(i).size(), ",",
                    absl::StrJoin(plan.destinations(i), ";"));
    if (bytes) {
      for (const double value : {plan.reusable_tokens(i), plan.saved_work(i), plan.work(i)}) {
        out.append(",");
        AppendShortestDouble(&out, value);
      }
    }
    out.append("\n");
  }
  return out;
}

// ---- Table ----

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

std::string Percent(double part, double whole) {
  if (whole <= 0) return "n/a";
  return absl::StrFormat("%.1f%%", 100.0 * part / whole);
}

std::string PadLeft(absl::string_view s, size_t columns, size_t width) {
  return absl::StrCat(std::string(width > columns ? width - columns : 0, ' '), s);
}

std::string PadRight(absl::string_view s, size_t columns, size_t width) {
  return absl::StrCat(s, std::string(width > columns ? width - columns : 0, ' '));
}

std::string DestinationList(std::span<const uint32_t> destinations) {
  if (destinations.size() <= kMaxListedDestinations) return absl::StrJoin(destinations, ",");
  return absl::StrFormat("%s,… (+%d more)",
                         absl::StrJoin(destinations.first(kMaxListedDestinations), ","),
                         destinations.size() - kMaxListedDestinations);
}

void AppendSummary(std::string* out, const Plan& plan) {
  const PlanStats& s = plan.stats();
  const planner::PlanConfig& c = plan.config();
  const auto row = [&](absl::string_view label, absl::string_view value) {
    absl::StrAppendFormat(out, "  %-22s %s\n", label, value);
  };
  if (s.byte_aware) {
    absl::StrAppendFormat(
        out, "Plan for R=%d destinations, q_cap=%s, byte-aware: %s KV tokens per destination\n",
        c.destinations, Num(c.q_cap), Num(c.kv_budget_tokens));
  } else {
    absl::StrAppendFormat(out, "Plan for R=%d destinations, q_cap=%s, W=%d slots per destination\n",
                          c.destinations, Num(c.q_cap), c.slots_per_destination);
  }
  row("keys in", absl::StrCat(s.input_keys));
  row("admitted keys",
      absl::StrFormat("%d  (%d not admitted)", s.admitted_keys, s.input_keys - s.admitted_keys));
  if (s.byte_aware) {
    row("KV budget used", absl::StrFormat("%s / %s tokens  (%s)", Num(s.kv_used), Num(s.kv_budget),
                                          Percent(s.kv_used, s.kv_budget)));
    row("saved work",
        absl::StrFormat("%s tokens/s  (%s of what admitting every key would save)",
                        Num(s.saved_work), Percent(s.saved_work, s.possible_saved_work)));
    row("expected work",
        absl::StrFormat("%s tokens/s  (imbalance %.4f)", Num(s.total_work), s.work_imbalance));
    row("measured keys",
        absl::StrFormat("%d  (the others planned with their means)", s.measured_keys));
    row("cache turnover", s.turnover_seconds > 0 ? absl::StrFormat("%.3g s", s.turnover_seconds)
                                                 : std::string("none (every prefix survives)"));
    row("assignments", absl::StrCat(s.slots_used));
    row("capped keys", absl::StrFormat("%d  (work > R·cap, so k = R)", s.capped_keys));
  } else {
    row("slots used", absl::StrFormat("%d / %d  (%s)", s.slots_used, s.slot_capacity,
                                      Percent(static_cast<double>(s.slots_used),
                                              static_cast<double>(s.slot_capacity))));
    row("capped keys", absl::StrFormat("%d  (rate > R·q_cap, so k = R)", s.capped_keys));
  }
  row("total rate", Num(s.total_rate));
  row("admitted rate", absl::StrFormat("%s  (%s of total)", Num(s.admitted_rate),
                                       Percent(s.admitted_rate, s.total_rate)));
  row("cold-tail rate", absl::StrFormat("%s  (%s of total)", Num(s.cold_tail_rate),
                                        Percent(s.cold_tail_rate, s.total_rate)));
  row("imbalance (max/mean)", absl::StrFormat("%.4f  (max load %s, mean load %s)", s.imbalance,
                                              Num(s.max_load), Num(s.mean_load)));
  row("build time", absl::StrFormat("%.3f ms", s.build_seconds * 1e3));
}

void AppendTopKeys(std::string* out, const Plan& plan, std::span<const std::string> key_names,
                   size_t top) {
  const size_t shown = std::min(top, plan.size());
  if (shown == 0) {
    absl::StrAppend(out, "\nNo keys listed (", plan.size(), " admitted).\n");
    return;
  }
  const bool bytes = plan.stats().byte_aware;
  struct Row {
    std::string rank, key, rate, k, reusable, saved, destinations;
    size_t key_columns = 0;
  };
  std::vector<Row> rows;
  rows.push_back({"rank", "key", "rate", "k", "reusable", "saved/s", "destinations", 3});
  for (size_t i = 0; i < shown; ++i) {
    Row row;
    row.rank = absl::StrCat(i + 1);
    row.key = DisplayText(key_names[plan.key(i)], kMaxKeyColumns, &row.key_columns);
    row.rate = Num(plan.rate(i));
    row.k = absl::StrCat(plan.destinations(i).size());
    row.reusable = Num(plan.reusable_tokens(i));
    row.saved = Num(plan.saved_work(i));
    row.destinations = DestinationList(plan.destinations(i));
    rows.push_back(std::move(row));
  }
  size_t rank_w = 0, key_w = 0, rate_w = 0, k_w = 0, reusable_w = 0, saved_w = 0;
  for (const Row& row : rows) {
    rank_w = std::max(rank_w, row.rank.size());
    key_w = std::max(key_w, row.key_columns);
    rate_w = std::max(rate_w, row.rate.size());
    k_w = std::max(k_w, row.k.size());
    reusable_w = std::max(reusable_w, row.reusable.size());
    saved_w = std::max(saved_w, row.saved.size());
  }
  absl::StrAppendFormat(
      out, "\nHottest %d of %d admitted keys%s\n", shown, plan.size(),
      bytes ? " (reusable prefix in tokens, prefill work saved in tokens/s)" : "");
  for (const Row& row : rows) {
    absl::StrAppend(out, "  ", PadLeft(row.rank, row.rank.size(), rank_w), "  ",
                    PadRight(row.key, row.key_columns, key_w), "  ",
                    PadLeft(row.rate, row.rate.size(), rate_w), "  ",
                    PadLeft(row.k, row.k.size(), k_w), "  ");
    if (bytes) {
      absl::StrAppend(out, PadLeft(row.reusable, row.reusable.size(), reusable_w), "  ",
                      PadLeft(row.saved, row.saved.size(), saved_w), "  ");
    }
    absl::StrAppend(out, row.destinations, "\n");
  }
}

// One row per destination: a bar scaled to the most loaded one, the load, and its deviation
// from the mean, which is what a nearly balanced plan's bars are too coarse to show.
void AppendLoadBars(std::string* out, std::span<const double> loads, double max_load,
                    double mean_load) {
  std::vector<std::string> values;
  size_t value_w = 0;
  for (const double load : loads) {
    values.push_back(Num(load));
    value_w = std::max(value_w, values.back().size());
  }
  const size_t dest_w = std::max<size_t>(4, absl::StrCat(loads.size() - 1).size());
  absl::StrAppendFormat(out, "  %*s  %s  %s  vs mean\n", dest_w, "dest",
                        std::string(kLoadBarCells, ' '), PadLeft("load", 4, value_w));
  for (size_t r = 0; r < loads.size(); ++r) {
    const double deviation = mean_load > 0 ? 100.0 * (loads[r] / mean_load - 1.0) : 0.0;
    absl::StrAppendFormat(out, "  %*d  %s  %s  %+7.2f%%%s\n", dest_w, r,
                          LoadBar(loads[r], max_load, kLoadBarCells),
                          PadLeft(values[r], values[r].size(), value_w), deviation,
                          loads[r] == max_load && max_load > 0 ? "  ◀ max" : "");
  }
}

void AppendLoadHistogram(std::string* out, std::span<const double> loads) {
  std::vector<double> sorted(loads.begin(), loads.end());
  std::sort(sorted.begin(), sorted.end());
  AppendLoadQuantiles(out, sorted);
  const double lo = sorted.front();
  const double hi = sorted.back();
  if (hi == lo) {
    absl::StrAppendFormat(out, "  all %d destinations carry %s\n", loads.size(), Num(lo));
    return;
  }
  std::vector<size_t> counts(kHistogramBins, 0);
  const double width = (hi - lo) / kHistogramBins;
  for (const double load : loads) {
    size_t bin = static_cast<size_t>((load - lo) / width);
    counts[std::min(bin, kHistogramBins - 1)]++;
  }
  const size_t max_count = *std::max_element(counts.begin(), counts.end());
  // Enough decimals that neighbouring bin edges print differently.
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(width))) + 1, 0, 12);
  std::vector<std::string> labels;
  size_t label_w = 0;
  for (size_t b = 0; b < kHistogramBins; ++b) {
    const double from = lo + width * static_cast<double>(b);
    const double to = b + 1 == kHistogramBins ? hi : lo + width * static_cast<double>(b + 1);
    labels.push_back(absl::StrFormat("[%.*f, %.*f%s", decimals, from, decimals, to,
                                     b + 1 == kHistogramBins ? "]" : ")"));
    label_w = std::max(label_w, labels.back().size());
  }
  const size_t count_w = absl::StrCat(max_count).size();
  absl::StrAppendFormat(out, "  %s  destinations\n", PadRight("load range", 10, label_w));
  for (size_t b = 0; b < kHistogramBins; ++b) {
    absl::StrAppendFormat(
        out, "  %s  %s  %*d%s\n", PadRight(labels[b], labels[b].size(), label_w),
        LoadBar(static_cast<double>(counts[b]), static_cast<double>(max_count), kHistogramBarCells),
        count_w, counts[b], b + 1 == kHistogramBins ? "  ◀ max" : "");
  }
  std::vector<uint32_t> all(loads.size());
  for (uint32_t r = 0; r < all.size(); ++r) all[r] = r;
  std::vector<std::string> hottest;
  for (const uint32_t r : MostLoaded(std::move(all), loads)) {
    hottest.push_back(absl::StrFormat("#%d %s", r, Num(loads[r])));
  }
  absl::StrAppend(out, "  most loaded: ", absl::StrJoin(hottest, ", "), "\n");
}

void AppendLoads(std::string* out, const Plan& plan) {
  const std::span<const double> loads = plan.loads();
  if (loads.empty()) return;
  const double max_load = *std::max_element(loads.begin(), loads.end());
  absl::StrAppendFormat(out, "\nExpected load per destination (max %s, mean %s)\n", Num(max_load),
                        Num(plan.stats().mean_load));
  if (loads.size() <= kMaxChartRows) {
    AppendLoadBars(out, loads, max_load, plan.stats().mean_load);
  } else {
    AppendLoadHistogram(out, loads);
  }
}

std::string FormatTable(const Plan& plan, std::span<const std::string> key_names, size_t top) {
  std::string out;
  AppendSummary(&out, plan);
  AppendTopKeys(&out, plan, key_names, top);
  AppendLoads(&out, plan);
  return out;
}

}  // namespace

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "csv") return OutputFormat::kCsv;
  return absl::InvalidArgumentError(
      absl::StrCat(QuoteForMessage(name), " is not one of table, json, csv"));
}

absl::StatusOr<std::string> FormatPlan(const Plan& plan, std::span<const std::string> key_names,
                                       const OutputOptions& options) {
  if (absl::Status s = CheckPlan(plan, key_names); !s.ok()) return s;
  switch (options.format) {
    case OutputFormat::kJson:
      return FormatJson(plan, key_names);
    case OutputFormat::kCsv:
      return FormatCsv(plan, key_names);
    case OutputFormat::kTable:
      return FormatTable(plan, key_names, options.top);
  }
  return absl::InternalError("unknown output format");
}

absl::Status WritePlan(const Plan& plan, std::span<const std::string> key_names,
                       const OutputOptions& options, std::ostream& out) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, FormatPlan(plan, key_names, options));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  if (!out) return absl::InternalError("cannot write the plan to the output stream");
  return absl::OkStatus();
}

}  // namespace cacheroute::client
