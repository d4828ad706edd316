// The multi-replica baselines: prefix-hash sends prompts sharing their first 256 tokens to one
// destination, whatever follows, on every replica alike, and spills under its load bound; the
// precise llm-d scorer and the exact Dynamo router read their prefix from the engines' events
// (and llm-d's from its speculative entries until those arrive), with their profiles' load terms;
// Dynamo's replicas with replica sync count each other's blocks in flight.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/kv_event_index.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/policies_precise.h"
#include "cacheroute/dataplane/random.h"
#include "tests/support/fake_loads.h"

namespace cacheroute::dataplane {
namespace {

// Every view here has token work (HasWork), as the Router's has.
using testing::FakeLoads;

// `shared` leading blocks of prefix `prefix`, then `rest` blocks of suffix `suffix`, chained as
// block hashes are (each stands for everything before it).
std::vector<uint64_t> Prompt(uint64_t prefix, size_t shared, uint64_t suffix, size_t rest) {
  std::vector<uint64_t> out;
  uint64_t chain = 0x1234;
  for (size_t i = 0; i < shared + rest; ++i) {
    chain = Mix64(chain ^ (i < shared ? prefix * 1000 + i : (suffix + 7) * 77777 + i));
    out.push_back(chain);
  }
  return out;
}

TEST_CASE("prefix-hash: the first 256 tokens decide, the rest does not", "[policies]") {
  SeededRandom random(3);
  PrefixHashPolicy policy(16, random);
  CHECK(policy.name() == "prefix-hash");
  const FakeLoads loads(16, /*has_work=*/true);
  std::set<uint32_t> spread;
  for (uint64_t prefix = 1; prefix <= 40; ++prefix) {
    const std::vector<uint64_t> a = Prompt(prefix, 16, 1, 20);
    const std::vector<uint64_t> b = Prompt(prefix, 16, 2, 3);
    REQUIRE(a[16] != b[16]);
    const uint32_t da =
        policy.Route({.key_id = 1, .prompt_tokens = 576, .block_hashes = a}, loads).destination;
    const uint32_t db =
        policy.Route({.key_id = 2, .prompt_tokens = 304, .block_hashes = b}, loads).destination;
    CHECK(da == db);
    CHECK(policy.Position({.block_hashes = a}) == a[15]);
    spread.insert(da);
  }
  CHECK(spread.size() >= 10);  // 40 prefixes over 16 destinations

  // A prompt of fewer than 16 blocks hashes its last full block; one without any, its key.
  const std::vector<uint64_t> short_prompt = Prompt(9, 5, 0, 0);
  CHECK(policy.Position({.key_id = 5, .block_hashes = short_prompt}) == short_prompt[4]);
  CHECK(policy.Position({.key_id = 5}) == 5);
}

TEST_CASE("prefix-hash: two replicas agree with no shared state", "[policies]") {
  SeededRandom random_a(1), random_b(2);
  PrefixHashPolicy a(8, random_a), b(8, random_b);
  const FakeLoads loads(8, /*has_work=*/true);
  for (uint64_t prefix = 1; prefix <= 50; ++prefix) {
    const std::vector<uint64_t> hashes = Prompt(prefix, 20, 0, 0);
    const PickRequest request{.key_id = prefix, .prompt_tokens = 320, .block_hashes = hashes};
    CHECK(a.Route(request, loads).destination == b.Route(request, loads).destination);
  }
}

TEST_CASE("prefix-hash: a destination at its load bound is walked past", "[policies]") {
  SeededRandom random(5);
  PrefixHashPolicy policy(4, random);
  FakeLoads loads(4, /*has_work=*/true);
  const std::vector<uint64_t> hashes = Prompt(3, 16, 0, 0);
  const PickRequest request{.key_id = 3, .prompt_tokens = 256, .block_hashes = hashes};
  const uint32_t home = policy.Route(request, loads).destination;
  // Total 8 over 4 up: the bound is ceil(1.25 · 9 / 4) = 3; home at 3 is full, the rest at 5/3.
  loads.load = {5.0 / 3, 5.0 / 3, 5.0 / 3, 5.0 / 3};
  loads.load[home] = 3;
  const uint32_t spilled = policy.Route(request, loads).destination;
  CHECK(spilled != home);
  loads.load[home] = 2;
  CHECK(policy.Route(request, loads).destination == home);
  loads.up[home] = false;
  CHECK(policy.Route(request, loads).destination != home);
}

std::vector<KvEvent> Stored(std::span<const uint64_t> hashes) {
  std::vector<KvEvent> out;
  for (uint64_t h : hashes) out.push_back({KvEventKind::kStored, h});
  return out;
}

TEST_CASE("llm-d-precise: the events' longest prefix, min-max normalised, then load",
          "[policies]") {
  SeededRandom random(7);
  ManualClock clock;
  KvEventIndex index({.destinations = 4, .blocks_per_destination = 64});
  LlmdPrecisePolicy policy(4, random, clock, index);
  CHECK(policy.name() == "llm-d-precise");
  FakeLoads loads(4, /*has_work=*/true);
  const std::vector<uint64_t> prompt = Prompt(1, 10, 0, 0);
  const std::span<const uint64_t> all(prompt);
  index.Apply(0, Stored(all.first(2)));
  index.Apply(1, Stored(all.first(8)));
  index.Apply(2, Stored(all.first(5)));
  // Prefix scores 0, 1, 0.5, 0: destination 1 wins on the prefix alone (3 > 0).
  const Decision d =
      policy.Route({.key_id = 1, .prompt_tokens = 160, .block_hashes = prompt}, loads);
  CHECK(d.destination == 1);
  CHECK(d.expected_uncached_tokens == 160 - 8 * 16);
  // Its queue at the maximum and full KV cost it 2 + 2 = 4 > 3: destination 2 (prefix 0.5, best
  // queue and KV) wins; the least matched (0) scores as one with no match.
  loads.scraped = {{.waiting = 0}, {.waiting = 4, .kv_usage = 1}, {.waiting = 0}, {.waiting = 0}};
  CHECK(policy.Route({.key_id = 1, .prompt_tokens = 160, .block_hashes = prompt}, loads)
            .destination == 2);
}

TEST_CASE("llm-d-precise: siblings follow the first pick before its events arrive", "[policies]") {
  SeededRandom random(9);
  ManualClock clock;
  KvEventIndex index({.destinations = 8,
                      .blocks_per_destination = 64,
                      .speculative_ttl = std::chrono::seconds(2)});
  LlmdPrecisePolicy policy(8, random, clock, index);
  const FakeLoads loads(8, /*has_work=*/true);
  const std::vector<uint64_t> prompt = Prompt(2, 6, 0, 0);
  const PickRequest request{.key_id = 2, .prompt_tokens = 100, .block_hashes = prompt};
  const uint32_t first = policy.Route(request, loads).destination;
  clock.Advance(std::chrono::seconds(1));
  for (int i = 0; i < 20; ++i) CHECK(policy.Route(request, loads).destination == first);
  // Three seconds on, without events, the speculative entries have expired: picks spread.
  clock.Advance(std::chrono::seconds(3));
  std::set<uint32_t> picks;
  for (int i = 0; i < 40; ++i) {
    picks.insert(policy.Route(request, loads).destination);
    clock.Advance(std::chrono::seconds(3));
  }
  CHECK(picks.size() > 1);
}

TEST_CASE("dynamo-kv-exact: dynamo-kv's cost with the events' overlap, nothing recorded",
          "[policies]") {
  SeededRandom random(4);
  ManualClock clock;
  KvEventIndex index({.destinations = 3, .blocks_per_destination = 64});
  DynamoKvPolicy policy(3, random, clock, {.overlap_score_weight = 1}, &index);
  CHECK(policy.name() == "dynamo-kv-exact");
  FakeLoads loads(3, /*has_work=*/true);
  // Each request ends at once (its ticket released), so no blocks stay active between picks.
  auto route = [&](const PickRequest& r) {
    const Decision d = policy.Route(r, loads);
    (void)policy.Ticket(d);
    return d;
  };
  const std::vector<uint64_t> prompt = Prompt(3, 10, 0, 0);
  const std::span<const uint64_t> all(prompt);
  index.Apply(2, Stored(all.first(10)));
  const PickRequest request{.key_id = 3, .prompt_tokens = 160, .block_hashes = prompt};
  // Idle: the 10 resident blocks make destination 2 the cheapest (0 + 10 vs 10 + 10).
  const Decision d = route(request);
  CHECK(d.destination == 2);
  CHECK(d.expected_uncached_tokens == 1);
  CHECK(index.speculative() == 0);
  // 160 queued prefill tokens there (10 blocks) tie it with the others; 161 send it elsewhere.
  loads.work[2].queued_prefill_tokens = 161;
  CHECK(route(request).destination != 2);
  // Without events, an idle fleet ties: the fewest resident blocks wins the tie.
  loads.work[2].queued_prefill_tokens = 0;
  const std::vector<uint64_t> other = Prompt(4, 10, 0, 0);
  index.Apply(0, Stored(Prompt(5, 3, 0, 0)));
  CHECK(route({.key_id = 4, .prompt_tokens = 160, .block_hashes = other}).destination == 1);
  CHECK(policy.in_flight() == 0);
}

TEST_CASE("dynamo-kv-exact with replica sync: every replica counts every replica's blocks",
          "[policies]") {
  SeededRandom random_a(4), random_b(5);
  ManualClock clock;
  KvEventIndex index({.destinations = 2, .blocks_per_destination = 64});
  auto synced = std::make_shared<DynamoActiveBlocks>(2, std::chrono::seconds(300));
  DynamoKvPolicy a(2, random_a, clock, {.overlap_score_weight = 1}, &index, synced);
  DynamoKvPolicy b(2, random_b, clock, {.overlap_score_weight = 1}, &index, synced);
  DynamoKvPolicy alone(2, random_b, clock, {.overlap_score_weight = 1}, &index);
  FakeLoads loads(2, /*has_work=*/true);
  // Replica a sends a 10-block prompt to destination 0, the cheaper at a tie of idle engines only
  // by its random start; its blocks stay in flight there.
  const std::vector<uint64_t> first = Prompt(1, 10, 0, 0);
  const Decision placed = a.Route({.key_id = 1, .prompt_tokens = 160, .block_hashes = first}, loads);
  PolicyTicket ticket = a.Ticket(placed);
  CHECK(b.in_flight() == 1);  // one count, two replicas
  // A request with nothing in common now costs 10 active blocks more where a sent the first one:
  // replica b goes to the other engine; a replica that does not sync sees an idle fleet (and, with
  // no events, either engine; its in-flight count is its own: none).
  const std::vector<uint64_t> second = Prompt(2, 10, 0, 0);
  const Decision other =
      b.Route({.key_id = 2, .prompt_tokens = 160, .block_hashes = second}, loads);
  CHECK(other.destination == 1 - placed.destination);
  CHECK(alone.in_flight() == 0);
  PolicyTicket second_ticket = b.Ticket(other);
  CHECK(a.in_flight() == 2);
  ticket.End();
  second_ticket.End();
  CHECK(a.in_flight() == 0);
}

}  // namespace
}  // namespace cacheroute::dataplane
