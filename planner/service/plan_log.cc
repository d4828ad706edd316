// See plan_log.h.
#include "planner/service/plan_log.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "planner/gate.h"

namespace cacheroute::service {

void LogPlanOutcome(const absl::StatusOr<PlanOutcome>& outcome) {
  if (outcome.ok() && outcome->gate.has_value() && outcome->gate->changed) {
    const planner::Gate::Decision& d = *outcome->gate;
    base::LogEvent("info", "gate_changed",
                   {{"state", std::string(planner::GateStateName(d.state))},
                    {"table_fraction", absl::StrCat(d.table_fraction)},
                    {"why", d.why}});
  }
  if (!outcome.ok()) {
    base::LogEvent("error", "plan_failed", {{"error", std::string(outcome.status().message())}});
  } else if (outcome->changed) {
    base::LogEvent("info", "table_published",
                   {{"version", outcome->version.ToString()},
                    {"build_ms", absl::StrCat(outcome->build_seconds * 1e3)}});
  }
}

}  // namespace cacheroute::service
