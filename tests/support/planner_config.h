// Test-only: the PlannerConfig the in-process planners of the tests start from.
//
// Usage:
//   service::PlannerConfig config = testing::LoopbackPlannerConfig({"d0", "d1"});
//   config.algorithm = "cacheroute-paper";  // what a test pins goes on top
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "planner/service/config.h"

namespace cacheroute::testing {

// A planner on a loopback port the kernel picks, without a metrics listener, routing by the table
// from the first plan (the gate off; the gate's own tests turn it on), planning only when a test
// asks (a control interval of an hour) and forgetting no key for ten hours. q_cap 100, one slot a
// destination, rate smoothing 1 s.
inline service::PlannerConfig LoopbackPlannerConfig(std::vector<std::string> destinations) {
  service::PlannerConfig config;
  config.gate_enabled = false;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.destinations = std::move(destinations);
  config.q_cap = 100;
  config.slots_per_destination = 1;
  config.control_interval = absl::Hours(1);
  config.rate_smoothing = absl::Seconds(1);
  config.key_ttl = absl::Hours(10);
  return config;
}

}  // namespace cacheroute::testing
