// TableSubscriber against the real planner (PlannerServer on a loopback port, real gRPC): the
// first full table, deltas, a NACKed table, a planner killed and restarted, TTL expiry and the
// on-disk cache. Routing time is a dataplane::ManualClock so that TTL expiry needs no sleeping;
// waiting for the subscriber's thread uses Eventually (polling), never a fixed sleep.
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/key_id.h"
#include "support/planner_fixture.h"
#include "support/temp_dir.h"
#include "tests/support/planner_config.h"
#include "tests/support/subscriber_options.h"

namespace cacheroute::dataplane {
namespace {

using testing::Eventually;
using testing::InProcessPlanner;
using testing::TempDir;

// One slot a destination: C = R, the R hottest keys are admitted.
service::PlannerConfig PlannerWith(std::vector<std::string> destinations,
                                   std::string state_dir = "") {
  service::PlannerConfig config = testing::LoopbackPlannerConfig(std::move(destinations));
  config.state_dir = std::move(state_dir);
  return config;
}

TableSubscriberOptions SubscriberOptions(std::vector<std::string> destinations) {
  TableSubscriberOptions options = testing::QuickSubscriberOptions("gw-test", std::move(destinations));
  options.refresh_period = std::chrono::milliseconds(20);
  return options;
}

const std::vector<std::string> kNames = {"d0", "d1", "d2"};

struct Gateway {
  // Over `channels`, or a plain channel to `planner` when null.
  explicit Gateway(InProcessPlanner& planner,
                   TableSubscriberOptions options = SubscriberOptions(kNames),
                   uint32_t capacity = 0, std::shared_ptr<PlannerChannels> channels = nullptr)
      : random(11),
        router({.destination_count = static_cast<uint32_t>(options.destinations.size()),
                .capacity = capacity,
                .table_ttl = std::chrono::seconds(30)},
               random),
        subscriber(
            channels != nullptr
                ? std::move(channels)
                : std::make_shared<PlannerChannels>(
                      std::vector<std::shared_ptr<grpc::ChannelInterface>>{planner.NewChannel()}),
            router, std::move(options), clock, random) {}

  uint64_t VersionNumber() const {
    auto table = router.table();
    return table ? table->version().number : 0;
  }
  bool WaitForVersion(uint64_t number) {
    return Eventually([&] { return VersionNumber() == number; });
  }
  std::set<uint32_t> TableSet(const std::string& key) const {
    auto table = router.table();
    std::vector<uint32_t> set = table->Find(KeyId(key)).ToVector();
    return {set.begin(), set.end()};
  }

  ManualClock clock;
  SeededRandom random;
  Router router;
  TableSubscriber subscriber;
};

TEST_CASE("backoff grows by the multiplier with jitter, up to the cap") {
  Backoff backoff;  // 1 s, ×1.6, ±20%, 120 s
  SeededRandom random(3);
  for (uint32_t attempt = 0; attempt < 30; ++attempt) {
    const double base = std::min(std::pow(1.6, attempt), 120.0);
    for (int i = 0; i < 50; ++i) {
      const double s = std::chrono::duration<double>(backoff.Delay(attempt, random)).count();
      REQUIRE(s >= 0.8 * base - 1e-9);
      REQUIRE(s <= 1.2 * base + 1e-9);
    }
  }
  // The jitter really spreads the delays.
  std::set<int64_t> distinct;
  for (int i = 0; i < 20; ++i) distinct.insert(backoff.Delay(0, random).count());
  CHECK(distinct.size() > 10);
}

TEST_CASE("bad subscriber options are refused, naming the field") {
  InProcessPlanner planner(PlannerWith(kNames));
  TableSubscriberOptions options = SubscriberOptions({"d0", "d0", "d1"});
  Gateway gateway(planner, options);
  Status s = gateway.subscriber.Start();
  CHECK_FALSE(s.ok);
  CHECK(s.message.find("destinations") != std::string::npos);
}

TEST_CASE("the first full table, then deltas, are applied and ACKed") {
  InProcessPlanner planner(PlannerWith(kNames));
  planner.Report("gw-rates", 1, {{"a", 3000}, {"b", 2000}, {"c", 500}, {"d", 10}});
  REQUIRE(planner.Replan().version().number() == 1);

  Gateway gateway(planner);
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(gateway.WaitForVersion(1));
  // a, b and c are admitted (C = 3); d is not.
  InFlight a = gateway.router.Pick(KeyId("a"), gateway.clock.Now());
  CHECK(a.planned());
  CHECK(gateway.TableSet("a").count(a.destination()) == 1);
  CHECK_FALSE(gateway.router.Pick(KeyId("d"), gateway.clock.Now()).planned());

  // A delta: d becomes hot and c cold.
  planner.Report("gw-rates", 2, {{"a", 3000}, {"b", 2000}, {"c", 1}, {"d", 5000}});
  REQUIRE(planner.Replan().changed());
  REQUIRE(gateway.WaitForVersion(2));
  CHECK(gateway.router.Pick(KeyId("d"), gateway.clock.Now()).planned());
  CHECK_FALSE(gateway.router.Pick(KeyId("c"), gateway.clock.Now()).planned());
  REQUIRE(Eventually([&] { return gateway.subscriber.Stats().acks == 2; }));
  TableSubscriberStats stats = gateway.subscriber.Stats();
  CHECK(stats.nacks == 0);
  CHECK(stats.connected);
  CHECK(stats.version.number == 2);
  // The planner saw the ACK of version 2 from this gateway.
  REQUIRE(Eventually([&] {
    const v1::GetStatusResponse status = planner.Status();
    for (const auto& g : status.gateways()) {
      if (g.gateway_id() == "gw-test") return g.acked_version().number() == 2;
    }
    return false;
  }));
}

TEST_CASE("a table naming a destination the gateway does not know is NACKed") {
  // The planner has a fourth destination the gateway was not configured with.
  InProcessPlanner planner(PlannerWith({"d0", "d1", "d2", "d9"}));
  planner.Report("gw-rates", 1, {{"a", 3000}, {"b", 2000}});
  REQUIRE(planner.Replan().version().number() == 1);

  Gateway gateway(planner);
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(Eventually([&] { return gateway.subscriber.Stats().nacks == 1; }));
  TableSubscriberStats stats = gateway.subscriber.Stats();
  CHECK(stats.acks == 0);
  CHECK(stats.last_error.find("'d9'") != std::string::npos);
  CHECK(gateway.router.table() == nullptr);  // nothing installed
  InFlight pick = gateway.router.Pick(KeyId("a"), gateway.clock.Now());
  CHECK(pick.reason() == Reason::kNoTable);
  CHECK(pick.ok());
}

TEST_CASE("with ignore_unknown_destinations, a destination the gateway lacks is left out") {
  // Four keys with k_b = 1 and C = R = 4 (Algorithm 1: no split for balance): LPT puts one on
  // each destination, one of them on d9.
  service::PlannerConfig config = PlannerWith({"d0", "d1", "d2", "d9"});
  config.algorithm = "cacheroute-paper";
  InProcessPlanner planner(config);
  planner.Report("gw-rates", 1, {{"a", 500}, {"b", 400}, {"c", 300}, {"d", 200}});
  REQUIRE(planner.Replan().version().number() == 1);
  TableSubscriberOptions options = SubscriberOptions(kNames);
  options.ignore_unknown_destinations = true;
  Gateway gateway(planner, options);
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(gateway.WaitForVersion(1));
  CHECK(gateway.subscriber.Stats().nacks == 0);
  int admitted_here = 0;
  for (const char* key : {"a", "b", "c", "d"}) {
    admitted_here += gateway.router.table()->Find(KeyId(key)).empty() ? 0 : 1;
  }
  CHECK(admitted_here == 3);
}

TEST_CASE("a table's rollout reaches the router as its table fraction") {
  InProcessPlanner planner(PlannerWith(kNames));
  Gateway gateway(planner);
  const auto plain = table::TableSnapshot::FromEntries(
      {1, 1}, kNames, std::vector<double>(kNames.size(), 1.0),
      {{.key_id = KeyId("a"), .rate = 1.0, .destinations = {1}}}, 0, 60);
  Result<RoutingTable> converted = gateway.subscriber.Convert(*plain);
  REQUIRE(converted.ok());
  CHECK(converted->table_fraction() == 1.0);
  converted = gateway.subscriber.Convert(*plain->WithRollout(table::TableRollout{"canary", 0.2}));
  REQUIRE(converted.ok());
  CHECK(converted->table_fraction() == 0.2);
  CHECK_FALSE(converted->Find(KeyId("a")).empty());  // the split is the router's, per pick
}

TEST_CASE("a membership change re-maps the installed table to the new indices") {
  InProcessPlanner planner(PlannerWith(kNames));
  planner.Report("gw-rates", 1, {{"a", 3000}, {"b", 2000}, {"c", 500}});
  REQUIRE(planner.Replan().version().number() == 1);
  TableSubscriberOptions options = SubscriberOptions(kNames);
  options.ignore_unknown_destinations = true;
  Gateway gateway(planner, options, /*capacity=*/8);
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(gateway.WaitForVersion(1));
  const auto names_of = [&](const std::string& key, const std::vector<std::string>& names) {
    std::set<std::string> out;
    for (uint32_t d : gateway.TableSet(key)) out.insert(names[d]);
    return out;
  };
  const std::set<std::string> a_before = names_of("a", kNames);

  // Reordered, one added: the same version, now over four destinations, each key on the same
  // names as before.
  const std::vector<std::string> next = {"d2", "d0", "d1", "d3"};
  REQUIRE(gateway.subscriber.SetDestinations(next).ok);
  CHECK(gateway.router.destination_count() == 4);
  CHECK(gateway.VersionNumber() == 1);
  CHECK(names_of("a", next) == a_before);
  InFlight a = gateway.router.Pick(KeyId("a"), gateway.clock.Now());
  CHECK(a.planned());
  CHECK(a_before.count(next[a.destination()]) == 1);

  // One removed: its keys are no longer planned here until the planner replans.
  const std::string gone = *a_before.begin();
  std::vector<std::string> fewer;
  for (const std::string& n : next) {
    if (n != gone) fewer.push_back(n);
  }
  REQUIRE(gateway.subscriber.SetDestinations(fewer).ok);
  CHECK(gateway.router.destination_count() == 3);
  if (a_before.size() == 1) CHECK(gateway.router.table()->Find(KeyId("a")).empty());
  // Refused: duplicates, past the Router's capacity.
  CHECK_FALSE(gateway.subscriber.SetDestinations({"d0", "d0"}).ok);
  CHECK_FALSE(
      gateway.subscriber.SetDestinations({"a", "b", "c", "d", "e", "f", "g", "h", "i"}).ok);
  CHECK(gateway.router.destination_count() == 3);
  // No member at all (a Service with no ready endpoint): nothing is routed.
  REQUIRE(gateway.subscriber.SetDestinations({}).ok);
  CHECK(gateway.router.destination_count() == 0);
  CHECK_FALSE(gateway.router.Pick(KeyId("a"), gateway.clock.Now()).ok());
}

TEST_CASE("planner killed and restarted: routing continues on the last table, then resumes") {
  TempDir state("subscriber-restart");
  InProcessPlanner planner(PlannerWith(kNames, state.path().string()));
  planner.Report("gw-rates", 1, {{"a", 3000}, {"b", 2000}, {"c", 500}});
  planner.Replan();
  Gateway gateway(planner);
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(gateway.WaitForVersion(1));

  planner.Stop();
  REQUIRE(Eventually([&] { return !gateway.subscriber.Stats().connected; }));
  for (int i = 0; i < 100; ++i) {
    InFlight pick = gateway.router.Pick(KeyId("a"), gateway.clock.Now());
    REQUIRE(pick.planned());
  }
  const uint64_t connects_while_down = gateway.subscriber.Stats().connects;
  // It keeps trying (backoff is 20 ms growing to 200 ms here).
  REQUIRE(
      Eventually([&] { return gateway.subscriber.Stats().connects > connects_while_down + 1; }));

  planner.Start();  // same port and state directory: same epoch, version 1 restored
  REQUIRE(Eventually([&] { return gateway.subscriber.Stats().connected; }));
  planner.Report("gw-rates", 2, {{"a", 3000}, {"b", 1}, {"c", 1}, {"e", 9000}});
  REQUIRE(planner.Replan().changed());
  REQUIRE(gateway.WaitForVersion(2));
  CHECK(gateway.router.Pick(KeyId("e"), gateway.clock.Now()).planned());
}

TEST_CASE("after an outage longer than the backoff grew, the planner's return ends the wait") {
  TempDir state("subscriber-outage");
  InProcessPlanner planner(PlannerWith(kNames, state.path().string()));
  planner.Report("gw-rates", 1, {{"a", 3000}});
  planner.Replan();
  // The second retry waits 200 s: only the channel turning READY again can end it in time.
  TableSubscriberOptions options = SubscriberOptions(kNames);
  options.backoff = {.initial = std::chrono::milliseconds(50),
                     .multiplier = 4000,
                     .jitter = 0,
                     .max = std::chrono::hours(1)};
  options.ready_check_period = std::chrono::milliseconds(20);
  std::mutex mu;
  std::vector<TableStreamChange> changes;
  options.on_stream_change = [&](const TableStreamChange& change) {
    std::lock_guard<std::mutex> lock(mu);
    changes.push_back(change);
  };
  const auto changes_seen = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return changes;
  };
  // The gateway's channel: reconnect backoff capped at 1 s (planner_channels.h).
  Gateway gateway(planner, options, 0,
                  PlannerChannels::Create({planner.target()}, grpc::InsecureChannelCredentials()));
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(gateway.WaitForVersion(1));
  REQUIRE(Eventually([&] { return changes_seen().size() == 1; }));

  planner.Stop();
  // Two attempts failed: the subscriber is in the 200 s wait.
  REQUIRE(Eventually([&] { return gateway.subscriber.Stats().disconnects >= 2; }));
  CHECK_FALSE(gateway.subscriber.Stats().connected);

  planner.Start();
  REQUIRE(Eventually([&] { return gateway.subscriber.Stats().connected; }));
  const TableSubscriberStats stats = gateway.subscriber.Stats();
  CHECK(stats.losses == 1);
  CHECK(stats.recoveries == 1);
  CHECK(stats.early_reconnects >= 1);
  // One call at the first connect, one at the loss, one at the recovery: the failed attempts
  // in between are not reported.
  const std::vector<TableStreamChange> seen = changes_seen();
  REQUIRE(seen.size() == 3);
  CHECK((seen[0].connected && seen[0].first));
  CHECK_FALSE(seen[1].connected);
  CHECK_FALSE(seen[1].detail.empty());
  CHECK((seen[2].connected && !seen[2].first));

  // The backoff restarted: the planner's next table arrives over the new stream.
  planner.Report("gw-rates", 2, {{"a", 3000}, {"e", 9000}});
  REQUIRE(planner.Replan().changed());
  REQUIRE(gateway.WaitForVersion(2));
}

TEST_CASE("with the planner away past the TTL, traffic falls back, then recovers") {
  TempDir state("subscriber-ttl");
  InProcessPlanner planner(PlannerWith(kNames, state.path().string()));
  planner.Report("gw-rates", 1, {{"a", 3000}});
  planner.Replan();
  Gateway gateway(planner);
  REQUIRE(gateway.subscriber.Start().ok);
  REQUIRE(gateway.WaitForVersion(1));

  // Connected: the subscriber keeps refreshing, so time passing does not make the table stale.
  gateway.clock.Advance(std::chrono::seconds(29));
  REQUIRE(Eventually([&] {
    return gateway.router.Stats(gateway.clock.Now()).since_refresh < std::chrono::seconds(1);
  }));
  gateway.clock.Advance(std::chrono::seconds(29));
  REQUIRE(
      Eventually([&] { return gateway.router.Pick(KeyId("a"), gateway.clock.Now()).planned(); }));

  planner.Stop();
  REQUIRE(Eventually([&] { return !gateway.subscriber.Stats().connected; }));
  gateway.clock.Advance(std::chrono::seconds(31));
  InFlight pick = gateway.router.Pick(KeyId("a"), gateway.clock.Now());
  CHECK_FALSE(pick.planned());
  CHECK(pick.reason() == Reason::kStale);
  CHECK(pick.ok());
  RouterStats stats = gateway.router.Stats(gateway.clock.Now());
  CHECK(stats.stale);
  CHECK(stats.fallback[static_cast<int>(Reason::kStale)] >= 1);

  // The planner comes back with the same version: the reconnect alone makes the table current.
  planner.Start();
  REQUIRE(
      Eventually([&] { return gateway.router.Pick(KeyId("a"), gateway.clock.Now()).planned(); }));
}

TEST_CASE("a restarting gateway routes by its cached table before the planner answers") {
  TempDir dir("subscriber-cache");
  const std::string cache = dir.File("table.pb");
  InProcessPlanner planner(PlannerWith(kNames));
  planner.Report("gw-rates", 1, {{"a", 3000}, {"b", 2000}});
  planner.Replan();
  std::set<uint32_t> set_a;
  {
    TableSubscriberOptions options = SubscriberOptions(kNames);
    options.cache_path = cache;
    Gateway first(planner, options);
    REQUIRE(first.subscriber.Start().ok);
    REQUIRE(first.WaitForVersion(1));
    REQUIRE(Eventually([&] { return std::filesystem::exists(cache); }));
    set_a = first.TableSet("a");
  }
  planner.Stop();

  TableSubscriberOptions options = SubscriberOptions(kNames);
  options.cache_path = cache;
  Gateway second(planner, options);
  REQUIRE(second.subscriber.Start().ok);
  // Installed by Start itself, with no planner to talk to.
  REQUIRE(second.VersionNumber() == 1);
  CHECK(second.subscriber.Stats().loaded_from_cache);
  InFlight pick = second.router.Pick(KeyId("a"), second.clock.Now());
  CHECK(pick.planned());
  CHECK(set_a.count(pick.destination()) == 1);
}

TEST_CASE("a corrupt cache file is reported and ignored") {
  TempDir dir("subscriber-corrupt");
  const std::string cache = dir.File("table.pb");
  {
    std::ofstream out(cache);
    out << "this is not a protobuf table";
  }
  InProcessPlanner planner(PlannerWith(kNames));
  TableSubscriberOptions options = SubscriberOptions(kNames);
  options.cache_path = cache;
  Gateway gateway(planner, options);
  REQUIRE(gateway.subscriber.Start().ok);
  CHECK(gateway.router.table() == nullptr);
  CHECK_FALSE(gateway.subscriber.Stats().loaded_from_cache);
  CHECK(gateway.subscriber.Stats().last_error.find(cache) != std::string::npos);
}

}  // namespace
}  // namespace cacheroute::dataplane
