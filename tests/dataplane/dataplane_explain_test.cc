// Router::Explain (explanation.h): on random fleets and requests its decision is the one Pick
// then makes on the same state and the same random draws, under both rules; each costed
// candidate's terms sum to its cost and the chosen one is the cheapest; it changes nothing a Pick
// would see; and what it reports in a small case, term by term, and for the paper's rule the set,
// the loads and the pair of power of two choices.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/explanation.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"

namespace cacheroute::dataplane {
namespace {

// splitmix64 whose state a copy takes along: a copy draws what the original will.
class CopyableRandom final : public Random {
 public:
  explicit CopyableRandom(uint64_t seed) : state_(seed) {}
  uint64_t Next() override {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix64(state_);
  }

 private:
  uint64_t state_;
};

std::shared_ptr<const RoutingTable> MakeTable(uint32_t destinations,
                                              std::vector<TableEntry> entries) {
  auto table =
      RoutingTable::Build({1, 1}, destinations, std::vector<double>(destinations, 1.0), entries);
  REQUIRE(table.ok());
  return std::make_shared<const RoutingTable>(*std::move(table));
}

TEST_CASE("Explain decides what Pick then decides, and its terms sum to the costs", "[explain]") {
  const DispatchRule rule = GENERATE(DispatchRule::kTokenWork, DispatchRule::kPaper);
  // 8: every destination a candidate; 40: one random candidate (the draw Explain must share).
  const uint32_t n = GENERATE(8u, 40u);
  INFO("rule " << static_cast<int>(rule) << ", " << n << " destinations");
  CopyableRandom random(n);
  ManualClock clock;
  DispatchOptions dispatch{.rule = rule};
  Router router({.destination_count = n, .dispatch = dispatch}, random);
  for (uint32_t d = 1; d < n; d += 3) REQUIRE(router.SetKvCapacity(d, 6000.0 * d).ok);
  router.ObserveServed({0, false, Reason::kPolicy, false, 900}, 1000, 100);
  std::vector<TableEntry> entries;
  for (uint32_t k = 0; k < 60; ++k) {
    entries.push_back({KeyId("planned-" + std::to_string(k)), {k % n, (k + 5) % n}, (k + 1) % n});
  }
  REQUIRE(router.Install(MakeTable(n, entries), clock.Now()).ok);
  std::vector<uint64_t> hashes;
  for (uint64_t b = 0; b < 40; ++b) hashes.push_back(Mix64(b + 1));

  std::mt19937_64 rng(n);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  std::vector<InFlight> held;
  int random_candidates = 0, runner_ups = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    // Keys come back (the key and prefix memories are warm somewhere), loads come and go.
    const uint32_t k = static_cast<uint32_t>(uniform(0, 120));
    const uint64_t key = k < 60 ? entries[k].key_id : KeyId("tail-" + std::to_string(k));
    PickRequest request{.key_id = key, .prompt_tokens = static_cast<uint32_t>(uniform(0, 6000))};
    if (uniform(0, 1) < 0.5) {
      request.block_hashes = std::span<const uint64_t>(hashes).first(
          static_cast<size_t>(uniform(1, static_cast<double>(hashes.size()))));
    }
    const uint32_t flip = static_cast<uint32_t>(uniform(0, n));
    REQUIRE((uniform(0, 1) < 0.05 ? router.MarkDown(flip) : router.MarkUp(flip)).ok);
    (void)router.SetKvUsage(flip, uniform(0, 1));
    if (uniform(0, 1) < 0.3 && !held.empty()) held.erase(held.begin());
    if (uniform(0, 1) < 0.3 && !held.empty()) held.back().FirstToken();
    clock.Advance(std::chrono::milliseconds(static_cast<int>(uniform(0, 500))));

    CopyableRandom twin = random;
    const Explanation e = router.Explain(request, clock.Now(), twin);
    InFlight picked = router.Pick(request, clock.Now());
    INFO("trial " << trial);
    REQUIRE(e.rule == rule);
    CHECK(e.decision.destination == picked.destination());
    CHECK(e.decision.reason == picked.reason());
    CHECK(e.decision.planned == picked.planned());
    CHECK(e.decision.spilled == picked.decision().spilled);
    CHECK(e.decision.expected_uncached_tokens == picked.decision().expected_uncached_tokens);
    CHECK(e.decision.expected == picked.decision().expected);

    const CandidateExplanation* chosen = e.Chosen();
    REQUIRE(chosen != nullptr);
    CHECK(chosen->destination == picked.destination());
    for (const CandidateExplanation& c : e.candidates) {
      CHECK(std::count_if(e.candidates.begin(), e.candidates.end(),
                          [&](const auto& o) { return o.destination == c.destination; }) == 1);
      if (!c.up) continue;
      if (rule == DispatchRule::kTokenWork && c.kind != CandidateKind::kTwoChoices) {
        CHECK(c.cost == c.terms.Total());
      }
      CHECK(chosen->cost <= c.cost);
    }
    if (const CandidateExplanation* second = e.RunnerUp()) {
      ++runner_ups;
      CHECK(second->destination != chosen->destination);
      for (const CandidateExplanation& c : e.candidates) {
        if (c.up && c.destination != chosen->destination) CHECK(second->cost <= c.cost);
      }
    }
    random_candidates += static_cast<int>(std::count_if(
        e.candidates.begin(), e.candidates.end(),
        [](const CandidateExplanation& c) { return c.kind == CandidateKind::kRandom; }));
    held.push_back(std::move(picked));
  }
  CHECK(runner_ups > 1000);
  if (rule == DispatchRule::kTokenWork && n > DispatchOptions{}.all_candidates_up_to) {
    CHECK(random_candidates > 100);
  }
}

TEST_CASE("Explain changes nothing a Pick sees", "[explain]") {
  SeededRandom random(3);
  ManualClock clock;
  RateRecorder recorder({.shards = 1});
  Router router({.destination_count = 40, .rate_recorder = &recorder}, random);
  REQUIRE(router.Install(MakeTable(40, {{KeyId("planned"), {3}, 4}}), clock.Now()).ok);
  std::vector<uint64_t> hashes = {Mix64(1), Mix64(2), Mix64(3)};
  SeededRandom own(99), reference(99);
  for (const char* key : {"planned", "tail-a", "tail-b"}) {
    const PickRequest request{.key_id = KeyId(key), .prompt_tokens = 500, .block_hashes = hashes};
    const Explanation e = router.Explain(request, clock.Now(), own);
    CHECK(e.Chosen() != nullptr);
    CHECK_FALSE(router.Remembered(request.key_id).known());  // no memory Put
  }
  // Nothing counted, recorded or tracked; a new key's prefix is not remembered either.
  const RouterStats stats = router.Stats(clock.Now());
  CHECK(stats.planned == 0);
  CHECK(stats.fallback_total == 0);
  CHECK(stats.in_flight == std::vector<int64_t>(40, 0));
  CHECK(recorder.Drain().total == 0);
  for (uint32_t d = 0; d < 40; ++d) CHECK(router.loads().Work(d).prefilling == 0);
  const Explanation again = router.Explain(
      {.key_id = KeyId("tail-c"), .prompt_tokens = 500, .block_hashes = hashes}, clock.Now(), own);
  CHECK(again.decision.expected == CacheExpectation::kTemplate);
  // The random passed in took the draws; the Router's own is untouched.
  SeededRandom untouched(3);
  CHECK(random.Next() == untouched.Next());
  CHECK(own.Next() != reference.Next());
}

TEST_CASE("Explain reports each term of the chosen and the runner-up", "[explain]") {
  SeededRandom random(4);
  ManualClock clock;
  // γ, β, μ off, κ = 0.5: cost(d) = queued + 0.5 · p̄ · waiting + uncached.
  Router router(
      {.destination_count = 4,
       .dispatch = {.decode_stall = 0, .queue_stall = 0, .queue_wait = 0.5, .memory_short = 0}},
      random);
  router.ObserveServed({0, false, Reason::kPolicy, false, 1000}, 1000, 0);  // p̄ = 1,000
  const PickRequest request{.key_id = KeyId("chat"), .prompt_tokens = 1000};
  InFlight first = router.Pick(request, clock.Now());
  const uint32_t warm = first.destination();
  first.Release();
  // 300 tokens queued at the warm destination in one request: 300 + 500 + ~0 there against
  // 1,000 anywhere else.
  InFlight queued = router.Track({warm, false, Reason::kPolicy, false, 300}, 300);
  const Explanation e = router.Explain(request, clock.Now());
  REQUIRE(e.rule == DispatchRule::kTokenWork);
  CHECK(e.decision.reason == Reason::kNoTable);
  CHECK(e.token_work.remembered == warm);
  CHECK(e.token_work.prompt_tokens == 1000);
  CHECK(e.token_work.factors.wait_tokens == 500);
  REQUIRE(e.Chosen() != nullptr);
  const CandidateExplanation& chosen = *e.Chosen();
  CHECK(chosen.destination == warm);
  CHECK(chosen.kind == CandidateKind::kRemembered);
  CHECK(chosen.expected == CacheExpectation::kKey);
  CHECK(chosen.expected_cached_tokens == 1000);
  CHECK(chosen.terms[CostTerm::kQueuedWork] == 300);
  CHECK(chosen.terms[CostTerm::kQueueWait] == 500);
  CHECK(chosen.terms[CostTerm::kUncachedPrefill] == 0);
  CHECK(chosen.terms[CostTerm::kMemoryShort] == 0);
  CHECK(chosen.cost == 800);
  REQUIRE(e.RunnerUp() != nullptr);
  const CandidateExplanation& second = *e.RunnerUp();
  CHECK(second.destination != warm);
  CHECK(second.expected == CacheExpectation::kTemplate);
  CHECK(second.cost == 1000);
  CHECK(second.terms[CostTerm::kUncachedPrefill] == 1000);
  CHECK(e.candidates.size() == 4);  // a fleet of 4: every destination, each once
  CHECK(CandidateKindName(second.kind) != "unknown");
  CHECK(CacheExpectationName(chosen.expected) == "key");
  // The same request after the warm destination filled up: it moves, and says why.
  InFlight more = router.Track({warm, false, Reason::kPolicy, false, 400}, 400);
  const Explanation moved = router.Explain(request, clock.Now());
  CHECK(moved.Chosen()->destination != warm);
  CHECK(moved.Chosen()->cost == 1000);
  const auto at_warm = std::find_if(moved.candidates.begin(), moved.candidates.end(),
                                    [&](const auto& c) { return c.destination == warm; });
  REQUIRE(at_warm != moved.candidates.end());
  CHECK(at_warm->cost == 700 + 2 * 500);
}

TEST_CASE("Explain under the paper's rule: the set, the loads, the chosen; or the pair",
          "[explain]") {
  SeededRandom random(5);
  ManualClock clock;
  Router router({.destination_count = 6, .dispatch = DispatchOptions::Paper()}, random);
  REQUIRE(router.Install(MakeTable(6, {{KeyId("hot"), {1, 2, 3}}}), clock.Now()).ok);
  std::vector<InFlight> held;
  for (uint32_t d : {1u, 1u, 2u, 3u, 3u, 3u}) held.push_back(router.Track({d, false}));
  REQUIRE(router.MarkDown(4).ok);
  const Explanation e = router.Explain({.key_id = KeyId("hot")}, clock.Now());
  REQUIRE(e.rule == DispatchRule::kPaper);
  REQUIRE(e.candidates.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(e.candidates[i].destination == i + 1);
    CHECK(e.candidates[i].kind == CandidateKind::kPlanned);
    CHECK(e.candidates[i].up);
  }
  CHECK(e.candidates[0].cost == 2);
  CHECK(e.candidates[1].cost == 1);
  CHECK(e.candidates[2].cost == 3);
  CHECK(e.decision.planned);
  CHECK(e.Chosen()->destination == 2);
  CHECK(e.RunnerUp()->destination == 1);

  const Explanation tail = router.Explain({.key_id = KeyId("cold")}, clock.Now());
  CHECK(tail.decision.reason == Reason::kNotAdmitted);
  REQUIRE(tail.candidates.size() == 2);
  for (const CandidateExplanation& c : tail.candidates) {
    CHECK(c.kind == CandidateKind::kTwoChoices);
    CHECK(c.destination != 4);  // never a down one
  }
  CHECK(tail.Chosen()->cost <= tail.RunnerUp()->cost);
}

}  // namespace
}  // namespace cacheroute::dataplane
