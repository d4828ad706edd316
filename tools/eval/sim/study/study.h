// Studies: the paper's experiments as named, data-only configurations, and a runner that sweeps
// one over its policies × offered loads × seeds on a thread pool.
//
//   primary   six policies, 70B fp8 TP2 profile, R = 30, top-K 128, the 70B ladder (Table 1)
//   ablation  8B profile: Flat-LB, + affinity, + replication, + LPT, with injected whales (Table 4)
//   negative  a regime with little recoverable prefix work: Flat-LB against CacheRoute (Table 5)
//   drift     a lognormal random walk of key rates (σ = 0.3 per interval, six intervals): plans
//             recomputed every interval against the plan of interval 0 (§5.4, Appendix E)
//   topk256   primary with a top-K 256 active set, the ladder extended to its knees (Table 9)
//   trace     a Mooncake-format trace (--trace FILE or trace.path) replayed on R = 8 70B
//             destinations, its arrival times rescaled to each offered load (long-context regime)
// docs/simulator.md, "Studies", says what each models and where it departs from the paper.
//
// Runs are independent. RunStudy executes them on `jobs` threads and returns them ordered by
// (policy as listed, load ascending, seed as listed) whatever the thread count; every run is
// seeded, so the result is the same for any number of threads (only wall_s differs).
//
// Usage:
//   absl::StatusOr<StudyConfig> config = FindStudy("primary");
//   config->seeds = {1, 2, 3};
//   absl::StatusOr<StudyResult> result =
//       RunStudy(*config, MakeFleetRunner(), {.jobs = 2, .progress = &std::cerr});
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cacheroute/dataplane/router.h"
#include "tools/eval/sim/study/run_record.h"
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
  std::string to;                     // the built-in study whose workload it turns into
  workload::WorkloadProfile workload;  // that study's
};

// What the fleet simulator is told beyond the policy (see tools/eval/sim/fleet.h).
struct FleetKnobs {
  uint32_t gateways = 1;
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
  // Byte-aware planning for every CacheRoute variant but the paper's (FleetConfig::
  // plan_kv_budget_share): the share of each destination's KV reserved for planned prefixes;
  // 0: the slot model. `cacheroute-bytes` is `cacheroute` with kKvBudgetShare in any study.
  double kv_budget_share = 0;
  // CacheRoute's token-work dispatch (dataplane::DispatchOptions; docs/dispatch.md): γ, and the
  // fleet size up to which every destination is a candidate. Studies hold the shipped defaults;
  // these exist to show how the defaults were chosen.
  double decode_stall = dataplane::DispatchOptions{}.decode_stall;
  double queue_stall = dataplane::DispatchOptions{}.queue_stall;
  double queue_wait = dataplane::DispatchOptions{}.queue_wait;
  double memory_short = dataplane::DispatchOptions{}.memory_short;
  uint32_t all_candidates_up_to = dataplane::DispatchOptions{}.all_candidates_up_to;
  uint32_t prefix_memory_log2 = dataplane::DispatchOptions{}.prefix_memory_log2;  // 0: none
  // false: remembered destinations never expire (no cache-turnover measurement), for ablations.
  bool measure_turnover = true;
  // false: replans ignore where keys were last sent (FleetConfig::plan_follows_cache).
  bool plan_follows_cache = true;
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
  // Labels: the six fleet policies (flatlb, sticky, chwbl, dualmap, preble, cacheroute), the
  // CacheRoute variants (cacheroute-paper, …) or the ablation steps (flat, affinity, replication,
  // lpt); see fleet_runner.h.
  std::vector<std::string> policies;
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

// Whether a trace-driven study must already name its trace: a study file may leave it to the
// command line (--trace), which is applied before the study is validated to run.
enum class TracePath : uint8_t { kRequired, kMayComeLater };

// InvalidArgument naming the field and the value. Does not read the trace (ReadStudyTrace does).
absl::Status ValidateStudy(const StudyConfig& config, TracePath trace_path = TracePath::kRequired);

// The built-in studies by name: primary, ablation, negative, drift, turn-bad, topk256, trace. `trace` has
// no trace.path: set it (the CLI's --trace) before validating or running it.
absl::StatusOr<StudyConfig> FindStudy(absl::string_view name);
std::vector<std::string> StudyNames();

// A study from a YAML file: `base: NAME` (optional) starts from a built-in study, every other
// field overrides it. Errors name the file, the field and the value. Fields are listed in
// docs/simulator.md, "Studies".
absl::StatusOr<StudyConfig> LoadStudyFile(const std::string& path);
absl::StatusOr<StudyConfig> ParseStudyYaml(absl::string_view text, absl::string_view source);

// One run of a study.
struct RunSpec {
  const StudyConfig* study = nullptr;
  std::string policy;
  double offered_qps = 0;
  uint64_t seed = 0;
};

// Performs one run. Called from several threads at once; must be deterministic in its spec.
using RunFunction = std::function<absl::StatusOr<RunRecord>(const RunSpec&)>;

struct RunOptions {
  unsigned jobs = 1;                 // worker threads (≥ 1)
  std::ostream* progress = nullptr;  // one line per finished run, and a total; null: silent
};

// What the analytic throughput ceiling needs (docs/simulator.md, "What limits capacity"): the
// workload's mean lengths and its reuse ceiling, measured on the request stream of the common load
// and the first seed.
struct CeilingInputs {
  bool measured = false;
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;
  double reuse = 0;  // the KV hit of one engine with an unbounded cache
};

struct StudyResult {
  StudyConfig config;
  std::vector<RunRecord> runs;  // ordered by (policy as listed, load, seed as listed)
  bool has_drift = false;
  DriftResult drift;
  CeilingInputs ceiling;
  double wall_s = 0;
  uint64_t simulated_requests = 0;
};

// Runs every (policy, load, seed) of the study. The first failing run's status is returned (the
// remaining runs are skipped).
absl::StatusOr<StudyResult> RunStudy(const StudyConfig& config, const RunFunction& run,
                                     const RunOptions& options);

// The requests of one run: the aggregate workload at `offered_qps` (for a trace-driven study, the
// trace rescaled to it, see TraceOptions) plus the study's whales (and, for the drift study, the
// drifting rates), for [0, warm-up + duration). Deterministic. A trace that ends within the
// warm-up at this load is InvalidArgument naming fleet.warmup_s.
absl::StatusOr<workload::Workload> BuildRunWorkload(const StudyConfig& config, double offered_qps,
                                                    uint64_t seed);

// The study's trace as read (config.trace must be enabled), keyed by its first key_blocks hash
// ids. InvalidArgument naming trace.path and the file when it is missing, malformed or has fewer
// than two requests at distinct times (no rate to rescale).
absl::StatusOr<workload::Workload> ReadStudyTrace(const StudyConfig& config);

// The drift study's plan churn: the active set's rates walked for config.drift.intervals
// intervals and planned afresh each time with the planner core (Algorithm 1).
absl::StatusOr<DriftResult> ComputeDriftChurn(const StudyConfig& config, double offered_qps,
                                              uint64_t seed);

// Per-key rate multipliers of the random walk: result[i][k] is key k's multiplier in interval i
// (interval 0 is all ones), normalised so that Σ_k base[k]·m[i][k] = Σ_k base[k].
std::vector<std::vector<double>> DriftMultipliers(const std::vector<double>& base_rates,
                                                  const DriftOptions& drift, uint64_t seed);

// A workload's mean lengths and its reuse ceiling: the share of prompt tokens in full blocks that
// an earlier request already published (the leading run of each prompt's chained block ids), i.e.
// the KV hit of one engine with an unbounded cache. No routing over finite caches does better.
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

// The fleet's analytic throughput ceiling at KV hit `hit`: R × one destination's SaturationQps at
// the workload's mean lengths (ceiling.measured must be true).
absl::StatusOr<double> CeilingQps(const StudyConfig& config, const CeilingInputs& ceiling,
                                  double hit);

// Parses "1,2,3" into numbers; InvalidArgument naming `flag` and the bad item.
absl::StatusOr<std::vector<double>> ParseNumberList(absl::string_view text, absl::string_view flag);
absl::StatusOr<std::vector<uint64_t>> ParseSeedList(absl::string_view text, absl::string_view flag);

}  // namespace cacheroute::sim::study
