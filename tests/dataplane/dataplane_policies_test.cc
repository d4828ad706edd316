// The six routing policies: flat-LB picks the lighter of two, sticky is stable and spreads keys,
// CHWBL never exceeds its bound, DualMap and Preble keep keys warm until load says otherwise,
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

namespace cacheroute::dataplane {
namespace {

// A LoadView the test sets by hand, as the simulator would.
class FakeLoads final : public LoadView {
 public:
  explicit FakeLoads(uint32_t n) : load(n, 0.0), up(n, true) {}
  uint32_t size() const override { return static_cast<uint32_t>(load.size()); }
  double Load(uint32_t d) const override { return load[d]; }
  bool Up(uint32_t d) const override { return up[d]; }
  std::vector<double> load;
  std::vector<bool> up;
};

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
