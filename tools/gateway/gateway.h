// Gateway: cacheroute-gateway, the OpenAI-compatible HTTP reverse proxy in front of a fleet of
// model servers (vLLM), routing each request with the dataplane so that prefix KV caches stay
// warm. docs/gateway.md has the configuration, the operator's view and the design; this is the
// contract.
//
//   POST /v1/completions, /v1/chat/completions  forwarded unchanged to the chosen upstream;
//                                               streams pass through chunk by chunk
//   GET  /v1/models                             forwarded to any up upstream
//   GET  /metrics, /healthz                     the gateway's own (/healthz: 503 while draining)
//
// A Gateway wires two parts and owns their lifecycle: the FrontendCore (routing key, policy,
// table and rates, membership, health, served hit, planner link; tools/frontend/frontend_core.h)
// and the ProxyServer in front of it (HTTP, upstream connections, forwarding;
// proxy/proxy_server.h). Responses carry X-CacheRoute-Destination and X-CacheRoute-Planned. Slow is
// not dead: only connect failures, resets before the response headers and failed active health
// checks mark a destination down.
//
// Thread-safety: every public method may be called from any thread.
// Usage:
//   absl::StatusOr<std::unique_ptr<Gateway>> gateway = Gateway::Start(config);
//   … (*gateway)->Drain();   // SIGTERM: /healthz 503, stop accepting, streams finish
//   (*gateway)->Stop();      // also done by the destructor
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/frontend/stop_signal.h"
#include "tools/gateway/gateway_config.h"

namespace cacheroute::frontend {
class FrontendCore;
}  // namespace cacheroute::frontend

namespace cacheroute::gateway {

class ProxyServer;

class Gateway {
 public:
  // Validates `config` (ValidateGatewayConfig), applies the first membership, starts the prober,
  // the membership watcher, the load scraper and, with a planner, the planner link; then binds the
  // listen address and serves. Errors name the configuration key at fault (InvalidArgument), or
  // say the address cannot be bound (Unavailable).
  static absl::StatusOr<std::unique_ptr<Gateway>> Start(const GatewayConfig& config);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Graceful drain: /healthz answers 503, the listener and idle connections close, requests in
  // progress (streams included) go on. Returns once none is left or after drain_timeout, and
  // says which. Stop() afterwards cuts what is left.
  bool Drain();
  // Stops serving (cutting requests in progress), stops the background threads and sends a last
  // rate report. Idempotent.
  void Stop();

  int port() const;
  const GatewayConfig& config() const { return config_; }
  // Index of the upstream named `name`, or kNoDestination.
  uint32_t DestinationIndex(absl::string_view name) const;
  // The current members' names, by destination index.
  std::vector<std::string> DestinationNames() const;
  // Requests in progress, and streams among them.
  size_t active_requests() const;
  size_t open_streams() const;

  // Prometheus text exposition of the gateway's counters (what GET /metrics answers).
  std::string RenderMetrics();

  dataplane::RouterStats RouterStats() const;
  // The installed table (nullptr before the first).
  std::shared_ptr<const dataplane::RoutingTable> table() const;
  std::optional<dataplane::TableSubscriberStats> SubscriberStats() const;
  std::optional<dataplane::RateReporterStats> ReporterStats() const;
  // The served KV hit the Router was last given (cached / prompt tokens, ~last 1,000 responses
  // that reported it); none before the first.
  std::optional<double> measured_hit() const;

 private:
  explicit Gateway(const GatewayConfig& config);

  const GatewayConfig config_;
  frontend::StopSignal stop_;  // ends the background loops and Drain's delay
  std::unique_ptr<frontend::FrontendCore> core_;
  std::unique_ptr<ProxyServer> proxy_;  // after core_: goes first
};

}  // namespace cacheroute::gateway
