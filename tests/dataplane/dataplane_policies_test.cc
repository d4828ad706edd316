// The routing policies: flat-LB picks the lighter of two, sticky is stable and spreads keys,
// CHWBL never exceeds its bound, DualMap and Preble keep keys warm until load says otherwise,
// the Dynamo-style KV router and the llm-d-style scorer follow their published formulas,
// CacheRoute follows the table; no policy ever picks a down destination.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "tests/support/fake_loads.h"

namespace cacheroute::dataplane {
namespace {

using testing::FakeLoads;

std::vector<uint64_t> Blocks(uint64_t seed, size_t n) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(Mix64(seed * 1000 + i));
  return out;
}

uint64_t Key(int i) { return KeyId("key-" + std::to_string(i)); }

TEST_CASE("Flat-LB picks the lighter of two random destinations", "[policies]") {
  SeededRandom random(11);
  FlatLbPolicy policy(random);
  FakeLoads loads(3);
  loads.load = {0, 1, 2};
  // The pairs {0,1}, {0,2}, {1,2} are equally likely: 0 wins two of them, 1 one, 2 none.
  std::vector<int> count(3, 0);
  constexpr int kPicks = 30000;
  for (int i = 0; i < kPicks; ++i) ++count[policy.Pick(Key(i), loads).destination];
  CHECK(count[2] == 0);
  CHECK(count[0] == Approx(kPicks * 2.0 / 3).epsilon(0.03));
  CHECK(count[1] == Approx(kPicks * 1.0 / 3).epsilon(0.05));

  FakeLoads two(2);
  two.load = {5, 1};
  for (int i = 0; i < 100; ++i) CHECK(policy.Pick(Key(i), two).destination == 1);
  two.up[1] = false;
  for (int i = 0; i < 100; ++i) CHECK(policy.Pick(Key(i), two).destination == 0);
}

TEST_CASE("Sticky is stable and spreads keys evenly", "[policies]") {
  constexpr uint32_t kDestinations = 30;
  constexpr int kKeys = 100000;
  StickyPolicy policy(kDestinations);
  FakeLoads loads(kDestinations);
  std::vector<uint32_t> first(kKeys);
  std::vector<double> count(kDestinations, 0);
  for (int i = 0; i < kKeys; ++i) {
    first[i] = policy.Pick(Key(i), loads).destination;
    ++count[first[i]];
  }
  // Load does not matter to sticky, and a second policy instance agrees.
  loads.load[first[0]] = 1000;
  StickyPolicy again(kDestinations);
  for (int i = 0; i < kKeys; i += 97) {
    REQUIRE(policy.Pick(Key(i), loads).destination == first[i]);
    REQUIRE(again.Pick(Key(i), loads).destination == first[i]);
  }
  // Spread: with 160 virtual nodes each destination owns about 1/R of the ring, within ~8%
  // (1/sqrt(160)). The chi-square statistic against uniform is dominated by that arc variance, so
  // bound it at what 160 vnodes allow (a single hot bucket would be far above).
  const double mean = static_cast<double>(kKeys) / kDestinations;
  double chi_square = 0;
  for (double c : count) chi_square += (c - mean) * (c - mean) / mean;
  const double max = *std::max_element(count.begin(), count.end());
  const double min = *std::min_element(count.begin(), count.end());
  std::cout << "sticky spread: chi-square " << chi_square << " (df 29), max/mean " << max / mean
            << ", min/mean " << min / mean << "\n";
  CHECK(chi_square < 30 * mean * 0.15 * 0.15);  // relative standard deviation below 15%
  CHECK(max < 1.35 * mean);
  CHECK(min > 0.65 * mean);

  // A down destination moves only its own keys.
  const uint32_t down = 7;
  loads.up[down] = false;
  for (int i = 0; i < kKeys; i += 13) {
    const uint32_t d = policy.Pick(Key(i), loads).destination;
    if (first[i] == down) {
      CHECK(d != down);
    } else {
      REQUIRE(d == first[i]);
    }
  }
}

TEST_CASE("CHWBL never exceeds ceil((1 + eps) * mean load)", "[policies]") {
  constexpr uint32_t kDestinations = 10;
  SeededRandom random(12);
  ChwblPolicy policy(kDestinations, random);
  StickyPolicy sticky(kDestinations);
  FakeLoads loads(kDestinations);

  // Idle fleet: CHWBL is plain consistent hashing.
  for (int i = 0; i < 200; ++i) {
    CHECK(policy.Pick(Key(i), loads).destination == sticky.Pick(Key(i), loads).destination);
  }

  // A skewed stream (a few hot keys get most requests) with requests completing at random: after
  // every placement the chosen destination holds at most the capacity computed before it.
  std::mt19937_64 rng(13);
  std::vector<std::vector<int>> outstanding(kDestinations);
  int spilled = 0;
  for (int step = 0; step < 20000; ++step) {
    const int key = rng() % 10 < 7 ? static_cast<int>(rng() % 3) : static_cast<int>(rng() % 1000);
    const double capacity = policy.Capacity(loads);
    const uint32_t d = policy.Pick(Key(key), loads).destination;
    REQUIRE(d < kDestinations);
    loads.load[d] += 1;
    REQUIRE(loads.load[d] <= capacity);
    if (d != sticky.Pick(Key(key), loads).destination) ++spilled;
    if (rng() % 2 == 0) {  // one random request completes
      const uint32_t c = static_cast<uint32_t>(rng() % kDestinations);
      if (loads.load[c] > 0) loads.load[c] -= 1;
    }
    if (step == 10000) loads.up[3] = false;
    if (!loads.up[3]) REQUIRE(d != 3);
  }
  CHECK(spilled > 0);  // the hot keys did hit the bound
}

TEST_CASE("DualMap prefers the warm candidate until its queue is too long", "[policies]") {
  constexpr uint32_t kDestinations = 8;
  SeededRandom random(14);
  DualMapPolicy policy(kDestinations, random, /*queue_bound=*/4.0);
  FakeLoads loads(kDestinations);
  const uint64_t key = Key(1);
  auto [first, second] = policy.Candidates(key);
  REQUIRE(first != second);
  REQUIRE(first < kDestinations);
  REQUIRE(second < kDestinations);

  CHECK(policy.Pick(key, loads).destination == first);
  loads.load[first] = 4;  // at the bound: still warm
  CHECK(policy.Pick(key, loads).destination == first);
  loads.load[first] = 5;  // over the bound, and the other candidate is lighter
  CHECK(policy.Pick(key, loads).destination == second);
  loads.load[first] = 0;  // the key now lives on `second`, which is under the bound: it stays
  CHECK(policy.Pick(key, loads).destination == second);
  loads.load[second] = 9;
  CHECK(policy.Pick(key, loads).destination == first);
  loads.load[first] = 20;  // both over the bound: the lighter
  CHECK(policy.Pick(key, loads).destination == second);

  loads.up[first] = false;
  loads.up[second] = false;
  for (int i = 0; i < 50; ++i) {
    const uint32_t d = policy.Pick(key, loads).destination;
    CHECK(d != first);
    CHECK(d != second);
  }
  loads.up[second] = true;
  CHECK(policy.Pick(key, loads).destination == second);

  // Keys spread across the fleet through their first candidates.
  std::vector<int> count(kDestinations, 0);
  DualMapPolicy fresh(kDestinations, random);
  FakeLoads idle(kDestinations);
  for (int i = 0; i < 8000; ++i) ++count[fresh.Pick(Key(i), idle).destination];
  for (int c : count) CHECK(c > 800);
}

TEST_CASE("Preble keeps a key where it went until that destination is overloaded", "[policies]") {
  constexpr uint32_t kDestinations = 4;
  SeededRandom random(15);
  PreblePolicy policy(random);
  FakeLoads loads(kDestinations);
  loads.load = {3, 1, 2, 2};
  const uint64_t key = Key(1);

  CHECK(policy.Pick(key, loads).destination == 1);  // new key: least loaded
  loads.load = {1, 3, 2, 2};                        // mean 2: 3 <= 1.5 · 2, stays
  CHECK(policy.Pick(key, loads).destination == 1);
  loads.load = {1, 4, 2, 1};  // mean 2: 4 > 3, moves to the least loaded (0 or 3)
  const uint32_t moved = policy.Pick(key, loads).destination;
  CHECK((moved == 0 || moved == 3));
  loads.load = {2, 1, 2, 2};
  loads.load[moved] = 2.5;  // the new home is remembered: 2.5 <= 1.5 · 1.875
  CHECK(policy.Pick(key, loads).destination == moved);
  loads.up[moved] = false;  // down: re-placed on the least loaded up destination
  CHECK(policy.Pick(key, loads).destination == 1);

  // Idle fleet: new keys do not all pile onto destination 0.
  FakeLoads idle(kDestinations);
  std::vector<int> count(kDestinations, 0);
  PreblePolicy fresh(random);
  for (int i = 0; i < 4000; ++i) ++count[fresh.Pick(Key(i), idle).destination];
  for (int c : count) CHECK(c > 800);
}

TEST_CASE(
    "Dynamo-style KV router: least prefill + distinct active blocks, its own sends as overlap",
    "[policies]") {
  SeededRandom random(19);
  ManualClock clock;
  DynamoKvPolicy policy(3, random, clock, {.overlap_score_weight = 1});  // Dynamo's default
  CHECK(policy.name() == "dynamo-kv");
  FakeLoads loads(3);
  loads.has_work = true;
  const std::vector<uint64_t> blocks = Blocks(1, 10);
  const PickRequest request{.key_id = Key(1), .prompt_tokens = 160, .block_hashes = blocks};
  // Nothing sent yet: every destination costs 160/16 prefill + 0 active + 10 new blocks.
  const Decision first = policy.Route(request, loads);
  REQUIRE(first.destination < 3);
  CHECK(first.expected_uncached_tokens == 160);
  const uint32_t warm = first.destination;
  PolicyTicket first_ticket = policy.Ticket(first);
  CHECK(policy.in_flight() == 1);
  // Its own send is the overlap, its blocks already active there: 0 + 10 + 0 against 10 + 0 + 10.
  const Decision again = policy.Route(request, loads);
  CHECK(again.destination == warm);
  CHECK(again.expected_uncached_tokens == 1);
  CHECK(again.expected == CacheExpectation::kPrefix);
  PolicyTicket again_ticket = policy.Ticket(again);
  // The ledger's active tokens are not what it counts: its own requests' blocks are.
  loads.work[warm].active_tokens = 1e6;
  CHECK(policy.Route(request, loads).destination == warm);
  // 200 tokens of prefill queued there: 12.5 + 10 + 0 against 20 elsewhere.
  loads.work[warm].queued_prefill_tokens = 200;
  const Decision away = policy.Route(request, loads);
  CHECK(away.destination != warm);
  policy.Ticket(away).End();
  // Tickets end their requests, once; entries expire 120 s after the last send.
  first_ticket.End();
  first_ticket.End();
  again_ticket.End();
  CHECK(policy.in_flight() == 1);  // the Route above without a ticket
  clock.Advance(std::chrono::seconds(121));
  CHECK(policy.Route(request, loads).expected_uncached_tokens == 160);
}

TEST_CASE("Dynamo-style KV router: in-flight siblings share their prefix's blocks", "[policies]") {
  SeededRandom random(23);
  ManualClock clock;
  DynamoKvPolicy policy(2, random, clock, {.overlap_score_weight = 1});
  FakeLoads loads(2);
  loads.has_work = true;
  // Three siblings: 100 blocks (1600 tokens) each, the first 90 shared.
  const std::vector<uint64_t> prefix = Blocks(7, 90);
  std::vector<std::vector<uint64_t>> siblings;
  for (uint64_t s = 0; s < 3; ++s) {
    siblings.push_back(prefix);
    for (uint64_t b : Blocks(100 + s, 10)) siblings.back().push_back(b);
  }
  auto sibling = [&](int s) {
    return PickRequest{.key_id = Key(7), .prompt_tokens = 1600, .block_hashes = siblings[s]};
  };
  loads.up = {true, false};
  PolicyTicket a = policy.Ticket(policy.Route(sibling(0), loads));
  loads.up = {true, true};
  // At 0: 160/16 new prefill + 100 active + 10 new blocks = 120; at 1: 100 + 0 + 100 = 200.
  const Decision b = policy.Route(sibling(1), loads);
  CHECK(b.destination == 0);
  PolicyTicket b_ticket = policy.Ticket(b);
  // Two siblings in flight at the warm worker: 10 + 110 distinct + 10 = 130 against 200. Counted as
  // two prompts in flight (3200 tokens as the ledger has them, 200 blocks), the cold one would win.
  loads.work[0].active_tokens = 3200;
  const Decision c = policy.Route(sibling(2), loads);
  CHECK(c.destination == 0);
  CHECK(c.expected_uncached_tokens == 160);
}

TEST_CASE("Dynamo-style KV router: a request's blocks already active are not charged",
          "[policies]") {
  SeededRandom random(29);
  ManualClock clock;
  // No prefill term: cost = distinct active blocks + the request's blocks not among them.
  DynamoKvPolicy policy(2, random, clock, {.overlap_score_weight = 0});
  FakeLoads loads(2);
  const std::vector<uint64_t> x = Blocks(1, 100), y = Blocks(2, 50);
  loads.up = {true, false};
  PolicyTicket on_0 = policy.Ticket(policy.Route({.key_id = Key(1), .block_hashes = x}, loads));
  loads.up = {false, true};
  PolicyTicket on_1 = policy.Ticket(policy.Route({.key_id = Key(2), .block_hashes = y}, loads));
  loads.up = {true, true};
  // x again: 100 + 0 at 0 against 50 + 100 at 1 (charged its blocks again, 0 would cost 200).
  PolicyTicket again = policy.Ticket(policy.Route({.key_id = Key(1), .block_hashes = x}, loads));
  CHECK(policy.in_flight() == 3);
  // Once x's two requests end, 0 holds nothing: a new 60-block request costs 60 there, 110 at 1.
  on_0.End();
  again.End();
  CHECK(policy.Route({.key_id = Key(3), .block_hashes = Blocks(3, 60)}, loads).destination == 0);
}

TEST_CASE("Dynamo-style KV router: requests never ended stop counting after the expiry",
          "[policies]") {
  SeededRandom random(31);
  ManualClock clock;
  DynamoKvPolicy policy(2, random, clock, {.request_expiry = std::chrono::seconds(300)});
  FakeLoads loads(2);
  (void)policy.Route({.key_id = Key(1), .block_hashes = Blocks(1, 10)}, loads);
  clock.Advance(std::chrono::seconds(200));
  (void)policy.Route({.key_id = Key(2), .block_hashes = Blocks(2, 10)}, loads);
  clock.Advance(std::chrono::seconds(101));
  (void)policy.Route({.key_id = Key(3), .block_hashes = Blocks(3, 10)}, loads);
  CHECK(policy.in_flight() == 2);  // the first expired; the second has 99 s to go
}

TEST_CASE("Dynamo-style KV router: temperature samples the softmax of normalised costs",
          "[policies]") {
  SeededRandom random(37);
  ManualClock clock;
  auto frequencies = [&](double temperature) {
    DynamoKvPolicy policy(3, random, clock,
                          {.overlap_score_weight = 0, .temperature = temperature});
    FakeLoads loads(3);
    // 10 blocks in flight at 1, 20 at 2: a fresh 10-block request costs 10, 20, 30.
    loads.up = {false, true, false};
    PolicyTicket at_1 = policy.Ticket(policy.Route({.block_hashes = Blocks(1, 10)}, loads));
    loads.up = {false, false, true};
    PolicyTicket at_2 = policy.Ticket(policy.Route({.block_hashes = Blocks(2, 20)}, loads));
    loads.up = {true, true, true};
    std::vector<int> count(3, 0);
    constexpr int kPicks = 20000;
    for (int i = 0; i < kPicks; ++i) {
      const Decision d = policy.Route({.block_hashes = Blocks(10 + i, 10)}, loads);
      policy.Ticket(d).End();
      ++count[d.destination];
    }
    std::vector<double> share;
    for (int c : count) share.push_back(static_cast<double>(c) / kPicks);
    return share;
  };
  CHECK(frequencies(0) == std::vector<double>{1, 0, 0});
  // Normalised costs 0, 0.5, 1 at temperature 1: weights 1, e^-0.5, e^-1.
  const std::vector<double> share = frequencies(1.0);
  const double total = 1 + std::exp(-0.5) + std::exp(-1.0);
  CHECK(share[0] == Approx(1 / total).margin(0.015));
  CHECK(share[1] == Approx(std::exp(-0.5) / total).margin(0.015));
  CHECK(share[2] == Approx(std::exp(-1.0) / total).margin(0.015));
}

TEST_CASE("llm-d-style scorer: prefix 3, queue 2, KV utilisation 2", "[policies]") {
  SeededRandom random(20);
  ManualClock clock;
  LlmdPolicy policy(3, random, clock);
  CHECK(policy.name() == "llm-d");
  FakeLoads loads(3);
  const std::vector<uint64_t> blocks = Blocks(2, 300);  // only the first 256 are scored
  const PickRequest request{.key_id = Key(2), .prompt_tokens = 4800, .block_hashes = blocks};
  // No prefix anywhere. Waiting {2, 0, 1}, KV usage {0.5, 0.5, 0.1}:
  // 0 + 0 + 1 = 1, 0 + 2 + 1 = 3, 0 + 1 + 1.8 = 2.8.
  loads.scraped = {{2, 0.5}, {0, 0.5}, {1, 0.1}};
  const Decision first = policy.Route(request, loads);
  CHECK(first.destination == 1);
  CHECK(first.expected_uncached_tokens == 4800);
  // The same prompt: 3 · 256/256 more for 1.
  CHECK(policy.Route(request, loads).destination == 1);
  // A long queue there does not outweigh the prefix: 3 + 0 + 1.8 against 0 + 2 + 1.8 ...
  loads.scraped = {{0, 0.1}, {10, 0.1}, {0, 0.1}};
  const Decision stay = policy.Route(request, loads);
  CHECK(stay.destination == 1);
  CHECK(stay.expected_uncached_tokens == 4800 - 256 * 16);
  // ... a full KV cache as well does: 3 + 0 + 0 against 3.8.
  loads.scraped[1].kv_usage = 1.0;
  CHECK(policy.Route(request, loads).destination != 1);
  // Ties go to a random one of the tied destinations.
  LlmdPolicy fresh(3, random, clock);
  FakeLoads idle(3);
  std::vector<int> count(3, 0);
  for (int i = 0; i < 300; ++i) {
    ++count[fresh
                .Route({.key_id = Key(i), .prompt_tokens = 16, .block_hashes = Blocks(100 + i, 1)},
                       idle)
                .destination];
  }
  for (int c : count) CHECK(c > 60);
}

TEST_CASE("llm-d-style scorer: the prefix index holds what the engines' KV holds", "[policies]") {
  SeededRandom random(21);
  ManualClock clock;
  FakeLoads loads(1);
  auto route = [&](LlmdPolicy& policy, uint64_t seed) {
    return policy.Route({.key_id = Key(1), .prompt_tokens = 32, .block_hashes = Blocks(seed, 2)},
                        loads);
  };
  // Nothing reported: the plugin's fixed default.
  LlmdPolicy unknown(1, random, clock);
  (void)route(unknown, 1);
  CHECK(unknown.index_blocks_per_server() == 31250);
  // An engine of 4 blocks (64 tokens): two 2-block prompts fit; a third evicts the first.
  loads.scraped[0].kv_capacity_tokens = 64;
  LlmdPolicy tuned(1, random, clock);
  (void)route(tuned, 1);
  CHECK(tuned.index_blocks_per_server() == 4);
  (void)route(tuned, 2);
  CHECK(route(tuned, 1).expected == CacheExpectation::kPrefix);
  (void)route(tuned, 2);
  (void)route(tuned, 3);
  CHECK(route(tuned, 1).expected == CacheExpectation::kTemplate);
  // With auto_tune off, the fixed size whatever the engines report.
  LlmdPolicy fixed(1, random, clock, {.lru_blocks_per_server = 1000, .auto_tune = false});
  (void)route(fixed, 1);
  CHECK(fixed.index_blocks_per_server() == 1000);
}

TEST_CASE("CacheRoute policy follows the router's table and its fallbacks", "[policies]") {
  SeededRandom random(16);
  ManualClock clock;
  Router router({.destination_count = 4, .table_ttl = std::chrono::seconds(5)}, random);
  CacheRoutePolicy policy(router, clock);
  FakeLoads loads(4);
  CHECK(policy.Pick(Key(1), loads).reason == Reason::kNoTable);

  auto table = RoutingTable::Build({1, 1}, 4, std::vector<double>(4, 0.0),
                                   std::vector<TableEntry>{{Key(1), {1, 3}}});
  REQUIRE(table.ok());
  REQUIRE(router.Install(std::make_shared<const RoutingTable>(*std::move(table)), clock.Now()).ok);
  Decision d = policy.Pick(Key(1), loads);
  CHECK(d.planned);
  CHECK(d.destination == 1);
  loads.load[1] = 2;  // the policy reads the caller's loads, not the router's in-flight counts
  CHECK(policy.Pick(Key(1), loads).destination == 3);
  CHECK(policy.Pick(Key(2), loads).reason == Reason::kNotAdmitted);
  clock.Advance(std::chrono::seconds(6));
  CHECK(policy.Pick(Key(1), loads).reason == Reason::kStale);
  CHECK(router.Stats(clock.Now()).planned == 2);
}

TEST_CASE("No policy picks a down destination", "[policies]") {
  constexpr uint32_t kDestinations = 6;
  SeededRandom random(17);
  ManualClock clock;
  Router router({.destination_count = kDestinations}, random);
  std::vector<TableEntry> entries;
  for (int i = 0; i < 50; ++i) entries.push_back({Key(i), {static_cast<uint32_t>(i % 6)}});
  auto table =
      RoutingTable::Build({1, 1}, kDestinations, std::vector<double>(kDestinations, 0.0), entries);
  REQUIRE(table.ok());
  REQUIRE(router.Install(std::make_shared<const RoutingTable>(*std::move(table)), clock.Now()).ok);

  std::vector<std::unique_ptr<Policy>> policies;
  policies.push_back(std::make_unique<FlatLbPolicy>(random));
  policies.push_back(std::make_unique<StickyPolicy>(kDestinations));
  policies.push_back(std::make_unique<ChwblPolicy>(kDestinations, random));
  policies.push_back(std::make_unique<DualMapPolicy>(kDestinations, random));
  policies.push_back(std::make_unique<PreblePolicy>(random));
  policies.push_back(std::make_unique<CacheRoutePolicy>(router, clock));
  policies.push_back(std::make_unique<DynamoKvPolicy>(kDestinations, random, clock));
  policies.push_back(std::make_unique<LlmdPolicy>(kDestinations, random, clock));

  FakeLoads loads(kDestinations);
  loads.up = {true, false, true, false, false, true};
  std::mt19937_64 rng(18);
  for (auto& policy : policies) {
    INFO(policy->name());
    for (int i = 0; i < 500; ++i) {
      for (uint32_t d = 0; d < kDestinations; ++d) loads.load[d] = static_cast<double>(rng() % 5);
      const uint32_t d = policy->Pick(Key(i % 100), loads).destination;
      REQUIRE(d < kDestinations);
      REQUIRE(loads.up[d]);
    }
    FakeLoads all_down(kDestinations);
    all_down.up.assign(kDestinations, false);
    CHECK(policy->Pick(Key(1), all_down).destination == kNoDestination);
  }
}

}  // namespace
}  // namespace cacheroute::dataplane
