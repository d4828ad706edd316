// What a study measures beside its runs, from its workload and the planner alone (no fleet):
//
//   ComputeDriftChurn     the drift study's plan churn: the active set's rates walked for
//                         drift.intervals intervals and planned afresh each time with Algorithm 1
//                         (the paper's Appendix E), and how a stale plan's load spreads
//   MeasureReuse          a workload's mean lengths and its reuse ceiling: the KV hit of one engine
//                         with an unbounded cache (no routing over finite caches does better)
//   MeasureBudgetCeiling  the reuse ceiling when the planned prefixes must fit a KV budget
//   CeilingQps            the fleet's analytic throughput ceiling at a KV hit (docs/simulator.md,
//                         "What limits capacity")
//
// All are deterministic functions of their inputs.
//
// Usage:
//   const WorkloadReuse reuse = MeasureReuse(*BuildRunWorkload(config, 120, 2));
//   absl::StatusOr<double> ceiling = CeilingQps(config, {.measured = true, …}, reuse.reuse);
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "tools/eval/sim/study/run_record.h"
#include "tools/eval/sim/study/study.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::sim::study {

// The drift study's plan churn at `offered_qps` and `seed`, with q_cap calibrated from a short
// sample of the workload unless fleet.q_cap is set.
absl::StatusOr<DriftResult> ComputeDriftChurn(const StudyConfig& config, double offered_qps,
                                              uint64_t seed);

// A workload's mean lengths and its reuse ceiling: the share of prompt tokens in full blocks that
// an earlier request already published (the leading run of each prompt's chained block ids).
struct WorkloadReuse {
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;
  double reuse = 0;  // in [0, 1]
};
WorkloadReuse MeasureReuse(const workload::Workload& workload);

// The reuse ceiling under a KV budget: the share of prompt tokens any admission can serve from
// cache when the planned prefixes must fit `budget_tokens` over the fleet. Each key's reusable
// prefix (the mean tokens a request shares with the key's previous one, as gateways measure it)
// costs its size once; it is worth the tokens its requests reuse with an unbounded cache (as in
// MeasureReuse). Keys are packed by worth per token, the last one fractionally: the fractional
// knapsack, an upper bound on every admission (it also ignores the running requests' own KV).
struct BudgetCeiling {
  double reuse = 0;          // in [0, 1]
  double prefix_tokens = 0;  // Σ of the keys' reusable prefixes
  uint64_t keys = 0;
  uint64_t keys_in = 0;  // keys packed whole
};
BudgetCeiling MeasureBudgetCeiling(const workload::Workload& workload, double budget_tokens);

// What the analytic throughput ceiling needs: the workload's mean lengths and its reuse ceiling,
// measured on the request stream of the study's common load and first seed (RunStudy does).
struct CeilingInputs {
  bool measured = false;
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;
  double reuse = 0;  // the KV hit of one engine with an unbounded cache
};

// R × one destination's SaturationQps at the workload's mean lengths and KV hit `hit` (clamped
// to [0, 1]); FailedPrecondition unless ceiling.measured.
absl::StatusOr<double> CeilingQps(const StudyConfig& config, const CeilingInputs& ceiling,
                                  double hit);

}  // namespace cacheroute::sim::study
