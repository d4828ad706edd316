// Gateway: an OpenAI-compatible HTTP reverse proxy in front of a fleet of model servers (vLLM),
// routing each request with the dataplane so that prefix KV caches stay warm. docs/gateway.md has
// the configuration, the operator's view and the design; this is the contract.
//
//   POST /v1/completions, /v1/chat/completions  forwarded unchanged to the chosen upstream;
//                                               streams pass through chunk by chunk
//   GET  /v1/models                             forwarded to any up upstream
//   GET  /metrics, /healthz                     the gateway's own (/healthz: 503 while draining)
//
// Event-driven (http::Server) on io_threads threads; Pick runs on the I/O thread. The routing key
// is the first of `key_from` a request has; responses carry X-CacheRoute-Destination and
// X-CacheRoute-Planned. Slow is not dead: only connect failures, resets before the response
// headers and failed active health checks mark a destination down ("Failures"). Membership
// follows its source (static, upstreams_file, upstreams_dns; "Membership"): indices stay stable,
// the table is re-mapped and the planner told. Served KV hit feeds Router::SetMeasuredHit.
//
// Thread-safety: every public method may be called from any thread.
// Usage:
//   absl::StatusOr<std::unique_ptr<Gateway>> gateway = Gateway::Start(config);
//   … (*gateway)->Drain();   // SIGTERM: /healthz 503, stop accepting, streams finish
//   (*gateway)->Stop();      // also done by the destructor
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
#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "tools/gateway/gateway_config.h"
#include "tools/gateway/openai_fields.h"
#include "tools/http/server.h"

#include <boost/asio/ip/tcp.hpp>

namespace cacheroute::gateway {

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

  // Graceful drain: /healthz answers 503, the listener and idle connections close, requests in
  // progress (streams included) go on. Returns once none is left or after drain_timeout, and
  // says which. Stop() afterwards cuts what is left.
  bool Drain();
  // Stops serving (cutting requests in progress), stops the background threads and sends a last
  // rate report. Idempotent.
  void Stop();

  int port() const { return port_; }
  const GatewayConfig& config() const { return config_; }
  // Index of the upstream named `name`, or kNoDestination.
  uint32_t DestinationIndex(absl::string_view name) const;
  // The current members' names, by destination index.
  std::vector<std::string> DestinationNames() const;
  // Requests in progress, and streams among them.
  size_t active_requests() const { return server_ ? server_->active() : 0; }
  size_t open_streams() const { return open_streams_.load(std::memory_order_relaxed); }

  // Prometheus text exposition of the gateway's counters (what GET /metrics answers).
  std::string RenderMetrics();

  dataplane::RouterStats RouterStats() const { return router_.Stats(clock_.Now()); }
  // The installed table (nullptr before the first).
  std::shared_ptr<const dataplane::RoutingTable> table() const { return router_.table(); }
  std::optional<dataplane::TableSubscriberStats> SubscriberStats() const;
  std::optional<dataplane::RateReporterStats> ReporterStats() const;
  // The served KV hit the Router was last given (cached / prompt tokens, ~last 1,000 responses
  // that reported it); none before the first.
  std::optional<double> measured_hit() const;

  // Upstream error kinds (metrics label `kind`); only kConnect and kReset mark a destination down.
  enum class ErrorKind : uint8_t { kConnect, kReset, kHeaderTimeout, kIdleTimeout, kProtocol };
  static constexpr int kErrorKinds = 5;

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
  struct Pools;    // idle upstream connections per I/O thread and destination
  struct Member;   // one upstream: name, URL, Host header, resolved endpoints
  struct Members;  // an immutable membership snapshot, with the policy built for it
  struct Histogram {
    std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> buckets{};  // +Inf last
    std::atomic<uint64_t> sum_ns{0};
    void Observe(std::chrono::nanoseconds elapsed);
  };

  explicit Gateway(const GatewayConfig& config);
  absl::Status Listen();
  http::asio::awaitable<void> Handle(http::Exchange& x);
  http::asio::awaitable<void> HandleCompletion(http::Exchange& x, Endpoint endpoint);
  http::asio::awaitable<void> HandleModels(http::Exchange& x);
  // What Forward saw of the answer, for the rollout evidence.
  struct Outcome {
    std::optional<double> ttft_seconds;  // to the first body byte of a stream; a unary answer's
                                         // whole time (its client sees nothing before)
    std::optional<Usage> usage;
  };
  // Sends the exchange's request to `d` (`member`) and its answer back, filling `outcome`.
  // Releases `in_flight` at the end.
  http::asio::awaitable<int> Forward(http::Exchange& x, uint32_t d, const Member& member,
                                     dataplane::InFlight in_flight,
                                     std::chrono::steady_clock::time_point start,
                                     Outcome* outcome = nullptr);
  // Adds a finished keyed request to the rollout evidence when the table has a rollout.
  void RecordEvidence(dataplane::Reason reason, int status, const Outcome& outcome);
  // An OpenAI-style error answer; with `destination`, naming it in X-CacheRoute-Destination.
  http::asio::awaitable<void> SendError(http::Exchange& x, int status, absl::string_view message,
                                        absl::string_view type,
                                        absl::string_view destination = "");
  dataplane::InFlight Route(const std::optional<std::string>& key, const Members& members);
  bool Authorized(const http::Request& request) const;

  // Membership. The control snapshot (membership thread, prober, scraper, metrics) and this I/O
  // thread's own copy of it (refreshed when the generation moved; off an I/O thread, the control
  // one). The member routed to as `d`, or null when the index is not (or no longer) known.
  std::shared_ptr<const Members> ControlMembers() const;
  std::shared_ptr<const Members> ThreadMembers();
  static const Member* MemberAt(const Members& members, uint32_t d);
  // Resolves and installs `upstreams` as the membership (control path; serialised).
  absl::Status ApplyMembership(const std::vector<Upstream>& upstreams);
  std::unique_ptr<dataplane::Policy> MakePolicy(uint32_t destinations);
  // Waits up to `timeout` for Stop; true once stopping (the background loops' pause).
  bool WaitForStop(absl::Duration timeout);
  void RunMembership();
  // Reads the dynamic source once; applies it when it changed.
  void PollMembership();
  // Sends the membership to the planner (SetDestinations) when it has not taken it yet.
  void ReportMembership();

  // Marks `d` down (counted, logged with `count_name`=count and the error); once per outage.
  void MarkDown(uint32_t d, const Member& member, absl::string_view count_name, uint32_t count,
                std::string error);
  void RecordSuccess(uint32_t d);
  void RecordError(uint32_t d, const Member& member, ErrorKind kind, absl::string_view error,
                   bool may_mark_down = true);
  void RecordUsage(uint32_t d, bool planned, const Usage& usage);
  void Finish(Endpoint endpoint, int status, std::chrono::steady_clock::time_point start);
  int GetHealth(const Member& member, absl::Duration timeout) const;
  void RunProber();
  // Reads load_metric from every up destination's /metrics into Router::SetLoad.
  void ScrapeLoads();
  void RunLoadScraper();

  const GatewayConfig config_;
  const bool dynamic_membership_;  // upstreams_file or upstreams_dns
  const uint32_t capacity_;        // destinations the Router has room for
  std::vector<std::string> api_keys_;  // sorted; empty: no client authentication
  dataplane::SteadyClock clock_;
  dataplane::SeededRandom random_;
  dataplane::Router router_;
  dataplane::RateRecorder recorder_;
  dataplane::EvidenceRecorder evidence_;  // drained into the rate reports

  mutable std::mutex members_mu_;           // guards members_
  std::shared_ptr<const Members> members_;  // the control snapshot
  std::atomic<uint64_t> members_generation_{0};
  std::vector<std::shared_ptr<const Members>> thread_members_;  // [I/O thread], its own copy
  std::mutex apply_mu_;                     // serialises ApplyMembership
  std::atomic<bool> planner_has_members_{true};  // false: ReportMembership has work
  std::string last_membership_error_;       // membership thread only
  std::unique_ptr<dataplane::TableSubscriber> subscriber_;
  std::unique_ptr<dataplane::RateReporter> reporter_;
  std::unique_ptr<Destination[]> destinations_;

  std::unique_ptr<http::Server> server_;
  std::unique_ptr<Pools> pools_;  // made by Listen, emptied by Stop before server_ goes
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::shared_ptr<dataplane::PlannerChannels> planner_channels_;  // null without a planner
  std::string planner_token_;
  std::thread membership_thread_;  // with a dynamic source or a planner to tell
  std::thread prober_thread_;
  std::thread scraper_thread_;  // with load_scrape_interval > 0
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_

  // Served-hit memory for SetMeasuredHit (an exponential window of ~1,000 responses).
  mutable std::mutex hit_mu_;
  double seen_cached_ = 0;  // guarded by hit_mu_
  double seen_prompt_ = 0;  // guarded by hit_mu_

  // Counters (relaxed atomics: read only by RenderMetrics).
  std::array<std::atomic<uint64_t>, dataplane::kReasonCount + 1> picks_{};
  std::array<std::atomic<uint64_t>, kEndpoints * kStatusClasses> requests_{};
  Histogram latency_;
  std::atomic<size_t> open_streams_{0};
  std::atomic<uint64_t> unauthorized_{0};
};

}  // namespace cacheroute::gateway
