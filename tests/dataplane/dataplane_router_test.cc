// Router: planned vs fallback dispatch, least-loaded member, in-flight tokens, install validation
// (version regression, unknown destination, last good table kept), TTL fallback on an injected
// clock, down destinations, stats, and concurrency tests (label `concurrency`: run under TSan),
// including more request threads than the Router has per-thread shards.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"

namespace cacheroute::dataplane {
namespace {

using std::chrono::seconds;

std::shared_ptr<const RoutingTable> MakeTable(TableVersion version, uint32_t destinations,
                                              std::vector<TableEntry> entries) {
  auto table =
      RoutingTable::Build(version, destinations, std::vector<double>(destinations, 1.0), entries);
  REQUIRE(table.ok());
  return std::make_shared<const RoutingTable>(*std::move(table));
}

const uint64_t kHot = KeyId("hot");
const uint64_t kSolo = KeyId("solo");
const uint64_t kCold = KeyId("cold");

// With the paper's dispatch, ten held picks of the entry's key (planned on destination 5 alone,
// of 8) all go to 5, however loaded it gets.
void CheckPaperStaysOnItsSet(TableEntry entry, Random& random, const ManualClock& clock) {
  Router paper({.destination_count = 8, .dispatch = DispatchOptions::Paper()}, random);
  REQUIRE(paper.Install(MakeTable({1, 1}, 8, {entry}), clock.Now()).ok);
  std::vector<InFlight> held;
  for (int i = 0; i < 10; ++i) {
    held.push_back(paper.Pick(entry.key_id, clock.Now()));
    CHECK(held.back().destination() == 5);
  }
}

TEST_CASE("Without a table every request falls back to power of two choices", "[router]") {
  SeededRandom random(1);
  ManualClock clock;
  Router router({.destination_count = 4, .dispatch = DispatchOptions::Paper()}, random);
  InFlight r = router.Pick(kHot, clock.Now());
  REQUIRE(r.ok());
  CHECK(r.destination() < 4);
  CHECK_FALSE(r.planned());
  CHECK(r.reason() == Reason::kNoTable);
  RouterStats stats = router.Stats(clock.Now());
  CHECK_FALSE(stats.has_table);
  CHECK(stats.planned == 0);
  CHECK(stats.fallback[static_cast<int>(Reason::kNoTable)] == 1);
  CHECK(stats.fallback_total == 1);
}

TEST_CASE("Admitted keys are planned, others fall back", "[router]") {
  SeededRandom random(2);
  ManualClock clock;
  Router router({.destination_count = 8}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 8, {{kSolo, {5}}, {kHot, {1, 2, 3}}}), clock.Now()).ok);

  for (int i = 0; i < 20; ++i) {
    InFlight r = router.Pick(kSolo, clock.Now());
    CHECK(r.destination() == 5);
    CHECK(r.planned());
    CHECK(r.reason() == Reason::kPlanned);
  }
  InFlight cold = router.Pick(kCold, clock.Now());
  CHECK_FALSE(cold.planned());
  CHECK(cold.reason() == Reason::kNotAdmitted);
  CHECK(cold.destination() < 8);

  RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.planned == 20);
  CHECK(stats.fallback[static_cast<int>(Reason::kNotAdmitted)] == 1);
  CHECK(stats.version == TableVersion{1, 1});
}

TEST_CASE("A rollout's control arm routes its keys off the table", "[router]") {
  SeededRandom random(21);
  ManualClock clock;
  Router router({.destination_count = 8}, random);
  // 400 keys, each planned on destination 5 alone; 30% of them on the table arm.
  std::vector<TableEntry> entries;
  for (uint64_t i = 0; i < 400; ++i)
    entries.push_back({.key_id = KeyId("k" + std::to_string(i)), .destinations = {5}});
  auto built = RoutingTable::Build({1, 1}, 8, std::vector<double>(8, 1.0), entries, 0.3);
  REQUIRE(built.ok());
  CHECK(built->table_fraction() == 0.3);
  CHECK(router.table_fraction() == 1.0);  // no table yet
  REQUIRE(router.Install(std::make_shared<const RoutingTable>(*std::move(built)), clock.Now()).ok);
  CHECK(router.table_fraction() == 0.3);

  int table_arm = 0;
  std::set<uint32_t> control_destinations;
  for (const TableEntry& e : entries) {
    InFlight r = router.Pick(e.key_id, clock.Now());
    if (ArmOf(e.key_id, 0.3) == Arm::kTable) {
      ++table_arm;
      CHECK(r.planned());
      CHECK(r.destination() == 5);
    } else {
      CHECK_FALSE(r.planned());
      CHECK(r.reason() == Reason::kControlArm);
      control_destinations.insert(r.destination());
    }
  }
  CHECK(table_arm > 80);  // about 120 of 400
  CHECK(table_arm < 160);
  CHECK(control_destinations.size() >= 6);  // spread, not sent to the planned 5
  const RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.planned == static_cast<uint64_t>(table_arm));
  CHECK(stats.fallback[static_cast<int>(Reason::kControlArm)] ==
        static_cast<uint64_t>(400 - table_arm));
  CHECK(ReasonName(Reason::kControlArm) == "control_arm");

  CHECK_FALSE(RoutingTable::Build({1, 2}, 8, std::vector<double>(8, 1.0), entries, 1.5).ok());
  CHECK_FALSE(
      RoutingTable::Build({1, 2}, 8, std::vector<double>(8, 1.0), entries, std::nan("")).ok());
}

TEST_CASE("The paper's rule: a planned key goes to the least-loaded member of its set",
          "[router]") {
  SeededRandom random(3);
  ManualClock clock;
  Router router(
      {.destination_count = 8, .dispatch = DispatchOptions::Paper(), .external_load_weight = 2.0},
      random);
  REQUIRE(router.Install(MakeTable({1, 1}, 8, {{kHot, {1, 2, 3}}}), clock.Now()).ok);

  // Idle: ties go to the lowest member. Holding tokens loads each member in turn.
  InFlight a = router.Pick(kHot, clock.Now());
  CHECK(a.destination() == 1);
  InFlight b = router.Pick(kHot, clock.Now());
  CHECK(b.destination() == 2);
  InFlight c = router.Pick(kHot, clock.Now());
  CHECK(c.destination() == 3);
  b.Release();
  CHECK(router.Pick(kHot, clock.Now()).destination() == 2);

  // load = in_flight + 2 · external: destination 2 reports 1 → load 2, worse than 1 and 3 (1 each).
  REQUIRE(router.SetLoad(2, 1.0).ok);
  CHECK(router.loads().Load(2) == Approx(2.0));
  CHECK(router.Pick(kHot, clock.Now()).destination() == 1);
  REQUIRE(router.SetLoad(1, 3.0).ok);  // load(1) = 1 + 6 = 7, load(3) = 1
  CHECK(router.Pick(kHot, clock.Now()).destination() == 3);
  CHECK_FALSE(router.SetLoad(8, 1.0).ok);
  CHECK_FALSE(router.SetLoad(1, -1.0).ok);
}

// The token-work rule with its stall terms off: cost(d) = queued prefill tokens at d + the
// request's expected uncached tokens at d; every destination of a small fleet is a candidate.
DispatchOptions PlainTokenWork() {
  return {.decode_stall = 0,
          .queue_stall = 0,
          .queue_wait = 0,
          .memory_short = 0,
          .all_candidates_up_to = 16};
}

TEST_CASE(
    "Token work: a planned key leaves its warm member once its queue outweighs a cold prefill",
    "[router]") {
  SeededRandom random(3);
  ManualClock clock;
  Router router({.destination_count = 8, .dispatch = PlainTokenWork()}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 8, {{kSolo, {5}, 6}}), clock.Now()).ok);
  const PickRequest request{.key_id = kSolo, .prompt_tokens = 1000};

  // Nothing known: every destination costs its 1,000 tokens; the planned member wins the tie.
  InFlight first = router.Pick(request, clock.Now());
  CHECK(first.destination() == 5);
  CHECK(first.decision().expected_uncached_tokens == 1000);
  CHECK(first.decision().expected == CacheExpectation::kTemplate);
  CHECK(router.loads().Work(5).queued_prefill_tokens == 1000);
  // The key's previous prompt is cached at 5: 1,000 queued + 0 there against 1,000 elsewhere.
  InFlight second = router.Pick(request, clock.Now());
  CHECK(second.destination() == 5);
  CHECK(second.decision().expected == CacheExpectation::kKey);
  CHECK(second.decision().expected_uncached_tokens == 1);  // at least one token is computed
  // 1,001 queued at 5: the planned spill (first among the cold ones) is cheaper.
  InFlight third = router.Pick(request, clock.Now());
  CHECK(third.destination() == 6);
  CHECK(third.planned());
  CHECK(third.decision().spilled);
  // The first request's first token leaves 5's queue; the next request goes home.
  first.FirstToken();
  CHECK(router.loads().Work(5).queued_prefill_tokens == 1);
  CHECK(router.loads().Work(5).decoding == 1);
  InFlight fourth = router.Pick(request, clock.Now());
  CHECK(fourth.destination() == 5);
  CHECK_FALSE(fourth.decision().spilled);

  const RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.planned == 4);
  CHECK(stats.spilled == 1);
  // The paper's dispatch ignores the spill and the queue.
  CheckPaperStaysOnItsSet({kSolo, {5}, 6}, random, clock);
}

TEST_CASE("Token work: the ledger follows each request from pick to first token to release",
          "[router]") {
  SeededRandom random(4);
  ManualClock clock;
  Router router({.destination_count = 4}, random);
  REQUIRE(router.loads().HasWork());
  auto work = [&](uint32_t d) { return router.loads().Work(d); };
  {
    InFlight a = router.Track({2, false, Reason::kPolicy, false, 300}, 1000);
    CHECK(work(2).queued_prefill_tokens == 300);
    CHECK(work(2).prefilling == 1);
    CHECK(work(2).active_tokens == 0);  // kept only with RouterOptions::active_tokens
    InFlight b = router.Track({2, false, Reason::kPolicy}, 500);  // no estimate: the whole prompt
    CHECK(work(2).queued_prefill_tokens == 800);
    CHECK(router.loads().FleetWork().prefilling == 2);
    a.FirstToken();
    a.FirstToken();  // idempotent
    CHECK(work(2).queued_prefill_tokens == 500);
    CHECK(work(2).prefilling == 1);
    CHECK(work(2).decoding == 1);
    CHECK(router.loads().FleetWork().prefilling == 1);
    b.Release();  // before its first token: its prefill leaves the queue
    CHECK(work(2).queued_prefill_tokens == 0);
    InFlight moved = std::move(a);
    CHECK(work(2).decoding == 1);
  }
  CHECK(work(2).decoding == 0);
  CHECK(work(2).prefilling == 0);
  CHECK(router.loads().FleetWork().prefilling == 0);
  // The paper's rule keeps no ledger.
  Router paper({.destination_count = 4, .dispatch = DispatchOptions::Paper()}, random);
  CHECK_FALSE(paper.loads().HasWork());
  InFlight p = paper.Track({1, false, Reason::kPolicy}, 1000);
  p.FirstToken();
  CHECK(paper.loads().Work(1).queued_prefill_tokens == 0);
}

TEST_CASE("Token work: decoding requests make a destination's prefill dearer", "[router]") {
  SeededRandom random(5);
  ManualClock clock;
  DispatchOptions options = PlainTokenWork();
  options.decode_stall = 0.5;
  Router router({.destination_count = 2, .dispatch = options}, random);
  // Two requests decoding at 0 (200 tokens queued nowhere); 1 has 300 tokens queued.
  std::vector<InFlight> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(router.Track({0, false, Reason::kPolicy, false, 100}, 100));
    held.back().FirstToken();
  }
  held.push_back(router.Track({1, false, Reason::kPolicy, false, 300}, 300));
  // 400 new tokens: at 0, (1 + 0.5 · 2) · 400 = 800; at 1, 300 + 400 = 700.
  CHECK(
      router.Pick(PickRequest{.key_id = kCold, .prompt_tokens = 400}, clock.Now()).destination() ==
      1);
  // Without the stall term 0 would win (400 < 700).
  Router plain({.destination_count = 2, .dispatch = PlainTokenWork()}, random);
  std::vector<InFlight> held_plain;
  for (int i = 0; i < 2; ++i) {
    held_plain.push_back(plain.Track({0, false, Reason::kPolicy, false, 100}, 100));
    held_plain.back().FirstToken();
  }
  held_plain.push_back(plain.Track({1, false, Reason::kPolicy, false, 300}, 300));
  CHECK(plain.Pick(PickRequest{.key_id = kCold, .prompt_tokens = 400}, clock.Now()).destination() ==
        0);
}

TEST_CASE("Token work: a waiting fleet makes a warm destination worth more", "[router]") {
  SeededRandom random(6);
  ManualClock clock;
  DispatchOptions options = PlainTokenWork();
  options.queue_stall = 1.0;
  Router router({.destination_count = 4, .dispatch = options}, random);
  const PickRequest request{.key_id = kCold, .prompt_tokens = 1000};
  InFlight home = router.Pick(request, clock.Now());  // remembered from here on
  const uint32_t warm = home.destination();
  home.Release();
  // 1,500 tokens queued at the warm destination in three requests, none elsewhere: alone the
  // move would pay (1,500 + ~0 > 1,000), but four waiting requests over four destinations make
  // each uncached token cost 1 + 1 · 1 = 2: 1,500 + 2 · ~0 < 2 · 1,000.
  std::vector<InFlight> held;
  for (int i = 0; i < 3; ++i)
    held.push_back(router.Track({warm, false, Reason::kPolicy, false, 500}, 500));
  const uint32_t other = (warm + 1) % 4;
  held.push_back(router.Track({other, false, Reason::kPolicy, false, 1}, 1));
  CHECK(router.Pick(request, clock.Now()).destination() == warm);
  Router plain({.destination_count = 4, .dispatch = PlainTokenWork()}, random);
  InFlight plain_home = plain.Pick(request, clock.Now());
  const uint32_t plain_warm = plain_home.destination();
  plain_home.Release();
  std::vector<InFlight> plain_held;
  for (int i = 0; i < 3; ++i) {
    plain_held.push_back(plain.Track({plain_warm, false, Reason::kPolicy, false, 500}, 500));
  }
  CHECK(plain.Pick(request, clock.Now()).destination() != plain_warm);
}

TEST_CASE("Token work: with queue_wait, requests waiting at a destination count against it",
          "[router]") {
  // κ = 0.5: each request waiting for its first token at d adds half the mean prompt to d's cost,
  // however few uncached tokens it carries (it needs a scheduling slot and KV memory first).
  SeededRandom random(8);
  ManualClock clock;
  DispatchOptions options = PlainTokenWork();
  options.queue_wait = 0.5;
  auto warm_after_waiters = [&](const DispatchOptions& dispatch, int waiters) {
    Router router({.destination_count = 4, .dispatch = dispatch}, random);
    // A mean prompt of 1,000 tokens, nothing cached.
    router.ObserveServed({0, false, Reason::kPolicy, false, 1000}, 1000, 0);
    const PickRequest request{.key_id = kCold, .prompt_tokens = 1000};
    InFlight home = router.Pick(request, clock.Now());
    const uint32_t warm = home.destination();
    home.Release();
    // Requests waiting at the warm destination, one uncached token each.
    std::vector<InFlight> held;
    for (int i = 0; i < waiters; ++i) {
      held.push_back(router.Track({warm, false, Reason::kPolicy, false, 1}, 1));
    }
    return router.Pick(request, clock.Now()).destination() == warm;
  };
  // Without κ the warm destination costs 2 queued + ~0 against 1,000 cold: it stays.
  CHECK(warm_after_waiters(PlainTokenWork(), 2));
  // With κ: one waiter costs 1 + 500 < 1,000, it stays; two cost 2 + 1,000 > 1,000, it moves.
  CHECK(warm_after_waiters(options, 1));
  CHECK_FALSE(warm_after_waiters(options, 2));
}

// A LoadView set by hand, with the token-work signals and the engines' KV usage.
class WorkView final : public LoadView {
 public:
  explicit WorkView(uint32_t n) : work(n), up(n, true), kv_usage(n, 0.0) {}
  uint32_t size() const override { return static_cast<uint32_t>(work.size()); }
  double Load(uint32_t d) const override { return work[d].prefilling + work[d].decoding; }
  bool Up(uint32_t d) const override { return up[d]; }
  bool HasWork() const override { return true; }
  DestinationWork Work(uint32_t d) const override { return work[d]; }
  EngineMetrics Scraped(uint32_t d) const override { return {Load(d), kv_usage[d]}; }
  std::vector<DestinationWork> work;
  std::vector<bool> up;
  std::vector<double> kv_usage;
};

TEST_CASE(
    "Token work: with memory_short, a destination whose KV cannot hold the request costs more",
    "[router]") {
  // μ = 1: every token by which d's KV (the scraped usage of its capacity, the queued prefill
  // ahead, the request's uncached tokens) overflows its capacity costs as one uncached token.
  SeededRandom random(9);
  ManualClock clock;
  // `cleared`: every capacity set back to 0 before the second pick (an engine that stopped
  // publishing it).
  auto stays_warm = [&](double memory_short, double capacity, double usage, bool cleared = false) {
    DispatchOptions options = PlainTokenWork();
    options.memory_short = memory_short;
    Router router({.destination_count = 4, .dispatch = options}, random);
    for (uint32_t d = 0; d < 4; ++d) REQUIRE(router.SetKvCapacity(d, capacity).ok);
    WorkView view(4);
    const PickRequest request{.key_id = kCold, .prompt_tokens = 10000};
    const uint32_t warm = router.Decide(request, view, clock.Now()).destination;
    // 9,000 tokens queued at the warm destination: it costs 9,000 + 0 uncached against 10,000
    // anywhere else, so without the memory term it stays.
    view.work[warm].queued_prefill_tokens = 9000;
    view.work[warm].prefilling = 1;
    view.kv_usage[warm] = usage;
    if (cleared) {
      for (uint32_t d = 0; d < 4; ++d) REQUIRE(router.SetKvCapacity(d, 0).ok);
    }
    return router.Decide(request, view, clock.Now()).destination == warm;
  };
  CHECK(stays_warm(0, 0, 0));
  CHECK(stays_warm(1, 0, 1.0));  // no capacity known: no term
  // 20,000 tokens of KV, 10% used: 2,000 + 9,000 queued + 0 uncached fit.
  CHECK(stays_warm(1, 20000, 0.1));
  // 30% used: 6,000 + 9,000 = 15,000 fit as well; 25,000 of a 20,000 capacity (usage 0.8) do
  // not: 9,000 + 5,000 > 10,000.
  CHECK(stays_warm(1, 20000, 0.3));
  CHECK_FALSE(stays_warm(1, 20000, 0.8));
  CHECK(stays_warm(0, 20000, 0.8));
  CHECK(stays_warm(1, 20000, 0.8, /*cleared=*/true));

  Router router({.destination_count = 2}, random);
  CHECK_FALSE(router.SetKvCapacity(2, 1000).ok);
  CHECK_FALSE(router.SetKvCapacity(0, -1).ok);
  CHECK_FALSE(router.SetKvCapacity(0, std::numeric_limits<double>::infinity()).ok);
  CHECK(router.SetKvCapacity(0, 0).ok);
}

TEST_CASE("Token work: the decision is the cheapest candidate, however the fleet is loaded",
          "[router]") {
  // Eight destinations, so that every one is a candidate and the cheapest is known here: planned
  // members and the remembered destination expect the key's previous prompt cached, the others
  // nothing (no template measured). Idle destinations tie at the cold cost, so the check is on
  // the cost, and the trials mix idle and loaded destinations, warm ones cheaper or dearer than
  // any cold one (the cases where the rule may skip costing a candidate and where it may not).
  SeededRandom random(21);
  ManualClock clock;
  DispatchOptions options;  // γ, β and μ as shipped; κ off, as shipped and large
  options.queue_wait = GENERATE(0.0, DispatchOptions{}.queue_wait, 0.5);
  constexpr uint32_t kN = 8;
  Router router({.destination_count = kN, .dispatch = options}, random);
  // KV capacities: unknown at destination 0, 4,000 to 32,000 tokens elsewhere.
  std::vector<double> capacity(kN, 0.0);
  for (uint32_t d = 1; d < kN; ++d) {
    capacity[d] = 4000.0 * d;
    REQUIRE(router.SetKvCapacity(d, capacity[d]).ok);
  }
  constexpr uint32_t kMeanPrompt = 1000;  // nothing cached: no template
  router.ObserveServed({0, false, Reason::kPolicy, false, 1000}, kMeanPrompt, 0);
  std::vector<TableEntry> entries;
  for (int k = 0; k < 100; ++k) {
    entries.push_back({KeyId("planned-" + std::to_string(k)),
                       {static_cast<uint32_t>(k % kN), static_cast<uint32_t>((k + 3) % kN)}});
  }
  REQUIRE(router.Install(MakeTable({1, 1}, kN, entries), clock.Now()).ok);
  std::mt19937_64 rng(5);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  int skipped_cases = 0, moved = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const bool planned = trial % 3 == 0;
    const uint64_t key =
        planned ? entries[trial % entries.size()].key_id : KeyId("tail-" + std::to_string(trial));
    const uint32_t previous = 200 + static_cast<uint32_t>(uniform(0, 4000));
    WorkView idle(kN);
    const uint32_t remembered =
        router.Decide({.key_id = key, .prompt_tokens = previous}, idle, clock.Now()).destination;
    REQUIRE(remembered < kN);
    WorkView view(kN);
    double prefilling = 0;
    for (uint32_t d = 0; d < kN; ++d) {
      if (uniform(0, 1) < 0.4) continue;  // idle
      view.work[d].queued_prefill_tokens = std::floor(uniform(0, 6000));
      view.work[d].prefilling = std::floor(uniform(0, 4));
      view.work[d].decoding = std::floor(uniform(0, 40));
      view.kv_usage[d] = uniform(0, 1);
      prefilling += view.work[d].prefilling;
    }
    if (uniform(0, 1) < 0.1) view.up[static_cast<uint32_t>(uniform(0, kN))] = false;
    const uint32_t prompt = 100 + static_cast<uint32_t>(uniform(0, 5000));
    const Decision decision =
        router.Decide({.key_id = key, .prompt_tokens = prompt}, view, clock.Now());
    REQUIRE(decision.destination < kN);
    REQUIRE(view.up[decision.destination]);

    const DestinationSet set = router.table()->Find(key);
    const double base = 1 + options.queue_stall * prefilling / kN;
    const double warm_cached = std::min(prompt, previous);
    auto cost = [&](uint32_t d) {
      const bool warm = d == remembered || std::find(set.begin(), set.end(), d) != set.end();
      const double cached = warm ? warm_cached : 0.0;
      const double short_by = view.kv_usage[d] * capacity[d] + view.work[d].queued_prefill_tokens +
                              (prompt - cached) - capacity[d];
      return view.work[d].queued_prefill_tokens +
             options.queue_wait * kMeanPrompt * view.work[d].prefilling +
             (base + options.decode_stall * view.work[d].decoding) * (prompt - cached) +
             (capacity[d] > 0 ? options.memory_short * std::max(0.0, short_by) : 0.0);
    };
    double cheapest = std::numeric_limits<double>::infinity();
    double cheapest_cold = std::numeric_limits<double>::infinity();
    for (uint32_t d = 0; d < kN; ++d) {
      if (!view.up[d]) continue;
      cheapest = std::min(cheapest, cost(d));
      const bool warm = d == remembered || std::find(set.begin(), set.end(), d) != set.end();
      if (!warm) cheapest_cold = std::min(cheapest_cold, cost(d));
    }
    INFO("trial " << trial << ", chosen " << decision.destination << ", remembered " << remembered);
    CHECK(cost(decision.destination) == Approx(cheapest).epsilon(1e-12));
    if (view.up[remembered] && cost(remembered) <= base * prompt) ++skipped_cases;
    if (cheapest_cold < cost(remembered)) ++moved;
  }
  // Both kinds of case occurred: a warm destination no cold one could undercut, and one that a
  // cold destination did.
  CHECK(skipped_cases > 100);
  CHECK(moved > 100);
}

TEST_CASE("Token work: the control arm is the dispatch without the table; the paper's is power of two",
          "[router]") {
  SeededRandom random(22);
  ManualClock clock;
  // One key planned on destination 5 alone, on the control arm (table fraction 0).
  const uint64_t key = KeyId("control-key");
  const std::vector<TableEntry> entries = {{.key_id = key, .destinations = {5}}};
  auto table = [&] {
    auto built = RoutingTable::Build({1, 1}, 8, std::vector<double>(8, 1.0), entries, 0.0);
    REQUIRE(built.ok());
    return std::make_shared<const RoutingTable>(*std::move(built));
  };
  Router router({.destination_count = 8, .dispatch = PlainTokenWork()}, random);
  REQUIRE(router.Install(table(), clock.Now()).ok);
  const PickRequest request{.key_id = key, .prompt_tokens = 1000};
  InFlight first = router.Pick(request, clock.Now());
  CHECK(first.reason() == Reason::kControlArm);
  CHECK_FALSE(first.planned());
  const uint32_t went = first.destination();
  first.Release();
  // The dispatch remembers where the key went and sends it back there, as it would with no table
  // at all; the planned destination is not a candidate of its own.
  for (int i = 0; i < 20; ++i) {
    InFlight again = router.Pick(request, clock.Now());
    CHECK(again.reason() == Reason::kControlArm);
    CHECK(again.destination() == went);
    CHECK(again.decision().expected == CacheExpectation::kKey);
  }
  // The paper's rule: power of two choices, remembering nothing.
  Router paper({.destination_count = 8, .dispatch = DispatchOptions::Paper()}, random);
  REQUIRE(paper.Install(table(), clock.Now()).ok);
  std::set<uint32_t> destinations;
  for (int i = 0; i < 40; ++i) {
    InFlight r = paper.Pick(request, clock.Now());
    CHECK(r.reason() == Reason::kControlArm);
    destinations.insert(r.destination());
  }
  CHECK(destinations.size() >= 4);
}

TEST_CASE("Token work: a remembered destination is cold after its turnover", "[router]") {
  SeededRandom random(7);
  ManualClock clock;
  Router router({.destination_count = 8, .dispatch = PlainTokenWork()}, random);
  const PickRequest request{.key_id = kCold, .prompt_tokens = 1000};
  InFlight first = router.Pick(request, clock.Now());
  const uint32_t warm = first.destination();
  CHECK(first.reason() == Reason::kNoTable);
  first.Release();
  // 100 tokens queued at the warm destination: cheaper than 1,000 cold ones elsewhere.
  InFlight queued = router.Track({warm, false, Reason::kPolicy, false, 100}, 100);
  REQUIRE(router.SetTurnover(warm, seconds(10)).ok);
  CHECK_FALSE(router.SetTurnover(8, seconds(1)).ok);
  CHECK_FALSE(router.SetTurnover(0, seconds(-1)).ok);
  clock.Advance(seconds(9));
  InFlight second = router.Pick(request, clock.Now());
  CHECK(second.destination() == warm);
  CHECK(second.decision().expected == CacheExpectation::kKey);
  second.Release();
  // Eleven seconds after the last send there its cache has turned over: 100 + 1,000 there
  // against 1,000 on an idle destination.
  clock.Advance(seconds(11));
  InFlight third = router.Pick(request, clock.Now());
  CHECK(third.destination() != warm);
  CHECK(third.decision().expected == CacheExpectation::kTemplate);
}

TEST_CASE("Token work: a new key whose prompt shares a remembered prefix goes where it went",
          "[router]") {
  SeededRandom random(8);
  ManualClock clock;
  Router router({.destination_count = 8, .dispatch = PlainTokenWork()}, random);
  std::vector<uint64_t> hashes;
  for (uint64_t i = 0; i < 100; ++i) hashes.push_back(Mix64(i + 1));
  InFlight first =
      router.Pick(PickRequest{.key_id = KeyId("a"), .prompt_tokens = 1600, .block_hashes = hashes},
                  clock.Now());
  first.Release();
  // Another key, the same first 70 blocks: the prefix memory finds the first 65 (up to block 64,
  // the deepest grid position they share) where the first went.
  std::vector<uint64_t> other(hashes.begin(), hashes.begin() + 70);
  for (uint64_t i = 0; i < 30; ++i) other.push_back(Mix64(1000 + i));
  InFlight second = router.Pick(
      PickRequest{.key_id = KeyId("b"), .prompt_tokens = 1600, .block_hashes = other}, clock.Now());
  CHECK(second.destination() == first.destination());
  CHECK(second.decision().expected == CacheExpectation::kPrefix);
  CHECK(second.decision().expected_uncached_tokens == 1600 - 65 * 16);
  // Without a prefix memory nothing connects the two keys.
  DispatchOptions off = PlainTokenWork();
  off.prefix_memory_log2 = 0;
  Router blind({.destination_count = 8, .dispatch = off}, random);
  InFlight a =
      blind.Pick(PickRequest{.key_id = KeyId("a"), .prompt_tokens = 1600, .block_hashes = hashes},
                 clock.Now());
  InFlight b = blind.Pick(
      PickRequest{.key_id = KeyId("b"), .prompt_tokens = 1600, .block_hashes = other}, clock.Now());
  CHECK(b.decision().expected == CacheExpectation::kTemplate);
}

TEST_CASE("Token work: served requests calibrate the template and the key memory's yield",
          "[router]") {
  SeededRandom random(9);
  ManualClock clock;
  Router router({.destination_count = 8, .dispatch = PlainTokenWork()}, random);
  CHECK(router.template_tokens() == 0);
  CHECK(router.warm_yield() == 1.0);
  // Requests sent cold found 200 tokens cached: that is the template.
  Decision cold{.destination = 1};
  for (int i = 0; i < 2000; ++i) router.ObserveServed(cold, 1000, 200);
  CHECK(router.template_tokens() == Approx(200).margin(1));
  // Requests sent where the key's memory promised 800 tokens beyond the template found 400.
  Decision warm{
      .destination = 1, .expected_uncached_tokens = 1, .expected = CacheExpectation::kKey};
  for (int i = 0; i < 2000; ++i) {
    // The promise as the current yield makes it: 200 + yield · 800 cached.
    warm.expected_uncached_tokens = static_cast<uint32_t>(1000 - 200 - router.warm_yield() * 800);
    router.ObserveServed(warm, 1000, 600);
  }
  CHECK(router.warm_yield() == Approx(0.5).margin(0.02));
  // A request of unknown length is taken as long as the mean prompt.
  const Decision d = router.Decide(PickRequest{.key_id = kCold}, router.loads(), clock.Now());
  CHECK(d.expected_uncached_tokens == Approx(800).margin(2));
  // The measured hit is only kept.
  CHECK_FALSE(router.SetMeasuredHit(-0.1).ok);
  CHECK_FALSE(router.SetMeasuredHit(1.5).ok);
  REQUIRE(router.SetMeasuredHit(0.25).ok);
  CHECK(router.measured_hit() == 0.25);
}

TEST_CASE("InFlight tokens count requests until destroyed", "[router]") {
  SeededRandom random(4);
  ManualClock clock;
  Router router({.destination_count = 4, .dispatch = DispatchOptions::Paper()}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 4, {{kSolo, {2}}}), clock.Now()).ok);
  auto in_flight = [&] { return router.Stats(clock.Now()).in_flight[2]; };
  {
    InFlight a = router.Pick(kSolo, clock.Now());
    CHECK(in_flight() == 1);
    {
      InFlight b = router.Pick(kSolo, clock.Now());
      CHECK(in_flight() == 2);
    }
    CHECK(in_flight() == 1);
    InFlight moved = std::move(a);
    CHECK(in_flight() == 1);  // a move transfers, it does not count twice or release
    InFlight other = router.Pick(kSolo, clock.Now());
    CHECK(in_flight() == 2);
    other = std::move(moved);  // assignment releases what `other` held
    CHECK(in_flight() == 1);
    other.Release();
    other.Release();  // idempotent
    CHECK(in_flight() == 0);
  }
  CHECK(in_flight() == 0);
  std::vector<InFlight> held;
  for (int i = 0; i < 10; ++i) held.push_back(router.Pick(kSolo, clock.Now()));
  CHECK(in_flight() == 10);
  held.clear();
  CHECK(in_flight() == 0);
}

TEST_CASE("Track counts another policy's decision in flight", "[router]") {
  SeededRandom random(14);
  ManualClock clock;
  Router router({.destination_count = 4}, random);
  auto in_flight = [&] { return router.Stats(clock.Now()).in_flight; };
  {
    InFlight a = router.Track({3, false, Reason::kPolicy});
    REQUIRE(a.ok());
    CHECK(a.destination() == 3);
    CHECK(a.reason() == Reason::kPolicy);
    CHECK_FALSE(a.planned());
    InFlight b = router.Track({3, false, Reason::kPolicy});
    CHECK(in_flight() == std::vector<int64_t>{0, 0, 0, 2});
    CHECK(router.loads().Load(3) == 2.0);  // what the next policy decision sees
    b.Release();
    CHECK(in_flight()[3] == 1);
  }
  CHECK(in_flight()[3] == 0);
  // No destination, or one the Router does not have: a token that counts nothing.
  InFlight none = router.Track({kNoDestination, false, Reason::kPolicy});
  CHECK_FALSE(none.ok());
  CHECK(none.destination() == kNoDestination);
  InFlight outside = router.Track({4, false, Reason::kPolicy});
  CHECK_FALSE(outside.ok());
  CHECK(in_flight() == std::vector<int64_t>{0, 0, 0, 0});
  // Tracking is not a pick: the stats count the Router's own decisions only.
  const RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.planned == 0);
  CHECK(stats.fallback_total == 0);
}

TEST_CASE("Pick counts every routed key in the rate recorder", "[router]") {
  SeededRandom random(21);
  ManualClock clock;
  RateRecorder recorder({.shards = 1});
  Router router({.destination_count = 4, .rate_recorder = &recorder}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 4, {{kHot, {0, 1}}}), clock.Now()).ok);
  for (int i = 0; i < 3; ++i) CHECK(router.Pick(kHot, clock.Now()).planned());
  for (int i = 0; i < 2; ++i) CHECK_FALSE(router.Pick(kCold, clock.Now()).planned());
  // Decide and Track route nothing by themselves: whoever called them records the key.
  (void)router.Decide(kSolo, router.loads(), clock.Now());
  (void)router.Track({2, false, Reason::kPolicy});
  const RateSnapshot snapshot = recorder.Drain();
  CHECK(snapshot.total == 5);
  std::vector<KeyCount> expected = {{kHot, 3, 0}, {kCold, 2, 0}};
  std::sort(expected.begin(), expected.end(),
            [](const KeyCount& a, const KeyCount& b) { return a.key_id < b.key_id; });
  CHECK(snapshot.counts == expected);
  CHECK(snapshot.other_count == 0);
}

// The install tests' start: a Router over 4 destinations (random source seeded with `seed`, a
// manual clock) whose last good table, `version`, plans kSolo on destination 1.
struct GoodTableInstalled {
  GoodTableInstalled(uint64_t seed, TableVersion version) : random(seed) {
    REQUIRE(Install(MakeTable(version, 4, {{kSolo, {1}}})).ok);
  }
  Status Install(std::shared_ptr<const RoutingTable> table) {
    return router.Install(std::move(table), clock.Now());
  }

  SeededRandom random;
  ManualClock clock;
  Router router{{.destination_count = 4, .dispatch = DispatchOptions::Paper()}, random};
};

TEST_CASE("Install rejects a version regression and keeps the last good table", "[router]") {
  GoodTableInstalled t(5, {7, 5});

  Status older = t.Install(MakeTable({7, 4}, 4, {{kSolo, {3}}}));
  CHECK_FALSE(older.ok);
  CHECK(older.message.find("version regression") != std::string::npos);
  CHECK(older.message.find("7.4") != std::string::npos);
  Status same = t.Install(MakeTable({7, 5}, 4, {{kSolo, {3}}}));
  CHECK_FALSE(same.ok);
  Status older_epoch = t.Install(MakeTable({6, 99}, 4, {{kSolo, {3}}}));
  CHECK_FALSE(older_epoch.ok);

  CHECK(t.router.Pick(kSolo, t.clock.Now()).destination() == 1);
  RouterStats stats = t.router.Stats(t.clock.Now());
  CHECK(stats.version == TableVersion{7, 5});
  CHECK(stats.installs == 1);
  CHECK(stats.rejected_installs == 3);
  CHECK(stats.last_rejection == older_epoch.message);

  // A new epoch with a smaller number is newer.
  REQUIRE(t.Install(MakeTable({8, 0}, 4, {{kSolo, {3}}})).ok);
  CHECK(t.router.Pick(kSolo, t.clock.Now()).destination() == 3);
  CHECK(t.router.table()->version() == TableVersion{8, 0});
}

TEST_CASE("Install rejects a table over a different destination count", "[router]") {
  GoodTableInstalled t(6, {1, 1});
  Status wider = t.Install(MakeTable({1, 2}, 5, {{kSolo, {4}}}));
  CHECK_FALSE(wider.ok);
  CHECK(wider.message.find("unknown destination") != std::string::npos);
  CHECK_FALSE(t.Install(nullptr).ok);
  CHECK(t.router.Pick(kSolo, t.clock.Now()).destination() == 1);
  CHECK(t.router.Stats(t.clock.Now()).version == TableVersion{1, 1});
}

TEST_CASE("Resize changes the destinations routed over, with the re-mapped table", "[router]") {
  SeededRandom random(16);
  ManualClock clock;
  Router router({.destination_count = 3, .capacity = 5}, random);
  CHECK(router.capacity() == 5);
  REQUIRE(router.Install(MakeTable({1, 4}, 3, {{kSolo, {2}}}), clock.Now()).ok);
  InFlight held = router.Pick(kSolo, clock.Now());  // on 2, across the resizes below
  REQUIRE(held.destination() == 2);

  // Grow to 5 with the same version re-mapped: the key now lives on 4.
  REQUIRE(router.Resize(5, MakeTable({1, 4}, 5, {{kSolo, {4}}}), clock.Now()).ok);
  CHECK(router.destination_count() == 5);
  CHECK(router.loads().size() == 5);
  CHECK(router.Pick(kSolo, clock.Now()).destination() == 4);
  // Unplanned keys spread over all five but 2, whose queued request makes it dearer.
  std::vector<int> seen(5, 0);
  for (int i = 0; i < 500; ++i) {
    seen[router.Pick(KeyId("tail-" + std::to_string(i)), clock.Now()).destination()]++;
  }
  for (uint32_t d : {0u, 1u, 3u, 4u}) CHECK(seen[d] > 50);

  // Shrink to 2 without a table: nothing goes to 2, 3 or 4 any more, but the token held on 2
  // is still released there.
  REQUIRE(router.Resize(2, nullptr, clock.Now()).ok);
  CHECK_FALSE(router.Stats(clock.Now()).has_table);
  for (int i = 0; i < 200; ++i) {
    const InFlight r = router.Pick(KeyId("tail-" + std::to_string(i)), clock.Now());
    REQUIRE(r.ok());
    CHECK(r.destination() < 2);
    CHECK(r.reason() == Reason::kNoTable);
  }
  CHECK(router.Stats(clock.Now()).in_flight.size() == 2);
  held.Release();
  REQUIRE(router.Resize(3, nullptr, clock.Now()).ok);
  CHECK(router.Stats(clock.Now()).in_flight[2] == 0);

  // Refused: past the capacity, zero, a table of another count, an older version.
  CHECK_FALSE(router.Resize(6, nullptr, clock.Now()).ok);
  CHECK_FALSE(router.Resize(0, MakeTable({1, 5}, 1, {{kSolo, {0}}}), clock.Now()).ok);
  CHECK_FALSE(router.Resize(3, MakeTable({1, 5}, 4, {{kSolo, {3}}}), clock.Now()).ok);
  REQUIRE(router.Install(MakeTable({1, 6}, 3, {{kSolo, {1}}}), clock.Now()).ok);
  const Status older = router.Resize(3, MakeTable({1, 5}, 3, {{kSolo, {0}}}), clock.Now());
  CHECK_FALSE(older.ok);
  CHECK(router.Pick(kSolo, clock.Now()).destination() == 1);
  // A table over the new count installs only through Resize.
  CHECK_FALSE(router.Install(MakeTable({1, 7}, 4, {{kSolo, {3}}}), clock.Now()).ok);
  REQUIRE(router.Resize(4, MakeTable({1, 7}, 4, {{kSolo, {3}}}), clock.Now()).ok);
  CHECK(router.Pick(kSolo, clock.Now()).destination() == 3);
  CHECK(router.SetLoad(4, 1.0).ok);  // within capacity
  CHECK_FALSE(router.SetLoad(5, 1.0).ok);
}

TEST_CASE("A table older than its TTL falls back until refreshed", "[router]") {
  SeededRandom random(7);
  ManualClock clock;
  Router router({.destination_count = 4, .table_ttl = seconds(10)}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 4, {{kSolo, {2}}}), clock.Now()).ok);

  clock.Advance(seconds(10));
  CHECK(router.Pick(kSolo, clock.Now()).planned());  // exactly the TTL: still fresh
  clock.Advance(seconds(1));
  InFlight stale = router.Pick(kSolo, clock.Now());
  CHECK_FALSE(stale.planned());
  CHECK(stale.reason() == Reason::kStale);
  RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.stale);
  CHECK(stats.table_age == seconds(11));
  CHECK(stats.fallback[static_cast<int>(Reason::kStale)] == 1);

  router.Refresh(clock.Now());
  CHECK(router.Pick(kSolo, clock.Now()).planned());
  clock.Advance(seconds(3));
  stats = router.Stats(clock.Now());
  CHECK_FALSE(stats.stale);
  CHECK(stats.table_age == seconds(14));
  CHECK(stats.since_refresh == seconds(3));

  // A new table restarts the TTL too.
  clock.Advance(seconds(20));
  CHECK(router.Pick(kSolo, clock.Now()).reason() == Reason::kStale);
  REQUIRE(router.Install(MakeTable({1, 2}, 4, {{kSolo, {2}}}), clock.Now()).ok);
  CHECK(router.Pick(kSolo, clock.Now()).planned());
}

TEST_CASE("Down destinations are skipped; a fully down set falls back", "[router]") {
  SeededRandom random(8);
  ManualClock clock;
  Router router({.destination_count = 6}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 6, {{kHot, {1, 2}}}), clock.Now()).ok);

  REQUIRE(router.MarkDown(1).ok);
  CHECK(router.Pick(kHot, clock.Now()).destination() == 2);
  REQUIRE(router.MarkDown(2).ok);
  for (int i = 0; i < 200; ++i) {
    InFlight r = router.Pick(kHot, clock.Now());
    REQUIRE(r.ok());
    CHECK_FALSE(r.planned());
    CHECK(r.reason() == Reason::kSetDown);
    CHECK(r.destination() != 1);
    CHECK(r.destination() != 2);
  }
  CHECK(router.Stats(clock.Now()).fallback[static_cast<int>(Reason::kSetDown)] == 200);
  REQUIRE(router.MarkUp(1).ok);
  CHECK(router.Pick(kHot, clock.Now()).destination() == 1);

  for (uint32_t d = 0; d < 6; ++d) REQUIRE(router.MarkDown(d).ok);
  InFlight none = router.Pick(kCold, clock.Now());
  CHECK_FALSE(none.ok());
  CHECK(none.destination() == kNoDestination);
  CHECK(router.Stats(clock.Now()).no_destination == 1);
  CHECK(router.Stats(clock.Now()).in_flight == std::vector<int64_t>(6, 0));
  CHECK_FALSE(router.MarkDown(6).ok);
  CHECK_FALSE(router.MarkUp(6).ok);
}

TEST_CASE("Fallback spreads unadmitted keys by power of two choices", "[router]") {
  SeededRandom random(9);
  ManualClock clock;
  Router router({.destination_count = 2, .dispatch = DispatchOptions::Paper()}, random);
  REQUIRE(router.Install(MakeTable({1, 1}, 2, {}), clock.Now()).ok);
  // With two destinations both are always the candidates: the lighter one always wins.
  InFlight first = router.Pick(kCold, clock.Now());
  for (int i = 0; i < 20; ++i) {
    InFlight r = router.Pick(KeyId("cold-" + std::to_string(i)), clock.Now());
    CHECK(r.destination() != first.destination());
  }
}

// The Pick fallback draws a pair of distinct up destinations uniformly and sends the request to
// the lighter one (the first drawn on a tie).
TEST_CASE("Fallback candidates are a uniform pair of distinct up destinations", "[router]") {
  SeededRandom random(10);
  ManualClock clock;
  SECTION("idle fleet: every up destination equally often, never a down one") {
    Router router({.destination_count = 5, .dispatch = DispatchOptions::Paper()}, random);
    REQUIRE(router.Install(MakeTable({1, 1}, 5, {}), clock.Now()).ok);
    REQUIRE(router.MarkDown(3).ok);
    std::vector<int> count(5, 0);
    for (int i = 0; i < 20000; ++i) ++count[router.Pick(kCold, clock.Now()).destination()];
    CHECK(count[3] == 0);
    for (uint32_t d : {0u, 1u, 2u, 4u}) {
      INFO("destination " << d);
      CHECK(count[d] > 4700);  // 5,000 expected; the standard deviation is about 61
      CHECK(count[d] < 5300);
    }
  }
  SECTION("loads 2, 1, 0: the heaviest never wins, so the two candidates always differ") {
    Router router({.destination_count = 3, .dispatch = DispatchOptions::Paper()}, random);
    REQUIRE(router.Install(MakeTable({1, 1}, 3, {{kHot, {0}}, {kSolo, {1}}}), clock.Now()).ok);
    std::vector<InFlight> held;
    held.push_back(router.Pick(kHot, clock.Now()));
    held.push_back(router.Pick(kHot, clock.Now()));
    held.push_back(router.Pick(kSolo, clock.Now()));
    std::vector<int> count(3, 0);
    for (int i = 0; i < 6000; ++i) ++count[router.Pick(kCold, clock.Now()).destination()];
    CHECK(count[0] == 0);
    CHECK(count[1] > 1700);  // pair {0, 1}: 1/3 of 6,000 = 2,000
    CHECK(count[1] < 2300);
    CHECK(count[2] == 6000 - count[1]);
  }
  SECTION("one destination") {
    Router router({.destination_count = 1, .dispatch = DispatchOptions::Paper()}, random);
    CHECK(router.Pick(kCold, clock.Now()).destination() == 0);
    REQUIRE(router.MarkDown(0).ok);
    CHECK_FALSE(router.Pick(kCold, clock.Now()).ok());
  }
}

// Readers pick (and hold tokens) while a writer installs a stream of new tables and flips health.
// Every table admits every key, so every pick must be planned onto a destination of the key's set;
// at the end no request is in flight and the counters add up. Run under TSan in CI.
TEST_CASE("Concurrent picks while tables are installed", "[router][concurrency]") {
  constexpr uint32_t kDestinations = 16;
  constexpr int kReaders = 4;
  constexpr int kPicksPerReader = 20000;
  constexpr int kKeys = 64;
  SeededRandom random(10);
  ManualClock clock;
  Router router({.destination_count = kDestinations}, random);

  // Table v maps key i to {(i + v) % R, (i + v + 1) % R}: each key's sets share shape, so a
  // reader can check membership without knowing which version it saw.
  auto table_for = [&](uint64_t v) {
    std::vector<TableEntry> entries;
    for (uint32_t i = 0; i < kKeys; ++i) {
      entries.push_back({KeyId("k" + std::to_string(i)),
                         {static_cast<uint32_t>((i + v) % kDestinations),
                          static_cast<uint32_t>((i + v + 1) % kDestinations)}});
    }
    return MakeTable({1, v}, kDestinations, entries);
  };
  REQUIRE(router.Install(table_for(0), clock.Now()).ok);

  std::atomic<bool> go{false};
  std::atomic<int> readers_done{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      std::vector<InFlight> held;
      for (int i = 0; i < kPicksPerReader; ++i) {
        const uint32_t k = static_cast<uint32_t>((i * 7 + t) % kKeys);
        InFlight r = router.Pick(KeyId("k" + std::to_string(k)), clock.Now());
        if (!r.ok() || !r.planned() || r.destination() >= kDestinations) failures.fetch_add(1);
        held.push_back(std::move(r));
        if (held.size() > 8) held.erase(held.begin());
      }
      readers_done.fetch_add(1);
    });
  }
  go.store(true);
  uint64_t version = 1;
  while (readers_done.load() < kReaders) {
    REQUIRE(router.Install(table_for(version), clock.Now()).ok);
    CHECK_FALSE(router.Install(table_for(version - 1), clock.Now()).ok);
    (void)router.Stats(clock.Now());
    (void)router.SetLoad(static_cast<uint32_t>(version % kDestinations), version % 3);
    ++version;
  }
  for (auto& reader : readers) reader.join();

  CHECK(failures.load() == 0);
  CHECK(version > 1);
  RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.planned == static_cast<uint64_t>(kReaders) * kPicksPerReader);
  CHECK(stats.fallback_total == 0);
  CHECK(stats.in_flight == std::vector<int64_t>(kDestinations, 0));
  CHECK(stats.version == TableVersion{1, version - 1});
  INFO("tables installed during the run: " << version - 1);
}

TEST_CASE("In-flight counts are per thread: exact in Stats, bounded-stale in loads()",
          "[router][concurrency]") {
  SeededRandom random(22);
  ManualClock clock;
  Router router({.destination_count = 4}, random);
  auto in_flight = [&] { return router.Stats(clock.Now()).in_flight; };

  // Another thread picks three requests and hands them over; this thread's first read of the
  // destination sees them (nothing cached yet), and Stats counts them.
  std::vector<InFlight> handed;
  std::thread([&] {
    for (int i = 0; i < 3; ++i) handed.push_back(router.Track({2, false, Reason::kPolicy}));
  }).join();
  CHECK(in_flight() == std::vector<int64_t>{0, 0, 3, 0});
  CHECK(router.loads().Load(2) == 3.0);

  // Released here: counted in this thread's shard, read live, so seen at once (and never below 0).
  handed.pop_back();
  CHECK(in_flight()[2] == 2);
  CHECK(router.loads().Load(2) == 2.0);

  // Released by another thread: Stats sees it at once; loads() within kViewTicks Load calls.
  std::thread([&] { handed.pop_back(); }).join();
  CHECK(in_flight()[2] == 1);
  uint32_t calls = 1;
  while (router.loads().Load(2) != 1.0 && calls <= Router::kViewTicks) ++calls;
  CHECK(calls <= Router::kViewTicks);

  // Another thread's new request: a Pick whose `now` is kMaxViewAge later drops the cached sums.
  std::thread([&] { handed.push_back(router.Track({2, false, Reason::kPolicy})); }).join();
  CHECK(in_flight()[2] == 2);
  clock.Advance(Router::kMaxViewAge + std::chrono::microseconds(1));
  (void)router.Pick(kCold, clock.Now());  // released at once
  CHECK(router.loads().Load(2) == 2.0);

  handed.clear();
  CHECK(in_flight() == std::vector<int64_t>{0, 0, 0, 0});
}

// Calls `done` until it holds, at most kViewTicks + 1 times (a thread's view of the others' counts
// is re-read within kViewTicks of its reads); whether it held.
template <typename Done>
bool WithinViewTicks(Done done) {
  for (uint32_t calls = 0; calls <= Router::kViewTicks; ++calls) {
    if (done()) return true;
  }
  return false;
}

// The token-work ledger is kept per thread like the in-flight counts: what other threads added
// or removed shows within kViewTicks view reads (or at once after a Pick kMaxViewAge later), and a
// release seen before its pick reads as nothing, never as a negative or garbled count.
TEST_CASE("Token work: the ledger counts requests started and ended on other threads",
          "[router][concurrency]") {
  SeededRandom random(24);
  ManualClock clock;
  Router router({.destination_count = 4}, random);
  REQUIRE(router.loads().HasWork());
  auto work = [&](uint32_t d) { return router.loads().Work(d); };

  // Picked by another thread: this thread's first reads see them (nothing cached yet).
  std::vector<InFlight> handed;
  std::thread([&] {
    handed.push_back(router.Track({2, false, Reason::kPolicy}, 1000));
    handed.push_back(router.Track({2, false, Reason::kPolicy}, 1000));
  }).join();
  CHECK(work(2).queued_prefill_tokens == 2000);
  CHECK(work(2).prefilling == 2);
  CHECK(router.loads().FleetWork().prefilling == 2);

  // The first token, seen by a third thread.
  std::thread([&] { handed[0].FirstToken(); }).join();
  CHECK(WithinViewTicks([&] { return work(2).decoding == 1; }));
  CHECK(work(2).queued_prefill_tokens == 1000);
  CHECK(work(2).prefilling == 1);
  CHECK(WithinViewTicks([&] { return router.loads().FleetWork().prefilling == 1; }));

  // Released here: this thread's own share is read live.
  handed[1].Release();
  CHECK(work(2).queued_prefill_tokens == 0);
  CHECK(work(2).prefilling == 0);
  CHECK(work(2).decoding == 1);

  // Released by another thread: seen after a Pick kMaxViewAge later.
  std::thread([&] { handed.clear(); }).join();
  clock.Advance(Router::kMaxViewAge + std::chrono::microseconds(1));
  (void)router.Pick(PickRequest{.key_id = KeyId("cold"), .prompt_tokens = 10}, clock.Now());
  CHECK(work(2).decoding == 0);
  CHECK(router.loads().FleetWork().prefilling == 0);

  // A request another thread picked after this thread's view was read, released here: this
  // thread's share is negative until its view catches up, and reads as nothing meanwhile.
  CHECK(work(1).queued_prefill_tokens == 0);  // the view of destination 1 is fresh now
  InFlight late;
  std::thread([&] {
    late = router.Track({1, false, Reason::kPolicy}, 700);
    late.FirstToken();
  }).join();
  late.Release();
  const DestinationWork seen = work(1);
  CHECK(seen.queued_prefill_tokens == 0);
  CHECK(seen.prefilling == 0);
  CHECK(seen.decoding == 0);
  CHECK(WithinViewTicks([&] {
    const DestinationWork w = work(1);
    return w.queued_prefill_tokens == 0 && w.prefilling == 0 && w.decoding == 0;
  }));
}

// With RouterOptions::active_tokens the ledger keeps each destination's prompt tokens in flight, as
// the simulator's own view counts them: the prompt given to Pick or Track from then until release.
TEST_CASE("Active tokens: the prompt tokens in flight, per destination", "[router]") {
  SeededRandom random(31);
  ManualClock clock;
  Router router({.destination_count = 4, .active_tokens = true}, random);
  std::mt19937_64 rng(31);
  std::vector<InFlight> held;
  std::vector<double> expected(4, 0.0);
  for (int step = 0; step < 2000; ++step) {
    const uint32_t prompt = static_cast<uint32_t>(rng() % 5000);
    switch (rng() % 4) {
      case 0: {  // the Router's own pick, of a prompt known or not
        held.push_back(router.Pick(
            PickRequest{.key_id = KeyId("k" + std::to_string(rng() % 50)), .prompt_tokens = prompt},
            clock.Now()));
        expected[held.back().destination()] += prompt;
        break;
      }
      case 1: {  // another policy's decision, with or without its own estimate
        const uint32_t d = static_cast<uint32_t>(rng() % 4);
        held.push_back(router.Track({d, false, Reason::kPolicy, false, prompt / 2}, prompt));
        expected[d] += prompt;
        break;
      }
      case 2:  // the first token changes nothing here
        if (!held.empty()) held[rng() % held.size()].FirstToken();
        break;
      default:
        if (!held.empty()) {
          const size_t i = rng() % held.size();
          expected[held[i].destination()] -= held[i].prompt_tokens();
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    INFO("step " << step);
    for (uint32_t d = 0; d < 4; ++d) REQUIRE(router.loads().Work(d).active_tokens == expected[d]);
  }
  held.clear();
  for (uint32_t d = 0; d < 4; ++d) CHECK(router.loads().Work(d).active_tokens == 0);

  // Without the option none are kept; the paper's rule keeps no ledger at all.
  Router off({.destination_count = 4}, random);
  Router paper(
      {.destination_count = 4, .dispatch = DispatchOptions::Paper(), .active_tokens = true},
      random);
  InFlight a = off.Track({2, false, Reason::kPolicy}, 1000);
  InFlight b = paper.Track({2, false, Reason::kPolicy}, 1000);
  CHECK(off.loads().Work(2).active_tokens == 0);
  CHECK(off.loads().Work(2).prefilling == 1);
  CHECK(paper.loads().Work(2).active_tokens == 0);
}

TEST_CASE("Active tokens: counted across threads like the rest of the ledger",
          "[router][concurrency]") {
  SeededRandom random(32);
  ManualClock clock;
  Router router({.destination_count = 4, .active_tokens = true}, random);
  auto active = [&](uint32_t d) { return router.loads().Work(d).active_tokens; };
  // Tracked on another thread: this thread's first read sees them.
  std::vector<InFlight> handed;
  std::thread([&] {
    handed.push_back(router.Track({1, false, Reason::kPolicy}, 1200));
    handed.push_back(router.Track({1, false, Reason::kPolicy}, 800));
  }).join();
  CHECK(active(1) == 2000);
  // Released here: this thread's share is read live.
  handed.pop_back();
  CHECK(active(1) == 1200);
  // Released by a third thread: seen within kViewTicks reads, or after a Pick kMaxViewAge later.
  std::thread([&] { handed.clear(); }).join();
  CHECK(WithinViewTicks([&] { return active(1) == 0; }));
  std::thread([&] { handed.push_back(router.Track({3, false, Reason::kPolicy}, 500)); }).join();
  clock.Advance(Router::kMaxViewAge + std::chrono::microseconds(1));
  (void)router.Pick(PickRequest{.key_id = KeyId("cold"), .prompt_tokens = 10}, clock.Now());
  CHECK(active(3) == 500);
  // Picked by another thread after this thread's view was read, released here: this thread's
  // share is negative until its view catches up, and reads as nothing meanwhile.
  InFlight late;
  std::thread([&] { late = router.Track({0, false, Reason::kPolicy}, 900); }).join();
  late.Release();
  CHECK(active(0) == 0);
  CHECK(WithinViewTicks([&] { return active(0) == 0; }));

  // Many threads at once: at rest the sums are exact.
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<std::vector<InFlight>> kept(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        InFlight r = router.Track({static_cast<uint32_t>(i % 4), false, Reason::kPolicy}, 100);
        if (i % 1000 == 0) kept[t].push_back(std::move(r));  // 5 of them outlive the loop
      }
    });
  }
  for (auto& thread : threads) thread.join();
  handed.clear();
  clock.Advance(Router::kMaxViewAge + std::chrono::microseconds(1));
  (void)router.Pick(PickRequest{.key_id = KeyId("cold"), .prompt_tokens = 10}, clock.Now());
  // Each thread kept i = 0, 1000, …, 4000: destination 0 only.
  CHECK(active(0) == kThreads * 5 * 100);
  for (uint32_t d = 1; d < 4; ++d) CHECK(active(d) == 0);
  kept.clear();
  CHECK(WithinViewTicks(
      [&] { return active(0) == 0 && active(1) == 0 && active(2) == 0 && active(3) == 0; }));
}

// Tokens picked on some threads and released on others while Stats is read: no snapshot is
// negative, and at rest Stats and loads() are exact.
TEST_CASE("Tokens released on other threads keep Stats exact", "[router][concurrency]") {
  constexpr uint32_t kDestinations = 4;
  constexpr int kPairs = 2;
  constexpr int kTokens = 20000;
  SeededRandom random(23);
  ManualClock clock;
  Router router({.destination_count = kDestinations}, random);
  std::atomic<int> producers_done{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kPairs; ++p) {
    // A bounded single-producer single-consumer hand-off of tokens.
    auto slots = std::make_shared<std::vector<InFlight>>(64);
    auto head = std::make_shared<std::atomic<size_t>>(0);  // written by the producer
    auto tail = std::make_shared<std::atomic<size_t>>(0);  // written by the consumer
    threads.emplace_back([&, slots, head, tail] {
      for (int i = 0; i < kTokens; ++i) {
        const size_t h = head->load(std::memory_order_relaxed);
        while (h - tail->load(std::memory_order_acquire) == slots->size())
          std::this_thread::yield();
        (*slots)[h % slots->size()] = router.Pick(KeyId("t" + std::to_string(i % 16)), clock.Now());
        head->store(h + 1, std::memory_order_release);
      }
      producers_done.fetch_add(1);
    });
    threads.emplace_back([&, slots, head, tail] {
      for (int i = 0; i < kTokens; ++i) {
        const size_t t = tail->load(std::memory_order_relaxed);
        while (head->load(std::memory_order_acquire) == t) std::this_thread::yield();
        InFlight token = std::move((*slots)[t % slots->size()]);
        if (!token.ok()) failures.fetch_add(1);
        token.Release();
        tail->store(t + 1, std::memory_order_release);
      }
    });
  }
  // (A snapshot may count more than are alive at its end: releases are read before picks.)
  while (producers_done.load() < kPairs) {
    for (int64_t n : router.Stats(clock.Now()).in_flight) {
      if (n < 0) failures.fetch_add(1);
    }
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  CHECK(router.Stats(clock.Now()).in_flight == std::vector<int64_t>(kDestinations, 0));
  for (uint32_t d = 0; d < kDestinations; ++d) {
    uint32_t calls = 1;
    while (router.loads().Load(d) != 0.0 && calls <= Router::kViewTicks) ++calls;
    CHECK(calls <= Router::kViewTicks);
    // The token-work ledger too (the picks counted their prompts as queued prefill).
    calls = 1;
    auto idle = [&] {
      const DestinationWork w = router.loads().Work(d);
      return w.queued_prefill_tokens == 0 && w.prefilling == 0 && w.decoding == 0;
    };
    while (!idle() && calls <= Router::kViewTicks) ++calls;
    CHECK(calls <= Router::kViewTicks);
  }
  CHECK(router.loads().FleetWork().prefilling == 0);
}

TEST_CASE("ThreadLocalRandom: one sequence per thread and instance", "[random][concurrency]") {
  // On one thread it is SeededRandom's sequence, and instances do not disturb each other.
  SeededRandom reference(5);
  ThreadLocalRandom a(5);
  ThreadLocalRandom b(5);
  for (int i = 0; i < 100; ++i) {
    const uint64_t expected = reference.Next();
    CHECK(a.Next() == expected);
    CHECK(b.Next() == expected);
  }

  // Threads draw distinct streams (no value repeats across them), concurrently, from instances
  // created and destroyed on the way; a thread using more instances than its cache holds evicts
  // and gets a fresh stream when it comes back, never a repeat.
  constexpr int kThreads = 4;
  constexpr int kDraws = 2000;
  constexpr int kInstances = ThreadLocalRandom::kThreadCacheSize + 3;
  std::vector<std::unique_ptr<ThreadLocalRandom>> randoms;
  for (int i = 0; i < kInstances; ++i) {
    randoms.push_back(std::make_unique<ThreadLocalRandom>(100 + i));
  }
  std::vector<std::vector<uint64_t>> draws(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kDraws; ++i) {
        draws[t].push_back(randoms[static_cast<size_t>(i % kInstances)]->Next());
        if (i % 500 == 0) draws[t].push_back(ThreadLocalRandom(9).Next());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<uint64_t> all;
  for (const auto& d : draws) all.insert(all.end(), d.begin(), d.end());
  const size_t drawn = all.size();
  // The short-lived instances each drew the first value of seed 9's first stream.
  const uint64_t first_of_seed = ThreadLocalRandom(9).Next();
  std::erase(all, first_of_seed);
  CHECK(drawn - all.size() == kThreads * (kDraws / 500));
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
}

// More request threads than per-thread shards (router_internal::kShards): the threads that find no
// free shard share the last one. All run at once, against concurrent installs; every pick is
// counted exactly once, by reason, and a thread that exits returns its shard.
TEST_CASE("Stats add up across more threads than shards", "[router][concurrency]") {
  constexpr uint32_t kDestinations = 8;
  constexpr int kThreads = static_cast<int>(router_internal::kShards) + 16;
  constexpr int kPicksPerThread = 200;
  SeededRandom random(11);
  ManualClock clock;
  Router router({.destination_count = kDestinations}, random);
  auto table_for = [&](uint64_t v) {
    return MakeTable({2, v}, kDestinations, {{kHot, {static_cast<uint32_t>(v % kDestinations)}}});
  };
  REQUIRE(router.Install(table_for(0), clock.Now()).ok);

  std::atomic<int> started{0};
  std::atomic<int> done{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // The first pick claims a shard; then wait until every thread holds one (or shares).
      if (!router.Pick(kHot, clock.Now()).planned()) failures.fetch_add(1);
      started.fetch_add(1);
      while (started.load() < kThreads) std::this_thread::yield();
      for (int i = 1; i < kPicksPerThread; ++i) {
        InFlight r = router.Pick(i % 2 == 0 ? kHot : kCold, clock.Now());
        if (!r.ok() || r.planned() != (i % 2 == 0)) failures.fetch_add(1);
      }
      done.fetch_add(1);
    });
  }
  uint64_t version = 1;
  while (done.load() < kThreads) {
    REQUIRE(router.Install(table_for(version++), clock.Now()).ok);
    std::this_thread::yield();
  }
  for (auto& thread : threads) thread.join();

  CHECK(failures.load() == 0);
  const RouterStats stats = router.Stats(clock.Now());
  const uint64_t cold_per_thread = kPicksPerThread / 2;
  CHECK(stats.planned == static_cast<uint64_t>(kThreads) * (kPicksPerThread - cold_per_thread));
  CHECK(stats.fallback[static_cast<int>(Reason::kNotAdmitted)] ==
        static_cast<uint64_t>(kThreads) * cold_per_thread);
  CHECK(stats.fallback_total == static_cast<uint64_t>(kThreads) * cold_per_thread);
  CHECK(stats.in_flight == std::vector<int64_t>(kDestinations, 0));

  // Every thread above has exited and returned its shard, so a new thread owns one again.
  bool owned = false;
  std::thread([&] { owned = router_internal::CurrentThreadShard().owned(); }).join();
  CHECK(owned);
}

}  // namespace
}  // namespace cacheroute::dataplane
