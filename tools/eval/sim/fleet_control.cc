// See fleet_control.h.
#include "tools/eval/sim/fleet_control.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"
#include "planner/algorithm.h"
#include "planner/plan_snapshot.h"

namespace cacheroute::sim {
namespace {

// Share of the keys in both tables whose destination set differs.
std::optional<double> Churn(const table::TableSnapshot& before, const table::TableSnapshot& after) {
  uint64_t common = 0, moved = 0;
  for (const table::TableEntry& e : after.entries()) {
    const table::TableEntry* old = before.Find(e.key_id);
    if (old == nullptr) continue;
    ++common;
    moved += old->destinations != e.destinations;
  }
  if (common == 0) return std::nullopt;
  return static_cast<double>(moved) / static_cast<double>(common);
}

}  // namespace

service::PlannerConfig PlannerConfigFor(const FleetConfig& config, double q_cap,
                                        double overhead_tokens) {
  service::PlannerConfig c;
  c.gate_enabled = config.gate;
  c.gate = config.gate_options;
  c.gate_interval = config.gate ? absl::Seconds(config.gate_interval_s) : absl::ZeroDuration();
  c.metrics_listen = "";
  c.destinations = planner::DestinationNames(config.engines);
  c.q_cap = q_cap;
  c.slots_per_destination = config.slots_per_destination;
  c.placement_stickiness = config.stickiness;
  c.follow_served = config.plan_follows_cache;
  c.algorithm = std::string(planner::AlgorithmName(config.algorithm));
  c.replicate = config.ablation != PlanAblation::kAffinityOnly;
  c.placement = config.ablation == PlanAblation::kFull ? "lpt" : "hashed";
  c.placement_seed = config.seed;
  c.max_plans = config.max_plans;
  c.control_interval = absl::Seconds(config.control_interval_s);
  c.rate_smoothing = absl::Seconds(config.rate_smoothing_s);
  c.history = 2;  // the simulator reads only the latest table
  if (config.plan_kv_budget_share > 0) {
    c.kv_tokens_per_destination = static_cast<double>(config.profile.kv_blocks) * kBlockTokens;
    c.planned_prefix_share = config.plan_kv_budget_share;
    c.request_overhead_tokens = overhead_tokens;
  }
  return c;
}

SimControlPlane::SimControlPlane(const FleetConfig& config, SimClock& clock,
                                 service::ControlSchedule schedule)
    : config_(config),
      clock_(clock),
      schedule_(schedule),
      // No plan: the loop never steps, so the gateways never get a table.
      over_(config.ablation == PlanAblation::kNone) {}

absl::StatusOr<std::unique_ptr<SimControlPlane>> SimControlPlane::Create(const FleetConfig& config,
                                                                         double q_cap,
                                                                         double overhead_tokens,
                                                                         SimClock& clock) {
  const service::PlannerConfig planner = PlannerConfigFor(config, q_cap, overhead_tokens);
  std::unique_ptr<SimControlPlane> control(new SimControlPlane(
      config, clock, service::ControlSchedule(planner.control_interval, planner.gate_interval)));
  CACHEROUTE_ASSIGN_OR_RETURN(control->core_,
                              service::PlannerCore::Create(planner, &clock.planner_clock()));
  control->index_by_name_ = dataplane::DestinationIndexOf(planner.destinations);
  return control;
}

double SimControlPlane::next_step_s() const {
  return over_ ? kForever : absl::ToDoubleSeconds(schedule_.next());
}

absl::Status SimControlPlane::Step(std::span<const std::unique_ptr<SimGateway>> gateways,
                                   RunResult& result) {
  const bool plan = schedule_.Take() == service::ControlSchedule::Step::kPlan;
  if (absl::Status s = ReportRound(gateways, /*with_counts=*/plan); !s.ok()) return s;
  CACHEROUTE_ASSIGN_OR_RETURN(service::PlanOutcome outcome,
                              plan ? core_->Replan() : core_->ObserveGate());
  if (outcome.gate.has_value() && outcome.gate->changed) {
    ++result.gate_changes;
    result.gate_history.push_back(
        {.time = clock_.now_s,
         .state = std::string(planner::GateStateName(outcome.gate->state)),
         .why = outcome.gate->why});
  }
  if (outcome.changed) {
    if (absl::Status s = Install(gateways); !s.ok()) return s;
  }
  if (outcome.planned) {
    ++result.plans;
    RecordPlan(result);
  }
  // Past max_plans the core holds the plan: without the gate nothing changes any more.
  if (config_.max_plans > 0 && result.plans >= config_.max_plans && !config_.gate) over_ = true;
  return absl::OkStatus();
}

absl::Status SimControlPlane::ReportRound(std::span<const std::unique_ptr<SimGateway>> gateways,
                                          bool with_counts) {
  ++report_sequence_;
  const double now = clock_.now_s;
  const absl::Time at = SimClock::Unix(now);
  const int64_t end_ms = absl::ToUnixMillis(at);
  const int64_t start_ms = absl::ToUnixMillis(
      at - absl::Seconds(with_counts ? config_.control_interval_s : now - last_report_s_));
  last_report_s_ = now;
  for (const std::unique_ptr<SimGateway>& gateway : gateways) {
    const planner::RateReport report =
        gateway->Report(report_sequence_, start_ms, std::max(end_ms, start_ms + 1), with_counts);
    if (absl::Status s = core_->ReportRates(report).status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SimControlPlane::Install(std::span<const std::unique_ptr<SimGateway>> gateways) {
  installed_ = core_->Latest();
  dataplane::Result<dataplane::RoutingTable> table =
      dataplane::ToRoutingTable(*installed_, index_by_name_, config_.engines);
  if (!table.ok()) return absl::InternalError(table.status().message);
  auto shared = std::make_shared<const dataplane::RoutingTable>(*std::move(table));
  for (const std::unique_ptr<SimGateway>& gateway : gateways) {
    if (dataplane::Status s = gateway->router()->Install(shared, clock_.Now()); !s.ok) {
      return absl::InternalError(s.message);
    }
  }
  return absl::OkStatus();
}

void SimControlPlane::RecordPlan(RunResult& result) {
  if (last_planned_ != nullptr) {
    if (std::optional<double> churn = Churn(*last_planned_, *installed_)) {
      churn_sum_ += *churn;
      ++churn_transitions_;
    }
  }
  last_planned_ = installed_;
  if (!config_.record_dispatches) return;
  PlanRecord& record = result.plan_records.emplace_back();
  record.time = clock_.now_s;
  record.expected_loads = installed_->expected_loads();
  for (const table::TableEntry& e : installed_->entries()) {
    record.entries.push_back({.key_id = e.key_id,
                              .destinations = e.destinations,
                              .spill = e.spill.value_or(dataplane::kNoSpill)});
  }
}

void SimControlPlane::Finish(RunResult& result) const {
  result.plan_churn = churn_transitions_ > 0 ? churn_sum_ / churn_transitions_ : 0;
  if (config_.gate) result.gate_state = core_->Status().gate().state();
}

}  // namespace cacheroute::sim
