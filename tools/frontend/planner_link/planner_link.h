// PlannerLink: a front end's connection to cacheroute-planner, as every CacheRoute gateway has
// it: the TableSubscriber that keeps the Router's table installed, the RateReporter that sends
// the RateRecorder's per-key rates (with each key's sizes and where it was last sent, and the
// EvidenceRecorder's rollout evidence) every
// report_interval, and SetDestinations reports of a changing membership. One channel serves them
// all, failing over between the planner replicas (planner_channels.h); the RPCs carry the
// planner_token_file's bearer token and use TLS when planner_tls_ca_file is set. The table stream's
// state changes are logged once each (base::LogEvent): table_stream_open at the first connect,
// table_stream_lost when an open stream ends (with the gRPC error), table_stream_back when one is
// open again (with the seconds it was away); reconnect attempts in between log nothing.
//
// With `share` set and the config's `share` on, it also runs the fleet-sharing ShareLink
// (share_link.h) on the same channels and credentials, every share_interval.
//
// Usage:
//   absl::StatusOr<std::unique_ptr<PlannerLink>> link = PlannerLink::Start(
//       config, router, recorder, evidence, membership.Names(), /*dynamic_membership=*/true);
//   (*link)->Remap(names);                // a membership change: re-map the installed table
//   (*link)->ReportDestinations(names);   // tell the planner (the membership thread)
//   (*link)->Stop();                      // also the destructor: the last rate report goes out
//
// Reads planner, gateway_id, report_interval, table_cache, share, share_interval and
// planner_{token,tls_*}_file of the FrontendConfig. Thread-safe: Remap, ReportDestinations and the
// stats may be called from any thread; the Router, recorders and the link's threads outlive nothing
// they point to (Stop first).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/exposition.h"
#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/key_sizes.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/planner_link/share_link.h"

namespace cacheroute::frontend {

// What fleet sharing reads: the RoutingCore's outbox (RoutingCoreOptions::share_placements) and
// its clock.
struct ShareSource {
  dataplane::PlacementOutbox* outbox = nullptr;
  const dataplane::Clock* clock = nullptr;
};

class PlannerLink {
 public:
  // Reads the credential and token files, opens the channel and starts the subscriber (the
  // Router's destinations named `destinations`; with `dynamic_membership` a table naming a member
  // this gateway lacks is taken without it) and the reporter. InvalidArgument naming the key for
  // a file that cannot be read or is blank, or options the subscriber or reporter refuse.
  // Each reported key carries where the Router last sent it (served_at) and, with `sizes`, its
  // mean prompt and cached tokens (prompt_tokens, reusable_tokens): AnnotateKeyCount.
  static absl::StatusOr<std::unique_ptr<PlannerLink>> Start(
      const FrontendConfig& config, dataplane::Router& router, dataplane::RateRecorder& recorder,
      dataplane::EvidenceRecorder& evidence, std::vector<std::string> destinations,
      bool dynamic_membership, const dataplane::KeySizes* sizes = nullptr, ShareSource share = {});
  ~PlannerLink() { Stop(); }
  PlannerLink(const PlannerLink&) = delete;
  PlannerLink& operator=(const PlannerLink&) = delete;

  // Stops the share stream, the table stream, then the reporter (which sends its last report).
  // Idempotent.
  void Stop();

  // The Router's destinations are now `names` (by index): re-maps the installed table to them
  // and resizes the Router (TableSubscriber::SetDestinations).
  absl::Status Remap(const std::vector<std::string>& names);
  // Sends `names` to the planner (AdminService.SetDestinations); false when the RPC failed (logged
  // with membership_report_failed; the next replica is tried next time if this one is away).
  bool ReportDestinations(const std::vector<std::string>& names);

  dataplane::TableSubscriberStats SubscriberStats() const { return subscriber_->Stats(); }
  dataplane::RateReporterStats ReporterStats() const { return reporter_->Stats(); }
  // Null when not sharing.
  const ShareLink* share() const { return share_.get(); }
  const dataplane::PlacementOutbox* outbox() const { return outbox_; }

 private:
  PlannerLink() = default;

  std::shared_ptr<dataplane::PlannerChannels> channels_;
  std::string token_;
  mutable std::mutex names_mu_;
  std::vector<std::string> names_;  // the Router's destinations by index, for served_at
  std::unique_ptr<dataplane::TableSubscriber> subscriber_;
  std::unique_ptr<dataplane::RateReporter> reporter_;
  dataplane::PlacementOutbox* outbox_ = nullptr;
  std::unique_ptr<ShareLink> share_;
};

// planner_connected, rate_reports_total, rate_report_failures_total, and ShareLink's share_*
// (RenderShareLink) (zeros without a link).
void RenderPlannerLink(base::Exposition& page, const PlannerLink* link);

// Credentials for the planner channel: TLS when planner_tls_ca_file is set (with this gateway's
// certificate for mutual TLS when planner_tls_cert_file is), plaintext otherwise.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PlannerCredentials(
    const FrontendConfig& config);

}  // namespace cacheroute::frontend
