// What a Router knows of each destination besides its own counts, and the LoadView it gives the
// policies (docs/dataplane.md, "Load signal").
//
// DestinationSignals: what the control path sets per destination (health, the externally reported
// load, the engine's KV usage and capacity, how long its cache keeps what it was sent), each a
// relaxed atomic that request threads read and never write. The setters validate their input and
// name the destination and the value in their error.
//
// RouterLoads: the Router's own LoadView (Router::loads()): load(d) = in_flight(d) as the calling
// thread sees it (ShardLedger::InFlightSeen) + external_load_weight · external(d); Work(d) the
// token-work ledger; Scraped(d) the external load as the waiting queue and the KV usage. It is
// final, so that the rules, called with it by its type, read it without the vtable; Load(shard, d)
// reads it for a thread whose shard the caller already has.
//
// Usage:
//   DestinationSignals signals(/*capacity=*/30, std::chrono::seconds(60));
//   Status s = signals.SetKvCapacity(3, 1e6);   // an error names the destination and the value
//   RouterLoads loads(ledger, signals, count, /*external_load_weight=*/1.0);
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/hot_path.h"
#include "cacheroute/dataplane/shard_ledger.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

class DestinationSignals {
 public:
  // Every destination starts up, with no external load, no KV usage or capacity, and
  // `default_turnover`.
  DestinationSignals(uint32_t capacity, Duration default_turnover)
      : capacity_(capacity), health_(new Health[capacity]) {
    for (uint32_t d = 0; d < capacity_; ++d) {
      health_[d].turnover.store(default_turnover.count(), std::memory_order_relaxed);
    }
  }

  uint32_t capacity() const { return capacity_; }

  Status SetUp(uint32_t destination, bool up) {
    if (destination >= capacity_) return UnknownDestination(destination);
    health_[destination].up.store(up, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status SetLoad(uint32_t destination, double value) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(value >= 0) || value == std::numeric_limits<double>::infinity()) {
      return Status::Error("load " + std::to_string(value) + " for destination " +
                           std::to_string(destination) + " is not a finite non-negative number");
    }
    health_[destination].external.store(value, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status SetKvUsage(uint32_t destination, double usage) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(usage >= 0 && usage <= 1)) {
      return Status::Error("KV usage " + std::to_string(usage) + " for destination " +
                           std::to_string(destination) + " is not in [0, 1]");
    }
    health_[destination].kv_usage.store(usage, std::memory_order_relaxed);
    return Status::Ok();
  }

  // 0 tokens: unknown.
  Status SetKvCapacity(uint32_t destination, double tokens) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(tokens >= 0) || tokens == std::numeric_limits<double>::infinity()) {
      return Status::Error("KV capacity " + std::to_string(tokens) + " tokens for destination " +
                           std::to_string(destination) + " is not a finite number >= 0");
    }
    const double old = health_[destination].kv_capacity.exchange(tokens, std::memory_order_relaxed);
    if ((old > 0) != (tokens > 0)) {
      // Each exchange sees the value before it, so the count follows every transition.
      if (tokens > 0) {
        kv_known_.fetch_add(1, std::memory_order_relaxed);
      } else {
        kv_known_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    return Status::Ok();
  }

  Status SetTurnover(uint32_t destination, Duration turnover) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (turnover < Duration::zero()) {
      return Status::Error("turnover for destination " + std::to_string(destination) +
                           " is negative");
    }
    health_[destination].turnover.store(turnover.count(), std::memory_order_relaxed);
    return Status::Ok();
  }

  // Reads of `d` < capacity(): one relaxed load each.
  bool up(uint32_t d) const { return health_[d].up.load(std::memory_order_relaxed); }
  double external(uint32_t d) const { return health_[d].external.load(std::memory_order_relaxed); }
  double kv_usage(uint32_t d) const { return health_[d].kv_usage.load(std::memory_order_relaxed); }
  double kv_capacity(uint32_t d) const {
    return health_[d].kv_capacity.load(std::memory_order_relaxed);
  }
  Duration::rep turnover(uint32_t d) const {
    return health_[d].turnover.load(std::memory_order_relaxed);
  }
  // The work other gateways have in flight at `destination` (fleet sharing: the sum of their
  // last shared ledgers), which the token-work rule adds to its own ledger's. Control path.
  Status SetRemoteWork(uint32_t destination, const DestinationWork& work) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(work.queued_prefill_tokens >= 0 && work.prefilling >= 0 && work.decoding >= 0) ||
        work.queued_prefill_tokens == std::numeric_limits<double>::infinity() ||
        work.prefilling == std::numeric_limits<double>::infinity() ||
        work.decoding == std::numeric_limits<double>::infinity()) {
      return Status::Error("remote work for destination " + std::to_string(destination) +
                           " is not finite and non-negative");
    }
    Health& h = health_[destination];
    const double old = h.remote_prefilling.exchange(work.prefilling, std::memory_order_relaxed);
    h.remote_queued.store(work.queued_prefill_tokens, std::memory_order_relaxed);
    h.remote_decoding.store(work.decoding, std::memory_order_relaxed);
    // Relaxed sums: a reader may see one destination's change before another's.
    double total = remote_prefilling_.load(std::memory_order_relaxed);
    while (!remote_prefilling_.compare_exchange_weak(total, total - old + work.prefilling,
                                                     std::memory_order_relaxed)) {
    }
    remote_known_.store(true, std::memory_order_relaxed);
    return Status::Ok();
  }
  // Whether any remote work was ever set (the rule reads none while not).
  bool any_remote_work() const { return remote_known_.load(std::memory_order_relaxed); }
  DestinationWork remote_work(uint32_t d) const {
    const Health& h = health_[d];
    return {.queued_prefill_tokens = h.remote_queued.load(std::memory_order_relaxed),
            .prefilling = h.remote_prefilling.load(std::memory_order_relaxed),
            .decoding = h.remote_decoding.load(std::memory_order_relaxed)};
  }
  double remote_prefilling() const {
    return std::max(0.0, remote_prefilling_.load(std::memory_order_relaxed));
  }

  // Whether any destination has a KV capacity set (the memory term reads none while not).
  bool any_kv_capacity() const { return kv_known_.load(std::memory_order_relaxed) != 0; }

  Status UnknownDestination(uint32_t destination) const {
    return Status::Error("unknown destination " + std::to_string(destination) +
                         " (capacity = " + std::to_string(capacity_) + ")");
  }

 private:
  // Read-mostly on the request path, so packed apart from anything written per request.
  struct Health {
    std::atomic<double> external{0.0};
    std::atomic<double> kv_usage{0.0};
    std::atomic<double> kv_capacity{0.0};  // tokens; 0: unknown
    std::atomic<Duration::rep> turnover{0};
    std::atomic<bool> up{true};
    std::atomic<double> remote_queued{0.0};
    std::atomic<double> remote_prefilling{0.0};
    std::atomic<double> remote_decoding{0.0};
  };

  const uint32_t capacity_;
  std::unique_ptr<Health[]> health_;
  std::atomic<uint32_t> kv_known_{0};  // destinations with a KV capacity > 0
  std::atomic<double> remote_prefilling_{0.0};
  std::atomic<bool> remote_known_{false};
};

class RouterLoads final : public LoadView {
 public:
  // `count`: the destinations routed over now (TableSlots). All must outlive the view.
  RouterLoads(ShardLedger& ledger, const DestinationSignals& signals,
              const std::atomic<uint32_t>& count, double external_load_weight)
      : ledger_(ledger), signals_(signals), count_(count), weight_(external_load_weight) {}

  uint32_t size() const override { return count_.load(std::memory_order_relaxed); }
  double Load(uint32_t d) const override { return Load(router_internal::CurrentThreadShard(), d); }
  bool Up(uint32_t d) const override { return signals_.up(d); }
  bool HasWork() const override { return ledger_.token_work(); }
  DestinationWork Work(uint32_t d) const override {
    return ledger_.WorkSeen(router_internal::CurrentThreadShard(), d);
  }
  DestinationWork FleetWork() const override {
    return {.prefilling = ledger_.FleetPrefillingSeen(router_internal::CurrentThreadShard())};
  }
  EngineMetrics Scraped(uint32_t d) const override {
    return {signals_.external(d), signals_.kv_usage(d), signals_.kv_capacity(d)};
  }

  // load(d) as the thread owning `thread_shard` sees it.
  CACHEROUTE_HOT_INLINE double Load(const router_internal::ThreadShard& thread_shard,
                                    uint32_t d) const {
    return static_cast<double>(ledger_.InFlightSeen(thread_shard, d)) +
           weight_ * signals_.external(d);
  }

 private:
  ShardLedger& ledger_;  // reads refresh the calling thread's cached view
  const DestinationSignals& signals_;
  const std::atomic<uint32_t>& count_;
  const double weight_;
};

}  // namespace cacheroute::dataplane
