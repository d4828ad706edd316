// PlanBuilder: the periodic routing-table construction of the CacheRoute paper ("CacheRoute:
// Planned Prefix-Affinity Routing for Large-Scale LLM Serving", §3.1, Algorithm 1), as a pure
// function.
//
// Given per-key request rates λ_b, R destinations, a per-assignment load cap q_cap and W warm
// prefix slots per destination (C = R·W), it gives every key k_b = max(1, ⌈λ_b/q_cap⌉)
// destinations (capped at R), admits keys in decreasing λ while Σk_b ≤ C, and places each admitted
// key by LPT on its k_b least-loaded destinations, after pre-loading each with its share of the
// unadmitted ("cold-tail") rate. The steps, with their tie rules: docs/planner.md, "Plan building".
//
// Byte-aware planning (PlanConfig::kv_budget_tokens > 0, with each key's measured KeyTokens)
// replaces the slot model for workloads whose reusable prefixes differ in size: keys are admitted
// by the prefill work affinity saves them (rate × reusable tokens × the chance the prefix survives
// between visits) while Σ reusable × k_b fits R × kv_budget_tokens, k_b follows the key's expected
// work, and LPT balances expected work in tokens, keeping each destination's planned prefixes
// within its budget where it can. docs/planner.md, "Byte-aware planning", has the rule and its
// estimates.
//
// Invariants of a returned Plan: Σk_b ≤ C and the admitted keys are a prefix of the rate order
// (byte-aware: Σ reusable × k_b ≤ R × kv_budget_tokens, and a key is admitted exactly when it fits
// what the keys saving more left); plans list keys in decreasing rate; each key's destinations
// are distinct and sorted; λ_b/k_b ≤ q_cap unless k_b was capped at R (or replication is switched
// off, below; byte-aware: the same for expected work against the work cap); the expected loads
// sum to the total rate. The result depends only on the multiset of (key, rate[, sizes]) tuples,
// not on their order in the input, and is bit-for-bit reproducible. No I/O, no clock, no
// randomness: time is read only through an injected Clock, if one is given. One Build at a time
// per PlanBuilder; BuildPlan builds with a fresh one.
//
// Usage:
//   std::vector<cacheroute::planner::KeyRate> rates = {{/*key=*/7, /*rate=*/3.5}, {9, 0.25}};
//   absl::StatusOr<Plan> plan = BuildPlan(rates, {.destinations = 30, .q_cap = 8.0,
//                                                 .slots_per_destination = 64});
//   if (!plan.ok()) return plan.status();   // names the bad field and its value
//   for (size_t i = 0; i < plan->size(); ++i) Use(plan->key(i), plan->destinations(i));
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace cacheroute::planner {

namespace plan_builder_internal {
class WorkModel;  // plan_builder.cc
}  // namespace plan_builder_internal

inline constexpr uint32_t kNoSpill = 0xFFFFFFFFu;  // Plan::spill of a key without one
// CacheRoute's PlanConfig::balance_share, chosen once on the primary study (docs/dispatch.md).
inline constexpr double kCacheRouteBalanceShare = 0.5;

// A key's measured prompt sizes, for byte-aware planning: the mean tokens a request of the key
// shares with the key's previous request (its reusable prefix) and the mean prompt tokens, or
// kUnmeasured. Unmeasured keys are planned with the rate-weighted means of the measured ones.
inline constexpr double kUnmeasured = -1;
struct KeyTokens {
  double reusable = kUnmeasured;  // finite and ≥ 0, or kUnmeasured
  double prompt = kUnmeasured;  // finite and ≥ 0 (raised to `reusable` if below), or kUnmeasured
};

// One key's estimated request rate. Keys are opaque 64-bit ids; callers that have string keys map
// them to ids (a hash, or their lexicographic rank when "key ascending" must mean string order).
struct KeyRate {
  uint64_t key = 0;
  double rate = 0.0;  // requests per second (any unit, as long as q_cap uses the same one)
};

// Where a key is warm: the destination that last served it (gateways report it with their rate
// counts; docs/dispatch.md, "The plan follows the cache").
struct KeyWarmth {
  uint64_t key = 0;
  uint32_t destination = 0;
};

// Where admitted keys' assignments go. kLpt is Algorithm 1; kHashed, for the component ablation
// (paper §5.2, Table 4: "+affinity", "+replication" with random placement), puts a key's k_b
// assignments on distinct destinations drawn from a hash of (key, placement_seed), blind to load.
enum class Placement : uint8_t { kLpt, kHashed };

struct PlanConfig {
  uint32_t destinations = 0;           // R ≥ 1
  double q_cap = 0.0;                  // > 0, finite: the per-assignment load cap
  uint64_t slots_per_destination = 0;  // W ≥ 1; the slot capacity is C = R·W (saturating)
  // Traffic not attributed to any listed key (gateways fold their lightest keys together); finite,
  // ≥ 0. It is part of the cold tail: it loads every destination equally and is never admitted.
  double unkeyed_rate = 0.0;
  // Ablations; the defaults are Algorithm 1. With replicate = false every admitted key gets
  // k_b = 1 (so λ_b/k_b may exceed q_cap); admission still counts slots with that k_b.
  bool replicate = true;
  Placement placement = Placement::kLpt;
  uint64_t placement_seed = 0;  // kHashed only
  // Placement hysteresis (the paper's §5.4 and Appendix E: recomputing LPT from scratch moves
  // most keys to another, equally loaded destination, and each move starts that key cold). Only
  // used when Build is given the previous plan. Keys are still visited in decreasing rate; each
  // job stays on one of the key's previous destinations (the least loaded of them) if its load
  // after the job is at most (1 + stickiness) × (total rate / R); otherwise it goes where LPT puts
  // it. So a destination ends above (1 + stickiness) × the mean only through LPT's own choices.
  // Finite, ≥ 0; 0 is Algorithm 1 exactly. Build's warm hints use the same cap: a key's first job
  // also tries the destination where it is warm (with stickiness 0: while that stays at or under
  // the mean load).
  double stickiness = 0.0;
  // Spill destinations (CacheRoute's default; off is Algorithm 1): after placement, each admitted
  // key also gets one planned second choice outside its set, for the dataplane to use when its
  // set is queued well above it. Keys are visited in decreasing rate; each takes the destination
  // with the least spill load so far (Σ of the rates of the keys spilling there; ties: least
  // expected load, then lowest index), so that the spill a burst may send is spread too. Needs
  // R ≥ 2 and a key with k_b < R; other keys get none.
  bool spill = false;
  // Load-adaptive k_b (CacheRoute's default; 0 is Algorithm 1): the per-assignment cap becomes
  // min(q_cap, balance_share × total rate / R), so a key carrying more than that share of one
  // destination's mean load is split (and balanced by LPT) even when it is below q_cap. Finite,
  // ≥ 0.
  double balance_share = 0.0;

  // Byte-aware planning (off while kv_budget_tokens is 0; docs/planner.md, "Byte-aware planning"):
  // admission spends R × kv_budget_tokens on Σ reusable × k_b instead of R·W slots (W is not used),
  // keys ranked by the prefill work affinity saves them; k_b and LPT use expected work in tokens.
  // It needs the keys' KeyTokens; with none measured the plan falls back to the slot model.
  // KV tokens per destination reserved for planned prefixes (the engines' KV capacity × the share
  // reserved for them); finite, ≥ 0.
  double kv_budget_tokens = 0.0;
  // The engines' whole KV capacity per destination, in tokens, for the chance that a prefix
  // survives between a key's visits (the cache turns over as the fleet's new tokens flow in);
  // 0: every prefix survives. Finite, ≥ 0.
  double kv_capacity_tokens = 0.0;
  // A request's work besides its uncached prompt tokens (its decode), in prefill-token
  // equivalents. Finite, ≥ 0.
  double request_overhead_tokens = 0.0;
};

struct PlanStats {
  uint64_t input_keys = 0;        // keys given, including zero-rate ones
  uint64_t admitted_keys = 0;     // keys in the table
  uint64_t slots_used = 0;        // Σk_b over admitted keys
  uint64_t slot_capacity = 0;     // C = R·W, saturated at UINT64_MAX
  uint64_t capped_keys = 0;       // admitted keys whose ⌈λ/q_cap⌉ exceeded R (so k_b = R)
  double total_rate = 0.0;        // Σλ over all keys, plus the unkeyed rate
  double admitted_rate = 0.0;     // Σλ over admitted keys
  double cold_tail_rate = 0.0;    // Σλ over keys not admitted, plus the unkeyed rate
  double max_load = 0.0;          // max expected load over destinations
  double mean_load = 0.0;         // total_rate / R
  double imbalance = 1.0;         // max_load / mean_load; 1 when the total rate is 0
  double build_seconds = 0.0;     // planning time as read from the injected clock; 0 without one
  uint64_t kept_assignments = 0;  // assignments kept on a previous destination by stickiness
  uint64_t warm_assignments = 0;  // assignments placed where the key was warm (Build's hints)
  double effective_q_cap = 0.0;   // the per-assignment cap used (see PlanConfig::balance_share)

  // Byte-aware plans (PlanConfig::kv_budget_tokens > 0 and some key measured); work is in
  // prefill tokens per second.
  bool byte_aware = false;
  uint64_t measured_keys = 0;        // keys with a measured reusable prefix
  double kv_budget = 0.0;            // R × kv_budget_tokens
  double kv_used = 0.0;              // Σ reusable × k_b over admitted keys
  double turnover_seconds = 0.0;     // the cache turnover time the survival estimate used; 0: none
  double total_work = 0.0;           // expected work of all traffic
  double saved_work = 0.0;           // Σ saved work over admitted keys
  double possible_saved_work = 0.0;  // Σ saved work over all keys (what admitting all would save)
  double work_imbalance = 1.0;       // max/mean expected work over destinations
  double effective_work_cap = 0.0;   // the per-assignment work cap k_b was computed with
};

// The result of one planning step: admitted keys in decreasing-rate order, each with its sorted
// destination set, plus the expected load on every destination. Immutable once built.
class Plan {
 public:
  Plan() = default;

  // Number of admitted keys. Index i ranks the key by rate: 0 is the hottest.
  size_t size() const { return admitted_.size(); }
  uint64_t key(size_t i) const { return admitted_[i].key; }
  double rate(size_t i) const { return admitted_[i].rate; }
  // Sorted, distinct destination indices in [0, R).
  std::span<const uint32_t> destinations(size_t i) const {
    return {destination_ids_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]};
  }
  // Byte-aware plans (stats().byte_aware), else 0: key i's reusable tokens as planned, the prefill
  // work its affinity saves (tokens/s) and its expected work (tokens/s, over all its destinations).
  double reusable_tokens(size_t i) const { return work_.empty() ? 0 : work_[i].reusable; }
  double saved_work(size_t i) const { return work_.empty() ? 0 : work_[i].saved; }
  double work(size_t i) const { return work_.empty() ? 0 : work_[i].work; }
  // Byte-aware plans: expected work per destination (tokens/s; size R); else empty.
  std::span<const double> work_loads() const { return work_loads_; }
  // Key i's spill destination (PlanConfig::spill), outside destinations(i), or kNoSpill.
  uint32_t spill(size_t i) const { return spills_.empty() ? kNoSpill : spills_[i]; }
  // Expected load (same unit as the rates) per destination; size R.
  std::span<const double> loads() const { return loads_; }
  const PlanStats& stats() const { return stats_; }
  const PlanConfig& config() const { return config_; }

  // The same plan over other destination indices, as placement hysteresis needs after a
  // membership change: destination d becomes index[d], or is dropped when index[d] is kNoSpill
  // (a key may be left with no destination); `destinations` is the new R (loads of new indices
  // are 0). Each index[d] that is not kNoSpill must be < destinations and distinct.
  Plan Remapped(std::span<const uint32_t> index, uint32_t destinations) const;

 private:
  friend class PlanBuilder;
  struct KeyWork {
    double reusable = 0;
    double saved = 0;
    double work = 0;
  };
  PlanConfig config_;
  std::vector<KeyRate> admitted_;          // decreasing rate (byte-aware: work), ties key ascending
  std::vector<uint32_t> offsets_;          // size() + 1 entries into destination_ids_
  std::vector<uint32_t> destination_ids_;  // Σk_b entries
  std::vector<double> loads_;
  std::vector<uint32_t> spills_;  // size() entries when config_.spill, else empty
  std::vector<KeyWork> work_;     // size() entries for byte-aware plans, else empty
  std::vector<double> work_loads_;
  PlanStats stats_;
};

// k_b for one key: max(1, ⌈rate/q_cap⌉) capped at `destinations`, rounded so that
// rate/k_b ≤ q_cap holds in floating point whenever k_b < destinations. `*capped` (optional) is
// set when the cap at `destinations` applied.
uint32_t AssignmentCount(double rate, double q_cap, uint32_t destinations, bool* capped = nullptr);

// Validates the config alone (R ≥ 1, finite q_cap > 0, W ≥ 1, the byte-aware fields finite and
// ≥ 0, LPT placement when byte-aware).
absl::Status ValidatePlanConfig(const PlanConfig& config);

// Byte-aware planning's estimates for key i of `rates` (sizes in `tokens` at the same index), as
// Build computes them: for explaining one key's plan. nullopt unless config.kv_budget_tokens > 0
// and some key is measured. Linear in the keys.
struct KeyEstimate {
  uint32_t k = 1;
  bool capped = false;
  bool measured = false;  // false: planned with the measured keys' means
  double reusable = 0;    // tokens
  double prompt = 0;      // tokens
  double saved = 0;       // tokens/s its affinity saves at k destinations
  double work = 0;        // tokens/s, over its k destinations
  double cost = 0;        // reusable × k: what admitting it takes from the budget
};
std::optional<KeyEstimate> EstimateKey(std::span<const KeyRate> rates,
                                       std::span<const KeyTokens> tokens, const PlanConfig& config,
                                       size_t i);

// Builds plans, keeping its working memory between builds: a planner that replans every control
// interval reuses one PlanBuilder so its buffers are not allocated (and page-faulted) anew each
// time. For mid-sized inputs it uses a second thread inside Build. Not thread-safe: one Build at
// a time per builder.
class PlanBuilder {
 public:
  // If `clock` is given (it must outlive the builder), stats().build_seconds holds the time each
  // Build took by that clock.
  explicit PlanBuilder(base::Clock* clock = nullptr);

  // Returns InvalidArgument, naming the field and value, for a bad config, a NaN, infinite or
  // negative rate, or a duplicate key; OutOfRange if Σk_b would not fit 32 bits.
  absl::StatusOr<Plan> Build(std::span<const KeyRate> rates, const PlanConfig& config);
  // The same, with placement hysteresis against `previous` (see PlanConfig::stickiness; with
  // stickiness 0 or previous == nullptr it is the plain Build). `previous` must have been built
  // for the same destination indices; destinations ≥ config.destinations in it are ignored.
  absl::StatusOr<Plan> Build(std::span<const KeyRate> rates, const PlanConfig& config,
                             const Plan* previous);
  // The same, also keeping admitted keys where they are warm whenever the balance allows (see
  // PlanConfig::stickiness; `warm` may name keys that are not admitted, or destinations
  // ≥ config.destinations, which are ignored; a key named twice keeps its last entry; byte-aware
  // plans do not use it). `tokens`, for byte-aware planning, is empty or holds key i's sizes at
  // index i of `rates` (InvalidArgument naming the entry for a size that is NaN, infinite or below
  // kUnmeasured); other plans ignore it.
  absl::StatusOr<Plan> Build(std::span<const KeyRate> rates, const PlanConfig& config,
                             const Plan* previous, std::span<const KeyWarmth> warm,
                             std::span<const KeyTokens> tokens = {});

 private:
  absl::StatusOr<Plan> BuildByteAware(std::span<const KeyRate> rates, const PlanConfig& config,
                                      const Plan* previous,
                                      const plan_builder_internal::WorkModel& model,
                                      double work_cap, double total_work, int lowest_bit,
                                      double least_cost, absl::Time start);

  base::Clock* clock_;
  std::vector<KeyRate> sorted_;  // the rate order; never shrinks, the first n entries are used
  std::unique_ptr<std::byte[]> scratch_;  // n pairs, or 2n bare keys
  size_t scratch_size_ = 0;               // in pairs
  std::unique_ptr<uint64_t[]> dedup_;     // 2n bare keys, when duplicates are sought in parallel
  size_t dedup_size_ = 0;                 // in keys
  // Byte-aware planning: each key's work at one destination and its cost to the budget.
  std::vector<double> work1_;
  std::vector<double> cost_;
};

// A one-off build with a fresh PlanBuilder; same results and errors as PlanBuilder::Build.
absl::StatusOr<Plan> BuildPlan(std::span<const KeyRate> rates, const PlanConfig& config,
                               base::Clock* clock = nullptr, const Plan* previous = nullptr,
                               std::span<const KeyWarmth> warm = {},
                               std::span<const KeyTokens> tokens = {});

}  // namespace cacheroute::planner
