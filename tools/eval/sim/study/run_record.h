// RunRecord: the metrics of one simulated run (one policy behind G gateways at one offered load
// with one seed) as the study and report layers see them, decoupled from the fleet simulator's own
// result type so reports can be written and tested without running a fleet. StudyResult: every
// run of one study, in (policy, gateways, load, seed) order, plus what only the drift study
// measures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cacheroute::sim::study {

struct RunRecord {
  std::string study;
  std::string policy;     // the label shown in reports (a policy, or an ablation step)
  uint32_t gateways = 1;  // G
  double offered_qps = 0;
  uint64_t seed = 0;

  // Latencies in seconds over the requests measured (after warm-up); NaN when none completed.
  double ttft_p50_s = 0;
  double ttft_p90_s = 0;
  double ttft_p99_s = 0;
  double e2e_p50_s = 0;
  double e2e_p99_s = 0;
  double kv_hit = 0;  // served, token-weighted, 0..1
  // Of the requests some engine held a prefix of at dispatch, the share sent to one holding the
  // longest (RunResult::routing_precision), 0..1; NaN when none qualified.
  double routing_precision = 0;
  double imbalance = 0;  // max / mean prefill work over destinations
  uint64_t requests = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  double failure_rate = 0;    // 0..1
  uint64_t shed = 0;          // answered 429 by a gateway's admission queue (not failed)
  uint64_t within_slo = 0;    // completed with TTFT <= the study's primary SLO
  double goodput_qps = 0;     // within_slo per second of the window
  double throughput_rps = 0;  // completed requests per simulated second
  uint32_t plans = 0;         // CacheRoute plans installed during the run, warm-up included
  double plan_churn = 0;      // mean share of keys whose destinations changed per replan
  // Gated variants: the gate's final state ("" ungated), its changes, the table arm's share.
  std::string gate_state;
  uint32_t gate_changes = 0;
  double table_arm_share = 0;
  // Each state change in order (runs.csv leaves it out); GateHistoryText prints them.
  struct GateChange {
    double time = 0;  // simulated seconds from the start
    std::string state;
  };
  std::vector<GateChange> gate_history;
  // The precise baselines' KV event feed (RunResult's; runs.csv leaves them out).
  uint64_t kv_event_subscriptions = 0;
  double kv_event_bytes_per_s = 0;
  uint64_t simulated_requests = 0;  // every request simulated, warm-up included
  double simulated_s = 0;
  double wall_s = 0;  // the only field that differs between identical runs
};

// "time:state" per change, space-separated (e.g. "30:canary 40:enabled").
inline std::string GateHistoryText(const std::vector<RunRecord::GateChange>& history) {
  std::string out;
  for (const RunRecord::GateChange& c : history) {
    if (!out.empty()) out += ' ';
    out += absl::StrCat(c.time, ":", c.state);
  }
  return out;
}

// The drift study (paper §5.4 and Appendix E): the rate vector after each interval of a lognormal
// random walk, planned afresh every interval, against the plan of interval 0.
struct DriftTransition {
  uint32_t from_interval = 0;
  double cache_churn = 0;    // admitted keys (in both plans) whose destination set changed, 0..1
  double count_churn = 0;    // admitted keys (in both plans) whose assignment count changed, 0..1
  double jaccard_churn = 0;  // 1 − Jaccard of the two plans' (key, destination) pairs
  // Expected imbalance (max/mean load) under the rates of interval from_interval + 1 of the plan
  // built for them (fresh) and of the plan built at interval 0 (stale since then).
  double fresh_imbalance = 0;
  double stale_imbalance = 0;
};

struct DriftResult {
  uint32_t intervals = 0;
  double sigma = 0;
  uint64_t seed = 0;  // the seed of the churn computation (the first study seed)
  std::vector<DriftTransition> transitions;
  double mean_cache_churn = 0;
  double mean_count_churn = 0;
};

}  // namespace cacheroute::sim::study
