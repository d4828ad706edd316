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
// Invariants of a returned Plan: Σk_b ≤ C; the admitted keys are a prefix of the rate order; each
// key's destinations are distinct and sorted; λ_b/k_b ≤ q_cap unless k_b was capped at R (or
// replication is switched off, below); the expected loads sum to the total rate. The result
// depends only on the multiset of (key, rate) pairs, not on their order in the input, and is
// bit-for-bit reproducible. No I/O, no clock, no randomness: time is read only through an
// injected Clock, if one is given. One Build at a time per PlanBuilder; BuildPlan builds with a
// fresh one.
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
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace cacheroute::planner {

inline constexpr uint32_t kNoSpill = 0xFFFFFFFFu;  // Plan::spill of a key without one
// CacheRoute's PlanConfig::balance_share, chosen once on the primary study (docs/dispatch.md).
inline constexpr double kCacheRouteBalanceShare = 0.5;

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
  PlanConfig config_;
  std::vector<KeyRate> admitted_;          // decreasing rate, ties key ascending
  std::vector<uint32_t> offsets_;          // size() + 1 entries into destination_ids_
  std::vector<uint32_t> destination_ids_;  // Σk_b entries
  std::vector<double> loads_;
  std::vector<uint32_t> spills_;  // size() entries when config_.spill, else empty
  PlanStats stats_;
};

// k_b for one key: max(1, ⌈rate/q_cap⌉) capped at `destinations`, rounded so that
// rate/k_b ≤ q_cap holds in floating point whenever k_b < destinations. `*capped` (optional) is
// set when the cap at `destinations` applied.
uint32_t AssignmentCount(double rate, double q_cap, uint32_t destinations, bool* capped = nullptr);

// Validates the config alone (R ≥ 1, finite q_cap > 0, W ≥ 1).
absl::Status ValidatePlanConfig(const PlanConfig& config);

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
  // ≥ config.destinations, which are ignored; a key named twice keeps its last entry).
  absl::StatusOr<Plan> Build(std::span<const KeyRate> rates, const PlanConfig& config,
                             const Plan* previous, std::span<const KeyWarmth> warm);

 private:
  base::Clock* clock_;
  std::vector<KeyRate> sorted_;  // the rate order; never shrinks, the first n entries are used
  std::unique_ptr<std::byte[]> scratch_;  // n pairs, or 2n bare keys
  size_t scratch_size_ = 0;               // in pairs
  std::unique_ptr<uint64_t[]> dedup_;     // 2n bare keys, when duplicates are sought in parallel
  size_t dedup_size_ = 0;                 // in keys
};

// A one-off build with a fresh PlanBuilder; same results and errors as PlanBuilder::Build.
absl::StatusOr<Plan> BuildPlan(std::span<const KeyRate> rates, const PlanConfig& config,
                               base::Clock* clock = nullptr, const Plan* previous = nullptr,
                               std::span<const KeyWarmth> warm = {});

}  // namespace cacheroute::planner
