// The study report: what `cacheroute-sim --study … --out DIR` writes.
//   runs.csv      every run: study, policy, gateways, load, seed and all its metrics
//   report.md     per study, a table like the paper's Table 1 with one row per policy and gateway
//                 count G, grouped by policy (KV hit, routing precision, SLO capacity at 3.5/2/5 s
//                 with censoring marks, p99 TTFT and imbalance at a common load), p99 TTFT per
//                 load, each policy's analytic ceiling at its own KV hit and its capacity as a
//                 fraction of it, and for the drift study the churn and the stale plan's loss
//                 (at the smallest G)
//   summary.json  per study and policy: capacity_qps, capacity_ci, kv_hit (0–1),
//                 routing_precision, imbalance and p99_ttft_s keyed by load, for tooling; the
//                 policy's entry holds these at the smallest G run (as before G was swept) and,
//                 under "by_gateways", at every G ("1", "4", …)
//   <study>-p99.svg, <study>-capacity.svg, <study>-kv-hit.svg   hand-written SVG plots, at the
//                 smallest G
// Aggregation follows the paper (Appendix B.2): capacity per seed, then mean ± 95% Student-t over
// seeds; KV hit and imbalance are means ± 95% Student-t over seeds at the study's common load.
// Everything but WriteReport is a pure function of the results, so tests check the text.
//
// Usage:
//   absl::Status s = WriteReport({primary_result, ablation_result}, "out/");
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/eval/sim/study/capacity.h"
#include "tools/eval/sim/study/sweep.h"

namespace cacheroute::sim::study {

// One policy of one study behind one gateway count, aggregated over seeds.
struct PolicySummary {
  std::string policy;
  uint32_t gateways = 1;  // G
  Capacity capacity_2s;
  Capacity capacity_primary;  // at the study's primary SLO (3.5 s unless configured otherwise)
  Capacity capacity_5s;
  double common_load_qps = 0;  // the load the next three are taken at
  MeanCi kv_hit;               // 0..1
  MeanCi routing_precision;    // 0..1, over the seeds that measured it
  MeanCi imbalance;
  MeanCi p99_at_common_s;
  // Per offered load, means over seeds (NaN when no seed measured a value).
  std::map<double, double> p99_ttft_s;
  std::map<double, double> kv_hit_by_load;
  std::map<double, double> failure_rate;
  // The analytic ceiling at the policy's own KV hit (its hit at the ladder load nearest its
  // capacity; the lowest load when every seed failed there) and its capacity as a share of it.
  // NaN when the study's ceiling inputs were not measured.
  double ceiling_hit = 0;
  double ceiling_qps = 0;
  double ceiling_fraction = 0;
};

// The load closest to config.common_load_qps among the loads that were run (the smaller of two
// equally close ones); the largest load when common_load_qps is 0.
double CommonLoad(const StudyResult& result);

// The gateway counts among the runs, ascending (the study's first count when there are no runs).
std::vector<uint32_t> GatewaysRun(const StudyResult& result);

// One summary per (policy, gateway count), in (policy as listed, gateways ascending) order.
std::vector<PolicySummary> Summarize(const StudyResult& result);

// "66±29", "<30" (every seed left-censored), "≥300" (every seed right-censored); a trailing "*"
// when some but not all seeds are left-censored (counted as 0), "+" when some are right-censored.
std::string FormatCapacity(const Capacity& capacity, double lowest_load, double highest_load);

std::string RunsCsv(std::span<const StudyResult> studies);
std::string ReportMarkdown(std::span<const StudyResult> studies);
std::string SummaryJson(std::span<const StudyResult> studies);
std::string P99Svg(const StudyResult& study);
std::string CapacitySvg(const StudyResult& study);
std::string KvHitSvg(const StudyResult& study);

// Writes all of the above into `out_dir` (created if missing). I/O errors come back as Internal,
// naming the file.
absl::Status WriteReport(std::span<const StudyResult> studies, const std::string& out_dir);

}  // namespace cacheroute::sim::study
