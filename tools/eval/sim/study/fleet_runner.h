// The bridge from a study run to the fleet simulator (tools/eval/sim/fleet.h): a RunSpec becomes a
// FleetConfig and a request stream, and a RunResult becomes a RunRecord.
//
// Policy labels: the six fleet policies by name ("flatlb" is accepted for "flat-lb"); the
// ablation steps "flat" (Flat-LB), "affinity", "replication" and "lpt" (CacheRoute with
// PlanAblation kAffinityOnly, kReplication and kFull); the drift study's "fresh" (CacheRoute,
// replanning every fleet.control_interval_s) and "stale" (CacheRoute replanning once per drift
// interval, so each interval runs on the plan made from the previous one's rates), "held" (one
// plan at the end of the warm-up, kept for the whole run) and "fresh-sticky" (below); in any
// study, "cacheroute-replan-10s" (CacheRoute replanning every 10 s from rates smoothed over 10 s,
// LPT from scratch) and "cacheroute-sticky-lpt" (the same with the planner service's placement
// hysteresis, stickiness 0.1; "fresh-sticky" is its name in the drift study); "cacheroute-no-plan"
// (CacheRoute's dispatch with no plan, PlanAblation::kNone: what the plan adds).
//
// The runner generates each (load, seed) workload once and shares it between the policies that
// use it (paired runs: every policy sees the same requests), dropping it after its last use.
//
// Usage:
//   RunFunction run = MakeFleetRunner();
//   absl::StatusOr<StudyResult> r = RunStudy(*FindStudy("primary"), run, {.jobs = 2});
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/sim/study/run_record.h"
#include "tools/eval/sim/study/study.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::sim::study {

// cacheroute-bytes (byte-aware planning): the share of each engine's KV cache reserved for
// planned prefixes (FleetConfig::plan_kv_budget_share).
inline constexpr double kKvBudgetShare = 0.5;

// InvalidArgument naming the policy label when it is unknown, or "stale" outside a drift study.
absl::StatusOr<FleetConfig> MakeFleetConfig(const StudyConfig& study, std::string_view policy,
                                            double offered_qps, uint64_t seed);

std::vector<SimRequest> ToSimRequests(const workload::Workload& workload);

RunRecord ToRunRecord(const RunResult& result, uint64_t simulated_requests);

RunFunction MakeFleetRunner();

}  // namespace cacheroute::sim::study
