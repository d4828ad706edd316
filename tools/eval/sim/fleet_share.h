// SimShare: fleet sharing in the simulator (internal to RunFleet, fleet.h), through the product's
// code: every share_interval_s each gateway drains what its picks made known and its ledger's
// work (SimGateway::ShareOut: the dataplane's PlacementOutbox and share_conversion.h, as a
// gateway's planner link does) and publishes it to the planner's ShareExchange
// (planner/share/share_exchange.h); each subscriber's batches reach it share_delay_s later, each
// lost with probability share_loss, and it applies them (SimGateway::ShareIn).
//
// Deterministic: loss is drawn from a Random seeded by the run's seed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cacheroute/dataplane/random.h"
#include "planner/share/share_exchange.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/sim/fleet_gateway.h"

namespace cacheroute::sim {

class SimShare {
 public:
  // Subscribes every gateway of `gateways` (which must outlive it).
  SimShare(const FleetConfig& config, SimClock& clock,
           std::vector<std::unique_ptr<SimGateway>>& gateways);

  // The next time something happens: a share step or a delivery.
  double next_event_s() const;
  // At clock.now_s == next_event_s(): deliveries due, then, at a share step, every gateway
  // publishes and the subscribers' batches go on their way.
  void Step();

  const planner::ShareExchangeStats stats() const { return exchange_.Stats(); }

 private:
  struct Delivery {
    double at = 0;
    uint32_t gateway = 0;
    v1::ShareBatch batch;
  };

  const FleetConfig& config_;
  SimClock& clock_;
  std::vector<std::unique_ptr<SimGateway>>& gateways_;
  planner::ShareExchange exchange_;
  std::vector<std::shared_ptr<planner::ShareExchange::Subscription>> subscriptions_;
  dataplane::SeededRandom loss_;
  double next_share_s_ = 0;
  std::deque<Delivery> deliveries_;  // in delivery order (one delay for all)
};

}  // namespace cacheroute::sim
