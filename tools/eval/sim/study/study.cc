// The built-in studies, study files, the parallel sweep and the per-run workloads; see study.h.
#include "tools/eval/sim/study/study.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <mutex>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/key_id.h"
#include "planner/algorithm.h"
#include "planner/plan_builder.h"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/study/capacity.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::sim::study {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view requirement,
                     absl::string_view got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", requirement, ", got ", got));
}
std::string Num(double v) { return absl::StrFormat("%g", v); }

// Every policy label a study may name, in the order the validation error lists them.
constexpr absl::string_view kPolicyLabels[] = {
    // The fleet policies (tools/eval/sim/fleet.h), "flatlb" also accepted for "flat-lb": the
    // paper's six and the two modern baselines.
    "flat-lb", "flatlb", "sticky", "chwbl", "dualmap", "preble", "cacheroute", "dynamo-kv", "llm-d",
    // CacheRoute as the paper's Algorithm 1 publishes it (fleet_runner.h).
    "cacheroute-paper",
    // CacheRoute with byte-aware planning (PlanConfig::kv_budget_tokens).
    "cacheroute-bytes",
    // Either behind the rollout gate (docs/gate.md).
    "cacheroute-gated", "cacheroute-paper-gated",
    // Ablation steps (Table 4).
    "flat", "affinity", "replication", "lpt",
    // Drift study: CacheRoute replanning every control interval, once per drift interval, once
    // (held), or every 10 s with placement hysteresis.
    "fresh", "stale", "held", "fresh-sticky",
    // CacheRoute replanning every 10 s, from scratch or with placement hysteresis.
    "cacheroute-replan-10s", "cacheroute-sticky-lpt",
    // CacheRoute's dispatch with no plan (PlanAblation::kNone).
    "cacheroute-no-plan"};

// "a, b, … or z": the labels as the validation error names them.
std::string PolicyLabelList() {
  constexpr size_t n = std::size(kPolicyLabels);
  return absl::StrCat(absl::StrJoin(absl::MakeConstSpan(kPolicyLabels, n - 1), ", "), " or ",
                      kPolicyLabels[n - 1]);
}

// The paper's tables come from runs in which "the table remains fixed for a control interval"
// (§1, §3.2) and the distribution does not drift; only §5.4's drift study replans. So the
// positive and negative studies make one plan, 30 s into the 60-s warm-up, from the rates the
// gateway measured over those 30 s (τ = 3 s: the single interval's counts, unsmoothed), and hold
// it for the rest of the run; the remaining 30 s of warm-up warm the caches it points at.
// docs/simulator.md, "Studies", has the reasoning and the 10-s replanning sensitivity.
void HoldOnePlan(StudyConfig& c) {
  c.fleet.control_interval_s = 30;
  c.fleet.rate_smoothing_s = 3;
  c.fleet.max_plans = 1;
}

// What the paper's studies share: R = 30 destinations of `profile`, paired seeds, 300 measured
// seconds, and the primary aggregate at top-K 128 with 120 s of warm-up in the workload.
StudyConfig PaperSetup(std::string profile) {
  StudyConfig c;
  c.profile = std::move(profile);
  c.destinations = 30;
  c.seeds = {2, 3, 4};
  c.duration_s = 300;
  c.workload = workload::PaperPrimaryProfile();
  c.workload.top_k = 128;
  c.workload.warmup_s = 120;
  return c;
}

StudyConfig Primary() {
  StudyConfig c = PaperSetup("llama-70b-fp8-tp2-h100");
  c.name = "primary";
  c.description =
      "The six-policy comparison of the paper's Table 1: Llama-3.3-70B fp8 on 30 TP2 "
      "destinations, the semi-synthetic primary workload (128,824 lognormal keys, σ = 1.65) with "
      "a top-K 128 active set, the 70B load ladder and paired seeds.";
  c.policies = {"flat-lb",
                "sticky",
                "chwbl",
                "dualmap",
                "preble",
                "dynamo-kv",
                "llm-d",
                "cacheroute",
                "cacheroute-paper",
                "cacheroute-replan-10s",
                "cacheroute-sticky-lpt"};
  c.loads = Ladder70B();
  c.common_load_qps = 100;
  HoldOnePlan(c);
  return c;
}

StudyConfig Ablation() {
  StudyConfig c = PaperSetup("llama-8b-h100");
  c.name = "ablation";
  c.description =
      "The component ablation of the paper's Table 4 on Llama-3.1-8B (one H100 per destination, "
      "R = 30): Flat-LB, then CacheRoute with affinity only (one destination per key, hashed "
      "placement), + load-proportional replication (hashed placement), + LPT placement (the full "
      "Algorithm 1). Workload: the primary aggregate at top-K 128 plus 4 injected whale keys "
      "carrying 40% of every offered load together (the paper's 'controlled synthetic-whale "
      "workload'; its count and share are ours, inside the 5–45% head shares of the paper's "
      "Table 13), so that the whales exceed q_cap at the upper loads and replication has work. "
      "The steps run the paper's dispatch; `cacheroute` is the shipped variant (docs/dispatch.md).";
  // The paper's steps, then CacheRoute as shipped (load-adaptive k_b, spills, its dispatch).
  c.policies = {"flat", "affinity", "replication", "lpt", "dynamo-kv", "llm-d", "cacheroute"};
  c.loads = Ladder8B();
  c.common_load_qps = 240;
  c.whales = {.count = 4, .share = 0.4};
  HoldOnePlan(c);
  return c;
}

StudyConfig Negative() {
  StudyConfig c = PaperSetup("llama-70b-fp8-tp2-h100");
  c.name = "negative";
  c.description =
      "A regime with little recoverable prefix work (the paper's Table 5, whose 32B aggregates "
      "we do not have): no global template, a short per-key context (160 tokens), a retrieved "
      "block that changes on every request, few multi-turn threads (10%) and a long unique turn "
      "(≈ 1,400 tokens), over a wide top-K 2000 active set. Only the per-key context (≈ 9% of a "
      "prompt) is recoverable, and only by affinity. 70B profile, R = 30, Flat-LB against "
      "CacheRoute.";
  c.policies = {"flat-lb",
                "dynamo-kv",
                "llm-d",
                "cacheroute",
                "cacheroute-paper",
                "cacheroute-gated",
                "cacheroute-paper-gated"};
  c.loads = Ladder70B();
  c.common_load_qps = 60;
  c.workload.top_k = 2000;
  c.workload.template_tokens = 0;
  c.workload.context_tokens = 160;
  c.workload.few_shot_tokens = 240;
  c.workload.few_shot_pool = 64;
  c.workload.few_shot_break_rate = 1.0;
  c.workload.multi_turn_share = 0.1;
  c.workload.mean_requests_per_thread = 1.1;
  c.workload.mean_turn_tokens = 1400;
  HoldOnePlan(c);
  return c;
}

StudyConfig TurnBad() {
  StudyConfig c = Primary();
  c.name = "turn-bad";
  c.description =
      "A workload that turns bad mid-run, for the rollout gate (docs/gate.md): the primary 70B "
      "setup and workload (top-K 128) for the first 300 simulated seconds, then the negative "
      "study's workload (a new top-K 2000 active set with little recoverable prefix) for the "
      "remaining 360. CacheRoute replans every 30 s so that its plan follows the new keys. The "
      "figure is how many gate decisions after the change each gated variant is rolled back, "
      "beside the capacities over the whole run.";
  c.policies = {"flat-lb", "cacheroute", "cacheroute-paper", "cacheroute-gated",
                "cacheroute-paper-gated"};
  c.loads = {20, 40, 60, 80, 100};
  c.common_load_qps = 60;
  c.duration_s = 600;
  c.fleet.max_plans = 0;
  c.regime_change = {.enabled = true, .at_s = 300, .to = "negative", .workload = Negative().workload};
  return c;
}

StudyConfig Drift() {
  StudyConfig c = PaperSetup("llama-70b-fp8-tp2-h100");
  c.name = "drift";
  c.description =
      "Rate drift (the paper's §5.4 and Appendix E): every key's rate follows a lognormal random "
      "walk, σ = 0.3 per interval, over six 50-s intervals (the measured window), rescaled to "
      "the offered load, on the primary 70B setup at 160 QPS. `fresh` replans every 10 s from "
      "measured rates; `stale` replans once per drift interval, at its start, from the rates "
      "measured during the previous one (the paper's one-interval-stale plan); `held` makes one "
      "plan at the end of the warm-up (interval 0's rates) and keeps it for all six intervals; "
      "`fresh-sticky` replans every 10 s with placement hysteresis (stickiness 0.1). Plan churn "
      "is computed with the planner core on the exact walked rates, and in the fleet per replan. "
      "The five baselines run on the same drifting workload.";
  // CacheRoute's plan timings, then the baselines on the same drifting workload.
  c.policies = {"fresh", "stale",   "held",   "fresh-sticky", "flat-lb", "sticky",
                "chwbl", "dualmap", "preble", "dynamo-kv",    "llm-d"};
  c.loads = {160};
  c.common_load_qps = 160;
  c.drift = {.enabled = true, .intervals = 6, .sigma = 0.3};
  // Warm-up is one drift interval, so the stale variant's plans land on interval boundaries.
  c.fleet.warmup_s = 50;
  return c;
}

// Every baseline (the paper's five and the two modern routers), CacheRoute, and CacheRoute as the
// paper publishes it.
std::vector<std::string> BaselinesAndCacheRoute() {
  return {"flat-lb",   "sticky", "chwbl",      "dualmap",         "preble",
          "dynamo-kv", "llm-d",  "cacheroute", "cacheroute-paper"};
}

// The paper's Table 9 (Appendix C.2): the primary setup with a top-K 256 active set. The paper's
// ladder does not reach the knees with this calibration
// (docs/results/primary-extended-ladder.yaml), so the ladder runs from 120 to 720 QPS.
StudyConfig TopK256() {
  StudyConfig c = Primary();
  c.name = "topk256";
  c.description =
      "The wide active set of the paper's Table 9 (Appendix C.2): the primary setup (Llama-3.3-70B "
      "fp8 on 30 TP2 destinations, the primary aggregate, one plan held) with a top-K 256 active "
      "set, the offered load spread over twice as many keys. The paper's ladder stops at 300 "
      "QPS, which every policy but Sticky passes with this calibration; the ladder here goes on "
      "to 720 QPS, past every knee.";
  c.policies = BaselinesAndCacheRoute();
  c.loads = {120, 180, 240, 300, 360, 420, 480, 560, 640, 720};
  c.common_load_qps = 300;
  c.workload.top_k = 256;
  return c;
}

// Byte-aware planning's study: the primary setup and rates, each key's reusable prefix drawn from
// a heavy-tailed distribution independent of its rate, and KV caches that hold one large prefix
// but not two (docs/simulator.md, "The heterogeneous-prefix study").
StudyConfig HeteroPrefix() {
  StudyConfig c = Primary();
  c.name = "hetero-prefix";
  c.description =
      "Reusable prefixes that differ by orders of magnitude (the paper's §3.1 leaves them to "
      "byte-aware admission): the primary setup (Llama-3.3-70B fp8 on 30 TP2 destinations, the "
      "primary aggregate at top-K 128, one plan held), each key's context drawn once from a "
      "lognormal with median 3,162 tokens and σ = 1.1, clipped to [200, 50,000] (a 200-token "
      "persona next to a 50K-token document set; independent of the key's rate), and 4,000 KV "
      "blocks (64K tokens) per destination instead of the profile's 40,071: a destination holds "
      "the largest prefix but not two of them, and the active set's prefixes (about 660K tokens) "
      "fit the fleet's 1.92M only where they are spread. `cacheroute-bytes` is CacheRoute with "
      "byte-aware planning (half of each destination's KV reserved for planned prefixes).";
  c.policies = BaselinesAndCacheRoute();
  c.policies.push_back("cacheroute-bytes");
  c.loads = {30, 60, 90, 120, 150, 180, 210, 240};
  c.common_load_qps = 120;
  c.workload.context_tokens = 3162;  // √(200 × 50,000): the clip bounds at about ±2.5σ
  c.workload.context_sigma = 1.1;
  c.workload.context_min_tokens = 200;
  c.workload.context_max_tokens = 50000;
  c.fleet.kv_blocks = 4000;
  return c;
}

// A Mooncake-format trace replayed at each load of the ladder (TraceOptions). The trace is not
// in the repository: FindStudy returns this study without trace.path.
StudyConfig Trace() {
  StudyConfig c;
  c.name = "trace";
  c.description =
      "Trace-driven, long-context regime: the Mooncake FAST'25 conversation trace (kvcache-ai/"
      "Mooncake, FAST25-release/traces/conversation_trace.jsonl; --trace FILE) on Llama-3.3-70B "
      "fp8, R = 8 TP2 destinations, its arrival times rescaled so that its mean rate is each "
      "offered load (the same requests for every seed), keyed by its first two 512-token blocks "
      "(block 0 is a system prompt every request shares). Prompts average 12k tokens and the "
      "p99 prompt, ~85k tokens, takes 6.8 s to prefill on an idle destination, so no policy "
      "meets 3.5 s (nor 2 s or 5 s) at any load; the SLO is 12 s, the ~8.5-s p99 floor of a "
      "nearly idle fleet plus the paper's 3.5 s. 120 s of warm-up (the prefix caches fill in "
      "about 90 s at the knees), then the rest of the trace is measured. CacheRoute's one plan is "
      "made 30 s into the warm-up, as in the other studies, so it exists before the measured "
      "window at every load; but conversations come and go (7,373 keys, 1.6 requests each), so "
      "its keys carry about 1% of the measured requests and CacheRoute is in effect its rule for "
      "unadmitted keys. Replanning every 10 s did worse (a conversation admitted after its first "
      "turn is placed away from the destination that cached it).";
  c.profile = "llama-70b-fp8-tp2-h100";
  c.destinations = 8;
  c.policies = BaselinesAndCacheRoute();
  c.loads = {3, 4, 5, 5.5, 6, 6.5, 7, 8};
  c.seeds = {2, 3, 4};
  c.duration_s = 86400;  // longer than the Mooncake trace at any load here: never cut
  c.common_load_qps = 5;
  c.primary_slo_s = 12;
  c.workload = workload::PaperPrimaryProfile();
  c.trace.enabled = true;  // trace.path comes from --trace or a study file
  c.fleet.warmup_s = 120;
  HoldOnePlan(c);  // the plan at 30 s, 90 s before the measured window
  return c;
}

// A request's hash ids and key mapped into a namespace of their own (for whales), keeping the
// chain property: equal ids stay equal, different ids stay different (Mix64 is a bijection).
void Rename(workload::Request& r, absl::string_view prefix, uint64_t salt) {
  for (uint64_t& id : r.hash_ids) id = dataplane::Mix64(id ^ salt);
  r.key = absl::StrCat(prefix, r.key);
  r.thread_id = dataplane::Mix64(r.thread_id ^ salt);
}

}  // namespace

absl::Status ValidateStudy(const StudyConfig& c, TracePath trace_path) {
  if (c.name.empty() || !std::all_of(c.name.begin(), c.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_';
      })) {
    return Invalid("name", "letters, digits, '-' or '_' (it names files)", "\"" + c.name + "\"");
  }
  if (absl::StatusOr<EngineProfile> p = FindEngineProfile(c.profile); !p.ok()) {
    return Invalid("profile", "one of " + absl::StrJoin(EngineProfileNames(), ", "),
                   "\"" + c.profile + "\"");
  }
  if (c.destinations < 1) return Invalid("destinations", ">= 1", "0");
  if (c.policies.empty()) return Invalid("policies", "non-empty", "[]");
  std::set<std::string> seen;
  for (const std::string& p : c.policies) {
    if (!absl::c_linear_search(kPolicyLabels, p)) {
      return Invalid("policies", PolicyLabelList(), "\"" + p + "\"");
    }
    if (!seen.insert(p).second) return Invalid("policies", "distinct", "\"" + p + "\" twice");
  }
  if (c.loads.empty()) return Invalid("loads", "non-empty", "[]");
  for (size_t i = 0; i < c.loads.size(); ++i) {
    if (!(c.loads[i] > 0 && std::isfinite(c.loads[i]))) {
      return Invalid("loads", "finite and > 0", Num(c.loads[i]));
    }
    if (i > 0 && !(c.loads[i] > c.loads[i - 1])) {
      return Invalid("loads", "strictly ascending", absl::StrJoin(c.loads, ","));
    }
  }
  if (c.seeds.empty()) return Invalid("seeds", "non-empty", "[]");
  if (std::set<uint64_t>(c.seeds.begin(), c.seeds.end()).size() != c.seeds.size()) {
    return Invalid("seeds", "distinct", absl::StrJoin(c.seeds, ","));
  }
  if (!(c.duration_s > 0 && std::isfinite(c.duration_s))) {
    return Invalid("duration", "finite and > 0", Num(c.duration_s));
  }
  if (!(c.common_load_qps >= 0 && std::isfinite(c.common_load_qps))) {
    return Invalid("common_load_qps", "finite and >= 0", Num(c.common_load_qps));
  }
  if (!(c.primary_slo_s > 0 && std::isfinite(c.primary_slo_s))) {
    return Invalid("primary_slo_s", "finite and > 0", Num(c.primary_slo_s));
  }
  if (!(c.whales.share >= 0 && c.whales.share < 1)) {
    return Invalid("whales.share", "in [0, 1)", Num(c.whales.share));
  }
  if (c.whales.count > 0 && c.whales.share == 0) {
    return Invalid("whales.share", "> 0 when whales.count > 0", "0");
  }
  if (c.trace.enabled) {
    if (c.trace.path.empty() && trace_path == TracePath::kRequired) {
      return Invalid("trace.path",
                     "a Mooncake-format trace file (--trace FILE, or trace: {path: FILE} in a "
                     "study file)",
                     "\"\"");
    }
    if (c.trace.key_blocks < 1) return Invalid("trace.key_blocks", ">= 1", "0");
    if (c.drift.enabled) return Invalid("drift.enabled", "false for a trace-driven study", "true");
  }
  if (c.regime_change.enabled) {
    if (c.trace.enabled || c.drift.enabled) {
      return Invalid("regime_change.enabled", "false with a trace or drift", "true");
    }
    if (!(c.regime_change.at_s > 0 && c.regime_change.at_s < c.fleet.warmup_s + c.duration_s)) {
      return Invalid("regime_change.at_s", "inside the run (0, warm-up + duration)",
                     Num(c.regime_change.at_s));
    }
    workload::WorkloadProfile w = c.regime_change.workload;
    w.qps = c.loads.empty() ? 1 : c.loads.front();
    w.duration_s = c.duration_s + c.fleet.warmup_s;
    if (absl::Status s = workload::ValidateProfile(w); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("regime_change.workload: ", s.message()));
    }
  }
  if (c.drift.enabled) {
    if (c.drift.intervals < 2) return Invalid("drift.intervals", ">= 2", Num(c.drift.intervals));
    if (!(c.drift.sigma >= 0 && c.drift.sigma <= 3)) {
      return Invalid("drift.sigma", "in [0, 3]", Num(c.drift.sigma));
    }
  }
  const FleetKnobs& f = c.fleet;
  if (f.gateways < 1) return Invalid("fleet.gateways", ">= 1", "0");
  if (!(f.control_interval_s >= 0.001 && f.control_interval_s <= 3600)) {
    return Invalid("fleet.control_interval_s", "in [0.001, 3600]", Num(f.control_interval_s));
  }
  if (!(f.rate_smoothing_s > 0 && std::isfinite(f.rate_smoothing_s))) {
    return Invalid("fleet.rate_smoothing_s", "finite and > 0", Num(f.rate_smoothing_s));
  }
  if (!(f.q_cap >= 0 && std::isfinite(f.q_cap))) {
    return Invalid("fleet.q_cap", "finite and >= 0", Num(f.q_cap));
  }
  if (f.slots_per_destination < 1) return Invalid("fleet.slots_per_destination", ">= 1", "0");
  if (!(f.warmup_s >= 0 && std::isfinite(f.warmup_s))) {
    return Invalid("fleet.warmup_s", "finite and >= 0", Num(f.warmup_s));
  }
  if (!(f.timeout_s > 0)) return Invalid("fleet.timeout_s", "> 0", Num(f.timeout_s));
  if (!(f.stickiness >= 0 && std::isfinite(f.stickiness))) {
    return Invalid("fleet.stickiness", "finite and >= 0", Num(f.stickiness));
  }
  if (!(f.decode_stall >= 0 && std::isfinite(f.decode_stall))) {
    return Invalid("fleet.decode_stall", "finite and >= 0", Num(f.decode_stall));
  }
  if (!(f.queue_stall >= 0 && std::isfinite(f.queue_stall))) {
    return Invalid("fleet.queue_stall", "finite and >= 0", Num(f.queue_stall));
  }
  if (!(f.queue_wait >= 0 && std::isfinite(f.queue_wait))) {
    return Invalid("fleet.queue_wait", "finite and >= 0", Num(f.queue_wait));
  }
  if (!(f.memory_short >= 0 && std::isfinite(f.memory_short))) {
    return Invalid("fleet.memory_short", "finite and >= 0", Num(f.memory_short));
  }
  if (!(f.kv_budget_share >= 0 && f.kv_budget_share <= 1)) {
    return Invalid("fleet.kv_budget_share", "in [0, 1]", Num(f.kv_budget_share));
  }
  workload::WorkloadProfile w = c.workload;
  w.qps = c.loads.front();
  w.duration_s = c.duration_s + f.warmup_s;
  if (absl::Status s = workload::ValidateProfile(w); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("workload: ", s.message()));
  }
  return absl::OkStatus();
}

std::vector<std::string> StudyNames() {
  return {"primary",  "ablation", "negative",      "drift",
          "turn-bad", "topk256",  "hetero-prefix", "trace"};
}

absl::StatusOr<StudyConfig> FindStudy(absl::string_view name) {
  if (name == "primary") return Primary();
  if (name == "ablation") return Ablation();
  if (name == "negative") return Negative();
  if (name == "drift") return Drift();
  if (name == "turn-bad") return TurnBad();
  if (name == "topk256") return TopK256();
  if (name == "hetero-prefix") return HeteroPrefix();
  if (name == "trace") return Trace();
  return absl::NotFoundError(absl::StrCat("--study: unknown study \"", name,
                                          "\" (known: ", absl::StrJoin(StudyNames(), ", "), ")"));
}

// ---------------------------------------------------------------------------------------------
// Study files.

namespace {

// Reads one scalar into `out`, naming the field on a conversion error.
template <typename T>
absl::Status ReadScalar(const YAML::Node& node, absl::string_view field, T& out) {
  try {
    out = node.as<T>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not a valid value: \"",
                     node.IsScalar() ? node.Scalar() : "(not a scalar)", "\""));
  }
  return absl::OkStatus();
}

// One entry of a mapping in a study file, offered to the fields the mapping may hold: the first
// Is(name) or Read(name, out) whose name is the entry's key takes the entry, and Read also reads
// its value into `out`. status() is the first error, matched() whether a field took the entry.
class Entry {
 public:
  Entry(absl::string_view where, std::string key, YAML::Node value)
      : field_(where.empty() ? key : absl::StrCat(where, ".", key)),
        key_(std::move(key)),
        value_(std::move(value)) {}

  bool Is(absl::string_view name) {
    if (matched_ || key_ != name) return false;
    matched_ = true;
    return true;
  }
  // True when this field took the entry and its value was read.
  template <typename T>
  bool Read(absl::string_view name, T& out) {
    if (!Is(name)) return false;
    status_ = ReadScalar(value_, field_, out);
    return status_.ok();
  }
  void SetStatus(absl::Status s) { status_ = std::move(s); }

  const std::string& field() const { return field_; }  // "where.key", or "key" at the top level
  const YAML::Node& value() const { return value_; }
  const absl::Status& status() const { return status_; }
  bool matched() const { return matched_; }

 private:
  const std::string field_;
  const std::string key_;
  const YAML::Node value_;
  bool matched_ = false;
  absl::Status status_;
};

// Offers each entry of mapping `node` to `apply(Entry&)`, rejecting an entry no field takes.
template <typename F>
absl::Status ForEachField(const YAML::Node& node, absl::string_view where, F apply) {
  if (!node.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, ": must be a mapping"));
  for (const auto& it : node) {
    Entry entry(where, it.first.as<std::string>(), it.second);
    apply(entry);
    if (!entry.status().ok()) return entry.status();
    if (!entry.matched()) {
      return absl::InvalidArgumentError(absl::StrCat(entry.field(), ": unknown field"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyWorkload(const YAML::Node& node, workload::WorkloadProfile& w) {
  return ForEachField(node, "workload", [&](Entry& e) {
    e.Read("keys", w.keys);
    e.Read("rate_sigma", w.rate_sigma);
    e.Read("max_key_share", w.max_key_share);
    e.Read("top_k", w.top_k);
    e.Read("warmup_s", w.warmup_s);
    e.Read("multi_turn_share", w.multi_turn_share);
    e.Read("mean_requests_per_thread", w.mean_requests_per_thread);
    e.Read("follow_up_probability", w.follow_up_probability);
    e.Read("template_tokens", w.template_tokens);
    e.Read("context_tokens", w.context_tokens);
    e.Read("context_sigma", w.context_sigma);
    e.Read("context_min_tokens", w.context_min_tokens);
    e.Read("context_max_tokens", w.context_max_tokens);
    e.Read("few_shot_tokens", w.few_shot_tokens);
    e.Read("few_shot_pool", w.few_shot_pool);
    e.Read("few_shot_break_rate", w.few_shot_break_rate);
    e.Read("mean_turn_tokens", w.mean_turn_tokens);
    e.Read("mean_output_tokens", w.mean_output_tokens);
    e.Read("length_sigma", w.length_sigma);
    e.Read("arrival_cv", w.arrivals.cv);
    if (std::string name; e.Read("arrival", name)) {
      if (name == "poisson")
        w.arrivals.process = workload::ArrivalProcess::kPoisson;
      else if (name == "gamma")
        w.arrivals.process = workload::ArrivalProcess::kGamma;
      else
        e.SetStatus(Invalid(e.field(), "poisson or gamma", "\"" + name + "\""));
    }
  });
}

absl::Status ApplyYaml(const YAML::Node& root, StudyConfig& c) {
  return ForEachField(root, "", [&](Entry& e) {
    e.Is("base");  // applied first, by the caller
    e.Read("name", c.name);
    e.Read("description", c.description);
    e.Read("profile", c.profile);
    e.Read("destinations", c.destinations);
    e.Read("policies", c.policies);
    e.Read("loads", c.loads);
    e.Read("seeds", c.seeds);
    e.Read("duration_s", c.duration_s);
    e.Read("common_load_qps", c.common_load_qps);
    e.Read("primary_slo_s", c.primary_slo_s);
    if (e.Is("workload")) e.SetStatus(ApplyWorkload(e.value(), c.workload));
    if (e.Is("whales")) {
      e.SetStatus(ForEachField(e.value(), "whales", [&](Entry& w) {
        w.Read("count", c.whales.count);
        w.Read("share", c.whales.share);
      }));
    }
    if (e.Is("drift")) {
      e.SetStatus(ForEachField(e.value(), "drift", [&](Entry& d) {
        d.Read("enabled", c.drift.enabled);
        d.Read("intervals", c.drift.intervals);
        d.Read("sigma", c.drift.sigma);
      }));
    }
    if (e.Is("trace")) {
      c.trace.enabled = true;
      e.SetStatus(ForEachField(e.value(), "trace", [&](Entry& t) {
        t.Read("enabled", c.trace.enabled);
        t.Read("path", c.trace.path);
        t.Read("key_blocks", c.trace.key_blocks);
      }));
    }
    if (e.Is("fleet")) {
      FleetKnobs& f = c.fleet;
      e.SetStatus(ForEachField(e.value(), "fleet", [&](Entry& k) {
        k.Read("gateways", f.gateways);
        k.Read("control_interval_s", f.control_interval_s);
        k.Read("rate_smoothing_s", f.rate_smoothing_s);
        k.Read("q_cap", f.q_cap);
        k.Read("slots_per_destination", f.slots_per_destination);
        k.Read("warmup_s", f.warmup_s);
        k.Read("timeout_s", f.timeout_s);
        k.Read("queue_cap", f.queue_cap);
        k.Read("max_plans", f.max_plans);
        k.Read("stickiness", f.stickiness);
        k.Read("kv_blocks", f.kv_blocks);
        k.Read("kv_budget_share", f.kv_budget_share);
        k.Read("decode_stall", f.decode_stall);
        k.Read("queue_stall", f.queue_stall);
        k.Read("queue_wait", f.queue_wait);
        k.Read("memory_short", f.memory_short);
        k.Read("all_candidates_up_to", f.all_candidates_up_to);
        k.Read("prefix_memory_log2", f.prefix_memory_log2);
        k.Read("measure_turnover", f.measure_turnover);
        k.Read("plan_follows_cache", f.plan_follows_cache);
      }));
    }
  });
}

}  // namespace

absl::StatusOr<StudyConfig> ParseStudyYaml(absl::string_view text, absl::string_view source) {
  auto with_source = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(source, ": ", s.message()));
  };
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid YAML: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(source, ": must be a mapping"));
  StudyConfig c;
  if (const YAML::Node base = root["base"]) {
    std::string name;
    if (absl::Status s = ReadScalar(base, "base", name); !s.ok()) return with_source(s);
    absl::StatusOr<StudyConfig> found = FindStudy(name);
    if (!found.ok()) {
      return with_source(Invalid("base", absl::StrJoin(StudyNames(), ", "), "\"" + name + "\""));
    }
    c = *std::move(found);
  } else {
    c.workload = workload::PaperPrimaryProfile();
  }
  try {
    if (absl::Status s = ApplyYaml(root, c); !s.ok()) return with_source(s);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (absl::Status s = ValidateStudy(c, TracePath::kMayComeLater); !s.ok()) return with_source(s);
  return c;
}

absl::StatusOr<StudyConfig> LoadStudyFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("--config: cannot read \"", path, "\""));
  std::stringstream text;
  text << file.rdbuf();
  return ParseStudyYaml(text.str(), path);
}

// ---------------------------------------------------------------------------------------------
// The sweep.

absl::StatusOr<StudyResult> RunStudy(const StudyConfig& config, const RunFunction& run,
                                     const RunOptions& options) {
  if (absl::Status s = ValidateStudy(config); !s.ok()) return s;
  StudyResult result;
  result.config = config;
  const size_t n_policies = config.policies.size();
  const size_t n_loads = config.loads.size();
  const size_t n_seeds = config.seeds.size();
  const size_t total = n_policies * n_loads * n_seeds;
  // Execution order: (load, seed, policy), so the policies sharing one workload run close
  // together; slot order (the result): (policy, load, seed).
  struct Job {
    size_t policy, load, seed;
    size_t Slot(size_t nl, size_t ns) const { return (policy * nl + load) * ns + seed; }
  };
  std::vector<Job> jobs;
  jobs.reserve(total);
  for (size_t l = 0; l < n_loads; ++l) {
    for (size_t s = 0; s < n_seeds; ++s) {
      for (size_t p = 0; p < n_policies; ++p) jobs.push_back({p, l, s});
    }
  }
  std::vector<RunRecord> records(total);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  size_t error_job = total;  // guarded by mu: the lowest failing job, for a deterministic error
  absl::Status error;
  size_t done = 0;
  uint64_t simulated = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  auto worker = [&] {
    for (;;) {
      const size_t j = next.fetch_add(1);
      if (j >= total || stop.load()) return;
      const Job& job = jobs[j];
      const RunSpec spec{.study = &config,
                         .policy = config.policies[job.policy],
                         .offered_qps = config.loads[job.load],
                         .seed = config.seeds[job.seed]};
      absl::StatusOr<RunRecord> r = run(spec);
      std::lock_guard<std::mutex> lock(mu);
      if (!r.ok()) {
        if (j < error_job) {
          error_job = j;
          error = absl::Status(
              r.status().code(),
              absl::StrFormat("study %s, policy %s, %g QPS, seed %d: %s", config.name, spec.policy,
                              spec.offered_qps, spec.seed, r.status().message()));
        }
        stop.store(true);
        return;
      }
      r->study = config.name;
      r->policy = spec.policy;
      r->offered_qps = spec.offered_qps;
      r->seed = spec.seed;
      ++done;
      simulated += r->simulated_requests;
      if (options.progress != nullptr) {
        const double wall = elapsed();
        *options.progress << absl::StrFormat(
            "[%*d/%d] %s %-11s %5g QPS seed %-3d p99 TTFT %7.3f s  KV hit %5.1f%%  failed "
            "%5.2f%%  %7d req in %5.1f s  (%.0f sim req/s overall)\n",
            static_cast<int>(std::to_string(total).size()), done, total, config.name, spec.policy,
            spec.offered_qps, spec.seed, r->ttft_p99_s, 100 * r->kv_hit, 100 * r->failure_rate,
            r->simulated_requests, r->wall_s, wall > 0 ? simulated / wall : 0.0);
        options.progress->flush();
      }
      records[job.Slot(n_loads, n_seeds)] = *std::move(r);
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(options.jobs, total));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (!error.ok()) return error;

  result.runs = std::move(records);
  result.simulated_requests = simulated;
  result.wall_s = elapsed();
  if (config.drift.enabled) {
    absl::StatusOr<DriftResult> drift = ComputeDriftChurn(
        config, config.common_load_qps > 0 ? config.common_load_qps : config.loads.back(),
        config.seeds.front());
    if (!drift.ok()) return drift.status();
    result.has_drift = true;
    result.drift = *std::move(drift);
  }
  {
    absl::StatusOr<workload::Workload> w = BuildRunWorkload(
        config, config.common_load_qps > 0 ? config.common_load_qps : config.loads.back(),
        config.seeds.front());
    // Without it the report shows no ceilings; the runs themselves stand.
    const WorkloadReuse reuse = w.ok() ? MeasureReuse(*w) : WorkloadReuse{};
    result.ceiling = {.measured = w.ok(),
                      .mean_prompt_tokens = reuse.mean_prompt_tokens,
                      .mean_output_tokens = reuse.mean_output_tokens,
                      .reuse = reuse.reuse};
  }
  if (options.progress != nullptr) {
    *options.progress << absl::StrFormat(
        "study %s: %d runs, %d simulated requests in %.1f s wall (%.0f simulated requests/s, "
        "%d threads)\n",
        config.name, total, simulated, result.wall_s,
        result.wall_s > 0 ? simulated / result.wall_s : 0.0, threads);
  }
  return result;
}

absl::StatusOr<double> CeilingQps(const StudyConfig& config, const CeilingInputs& ceiling,
                                  double hit) {
  if (!ceiling.measured) return absl::FailedPreconditionError("the ceiling was not measured");
  CACHEROUTE_ASSIGN_OR_RETURN(EngineProfile profile, FindEngineProfile(config.profile));
  const double h = std::clamp(hit, 0.0, 1.0);
  return config.destinations * SaturationQps(profile, ceiling.mean_prompt_tokens,
                                             (1 - h) * ceiling.mean_prompt_tokens,
                                             ceiling.mean_output_tokens);
}

// ---------------------------------------------------------------------------------------------
// Workloads.

std::vector<std::vector<double>> DriftMultipliers(const std::vector<double>& base_rates,
                                                  const DriftOptions& drift, uint64_t seed) {
  const size_t n = base_rates.size();
  std::vector<std::vector<double>> m(drift.intervals, std::vector<double>(n, 1.0));
  workload::Rng rng(dataplane::Mix64(seed ^ 0xd21f7a3c5e9b0461ULL));
  double base_total = 0;
  for (double r : base_rates) base_total += r;
  std::vector<double> log_walk(n, 0.0);
  for (uint32_t i = 1; i < drift.intervals; ++i) {
    double total = 0;
    for (size_t k = 0; k < n; ++k) {
      log_walk[k] += drift.sigma * rng.NextNormal();
      m[i][k] = std::exp(log_walk[k]);
      total += base_rates[k] * m[i][k];
    }
    // Rescale so the offered load stays the same in every interval.
    const double scale = total > 0 ? base_total / total : 1.0;
    for (double& x : m[i]) x *= scale;
  }
  return m;
}

namespace {

absl::StatusOr<workload::GeneratedWorkload> Generate(const StudyConfig& config, double qps,
                                                     uint64_t seed, double duration_s) {
  workload::WorkloadProfile p = config.workload;
  p.qps = qps;
  p.seed = seed;
  p.duration_s = duration_s;
  return workload::GenerateWorkload(p);
}

// A deterministic uniform in [0, 1) for request `index` of a run.
double Uniform(uint64_t seed, uint64_t index) {
  return static_cast<double>(
             dataplane::Mix64(dataplane::Mix64(seed ^ 0x9e3779b97f4a7c15ULL) ^ index) >> 11) *
         0x1.0p-53;
}

}  // namespace

absl::StatusOr<workload::Workload> ReadStudyTrace(const StudyConfig& config) {
  const std::string& path = config.trace.path;
  absl::StatusOr<workload::Workload> w =
      workload::ReadMooncakeTraceFile(path, {.key_blocks = config.trace.key_blocks});
  if (!w.ok())
    return absl::InvalidArgumentError(absl::StrCat("trace.path: ", w.status().message()));
  if (w->requests.size() < 2 || !(w->requests.back().arrival_s > w->requests.front().arrival_s)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("trace.path: \"%s\" has %d request(s) spanning no time; rescaling to a "
                        "load needs two at different times",
                        path, w->requests.size()));
  }
  return w;
}

namespace {

// The trace rescaled to `qps` (mean rate over its span), starting at 0, cut at `span_s`.
absl::StatusOr<workload::Workload> TraceAtLoad(const StudyConfig& config, double qps,
                                               double span_s) {
  CACHEROUTE_ASSIGN_OR_RETURN(workload::Workload w, ReadStudyTrace(config));
  if (absl::Status s = workload::RescaleToQps(w, qps); !s.ok()) return s;
  const double start = w.requests.front().arrival_s;
  for (workload::Request& r : w.requests) r.arrival_s -= start;
  const double end = w.requests.back().arrival_s;
  if (!(end > config.fleet.warmup_s)) {
    return Invalid("fleet.warmup_s",
                   absl::StrFormat("shorter than the trace at %g QPS (it spans %g s)", qps, end),
                   Num(config.fleet.warmup_s));
  }
  std::erase_if(w.requests, [&](const workload::Request& r) { return r.arrival_s >= span_s; });
  return w;
}

}  // namespace

absl::StatusOr<workload::Workload> BuildRunWorkload(const StudyConfig& config, double offered_qps,
                                                    uint64_t seed) {
  const double span = config.fleet.warmup_s + config.duration_s;
  const double aggregate_qps = offered_qps * (1 - config.whales.share);
  workload::Workload out;
  if (config.trace.enabled) {
    CACHEROUTE_ASSIGN_OR_RETURN(workload::Workload t, TraceAtLoad(config, aggregate_qps, span));
    out = std::move(t);
  } else if (config.regime_change.enabled) {
    CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload before,
                                Generate(config, aggregate_qps, seed, span));
    StudyConfig other = config;
    other.workload = config.regime_change.workload;
    CACHEROUTE_ASSIGN_OR_RETURN(
        workload::GeneratedWorkload after,
        Generate(other, aggregate_qps, dataplane::Mix64(seed ^ 0x2e91f0c3ULL), span));
    const double at = config.regime_change.at_s;
    out.block_size = before.workload.block_size;
    for (workload::Request& r : before.workload.requests) {
      if (r.arrival_s < at) out.requests.push_back(std::move(r));
    }
    for (workload::Request& r : after.workload.requests) {
      if (r.arrival_s < at) continue;
      Rename(r, "regime-", 0x3c6ef372fe94f82bULL);
      out.requests.push_back(std::move(r));
    }
  } else if (!config.drift.enabled) {
    CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g,
                                Generate(config, aggregate_qps, seed, span));
    out = std::move(g.workload);
  } else {
    // Thinning: generate at the largest multiplier, keep each request of key k in interval i
    // with probability m[i][k] / max m. Interval i covers [warm-up + i·L, warm-up + (i+1)·L); the
    // warm-up runs at interval 0's rates.
    CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload probe,
                                Generate(config, aggregate_qps, seed, 1));
    std::vector<double> base;
    for (const workload::KeyRate& k : probe.active_keys) base.push_back(k.rate);
    const std::vector<std::vector<double>> m = DriftMultipliers(base, config.drift, seed);
    double m_max = 1;
    for (const auto& row : m) m_max = std::max(m_max, *std::max_element(row.begin(), row.end()));
    CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g,
                                Generate(config, aggregate_qps * m_max, seed, span));
    absl::flat_hash_map<std::string, size_t> rank;
    for (size_t i = 0; i < g.active_keys.size(); ++i) rank[g.active_keys[i].key] = i;
    const double interval = config.duration_s / config.drift.intervals;
    out.block_size = g.workload.block_size;
    uint64_t index = 0;
    for (workload::Request& r : g.workload.requests) {
      const double t = r.arrival_s - config.fleet.warmup_s;
      const int i = std::clamp(static_cast<int>(std::floor(t / interval)), 0,
                               static_cast<int>(config.drift.intervals) - 1);
      const double keep = m[i][rank.at(r.key)] / m_max;
      if (Uniform(seed, index++) < keep) out.requests.push_back(std::move(r));
    }
  }
  if (config.whales.count > 0) {
    workload::WorkloadProfile w = config.workload;
    w.keys = config.whales.count;
    w.rate_sigma = 0;
    w.max_key_share = 1;
    w.top_k = 0;
    w.qps = offered_qps * config.whales.share;
    w.seed = dataplane::Mix64(seed ^ 0x77a1e5ULL);
    w.duration_s = span;
    CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g, workload::GenerateWorkload(w));
    const size_t before = out.requests.size();
    for (workload::Request& r : g.workload.requests) {
      Rename(r, "whale-", 0x5bd1e9955bd1e995ULL);
      out.requests.push_back(std::move(r));
    }
    std::inplace_merge(out.requests.begin(), out.requests.begin() + before, out.requests.end(),
                       [](const workload::Request& a, const workload::Request& b) {
                         return a.arrival_s < b.arrival_s;
                       });
  }
  return out;
}

absl::StatusOr<DriftResult> ComputeDriftChurn(const StudyConfig& config, double offered_qps,
                                              uint64_t seed) {
  DriftResult out;
  out.intervals = config.drift.intervals;
  out.sigma = config.drift.sigma;
  out.seed = seed;
  // The active set's rates (a short sample also gives the mean lengths for q_cap).
  CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g,
                              Generate(config, offered_qps, seed, 60));
  std::vector<double> base;
  std::vector<uint64_t> ids;
  for (const workload::KeyRate& k : g.active_keys) {
    base.push_back(k.rate);
    ids.push_back(dataplane::KeyId(k.key));
  }
  double q_cap = config.fleet.q_cap;
  if (q_cap <= 0) {
    double prompt = 0, output = 0;
    for (const workload::Request& r : g.workload.requests) {
      prompt += r.input_length;
      output += r.output_length;
    }
    const double n = std::max<double>(1, g.workload.requests.size());
    CACHEROUTE_ASSIGN_OR_RETURN(EngineProfile profile, FindEngineProfile(config.profile));
    q_cap = CalibrateQCap(profile, prompt / n, prompt / n, output / n);
  }
  // Algorithm 1's own churn (the paper's Appendix E), from scratch at every interval.
  const planner::PlanConfig plan_config =
      planner::PlanConfigFor(planner::Algorithm::kCacheRoutePaper,
                             {.destinations = config.destinations,
                              .q_cap = q_cap,
                              .slots_per_destination = config.fleet.slots_per_destination});
  const std::vector<std::vector<double>> m = DriftMultipliers(base, config.drift, seed);
  std::vector<planner::Plan> plans;
  std::vector<std::vector<planner::KeyRate>> rates(m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    for (size_t k = 0; k < base.size(); ++k) rates[i].push_back({ids[k], base[k] * m[i][k]});
    CACHEROUTE_ASSIGN_OR_RETURN(planner::Plan plan, planner::BuildPlan(rates[i], plan_config));
    plans.push_back(std::move(plan));
  }
  // A plan's expected max/mean load under other rates: each admitted key spreads its new rate
  // evenly over its destinations, everything else (the cold tail) evenly over the fleet.
  auto imbalance_under = [&](const planner::Plan& plan, const std::vector<planner::KeyRate>& r) {
    absl::flat_hash_map<uint64_t, double> rate;
    double total = 0;
    for (const planner::KeyRate& k : r) {
      rate[k.key] = k.rate;
      total += k.rate;
    }
    std::vector<double> load(config.destinations, 0.0);
    double admitted = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      const double lambda = rate[plan.key(i)];
      admitted += lambda;
      for (uint32_t d : plan.destinations(i)) load[d] += lambda / plan.destinations(i).size();
    }
    for (double& l : load) l += (total - admitted) / config.destinations;
    const double mean = total / config.destinations;
    return mean > 0 ? *std::max_element(load.begin(), load.end()) / mean : 1.0;
  };
  auto sets = [](const planner::Plan& plan) {
    absl::flat_hash_map<uint64_t, std::vector<uint32_t>> s;
    for (size_t i = 0; i < plan.size(); ++i) {
      s[plan.key(i)].assign(plan.destinations(i).begin(), plan.destinations(i).end());
    }
    return s;
  };
  for (size_t i = 0; i + 1 < plans.size(); ++i) {
    const auto a = sets(plans[i]);
    const auto b = sets(plans[i + 1]);
    uint64_t common = 0, moved = 0, recounted = 0, pairs_a = 0, pairs_b = 0, pairs_both = 0;
    for (const auto& [key, da] : a) pairs_a += da.size();
    for (const auto& [key, db] : b) pairs_b += db.size();
    for (const auto& [key, da] : a) {
      auto it = b.find(key);
      if (it == b.end()) continue;
      const std::vector<uint32_t>& db = it->second;
      ++common;
      moved += da != db;
      recounted += da.size() != db.size();
      std::vector<uint32_t> both;
      std::set_intersection(da.begin(), da.end(), db.begin(), db.end(), std::back_inserter(both));
      pairs_both += both.size();
    }
    DriftTransition t;
    t.from_interval = static_cast<uint32_t>(i);
    t.cache_churn = common > 0 ? static_cast<double>(moved) / common : 0;
    t.count_churn = common > 0 ? static_cast<double>(recounted) / common : 0;
    const uint64_t pairs_union = pairs_a + pairs_b - pairs_both;
    t.jaccard_churn = pairs_union > 0 ? 1 - static_cast<double>(pairs_both) / pairs_union : 0;
    t.fresh_imbalance = imbalance_under(plans[i + 1], rates[i + 1]);
    t.stale_imbalance = imbalance_under(plans[0], rates[i + 1]);
    out.transitions.push_back(t);
    out.mean_cache_churn += t.cache_churn;
    out.mean_count_churn += t.count_churn;
  }
  if (!out.transitions.empty()) {
    out.mean_cache_churn /= out.transitions.size();
    out.mean_count_churn /= out.transitions.size();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Flag lists.

WorkloadReuse MeasureReuse(const workload::Workload& workload) {
  double prompt = 0, output = 0, reused = 0;
  absl::flat_hash_set<uint64_t> seen;
  for (const workload::Request& r : workload.requests) {
    prompt += r.input_length;
    output += r.output_length;
    const size_t full = std::min<size_t>(r.hash_ids.size(), r.input_length / workload.block_size);
    size_t hit = 0;
    while (hit < full && seen.contains(r.hash_ids[hit])) ++hit;
    reused += static_cast<double>(hit) * workload.block_size;
    for (size_t i = 0; i < full; ++i) seen.insert(r.hash_ids[i]);
  }
  const double n = std::max<double>(1, workload.requests.size());
  return {.mean_prompt_tokens = prompt / n,
          .mean_output_tokens = output / n,
          .reuse = prompt > 0 ? reused / prompt : 0};
}

BudgetCeiling MeasureBudgetCeiling(const workload::Workload& workload, double budget_tokens) {
  struct Key {
    double worth = 0;     // reusable tokens of its requests, unbounded cache
    double shared = 0;    // Σ tokens shared with the previous request
    double measured = 0;  // requests with a previous one
    const std::vector<uint64_t>* last = nullptr;
  };
  absl::flat_hash_map<std::string, Key> keys;
  absl::flat_hash_set<uint64_t> seen;
  double prompt = 0;
  const uint32_t block = workload.block_size;
  for (const workload::Request& r : workload.requests) {
    prompt += r.input_length;
    const size_t full = std::min<size_t>(r.hash_ids.size(), r.input_length / block);
    size_t hit = 0;
    while (hit < full && seen.contains(r.hash_ids[hit])) ++hit;
    for (size_t i = 0; i < full; ++i) seen.insert(r.hash_ids[i]);
    Key& k = keys[r.key];
    k.worth += static_cast<double>(hit) * block;
    if (k.last != nullptr) {
      size_t shared = 0;
      const size_t n = std::min({k.last->size(), r.hash_ids.size(), full});
      while (shared < n && (*k.last)[shared] == r.hash_ids[shared]) ++shared;
      k.shared += static_cast<double>(shared) * block;
      k.measured += 1;
    }
    k.last = &r.hash_ids;
  }
  struct Item {
    double worth, size;
  };
  std::vector<Item> items;
  BudgetCeiling out;
  for (const auto& [name, k] : keys) {
    const double size = k.measured > 0 ? k.shared / k.measured : 0;
    out.prefix_tokens += size;
    items.push_back({k.worth, size});
  }
  out.keys = items.size();
  // Worth per token, decreasing; a key with no reusable prefix costs nothing.
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.worth * b.size > b.worth * a.size; });
  double left = budget_tokens, saved = 0;
  for (const Item& item : items) {
    if (item.size <= left) {
      saved += item.worth;
      left -= item.size;
      ++out.keys_in;
    } else {
      saved += item.worth * left / item.size;
      break;
    }
  }
  out.reuse = prompt > 0 ? saved / prompt : 0;
  return out;
}

absl::StatusOr<std::vector<double>> ParseNumberList(absl::string_view text,
                                                    absl::string_view flag) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    double v = 0;
    if (item.empty() || !absl::SimpleAtod(item, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": bad number \"", item, "\" in \"", text, "\""));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<uint64_t>> ParseSeedList(absl::string_view text,
                                                    absl::string_view flag) {
  std::vector<uint64_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    uint64_t v = 0;
    if (item.empty() || !absl::SimpleAtoi(item, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": bad seed \"", item, "\" in \"", text, "\""));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace cacheroute::sim::study
