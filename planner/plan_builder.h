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
// Build is a pipeline of stages over the builder's PlanWorkspace: ingest and dedup (validate, copy,
// look for duplicate keys) → rank (the rate order, or byte-aware planning's saved-work order) →
// admit → place → stats. The types live in plan.h, the pieces the stages use in radix_sort.h,
// placement.h and byte_aware.h.
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
#include "base/clock.h"
#include "planner/byte_aware.h"
#include "planner/plan.h"

namespace cacheroute::planner {

// The buffers a PlanBuilder keeps between builds, so that a planner replanning every control
// interval does not allocate (and page-fault) them anew each time. Each grows to the largest
// input it has served and never shrinks; a build of n keys uses the first n entries.
struct PlanWorkspace {
  // The slot model's (key, rate) pairs: the input's, then the rate order. When most of it is
  // admitted the plan takes the array (no copy), leaving this one empty.
  std::vector<KeyRate> rate_order;
  // Byte-aware planning's keys in the saved-work ranking (RankBySavedWork).
  std::vector<RankedKey> saved_work_order;
  // The second buffer of the radix sorts: n pairs (KeyRate or RankedKey), or 2n bare keys while
  // the duplicate search runs on this thread.
  std::unique_ptr<std::byte[]> scratch;
  size_t scratch_pairs = 0;
  // The duplicate search's 2n bare keys when it runs on a second thread.
  std::unique_ptr<uint64_t[]> dedup_keys;
  size_t dedup_size = 0;  // in keys
  // Byte-aware planning: each key's expected work and its prefix's survival at one destination
  // (ComputeWorkCap).
  std::vector<double> work1;
  std::vector<double> survival1;
};

// Builds plans, keeping its working memory between builds (PlanWorkspace). For mid-sized inputs
// it uses a second thread inside Build. Not thread-safe: one Build at a time per builder.
class PlanBuilder {
 public:
  // If `clock` is given (it must outlive the builder), stats().build_seconds holds the time each
  // Build took by that clock.
  explicit PlanBuilder(base::Clock* clock = nullptr);

  // Returns InvalidArgument, naming the field and value, for a bad config, a NaN, infinite or
  // negative rate, or a duplicate key; OutOfRange if Σk_b would not fit 32 bits.
  //
  // With `previous`, placement hysteresis against it (see PlanConfig::stickiness; with stickiness
  // 0 or previous == nullptr there is none). `previous` must have been built for the same
  // destination indices; destinations ≥ config.destinations in it are ignored.
  //
  // `warm` keeps admitted keys where they are warm whenever the balance allows (see
  // PlanConfig::stickiness; it may name keys that are not admitted, or destinations
  // ≥ config.destinations, which are ignored; a key named twice keeps its last entry; byte-aware
  // plans do not use it).
  //
  // `tokens`, for byte-aware planning, is empty or holds key i's sizes at index i of `rates`
  // (InvalidArgument naming the entry for a size that is NaN, infinite or below kUnmeasured);
  // other plans ignore it.
  absl::StatusOr<Plan> Build(std::span<const KeyRate> rates, const PlanConfig& config,
                             const Plan* previous = nullptr, std::span<const KeyWarmth> warm = {},
                             std::span<const KeyTokens> tokens = {});

 private:
  base::Clock* clock_;
  PlanWorkspace workspace_;
};

// A one-off build with a fresh PlanBuilder; same results and errors as PlanBuilder::Build.
absl::StatusOr<Plan> BuildPlan(std::span<const KeyRate> rates, const PlanConfig& config,
                               base::Clock* clock = nullptr, const Plan* previous = nullptr,
                               std::span<const KeyWarmth> warm = {},
                               std::span<const KeyTokens> tokens = {});

}  // namespace cacheroute::planner
