// AdmissionQueue: whether a front end sends a request on now, holds it, or sheds it (answers 429
// with Retry-After), so that an overloaded fleet serves the requests it can within their deadline
// instead of slowing every one down (docs/gateway.md, "Shedding and priority").
//
//   room        FleetRoom: Σ over the up destinations below saturation_kv_usage (their scraped KV
//               cache usage) of max(0, saturation_tokens − Q(d)), Q(d) the
//               queued prefill tokens the dispatch itself counts at d (the Router's token-work
//               ledger plus the other gateways' shared work: DestinationWork::
//               queued_prefill_tokens). A destination is saturated when Q(d) ≥ saturation_tokens;
//               the fleet is saturated for a request when every up destination is (room 0).
//   Offer       a request of `priority` (higher first; < 0 sheddable) arriving now: first the
//               queue is pumped (below); then it is admitted when room is left and no waiter of
//               its priority or higher is queued; a sheddable request (priority < 0) finding the
//               fleet saturated is shed at once (GIE: requests of negative priority are rejected
//               when the pool is saturated); otherwise it waits, FIFO within its priority, if the
//               queue has room; a full queue takes it only by displacing the newest waiter of the
//               lowest priority below its own (that one is shed), else it is shed.
//   Pump        waiters past their deadline (queue_timeout after they arrived) are shed; then
//               waiters are admitted, highest priority first, oldest first, while room lasts, each
//               using its own tokens (at least one) of it.
//
// A queued request's Wake is called exactly once, with kAdmit or kShed and the cause, after the
// queue's lock is released, on the thread that offered or pumped; Withdraw removes a waiter
// without calling it (its client went away), counted as shed with the cause kClientGone. The queue reads no clock: every call is given `now`,
// so that the fleet simulator runs it on simulated time.
//
// Usage:
//   AdmissionQueue queue({.saturation_tokens = 16384, .queue_capacity = 128,
//                         .queue_timeout = 5s, .retry_after = 1s});
//   AdmissionResult r = queue.Offer(priority, tokens, FleetRoom(router, 16384), now,
//                                   [](Verdict v, ShedCause c) { … resume the request … });
//   if (r.verdict == Verdict::kShed) … 429, Retry-After: queue.retry_after_seconds() …
//   … a request's prefill left the queue: queue.Pump(FleetRoom(router, 16384), now);
//
// Thread-safety: every method may be called from any thread (one mutex; Wakes run outside it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/exposition.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/metrics/latency_histogram.h"

namespace cacheroute::frontend {

struct AdmissionOptions {
  // Queued prefill tokens at which a destination is saturated (> 0).
  double saturation_tokens = 16384;
  // The engine's scraped KV cache usage (vLLM's kv_cache_usage_perc, 0..1) at which a destination
  // is saturated too, in (0, 1]: GIE's saturation detector's KV criterion (its default 0.8). A
  // destination whose usage was never scraped reads 0 and is judged by its queued prefill alone.
  double saturation_kv_usage = 0.8;
  // Requests waiting at once, over every priority (0: none wait; a request the fleet has no room
  // for is shed at once).
  uint32_t queue_capacity = 128;
  // How long a request may wait for room before it is shed.
  dataplane::Duration queue_timeout = std::chrono::seconds(5);
  // What a shed request's Retry-After says (rounded up to whole seconds, at least 1).
  dataplane::Duration retry_after = std::chrono::seconds(1);
};

enum class Verdict : uint8_t { kAdmit, kQueued, kShed };

// Why a request was shed.
enum class ShedCause : uint8_t {
  kNone,
  kSheddable,     // priority < 0 and the fleet saturated
  kQueueFull,     // the queue was full of waiters of its priority or higher
  kDisplaced,     // a request of higher priority took its place in a full queue
  kQueueTimeout,  // no room came within queue_timeout
  kClientGone,    // its client went away while it waited (Withdraw)
};
inline constexpr int kShedCauses = 6;
// "sheddable", "queue_full", "displaced", "queue_timeout", "client_gone" ("none" for kNone): the
// metrics' label.
const char* ShedCauseName(ShedCause cause);

// A shed request's 429 is OpenAI's rate-limit error: this type and code.
inline constexpr char kShedErrorType[] = "requests";
inline constexpr char kShedErrorCode[] = "rate_limit_exceeded";
// Its message, naming the cause and the Retry-After.
std::string ShedMessage(ShedCause cause, int retry_after_seconds);
// Its body, in the shape OpenAI's API answers a rate limit with
// ({"error":{"message":…,"type":"requests","param":null,"code":"rate_limit_exceeded"}}).
std::string ShedErrorBody(ShedCause cause, int retry_after_seconds);

struct AdmissionResult {
  Verdict verdict = Verdict::kAdmit;
  ShedCause cause = ShedCause::kNone;  // with kShed
  uint64_t ticket = 0;                 // with kQueued: for Withdraw
};

// The room left in the fleet for prompt tokens before every up destination is saturated (see the
// header comment); 0 when none is up. Reads the Router's ledger summed over its threads and the
// shared remote work: control-path cost, O(destinations × threads).
// A destination at or above `saturation_kv_usage` (AdmissionOptions) leaves no room.
double FleetRoom(const dataplane::Router& router, double saturation_tokens,
                 double saturation_kv_usage = 1.0);

class AdmissionQueue {
 public:
  using Wake = std::function<void(Verdict verdict, ShedCause cause)>;

  explicit AdmissionQueue(const AdmissionOptions& options);
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // A request of `priority` whose prompt is `tokens` (estimated; ≤ 0: counted as 1) arriving at
  // `now` with `room` left in the fleet (FleetRoom). kQueued: `wake` will be called once.
  AdmissionResult Offer(int priority, double tokens, double room, dataplane::Time now, Wake wake);
  // Sheds the waiters whose deadline is ≤ now, then admits waiters while `room` lasts. Returns the
  // waiters admitted.
  size_t Pump(double room, dataplane::Time now);
  // Removes the waiter of `ticket` at `now` without waking it, counted as shed with `cause` (by
  // default kClientGone: its client went away); false when it is no longer queued (already woken,
  // or never queued).
  bool Withdraw(uint64_t ticket, dataplane::Time now,
                ShedCause cause = ShedCause::kClientGone);

  // The earliest deadline of a waiter; none with an empty queue.
  std::optional<dataplane::Time> NextDeadline() const;
  size_t queued() const;
  // Retry-After of a shed request: retry_after in whole seconds, rounded up, at least 1.
  int retry_after_seconds() const;
  const AdmissionOptions& options() const { return options_; }

  // Counts by priority (what the metrics render).
  struct PriorityCounts {
    uint64_t admitted = 0;  // sent on, at once or from the queue
    uint64_t queued = 0;    // ever queued
    uint64_t shed[kShedCauses] = {};
    uint64_t shed_total() const;
  };
  std::map<int, PriorityCounts> Counts() const;

  // admission_admitted_total{priority}, admission_queued_total{priority},
  // admission_shed_total{priority,reason}, admission_queue_length (gauge),
  // admission_queue_seconds (histogram: time waiting, admitted or shed).
  void Render(base::Exposition& page) const;

 private:
  struct Waiter {
    uint64_t ticket = 0;
    double tokens = 1;
    dataplane::Time since{};
    dataplane::Time deadline{};
    Wake wake;
  };
  struct Woken {
    Wake wake;
    Verdict verdict;
    ShedCause cause;
  };
  // Pump's work under mu_; the wakes to call once it is released are appended to `woken`.
  void PumpLocked(double& room, dataplane::Time now, std::deque<Woken>& woken);
  void LeaveLocked(int priority, Waiter& w, Verdict verdict, ShedCause cause, dataplane::Time now,
                   std::deque<Woken>& woken);
  static void Call(std::deque<Woken>& woken);

  const AdmissionOptions options_;
  mutable std::mutex mu_;
  // Waiting requests by priority, highest first; FIFO within one. Guarded by mu_.
  std::map<int, std::deque<Waiter>, std::greater<int>> bands_;
  size_t size_ = 0;          // guarded by mu_
  uint64_t next_ticket_ = 1;  // guarded by mu_
  std::map<int, PriorityCounts> counts_;  // guarded by mu_
  LatencyHistogram waited_;
};

}  // namespace cacheroute::frontend
