// The gateway's policy by name (tools/frontend/routing/policy_factory.h), on the dataplane's
// registry: table policies have no Policy object, the others one that picks among the members;
// aliases mean the same policy.
#include <catch2/catch.hpp>
#include <set>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/routing/policy_factory.h"

namespace cacheroute::frontend {
namespace {

TEST_CASE("table policies route by Router::Pick: no Policy object") {
  dataplane::SeededRandom random(1);
  dataplane::ManualClock clock;
  for (const char* name : {"cacheroute", "cacheroute-paper"}) {
    INFO(name);
    CHECK(MakePolicy(name, 4, random, clock) == nullptr);
  }
}

TEST_CASE("the other policies pick among the members") {
  dataplane::SeededRandom random(1);
  dataplane::ManualClock clock;
  dataplane::Router router({.destination_count = 4}, random);
  for (const char* name :
       {"flat-lb", "flatlb", "sticky", "chwbl", "dualmap", "preble", "dynamo-kv", "llm-d"}) {
    INFO(name);
    const std::unique_ptr<dataplane::Policy> policy = MakePolicy(name, 4, random, clock);
    REQUIRE(policy != nullptr);
    std::set<uint32_t> picked;
    for (uint64_t key = 0; key < 200; ++key)
      picked.insert(policy->Pick(key, router.loads()).destination);
    CHECK(*picked.rbegin() < 4);
  }
}

TEST_CASE("a name the registry does not know makes no policy") {
  dataplane::SeededRandom random(1);
  dataplane::ManualClock clock;
  CHECK(MakePolicy("round-robin", 4, random, clock) == nullptr);
}

}  // namespace
}  // namespace cacheroute::frontend
