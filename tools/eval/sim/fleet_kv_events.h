// KvEventFeed: the engines' KV events on their way to the precise baselines' indexes (internal to
// RunFleet, fleet.h). Each engine's prefix cache appends its events to its log here
// (PrefixCache::set_event_log); after every engine step the fleet collects the log as one batch
// (vLLM publishes one per scheduler step), and delivers each batch `delay_s` later to every
// gateway, each of which subscribes to every engine (G × R subscriptions), in time order.
//
// Bytes are vLLM's msgpack encoding, estimated per batch and per block (docs/simulator.md, "KV
// events"): what one subscriber receives; every subscriber receives all of it.
//
// Usage:
//   KvEventFeed feed(engines.size(), config.kv_event_delay_s);
//   for (uint32_t d = 0; d < R; ++d) engines[d].set_kv_event_log(feed.log(d));
//   feed.Collect(d, now);                            // after engine d's step or submit
//   if (feed.next_due_s() <= t) feed.DeliverDue(t, [&](uint32_t d, auto events) { ... });
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "cacheroute/dataplane/kv_event_index.h"

namespace cacheroute::sim {

class KvEventFeed {
 public:
  // Estimated bytes on the wire: a batch's envelope (ZMQ topic and sequence frames, the batch's
  // timestamp and tags), a stored block (its hash and its 16 token ids), a removed block (its
  // hash).
  static constexpr double kBatchBytes = 48;
  static constexpr double kStoredBlockBytes = 9 + 16 * 3.5;
  static constexpr double kRemovedBlockBytes = 9;

  KvEventFeed(uint32_t engines, double delay_s) : logs_(engines), delay_s_(delay_s) {}

  std::vector<dataplane::KvEvent>* log(uint32_t engine) { return &logs_[engine]; }
  // Engine `engine`'s events since the last call become one batch, due at now + delay.
  void Collect(uint32_t engine, double now_s);
  // When the next batch is due; +infinity when none is pending.
  double next_due_s() const;
  // Hands every batch due at or before `now_s` to `deliver`, oldest first.
  void DeliverDue(
      double now_s,
      const std::function<void(uint32_t, std::span<const dataplane::KvEvent>)>& deliver);

  uint64_t events() const { return events_; }
  double bytes() const { return bytes_; }  // published, as one subscriber receives them

 private:
  struct Batch {
    double due_s = 0;
    uint32_t engine = 0;
    std::vector<dataplane::KvEvent> events;
  };
  std::vector<std::vector<dataplane::KvEvent>> logs_;
  std::deque<Batch> pending_;  // due times non-decreasing: the delay is constant
  const double delay_s_;
  uint64_t events_ = 0;
  double bytes_ = 0;
};

}  // namespace cacheroute::sim
