// RequestLifecycle: one routed request, from its pick to its end, as any front end sees it (the
// HTTP proxy; an endpoint picker that only chooses and watches). RoutingCore::Route makes it; the
// front end tells it what happens, and it feeds every signal that depends on the request:
//
//   FirstToken(streamed)  the first body byte of a stream (time_to_first_token_seconds), or a
//                         whole unary answer (its client sees nothing earlier); the TTFT the
//                         rollout evidence gets; the Router's ledger moves the request from
//                         queued prefill to decoding (InFlight::FirstToken)
//   Usage(usage)          the answer's usage: served KV hit (ServedHit), evidence tokens, the
//                         prompt-token estimate's calibration (PromptEstimate::Observe) and,
//                         with cached tokens, Router::ObserveServed for the request's decision
//                         and the new KV its destination took in (uncached prompt + completion
//                         tokens: its cache turnover, RoutingCore); a keyed request's prompt and
//                         cached tokens in its key's sizes (KeySizes, for the rate reports)
//   UpstreamDone()        the destination's part is over: releases the in-flight count (and
//                         the policy's own, its PolicyTicket) and observes
//                         destination_request_duration_seconds (idempotent); call it
//                         before the last bytes go to the client, who may send the next request
//   Finish(status)        the request is answered: a keyed request's rollout evidence, while
//                         the table has a rollout (5xx counts as failed)
//
// Invariants: each event counts once (a second FirstToken, UpstreamDone or Finish is ignored); a
// request that never reached its upstream (no member, UpstreamDone never called) releases its
// in-flight count when destroyed but observes no duration. Move-only; one thread at a time (the one
// serving the request). Must not outlive its RoutingCore.
#pragma once

#include <cstdint>
#include <optional>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {

class RoutingCore;

class RequestLifecycle {
 public:
  RequestLifecycle(RequestLifecycle&&) = default;
  RequestLifecycle& operator=(RequestLifecycle&&) = default;

  // False when no destination was up (destination() is kNoDestination).
  bool ok() const { return in_flight_.ok(); }
  uint32_t destination() const { return in_flight_.destination(); }
  bool planned() const { return in_flight_.planned(); }
  dataplane::Reason reason() const { return in_flight_.reason(); }
  const dataplane::Decision& decision() const { return in_flight_.decision(); }
  // Whether the request had a routing key (only keyed requests count as rates and evidence).
  bool keyed() const { return key_id_.has_value(); }
  dataplane::Time start() const { return start_; }
  // The prompt tokens the request was routed with (estimated; 0: unknown).
  uint32_t prompt_tokens() const { return in_flight_.prompt_tokens(); }

  void FirstToken(bool streamed);
  void Usage(const frontend::Usage& usage);
  void UpstreamDone();
  void Finish(int status);

 private:
  friend class RoutingCore;
  RequestLifecycle(RoutingCore& core, dataplane::InFlight in_flight, dataplane::Time start,
                   std::optional<uint64_t> key_id, PromptSize prompt_size,
                   dataplane::PolicyTicket ticket = {})
      : core_(&core),
        in_flight_(std::move(in_flight)),
        ticket_(std::move(ticket)),
        start_(start),
        key_id_(key_id),
        prompt_size_(prompt_size) {}

  RoutingCore* core_;
  dataplane::InFlight in_flight_;
  dataplane::PolicyTicket ticket_;  // the policy's count of the request (dynamo-kv's), if any
  dataplane::Time start_;
  std::optional<uint64_t> key_id_;  // the routing key's id; none for a request without a key
  PromptSize prompt_size_;  // what the body showed of the prompt (for the estimate's calibration)
  bool upstream_done_ = false;
  bool finished_ = false;
  std::optional<double> ttft_seconds_;
  std::optional<frontend::Usage> usage_;
};

}  // namespace cacheroute::frontend
