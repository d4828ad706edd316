// InFlight: the token of one request a Router counted in flight (Router::Pick, Router::Track).
// Holding it counts the request at its destination; destroying it (or Release) ends that. With the
// token-work rule it also counts the request in its destination's ledger: its expected uncached
// prompt tokens as queued prefill until FirstToken, then as one decoding request until released
// (and its prompt tokens as active tokens throughout, when the Router keeps them).
//
// Invariants: movable, not copyable; each token counts one release, once, in the shard of the
// thread that releases it (any thread may); a token must not outlive its Router.
//
// Usage:
//   InFlight request = router.Pick(KeyId("tenant-7"), now);   // keep it until the response ends
//   Send(request.destination());
//   request.FirstToken();                                      // on the first streamed chunk
#pragma once

#include <cstdint>
#include <utility>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/shard_ledger.h"

namespace cacheroute::dataplane {

class Router;

class InFlight {
 public:
  InFlight() = default;
  InFlight(InFlight&& other) noexcept
      : ledger_(std::exchange(other.ledger_, nullptr)),
        decision_(other.decision_),
        prompt_tokens_(other.prompt_tokens_),
        state_(std::exchange(other.state_, LedgerState::kNone)) {}
  InFlight& operator=(InFlight&& other) noexcept {
    if (this != &other) {
      Release();
      ledger_ = std::exchange(other.ledger_, nullptr);
      decision_ = other.decision_;
      prompt_tokens_ = other.prompt_tokens_;
      state_ = std::exchange(other.state_, LedgerState::kNone);
    }
    return *this;
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { Release(); }

  // False when no destination was up; destination() is then kNoDestination.
  bool ok() const { return decision_.destination != kNoDestination; }
  uint32_t destination() const { return decision_.destination; }
  bool planned() const { return decision_.planned; }
  Reason reason() const { return decision_.reason; }
  const Decision& decision() const { return decision_; }
  uint32_t prompt_tokens() const { return prompt_tokens_; }

  // The first token arrived (the first streamed chunk, or the response of a non-streaming
  // request): the request's prefill leaves the destination's queued work and it counts as
  // decoding. Idempotent; nothing after Release.
  void FirstToken() {
    if (ledger_ != nullptr && state_ == LedgerState::kPrefill) {
      ledger_->CountFirstToken(decision_, prompt_tokens_);
      state_ = LedgerState::kDecode;
    }
  }

  // Ends the request early (idempotent). Any thread may release: it counts the release in its own
  // shard of the Router.
  void Release() {
    if (ledger_ != nullptr) {
      ledger_->CountRelease(decision_, prompt_tokens_, state_);
      state_ = LedgerState::kNone;
      ledger_ = nullptr;
    }
  }

 private:
  friend class Router;
  InFlight(ShardLedger* ledger, Decision decision, uint32_t prompt_tokens, LedgerState state)
      : ledger_(ledger), decision_(decision), prompt_tokens_(prompt_tokens), state_(state) {}

  ShardLedger* ledger_ = nullptr;  // null once released, or when nothing was counted
  Decision decision_;
  uint32_t prompt_tokens_ = 0;
  LedgerState state_ = LedgerState::kNone;  // where the request counts in the token-work ledger
};

}  // namespace cacheroute::dataplane
