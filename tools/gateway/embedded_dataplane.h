// EmbeddedDataplane: everything a CacheRoute front end needs to route requests over a fleet of
// model servers, with no HTTP server of its own: the routing core (Router, rates, evidence,
// served hit, request lifecycles), the routing-key derivation, the membership and its watcher,
// per-destination health with the prober and the load scraper, and the planner link. The
// reference gateway puts its HTTP proxy in front of it (gateway.h); another front end (an
// endpoint picker) can embed it the same way and get the same keys, policies, rates, table,
// evidence and signals.
//
// Usage:
//   StopSignal stop;
//   EmbeddedDataplane dataplane(config, stop);     // config passed ValidateGatewayConfig
//   absl::Status s = dataplane.Start();            // membership, planner link, threads
//   RoutingInput input = dataplane.keys().Derive(header, body);   // key and prompt
//   RequestLifecycle r = dataplane.core().Route(input, members->policy.get(), clock.Now());
//   dataplane.Stop();                              // stops the threads; last rate report
//
// Wiring: a membership change resets the counters of every index with a new member (health
// carried over for a moved one), then re-maps the table (PlannerLink::Remap) or resizes the
// Router. Thread-safety: after Start, the accessors and what they return may be used from any
// thread; Start and Stop from one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "tools/gateway/gateway_config.h"
#include "tools/gateway/health/destination_health.h"
#include "tools/gateway/health/health_prober.h"
#include "tools/gateway/health/load_scraper.h"
#include "tools/gateway/membership/members.h"
#include "tools/gateway/membership/membership_watcher.h"
#include "tools/gateway/planner_link/planner_link.h"
#include "tools/gateway/routing/key_deriver.h"
#include "tools/gateway/routing/routing_core.h"
#include "tools/gateway/stop_signal.h"

namespace cacheroute::gateway {

class EmbeddedDataplane {
 public:
  EmbeddedDataplane(const GatewayConfig& config, StopSignal& stop);
  ~EmbeddedDataplane();
  EmbeddedDataplane(const EmbeddedDataplane&) = delete;
  EmbeddedDataplane& operator=(const EmbeddedDataplane&) = delete;

  // Applies the first membership (InitialMembers), connects to the planner when one is set, and
  // starts the prober, the membership watcher (dynamic sources) and the load scraper (with
  // load_scrape_interval). Errors name the configuration key at fault.
  absl::Status Start();
  // Triggers `stop`, joins the threads and stops the planner link, which sends its last rate
  // report. Idempotent.
  void Stop();

  const GatewayConfig& config() const { return config_; }
  RoutingCore& core() { return core_; }
  const RoutingCore& core() const { return core_; }
  const KeyDeriver& keys() const { return keys_; }
  Membership& membership() { return membership_; }
  const Membership& membership() const { return membership_; }
  DestinationHealth& health() { return health_; }
  const DestinationHealth& health() const { return health_; }
  const LoadScraper& scraper() const { return scraper_; }
  // Null without a planner.
  const PlannerLink* planner() const { return planner_.get(); }

  std::optional<dataplane::TableSubscriberStats> SubscriberStats() const;
  std::optional<dataplane::RateReporterStats> ReporterStats() const;

  // `destination="NAME"` of each destination both the snapshot and the Router count (the two
  // agree but for a moment during a change), by index: the per-destination metrics' labels.
  static std::vector<std::string> DestinationLabels(const Members& members,
                                                    const dataplane::RouterStats& stats);

 private:
  void NewOccupant(uint32_t d, uint32_t from);
  absl::Status Install(const std::vector<std::string>& names);

  const GatewayConfig config_;
  StopSignal& stop_;
  const uint32_t capacity_;
  dataplane::SteadyClock clock_;
  RoutingCore core_;
  KeyDeriver keys_;
  Membership membership_;  // its hooks reach health_ and scraper_ only once Start applies
  DestinationHealth health_;
  LoadScraper scraper_;
  HealthProber prober_;
  std::unique_ptr<PlannerLink> planner_;
  std::unique_ptr<MembershipWatcher> watcher_;
};

}  // namespace cacheroute::gateway
