// Side-by-side comparison of cacheroute-replay runs (their --json reports): the shadow-replay
// gate of the paper's §5.3 (the same trace, plan vs Flat-LB) and the local demo's report.
//
// ReadRun parses one report; MedianRun folds repeats of one set-up into a run whose every figure
// is the median over them (machines are noisy: a tail latency means something only as a median of
// repeated runs). CompareTable prints the runs as columns (served KV hit, TTFT p50 and
// p99, latency p99, failures, prefill imbalance, planned share; when a run shed requests or had
// an SLO, also the 429s with their p50 / p99 time and the goodput within the SLO); CompareMarkdown adds per-run
// destination tables; BarChartSvg draws one metric per run as a labelled bar chart, and
// DestinationLoadSvg the prefill work per destination of every run, grouped. The SVG is plain
// text with no dependencies, meant to be opened in a browser.
//
// Usage:
//   absl::StatusOr<ReplayRun> a = ReadRun("flatlb", json_text);
//   std::cout << CompareTable(runs);
//   WriteFile(dir + "/kv-hit.svg", BarChartSvg("Served KV hit (%)", labels, values));
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cacheroute::replay {

struct ReplayRunDestination {
  std::string name;
  double requests = 0;
  double prefill_tokens = 0;
  double kv_hit = 0;  // 0..1
};

struct ReplayRun {
  std::string label;
  double requests = 0, succeeded = 0, failed = 0;
  double ttft_p50_s = 0, ttft_p99_s = 0, latency_p50_s = 0, latency_p99_s = 0;
  double kv_hit = 0;  // 0..1
  double planned = 0;
  double request_imbalance = 0, prefill_imbalance = 0;
  // Requests shed (429) and the time to their 429; goodput within the SLO (reports of replays
  // run with --slo; slo_s 0 without). Absent from older reports: 0.
  double shed = 0, shed_latency_p50_s = 0, shed_latency_p99_s = 0;
  double slo_s = 0, within_slo = 0, goodput = 0;
  std::vector<ReplayRunDestination> destinations;
};

// InvalidArgument naming the field when `json` is not a replay report.
absl::StatusOr<ReplayRun> ReadRun(const std::string& label, const std::string& json);

// The repeats' medians, figure by figure (an even count: the mean of the middle two); destinations
// are the first repeat's, each figure the median over the repeats that have that destination.
// `repeats` must not be empty.
ReplayRun MedianRun(const std::string& label, const std::vector<ReplayRun>& repeats);

std::string CompareTable(const std::vector<ReplayRun>& runs);
std::string CompareMarkdown(const std::vector<ReplayRun>& runs, const std::string& title);
std::string BarChartSvg(const std::string& title, const std::vector<std::string>& labels,
                        const std::vector<double>& values, const std::string& unit);
std::string DestinationLoadSvg(const std::vector<ReplayRun>& runs);

}  // namespace cacheroute::replay
