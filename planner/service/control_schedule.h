// ControlSchedule: when the planner's control loop runs its steps: a planning step every
// control_interval (PlannerCore::Replan) and, with a gate_interval, a rollout-gate decision every
// gate_interval between them (PlannerCore::ObserveGate). A gate step due at the time of a
// planning step is that step (Replan decides the gate too). Times are offsets from the loop's
// start; the planner service's ticker, its replicas' loop and the fleet simulator run this one
// schedule, each on its own clock.
//
// Usage:
//   ControlSchedule schedule(config.control_interval, config.gate_interval);
//   while (WaitUntil(start + schedule.next())) {
//     const bool plan = schedule.Take() == ControlSchedule::Step::kPlan;
//     plan ? core->Replan() : core->ObserveGate();
//   }
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace cacheroute::service {

class ControlSchedule {
 public:
  enum class Step : uint8_t { kPlan, kGate };

  // control_interval > 0; gate_interval 0: no gate steps of their own.
  ControlSchedule(absl::Duration control_interval, absl::Duration gate_interval)
      : control_interval_(control_interval), gate_interval_(gate_interval) {
    Restart(absl::ZeroDuration());
  }

  // When the next step is due.
  absl::Duration next() const { return std::min(next_plan_, next_gate_); }

  // The step due at next(); the schedule moves past it.
  Step Take() {
    if (next_plan_ <= next_gate_) {
      if (next_gate_ == next_plan_) next_gate_ += gate_interval_;
      next_plan_ += control_interval_;
      return Step::kPlan;
    }
    next_gate_ += gate_interval_;
    return Step::kGate;
  }

  // Starts over at `now`: the next planning step one control interval later, the next gate step
  // one gate interval later (a new leader's loop; a loop that fell behind).
  void Restart(absl::Duration now) {
    next_plan_ = now + control_interval_;
    next_gate_ =
        gate_interval_ > absl::ZeroDuration() ? now + gate_interval_ : absl::InfiniteDuration();
  }

 private:
  absl::Duration control_interval_;
  absl::Duration gate_interval_;
  absl::Duration next_plan_;
  absl::Duration next_gate_;
};

}  // namespace cacheroute::service
