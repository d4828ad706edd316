// The bridge from a study run to the fleet simulator (tools/eval/sim/fleet.h): a RunSpec becomes a
// FleetConfig and a request stream, and a RunResult becomes a RunRecord.
//
// A run's FleetConfig is the study's fleet knobs (FleetKnobs: the fleet's size and profile, the
// planner's timing, the dispatch and the baselines' parameters, as they are) turned into the
// run's by its label's row of the study-label table (policy_labels.h).
//
// The runner generates each (load, seed) workload once and shares it between the runs that use it
// (paired runs: every policy behind every gateway count sees the same requests), dropping it after
// its last use.
//
// Usage:
//   RunFunction run = MakeFleetRunner();
//   absl::StatusOr<StudyResult> r = RunStudy(*FindStudy("primary"), run, {.jobs = 2});
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/sim/study/run_record.h"
#include "tools/eval/sim/study/study.h"
#include "tools/eval/sim/study/sweep.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::sim::study {

// The run's FleetConfig: the study's knobs behind spec.gateways gateways, then its label's row.
// InvalidArgument naming the policy label when it is unknown or its row refuses the study
// ("stale" outside a drift study), or naming the field of a bad FleetConfig.
absl::StatusOr<FleetConfig> MakeFleetConfig(const RunSpec& spec);

std::vector<SimRequest> ToSimRequests(const workload::Workload& workload);

RunRecord ToRunRecord(const RunResult& result, uint64_t simulated_requests);

RunFunction MakeFleetRunner();

}  // namespace cacheroute::sim::study
