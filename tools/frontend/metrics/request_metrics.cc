// See request_metrics.h.
#include "tools/frontend/metrics/request_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cacheroute::frontend {
namespace {

constexpr absl::string_view kEndpointNames[] = {"completions", "chat_completions", "models"};
// By Refusal: the status and the `reason` label.
constexpr int kRefusalStatus[] = {401, 404, 405};
constexpr absl::string_view kRefusalReasons[] = {"unauthorized", "no_route", "method_not_allowed"};

}  // namespace

int StatusOf(Refusal refusal) { return kRefusalStatus[static_cast<int>(refusal)]; }

void RequestMetrics::Answered(Endpoint endpoint, int status, std::chrono::nanoseconds elapsed) {
  const int status_class = std::clamp(status / 100, 1, 5) - 1;
  answered_[static_cast<int>(endpoint) * kStatusClasses + status_class].fetch_add(
      1, std::memory_order_relaxed);
  latency_.Observe(elapsed);
}

void RequestMetrics::Refused(Refusal refusal) {
  refused_[static_cast<int>(refusal)].fetch_add(1, std::memory_order_relaxed);
}

void RequestMetrics::RenderRequests(base::Exposition& page) const {
  page.Family("requests_total", "counter", "Requests answered, by endpoint and status class.");
  for (int e = 0; e < kEndpoints; ++e) {
    for (int c = 0; c < kStatusClasses; ++c) {
      const uint64_t n = answered_[e * kStatusClasses + c].load(std::memory_order_relaxed);
      page.Sample("requests_total", static_cast<double>(n),
                  absl::StrCat("endpoint=\"", kEndpointNames[e], "\",code=\"", c + 1, "xx\""));
    }
  }
}

void RequestMetrics::RenderLatency(base::Exposition& page) const {
  page.Family(
      "request_duration_seconds", "histogram",
      "Time from receiving a request to the end of its response (streams: the last chunk).");
  latency_.Render(page, "request_duration_seconds", "");
}

void RequestMetrics::RenderServer(base::Exposition& page, const ServerGauges& server) const {
  page.Gauge("open_streams", "Streamed answers in progress.", static_cast<double>(open_streams()));
  page.Gauge("active_requests", "Requests in progress.",
             static_cast<double>(server.active_requests));
  page.Gauge("client_connections", "Open client connections.",
             static_cast<double>(server.client_connections));
  page.Gauge("draining", "1 after SIGTERM, while requests in progress finish.",
             server.draining ? 1 : 0);
  page.Family("refusals_total", "counter",
              "Requests refused before routing, by status and reason: the front end's (unknown or "
              "missing API key, unknown path, wrong method) and the HTTP layer's (malformed, body "
              "or header too large).");
  const auto refusal = [&page](int status, absl::string_view reason, uint64_t n) {
    page.Sample("refusals_total", static_cast<double>(n),
                absl::StrCat("status=\"", status, "\",reason=\"", reason, "\""));
  };
  refusal(400, "malformed", server.malformed);
  for (int r = 0; r < kRefusals; ++r) {
    refusal(kRefusalStatus[r], kRefusalReasons[r], refused_[r].load(std::memory_order_relaxed));
  }
  refusal(413, "body_too_large", server.body_too_large);
  refusal(431, "header_too_large", server.header_too_large);
  page.Counter("client_read_timeouts_total",
               "Client connections closed unanswered: a request begun but not read whole within "
               "the read timeout (a slow client).",
               static_cast<double>(server.read_timeouts));
}

}  // namespace cacheroute::frontend
