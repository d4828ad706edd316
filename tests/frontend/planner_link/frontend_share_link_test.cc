// ShareLink (tools/frontend/planner_link/share_link.h) end to end: the real planner in-process
// and two front ends' RoutingCores (the token-work rule over the same 4 destinations), each with
// its ShareLink. A keyed pick on A becomes B's memory of that key; A's work in flight shows in B's
// Router, and leaves it when A stops sharing or the planner goes away. Conditions are polled with
// a deadline (Eventually), never timed.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "support/planner_fixture.h"
#include "tests/support/eventually.h"
#include "tests/support/planner_config.h"
#include "tools/frontend/planner_link/share_link.h"
#include "tools/frontend/routing/routing_core.h"

namespace cacheroute::frontend {
namespace {

const std::vector<std::string> kNames = {"d0", "d1", "d2", "d3"};

// One front end: its routing core, sharing through `planner`.
struct FrontEnd {
  FrontEnd(testing::InProcessPlanner& planner, const std::string& id, uint64_t seed)
      : routing({.capacity = 4,
                 .dispatch = dataplane::DispatchFor("cacheroute"),
                 .seed = seed,
                 .share_placements = true},
                clock) {
    REQUIRE(routing.router().Resize(4, nullptr, clock.Now()).ok);
    link = std::make_unique<ShareLink>(
        dataplane::PlannerChannels::Create({planner.target()}, grpc::InsecureChannelCredentials()),
        routing.router(), *routing.placement_outbox(), routing.clock(), kNames,
        ShareLinkOptions{.gateway_id = id, .interval = absl::Milliseconds(5)});
    link->Start();
  }
  RequestLifecycle Route(const std::string& key) {
    RoutingInput input;
    input.key = key;
    input.prompt = {.text_bytes = 4096, .token_ids = 0};
    return routing.Route(input, nullptr, clock.Now());
  }

  dataplane::SteadyClock clock;
  RoutingCore routing;
  std::unique_ptr<ShareLink> link;
};

double RemotePrefilling(const FrontEnd& f) {
  double sum = 0;
  for (uint32_t d = 0; d < 4; ++d) sum += f.routing.router().RemoteWork(d).prefilling;
  return sum;
}

TEST_CASE("a keyed pick on one front end is the other's memory of the key, its work the other's") {
  testing::InProcessPlanner planner(testing::LoopbackPlannerConfig(kNames));
  FrontEnd a(planner, "gw-a", 1);
  FrontEnd b(planner, "gw-b", 2);
  REQUIRE(
      testing::Eventually([&] { return a.link->Stats().connected && b.link->Stats().connected; }));

  const uint64_t key = dataplane::KeyId("tenant-7");
  CHECK_FALSE(b.routing.router().Remembered(key).known());
  RequestLifecycle request = a.Route("tenant-7");
  REQUIRE(request.ok());
  const uint32_t chosen = request.destination();
  REQUIRE(a.routing.router().Remembered(key).destination == chosen);
  REQUIRE(testing::Eventually([&] { return b.routing.router().Remembered(key).known(); }));
  CHECK(b.routing.router().Remembered(key).destination == chosen);

  // The request is in flight on A: B adds it to its own view of `chosen`.
  REQUIRE(
      testing::Eventually([&] { return b.routing.router().RemoteWork(chosen).prefilling == 1; }));
  CHECK(RemotePrefilling(b) == 1);
  CHECK(b.routing.router().RemoteWork(chosen).queued_prefill_tokens > 0);
  CHECK(b.link->Stats().placements_learned >= 1);
  // A counts its batch once its write returned, which may be after B applied it.
  CHECK(testing::Eventually([&] { return a.link->Stats().placements_sent >= 1; }));
  // B has nothing in flight, so A adds nothing.
  CHECK(RemotePrefilling(a) == 0);

  SECTION("the request ends: B sees A's work go") {
    request.UpstreamDone();
    request.Finish(200);
    CHECK(testing::Eventually([&] { return RemotePrefilling(b) == 0; }));
  }
  SECTION("A stops sharing: its last batch takes its work off B at once") {
    a.link->Stop();
    CHECK(testing::Eventually([&] { return RemotePrefilling(b) == 0; }));
    CHECK(b.link->Stats().connected);
    request.UpstreamDone();
    request.Finish(200);
  }
  SECTION("the planner stops: B is on its own, no remote work, and shares again when it is back") {
    planner.Stop();
    CHECK(testing::Eventually([&] { return !b.link->Stats().connected; }));
    CHECK(RemotePrefilling(b) == 0);
    CHECK(b.link->Stats().remote_gateways == 0);
    // What B learned of the key stays (it ages out as its own memories do).
    CHECK(b.routing.router().Remembered(key).destination == chosen);
    planner.Start();
    CHECK(testing::Eventually([&] { return RemotePrefilling(b) == 1; }));
    request.UpstreamDone();
    request.Finish(200);
  }
}

TEST_CASE("a membership change re-maps the other gateway's work by name") {
  testing::InProcessPlanner planner(testing::LoopbackPlannerConfig(kNames));
  FrontEnd a(planner, "gw-a", 3);
  FrontEnd b(planner, "gw-b", 4);
  RequestLifecycle request = a.Route("tenant-9");
  REQUIRE(request.ok());
  const uint32_t chosen = request.destination();
  REQUIRE(
      testing::Eventually([&] { return b.routing.router().RemoteWork(chosen).prefilling == 1; }));
  // B's members in another order: the same name's work moves to its new index; a name B no
  // longer has carries nothing.
  std::vector<std::string> reversed(kNames.rbegin(), kNames.rend());
  b.link->SetDestinations(reversed);
  const uint32_t moved = 3 - chosen;
  CHECK(b.routing.router().RemoteWork(moved).prefilling == 1);
  CHECK(b.routing.router().RemoteWork(chosen).prefilling == 0);
  std::vector<std::string> without;
  for (const std::string& name : kNames) {
    if (name != kNames[chosen]) without.push_back(name);
  }
  b.link->SetDestinations(without);
  CHECK(RemotePrefilling(b) == 0);
  request.UpstreamDone();
  request.Finish(200);
}

}  // namespace
}  // namespace cacheroute::frontend
