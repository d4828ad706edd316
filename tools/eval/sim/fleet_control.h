// SimControlPlane: CacheRoute's control plane in the fleet simulator (internal to RunFleet,
// fleet.h): the product's service::PlannerCore on the simulator's clock, run on the product's
// ControlSchedule. At each step every gateway reports (its rollout evidence; at a planning step
// also its rate counts) through PlannerCore::ReportRates; a planning step is PlannerCore::Replan
// (which also runs the gate), a gate step PlannerCore::ObserveGate; each table the core publishes
// reaches every gateway's Router through the gateways' own conversion
// (cacheroute/dataplane/grpc/table_conversion.h).
//
// The FleetConfig maps onto PlannerConfig as docs/simulator.md, "Fleet internals", describes
// (q_cap, W, stickiness, algorithm, ablation → replicate/placement, max_plans, gate and its
// interval, rate smoothing). Once max_plans plans are made without the gate, the loop stops:
// the core would only hold the plan. With PlanAblation::kNone it never steps: no plan, no
// table.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/service/control_schedule.h"
#include "planner/service/planner_core.h"
#include "proto/table/table_snapshot.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/sim/fleet_gateway.h"

namespace cacheroute::sim {

// The PlannerConfig a FleetConfig runs with, planning with config.algorithm at `q_cap` (and, with
// byte-aware planning, `overhead_tokens` per request).
service::PlannerConfig PlannerConfigFor(const FleetConfig& config, double q_cap,
                                        double overhead_tokens = 0);

class SimControlPlane {
 public:
  static absl::StatusOr<std::unique_ptr<SimControlPlane>> Create(const FleetConfig& config,
                                                                 double q_cap,
                                                                 double overhead_tokens,
                                                                 SimClock& clock);

  // Simulated time of the next step; kForever once the loop is over.
  double next_step_s() const;
  // Runs the step due at next_step_s() (the clock reads that time): reports, the core's step,
  // installs what it published in every gateway; records plans, churn and gate changes in
  // `result`.
  absl::Status Step(std::span<const std::unique_ptr<SimGateway>> gateways, RunResult& result);
  // Plan churn and the gate's final state into `result`.
  void Finish(RunResult& result) const;

 private:
  SimControlPlane(const FleetConfig& config, SimClock& clock, service::ControlSchedule schedule);

  absl::Status ReportRound(std::span<const std::unique_ptr<SimGateway>> gateways, bool with_counts);
  absl::Status Install(std::span<const std::unique_ptr<SimGateway>> gateways);
  void RecordPlan(RunResult& result);

  const FleetConfig& config_;
  SimClock& clock_;
  service::ControlSchedule schedule_;
  std::unique_ptr<service::PlannerCore> core_;
  std::unordered_map<std::string, uint32_t> index_by_name_;  // the gateways' destinations
  bool over_ = false;
  uint64_t report_sequence_ = 0;  // per gateway, one per report round
  double last_report_s_ = 0;
  std::shared_ptr<const table::TableSnapshot> installed_;     // the table in force
  std::shared_ptr<const table::TableSnapshot> last_planned_;  // in force after the last plan
  double churn_sum_ = 0;
  uint32_t churn_transitions_ = 0;
};

}  // namespace cacheroute::sim
