// RequestMetrics: the HTTP front end's own counters, apart from the routing's: requests answered
// per endpoint and status class and their duration, streams open, and refusals: every request
// turned away before it is routed, by the front end (missing or unknown API key, unknown path,
// wrong method) or by the HTTP layer underneath (malformed, body or header too large, counted
// there and handed in when rendering), as refusals_total{status,reason}.
//
// Usage (the front end):
//   metrics.Answered(Endpoint::kCompletions, status, now - start);  // once per routed request
//   metrics.Refused(Refusal::kUnauthorized);                        // once per refusal
//   metrics.StreamOpened(); … metrics.StreamClosed();
//   metrics.RenderRequests(page); … metrics.RenderServer(page, gauges);   // for /metrics
//
// Thread-safe: relaxed atomics, written on the request path, read only when rendering.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/exposition.h"
#include "tools/frontend/metrics/latency_histogram.h"

namespace cacheroute::frontend {

// The routed endpoints (metrics label `endpoint`).
enum class Endpoint : uint8_t { kCompletions, kChatCompletions, kModels };

// What the front end refuses itself, before routing; StatusOf gives the HTTP status.
enum class Refusal : uint8_t { kUnauthorized, kNoRoute, kMethodNotAllowed };
int StatusOf(Refusal refusal);  // 401, 404, 405

class RequestMetrics {
 public:
  static constexpr int kEndpoints = 3;
  static constexpr int kStatusClasses = 5;  // 1xx … 5xx
  static constexpr int kRefusals = 3;

  // A routed request answered with `status` after `elapsed`.
  void Answered(Endpoint endpoint, int status, std::chrono::nanoseconds elapsed);
  // A request the front end refused before routing: every such refusal comes through here.
  void Refused(Refusal refusal);
  void StreamOpened() { open_streams_.fetch_add(1, std::memory_order_relaxed); }
  void StreamClosed() { open_streams_.fetch_sub(1, std::memory_order_relaxed); }
  size_t open_streams() const { return open_streams_.load(std::memory_order_relaxed); }

  // requests_total.
  void RenderRequests(base::Exposition& page) const;
  // request_duration_seconds.
  void RenderLatency(base::Exposition& page) const;
  // What the HTTP server knows, rendered with the front end's gauges and refusals.
  struct ServerGauges {
    size_t active_requests = 0;
    size_t client_connections = 0;
    bool draining = false;
    // The HTTP layer's own refusals since start (http::Server::refusals()).
    uint64_t malformed = 0;         // 400
    uint64_t body_too_large = 0;    // 413
    uint64_t header_too_large = 0;  // 431
    uint64_t read_timeouts = 0;     // cut unanswered: the request was not read in read_timeout
  };
  // open_streams, active_requests, client_connections, draining, refusals_total{status,reason}
  // (the front end's and the HTTP layer's), client_read_timeouts_total.
  void RenderServer(base::Exposition& page, const ServerGauges& server) const;

 private:
  std::array<std::atomic<uint64_t>, kEndpoints * kStatusClasses> answered_{};
  LatencyHistogram latency_;
  std::atomic<size_t> open_streams_{0};
  std::array<std::atomic<uint64_t>, kRefusals> refused_{};
};

}  // namespace cacheroute::frontend
