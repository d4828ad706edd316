// Gateway: an OpenAI-compatible HTTP reverse proxy in front of a fleet of model servers (vLLM),
// routing each request with the dataplane (paper §3.1) so that prefix KV caches stay warm.
//
//   POST /v1/completions, /v1/chat/completions  forwarded unchanged to the chosen upstream; with
//                                               "stream": true the SSE chunks pass through as
//                                               they arrive
//   GET  /v1/models                             forwarded to any up upstream
//   GET  /metrics, /healthz                     the gateway's own
//
// Routing. The key is the `key_header` request header, else the body's `user` field. A keyed
// request is counted in the RateRecorder (whatever the policy, so the planner learns rates in A/B
// runs too) and routed by the policy: `cacheroute` through Router::Pick (the planner's table,
// kept current by a TableSubscriber), the others by Policy::Pick over the Router's loads and
// counted in flight with Router::Track. A request without a key goes to power of two choices and
// is not counted in rates: a shared "" key would look like one hot tenant to the planner, which
// would spend warm slots on traffic that has no prefix in common. Every response carries
// `X-CacheRoute-Destination: <name>` and `X-CacheRoute-Planned: 0|1`. A request is in flight at
// its destination until its response (or its stream) ends.
//
// Failures. A connection failure or timeout towards an upstream answers 502 with an OpenAI-style
// error body naming the upstream (no retry elsewhere: the request may have started generating).
// After `failure_threshold` consecutive such failures the destination is marked down in the
// Router, and a prober GETs its /health every `probe_interval` until a 200 marks it up again.
// HTTP error statuses from the upstream (4xx, 5xx) are passed through and are not failures.
//
// Engine-reported load (GatewayConfig::load_scrape_interval, off by default): a scraper thread
// reads each up upstream's `load_metric` (vllm:num_requests_waiting) from its /metrics and passes
// it to Router::SetLoad, so every policy sees in_flight + external_load_weight * queue. It is what
// lets several gateways see each other's traffic on an engine.
//
// Threads: httplib's worker pool serves requests (one connection each); one thread per active
// stream reads the upstream; the prober; the load scraper; the subscriber's and the reporter's
// own threads.
//
// Usage:
//   absl::StatusOr<std::unique_ptr<Gateway>> gateway = Gateway::Start(config);
//   std::cout << "port " << (*gateway)->port();
//   ...
//   (*gateway)->Stop();   // also done by the destructor
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "tools/gateway/gateway_config.h"

namespace httplib {
class Client;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace cacheroute::gateway {

// The two fields of an OpenAI request body the gateway reads. A body that is not a JSON object
// yields neither (the request is forwarded all the same; the upstream answers it).
struct RequestFields {
  std::optional<std::string> user;  // a top-level string "user"
  bool stream = false;              // a top-level "stream": true
};
RequestFields ScanRequestFields(absl::string_view body);

// `{"error":{"message":…,"type":…,"param":null,"code":…}}`, as the OpenAI API and vLLM answer.
std::string ErrorBody(absl::string_view message, absl::string_view type, int code);

class Gateway {
 public:
  // Binds the listen address and starts serving, the prober and, with a planner, the table
  // subscriber and the rate reporter. `config` must pass ValidateGatewayConfig.
  static absl::StatusOr<std::unique_ptr<Gateway>> Start(const GatewayConfig& config);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Stops accepting, waits for requests in progress, stops the background threads and sends a
  // last rate report. Idempotent.
  void Stop();

  int port() const { return port_; }
  const GatewayConfig& config() const { return config_; }
  // Index of the upstream named `name`, or kNoDestination.
  uint32_t DestinationIndex(absl::string_view name) const;

  // Prometheus text exposition of the gateway's counters (what GET /metrics answers).
  std::string RenderMetrics();

  dataplane::RouterStats RouterStats() const { return router_.Stats(clock_.Now()); }
  // The installed table (nullptr before the first).
  std::shared_ptr<const dataplane::RoutingTable> table() const { return router_.table(); }
  std::optional<dataplane::TableSubscriberStats> SubscriberStats() const;
  std::optional<dataplane::RateReporterStats> ReporterStats() const;

 private:
  enum class Endpoint : uint8_t { kCompletions, kChatCompletions, kModels };
  static constexpr int kEndpoints = 3;
  static constexpr int kStatusClasses = 5;  // 1xx … 5xx
  // Picks by dataplane::Reason, plus one for requests without a key.
  static constexpr int kNoKeyPick = dataplane::kReasonCount;
  static constexpr std::array<double, 18> kLatencyBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
      0.5,    1,     2.5,    5,     10,   30,    60,   120, 300};

  struct Destination;
  struct Stream;

  explicit Gateway(const GatewayConfig& config);
  absl::Status Listen();
  void HandleCompletion(const httplib::Request& request, httplib::Response& response,
                        Endpoint endpoint);
  void HandleModels(const httplib::Request& request, httplib::Response& response);
  // Sends `request` to destination `d` and copies the answer into `response`; false (and a 502)
  // when the upstream could not be reached.
  bool ForwardUnary(uint32_t d, const httplib::Request& request, httplib::Response& response);
  // Starts the upstream request on a thread of its own and, once the upstream's status line and
  // headers have arrived, makes `response` a chunked stream of its body. The in-flight token and
  // the latency measurement end with the stream.
  void ForwardStream(uint32_t d, const httplib::Request& request, httplib::Response& response,
                     dataplane::InFlight in_flight, Endpoint endpoint,
                     std::chrono::steady_clock::time_point start);
  dataplane::InFlight Route(const std::optional<std::string>& key);

  std::unique_ptr<httplib::Client> AcquireClient(uint32_t d);
  void ReleaseClient(uint32_t d, std::unique_ptr<httplib::Client> client);
  void RecordSuccess(uint32_t d);
  void RecordFailure(uint32_t d, absl::string_view error);
  void Finish(Endpoint endpoint, int status, std::chrono::steady_clock::time_point start);
  void RunProber();
  // Reads load_metric from every up destination's /metrics into Router::SetLoad.
  void ScrapeLoads();
  void RunLoadScraper();

  const GatewayConfig config_;
  std::vector<UpstreamAddress> addresses_;
  dataplane::SteadyClock clock_;
  dataplane::SeededRandom random_;
  dataplane::Router router_;
  std::unique_ptr<dataplane::Policy> policy_;  // null for `cacheroute`: Router::Pick
  dataplane::RateRecorder recorder_;
  std::unique_ptr<dataplane::TableSubscriber> subscriber_;
  std::unique_ptr<dataplane::RateReporter> reporter_;
  std::unique_ptr<Destination[]> destinations_;

  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread server_thread_;
  std::thread prober_thread_;
  std::thread scraper_thread_;  // with load_scrape_interval > 0
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_

  // Counters (relaxed atomics: read only by RenderMetrics).
  std::array<std::atomic<uint64_t>, dataplane::kReasonCount + 1> picks_{};
  std::array<std::atomic<uint64_t>, kEndpoints * kStatusClasses> requests_{};
  std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> latency_buckets_{};  // +Inf last
  std::atomic<uint64_t> latency_sum_ns_{0};
};

}  // namespace cacheroute::gateway
