// PlannerChannels (dataplane/…/grpc/planner_channels.h) against two real planners on loopback
// ports: the targets it builds, a TableSubscriber that loses the planner it streams from and goes
// on from the other one (keeping its table, resuming from its version), and a RateReporter whose
// report fails on one address and is retried, same sequence, on the next. Both ways gRPC is used
// are run: one channel over literal addresses ("ipv4:a,b", round_robin) and one channel per
// host name, rotated by the caller. The two planners get the same configuration, clock and
// inputs, so they publish the same versions, as replicas of one history would. Addresses nobody
// listens on come from FreeLoopbackPort. Waiting is Eventually (polling), never a fixed sleep or
// a timing assertion.
#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/key_id.h"
#include "support/free_port.h"
#include "support/planner_fixture.h"
#include "tests/support/planner_config.h"
#include "tests/support/subscriber_options.h"

namespace cacheroute::dataplane {
namespace {

using testing::Eventually;
using testing::FreeLoopbackPort;
using testing::InProcessPlanner;

const std::vector<std::string> kNames = {"d0", "d1", "d2"};

service::PlannerConfig Config() { return testing::LoopbackPlannerConfig(kNames); }

// The same report and plan on every planner given: they publish the same version.
void PlanEverywhere(const std::vector<InProcessPlanner*>& planners, uint64_t sequence,
                    const std::vector<std::pair<std::string, double>>& counts) {
  for (InProcessPlanner* p : planners) {
    p->Report("gw-rates", sequence, counts);
    p->Replan();
  }
}

bool Subscribed(InProcessPlanner& planner, const std::string& gateway) {
  const v1::GetStatusResponse status = planner.Status();
  for (const auto& g : status.gateways()) {
    if (g.gateway_id() == gateway && g.subscribed()) return true;
  }
  return false;
}

// "HOST:port" for each planner.
std::vector<std::string> Addresses(const std::string& host, const std::vector<int>& ports) {
  std::vector<std::string> out;
  for (int port : ports) out.push_back(absl::StrCat(host, ":", port));
  return out;
}

int PortOf(const InProcessPlanner& planner) {
  const std::string target = planner.target();
  return std::stoi(target.substr(target.rfind(':') + 1));
}

TEST_CASE("targets: one for one address or literals of one family, else one per address") {
  CHECK(PlannerTargets({"planner:50051"}) == std::vector<std::string>{"planner:50051"});
  CHECK(PlannerTargets({"10.0.0.1:1", "10.0.0.2:2"}) ==
        std::vector<std::string>{"ipv4:10.0.0.1:1,10.0.0.2:2"});
  CHECK(PlannerTargets({"[::1]:1", "[fe80::2]:2"}) ==
        std::vector<std::string>{"ipv6:[::1]:1,[fe80::2]:2"});
  CHECK(PlannerTargets({"a:1", "b:2"}) == std::vector<std::string>{"a:1", "b:2"});
  CHECK(PlannerTargets({"10.0.0.1:1", "[::1]:2"}) ==
        std::vector<std::string>{"10.0.0.1:1", "[::1]:2"});
  CHECK(PlannerTargets({"10.0.0.1:1", "b:2"}) == std::vector<std::string>{"10.0.0.1:1", "b:2"});
  CHECK(PlannerChannels::Create({"10.0.0.1:1", "10.0.0.2:2"}, grpc::InsecureChannelCredentials())
            ->size() == 1);
  CHECK(
      PlannerChannels::Create({"a:1", "b:2", "c:3"}, grpc::InsecureChannelCredentials())->size() ==
      3);
}

TEST_CASE("rotation moves on once per failure, and only away from the failed channel") {
  auto channel = [] {
    return grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  };
  PlannerChannels channels({channel(), channel(), channel()});
  CHECK(channels.Current().index == 0);
  channels.Failed(0);
  CHECK(channels.Current().index == 1);
  channels.Failed(0);  // a second caller that saw channel 0 fail: already moved on
  CHECK(channels.Current().index == 1);
  channels.Failed(1);
  channels.Failed(2);
  CHECK(channels.Current().index == 0);  // round and round
}

TEST_CASE("a subscriber keeps its table when its planner goes and follows the other one") {
  // "127.0.0.1": one ipv4: channel, gRPC fails over; "localhost": one channel per address,
  // rotated by the subscriber.
  const std::string host = GENERATE(as<std::string>{}, "127.0.0.1", "localhost");
  INFO(host);
  InProcessPlanner a(Config());
  InProcessPlanner b(Config());
  PlanEverywhere({&a, &b}, 1, {{"x", 3000}, {"y", 2000}, {"z", 1000}});
  REQUIRE(a.Status().version().number() == b.Status().version().number());
  REQUIRE(a.Status().version().epoch() == b.Status().version().epoch());

  std::shared_ptr<PlannerChannels> channels = PlannerChannels::Create(
      Addresses(host, {PortOf(a), PortOf(b)}), grpc::InsecureChannelCredentials());
  CHECK(channels->size() == (host == "localhost" ? 2u : 1u));
  ManualClock clock;
  SeededRandom random(5);
  Router router({.destination_count = 3, .table_ttl = std::chrono::seconds(30)}, random);
  TableSubscriberOptions options = testing::QuickSubscriberOptions("gw-ha", kNames);
  options.refresh_period = std::chrono::milliseconds(20);
  TableSubscriber subscriber(channels, router, options, clock, random);
  REQUIRE(subscriber.Start().ok);
  const auto number = [&] {
    auto table = router.table();
    return table ? table->version().number : 0;
  };
  REQUIRE(Eventually([&] { return number() == 1; }));
  REQUIRE(Eventually([&] { return Subscribed(a, "gw-ha") || Subscribed(b, "gw-ha"); }));
  const bool on_a = Subscribed(a, "gw-ha");
  InProcessPlanner& gone = on_a ? a : b;
  InProcessPlanner& left = on_a ? b : a;
  const std::set<uint32_t> before = [&] {
    std::vector<uint32_t> v = router.table()->Find(KeyId("x")).ToVector();
    return std::set<uint32_t>(v.begin(), v.end());
  }();

  gone.Stop();
  // The stream to `left` opens from version 1: nothing to send, and the table stays.
  REQUIRE(Eventually([&] { return Subscribed(left, "gw-ha"); }));
  CHECK(number() == 1);
  REQUIRE(router.table() != nullptr);
  std::vector<uint32_t> now = router.table()->Find(KeyId("x")).ToVector();
  CHECK(std::set<uint32_t>(now.begin(), now.end()) == before);
  // It told `left` it has version 1 (and `left` sent no table: nothing was NACKed or replaced).
  CHECK(Eventually([&] {
    const v1::GetStatusResponse status = left.Status();
    for (const auto& g : status.gateways()) {
      if (g.gateway_id() == "gw-ha") return g.acked_version().number() == 1;
    }
    return false;
  }));
  const TableSubscriberStats stats = subscriber.Stats();
  CHECK(stats.disconnects >= 1);
  CHECK(stats.nacks == 0);

  // The replica left publishes on: the subscriber follows.
  PlanEverywhere({&left}, 2, {{"x", 100}, {"w", 5000}, {"v", 4000}});
  REQUIRE(Eventually([&] { return number() == 2; }));
  CHECK(router.table()->version().epoch == left.Status().version().epoch());
  CHECK(subscriber.Stats().nacks == 0);
  subscriber.Stop();
}

TEST_CASE("a subscriber tries the addresses in turn until one answers") {
  InProcessPlanner live(Config());
  PlanEverywhere({&live}, 1, {{"x", 3000}, {"y", 2000}});
  std::shared_ptr<PlannerChannels> channels = PlannerChannels::Create(
      Addresses("localhost", {FreeLoopbackPort(), FreeLoopbackPort(), PortOf(live)}),
      grpc::InsecureChannelCredentials());
  REQUIRE(channels->size() == 3);
  ManualClock clock;
  SeededRandom random(9);
  Router router({.destination_count = 3, .table_ttl = std::chrono::seconds(30)}, random);
  const TableSubscriberOptions options = testing::QuickSubscriberOptions("gw-turn", kNames);
  TableSubscriber subscriber(channels, router, options, clock, random);
  REQUIRE(subscriber.Start().ok);
  REQUIRE(Eventually([&] { return router.table() != nullptr; }));
  CHECK(router.table()->version().number == 1);
  CHECK(subscriber.Stats().connects >= 3);  // both dead addresses first, in order
  CHECK(channels->Current().index == 2);
  CHECK(Subscribed(live, "gw-turn"));
  subscriber.Stop();
}

TEST_CASE("a report that fails on one address is retried, same sequence, on the next") {
  InProcessPlanner live(Config());
  const int dead = FreeLoopbackPort();
  RateRecorder recorder({.max_keys = 64});
  int64_t now_ms = 1'800'000'000'000;
  RateReporterOptions options;
  options.gateway_id = "gw-r";
  options.interval = std::chrono::milliseconds(10);
  options.rpc_timeout = std::chrono::milliseconds(5000);
  options.now_unix_ms = [&now_ms] { return now_ms; };

  SECTION("one channel per host name: rotated within ReportOnce") {
    RateReporter reporter(PlannerChannels::Create(Addresses("localhost", {dead, PortOf(live)}),
                                                  grpc::InsecureChannelCredentials()),
                          recorder, options);
    for (int i = 0; i < 10; ++i) recorder.Record(KeyId("k"));
    now_ms += 10'000;
    const Status s = reporter.ReportOnce();
    INFO(s.message);
    CHECK(s.ok);
    const RateReporterStats stats = reporter.Stats();
    CHECK(stats.failed_attempts == 1);  // the dead address, once
    CHECK(stats.reports_sent == 1);
    CHECK(stats.pending == 0);
    CHECK(live.LastSequence("gw-r") == stats.last_sequence);
  }

  SECTION("one ipv4: channel over both: gRPC sends the retry to the live replica") {
    InProcessPlanner other(Config());
    RateReporter reporter(
        PlannerChannels::Create(Addresses("127.0.0.1", {PortOf(other), PortOf(live)}),
                                grpc::InsecureChannelCredentials()),
        recorder, options);
    for (int i = 0; i < 10; ++i) recorder.Record(KeyId("k"));
    now_ms += 10'000;
    REQUIRE(reporter.ReportOnce().ok);
    const uint64_t first = reporter.Stats().last_sequence;
    CHECK(live.LastSequence("gw-r") + other.LastSequence("gw-r") == first);

    // Every report from now on must reach `live` alone: each is retried (same sequence) until
    // it is accepted there.
    other.Stop();
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 10; ++i) recorder.Record(KeyId("k"));
      now_ms += 10'000;
      REQUIRE(Eventually([&] {
        reporter.ReportOnce();
        return reporter.Stats().pending == 0;
      }));
      CHECK(live.LastSequence("gw-r") == reporter.Stats().last_sequence);
    }
    CHECK(reporter.Stats().last_sequence == first + 3);
    CHECK(reporter.Stats().dropped_reports == 0);
  }
}

}  // namespace
}  // namespace cacheroute::dataplane
