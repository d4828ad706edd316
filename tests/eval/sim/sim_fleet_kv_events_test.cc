// KvEventFeed: each engine step's events become one batch, delivered once, oldest first, its
// delay after the step; the bytes follow the per-batch and per-block estimate.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/kv_event_index.h"
#include "tools/eval/sim/fleet_kv_events.h"

namespace cacheroute::sim {
namespace {

using dataplane::KvEvent;
using dataplane::KvEventKind;

TEST_CASE("batches come due their delay after the step, in order, once") {
  KvEventFeed feed(2, 0.5);
  CHECK(feed.next_due_s() == std::numeric_limits<double>::infinity());
  feed.Collect(0, 1.0);  // nothing logged: no batch
  CHECK(feed.next_due_s() == std::numeric_limits<double>::infinity());
  feed.log(0)->push_back({KvEventKind::kStored, 11});
  feed.log(0)->push_back({KvEventKind::kStored, 12});
  feed.Collect(0, 1.0);
  CHECK(feed.log(0)->empty());
  feed.log(1)->push_back({KvEventKind::kRemoved, 11});
  feed.Collect(1, 1.2);
  CHECK(feed.next_due_s() == 1.5);

  std::vector<std::pair<uint32_t, size_t>> delivered;
  auto record = [&](uint32_t d, std::span<const KvEvent> events) {
    delivered.push_back({d, events.size()});
  };
  feed.DeliverDue(1.4, record);
  CHECK(delivered.empty());
  feed.DeliverDue(1.5, record);
  CHECK(delivered == std::vector<std::pair<uint32_t, size_t>>{{0, 2}});
  feed.DeliverDue(9, record);
  CHECK(delivered == std::vector<std::pair<uint32_t, size_t>>{{0, 2}, {1, 1}});
  feed.DeliverDue(9, record);
  CHECK(delivered.size() == 2);

  CHECK(feed.events() == 3);
  CHECK(feed.bytes() == 2 * KvEventFeed::kBatchBytes + 2 * KvEventFeed::kStoredBlockBytes +
                            KvEventFeed::kRemovedBlockBytes);
}

}  // namespace
}  // namespace cacheroute::sim
