// See fleet_share.h.
#include "tools/eval/sim/fleet_share.h"

#include <algorithm>
#include <utility>

namespace cacheroute::sim {

SimShare::SimShare(const FleetConfig& config, SimClock& clock,
                   std::vector<std::unique_ptr<SimGateway>>& gateways)
    : config_(config),
      clock_(clock),
      gateways_(gateways),
      exchange_({}, clock.planner_clock()),
      loss_(dataplane::Mix64(config.seed ^ 0x6a09e667f3bcc909ULL)),
      next_share_s_(config.share_interval_s) {
  for (const std::unique_ptr<SimGateway>& g : gateways_) {
    subscriptions_.push_back(exchange_.Subscribe(g->id()));
  }
}

double SimShare::next_event_s() const {
  return deliveries_.empty() ? next_share_s_ : std::min(next_share_s_, deliveries_.front().at);
}

void SimShare::Step() {
  const double now = clock_.now_s;
  while (!deliveries_.empty() && deliveries_.front().at <= now) {
    gateways_[deliveries_.front().gateway]->ShareIn(deliveries_.front().batch);
    deliveries_.pop_front();
  }
  if (now < next_share_s_) return;
  next_share_s_ = now + config_.share_interval_s;
  for (const std::unique_ptr<SimGateway>& g : gateways_) {
    // A batch the exchange refuses would be a bug in the gateway's conversion: the run's
    // results would not be the product's, so it is not hidden.
    const absl::Status s = exchange_.Publish(g->ShareOut(config_.share_work));
    if (!s.ok()) std::abort();
  }
  for (uint32_t g = 0; g < subscriptions_.size(); ++g) {
    for (v1::ShareBatch& batch : subscriptions_[g]->Take()) {
      if (config_.share_loss > 0 &&
          static_cast<double>(loss_.Next() >> 11) * 0x1.0p-53 < config_.share_loss)
        continue;
      deliveries_.push_back({now + config_.share_delay_s, g, std::move(batch)});
    }
  }
  if (config_.share_delay_s <= 0) Step();  // delivered at once
}

}  // namespace cacheroute::sim
