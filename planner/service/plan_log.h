// The planner service's log lines for a planning step (base::LogEvent, one line each on stderr):
//   gate_changed     the rollout gate moved: state, table_fraction, why
//   table_published  a new table version went out: version, build_ms
//   plan_failed      the step failed: error
// A step that changed nothing logs nothing. What the control-interval loops (PlannerServer's
// ticker, HaReplica's loop) call after each Replan or ObserveGate.
//
// Usage:
//   LogPlanOutcome(core->Replan());
#pragma once

#include "absl/status/statusor.h"
#include "planner/service/planner_core.h"

namespace cacheroute::service {

void LogPlanOutcome(const absl::StatusOr<PlanOutcome>& outcome);

}  // namespace cacheroute::service
