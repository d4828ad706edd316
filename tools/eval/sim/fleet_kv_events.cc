// See fleet_kv_events.h.
#include "tools/eval/sim/fleet_kv_events.h"

#include <limits>
#include <utility>

namespace cacheroute::sim {

void KvEventFeed::Collect(uint32_t engine, double now_s) {
  std::vector<dataplane::KvEvent>& log = logs_[engine];
  if (log.empty()) return;
  events_ += log.size();
  bytes_ += kBatchBytes;
  for (const dataplane::KvEvent& e : log) {
    bytes_ += e.kind == dataplane::KvEventKind::kStored ? kStoredBlockBytes : kRemovedBlockBytes;
  }
  pending_.push_back({now_s + delay_s_, engine, std::move(log)});
  log = {};
}

double KvEventFeed::next_due_s() const {
  return pending_.empty() ? std::numeric_limits<double>::infinity() : pending_.front().due_s;
}

void KvEventFeed::DeliverDue(
    double now_s,
    const std::function<void(uint32_t, std::span<const dataplane::KvEvent>)>& deliver) {
  while (!pending_.empty() && pending_.front().due_s <= now_s) {
    deliver(pending_.front().engine, pending_.front().events);
    pending_.pop_front();
  }
}

}  // namespace cacheroute::sim
