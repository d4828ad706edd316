// The policy registry: the shipped names (each its policy's own name()), the flatlb alias, the
// listing for --help, errors naming the unknown value or the missing context field, table
// policies' dispatch rules, the entries' traits against what each policy does, and a policy added
// by one registration.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/kv_event_index.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"

namespace cacheroute::dataplane {
namespace {

class EvenLoads final : public LoadView {
 public:
  explicit EvenLoads(uint32_t n) : n_(n) {}
  uint32_t size() const override { return n_; }
  double Load(uint32_t) const override { return 0; }
  bool Up(uint32_t) const override { return true; }

 private:
  uint32_t n_;
};

TEST_CASE("the shipped policies, each created under its own name") {
  const PolicyRegistry& registry = BuiltinPolicies();
  CHECK(registry.Names() == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap",
                                                     "preble", "dynamo-kv", "llm-d", "cacheroute",
                                                     "cacheroute-paper", "prefix-hash",
                                                     "llm-d-precise", "dynamo-kv-exact"});
  SeededRandom random(1);
  ManualClock clock;
  Router router({.destination_count = 4}, random);
  KvEventIndex kv_events({.destinations = 4, .blocks_per_destination = 64});
  const PolicyContext context{.destinations = 4,
                              .random = &random,
                              .router = &router,
                              .clock = &clock,
                              .kv_events = &kv_events};
  const EvenLoads loads(4);
  for (const std::string& name : registry.Names()) {
    INFO(name);
    Result<std::unique_ptr<Policy>> policy = registry.Create(name, context);
    REQUIRE(policy.ok());
    // The table policies share CacheRoutePolicy, whose name is the table's.
    CHECK((*policy)->name() == (name == "cacheroute-paper" ? "cacheroute" : name));
    CHECK((*policy)->Pick(7, loads).destination < 4);
  }
}

TEST_CASE("flatlb is an alias of flat-lb, accepted everywhere a name is") {
  const PolicyRegistry& registry = BuiltinPolicies();
  REQUIRE(registry.Find("flatlb") != nullptr);
  CHECK(registry.Find("flatlb") == registry.Find("flat-lb"));
  CHECK(registry.Canonical("flatlb") == "flat-lb");
  CHECK(registry.Check("flatlb").ok);
  SeededRandom random(1);
  Result<std::unique_ptr<Policy>> policy = registry.Create("flatlb", {.random = &random});
  REQUIRE(policy.ok());
  CHECK((*policy)->name() == "flat-lb");
}

TEST_CASE("the listing has one line per policy and alias, with its description") {
  const std::string listing = BuiltinPolicies().Listing();
  CHECK(std::count(listing.begin(), listing.end(), '\n') == 13);
  CHECK(listing.find("  flat-lb ") != std::string::npos);
  CHECK(listing.find("power of two choices") != std::string::npos);
  CHECK(listing.find("  flatlb ") != std::string::npos);
  CHECK(listing.find("the same as flat-lb") != std::string::npos);
  CHECK(BuiltinPolicies().Known() ==
        "flat-lb, sticky, chwbl, dualmap, preble, dynamo-kv, llm-d, cacheroute, cacheroute-paper, "
        "prefix-hash, llm-d-precise, dynamo-kv-exact; alias flatlb for flat-lb");
}

TEST_CASE("errors name the unknown policy, the missing context field, the bad parameter") {
  const PolicyRegistry& registry = BuiltinPolicies();
  Result<std::unique_ptr<Policy>> unknown = registry.Create("round-robin", {});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message ==
        "unknown policy \"round-robin\" (one of flat-lb, sticky, chwbl, dualmap, preble, "
        "dynamo-kv, llm-d, cacheroute, cacheroute-paper, prefix-hash, llm-d-precise, "
        "dynamo-kv-exact; alias flatlb for "
        "flat-lb)");
  CHECK(registry.Check("round-robin").message == unknown.status().message);
  CHECK(registry.Find("round-robin") == nullptr);
  CHECK(registry.Canonical("round-robin").empty());

  Result<std::unique_ptr<Policy>> no_random = registry.Create("chwbl", {.destinations = 3});
  REQUIRE_FALSE(no_random.ok());
  CHECK(no_random.status().message == "policy chwbl needs context.random");
  CHECK(registry.Create("sticky", {}).ok());  // no destinations: a policy that finds none
  CHECK(registry.Create("cacheroute", {}).status().message ==
        "policy cacheroute needs context.router");

  SeededRandom random(1);
  CHECK(registry.Create("dynamo-kv", {.destinations = 3, .random = &random}).status().message ==
        "policy dynamo-kv needs context.clock");
  ManualClock clock;
  CHECK(registry.Create("llm-d-precise", {.destinations = 3, .random = &random, .clock = &clock})
            .status()
            .message == "policy llm-d-precise needs context.kv_events");
  CHECK(registry.Create("dynamo-kv-exact", {.destinations = 3, .random = &random, .clock = &clock})
            .status()
            .message == "policy dynamo-kv-exact needs context.kv_events");
  PolicyContext bad{.destinations = 3, .random = &random};
  bad.parameters.preble_overload_factor = 0;
  Result<std::unique_ptr<Policy>> preble = registry.Create("preble", bad);
  REQUIRE_FALSE(preble.ok());
  CHECK(preble.status().message.find("preble_overload_factor") != std::string::npos);
}

TEST_CASE("table policies carry their dispatch rule; others use the Router's defaults") {
  const PolicyRegistry& registry = BuiltinPolicies();
  CHECK(registry.Find("cacheroute")->uses_table);
  CHECK(registry.Find("cacheroute-paper")->uses_table);
  CHECK_FALSE(registry.Find("flat-lb")->uses_table);
  CHECK(DispatchFor("cacheroute").rule == DispatchRule::kTokenWork);
  CHECK(DispatchFor("cacheroute-paper").rule == DispatchRule::kPaper);
  CHECK(DispatchFor("sticky").rule == DispatchOptions{}.rule);
}

// A view of `n` idle destinations with the token-work signals, where only active tokens differ.
class ActiveTokensView final : public LoadView {
 public:
  ActiveTokensView(uint32_t n, bool active) : n_(n), active_(active) {}
  uint32_t size() const override { return n_; }
  double Load(uint32_t) const override { return 0; }
  bool Up(uint32_t) const override { return true; }
  bool HasWork() const override { return true; }
  DestinationWork Work(uint32_t d) const override {
    return {.active_tokens = active_ && d % 2 == 0 ? 50000.0 : 0.0};
  }

 private:
  uint32_t n_;
  bool active_;
};

TEST_CASE(
    "the traits say which policies are built for a count, read active tokens, read KV events") {
  const PolicyRegistry& registry = BuiltinPolicies();
  std::vector<std::string> per_count, active, scraped;
  for (const PolicyInfo& info : registry.entries()) {
    if (info.rebuild_when_count_changes) per_count.push_back(info.name);
    if (info.reads_active_tokens) active.push_back(info.name);
    if (info.reads_scraped_metrics) scraped.push_back(info.name);
  }
  CHECK(per_count == std::vector<std::string>{"sticky", "chwbl", "dualmap", "dynamo-kv", "llm-d",
                                              "prefix-hash", "llm-d-precise", "dynamo-kv-exact"});
  // dynamo-kv counts its own requests' distinct blocks (DynamoActiveBlocks), not the ledger's.
  CHECK(active.empty());
  CHECK(scraped == std::vector<std::string>{"llm-d", "llm-d-precise"});
  std::vector<std::string> events;
  for (const PolicyInfo& info : registry.entries()) {
    if (info.reads_kv_events) events.push_back(info.name);
  }
  CHECK(events == std::vector<std::string>{"llm-d-precise", "dynamo-kv-exact"});

  // What the traits claim, policy by policy: one built for 2 destinations never leaves [0, 2) of a
  // wider fleet exactly when it is to be rebuilt; its picks change with active tokens alone
  // exactly when it reads them.
  ManualClock clock;
  for (const PolicyInfo& info : registry.entries()) {
    INFO(info.name);
    SeededRandom random_a(7), random_b(7);
    Router router_a({.destination_count = 4, .dispatch = info.dispatch}, random_a);
    Router router_b({.destination_count = 4, .dispatch = info.dispatch}, random_b);
    KvEventIndex events_a({.destinations = 2, .blocks_per_destination = 64});
    KvEventIndex events_b({.destinations = 2, .blocks_per_destination = 64});
    Result<std::unique_ptr<Policy>> a = registry.Create(info.name, {.destinations = 2,
                                                                    .random = &random_a,
                                                                    .router = &router_a,
                                                                    .clock = &clock,
                                                                    .kv_events = &events_a});
    Result<std::unique_ptr<Policy>> b = registry.Create(info.name, {.destinations = 2,
                                                                    .random = &random_b,
                                                                    .router = &router_b,
                                                                    .clock = &clock,
                                                                    .kv_events = &events_b});
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    const ActiveTokensView idle(4, false), busy(4, true);
    bool beyond_count = false, moved_by_active = false;
    for (uint64_t k = 0; k < 200; ++k) {
      const std::vector<uint64_t> hashes = {Mix64(3 * k + 1), Mix64(3 * k + 2), Mix64(3 * k + 3)};
      const PickRequest request{
          .key_id = Mix64(k + 1), .prompt_tokens = 100, .block_hashes = hashes};
      const uint32_t without = (*a)->Route(request, idle).destination;
      const uint32_t with = (*b)->Route(request, busy).destination;
      beyond_count = beyond_count || without >= 2;
      moved_by_active = moved_by_active || without != with;
    }
    CHECK(beyond_count == !info.rebuild_when_count_changes);
    CHECK(moved_by_active == info.reads_active_tokens);
  }
}

TEST_CASE("a policy is added by one registration; names and aliases stay unique") {
  PolicyRegistry registry = BuiltinPolicies();
  const Status added =
      registry.Register({.name = "first",
                         .description = "always destination 0",
                         .make = [](const PolicyContext&) -> Result<std::unique_ptr<Policy>> {
                           class First final : public Policy {
                            public:
                             std::string_view name() const override { return "first"; }
                             Decision Pick(uint64_t, const LoadView&) override {
                               return {0, false, Reason::kPolicy};
                             }
                           };
                           return std::unique_ptr<Policy>(std::make_unique<First>());
                         }});
  REQUIRE(added.ok);
  Result<std::unique_ptr<Policy>> first = registry.Create("first", {});
  REQUIRE(first.ok());
  CHECK((*first)->Pick(9, EvenLoads(3)).destination == 0);
  CHECK(registry.Listing().find("always destination 0") != std::string::npos);
  CHECK(BuiltinPolicies().Find("first") == nullptr);  // a copy: the built-in list is unchanged

  CHECK_FALSE(
      registry
          .Register(
              {.name = "sticky", .description = "again", .make = registry.Find("sticky")->make})
          .ok);
  CHECK_FALSE(registry
                  .Register({.name = "flatlb",
                             .description = "clash with the alias",
                             .make = registry.Find("sticky")->make})
                  .ok);
  CHECK_FALSE(registry.Register({.name = "no-factory", .description = "none"}).ok);
  CHECK_FALSE(registry.AddAlias("ch", "no-such-policy").ok);
  CHECK(registry.AddAlias("ch", "chwbl").ok);
  CHECK(registry.Canonical("ch") == "chwbl");
}

}  // namespace
}  // namespace cacheroute::dataplane
