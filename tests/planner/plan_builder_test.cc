// Tests for planner/plan_builder: each rule of Algorithm 1 (§3.1) as Build applies it, each input
// error, and whole plans over seeded random instances against an independent straightforward
// implementation; a reused builder against fresh ones. The pieces have tests of their own
// (plan_test, radix_sort_test, placement_test, byte_aware_test).
#include "planner/plan_builder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "tests/support/require_ok.h"

namespace cacheroute::planner {
namespace {

using Table = std::vector<std::pair<uint64_t, std::vector<uint32_t>>>;

Table TableOf(const Plan& plan) {
  Table table;
  for (size_t i = 0; i < plan.size(); ++i) {
    auto d = plan.destinations(i);
    table.emplace_back(plan.key(i), std::vector<uint32_t>(d.begin(), d.end()));
  }
  return table;
}

Plan MustBuild(const std::vector<KeyRate>& rates, PlanConfig config) {
  return cacheroute::testing::RequireOk(BuildPlan(rates, config));
}

std::vector<double> Loads(const Plan& plan) { return {plan.loads().begin(), plan.loads().end()}; }

// Algorithm 1 written the obvious way: comparison sort, linear scans for the least-loaded
// destinations. Same floating-point operations in the same order, so results must match exactly.
struct Reference {
  Table table;
  std::vector<double> loads;
  uint64_t slots = 0;
};

Reference ReferencePlan(std::vector<KeyRate> rates, const PlanConfig& config) {
  std::sort(rates.begin(), rates.end(), [](const KeyRate& a, const KeyRate& b) {
    return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
  });
  const uint64_t capacity = uint64_t{config.destinations} * config.slots_per_destination;
  Reference ref;
  size_t admitted = 0;
  for (; admitted < rates.size() && rates[admitted].rate > 0; ++admitted) {
    uint32_t k = AssignmentCount(rates[admitted].rate, config.q_cap, config.destinations);
    if (ref.slots + k > capacity) break;
    ref.slots += k;
  }
  double cold = 0;
  for (size_t i = admitted; i < rates.size(); ++i) cold += rates[i].rate;
  ref.loads.assign(config.destinations, cold / config.destinations);
  for (size_t i = 0; i < admitted; ++i) {
    const uint32_t k = AssignmentCount(rates[i].rate, config.q_cap, config.destinations);
    std::vector<uint32_t> order(config.destinations);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return ref.loads[a] < ref.loads[b]; });
    order.resize(k);
    const double share = k == 1 ? rates[i].rate : rates[i].rate / k;
    for (uint32_t r : order) ref.loads[r] += share;
    std::sort(order.begin(), order.end());
    ref.table.emplace_back(rates[i].key, order);
  }
  return ref;
}

TEST_CASE("keys are admitted in decreasing rate, ties by key ascending") {
  // C = 3 slots with k_b = 1 everywhere: the three hottest, with the tie at 2.0 going to key 4.
  Plan plan = MustBuild({{9, 1.0}, {7, 2.0}, {4, 2.0}, {5, 3.0}, {1, 0.5}},
                        {.destinations = 3, .q_cap = 10, .slots_per_destination = 1});
  REQUIRE(plan.size() == 3);
  CHECK(plan.key(0) == 5);
  CHECK(plan.key(1) == 4);
  CHECK(plan.key(2) == 7);
  CHECK(plan.rate(0) == 3.0);
  CHECK(plan.stats().admitted_keys == 3);
  CHECK(plan.stats().slots_used == 3);
  CHECK(plan.stats().slot_capacity == 3);
  CHECK(plan.stats().cold_tail_rate == 1.5);
}

TEST_CASE("admission stops at the first key that does not fit") {
  // C = 3. Key 1 takes 2 slots, key 2 would need 2 more: admission stops there, although key 3
  // (one slot) would still fit.
  Plan plan = MustBuild({{1, 1.5}, {2, 1.2}, {3, 0.5}},
                        {.destinations = 3, .q_cap = 1.0, .slots_per_destination = 1});
  REQUIRE(plan.size() == 1);
  CHECK(plan.key(0) == 1);
  CHECK(plan.stats().slots_used == 2);
  CHECK(plan.stats().cold_tail_rate == 1.7);
}

TEST_CASE("keys with zero rate are never admitted") {
  Plan plan = MustBuild({{1, 0.0}, {2, 4.0}, {3, -0.0}},
                        {.destinations = 2, .q_cap = 10, .slots_per_destination = 100});
  REQUIRE(plan.size() == 1);
  CHECK(plan.key(0) == 2);
  CHECK(plan.stats().input_keys == 3);
  CHECK(plan.stats().cold_tail_rate == 0.0);
}

TEST_CASE("destinations start with the cold-tail share, then LPT places the admitted keys") {
  // C = 2: keys 5.0 and 3.0 are admitted, 1.0 is the cold tail (0.5 per destination).
  // 5.0 goes to destination 0 (tie at 0.5, lowest index), 3.0 to the now lighter destination 1.
  Plan plan = MustBuild({{1, 5.0}, {2, 3.0}, {3, 1.0}},
                        {.destinations = 2, .q_cap = 10, .slots_per_destination = 1});
  REQUIRE(plan.size() == 2);
  CHECK(TableOf(plan) == Table{{1, {0}}, {2, {1}}});
  CHECK(Loads(plan) == std::vector<double>{5.5, 3.5});
  CHECK(plan.stats().cold_tail_rate == 1.0);
  CHECK(plan.stats().max_load == 5.5);
  CHECK(plan.stats().mean_load == 4.5);
  CHECK(plan.stats().imbalance == Approx(5.5 / 4.5));
}

TEST_CASE("unkeyed traffic joins the cold tail and is never admitted") {
  // As the previous case plus 3.0 of traffic no key accounts for: cold tail 4.0, 2.0 each.
  Plan plan =
      MustBuild({{1, 5.0}, {2, 3.0}, {3, 1.0}},
                {.destinations = 2, .q_cap = 10, .slots_per_destination = 1, .unkeyed_rate = 3.0});
  CHECK(TableOf(plan) == Table{{1, {0}}, {2, {1}}});
  CHECK(Loads(plan) == std::vector<double>{7.0, 5.0});
  CHECK(plan.stats().cold_tail_rate == 4.0);
  CHECK(plan.stats().total_rate == 12.0);
}

TEST_CASE("LPT puts each key on the least-loaded destinations, ties lowest index") {
  // All admitted, no cold tail, k_b = 1: 6 → d0, 5 → d1, 4 → d2, 3 → d2 (4 < 5 < 6),
  // 2 → d1 (5 < 6 < 7), 1 → d0 (6 < 7 = 7).
  Plan plan = MustBuild({{10, 6}, {11, 5}, {12, 4}, {13, 3}, {14, 2}, {15, 1}},
                        {.destinations = 3, .q_cap = 100, .slots_per_destination = 10});
  CHECK(TableOf(plan) == Table{{10, {0}}, {11, {1}}, {12, {2}}, {13, {2}}, {14, {1}}, {15, {0}}});
  CHECK(Loads(plan) == std::vector<double>{7, 7, 7});
  CHECK(plan.stats().imbalance == 1.0);
}

TEST_CASE("a replicated key gets k_b distinct destinations, each receiving rate / k_b") {
  // Key 1: 9 / 4 → k = 3, placed on the three least-loaded destinations out of four.
  Plan plan = MustBuild({{1, 9.0}, {2, 3.5}},
                        {.destinations = 4, .q_cap = 4.0, .slots_per_destination = 4});
  REQUIRE(plan.size() == 2);
  CHECK(TableOf(plan) == Table{{1, {0, 1, 2}}, {2, {3}}});
  CHECK(Loads(plan) == std::vector<double>{3, 3, 3, 3.5});
  CHECK(plan.stats().slots_used == 4);
  CHECK(plan.stats().capped_keys == 0);
}

TEST_CASE("k_b is capped at R and the capped keys are counted") {
  Plan plan = MustBuild({{1, 100.0}, {2, 1.0}},
                        {.destinations = 3, .q_cap = 10.0, .slots_per_destination = 5});
  REQUIRE(plan.size() == 2);
  CHECK(TableOf(plan) == Table{{1, {0, 1, 2}}, {2, {0}}});
  CHECK(plan.stats().capped_keys == 1);
  CHECK(plan.stats().slots_used == 4);
}

TEST_CASE("ablation: without replication every admitted key gets one destination") {
  // Key 1 (9 / 4 would give k = 3) takes one slot, so all three keys fit in 4 slots.
  Plan plan =
      MustBuild({{1, 9.0}, {2, 3.5}, {3, 1.0}},
                {.destinations = 4, .q_cap = 4.0, .slots_per_destination = 1, .replicate = false});
  CHECK(TableOf(plan) == Table{{1, {0}}, {2, {1}}, {3, {2}}});  // still LPT
  CHECK(Loads(plan) == std::vector<double>{9, 3.5, 1, 0});
  CHECK(plan.stats().slots_used == 3);
}

TEST_CASE("ablation: hashed placement is blind to load and depends only on (key, seed)") {
  std::vector<KeyRate> rates;
  for (uint64_t key = 1; key <= 200; ++key) rates.push_back({key * 7919, 1.0 + key % 5});
  rates.push_back({42, 30.0});  // k = ceil(30 / 8) = 4 with replication
  PlanConfig config{.destinations = 10,
                    .q_cap = 8.0,
                    .slots_per_destination = 100,
                    .placement = Placement::kHashed,
                    .placement_seed = 3};
  const Plan plan = MustBuild(rates, config);
  REQUIRE(plan.size() == rates.size());
  REQUIRE(plan.key(0) == 42);
  CHECK(plan.destinations(0).size() == 4);
  CHECK(std::set<uint32_t>(plan.destinations(0).begin(), plan.destinations(0).end()).size() == 4);
  CHECK(std::accumulate(plan.loads().begin(), plan.loads().end(), 0.0) ==
        Approx(plan.stats().total_rate));
  // A key's set does not depend on the other keys (no load feedback) ...
  const Plan alone = MustBuild({{42, 30.0}}, config);
  CHECK(TableOf(alone)[0] == TableOf(plan)[0]);
  // ... nor on anything but the seed, which moves it.
  CHECK(TableOf(MustBuild(rates, config)) == TableOf(plan));
  config.placement_seed = 4;
  CHECK(TableOf(MustBuild(rates, config)) != TableOf(plan));
  // Without replication the hot key keeps one destination.
  config.replicate = false;
  CHECK(MustBuild(rates, config).destinations(0).size() == 1);
  // Every destination gets some of 201 keys, unlike LPT the loads are uneven.
  CHECK(plan.stats().imbalance >
        MustBuild(rates, {.destinations = 10, .q_cap = 8.0, .slots_per_destination = 100})
            .stats()
            .imbalance);
}

TEST_CASE("an empty input gives an empty plan with zero loads") {
  Plan plan = MustBuild({}, {.destinations = 4, .q_cap = 1, .slots_per_destination = 1});
  CHECK(plan.size() == 0);
  CHECK(Loads(plan) == std::vector<double>(4, 0.0));
  CHECK(plan.stats().imbalance == 1.0);
  CHECK(plan.stats().total_rate == 0.0);
}

TEST_CASE("the slot capacity saturates instead of overflowing") {
  Plan plan =
      MustBuild({{1, 1.0}}, {.destinations = 1 << 20,
                             .q_cap = 1,
                             .slots_per_destination = std::numeric_limits<uint64_t>::max()});
  CHECK(plan.stats().slot_capacity == std::numeric_limits<uint64_t>::max());
  CHECK(plan.size() == 1);
}

TEST_CASE("build_seconds is read from the injected clock") {
  base::ManualClock clock(absl::UnixEpoch(), absl::Milliseconds(250));
  absl::StatusOr<Plan> plan =
      BuildPlan({{{1, 1.0}}}, {.destinations = 1, .q_cap = 1, .slots_per_destination = 1}, &clock);
  REQUIRE(plan.ok());
  CHECK(plan->stats().build_seconds == 0.25);
  absl::StatusOr<Plan> unclocked =
      BuildPlan({{{1, 1.0}}}, {.destinations = 1, .q_cap = 1, .slots_per_destination = 1});
  REQUIRE(unclocked.ok());
  CHECK(unclocked->stats().build_seconds == 0.0);
}

void CheckInvalid(const std::vector<KeyRate>& rates, const PlanConfig& config,
                  const std::vector<std::string>& fragments) {
  absl::StatusOr<Plan> plan = BuildPlan(rates, config);
  INFO(plan.status().ToString());
  REQUIRE(plan.status().code() == absl::StatusCode::kInvalidArgument);
  for (const std::string& fragment : fragments) {
    CHECK_THAT(std::string(plan.status().message()), Catch::Contains(fragment));
  }
}

TEST_CASE("bad input is rejected with the field and the value named") {
  const PlanConfig good{.destinations = 2, .q_cap = 1, .slots_per_destination = 1};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CheckInvalid({{1, 1}, {2, nan}}, good, {"rates[1]", "key 2", "rate", "nan"});
  CheckInvalid({{1, inf}}, good, {"rates[0]", "key 1", "rate", "inf"});
  CheckInvalid({{1, -inf}}, good, {"rates[0]", "rate", "-inf"});
  CheckInvalid({{1, 1}, {3, -0.5}}, good, {"rates[1]", "key 3", "rate", "-0.5"});
  CheckInvalid({{5, 1}, {8, 2}, {5, 3}}, good, {"duplicate key 5", "rates[0]", "rates[2]"});
  // A duplicate with equal rates, and one in an input already sorted by key.
  CheckInvalid({{5, 1}, {5, 1}}, good, {"duplicate key 5"});
  CheckInvalid({{1, 0}, {1, 0}}, good, {"duplicate key 1"});
  CheckInvalid({{1, 1}}, {.destinations = 0, .q_cap = 1, .slots_per_destination = 1},
               {"destinations", "got 0"});
  CheckInvalid({{1, 1}}, {.destinations = 2, .q_cap = 0, .slots_per_destination = 1},
               {"q_cap", "got 0"});
  CheckInvalid({{1, 1}}, {.destinations = 2, .q_cap = -2.5, .slots_per_destination = 1},
               {"q_cap", "got -2.5"});
  CheckInvalid({{1, 1}}, {.destinations = 2, .q_cap = nan, .slots_per_destination = 1},
               {"q_cap", "got nan"});
  CheckInvalid({{1, 1}}, {.destinations = 2, .q_cap = inf, .slots_per_destination = 1},
               {"q_cap", "got inf"});
  CheckInvalid({{1, 1}}, {.destinations = 2, .q_cap = 1, .slots_per_destination = 0},
               {"slots_per_destination", "got 0"});
  CheckInvalid({{1, 1}},
               {.destinations = 2, .q_cap = 1, .slots_per_destination = 1, .unkeyed_rate = -1},
               {"unkeyed_rate", "got -1"});
  CheckInvalid({{1, 1}},
               {.destinations = 2, .q_cap = 1, .slots_per_destination = 1, .unkeyed_rate = nan},
               {"unkeyed_rate", "got nan"});
}

// --- Properties over seeded random instances -----------------------------------------------

struct Instance {
  std::vector<KeyRate> rates;
  PlanConfig config;
};

Instance RandomInstance(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> keys(0, 400);
  std::uniform_int_distribution<uint32_t> dests(1, 16);
  std::uniform_int_distribution<uint64_t> slots(1, 40);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.65);
  Instance in;
  in.config.destinations = dests(rng);
  in.config.slots_per_destination = slots(rng);
  const int n = keys(rng);
  std::set<uint64_t> used;
  while (static_cast<int>(in.rates.size()) < n) {
    // Mixed key spaces: small ids (many already-sorted inputs) and full 64-bit ids.
    uint64_t key = unit(rng) < 0.5 ? rng() % 1000 : rng();
    if (!used.insert(key).second) continue;
    double rate = std::exp(normal(rng));
    const double u = unit(rng);
    if (u < 0.05)
      rate = 0;  // zero-rate keys
    else if (u < 0.15)
      rate = std::round(rate);  // ties
    else if (u < 0.18)
      rate *= 50;  // whales that need replication
    in.rates.push_back({key, rate});
  }
  if (unit(rng) < 0.3)
    std::sort(in.rates.begin(), in.rates.end(), [](auto& a, auto& b) { return a.key < b.key; });
  double total = 0;
  for (auto& kr : in.rates) total += kr.rate;
  // q_cap around the mean destination load, sometimes far below it to force capping.
  in.config.q_cap = std::max(1e-3, total / in.config.destinations * (0.02 + 1.5 * unit(rng)));
  return in;
}

TEST_CASE("properties hold on seeded random instances") {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    Instance in = RandomInstance(rng);
    INFO("seed " << seed << " keys " << in.rates.size() << " R " << in.config.destinations << " W "
                 << in.config.slots_per_destination << " q_cap " << in.config.q_cap);
    Plan plan = MustBuild(in.rates, in.config);
    const PlanStats& s = plan.stats();
    const uint32_t r_count = in.config.destinations;

    // Σk_b ≤ C, and slots_used is that sum.
    uint64_t slots = 0;
    for (size_t i = 0; i < plan.size(); ++i) slots += plan.destinations(i).size();
    CHECK(slots == s.slots_used);
    CHECK(slots <= s.slot_capacity);
    CHECK(s.admitted_keys == plan.size());

    // The admitted set is a prefix of the rate order, and the first key left out either has zero
    // rate or does not fit.
    std::vector<KeyRate> order = in.rates;
    std::sort(order.begin(), order.end(), [](const KeyRate& a, const KeyRate& b) {
      return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
    });
    for (size_t i = 0; i < plan.size(); ++i) REQUIRE(plan.key(i) == order[i].key);
    if (plan.size() < order.size()) {
      const KeyRate& next = order[plan.size()];
      const uint32_t k = AssignmentCount(next.rate, in.config.q_cap, r_count);
      CHECK((next.rate == 0 || slots + k > s.slot_capacity));
    }

    // Each key's destinations are distinct, sorted, in range; the per-assignment load is within
    // q_cap unless k_b was capped at R.
    uint64_t capped = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      auto d = plan.destinations(i);
      REQUIRE(!d.empty());
      CHECK(std::adjacent_find(d.begin(), d.end(), std::greater_equal<uint32_t>()) == d.end());
      CHECK(d.back() < r_count);
      if (plan.rate(i) / d.size() > in.config.q_cap) {
        CHECK(d.size() == r_count);
        ++capped;
      }
    }
    CHECK(capped == s.capped_keys);

    // Loads sum to the total rate.
    double total = 0, load_sum = 0;
    for (auto& kr : in.rates) total += kr.rate;
    for (double l : plan.loads()) load_sum += l;
    CHECK(load_sum == Approx(total).epsilon(1e-9).margin(1e-12));
    CHECK(s.total_rate == Approx(total).epsilon(1e-12).margin(1e-12));
    CHECK(s.cold_tail_rate + s.admitted_rate == Approx(total).epsilon(1e-12).margin(1e-12));

    // Exactly the straightforward implementation's table and loads.
    Reference ref = ReferencePlan(in.rates, in.config);
    CHECK(TableOf(plan) == ref.table);
    CHECK(Loads(plan) == ref.loads);

    // Determinism: the same input, and the same input shuffled, give the same plan bit for bit.
    Plan again = MustBuild(in.rates, in.config);
    CHECK(TableOf(again) == TableOf(plan));
    CHECK(Loads(again) == Loads(plan));
    std::vector<KeyRate> shuffled = in.rates;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    Plan permuted = MustBuild(shuffled, in.config);
    CHECK(TableOf(permuted) == TableOf(plan));
    CHECK(Loads(permuted) == Loads(plan));
    CHECK(permuted.stats().cold_tail_rate == s.cold_tail_rate);
  }
}

TEST_CASE("a larger random-id instance matches the reference") {
  // Big enough that every radix digit of the 64-bit ids and of the rates is exercised.
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> rate(0.0, 1.65);
  std::vector<KeyRate> rates(20000);
  for (size_t i = 0; i < rates.size(); ++i) rates[i] = {rng(), rate(rng)};
  const PlanConfig config{.destinations = 30, .q_cap = 1e9, .slots_per_destination = 400};
  Plan plan = MustBuild(rates, config);
  Reference ref = ReferencePlan(rates, config);
  CHECK(plan.size() == 12000);
  CHECK(TableOf(plan) == ref.table);
  CHECK(Loads(plan) == ref.loads);
}

TEST_CASE("duplicates are found at every input size, including the two-thread range") {
  // 70,000 keys take the path that searches for duplicates on a second thread; 5,000,000 the
  // single-threaded one that reuses the sort buffer.
  for (size_t n : {size_t{1000}, size_t{70000}, size_t{5000000}}) {
    std::mt19937_64 rng(n);
    std::vector<KeyRate> rates(n);
    for (size_t i = 0; i < n; ++i) rates[i] = {rng() | 1, 1.0 + static_cast<double>(i % 97)};
    INFO("n " << n);
    const PlanConfig config{.destinations = 8, .q_cap = 1e9, .slots_per_destination = 4};
    PlanBuilder builder;
    REQUIRE(builder.Build(rates, config).ok());
    rates[n - 1].key = rates[n / 3].key;
    absl::StatusOr<Plan> bad = builder.Build(rates, config);
    REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(bad.status().message()),
               Catch::Contains(absl::StrFormat("rates[%d] and rates[%d]", n / 3, n - 1)));
  }
}

TEST_CASE("a reused PlanBuilder gives the same plans as fresh ones") {
  std::mt19937_64 rng(11);
  PlanBuilder builder;
  // Sizes go up and down so the workspace is both grown and partly used; some builds fail.
  for (int round = 0; round < 40; ++round) {
    Instance in = RandomInstance(rng);
    if (round % 7 == 3 && in.rates.size() > 1) in.rates.back().key = in.rates.front().key;
    absl::StatusOr<Plan> reused = builder.Build(in.rates, in.config);
    absl::StatusOr<Plan> fresh = BuildPlan(in.rates, in.config);
    REQUIRE(reused.status() == fresh.status());
    if (!fresh.ok()) continue;
    CHECK(TableOf(*reused) == TableOf(*fresh));
    CHECK(Loads(*reused) == Loads(*fresh));
    CHECK(reused->stats().cold_tail_rate == fresh->stats().cold_tail_rate);
  }
}

TEST_CASE("long runs of tied rates are ordered by key") {
  // Integer-valued rates (counts) tie in runs far longer than the comparison-sort cutoff; within
  // a run the order is by key, in both the random 64-bit and the small-id key spaces.
  for (bool small_ids : {false, true}) {
    std::mt19937_64 rng(small_ids ? 5 : 6);
    std::vector<KeyRate> rates(3000);
    for (size_t i = 0; i < rates.size(); ++i) {
      rates[i] = {small_ids ? 3 * i + 1 : rng(), 1.0 + static_cast<double>(i % 3)};
    }
    std::shuffle(rates.begin(), rates.end(), rng);
    const PlanConfig config{.destinations = 7, .q_cap = 100, .slots_per_destination = 300};
    Plan plan = MustBuild(rates, config);
    Reference ref = ReferencePlan(rates, config);
    REQUIRE(plan.size() == 2100);
    CHECK(TableOf(plan) == ref.table);
    CHECK(Loads(plan) == ref.loads);
  }
}

}  // namespace
}  // namespace cacheroute::planner

namespace cacheroute::planner {
namespace {

// Placement hysteresis written the obvious way (see PlanConfig::stickiness): each job stays on the
// least loaded of the key's free previous destinations that remains under (1 + stickiness) × the
// mean load, else takes the least-loaded free destination (ties lowest index).
Table ReferenceSticky(std::vector<KeyRate> rates, const PlanConfig& config, const Table& previous) {
  std::sort(rates.begin(), rates.end(), [](const KeyRate& a, const KeyRate& b) {
    return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
  });
  const uint64_t capacity = uint64_t{config.destinations} * config.slots_per_destination;
  uint64_t slots = 0;
  double admitted_rate = 0;
  size_t admitted = 0;
  for (; admitted < rates.size() && rates[admitted].rate > 0; ++admitted) {
    uint32_t k = AssignmentCount(rates[admitted].rate, config.q_cap, config.destinations);
    if (slots + k > capacity) break;
    slots += k;
    admitted_rate += rates[admitted].rate;
  }
  double cold = 0;
  for (size_t i = admitted; i < rates.size(); ++i) cold += rates[i].rate;
  const double cap = (1 + config.stickiness) * ((cold + admitted_rate) / config.destinations);
  std::vector<double> loads(config.destinations, cold / config.destinations);
  Table table;
  for (size_t i = 0; i < admitted; ++i) {
    const uint32_t k = AssignmentCount(rates[i].rate, config.q_cap, config.destinations);
    std::vector<uint32_t> before;
    for (const auto& [key, set] : previous) {
      if (key == rates[i].key) before = set;
    }
    std::vector<uint32_t> chosen;
    for (uint32_t j = 0; j < k; ++j) {
      auto free = [&](uint32_t d) {
        return std::find(chosen.begin(), chosen.end(), d) == chosen.end();
      };
      const double share = rates[i].rate / k;
      uint32_t pick = config.destinations;
      for (uint32_t d : before) {
        if (d < config.destinations && free(d) && loads[d] + share <= cap &&
            (pick == config.destinations || loads[d] < loads[pick])) {
          pick = d;
        }
      }
      if (pick == config.destinations) {
        for (uint32_t d = 0; d < config.destinations; ++d) {
          if (free(d) && (pick == config.destinations || loads[d] < loads[pick])) pick = d;
        }
      }
      chosen.push_back(pick);
    }
    const double share = rates[i].rate / k;
    for (uint32_t d : chosen) loads[d] += share;
    std::sort(chosen.begin(), chosen.end());
    table.emplace_back(rates[i].key, chosen);
  }
  return table;
}

double Churn(const Table& a, const Table& b) {
  size_t moved = 0;
  for (const auto& entry : b) {  // not a structured binding: clang 14 cannot capture one
    auto it =
        std::find_if(a.begin(), a.end(), [&](const auto& e) { return e.first == entry.first; });
    if (it == a.end() || it->second != entry.second) ++moved;
  }
  return b.empty() ? 0 : static_cast<double>(moved) / b.size();
}

}  // namespace

TEST_CASE("stickiness must be finite and non-negative") {
  for (double bad :
       {-0.1, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const std::vector<KeyRate> one = {{1, 1.0}};
    absl::StatusOr<Plan> plan = BuildPlan(
        one, {.destinations = 2, .q_cap = 1, .slots_per_destination = 1, .stickiness = bad});
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(plan.status().message()).find("stickiness") != std::string::npos);
  }
}

TEST_CASE("without a previous plan, or with stickiness 0, placement is plain LPT") {
  std::mt19937_64 rng(5);
  std::lognormal_distribution<double> rate(0, 1.65);
  std::vector<KeyRate> rates;
  for (uint64_t k = 1; k <= 500; ++k) rates.push_back({k, rate(rng)});
  PlanConfig config{.destinations = 7, .q_cap = 3, .slots_per_destination = 40};
  const Plan plain = MustBuild(rates, config);
  const Plan previous =
      MustBuild(rates, {.destinations = 7, .q_cap = 1, .slots_per_destination = 9});
  config.stickiness = 0.5;
  PlanBuilder builder;
  absl::StatusOr<Plan> no_previous = builder.Build(rates, config, nullptr);
  REQUIRE(no_previous.ok());
  CHECK(TableOf(*no_previous) == TableOf(plain));
  CHECK(no_previous->stats().kept_assignments == 0);
  config.stickiness = 0;
  absl::StatusOr<Plan> zero = builder.Build(rates, config, &previous);
  REQUIRE(zero.ok());
  CHECK(TableOf(*zero) == TableOf(plain));
  CHECK(Loads(*zero) == Loads(plain));
}

TEST_CASE("with unchanged rates a sticky replan keeps every assignment") {
  std::mt19937_64 rng(6);
  std::lognormal_distribution<double> rate(0, 1.65);
  std::vector<KeyRate> rates;
  for (uint64_t k = 1; k <= 2000; ++k) rates.push_back({k * 7919, rate(rng)});
  PlanConfig config{
      .destinations = 30, .q_cap = 2, .slots_per_destination = 20, .stickiness = 0.05};
  const Plan first = MustBuild(rates, config);
  PlanBuilder builder;
  absl::StatusOr<Plan> again = builder.Build(rates, config, &first);
  REQUIRE(again.ok());
  CHECK(TableOf(*again) == TableOf(first));
  CHECK(again->stats().kept_assignments == again->stats().slots_used);
}

TEST_CASE("sticky placement matches the reference and cuts churn under noisy rates") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> base(0, 1.65);
  std::normal_distribution<double> noise(0, 0.3);
  double plain_churn = 0, sticky_churn = 0;
  constexpr int kInstances = 40;
  for (int instance = 0; instance < kInstances; ++instance) {
    // Tiny fleets too, where the hottest keys are capped at k_b = R.
    const uint32_t r = instance < 8 ? 2 + instance : 10 + instance % 21;
    std::vector<KeyRate> rates;
    double total = 0;
    for (uint64_t k = 1; k <= 500; ++k) {
      rates.push_back({k, base(rng)});
      total += rates.back().rate;
    }
    PlanConfig config{.destinations = r,
                      .q_cap = 0.8 * total / r,
                      .slots_per_destination = instance % 2 == 0 ? 64u : 8u,
                      .stickiness = 0.1};
    const Plan first = MustBuild(rates, config);
    for (KeyRate& kr : rates) kr.rate *= std::exp(noise(rng));  // a lognormal step, σ = 0.3
    PlanBuilder builder;
    absl::StatusOr<Plan> sticky = builder.Build(rates, config, &first);
    REQUIRE(sticky.ok());
    CHECK(TableOf(*sticky) == ReferenceSticky(rates, config, TableOf(first)));
    // Algorithm 1's invariants still hold.
    CHECK(sticky->stats().slots_used <= uint64_t{r} * config.slots_per_destination);
    double sum = 0;
    for (double load : sticky->loads()) sum += load;
    CHECK(sum == Approx(sticky->stats().total_rate));
    double largest_job = 0;
    for (size_t i = 0; i < sticky->size(); ++i) {
      const size_t k = sticky->destinations(i).size();
      if (k < r) CHECK(sticky->rate(i) / k <= config.q_cap * (1 + 1e-12));
      largest_job = std::max(largest_job, sticky->rate(i) / k);
    }
    // Loads above (1 + stickiness) × mean come only from LPT's own choices: at most one job
    // above the least-loaded destination's load, which is at most the mean.
    const double mean = sticky->stats().mean_load;
    CHECK(sticky->stats().max_load <=
          std::max((1 + config.stickiness) * mean, mean + largest_job) * (1 + 1e-9));
    config.stickiness = 0;
    const Plan plain = MustBuild(rates, config);
    plain_churn += Churn(TableOf(first), TableOf(plain));
    sticky_churn += Churn(TableOf(first), TableOf(*sticky));
  }
  INFO("mean churn: plain " << plain_churn / kInstances << ", sticky "
                            << sticky_churn / kInstances);
  CHECK(plain_churn / kInstances > 0.5);
  CHECK(sticky_churn < 0.5 * plain_churn);
}

TEST_CASE("warm hints keep admitted keys where they are warm while the balance allows") {
  // Eight keys of rate 1 on four destinations: the mean load is 2.
  std::vector<KeyRate> rates;
  for (uint64_t k = 1; k <= 8; ++k) rates.push_back({k, 1.0});
  const PlanConfig config{.destinations = 4, .q_cap = 10, .slots_per_destination = 10};
  PlanBuilder builder;
  // Each warm somewhere that balance allows: every key stays.
  std::vector<KeyWarmth> spread;
  for (uint64_t k = 1; k <= 8; ++k) spread.push_back({k, static_cast<uint32_t>((k * 3) % 4)});
  absl::StatusOr<Plan> plan = builder.Build(rates, config, nullptr, spread);
  REQUIRE(plan.ok());
  CHECK(plan->stats().warm_assignments == 8);
  for (size_t i = 0; i < plan->size(); ++i) {
    CHECK(plan->destinations(i)[0] == (plan->key(i) * 3) % 4);
  }
  // All warm on 0: two stay (0 reaches the mean), LPT places the rest; hints for a key that is not
  // in the rates and for a destination the fleet does not have are ignored.
  std::vector<KeyWarmth> crowded;
  for (uint64_t k = 1; k <= 8; ++k) crowded.push_back({k, 0});
  crowded.push_back({99, 1});
  crowded.push_back({8, 17});  // the key's last entry wins: out of range, so no hint for key 8
  plan = builder.Build(rates, config, nullptr, crowded);
  REQUIRE(plan.ok());
  CHECK(plan->stats().warm_assignments == 2);
  CHECK(plan->stats().max_load == Approx(2.0));
  int on_zero = 0;
  for (size_t i = 0; i < plan->size(); ++i) on_zero += plan->destinations(i)[0] == 0 ? 1 : 0;
  CHECK(on_zero == 2);
  // No hints: plain LPT, bit for bit.
  absl::StatusOr<Plan> none = builder.Build(rates, config, nullptr, {});
  REQUIRE(none.ok());
  CHECK(TableOf(*none) == TableOf(MustBuild(rates, config)));
  CHECK(none->stats().warm_assignments == 0);
}

}  // namespace cacheroute::planner

// CacheRoute's additions to Algorithm 1 (spill destinations, load-adaptive k_b): off by default,
// so every test above is the paper's algorithm bit for bit.
namespace cacheroute::planner {

TEST_CASE("spill: one destination outside the set, spread by spill load") {
  // The LPT instance above (every destination ends at 7); spills must not change it.
  PlanConfig config{.destinations = 3, .q_cap = 100, .slots_per_destination = 10};
  const std::vector<KeyRate> rates = {{10, 6}, {11, 5}, {12, 4}, {13, 3}, {14, 2}, {15, 1}};
  const Plan paper = MustBuild(rates, config);
  for (size_t i = 0; i < paper.size(); ++i) CHECK(paper.spill(i) == kNoSpill);
  config.spill = true;
  const Plan plan = MustBuild(rates, config);
  CHECK(TableOf(plan) == TableOf(paper));
  CHECK(Loads(plan) == Loads(paper));
  std::vector<double> spill_load(3, 0.0);
  for (size_t i = 0; i < plan.size(); ++i) {
    const uint32_t s = plan.spill(i);
    REQUIRE(s < 3);
    const auto set = plan.destinations(i);
    CHECK(std::find(set.begin(), set.end(), s) == set.end());
    // The chosen spill had the least spill load among the destinations outside the set.
    for (uint32_t d = 0; d < 3; ++d) {
      if (std::find(set.begin(), set.end(), d) == set.end()) CHECK(spill_load[s] <= spill_load[d]);
    }
    spill_load[s] += plan.rate(i);
  }
  // Spill load ends within the largest key's rate of even.
  const auto [lo, hi] = std::minmax_element(spill_load.begin(), spill_load.end());
  CHECK(*hi - *lo <= 6.0);
  // A key on every destination has nowhere to spill.
  const Plan full = MustBuild(
      {{1, 50}}, {.destinations = 2, .q_cap = 10, .slots_per_destination = 4, .spill = true});
  CHECK(full.destinations(0).size() == 2);
  CHECK(full.spill(0) == kNoSpill);
}

TEST_CASE("balance_share: keys above that share of the mean destination load are split") {
  // Total 12 over 3 destinations: mean 4; share 0.5 caps an assignment at 2 (q_cap is 100).
  const std::vector<KeyRate> rates = {{1, 6}, {2, 3}, {3, 2}, {4, 1}};
  const Plan paper =
      MustBuild(rates, {.destinations = 3, .q_cap = 100, .slots_per_destination = 4});
  CHECK(paper.destinations(0).size() == 1);
  CHECK(paper.stats().effective_q_cap == 100);
  const Plan plan = MustBuild(
      rates, {.destinations = 3, .q_cap = 100, .slots_per_destination = 4, .balance_share = 0.5});
  CHECK(plan.stats().effective_q_cap == 2);
  CHECK(plan.destinations(0).size() == 3);  // 6 / 2
  CHECK(plan.destinations(1).size() == 2);  // ⌈3 / 2⌉
  CHECK(plan.destinations(2).size() == 1);  // 2 ≤ 2
  CHECK(plan.stats().imbalance < paper.stats().imbalance);
  // A share cap above q_cap changes nothing.
  const Plan loose = MustBuild(
      rates, {.destinations = 3, .q_cap = 1.5, .slots_per_destination = 8, .balance_share = 2});
  const Plan fixed =
      MustBuild(rates, {.destinations = 3, .q_cap = 1.5, .slots_per_destination = 8});
  CHECK(TableOf(loose) == TableOf(fixed));
  for (double bad : {-1.0, std::numeric_limits<double>::infinity()}) {
    absl::StatusOr<Plan> p = BuildPlan(
        rates, {.destinations = 3, .q_cap = 1, .slots_per_destination = 1, .balance_share = bad});
    REQUIRE_FALSE(p.ok());
    CHECK(std::string(p.status().message()).find("balance_share") != std::string::npos);
  }
}

// --- Byte-aware planning (PlanConfig::kv_budget_tokens) ------------------------------------

Plan MustBuildBytes(const std::vector<KeyRate>& rates, const std::vector<KeyTokens>& tokens,
                    const PlanConfig& config, const Plan* previous = nullptr) {
  return cacheroute::testing::RequireOk(BuildPlan(rates, config, nullptr, previous, {}, tokens));
}

// Σ reusable tokens of the keys planned on each destination.
std::vector<double> PlannedTokens(const Plan& plan) {
  std::vector<double> kv(plan.loads().size(), 0.0);
  for (size_t i = 0; i < plan.size(); ++i) {
    for (uint32_t d : plan.destinations(i)) kv[d] += plan.reusable_tokens(i);
  }
  return kv;
}

TEST_CASE("byte-aware: off without a budget, and without measured keys it plans by slots") {
  const std::vector<KeyRate> rates = {{1, 5}, {2, 3}, {3, 1}};
  const std::vector<KeyTokens> tokens = {{100, 200}, {50, 60}, {10, 10}};
  const PlanConfig slots{.destinations = 2, .q_cap = 10, .slots_per_destination = 1};
  const Plan by_slots = MustBuild(rates, slots);
  // No budget: the tokens are ignored.
  const Plan ignored = MustBuildBytes(rates, tokens, slots);
  CHECK(TableOf(ignored) == TableOf(by_slots));
  CHECK_FALSE(ignored.stats().byte_aware);
  CHECK(ignored.reusable_tokens(0) == 0);
  CHECK(ignored.work_loads().empty());
  // A budget but no measured key (no tokens, or all unmeasured): the slot model.
  PlanConfig bytes = slots;
  bytes.kv_budget_tokens = 1000;
  const Plan none = MustBuildBytes(rates, {}, bytes);
  CHECK(TableOf(none) == TableOf(by_slots));
  CHECK_FALSE(none.stats().byte_aware);
  const Plan unmeasured = MustBuildBytes(rates, {{}, {}, {}}, bytes);
  CHECK(TableOf(unmeasured) == TableOf(by_slots));
}

TEST_CASE("byte-aware: admission by saved work while reusable × k_b fits the budget") {
  // No survival discount (kv_capacity_tokens 0): saved work is rate × reusable tokens.
  //   key 1: 2 × 800 = 1600   key 2: 5 × 300 = 1500   key 3: 10 × 100 = 1000   key 4: 20 × 0
  // Budget 2 × 500 = 1000 tokens: key 1 (800) fits, key 2 (300 more) does not and is skipped,
  // key 3 (100 more) fits, key 4 saves nothing and is never admitted.
  const std::vector<KeyRate> rates = {{1, 2}, {2, 5}, {3, 10}, {4, 20}};
  const std::vector<KeyTokens> tokens = {{800, 900}, {300, 400}, {100, 200}, {0, 300}};
  PlanConfig config{
      .destinations = 2, .q_cap = 100, .slots_per_destination = 1, .kv_budget_tokens = 500};
  Plan plan = MustBuildBytes(rates, tokens, config);
  REQUIRE(plan.stats().byte_aware);
  // Listed in decreasing rate like every plan: key 3 (10), key 1 (2).
  REQUIRE(plan.size() == 2);
  CHECK(plan.key(0) == 3);
  CHECK(plan.key(1) == 1);
  CHECK(plan.reusable_tokens(1) == 800);
  CHECK(plan.saved_work(1) == 1600);
  CHECK(plan.saved_work(0) == 1000);
  CHECK(plan.stats().kv_budget == 1000);
  CHECK(plan.stats().kv_used == 900);
  CHECK(plan.stats().saved_work == 2600);
  CHECK(plan.stats().possible_saved_work == 4100);
  CHECK(plan.stats().measured_keys == 4);
  CHECK(plan.stats().cold_tail_rate == 25);
  // The slot model admits the two hottest keys (4 and 3) instead.
  const Plan slots =
      MustBuild(rates, {.destinations = 2, .q_cap = 100, .slots_per_destination = 1});
  CHECK(TableOf(slots) == Table{{4, {0}}, {3, {1}}});
}

TEST_CASE("byte-aware: the survival discount prefers the key that returns more often") {
  // Equal rate × reusable (100 tokens/s), room for one. With the cache turning over, the key
  // that comes back every 0.1 s keeps its prefix more often than the one that comes every 10 s.
  const std::vector<KeyRate> rates = {{1, 0.1}, {2, 10}};
  const std::vector<KeyTokens> tokens = {{1000, 1100}, {10, 110}};
  PlanConfig config{.destinations = 1,
                    .q_cap = 100,
                    .slots_per_destination = 1,
                    .kv_budget_tokens = 1000,
                    .kv_capacity_tokens = 2000};
  Plan plan = MustBuildBytes(rates, tokens, config);
  REQUIRE(plan.size() == 1);
  CHECK(plan.key(0) == 2);
  // Every request brings its 100 unique tokens (1,010 per s) and the misses add the rest: T is
  // under 2 s, so key 1 (x = 0.1 · T) keeps its prefix less than a fifth of the time.
  const double t = plan.stats().turnover_seconds;
  CHECK(t > 1.0);
  CHECK(t < 2000.0 / 1010);
  CHECK(plan.saved_work(0) == Approx(10 * 10 * (10 * t) / (1 + 10 * t)));
  CHECK(plan.stats().possible_saved_work ==
        Approx(plan.saved_work(0) + 0.1 * 1000 * (0.1 * t) / (1 + 0.1 * t)));
  // Without the capacity every prefix survives and the tie goes to the lower key id.
  config.kv_capacity_tokens = 0;
  Plan flat = MustBuildBytes(rates, tokens, config);
  REQUIRE(flat.size() == 1);
  CHECK(flat.key(0) == 1);
  CHECK(flat.stats().turnover_seconds == 0);
}

TEST_CASE("byte-aware: LPT balances expected work and keeps prefixes within the budget") {
  // Key 1 has a small prefix but many requests (the most work): it goes first, to destination
  // 0. Keys 2 and 3 carry little work; by work alone both would join destination 1, but their
  // 60-token prefixes do not fit its 100-token budget together, so key 3 goes to destination 0.
  const std::vector<KeyRate> rates = {{1, 100}, {2, 1}, {3, 1}};
  const std::vector<KeyTokens> tokens = {{1, 11}, {60, 70}, {60, 70}};
  const PlanConfig config{
      .destinations = 2, .q_cap = 1000, .slots_per_destination = 1, .kv_budget_tokens = 100};
  Plan plan = MustBuildBytes(rates, tokens, config);
  CHECK(TableOf(plan) == Table{{1, {0}}, {2, {1}}, {3, {0}}});
  CHECK(PlannedTokens(plan) == std::vector<double>{61, 60});
  // Work: 100 × (11 − 1) = 1000 tokens/s for key 1, 10 each for keys 2 and 3.
  CHECK(plan.work(0) == 1000);
  CHECK(plan.work(1) == 10);
  CHECK(std::vector<double>(plan.work_loads().begin(), plan.work_loads().end()) ==
        std::vector<double>{1010, 10});
  CHECK(plan.stats().total_work == 1020);
  CHECK(plan.stats().work_imbalance == Approx(1010 / 510.0));
  // Expected loads stay in requests/s.
  CHECK(Loads(plan) == std::vector<double>{101, 1});
  // A fleet budget of 120 admits keys 1 and 2 (61 tokens) but not key 3 as well (121).
  PlanConfig tight = config;
  tight.kv_budget_tokens = 60;
  CHECK(TableOf(MustBuildBytes(rates, tokens, tight)) == Table{{1, {0}}, {2, {1}}});
  // A prefix with room on no destination (60 > 50) still gets one: the least loaded.
  tight.kv_budget_tokens = 50;
  CHECK(TableOf(MustBuildBytes({{1, 100}, {2, 1}}, {{1, 11}, {60, 70}}, tight)) ==
        Table{{1, {0}}, {2, {1}}});
}

TEST_CASE("byte-aware: request overhead and unmeasured keys") {
  // Key 2 is unmeasured: it is planned with the measured keys' rate-weighted means, 30 reusable
  // ((1 × 10 + 3 × 36.67) / 4) and 10 unique tokens.
  const std::vector<KeyRate> rates = {{1, 1}, {2, 2}, {3, 3}};
  const std::vector<KeyTokens> tokens = {{10, 20}, {}, {36.6666666666666667, 46.6666666666666667}};
  const PlanConfig config{.destinations = 2,
                          .q_cap = 100,
                          .slots_per_destination = 1,
                          .kv_budget_tokens = 1000,
                          .request_overhead_tokens = 5};
  Plan plan = MustBuildBytes(rates, tokens, config);
  REQUIRE(plan.size() == 3);
  CHECK(plan.stats().measured_keys == 2);
  // Listed by rate: key 3, key 2, key 1.
  CHECK(plan.key(1) == 2);
  CHECK(plan.reusable_tokens(1) == Approx(30));
  // Work: rate × (prompt − reusable + overhead) = 2 × (10 + 5).
  CHECK(plan.work(1) == Approx(30));
  CHECK(plan.work(2) == Approx(15));
  CHECK(plan.work(0) == Approx(45));
}

TEST_CASE("byte-aware: k_b follows the key's work, not only its rate") {
  // Equal rates; key 1's requests bring 10 times the unique tokens. The work cap (balance_share
  // 0.5 of the mean destination work) splits key 1 but not key 2.
  const std::vector<KeyRate> rates = {{1, 1}, {2, 1}, {3, 1}, {4, 1}};
  const std::vector<KeyTokens> tokens = {{0.5, 1000}, {0.5, 100}, {0.5, 100}, {0.5, 100}};
  const PlanConfig config{.destinations = 4,
                          .q_cap = 100,
                          .slots_per_destination = 1,
                          .balance_share = 0.5,
                          .kv_budget_tokens = 100};
  Plan plan = MustBuildBytes(rates, tokens, config);
  REQUIRE(plan.size() == 4);
  // Total work ≈ 1300; per destination 325; the cap is 162.5: key 1 (≈ 1000) gets 7 → capped
  // at R = 4; the others (≈ 100) one each.
  CHECK(plan.stats().effective_work_cap == Approx(0.5 * 1298 / 4));
  for (size_t i = 0; i < plan.size(); ++i) {
    CHECK(plan.destinations(i).size() == (plan.key(i) == 1 ? 4u : 1u));
  }
  CHECK(plan.stats().capped_keys == 1);
  // The rate rule treats them alike: every key is half a destination's mean load, k_b = 2.
  const Plan by_rate = MustBuild(
      rates, {.destinations = 4, .q_cap = 100, .slots_per_destination = 2, .balance_share = 0.5});
  for (size_t i = 0; i < by_rate.size(); ++i) CHECK(by_rate.destinations(i).size() == 2);
}

// Byte-aware planning without the survival discount, written the obvious way: comparison sorts
// and linear scans, the same floating-point operations in the same order.
Table ReferenceBytes(const std::vector<KeyRate>& rates, const std::vector<KeyTokens>& tokens,
                     const PlanConfig& c) {
  double rate_sum = 0, reusable_sum = 0, unique_sum = 0;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (tokens[i].reusable < 0) continue;
    rate_sum += rates[i].rate;
    reusable_sum += rates[i].rate * tokens[i].reusable;
    unique_sum += rates[i].rate * std::max(0.0, tokens[i].prompt - tokens[i].reusable);
  }
  const double s_mean = reusable_sum / rate_sum, u_mean = unique_sum / rate_sum;
  const auto s = [&](size_t i) { return tokens[i].reusable >= 0 ? tokens[i].reusable : s_mean; };
  const auto p = [&](size_t i) {
    return tokens[i].reusable >= 0 ? std::max(s(i), tokens[i].prompt) : s(i) + u_mean;
  };
  const auto work = [&](size_t i) {
    return rates[i].rate * (p(i) - s(i) * 1.0 + c.request_overhead_tokens);
  };
  double total_rate = c.unkeyed_rate;
  double total_work = c.unkeyed_rate * (s_mean + u_mean + c.request_overhead_tokens);
  for (size_t i = 0; i < rates.size(); ++i) {
    total_rate += rates[i].rate;
    total_work += work(i);
  }
  double cap = c.q_cap * (total_work / total_rate);
  if (c.balance_share > 0) cap = std::min(cap, c.balance_share * total_work / c.destinations);
  const auto k_of = [&](size_t i) { return AssignmentCount(work(i), cap, c.destinations); };
  std::vector<size_t> order(rates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto saved = [&](size_t i) { return rates[i].rate * s(i) * 1.0; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return saved(a) > saved(b) || (saved(a) == saved(b) && rates[a].key < rates[b].key);
  });
  double used = 0;
  std::vector<size_t> in;
  for (size_t i : order) {
    if (!(saved(i) > 0)) break;
    const double cost = s(i) * k_of(i);
    if (used + cost > c.kv_budget_tokens * c.destinations) continue;
    used += cost;
    in.push_back(i);
  }
  std::sort(in.begin(), in.end(), [&](size_t a, size_t b) {
    const double x = work(a) / k_of(a), y = work(b) / k_of(b);
    return x > y || (x == y && rates[a].key < rates[b].key);
  });
  double admitted_work = 0;
  for (size_t i : in) admitted_work += work(i);
  std::vector<double> w(c.destinations, std::max(0.0, total_work - admitted_work) / c.destinations);
  std::vector<double> kv(c.destinations, 0);
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> out;
  for (size_t i : in) {
    std::vector<uint32_t> chosen;
    for (uint32_t j = 0; j < k_of(i); ++j) {
      int best = -1, best_fit = -1;
      for (uint32_t d = 0; d < c.destinations; ++d) {
        if (std::find(chosen.begin(), chosen.end(), d) != chosen.end()) continue;
        if (best < 0 || w[d] < w[best]) best = d;
        if (kv[d] + s(i) <= c.kv_budget_tokens && (best_fit < 0 || w[d] < w[best_fit])) {
          best_fit = d;
        }
      }
      chosen.push_back(static_cast<uint32_t>(best_fit >= 0 ? best_fit : best));
    }
    for (uint32_t d : chosen) {
      w[d] += work(i) / k_of(i);
      kv[d] += s(i);
    }
    std::sort(chosen.begin(), chosen.end());
    out.emplace_back(rates[i].key, chosen);
  }
  std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    const auto ra =
        std::find_if(rates.begin(), rates.end(), [&](auto& r) { return r.key == a.first; });
    const auto rb =
        std::find_if(rates.begin(), rates.end(), [&](auto& r) { return r.key == b.first; });
    return ra->rate > rb->rate || (ra->rate == rb->rate && a.first < b.first);
  });
  return out;
}

TEST_CASE("byte-aware: seeded random instances match the reference and keep the invariants") {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    Instance in = RandomInstance(rng);
    std::lognormal_distribution<double> size(std::log(3000), 1.1);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<KeyTokens> tokens(in.rates.size());
    for (KeyTokens& t : tokens) {
      if (unit(rng) < 0.1) continue;  // unmeasured
      t.reusable = std::round(size(rng));
      t.prompt = t.reusable + std::round(unit(rng) * 500);
    }
    if (!tokens.empty()) tokens[0] = {100, 200};  // at least one measured key
    PlanConfig c = in.config;
    c.kv_budget_tokens = 3000 * (0.5 + 4 * unit(rng));
    c.request_overhead_tokens = unit(rng) < 0.5 ? 0 : 100;
    c.balance_share = unit(rng) < 0.5 ? 0 : 0.5;
    INFO("seed " << seed);
    const Plan plan = MustBuildBytes(in.rates, tokens, c);
    CHECK(TableOf(plan) == ReferenceBytes(in.rates, tokens, c));
    CHECK(plan.stats().kv_used <= plan.stats().kv_budget);
    double loads = 0, work = 0, total_rate = 0;
    for (double l : plan.loads()) loads += l;
    for (double l : plan.work_loads()) work += l;
    for (const KeyRate& kr : in.rates) total_rate += kr.rate;
    CHECK(loads == Approx(total_rate));
    CHECK(work == Approx(plan.stats().total_work));
    for (size_t i = 1; i < plan.size(); ++i) CHECK(plan.rate(i) <= plan.rate(i - 1));
    // Order of the input does not matter.
    std::vector<size_t> perm(in.rates.size());
    std::iota(perm.begin(), perm.end(), size_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<KeyRate> rates2;
    std::vector<KeyTokens> tokens2;
    for (size_t i : perm) {
      rates2.push_back(in.rates[i]);
      tokens2.push_back(tokens[i]);
    }
    const Plan shuffled = MustBuildBytes(rates2, tokens2, c);
    CHECK(TableOf(shuffled) == TableOf(plan));
  }
}

TEST_CASE("byte-aware: a sticky replan keeps every assignment when nothing changed") {
  std::mt19937_64 rng(7);
  Instance in = RandomInstance(rng);
  std::vector<KeyTokens> tokens(in.rates.size(), KeyTokens{500, 700});
  PlanConfig c = in.config;
  c.kv_budget_tokens = 1e9;
  c.stickiness = 0.1;
  const Plan first = MustBuildBytes(in.rates, tokens, c);
  const Plan again = MustBuildBytes(in.rates, tokens, c, &first);
  CHECK(TableOf(again) == TableOf(first));
  CHECK(again.stats().kept_assignments == again.stats().slots_used);
  // Remapped keeps the sizes and the work.
  std::vector<uint32_t> identity(c.destinations);
  std::iota(identity.begin(), identity.end(), 0u);
  const Plan same = first.Remapped(identity, c.destinations);
  REQUIRE(same.size() == first.size());
  for (size_t i = 0; i < same.size(); ++i) CHECK(same.work(i) == first.work(i));
  CHECK(std::vector<double>(same.work_loads().begin(), same.work_loads().end()) ==
        std::vector<double>(first.work_loads().begin(), first.work_loads().end()));
}

TEST_CASE("byte-aware: bad sizes and settings are rejected with the field named") {
  const std::vector<KeyRate> rates = {{1, 1}, {2, 2}};
  const PlanConfig config{
      .destinations = 2, .q_cap = 1, .slots_per_destination = 1, .kv_budget_tokens = 100};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto fails = [&](const std::vector<KeyTokens>& tokens, const PlanConfig& c,
                         const std::vector<std::string>& fragments) {
    absl::StatusOr<Plan> plan = BuildPlan(rates, c, nullptr, nullptr, {}, tokens);
    INFO(plan.status().ToString());
    REQUIRE(plan.status().code() == absl::StatusCode::kInvalidArgument);
    for (const std::string& f : fragments) {
      CHECK_THAT(std::string(plan.status().message()), Catch::Contains(f));
    }
  };
  fails({{10, 20}}, config, {"tokens", "1 entries for 2 rates"});
  fails({{10, 20}, {nan, 5}}, config, {"tokens[1].reusable", "key 2", "nan"});
  fails({{10, 20}, {5, -2}}, config, {"tokens[1].prompt", "-2"});
  for (const char* field : {"kv_budget_tokens", "kv_capacity_tokens", "request_overhead_tokens"}) {
    PlanConfig bad = config;
    (std::string(field) == "kv_budget_tokens"     ? bad.kv_budget_tokens
     : std::string(field) == "kv_capacity_tokens" ? bad.kv_capacity_tokens
                                                  : bad.request_overhead_tokens) = -1;
    fails({{10, 20}, {5, 6}}, bad, {field, "got -1"});
  }
  PlanConfig hashed = config;
  hashed.placement = Placement::kHashed;
  fails({{10, 20}, {5, 6}}, hashed, {"placement", "LPT"});
  // The slot model ignores the sizes, even malformed ones.
  PlanConfig slots = config;
  slots.kv_budget_tokens = 0;
  const std::vector<KeyTokens> malformed = {{nan, nan}, {1, 1}};
  CHECK(BuildPlan(rates, slots, nullptr, nullptr, {}, malformed).ok());
}

TEST_CASE(
    "a builder switching between the slot model and byte-aware planning plans as fresh ones") {
  // The workspace keeps the slot model's rate order and byte-aware planning's ranking in buffers
  // of their own; builds of either kind, and byte-aware builds that fall back to slots (no key
  // measured), follow each other on one builder at growing and shrinking sizes.
  std::mt19937_64 rng(12);
  PlanBuilder builder;
  for (int round = 0; round < 60; ++round) {
    Instance in = RandomInstance(rng);
    std::vector<KeyTokens> tokens(in.rates.size(), KeyTokens{});
    const int kind = round % 3;  // 0: slots; 1: byte-aware; 2: byte-aware config, none measured
    if (kind == 1) {
      for (KeyTokens& t : tokens) t = {static_cast<double>(rng() % 4000), 5000};
    }
    if (kind != 0) in.config.kv_budget_tokens = 2000;
    INFO("round " << round << " kind " << kind << " keys " << in.rates.size());
    absl::StatusOr<Plan> reused = builder.Build(in.rates, in.config, nullptr, {}, tokens);
    absl::StatusOr<Plan> fresh = BuildPlan(in.rates, in.config, nullptr, nullptr, {}, tokens);
    REQUIRE(reused.status() == fresh.status());
    if (!fresh.ok()) continue;
    CHECK(reused->stats().byte_aware == (kind == 1 && !in.rates.empty()));
    CHECK(TableOf(*reused) == TableOf(*fresh));
    CHECK(Loads(*reused) == Loads(*fresh));
    CHECK(std::vector<double>(reused->work_loads().begin(), reused->work_loads().end()) ==
          std::vector<double>(fresh->work_loads().begin(), fresh->work_loads().end()));
  }
}

}  // namespace cacheroute::planner
