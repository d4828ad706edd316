// RunFleet: a deterministic discrete-event simulation of the paper's serving setup
// (the CacheRoute paper, §4): R engines (engine.h), each with its own prefix cache, behind
// G gateways that route every request at its arrival with one of the shipped dataplane
// policies (by name from dataplane/include/cacheroute/dataplane/policy_registry.h), and, for
// CacheRoute, the planner service's own control loop (service::PlannerCore and its
// ControlSchedule, on the simulator's clock) planning every control interval (§3.1, Algorithm 1).
//
// Each gateway routes against its own load view: its dispatched requests not yet finished, timed
// out or rejected. For CacheRoute, every control_interval_s of simulated time the gateways report
// their rate counts to the PlannerCore, which plans, and every gateway's Router installs each
// table it publishes (power of two choices before the first plan). The FleetConfig's planning
// fields become the PlannerConfig (fleet_control.h): `ablation` reproduces the paper's component
// study (§5.2, Table 4), max_plans holds a plan for the rest of the run, stickiness > 0 is
// placement hysteresis. Metrics leave out requests arriving before warmup_s; latencies are over
// completed requests; KV hit is served and token-weighted; routing precision is measured at each
// dispatch against every engine's cache (RunResult::routing_precision).
//
// Determinism: the result (all but the wall-clock fields) depends only on the config and the
// requests. Dispatch, request content, metrics and cost: docs/simulator.md, "Fleet internals".
//
// Usage:
//   FleetConfig config{.policy = "cacheroute", .engines = 30,
//                      .profile = *FindEngineProfile("llama-70b-fp8-tp2-h100"), .seed = 2,
//                      .warmup_s = 60};
//   absl::StatusOr<RunResult> result = RunFleet(config, requests);   // requests by arrival time
//   if (!result.ok()) return result.status();   // names the bad field and value
//   Print(result->ttft_p99_s, result->kv_hit);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"
#include "planner/algorithm.h"
#include "planner/gate.h"
#include "planner/plan_builder.h"
#include "tools/eval/sim/engine.h"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/prefix_cache.h"
#include "tools/frontend/routing/admission.h"

namespace cacheroute::sim {

// kNone: no plan is made and the gateways never get a table, so CacheRoute's dispatch routes every
// key alone (its prefix memory, hashed pair, random and remembered candidates): what the plan adds.
enum class PlanAblation : uint8_t { kFull, kAffinityOnly, kReplication, kNone };
// "full", "affinity", "replication", "none"
std::string_view PlanAblationName(PlanAblation ablation);

enum class GatewayAssignment : uint8_t { kRoundRobin, kRandom };

// One request, as the simulator needs it; the workload layer converts to it.
struct SimRequest {
  double arrival_s = 0;        // ≥ 0, non-decreasing across the span
  uint64_t key_id = 0;         // dataplane::KeyId(key)
  uint32_t input_length = 0;   // prompt tokens, ≥ 1
  uint32_t output_length = 0;  // output tokens, ≥ 1
  uint32_t block_size = 16;    // tokens per hash id: a multiple of 16
  std::vector<uint64_t> hash_ids;
};

// The chained 16-token block hashes of a request's prompt (see "Request content" above): of a
// prompt of `input_length` tokens described by one hash id per `block_size` tokens (a multiple of
// 16; nothing is appended otherwise).
void AppendPromptBlockHashes(std::span<const uint64_t> hash_ids, uint32_t block_size,
                             uint32_t input_length, std::vector<uint64_t>& out);
void AppendSimRequestBlockHashes(const SimRequest& request, std::vector<uint64_t>& out);

struct FleetConfig {
  // The policy's canonical name in the dataplane's registry (dataplane::BuiltinPolicies()), through
  // which each gateway creates it. A table policy's (PolicyInfo::uses_table) gateways route by the
  // planner's tables, and the fleet runs CacheRoute's control plane.
  std::string policy = "flat-lb";
  uint32_t engines = 30;  // R
  uint32_t gateways = 1;  // G
  GatewayAssignment gateway_assignment = GatewayAssignment::kRoundRobin;
  // dynamo-kv and dynamo-kv-exact behind several gateways: every gateway's policy counts the blocks
  // in flight of every gateway's requests (one DynamoActiveBlocks), as Dynamo's router replicas do
  // with router_replica_sync, here with no delay (an upper bound). Their prefill-token term stays
  // each gateway's own.
  bool replica_sync = false;
  EngineProfile profile;  // e.g. *FindEngineProfile("llama-70b-fp8-tp2-h100")
  EngineOptions engine = {.max_waiting = 0, .timeout_s = 60};
  uint64_t seed = 1;       // seeds the policies' randomness and the gateway choice
  double warmup_s = 0;     // arrivals before this are excluded from metrics
  double offered_qps = 0;  // reported as is; 0: measured from the arrivals

  // The baselines' parameters, as every policy factory of the registry takes them (the published
  // defaults; the factories check them).
  dataplane::PolicyParameters parameters{};

  // The precise baselines (PolicyInfo::reads_kv_events): every engine's KV events (its prefix
  // cache's stored and removed blocks, one batch per engine step) reach every gateway's index
  // this long after they happen; finite, >= 0.
  double kv_event_delay_s = 0.05;

  // CacheRoute.
  double control_interval_s = 10;  // in [0.001, 3600]
  // The per-assignment load cap, QPS. 0: CalibrateQCap(profile, mean prompt, mean prompt, mean
  // output) over the requests, i.e. assuming no cache hits (docs/simulator.md, "q_cap").
  double q_cap = 0;
  uint64_t slots_per_destination = 64;  // W
  double rate_smoothing_s = 10;         // the RateAggregator's τ
  uint32_t recorder_max_keys = 4096;    // RateRecorder sketch size per gateway
  PlanAblation ablation = PlanAblation::kFull;
  uint32_t max_plans = 0;  // stop replanning after this many plans; 0: replan all run long
  double stickiness = 0;   // PlanConfig::stickiness, finite ≥ 0; 0: LPT from scratch every time
  // The table policy's dispatch rule (RouterOptions::dispatch) and the algorithm the planner plans
  // with (PlannerConfig::algorithm): the defaults are "cacheroute"'s; UseAlgorithm sets the policy
  // and both for an algorithm (the paper's: "cacheroute-paper").
  dataplane::DispatchOptions dispatch{};
  planner::Algorithm algorithm = planner::Algorithm::kCacheRoute;
  // Byte-aware planning (PlannerConfig::kv_tokens_per_destination, planned_prefix_share): the
  // share of each engine's KV cache reserved for planned prefixes, in [0, 1]; 0: the slot model.
  // The gateways then measure each request's reusable prefix (the tokens it shares with the key's
  // previous request at that gateway) and report it with the counts; the planner gets the
  // engines' KV capacity and, as the per-request overhead, the mean output's decode in
  // prefill-token equivalents.
  double plan_kv_budget_share = 0;
  // Whether the gateways measure each destination's cache turnover (Router::SetTurnover); false:
  // the dispatch's default_turnover throughout.
  bool measure_turnover = true;
  // Whether the gateways report where they last sent each key and the planner keeps admitted keys
  // there as far as the balance allows (PlannerConfig::follow_served; docs/dispatch.md, "The plan
  // follows the cache"). Only the token-work rule's gateways remember where keys went.
  bool plan_follows_cache = true;

  // Fleet sharing among the gateways of a token-work table policy, when G > 1 (docs/dispatch.md,
  // "Several gateways"; fleet_share.h): every share_interval_s each gateway sends the planner's
  // ShareExchange what its picks made known (placements) and, with share_work, its work in flight;
  // every other gateway gets it share_delay_s later unless lost (probability share_loss per batch
  // and gateway). Off: each gateway knows only its own requests.
  bool share = false;
  bool share_work = true;
  double share_interval_s = 0.005;  // in [0.001, 10]
  double share_delay_s = 0.002;     // in [0, 10]
  double share_loss = 0;            // in [0, 1]

  // The rollout gate (planner/gate.h) as the planner runs it with gate.enabled and gate_interval:
  // every gate_interval_s the gateways report their per-arm evidence (TTFT at the first token,
  // rejections and timeouts as failures; at a planning step with their rate counts, between them
  // in a report without counts, as a gateway reporting more often than the planner plans does),
  // the gate decides, and a changed split is published at once with the held plan.
  // CacheRoute only; the control loop then runs every interval even after max_plans (the plan is
  // held, the split is not). gate_interval_s 0: the gate decides at planning steps only.
  bool gate = false;
  planner::GateOptions gate_options;
  double gate_interval_s = 10;  // the shipped gateway's report_interval default

  // Shedding (the front ends' `shed`, tools/frontend/routing/admission.h): each gateway asks its
  // own admission queue, on simulated time, before it routes a request; a request admitted from
  // the queue is routed when room comes, a shed one is answered 429 and never reaches an engine
  // (RunResult::shed; not a failure). Every request has priority 0.
  bool shed = false;
  frontend::AdmissionOptions admission{};
  // Goodput: RunResult::within_slo counts the window's completed requests whose TTFT is at most
  // this (0: none counted).
  double goodput_slo_s = 0;

  // Keep a DispatchRecord per request and a PlanRecord per plan built in the result (tests,
  // debugging).
  bool record_dispatches = false;
};

// InvalidArgument naming the field and value for a bad config ("fleet config <field>: …"); the
// policy must be in the registry.
absl::Status ValidateFleetConfig(const FleetConfig& config);

// The checks a dispatch rule's costs must pass: InvalidArgument "<name>.<field>: must be …, got
// <value>" (`name` says where the options came from: "fleet" in a study file). The study's
// validation and ValidateFleetConfig both call it.
absl::Status ValidateDispatchOptions(const dataplane::DispatchOptions& dispatch,
                                     std::string_view name);

// The registry entry of config.policy; null for a name the registry does not know.
const dataplane::PolicyInfo* FindFleetPolicy(const FleetConfig& config);

// Whether the run's gateways share (FleetConfig::share, G > 1, a token-work table policy).
bool SharesFleet(const FleetConfig& config);

// CacheRoute as `algorithm` (planner/algorithm.h): the registry's table policy of the same name,
// its dispatch rule (dataplane::DispatchFor) and the algorithm.
void UseAlgorithm(FleetConfig& config, planner::Algorithm algorithm);

struct DispatchRecord {
  double time = 0;
  uint32_t gateway = 0;
  uint32_t destination = 0;
  dataplane::Reason reason = dataplane::Reason::kPolicy;
  bool spilled = false;  // planned, but sent outside the key's set
};

// The table in force after a plan was built (a plan whose routing is unchanged is not
// republished: the table in force is then the earlier one).
struct PlanRecord {
  double time = 0;  // when the plan was made
  std::vector<dataplane::TableEntry> entries;
  std::vector<double> expected_loads;
};

struct EngineResult {
  EngineStats stats;                 // the whole run
  PrefixCacheStats cache;            // the whole run: query and hit tokens at admission
  uint64_t requests = 0;             // dispatched here, in the metrics window
  uint64_t prefill_work_tokens = 0;  // uncached prompt tokens admitted here, in the window
};

struct RunResult {
  std::string policy;  // FleetConfig::policy, with "+affinity"/"+replication"/"+none" for ablations
  double offered_qps = 0;
  uint64_t seed = 0;
  double ttft_p50_s = 0, ttft_p90_s = 0, ttft_p99_s = 0;
  double e2e_p50_s = 0, e2e_p99_s = 0;
  double kv_hit = 0;  // 0..1
  // Routing precision: of the window's requests that some engine's cache holds a prefix of at
  // dispatch, the share sent to an engine holding the longest such prefix (ties count as
  // precise). NaN when no request qualified.
  double routing_precision = 0;
  uint64_t precision_requests = 0;  // the requests it is over
  double imbalance = 1;             // max/mean prefill work over destinations
  uint64_t requests = 0;            // arrivals in the window
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t rejected = 0;   // of failed: queue cap (or too large for the KV cache)
  uint64_t timed_out = 0;  // of failed
  uint64_t shed = 0;       // answered 429 by a gateway's admission queue (FleetConfig::shed)
  uint64_t within_slo = 0;  // completed with TTFT <= FleetConfig::goodput_slo_s
  double goodput_qps = 0;   // within_slo / (last arrival − warmup_s)
  double failure_rate = 0;
  double throughput_rps = 0;  // completed / (last arrival − warmup_s)
  uint64_t planned = 0;       // requests routed by a table (CacheRoute), in the window
  uint32_t plans = 0;
  // Mean over consecutive plans of the share of keys in both whose destination set changed.
  double plan_churn = 0;
  double q_cap = 0;  // as used (CacheRoute)
  // With the gate: its state at the end of the run, its state changes, and the share of window
  // requests whose key was on the table arm.
  std::string gate_state;
  uint32_t gate_changes = 0;
  struct GateChange {
    double time = 0;  // simulated seconds
    std::string state;
    std::string why;
  };
  std::vector<GateChange> gate_history;  // every state change, in order
  double table_arm_share = 0;
  // Fleet sharing: bytes the exchange received (serialized batches) and placements, whole run.
  uint64_t share_bytes_published = 0;
  uint64_t share_placements = 0;
  // The precise baselines' event feed: subscriptions (every gateway to every engine: G × R; 0 for
  // the other policies), the block events published, and the bytes all subscribers received per
  // simulated second (vLLM's msgpack encoding, estimated: docs/simulator.md, "KV events").
  uint64_t kv_event_subscriptions = 0;
  uint64_t kv_events = 0;
  double kv_event_bytes_per_s = 0;
  double simulated_s = 0;  // when the last request ended
  double wall_s = 0;
  double sim_requests_per_s = 0;  // all simulated requests / wall_s
  std::vector<EngineResult> engines;
  std::vector<DispatchRecord> dispatches;  // per request, when record_dispatches
  std::vector<PlanRecord> plan_records;    // when record_dispatches
};

absl::StatusOr<RunResult> RunFleet(const FleetConfig& config, std::span<const SimRequest> requests);

}  // namespace cacheroute::sim
