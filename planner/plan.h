// Plan and its inputs: what one planning step takes (per-key rates KeyRate, sizes KeyTokens, warm
// hints KeyWarmth, the PlanConfig) and what it gives (a Plan with its PlanStats), plus the
// per-key rule every plan shares (AssignmentCount, k_b) and the config check. PlanBuilder
// (plan_builder.h) builds Plans; the invariants a built Plan keeps are stated there.
//
// A Plan is immutable once built: admitted keys in decreasing rate (ties key ascending), each with
// its sorted, distinct destinations in [0, R), and the expected load on every destination.
//
// Usage:
//   absl::StatusOr<Plan> plan = BuildPlan(rates, config);   // plan_builder.h
//   for (size_t i = 0; i < plan->size(); ++i) Use(plan->key(i), plan->destinations(i));
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cacheroute::planner {

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

namespace plan_internal {

// A Plan's contents, as PlanBuilder assembles them field by field; Plan's accessors say what each
// holds.
struct PlanData {
  struct KeyWork {
    double reusable = 0;
    double saved = 0;
    double work = 0;
  };
  PlanConfig config;
  std::vector<KeyRate> admitted;          // decreasing rate, ties key ascending
  std::vector<uint32_t> offsets;          // admitted.size() + 1 entries into destination_ids
  std::vector<uint32_t> destination_ids;  // Σk_b entries
  std::vector<double> loads;              // R entries
  std::vector<uint32_t> spills;           // admitted.size() entries when config.spill, else empty
  std::vector<KeyWork> work;       // admitted.size() entries for byte-aware plans, else empty
  std::vector<double> work_loads;  // R entries for byte-aware plans, else empty
  PlanStats stats;
};

}  // namespace plan_internal

// The result of one planning step: admitted keys in decreasing-rate order, each with its sorted
// destination set, plus the expected load on every destination. Immutable once built.
class Plan {
 public:
  Plan() = default;

  // Number of admitted keys. Index i ranks the key by rate: 0 is the hottest.
  size_t size() const { return data_.admitted.size(); }
  uint64_t key(size_t i) const { return data_.admitted[i].key; }
  double rate(size_t i) const { return data_.admitted[i].rate; }
  // Sorted, distinct destination indices in [0, R).
  std::span<const uint32_t> destinations(size_t i) const {
    return {data_.destination_ids.data() + data_.offsets[i],
            data_.offsets[i + 1] - data_.offsets[i]};
  }
  // Byte-aware plans (stats().byte_aware), else 0: key i's reusable tokens as planned, the prefill
  // work its affinity saves (tokens/s) and its expected work (tokens/s, over all its destinations).
  double reusable_tokens(size_t i) const { return data_.work.empty() ? 0 : data_.work[i].reusable; }
  double saved_work(size_t i) const { return data_.work.empty() ? 0 : data_.work[i].saved; }
  double work(size_t i) const { return data_.work.empty() ? 0 : data_.work[i].work; }
  // Byte-aware plans: expected work per destination (tokens/s; size R); else empty.
  std::span<const double> work_loads() const { return data_.work_loads; }
  // Key i's spill destination (PlanConfig::spill), outside destinations(i), or kNoSpill.
  uint32_t spill(size_t i) const { return data_.spills.empty() ? kNoSpill : data_.spills[i]; }
  // Expected load (same unit as the rates) per destination; size R.
  std::span<const double> loads() const { return data_.loads; }
  const PlanStats& stats() const { return data_.stats; }
  const PlanConfig& config() const { return data_.config; }

  // The same plan over other destination indices, as placement hysteresis needs after a
  // membership change: destination d becomes index[d], or is dropped when index[d] is kNoSpill
  // (a key may be left with no destination); `destinations` is the new R (loads of new indices
  // are 0). Each index[d] that is not kNoSpill must be < destinations and distinct.
  Plan Remapped(std::span<const uint32_t> index, uint32_t destinations) const;

 private:
  friend class PlanBuilder;
  explicit Plan(plan_internal::PlanData data) : data_(std::move(data)) {}

  plan_internal::PlanData data_;
};

namespace plan_internal {
// AssignmentCount for rate > q_cap.
uint32_t SplitAssignmentCount(double rate, double q_cap, uint32_t destinations, bool* capped);
}  // namespace plan_internal

// k_b for one key: max(1, ⌈rate/q_cap⌉) capped at `destinations`, rounded so that
// rate/k_b ≤ q_cap holds in floating point whenever k_b < destinations. `*capped` (optional) is
// set when the cap at `destinations` applied. Inline for the common case, which admission and
// placement meet once per key.
inline uint32_t AssignmentCount(double rate, double q_cap, uint32_t destinations,
                                bool* capped = nullptr) {
  if (capped != nullptr) *capped = false;
  if (rate <= q_cap) return 1;  // decided without a division
  return plan_internal::SplitAssignmentCount(rate, q_cap, destinations, capped);
}

// Validates the config alone (R ≥ 1, finite q_cap > 0, W ≥ 1, the byte-aware fields finite and
// ≥ 0, LPT placement when byte-aware).
absl::Status ValidatePlanConfig(const PlanConfig& config);

}  // namespace cacheroute::planner
