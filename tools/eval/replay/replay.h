// The core of cacheroute-replay (docs/replay.md): what to send, where, and what came back, with no
// I/O of its own, so routing and reporting are testable without a network.
//
//   LoadReplayWorkload  a generator JSONL or Mooncake trace, rescaled (--speedup / --qps) and
//   capped
//                       (--duration), arrivals shifted to start at 0
//   Dispatcher          routes a request to one of R engines with a SHIPPED dataplane policy
//                       (dataplane/include/cacheroute/dataplane/policy_registry.h), the same
//                       code the fleet simulator runs, over the replay's own view of its requests
//                       (in flight, and their token work: queued prefill until the first token,
//                       then decoding); for "cacheroute" (and "cacheroute-paper", Algorithm 1
//                       with the paper's dispatch) through a Router holding a plan built
//                       offline from the workload's key rates (planner/algorithm.h)
//   BuildReport         requests, failures by kind, TTFT and latency percentiles, served
//                       token-weighted KV hit (Σ cached / Σ prompt over successes), and per
//                       destination the requests and prefill work with their imbalance (max/mean);
//                       requests a front end shed (429) apart from the failures, with the time
//                       to their 429; with an SLO, goodput (successes with TTFT ≤ SLO per second)
//
// Usage:
//   absl::StatusOr<Workload> w = LoadReplayWorkload(path, load_options);
//   absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(routing, *w);
//   Dispatcher::Ticket t = (*d)->Pick(request, w->block_size);  ... send to t.destination
//   (*d)->FirstToken(t);  ...  (*d)->Done(t, &outcome);
//   ReplayReport report = BuildReport(outcomes, destination_names, wall_seconds, slo_seconds);
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::replay {

struct LoadOptions {
  std::optional<uint32_t> key_blocks;  // Mooncake traces: key = first N hash ids
  double speedup = 1.0;                // > 0: arrival times divided by it
  double qps = 0;                      // > 0: arrival times rescaled to this rate (after speedup)
  double duration_s = 0;               // > 0: requests arriving at or after it are dropped
};

absl::StatusOr<workload::Workload> LoadReplayWorkload(const std::string& path,
                                                      const LoadOptions& options);

struct RoutingOptions {
  // A name of cacheroute/dataplane/policy_registry.h (BuiltinPolicies; "flatlb" for "flat-lb").
  std::string policy = "flat-lb";
  uint32_t destinations = 0;
  uint64_t seed = 1;
  // cacheroute only: the plan's per-assignment load cap (requests/s; 0: total rate / R, a
  // destination's fair share) and warm slots per destination.
  double q_cap = 0;
  uint64_t slots_per_destination = 64;
};

// What the offline plan looks like, for the report.
struct PlanSummary {
  uint64_t keys = 0;
  uint64_t admitted_keys = 0;
  double q_cap = 0;
  double admitted_rate_share = 0;  // admitted rate / total rate
  double imbalance = 1;            // the plan's expected max/mean load
};

struct Outcome;

// Routes requests. Pick and Done are thread-safe (the dataplane's guarantees).
class Dispatcher {
 public:
  // InvalidArgument naming the policy or field; for "cacheroute" the plan is built from
  // `workload`'s per-key request rates over its time span.
  static absl::StatusOr<std::unique_ptr<Dispatcher>> Create(const RoutingOptions& options,
                                                            const workload::Workload& workload);

  // One routed request: where it went, and what the dispatcher counts for it until Done.
  struct Ticket {
    uint32_t destination = dataplane::kNoDestination;
    dataplane::Decision decision;
    uint32_t prompt_tokens = 0;
    bool first_token = false;
    bool done = false;
  };
  // Routes `request` (its key, prompt length and prompt block hashes, from its hash ids of
  // `block_size` tokens) and counts it in flight at the destination until Done. Its destination is
  // kNoDestination when every destination is down.
  Ticket Pick(const workload::Request& request, uint32_t block_size);
  // The request's first token arrived: its prefill leaves the destination's queued work and it
  // counts as decoding. Idempotent.
  void FirstToken(Ticket& ticket);
  // The request ended; `served` (optional) carries the engine's usage, which the CacheRoute router
  // learns its template and yield estimates from. Idempotent.
  void Done(Ticket& ticket, const Outcome* served = nullptr);

  const std::optional<PlanSummary>& plan() const { return plan_; }
  std::string_view policy_name() const { return policy_->name(); }

 private:
  // The replay's requests per destination: in flight, and their token work (policies.h's
  // LoadView). Written by the sending threads with atomic adds.
  class InFlightView final : public dataplane::LoadView {
   public:
    explicit InFlightView(uint32_t n)
        : in_flight_(n), up_(n), queued_(n), prefilling_(n), decoding_(n), active_(n) {
      for (auto& u : up_) u.store(true);
    }
    uint32_t size() const override { return static_cast<uint32_t>(in_flight_.size()); }
    double Load(uint32_t d) const override {
      return static_cast<double>(in_flight_[d].load(std::memory_order_relaxed));
    }
    bool Up(uint32_t d) const override { return up_[d].load(std::memory_order_relaxed); }
    bool HasWork() const override { return true; }
    dataplane::DestinationWork Work(uint32_t d) const override {
      auto get = [](const std::atomic<int64_t>& v) {
        return static_cast<double>(std::max<int64_t>(0, v.load(std::memory_order_relaxed)));
      };
      return {.queued_prefill_tokens = get(queued_[d]),
              .prefilling = get(prefilling_[d]),
              .decoding = get(decoding_[d]),
              .active_tokens = get(active_[d])};
    }
    std::vector<std::atomic<int64_t>> in_flight_;
    std::vector<std::atomic<bool>> up_;
    std::vector<std::atomic<int64_t>> queued_, prefilling_, decoding_, active_;
  };
  int64_t QueuedTokens(const Ticket& t) const {
    return t.decision.expected_uncached_tokens > 0 ? t.decision.expected_uncached_tokens
                                                   : t.prompt_tokens;
  }

  explicit Dispatcher(const RoutingOptions& options);
  // A table policy's plan, built from `workload`'s key rates, in router_.
  absl::StatusOr<PlanSummary> InstallOfflinePlan(const RoutingOptions& options,
                                                 const dataplane::PolicyInfo& policy,
                                                 const workload::Workload& workload);

  dataplane::SeededRandom random_;
  dataplane::SteadyClock clock_;
  InFlightView view_;
  std::unique_ptr<dataplane::Router> router_;  // cacheroute only: holds the plan's table
  std::unique_ptr<dataplane::Policy> policy_;
  std::optional<PlanSummary> plan_;
};

enum class OutcomeKind : uint8_t {
  kOk,
  kHttpError,       // a non-2xx status, or an error event inside a stream
  kConnectError,    // could not connect (engine down)
  kTimeout,         // no complete response within --timeout
  kTransportError,  // connection dropped, malformed response
  kRejected,        // not sent: --concurrency requests were already open
  kShed,            // 429 from the front end (shed, docs/gateway.md "Shedding and priority"):
                    // counted apart from the failures
};
inline constexpr int kOutcomeKinds = 7;
const char* OutcomeName(OutcomeKind kind);

struct Outcome {
  OutcomeKind kind = OutcomeKind::kOk;
  uint32_t destination = dataplane::kNoDestination;  // index into the targets
  int http_status = 0;
  double ttft_s = 0;     // first SSE data chunk (stream), else the whole response
  double latency_s = 0;  // until the response ended
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t completion_tokens = 0;
  // Through a gateway: its X-CacheRoute-Destination and X-CacheRoute-Planned response headers.
  std::string via;
  bool planned = false;
};

struct DestinationReport {
  std::string name;
  uint64_t requests = 0;  // sent there
  uint64_t succeeded = 0;
  uint64_t prompt_tokens = 0;  // of successes
  uint64_t cached_tokens = 0;
  uint64_t prefill_tokens = 0;  // prompt − cached: the prefill work it did
};

struct ReplayReport {
  uint64_t requests = 0;  // succeeded + shed + failed
  uint64_t succeeded = 0;
  uint64_t failed = 0;  // every kind but kOk and kShed
  uint64_t by_kind[kOutcomeKinds] = {};
  // Answered 429 (kShed), and the time from sending to the 429, p50 and p99.
  uint64_t shed = 0;
  double shed_latency_p50_s = 0, shed_latency_p99_s = 0;
  // With an SLO (slo_s > 0): successes whose TTFT ≤ slo_s, and they per second of wall_s.
  double slo_s = 0;
  uint64_t within_slo = 0;
  double goodput = 0;
  double wall_s = 0;
  double ttft_p50_s = 0, ttft_p99_s = 0;
  double latency_p50_s = 0, latency_p99_s = 0;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  double kv_hit = 0;  // cached / prompt over successes
  // When the replay routed itself, its targets; through a gateway, the destinations the gateway
  // named in X-CacheRoute-Destination (sorted by name); else empty.
  std::vector<DestinationReport> destinations;
  uint64_t planned = 0;          // successes the gateway said were routed by its table
  double request_imbalance = 0;  // max/mean requests over destinations
  double prefill_imbalance = 0;  // max/mean prefill tokens
  std::string policy;
  std::optional<PlanSummary> plan;
};

// `destinations` names the targets when the replay routed itself, else empty. `slo_s` > 0: the
// TTFT bound goodput counts successes within (0: no goodput).
ReplayReport BuildReport(const std::vector<Outcome>& outcomes,
                         const std::vector<std::string>& destinations, double wall_s,
                         double slo_s = 0);

// Nearest-rank percentile (p in (0, 100]) of `values` (sorted in place); 0 when empty.
double Percentile(std::vector<double>& values, double p);

std::string FormatReportTable(const ReplayReport& report);
std::string FormatReportJson(const ReplayReport& report);

}  // namespace cacheroute::replay
