// RoutingCore: the dataplane as a front end embeds it, without any HTTP: the Router, the
// RateRecorder its keyed requests are counted in (drained by PlannerLink's reporter), the rollout
// EvidenceRecorder, the served-hit estimate, the prompt-token estimate, and per destination the
// request durations and time to first token. Route picks a destination for a request and returns
// its RequestLifecycle, through which the front end reports what happens to it.
//
//   key present:  recorded under KeyId(key); `policy` picks (null: Router::Pick, CacheRoute's
//                 table dispatch), counted in picks_total by the decision's reason
//   no key:       power of two choices, not recorded (keyless traffic is not one hot tenant),
//                 counted as picks_total{reason="no_key"}
//
// Every pick carries the request's estimated prompt tokens (PromptEstimate over the input's
// prompt size; 0 when unknown) and its block hashes (to the Router or the policy's Route), and
// the Router's ledger counts it with them (docs/dispatch.md, "What the gateway measures").
//
// What answers teach it (RequestLifecycle::Usage): the served hit, the prompt estimate's
// calibration, the Router's estimates (ObserveServed), the key's sizes, and each destination's
// cache turnover: its KV capacity (Router::kv_capacity) over the rate at which it takes in new KV
// (uncached prompt + completion tokens, decayed over kTurnoverWindow), given to
// Router::SetTurnover, so that a remembered destination is expected cold once it has turned its
// cache over (docs/dispatch.md).
//
// Usage:
//   RoutingCore core({.capacity = 256, .dispatch = …, .table_ttl = 60s}, clock);
//   RoutingInput input = keys.Derive(header, body);
//   RequestLifecycle r = core.Route(input, members->policy.get(), clock.Now());
//   if (!r.ok()) … 503 …;  Send(r.destination()); r.FirstToken(true); … r.UpstreamDone();
//   r.Finish(status);
//
// Thread-safety: Route and the lifecycles run on any request thread without a lock (Router's
// guarantees); the control methods (ResetDestination, the renders) on any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "base/exposition.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/explanation.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/key_sizes.h"
#include "cacheroute/dataplane/placement_outbox.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/metrics/latency_histogram.h"
#include "tools/frontend/routing/key_deriver.h"
#include "tools/frontend/routing/prompt_estimate.h"
#include "tools/frontend/routing/request_lifecycle.h"
#include "tools/frontend/routing/served_hit.h"

namespace cacheroute::frontend {

struct RoutingCoreOptions {
  uint32_t capacity = 0;  // destinations the Router has room for (membership changes within)
  dataplane::DispatchOptions dispatch = {};
  // The Router keeps active tokens in its ledger (RouterOptions::active_tokens): for the policies
  // that read them (PolicyInfo::reads_active_tokens).
  bool active_tokens = false;
  dataplane::Duration table_ttl = std::chrono::seconds(60);
  double external_load_weight = 1.0;
  uint64_t seed = 0;  // of the policies' and fallbacks' randomness
  dataplane::RateRecorderOptions recorder = {};
  // Whether answers measure each destination's cache turnover (false: the dispatch's
  // default_turnover throughout).
  bool measure_turnover = true;
  // Collect what the table policies' picks make known to the rest of the fleet (a PlacementOutbox
  // the Router offers to; drained by the planner link to share with the other gateways), with
  // these options. Off: nothing is collected.
  bool share_placements = false;
  dataplane::PlacementOutboxOptions placement_outbox{};
};

class RoutingCore {
 public:
  RoutingCore(const RoutingCoreOptions& options, const dataplane::Clock& clock);
  RoutingCore(const RoutingCore&) = delete;
  RoutingCore& operator=(const RoutingCore&) = delete;

  // A routed request with `input.key` (none: power of two choices) and its prompt, picked by
  // `policy` (null: Router::Pick), received at `start`.
  RequestLifecycle Route(const RoutingInput& input, dataplane::Policy* policy,
                         dataplane::Time start) {
    return Route(input.key.has_value() ? std::optional(dataplane::KeyId(*input.key)) : std::nullopt,
                 input.prompt, input.block_hashes, policy, start);
  }
  // The same with the key's id (dataplane::KeyId of the key; none: no key), for a caller that
  // has it instead of the key (the fleet simulator's requests).
  RequestLifecycle Route(std::optional<uint64_t> key_id, const PromptSize& prompt,
                         std::span<const uint64_t> block_hashes, dataplane::Policy* policy,
                         dataplane::Time start);
  // The same with a key and nothing known of the prompt.
  RequestLifecycle Route(const std::optional<std::string>& key, dataplane::Policy* policy,
                         dataplane::Time start) {
    RoutingInput input;
    input.key = key;
    return Route(input, policy, start);
  }
  // Why a request with this key and prompt would go where it would under the table policies'
  // rule (Router::Explain), routing nothing: no count, rate, memory or ledger changes; the random
  // candidate is drawn from the Router's Random as a pick would. *prompt_tokens: the prompt's
  // estimate the rule saw.
  dataplane::Explanation Explain(uint64_t key_id, const PromptSize& prompt,
                                 std::span<const uint64_t> block_hashes, uint32_t* prompt_tokens);
  // A request any up destination can answer (GET /v1/models): a random one, not counted in
  // picks_total.
  RequestLifecycle RouteAny(dataplane::Time start);
  // `routed`, sent to the up destination `d` instead, under a constraint its policy does not know
  // (an endpoint picker's caller may name the endpoints it allows): the in-flight count moves to
  // d; the key, its rate count and its pick reason stay as Route made them.
  RequestLifecycle Redirect(RequestLifecycle routed, uint32_t d);

  dataplane::Router& router() { return router_; }
  // The placements to share (null unless RoutingCoreOptions::share_placements).
  dataplane::PlacementOutbox* placement_outbox() { return outbox_.get(); }
  const dataplane::Router& router() const { return router_; }
  dataplane::RateRecorder& recorder() { return recorder_; }
  dataplane::EvidenceRecorder& evidence() { return evidence_; }
  // Keyed requests' prompts (block hashes) and answered prompt and cached tokens, for the rate
  // reports' sizes.
  const dataplane::KeySizes& key_sizes() const { return key_sizes_; }
  dataplane::Random& random() { return random_; }
  const dataplane::Clock& clock() const { return clock_; }
  PromptEstimate& prompt_estimate() { return prompt_estimate_; }
  const PromptEstimate& prompt_estimate() const { return prompt_estimate_; }
  ServedHit& served_hit() { return served_hit_; }
  const ServedHit& served_hit() const { return served_hit_; }
  dataplane::RouterStats Stats() const { return router_.Stats(clock_.Now()); }
  // Whether any destination is routed to.
  bool AnyUp() const;

  // A new member at `d`: its durations, served tokens and cache intake start from zero (health
  // and load are DestinationHealth's and LoadScraper's).
  void ResetDestination(uint32_t d);

  // The cache turnover last given to the Router for `d` (none before its KV capacity and intake
  // were known).
  std::optional<dataplane::Duration> measured_turnover(uint32_t d) const;

  // The window over which a destination's intake of new KV tokens is averaged (its decay).
  static constexpr double kTurnoverWindowSeconds = 60;
  // The longest turnover given to the Router: a day.
  static constexpr double kMaxTurnoverSeconds = 86400;

  // picks_total, table_version, table_age_seconds, table_stale.
  void RenderPicks(base::Exposition& page, const dataplane::RouterStats& stats) const;
  // in_flight, destination_up for [0, labels.size()).
  void RenderLoads(base::Exposition& page, const dataplane::RouterStats& stats,
                   std::span<const std::string> labels) const;
  // destination_request_duration_seconds, time_to_first_token_seconds.
  void RenderLatency(base::Exposition& page, std::span<const std::string> labels) const;

 private:
  friend class RequestLifecycle;
  // Picks by dataplane::Reason, plus one for requests without a key.
  static constexpr int kNoKeyPick = dataplane::kReasonCount;
  struct DestinationLatency {
    LatencyHistogram ttft;      // streams: request received → first body byte
    LatencyHistogram duration;  // request received → the upstream's part over
  };
  // A destination's intake of new KV tokens per second, decayed over kTurnoverWindowSeconds.
  struct Intake {
    mutable std::mutex mu;
    double tokens_per_s = 0;  // guarded by mu
    double last_s = 0;        // guarded by mu: when it was last updated (the clock's seconds)
    std::optional<dataplane::Duration> turnover;  // guarded by mu: last given to the Router
  };

  // `tokens` of new KV (uncached prompt + completion) taken in by `d` now: updates its intake and
  // gives the Router its turnover when its KV capacity is known.
  void ObserveIntake(uint32_t d, double tokens);

  const dataplane::Clock& clock_;
  dataplane::SeededRandom random_;
  std::unique_ptr<dataplane::PlacementOutbox> outbox_;  // before router_, which offers to it
  dataplane::Router router_;
  dataplane::RateRecorder recorder_;
  dataplane::EvidenceRecorder evidence_;
  dataplane::KeySizes key_sizes_;
  ServedHit served_hit_;
  PromptEstimate prompt_estimate_;
  std::unique_ptr<DestinationLatency[]> latency_;
  const bool measure_turnover_;
  std::unique_ptr<Intake[]> intake_;
  std::array<std::atomic<uint64_t>, dataplane::kReasonCount + 1> picks_{};
};

}  // namespace cacheroute::frontend
