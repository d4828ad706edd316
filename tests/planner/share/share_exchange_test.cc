// ShareExchange: a batch reaches every subscriber but its sender, a new subscriber gets the recent
// past with how long it was held, bad batches are refused naming the field, and a slow
// subscriber's queue drops its oldest batches past the bound.
#include "planner/share/share_exchange.h"

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "base/clock.h"

namespace cacheroute::planner {
namespace {

class FakeClock final : public base::Clock {
 public:
  absl::Time Now() override { return now; }
  absl::Time now = absl::FromUnixSeconds(1000);
};

v1::ShareBatch Batch(const std::string& gateway, uint64_t key) {
  v1::ShareBatch b;
  b.set_gateway_id(gateway);
  b.add_destinations("e0");
  v1::SharedPlacement* p = b.add_placements();
  p->set_key_id(key);
  p->set_has_key(true);
  return b;
}

TEST_CASE("A batch reaches every subscriber but its sender", "[share_exchange]") {
  FakeClock clock;
  ShareExchange exchange({}, clock);
  auto a = exchange.Subscribe("a");
  auto b = exchange.Subscribe("b");
  auto c = exchange.Subscribe("c");
  REQUIRE(exchange.Publish(Batch("a", 1)).ok());
  clock.now += absl::Milliseconds(7);
  CHECK(a->Take().empty());
  const std::vector<v1::ShareBatch> got = b->Take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].placements(0).key_id() == 1);
  CHECK(got[0].held_ms() == 7);
  CHECK(c->Take().size() == 1);
  CHECK(b->Take().empty());
  const ShareExchangeStats stats = exchange.Stats();
  CHECK(stats.batches_published == 1);
  CHECK(stats.placements_published == 1);
  CHECK(stats.batches_delivered == 2);
  CHECK(stats.subscribers == 3);
  a.reset();
  CHECK(exchange.Stats().subscribers == 2);
}

TEST_CASE("A new subscriber gets the snapshot window's batches, not its own", "[share_exchange]") {
  FakeClock clock;
  ShareExchange exchange({.snapshot_window = absl::Seconds(30)}, clock);
  REQUIRE(exchange.Publish(Batch("a", 1)).ok());
  clock.now += absl::Seconds(20);
  REQUIRE(exchange.Publish(Batch("b", 2)).ok());
  REQUIRE(exchange.Publish(Batch("c", 3)).ok());
  clock.now += absl::Seconds(15);  // the first batch is now 35 s old: out of the window
  auto b = exchange.Subscribe("b");
  const std::vector<v1::ShareBatch> got = b->Take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].gateway_id() == "c");
  CHECK(got[0].held_ms() == 15000);
}

TEST_CASE("A malformed batch is refused naming the field, and forwarded to no one",
          "[share_exchange]") {
  FakeClock clock;
  ShareExchange exchange({}, clock);
  auto b = exchange.Subscribe("b");
  v1::ShareBatch bad = Batch("a", 1);
  bad.mutable_placements(0)->set_destination(4);
  const absl::Status s = exchange.Publish(bad);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() == "share batch placements[0].destination: must index destinations (1), got 4");
  CHECK(b->Take().empty());
  CHECK(exchange.Stats().batches_published == 0);
}

TEST_CASE("A slow subscriber's queue drops its oldest batches past the bound", "[share_exchange]") {
  FakeClock clock;
  const size_t one = Batch("a", 1).ByteSizeLong();
  ShareExchange exchange({.subscriber_max_bytes = 3 * one}, clock);
  auto b = exchange.Subscribe("b");
  for (uint64_t k = 1; k <= 5; ++k) REQUIRE(exchange.Publish(Batch("a", k)).ok());
  const std::vector<v1::ShareBatch> got = b->Take();
  REQUIRE(got.size() == 3);
  CHECK(got[0].placements(0).key_id() == 3);
  CHECK(exchange.Stats().batches_dropped == 2);
}

TEST_CASE("WaitUntil wakes on a batch and on Close", "[share_exchange]") {
  base::RealClock clock;
  ShareExchange exchange({}, clock);
  auto b = exchange.Subscribe("b");
  CHECK_FALSE(b->WaitUntil(clock.Now()));  // nothing queued, deadline passed
  // Catch2's assertions are not thread-safe: the publisher only records its status.
  absl::Status published;
  std::thread publisher([&] { published = exchange.Publish(Batch("a", 1)); });
  CHECK(b->WaitUntil(clock.Now() + absl::Seconds(30)));
  publisher.join();
  CHECK(published.ok());
  CHECK(b->Take().size() == 1);
  std::thread closer([&] { b->Close(); });
  CHECK_FALSE(b->WaitUntil(clock.Now() + absl::Seconds(30)));
  closer.join();
}

}  // namespace
}  // namespace cacheroute::planner
