// RequestMetrics and LatencyHistogram (tools/frontend/metrics/): the front end's counters and
// the histogram every duration family uses, as the /metrics page shows them.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "tools/frontend/metrics/latency_histogram.h"
#include "tools/frontend/metrics/request_metrics.h"

namespace cacheroute::frontend {
namespace {

using std::chrono::milliseconds;

bool Has(const std::string& page, const std::string& line) {
  return absl::StrContains(page, line + "\n");
}

TEST_CASE("LatencyHistogram: cumulative buckets, +Inf, sum and count; Reset zeroes it") {
  LatencyHistogram h;
  h.Observe(milliseconds(1));            // on the 0.001 bound: in it
  h.Observe(milliseconds(7));            // 0.01
  h.Observe(std::chrono::seconds(400));  // past 300: +Inf only
  base::Exposition page("g_");
  h.Render(page, "d", "x=\"1\"");
  const std::string text = page.Take();
  CHECK(Has(text, "g_d_bucket{x=\"1\",le=\"0.0005\"} 0"));
  CHECK(Has(text, "g_d_bucket{x=\"1\",le=\"0.001\"} 1"));
  CHECK(Has(text, "g_d_bucket{x=\"1\",le=\"0.01\"} 2"));
  CHECK(Has(text, "g_d_bucket{x=\"1\",le=\"300\"} 2"));
  CHECK(Has(text, "g_d_bucket{x=\"1\",le=\"+Inf\"} 3"));
  CHECK(Has(text, "g_d_sum{x=\"1\"} 400.00800000000004"));
  CHECK(Has(text, "g_d_count{x=\"1\"} 3"));
  h.Reset();
  base::Exposition again("g_");
  h.Render(again, "d", "");
  const std::string zero = again.Take();
  CHECK(Has(zero, "g_d_count 0"));
  CHECK(Has(zero, "g_d_sum 0"));
}

TEST_CASE("requests answered by endpoint and status class, with their duration") {
  RequestMetrics m;
  m.Answered(Endpoint::kCompletions, 200, milliseconds(2));
  m.Answered(Endpoint::kCompletions, 204, milliseconds(2));
  m.Answered(Endpoint::kChatCompletions, 502, milliseconds(2));
  m.Answered(Endpoint::kModels, 99, milliseconds(2));   // below 1xx: counted as 1xx
  m.Answered(Endpoint::kModels, 600, milliseconds(2));  // past 5xx: counted as 5xx
  base::Exposition page("g_");
  m.RenderRequests(page);
  m.RenderLatency(page);
  const std::string text = page.Take();
  CHECK(Has(text, "g_requests_total{endpoint=\"completions\",code=\"2xx\"} 2"));
  CHECK(Has(text, "g_requests_total{endpoint=\"chat_completions\",code=\"5xx\"} 1"));
  CHECK(Has(text, "g_requests_total{endpoint=\"models\",code=\"1xx\"} 1"));
  CHECK(Has(text, "g_requests_total{endpoint=\"models\",code=\"5xx\"} 1"));
  CHECK(Has(text, "g_requests_total{endpoint=\"completions\",code=\"4xx\"} 0"));
  CHECK(Has(text, "g_request_duration_seconds_count 5"));
}

TEST_CASE("refusals, open streams and the server's gauges") {
  RequestMetrics m;
  m.Refused(Refusal::kUnauthorized);
  m.Refused(Refusal::kUnauthorized);
  m.Refused(Refusal::kNoRoute);
  m.Refused(Refusal::kMethodNotAllowed);
  CHECK(StatusOf(Refusal::kUnauthorized) == 401);
  CHECK(StatusOf(Refusal::kNoRoute) == 404);
  CHECK(StatusOf(Refusal::kMethodNotAllowed) == 405);
  m.StreamOpened();
  m.StreamOpened();
  m.StreamClosed();
  CHECK(m.open_streams() == 1);
  base::Exposition page("g_");
  m.RenderServer(page, {.active_requests = 3,
                        .client_connections = 4,
                        .draining = true,
                        .malformed = 5,
                        .body_too_large = 6,
                        .header_too_large = 7,
                        .read_timeouts = 8});
  const std::string text = page.Take();
  CHECK(Has(text, "g_refusals_total{status=\"400\",reason=\"malformed\"} 5"));
  CHECK(Has(text, "g_refusals_total{status=\"401\",reason=\"unauthorized\"} 2"));
  CHECK(Has(text, "g_refusals_total{status=\"404\",reason=\"no_route\"} 1"));
  CHECK(Has(text, "g_refusals_total{status=\"405\",reason=\"method_not_allowed\"} 1"));
  CHECK(Has(text, "g_refusals_total{status=\"413\",reason=\"body_too_large\"} 6"));
  CHECK(Has(text, "g_refusals_total{status=\"431\",reason=\"header_too_large\"} 7"));
  CHECK(Has(text, "g_client_read_timeouts_total 8"));
  CHECK(Has(text, "g_open_streams 1"));
  CHECK(Has(text, "g_active_requests 3"));
  CHECK(Has(text, "g_client_connections 4"));
  CHECK(Has(text, "g_draining 1"));
}

}  // namespace
}  // namespace cacheroute::frontend
