// See planner_link.h.
#include "tools/frontend/planner_link/planner_link.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cacheroute/v1/admin.grpc.pb.h"

namespace cacheroute::frontend {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PlannerCredentials(
    const FrontendConfig& config) {
  if (config.planner_tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  CACHEROUTE_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                              ReadNonEmptyFile("planner_tls_ca_file", config.planner_tls_ca_file));
  if (!config.planner_tls_cert_file.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        std::string cert, ReadNonEmptyFile("planner_tls_cert_file", config.planner_tls_cert_file));
    CACHEROUTE_ASSIGN_OR_RETURN(
        std::string key, ReadNonEmptyFile("planner_tls_key_file", config.planner_tls_key_file));
    ssl.pem_cert_chain = std::move(cert);
    ssl.pem_private_key = std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

namespace {

// One line per change of the table stream (the subscriber reports each change once). The
// recovery line says how long the stream was away, not "down", so that a search for the loss
// finds one line per outage.
void LogStreamChange(const dataplane::TableStreamChange& change) {
  if (!change.connected) {
    base::LogEvent("warning", "table_stream_lost", {{"error", change.detail}});
  } else if (change.first) {
    base::LogEvent("info", "table_stream_open");
  } else {
    base::LogEvent(
        "info", "table_stream_back",
        {{"away_s",
          absl::StrFormat("%.1f", std::chrono::duration<double>(change.down_for).count())}});
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerLink>> PlannerLink::Start(
    const FrontendConfig& config, dataplane::Router& router, dataplane::RateRecorder& recorder,
    dataplane::EvidenceRecorder& evidence, std::vector<std::string> destinations,
    bool dynamic_membership, const dataplane::KeySizes* sizes, ShareSource share) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                              PlannerCredentials(config));
  std::unique_ptr<PlannerLink> link(new PlannerLink());
  if (!config.planner_token_file.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string text,
                                ReadNonEmptyFile("planner_token_file", config.planner_token_file));
    link->token_ = std::string(absl::StripAsciiWhitespace(text));
  }
  // One channel over every replica where gRPC can (planner_channels.h).
  link->channels_ = dataplane::PlannerChannels::Create(config.planner, credentials);

  dataplane::TableSubscriberOptions table_options;
  table_options.gateway_id = config.gateway_id;
  link->names_ = destinations;
  table_options.destinations = std::move(destinations);
  table_options.cache_path = config.table_cache;
  table_options.bearer_token = link->token_;
  table_options.ignore_unknown_destinations = dynamic_membership;
  table_options.on_stream_change = [](const dataplane::TableStreamChange& change) {
    LogStreamChange(change);
  };
  link->subscriber_ = std::make_unique<dataplane::TableSubscriber>(link->channels_, router,
                                                                   std::move(table_options));
  if (dataplane::Status s = link->subscriber_->Start(); !s.ok) {
    return absl::InvalidArgumentError(absl::StrCat("table subscriber: ", s.message));
  }
  dataplane::RateReporterOptions report_options;
  report_options.gateway_id = config.gateway_id;
  report_options.interval = absl::ToChronoMilliseconds(config.report_interval);
  report_options.bearer_token = link->token_;
  report_options.evidence = &evidence;
  report_options.annotate = [link = link.get(), &router, sizes](v1::KeyCount& count) {
    std::lock_guard<std::mutex> lock(link->names_mu_);
    dataplane::AnnotateKeyCount(count, sizes, &router, link->names_);
  };
  link->reporter_ = std::make_unique<dataplane::RateReporter>(link->channels_, recorder,
                                                              std::move(report_options));
  if (dataplane::Status s = link->reporter_->Start(); !s.ok) {
    return absl::InvalidArgumentError(absl::StrCat("rate reporter: ", s.message));
  }
  if (config.share && share.outbox != nullptr && share.clock != nullptr) {
    link->outbox_ = share.outbox;
    link->share_ = std::make_unique<ShareLink>(
        link->channels_, router, *share.outbox, *share.clock, link->names_,
        ShareLinkOptions{.gateway_id = config.gateway_id,
                         .bearer_token = link->token_,
                         .interval = config.share_interval,
                         // Other gateways send as often as this one (the fleet's one setting).
                         .remote_work_ttl = std::max(absl::Seconds(2), 4 * config.share_interval)});
    link->share_->Start();
  }
  return link;
}

void PlannerLink::Stop() {
  if (share_ != nullptr) share_->Stop();
  if (subscriber_ != nullptr) subscriber_->Stop();
  if (reporter_ != nullptr) reporter_->Stop();
}

absl::Status PlannerLink::Remap(const std::vector<std::string>& names) {
  const dataplane::Status s = subscriber_->SetDestinations(names);
  if (s.ok) {
    if (share_ != nullptr) share_->SetDestinations(names);
    std::lock_guard<std::mutex> lock(names_mu_);
    names_ = names;
  }
  return s.ok ? absl::OkStatus() : absl::InternalError(s.message);
}

bool PlannerLink::ReportDestinations(const std::vector<std::string>& names) {
  v1::SetDestinationsRequest request;
  for (const std::string& name : names) request.add_destinations(name);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  v1::SetDestinationsResponse response;
  const dataplane::PlannerChannels::Pick pick = channels_->Current();
  const grpc::Status status =
      v1::AdminService::NewStub(pick.channel)->SetDestinations(&context, request, &response);
  if (!status.ok()) {
    // Retried next round; on the next replica if this one is unreachable.
    if (dataplane::PlannerChannels::ShouldRotate(status.error_code())) {
      channels_->Failed(pick.index);
    }
    base::LogEvent(
        "warning", "membership_report_failed",
        {{"code", absl::StrCat(status.error_code())}, {"error", status.error_message()}});
    return false;
  }
  base::LogEvent("info", "membership_reported",
                 {{"members", absl::StrCat(names.size())},
                  {"version", absl::StrCat(response.version().number())}});
  return true;
}

void RenderPlannerLink(base::Exposition& page, const PlannerLink* link) {
  const bool connected = link != nullptr && link->SubscriberStats().connected;
  page.Gauge("planner_connected", "1 while the table stream to the planner is open.",
             connected ? 1 : 0);
  const std::optional<dataplane::RateReporterStats> reporter =
      link != nullptr ? std::optional(link->ReporterStats()) : std::nullopt;
  page.Counter("rate_reports_total", "Rate reports the planner accepted.",
               reporter ? static_cast<double>(reporter->reports_sent) : 0);
  page.Counter("rate_report_failures_total", "Rate report RPCs that failed (retried).",
               reporter ? static_cast<double>(reporter->failed_attempts) : 0);
  RenderShareLink(page, link != nullptr ? link->share() : nullptr,
                  link != nullptr ? link->outbox() : nullptr);
}

}  // namespace cacheroute::frontend
