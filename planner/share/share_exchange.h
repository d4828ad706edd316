// ShareExchange: the planner's side of fleet sharing (proto/cacheroute/v1/share.proto): every
// gateway publishes what its picks made known (placements) and its work in flight, and every
// other gateway receives it, so that several gateways route as one (docs/dispatch.md, "Several
// gateways"). No transport: the planner's ShareService streams it over gRPC, and the fleet
// simulator calls it directly with its own delivery delay and loss.
//
//   Publish(batch)      checks the batch (CheckShareBatch: INVALID_ARGUMENT naming the field),
//                       keeps it for new subscribers for snapshot_window, and queues it for every
//                       subscriber but its sender
//   Subscribe(gateway)  a Subscription whose queue starts with the batches of the last
//                       snapshot_window (but the gateway's own), then gets each new one
//   Take()              the queued batches, each with held_ms set to how long the exchange held it
//
// Bounds: a subscriber's queue keeps at most subscriber_max_bytes (serialized size); past it the
// oldest batches are dropped and counted (a slow gateway loses old news first). The snapshot keeps
// at most snapshot_max_bytes. Batches are shared between queues, not copied, until Take.
//
// Thread safety: every method on any thread; one mutex. Subscriptions may outlive the exchange's
// users but not the exchange.
//
// Usage:
//   ShareExchange exchange({}, clock);
//   std::shared_ptr<ShareExchange::Subscription> sub = exchange.Subscribe("gw-2");
//   absl::Status s = exchange.Publish(batch_from_gw_1);
//   for (v1::ShareBatch& b : sub->Take()) …        // or sub->WaitFor(deadline) first
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/v1/share.pb.h"

namespace cacheroute::planner {

struct ShareExchangeOptions {
  absl::Duration snapshot_window = absl::Seconds(30);
  size_t snapshot_max_bytes = size_t{64} << 20;
  size_t subscriber_max_bytes = size_t{16} << 20;
};

struct ShareExchangeStats {
  uint64_t batches_published = 0;
  uint64_t placements_published = 0;
  uint64_t bytes_published = 0;  // serialized
  uint64_t batches_delivered = 0;
  uint64_t bytes_delivered = 0;
  uint64_t batches_dropped = 0;  // from slow subscribers' queues
  uint64_t subscribers = 0;
};

class ShareExchange {
 private:
  struct Held {
    std::shared_ptr<const v1::ShareBatch> batch;
    absl::Time received;
    size_t bytes = 0;
  };

 public:
  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

    const std::string& gateway_id() const { return gateway_id_; }
    // Everything queued, oldest first, each with held_ms set; empties the queue.
    std::vector<v1::ShareBatch> Take();
    // Waits until something is queued, Close() is called or `deadline` passes; whether something
    // is queued.
    bool WaitUntil(absl::Time deadline);
    // Wakes a waiter for good (its stream is ending).
    void Close();

   private:
    friend class ShareExchange;
    Subscription(ShareExchange& exchange, std::string gateway_id)
        : exchange_(exchange), gateway_id_(std::move(gateway_id)) {}
    ShareExchange& exchange_;
    const std::string gateway_id_;
    // Guarded by exchange_.mu_.
    std::deque<Held> queue_;
    size_t queued_bytes_ = 0;
    bool closed_ = false;
  };

  ShareExchange(const ShareExchangeOptions& options, base::Clock& clock);
  ShareExchange(const ShareExchange&) = delete;
  ShareExchange& operator=(const ShareExchange&) = delete;

  absl::Status Publish(v1::ShareBatch batch);
  std::shared_ptr<Subscription> Subscribe(const std::string& gateway_id);
  ShareExchangeStats Stats() const;

 private:
  void Enqueue(Subscription& s, const Held& held);  // mu_ held
  void Forget(Subscription* s);
  void TrimSnapshot(absl::Time now);  // mu_ held

  const ShareExchangeOptions options_;
  base::Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Subscription*> subscribers_;  // guarded by mu_
  std::deque<Held> snapshot_;               // guarded by mu_
  size_t snapshot_bytes_ = 0;               // guarded by mu_
  ShareExchangeStats stats_;                // guarded by mu_
};

}  // namespace cacheroute::planner
