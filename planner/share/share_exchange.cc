// See share_exchange.h.
#include "planner/share/share_exchange.h"

#include <algorithm>
#include <utility>

#include "cacheroute/dataplane/grpc/share_conversion.h"

namespace cacheroute::planner {

ShareExchange::ShareExchange(const ShareExchangeOptions& options, base::Clock& clock)
    : options_(options), clock_(clock) {}

absl::Status ShareExchange::Publish(v1::ShareBatch batch) {
  if (const dataplane::Status s = dataplane::CheckShareBatch(batch); !s.ok) {
    return absl::InvalidArgumentError(s.message);
  }
  batch.set_held_ms(0);
  const absl::Time now = clock_.Now();
  Held held{.batch = std::make_shared<const v1::ShareBatch>(std::move(batch)),
            .received = now,
            .bytes = 0};
  held.bytes = held.batch->ByteSizeLong();
  const std::lock_guard<std::mutex> lock(mu_);
  ++stats_.batches_published;
  stats_.placements_published += static_cast<uint64_t>(held.batch->placements_size());
  stats_.bytes_published += held.bytes;
  for (Subscription* s : subscribers_) {
    if (s->gateway_id_ != held.batch->gateway_id()) Enqueue(*s, held);
  }
  snapshot_.push_back(held);
  snapshot_bytes_ += held.bytes;
  TrimSnapshot(now);
  cv_.notify_all();
  return absl::OkStatus();
}

std::shared_ptr<ShareExchange::Subscription> ShareExchange::Subscribe(
    const std::string& gateway_id) {
  std::shared_ptr<Subscription> s(new Subscription(*this, gateway_id));
  const std::lock_guard<std::mutex> lock(mu_);
  TrimSnapshot(clock_.Now());
  for (const Held& held : snapshot_) {
    if (held.batch->gateway_id() != gateway_id) Enqueue(*s, held);
  }
  subscribers_.push_back(s.get());
  stats_.subscribers = subscribers_.size();
  return s;
}

ShareExchangeStats ShareExchange::Stats() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ShareExchange::Enqueue(Subscription& s, const Held& held) {
  s.queue_.push_back(held);
  s.queued_bytes_ += held.bytes;
  while (s.queued_bytes_ > options_.subscriber_max_bytes && s.queue_.size() > 1) {
    s.queued_bytes_ -= s.queue_.front().bytes;
    s.queue_.pop_front();
    ++stats_.batches_dropped;
  }
}

void ShareExchange::TrimSnapshot(absl::Time now) {
  while (!snapshot_.empty() && (now - snapshot_.front().received > options_.snapshot_window ||
                                snapshot_bytes_ > options_.snapshot_max_bytes)) {
    snapshot_bytes_ -= snapshot_.front().bytes;
    snapshot_.pop_front();
  }
}

void ShareExchange::Forget(Subscription* s) {
  const std::lock_guard<std::mutex> lock(mu_);
  subscribers_.erase(std::remove(subscribers_.begin(), subscribers_.end(), s), subscribers_.end());
  stats_.subscribers = subscribers_.size();
}

ShareExchange::Subscription::~Subscription() { exchange_.Forget(this); }

std::vector<v1::ShareBatch> ShareExchange::Subscription::Take() {
  std::deque<Held> taken;
  {
    const std::lock_guard<std::mutex> lock(exchange_.mu_);
    taken.swap(queue_);
    exchange_.stats_.batches_delivered += taken.size();
    for (const Held& h : taken) exchange_.stats_.bytes_delivered += h.bytes;
    queued_bytes_ = 0;
  }
  const absl::Time now = exchange_.clock_.Now();
  std::vector<v1::ShareBatch> out;
  out.reserve(taken.size());
  for (const Held& h : taken) {
    out.push_back(*h.batch);
    const int64_t held_ms = absl::ToInt64Milliseconds(now - h.received);
    out.back().set_held_ms(static_cast<uint32_t>(std::clamp<int64_t>(held_ms, 0, UINT32_MAX)));
  }
  return out;
}

bool ShareExchange::Subscription::WaitUntil(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(exchange_.mu_);
  while (queue_.empty() && !closed_) {
    const absl::Time now = exchange_.clock_.Now();
    if (now >= deadline) break;
    exchange_.cv_.wait_for(lock, absl::ToChronoNanoseconds(deadline - now));
  }
  return !queue_.empty();
}

void ShareExchange::Subscription::Close() {
  const std::lock_guard<std::mutex> lock(exchange_.mu_);
  closed_ = true;
  exchange_.cv_.notify_all();
}

}  // namespace cacheroute::planner
