// See gateway.h.
#include "tools/gateway/gateway.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/exposition.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "tools/frontend/frontend_core.h"
#include "tools/gateway/proxy/proxy_server.h"

namespace cacheroute::gateway {

Gateway::Gateway(const GatewayConfig& config)
    : config_(config), core_(std::make_unique<frontend::FrontendCore>(config_, stop_)) {}

Gateway::~Gateway() { Stop(); }

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(const GatewayConfig& config) {
  if (absl::Status s = ValidateGatewayConfig(config); !s.ok()) return s;
  std::unique_ptr<Gateway> gateway(new Gateway(config));
  // The dataplane first: once the listener is bound, requests and /metrics find it whole.
  if (absl::Status s = gateway->core_->Start(); !s.ok()) return s;
  CACHEROUTE_ASSIGN_OR_RETURN(
      gateway->proxy_, ProxyServer::Start(gateway->config_, *gateway->core_,
                                          [g = gateway.get()] { return g->RenderMetrics(); }));
  return gateway;
}

bool Gateway::Drain() {
  if (proxy_ == nullptr) return true;
  if (proxy_->BeginDrain()) {
    base::LogEvent("info", "draining",
                   {{"active_requests", absl::StrCat(proxy_->active_requests())},
                    {"open_streams", absl::StrCat(proxy_->open_streams())},
                    {"drain_delay", absl::FormatDuration(config_.drain_delay)},
                    {"drain_timeout", absl::FormatDuration(config_.drain_timeout)}});
    // /healthz answers 503 from now; keep serving until those who watch it have seen it.
    stop_.WaitFor(config_.drain_delay);
  }
  proxy_->StopAccepting();
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoMicroseconds(config_.drain_timeout);
  while (proxy_->active_requests() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const size_t left = proxy_->active_requests();
  base::LogEvent(left == 0 ? "info" : "warning", "drained", {{"requests_cut", absl::StrCat(left)}});
  return left == 0;
}

void Gateway::Stop() {
  if (!stop_.Trigger()) return;
  if (proxy_ != nullptr) proxy_->Stop();
  core_->Stop();
}

int Gateway::port() const { return proxy_ != nullptr ? proxy_->port() : 0; }

uint32_t Gateway::DestinationIndex(absl::string_view name) const {
  return core_->membership().IndexOf(name);
}

std::vector<std::string> Gateway::DestinationNames() const { return core_->membership().Names(); }

size_t Gateway::active_requests() const {
  return proxy_ != nullptr ? proxy_->active_requests() : 0;
}

size_t Gateway::open_streams() const { return proxy_ != nullptr ? proxy_->open_streams() : 0; }

dataplane::RouterStats Gateway::RouterStats() const { return core_->routing().Stats(); }

std::shared_ptr<const dataplane::RoutingTable> Gateway::table() const {
  return core_->routing().router().table();
}

std::optional<dataplane::TableSubscriberStats> Gateway::SubscriberStats() const {
  return core_->SubscriberStats();
}

std::optional<dataplane::RateReporterStats> Gateway::ReporterStats() const {
  return core_->ReporterStats();
}

std::optional<double> Gateway::measured_hit() const {
  return core_->routing().served_hit().measured();
}

// Each part renders its own families; this order is the page's.
std::string Gateway::RenderMetrics() {
  base::Exposition page("cacheroute_gateway_");
  const frontend::RoutingCore& routing = core_->routing();
  const frontend::DestinationHealth& health = core_->health();
  const dataplane::RouterStats stats = routing.Stats();
  const std::vector<std::string> labels =
      frontend::FrontendCore::DestinationLabels(*core_->membership().Current(), stats);
  if (proxy_ != nullptr) proxy_->RenderRequests(page);
  routing.RenderPicks(page, stats);
  routing.RenderLoads(page, stats, labels);
  health.RenderCounters(page, labels);
  core_->scraper().Render(page, labels);
  if (proxy_ != nullptr) proxy_->RenderLatency(page);
  routing.RenderLatency(page, labels);
  health.RenderErrorKinds(page, labels);
  routing.served_hit().Render(page, labels);
  core_->RenderMembership(page);
  if (core_->admission() != nullptr) core_->admission()->Render(page);
  if (proxy_ != nullptr) proxy_->RenderServer(page);
  frontend::RenderPlannerLink(page, core_->planner());
  return page.Take();
}

}  // namespace cacheroute::gateway
