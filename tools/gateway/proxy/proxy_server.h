// ProxyServer: the gateway's HTTP side, on an http::Server (event-driven, io_threads I/O threads,
// a request served on one thread from its first byte to its last). It answers
//
//   POST /v1/completions, /v1/chat/completions  routed by the FrontendCore (key, policy),
//                                               forwarded by the Forwarder; 503 with no member up
//   GET  /v1/models                             forwarded to any up member
//   GET  /v1/models/{id}                        routed the same way; answered from the member's
//                                               GET /v1/models: the entry of `id`, or 404
//                                               model_not_found (engines such as vLLM have no
//                                               /v1/models/{id} of their own)
//   POST /debug/explain                         why a completion request like this one would go
//                                               where it would (FrontendCore::Explain: JSON of
//                                               each candidate's cost terms); routes nothing
//   GET  /metrics                               the page `render_metrics` returns
//   GET  /healthz                               200 "ok", or 503 while draining or with no
//                                               member up
//
// With `shed` on, a completion request first asks the core's admission queue (Admit): it is sent
// on, held asynchronously until the fleet has room, or answered 429 in OpenAI's rate-limit shape
// with Retry-After (docs/gateway.md, "Shedding and priority"); a held request whose client closes
// the connection leaves the queue at its next look (shed, reason client_gone).
//
// and refuses the rest before routing (404 unknown path, 405 wrong method with Allow naming the
// right one, 401 without a listed API key), every refusal through one place (Refuse) that counts
// it; /metrics also counts what the HTTP layer refused itself (400, 413, 431). Errors are in
// OpenAI's shape with a string `code` (error_body.h). Everything about routing is the front-end
// core's (FrontendCore::Route, with this request's headers and body).
//
// Usage:
//   absl::StatusOr<std::unique_ptr<ProxyServer>> proxy =
//       ProxyServer::Start(config, core, [&] { return RenderMetrics(); });
//   (*proxy)->BeginDrain(); (*proxy)->StopAccepting(); … (*proxy)->Stop();
//
// Reads listen, io_threads, write_timeout, tls_*, api_key_file and the upstream timeouts of the
// GatewayConfig, which outlives the server. The core is started first and outlives the server.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/exposition.h"
#include "tools/frontend/frontend_core.h"
#include "tools/frontend/metrics/request_metrics.h"
#include "tools/gateway/auth/api_keys.h"
#include "tools/gateway/proxy/forwarder.h"
#include "tools/gateway/proxy/upstream_pools.h"
#include "tools/http/server.h"

namespace cacheroute::gateway {

class ProxyServer {
 public:
  // Loads the API keys, binds `listen` and serves from then on. InvalidArgument for a bad listen
  // address, key file or TLS file; Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ProxyServer>> Start(
      const GatewayConfig& config, frontend::FrontendCore& core,
      std::function<std::string()> render_metrics);
  ~ProxyServer() { Stop(); }
  ProxyServer(const ProxyServer&) = delete;
  ProxyServer& operator=(const ProxyServer&) = delete;

  // Stops serving (cutting requests in progress) and closes the pooled connections. Idempotent.
  void Stop();

  int port() const { return server_->port(); }
  size_t active_requests() const { return server_->active(); }
  size_t open_streams() const { return metrics_.open_streams(); }

  // From the first call on (which returns true), /healthz answers 503.
  bool BeginDrain() { return !draining_.exchange(true); }
  // Closes the listener and the idle client connections; requests in progress go on.
  void StopAccepting() { server_->StopAccepting(); }

  // requests_total; request_duration_seconds; the server's gauges and refusals (RequestMetrics).
  void RenderRequests(base::Exposition& page) const { metrics_.RenderRequests(page); }
  void RenderLatency(base::Exposition& page) const { metrics_.RenderLatency(page); }
  void RenderServer(base::Exposition& page) const;

 private:
  ProxyServer(const GatewayConfig& config, frontend::FrontendCore& core, ApiKeys keys,
              std::function<std::string()> render_metrics, unsigned threads);

  http::asio::awaitable<void> Handle(http::Exchange& x);
  http::asio::awaitable<void> HandleHealthz(http::Exchange& x);
  // POST /debug/explain: why the request in the body (with its headers) would go where it would.
  http::asio::awaitable<void> HandleExplain(http::Exchange& x);
  // A request the core routes: picked, forwarded (or 503), counted, finished. With `model`,
  // GET /v1/models/{model}, answered from the member's GET /v1/models.
  http::asio::awaitable<void> HandleRouted(http::Exchange& x, frontend::Endpoint endpoint,
                                           const std::optional<std::string>& model = std::nullopt);
  // With shedding on (FrontendCore::admission), a completion request's turn: admitted at once,
  // or held (a timer on this thread, no thread blocked: it pumps the queue every kAdmissionPoll and
  // is woken by the queue) until admitted or shed, or until its client is gone (Exchange::
  // ClientGone, looked at every kAdmissionPoll: withdrawn, kShed with kClientGone). Returns the
  // verdict and, with kShed, why.
  http::asio::awaitable<frontend::AdmissionResult> Admit(http::Exchange& x);
  bool Authorized(const http::Request& request) const;
  // Turns the request away before routing, counted in RequestMetrics::Refused; `allow` (405):
  // the method the path takes, sent as Allow.
  http::asio::awaitable<void> Refuse(http::Exchange& x, frontend::Refusal refusal,
                                     absl::string_view message, absl::string_view allow = "");

  frontend::FrontendCore& core_;
  const GatewayConfig& config_;
  const ApiKeys keys_;
  const std::function<std::string()> render_metrics_;
  frontend::RequestMetrics metrics_;
  std::unique_ptr<http::Server> server_;
  UpstreamPools pools_;  // emptied by Stop, before the server's contexts go
  Forwarder forwarder_;
  std::atomic<bool> draining_{false};
};

}  // namespace cacheroute::gateway
