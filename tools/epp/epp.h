// Epp: cacheroute-epp, an endpoint picker for the Gateway API Inference Extension: the second front
// end of the core cacheroute-gateway runs (frontend::FrontendCore: the same routing key
// from the key header, `user` or the system prompt, the same policies and table, rates and
// rollout evidence reported to the planner, membership from the same sources, health, load) and
// serves Envoy's ext_proc protocol (ExtProcServer) instead of proxying HTTP: for every request the
// gateway streams to it, it picks a member and answers with its address in
// x-gateway-destination-endpoint and envoy.lb dynamic metadata (then up to fallback_endpoints
// other up members, least loaded first, for the gateway's retries), then follows the response to
// its end for the in-flight count, time to first token, served KV hit and evidence, credited to
// the member the gateway reports as served (x-gateway-destination-endpoint-served) when it names
// another. docs/epp.md has the operator's view.
//
//   gRPC  envoy.service.ext_proc.v3.ExternalProcessor/Process, grpc.health.v1.Health
//   HTTP  GET /metrics (cacheroute_epp_*), GET /healthz (200 while ready), POST /debug/explain
//         (why a request with these headers and this body would go where it would; JSON)
//
// Ready (health "readiness", /healthz) while at least one member is up and it is not draining.
// No endpoint: an immediate 503 with an OpenAI error body. Without a planner, or with the planner
// away, it routes as the gateway does (the fallback; the last table until table_ttl).
//
// Usage:
//   absl::StatusOr<std::unique_ptr<Epp>> epp = Epp::Start(config);
//   … (*epp)->Drain();   // SIGTERM: not ready, then no new streams; returns the streams cut
//   (*epp)->Stop();      // also done by the destructor: stops the threads, last rate report
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/epp/epp_config.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {
class FrontendCore;
}  // namespace cacheroute::frontend

namespace cacheroute::http {
class Server;
}  // namespace cacheroute::http

namespace cacheroute::epp {

class ExtProcServer;

class Epp {
 public:
  // Binds both listeners, applies the first membership and starts the planner link, the prober,
  // the membership watcher and the load scraper. `config` must pass ValidateEppConfig. Errors
  // name the configuration key at fault (InvalidArgument) or the address (Unavailable).
  static absl::StatusOr<std::unique_ptr<Epp>> Start(const EppConfig& config);
  ~Epp();
  Epp(const Epp&) = delete;
  Epp& operator=(const Epp&) = delete;

  // Graceful drain (ExtProcServer::Drain with drain_delay and drain_timeout): returns the streams
  // still open at the timeout, which were cut.
  size_t Drain();
  // Stops serving, then the dataplane's threads; the last rate report goes out. Idempotent.
  void Stop();

  int port() const;
  int metrics_port() const;
  const EppConfig& config() const { return config_; }
  // The current members' names, by destination index, and the endpoint (IP:PORT) each is
  // answered as.
  std::vector<std::string> DestinationNames() const;
  std::vector<std::string> DestinationEndpoints() const;
  size_t active_streams() const;
  bool ready() const;

  // What GET /metrics answers.
  std::string RenderMetrics() const;
  dataplane::RouterStats RouterStats() const;
  std::shared_ptr<const dataplane::RoutingTable> table() const;
  std::optional<dataplane::TableSubscriberStats> SubscriberStats() const;
  std::optional<dataplane::RateReporterStats> ReporterStats() const;
  std::optional<double> measured_hit() const;

 private:
  class RequestExchange;
  struct Counters;

  explicit Epp(const EppConfig& config);
  absl::Status StartMetrics();
  // Publishes readiness every second until stopped.
  void RunReadiness();

  const EppConfig config_;
  frontend::StopSignal stop_;
  std::unique_ptr<frontend::FrontendCore> core_;
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<ExtProcServer> server_;  // after core_: goes first
  std::unique_ptr<http::Server> metrics_server_;
  std::thread readiness_thread_;
};

}  // namespace cacheroute::epp
