// A study: one of the paper's experiments as data. Its policies (study labels, policy_labels.h)
// are each run behind every gateway count, at every offered load, with every seed on a fleet of
// `destinations` engines of `profile`, with requests from the workload generator (or a trace), and
// the report compares them at the study's SLO. Nothing here runs anything; the study layer's units
// take a StudyConfig:
//
//   builtin_studies.h  the paper's studies by name (FindStudy, StudyNames)
//   study_file.h       a study from a YAML file (`base:` and overrides)
//   validation.h       ValidateStudy: every field's range, naming the field and the value
//   policy_labels.h    what each label in `policies` runs
//   workloads.h        each run's requests (BuildRunWorkload)
//   sweep.h            RunStudy: every (policy, gateways, load, seed) on a thread pool
//   analyses.h         the drift churn, the reuse and budget ceilings, the throughput ceiling
//   fleet_runner.h     one run on the fleet simulator
//
// docs/simulator.md, "Studies", says what each built-in study models and where it departs from
// the paper.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/router.h"
#include "tools/eval/workload/mooncake.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::sim::study {

// Keys added on top of the aggregate workload, each with an equal share of the offered load (the
// paper's "controlled synthetic-whale workload", §5.2). Whale prompts have their own template,
// context and threads, so they share no block with the aggregate's keys.
struct WhaleOptions {
  uint32_t count = 0;  // 0: no whales
  double share = 0;    // fraction of every offered load carried by all whales together, [0, 1)
};

// The drift study's random walk (Appendix E): every key's rate is multiplied by exp(σ·Z) each
// interval (Z standard normal), then all rates are rescaled to the offered load.
struct DriftOptions {
  bool enabled = false;
  uint32_t intervals = 6;
  double sigma = 0.3;
};

// A workload that turns into another mid-run: from at_s (simulated seconds from the start, warm-up
// included) the requests come from `workload` instead (its keys renamed, so the active set is
// new); before it, from the study's own. Not with drift or a trace.
struct RegimeChange {
  bool enabled = false;
  double at_s = 0;
  std::string to;                      // the built-in study whose workload it turns into
  workload::WorkloadProfile workload;  // that study's
};

// What the fleet simulator is told beyond the policy (see tools/eval/sim/fleet.h): MakeFleetConfig
// (fleet_runner.h) starts every run's FleetConfig from these, and the run's label changes it.
struct FleetKnobs {
  double control_interval_s = 10;  // CacheRoute replans this often
  double rate_smoothing_s = 10;    // the planner's rate smoothing τ
  uint32_t max_plans = 0;          // stop replanning after this many plans (1: one plan, held)
  double stickiness = 0;           // placement hysteresis (PlanConfig::stickiness); 0: none
  double q_cap = 0;                // 0: calibrated from the profile and the workload's mean lengths
  uint32_t slots_per_destination = 64;
  double warmup_s = 60;    // simulated seconds before the measured window (not in the metrics)
  double timeout_s = 60;   // a request not finished this long after arrival fails
  uint32_t queue_cap = 0;  // waiting requests per destination before rejecting; 0: none
  uint32_t kv_blocks = 0;  // KV blocks per destination; 0: the profile's
  double kv_event_delay_s = 0.05;  // the precise baselines' KV event delivery delay
  // Byte-aware planning for every CacheRoute variant but the paper's (FleetConfig::
  // plan_kv_budget_share): the share of each destination's KV reserved for planned prefixes;
  // 0: the slot model. `cacheroute-bytes` is `cacheroute` with kKvBudgetShare in any study.
  double kv_budget_share = 0;
  // CacheRoute's token-work dispatch (docs/dispatch.md), for every table policy of that rule; a
  // table policy of another rule (cacheroute-paper) runs its own. Studies hold the shipped
  // defaults; a study file's fleet.decode_stall, queue_stall, queue_wait, memory_short,
  // all_candidates_up_to and prefix_memory_log2 exist to show how the defaults were chosen.
  dataplane::DispatchOptions dispatch{};
  // The baselines' parameters (the published defaults).
  dataplane::PolicyParameters parameters{};
  // false: remembered destinations never expire (no cache-turnover measurement), for ablations.
  bool measure_turnover = true;
  // false: replans ignore where keys were last sent (FleetConfig::plan_follows_cache).
  bool plan_follows_cache = true;
  // Fleet sharing among several gateways (FleetConfig::share and its delivery; docs/dispatch.md,
  // "Several gateways"): on for CacheRoute's token-work variants, as the product ships it.
  bool share = true;
  bool share_work = true;
  double share_interval_s = 0.005;
  double share_delay_s = 0.002;
  double share_loss = 0;
};

// A trace-driven study's requests: a Mooncake-format trace (tools/eval/workload/mooncake.h)
// replayed at every offered load with its arrival times scaled so that its mean rate, requests /
// (last − first arrival), is the load, and shifted to start at 0. The first fleet.warmup_s seconds
// are warm-up; the trace is cut at fleet.warmup_s + duration_s. The trace is the same for every
// seed (seeds vary only the policies' randomness). `drift` must be off; `workload` serves only
// whales.
struct TraceOptions {
  bool enabled = false;  // requests come from the trace, not from the workload generator
  std::string path;      // required when enabled
  // The routing key: the first key_blocks hash ids (block 0 alone is shared by every request of
  // the Mooncake conversation trace, so it is no key).
  uint32_t key_blocks = workload::kDefaultKeyBlocks;
};

struct StudyConfig {
  std::string name;
  std::string description;  // one paragraph, printed in the report
  std::string profile = "llama-70b-fp8-tp2-h100";
  uint32_t destinations = 30;
  // Study labels (policy_labels.h): the registry's policies, their gated variants, CacheRoute's
  // variants and the ablation and drift steps.
  std::vector<std::string> policies;
  // G, the gateways each routing with its own view (fleet.h), strictly ascending, each >= 1. Every
  // study runs one gateway and several (deployments run replicas, and each gateway then sees only
  // its share of a key's requests); a study file's `fleet.gateways: N` means [N].
  std::vector<uint32_t> gateway_counts = {1, 4};
  std::vector<double> loads;  // offered QPS, ascending
  std::vector<uint64_t> seeds;
  double duration_s = 300;     // measured simulated seconds per run (after warm-up); a trace's
                               // measured window is what remains of it, at most this
  double common_load_qps = 0;  // where the report compares p99, KV hit and imbalance
  double primary_slo_s = 3.5;
  workload::WorkloadProfile workload;  // qps, duration_s and seed are set per run
  WhaleOptions whales;
  DriftOptions drift;
  TraceOptions trace;
  RegimeChange regime_change;
  FleetKnobs fleet;
};

}  // namespace cacheroute::sim::study
