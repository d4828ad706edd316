// The planner's algorithms by name, and the PlanConfig each one plans with: the only place where
// "cacheroute" and "cacheroute-paper" differ on the planner's side (their dispatch rules, the
// gateway's side, are the table policies of cacheroute/dataplane/policy_registry.h, by the same
// names).
//
//   cacheroute        Algorithm 1 plus a planned spill destination per key and load-adaptive k_b
//                     (PlanConfig::spill, ::balance_share = kCacheRouteBalanceShare)
//   cacheroute-paper  Algorithm 1 as published ("CacheRoute: Planned Prefix-Affinity Routing for
//                     Large-Scale LLM Serving", §3.1): no spill, the fixed q_cap
//
// docs/dispatch.md says what each does and what it measured. kDefaultAlgorithm is the one the
// planner service (PlannerConfig::algorithm) and `cacheroutectl plan` plan with unless told.
//
// Usage:
//   absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(config.algorithm);  // names the value
//   PlanConfig plan = PlanConfigFor(*algorithm, {.destinations = 30, .q_cap = 8,
//                                                .slots_per_destination = 64});
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/plan.h"

namespace cacheroute::planner {

enum class Algorithm : uint8_t { kCacheRoute, kCacheRoutePaper };

inline constexpr Algorithm kDefaultAlgorithm = Algorithm::kCacheRoute;

std::string_view AlgorithmName(Algorithm algorithm);
// InvalidArgument "unknown algorithm \"x\" (one of cacheroute, cacheroute-paper)".
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);
// "cacheroute, cacheroute-paper".
std::string AlgorithmNames();

// `base` with the algorithm's own settings (spill, balance_share); every other field as given.
PlanConfig PlanConfigFor(Algorithm algorithm, PlanConfig base);

// Whether the algorithm plans byte-aware when given a KV budget (PlanConfig::kv_budget_tokens):
// cacheroute does; cacheroute-paper, Algorithm 1 as published, plans by slots.
bool PlansByteAware(Algorithm algorithm);

}  // namespace cacheroute::planner
