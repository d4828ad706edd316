// FrontendCore: the core every CacheRoute front end runs (cacheroute-gateway's HTTP proxy,
// cacheroute-epp's ext_proc server): the routing core (Router, rates, evidence, served hit,
// request lifecycles), the routing-key derivation, the membership and its watcher, per-destination
// health with the prober and the load scraper, and the planner link, behind one request path:
//
//   NeedsBody(headers)           whether the request can be routed before its body arrived
//   Route(headers, body, start)  its key and prompt (KeyDeriver), the membership snapshot of this
//                                thread, the pick (RoutingCore::Route, by the snapshot's policy);
//                                a snapshot that knows the picked index (re-taken when the
//                                membership just changed), and the member: RoutedRequest
//   RouteAny(start)              a request any up member can answer (GET /v1/models)
//   admission()                  with `shed` on, the admission queue a front end asks before
//                                Route (OfferAdmission) and
//                                pumps (PumpAdmission) when a request's prefill is over; null off
//
// The front end then forwards (the proxy) or names the member (the endpoint picker) and tells the
// lifecycle what happens (routing/request_lifecycle.h). The fleet simulator's gateways run the
// layer below, RoutingCore and RequestLifecycle, on its clock.
//
// Usage:
//   StopSignal stop;
//   FrontendCore core(config, stop);          // config passed ValidateFrontendConfig
//   absl::Status s = core.Start();            // membership, planner link, threads
//   RoutedRequest r = core.Route(headers, body, core.routing().clock().Now());
//   if (r.member() == nullptr) … 503 …;  Send(*r.member()); r.lifecycle.FirstToken(true); …
//   core.Stop();                              // stops the threads; last rate report
//
// Wiring: a membership change resets the counters of every index with a new member (health
// carried over for a moved one), then re-maps the table (PlannerLink::Remap) or resizes the
// Router. Thread-safety: after Start, Route, RouteAny, the accessors and what they return may be
// used from any thread; Start and Stop from one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/exposition.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/health/destination_health.h"
#include "tools/frontend/health/health_prober.h"
#include "tools/frontend/health/load_scraper.h"
#include "tools/frontend/membership/members.h"
#include "tools/frontend/membership/membership_watcher.h"
#include "tools/frontend/planner_link/planner_link.h"
#include "tools/frontend/routing/admission.h"
#include "tools/frontend/routing/key_deriver.h"
#include "tools/frontend/routing/request_lifecycle.h"
#include "tools/frontend/routing/routing_core.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {

// A request's header by name (compared without case; the core asks in lower case), or none.
using HeaderLookup = absl::FunctionRef<std::optional<absl::string_view>(absl::string_view name)>;

// A routed request: its lifecycle and the membership snapshot it was routed against, which knows
// the picked index. Move-only (the lifecycle is).
struct RoutedRequest {
  RequestLifecycle lifecycle;
  std::shared_ptr<const Members> members;

  // The member the request goes to; null when no destination was up.
  const Member* member() const {
    return lifecycle.ok() ? members->At(lifecycle.destination()) : nullptr;
  }
};

class FrontendCore {
 public:
  FrontendCore(const FrontendConfig& config, StopSignal& stop);
  ~FrontendCore();
  FrontendCore(const FrontendCore&) = delete;
  FrontendCore& operator=(const FrontendCore&) = delete;

  // Applies the first membership (InitialMembers), connects to the planner when one is set, and
  // starts the prober, the membership watcher (dynamic sources) and the load scraper (with
  // load_scrape_interval). Errors name the configuration key at fault.
  absl::Status Start();
  // Triggers `stop`, joins the threads and stops the planner link, which sends its last rate
  // report. Idempotent.
  void Stop();

  // Whether a request with these headers needs its body to be routed: always when the dispatch
  // counts prompt tokens (every policy but cacheroute-paper), else when the key may come from it.
  bool NeedsBody(HeaderLookup headers) const;
  // Routes a request by its key and prompt (from `headers` and `body`) and the policy of this
  // thread's membership snapshot, received at `start`.
  RoutedRequest Route(HeaderLookup headers, absl::string_view body, dataplane::Time start);
  // A request any up member can answer (GET /v1/models): a random one.
  RoutedRequest RouteAny(dataplane::Time start);
  // Why Route would send this request where it would, as JSON (routing/explanation_json.h),
  // routing nothing. FailedPrecondition when the policy does not route by the planner's table
  // (only the table policies' rule explains itself); InvalidArgument for a request without a
  // routing key (it goes by power of two choices).
  absl::StatusOr<std::string> Explain(HeaderLookup headers, absl::string_view body);
  // The admission queue (routing/admission.h) when `shed` is on; null otherwise.
  AdmissionQueue* admission() { return admission_.get(); }
  const AdmissionQueue* admission() const { return admission_.get(); }
  // Offers a request to the admission queue (non-null: `shed` on) now: its priority (the
  // configured objective of its x-gateway-inference-objective header, else 0), its estimated
  // prompt tokens and the fleet's room (AdmissionRoom). AdmissionQueue::Offer says the rest.
  AdmissionResult OfferAdmission(HeaderLookup headers, absl::string_view body,
                                 AdmissionQueue::Wake wake);
  // The fleet's room below saturation now (FleetRoom with shed_saturation_tokens).
  double AdmissionRoom() const;
  // Sheds the queue's expired waiters and admits what the room allows; nothing without a queue.
  void PumpAdmission();
  // Sends `routed` to the up destination `d` instead (RoutingCore::Redirect).
  RoutedRequest Redirect(RoutedRequest routed, uint32_t d);
  // This thread's copy of the membership snapshot: re-taken when the membership's generation
  // moved (or `fresh`), so that holding it costs the thread an uncontended reference count.
  std::shared_ptr<const Members> ThreadMembers(bool fresh = false) const;

  const FrontendConfig& config() const { return config_; }
  RoutingCore& routing() { return routing_; }
  const RoutingCore& routing() const { return routing_; }
  const KeyDeriver& keys() const { return keys_; }
  Membership& membership() { return membership_; }
  const Membership& membership() const { return membership_; }
  DestinationHealth& health() { return health_; }
  const DestinationHealth& health() const { return health_; }
  const LoadScraper& scraper() const { return scraper_; }
  // Null without a planner.
  const PlannerLink* planner() const { return planner_.get(); }

  // The membership's metrics (Membership::Render) and, with the InferencePool source, the
  // watch's relists (410 Gone) and restarts (errors, dropped streams) since the start.
  void RenderMembership(base::Exposition& page) const;

  std::optional<dataplane::TableSubscriberStats> SubscriberStats() const;
  std::optional<dataplane::RateReporterStats> ReporterStats() const;

  // `destination="NAME"` of each destination both the snapshot and the Router count (the two
  // agree but for a moment during a change), by index: the per-destination metrics' labels.
  static std::vector<std::string> DestinationLabels(const Members& members,
                                                    const dataplane::RouterStats& stats);

 private:
  // A request's priority: config.objectives of its x-gateway-inference-objective header (0).
  int Priority(HeaderLookup headers) const;
  // The prompt tokens a request of this body is estimated to bring (at least 1).
  double AdmissionTokens(absl::string_view body) const;
  void NewOccupant(uint32_t d, uint32_t from);
  absl::Status Install(const std::vector<std::string>& names);

  const FrontendConfig config_;
  StopSignal& stop_;
  const uint32_t capacity_;
  const uint64_t instance_;       // tells this core's thread-local snapshot from another core's
  const std::string key_header_;  // config_.key_header in lower case
  const bool reads_prompt_;       // the dispatch counts prompt tokens: route with the body
  dataplane::SteadyClock clock_;
  RoutingCore routing_;
  KeyDeriver keys_;
  Membership membership_;  // its hooks reach health_ and scraper_ only once Start applies
  DestinationHealth health_;
  LoadScraper scraper_;
  HealthProber prober_;
  std::unique_ptr<PlannerLink> planner_;
  std::unique_ptr<MembershipWatcher> watcher_;
  std::unique_ptr<AdmissionQueue> admission_;  // null unless config_.shed
};

// The admission queue's options from the shed_* keys.
AdmissionOptions AdmissionOptionsOf(const FrontendConfig& config);

}  // namespace cacheroute::frontend
