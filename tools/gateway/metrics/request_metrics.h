// RequestMetrics: the HTTP front end's own counters, apart from the routing's: requests answered
// per endpoint and status class and their duration, streams open, and refusals (requests turned
// away before they are routed: unknown path, wrong method, missing or unknown API key).
//
// Usage (the front end):
//   metrics.Answered(Endpoint::kCompletions, status, now - start);  // once per routed request
//   metrics.Refused(401);                                           // once per refusal
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
#include "tools/gateway/metrics/latency_histogram.h"

namespace cacheroute::gateway {

// The routed endpoints (metrics label `endpoint`).
enum class Endpoint : uint8_t { kCompletions, kChatCompletions, kModels };

class RequestMetrics {
 public:
  static constexpr int kEndpoints = 3;
  static constexpr int kStatusClasses = 5;  // 1xx … 5xx

  // A routed request answered with `status` after `elapsed`.
  void Answered(Endpoint endpoint, int status, std::chrono::nanoseconds elapsed);
  // A request refused with `status` before routing: every refusal comes through here. Only 401
  // (missing or unknown API key) has a counter so far, unauthorized_total.
  void Refused(int status);
  void StreamOpened() { open_streams_.fetch_add(1, std::memory_order_relaxed); }
  void StreamClosed() { open_streams_.fetch_sub(1, std::memory_order_relaxed); }
  size_t open_streams() const { return open_streams_.load(std::memory_order_relaxed); }

  // requests_total.
  void RenderRequests(base::Exposition& page) const;
  // request_duration_seconds.
  void RenderLatency(base::Exposition& page) const;
  // What the HTTP server knows, rendered with the front end's gauges.
  struct ServerGauges {
    size_t active_requests = 0;
    size_t client_connections = 0;
    bool draining = false;
  };
  // open_streams, active_requests, client_connections, draining, unauthorized_total.
  void RenderServer(base::Exposition& page, const ServerGauges& server) const;

 private:
  std::array<std::atomic<uint64_t>, kEndpoints * kStatusClasses> answered_{};
  LatencyHistogram latency_;
  std::atomic<size_t> open_streams_{0};
  std::atomic<uint64_t> unauthorized_{0};
};

}  // namespace cacheroute::gateway
