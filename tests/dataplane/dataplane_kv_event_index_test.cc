// KvEventIndex: the overlap is the leading run of blocks each destination's events (and the
// speculative entries still in their TTL) say it holds; memory stays within the sizes given; a
// random event stream agrees with a brute-force model of every destination's cache.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/kv_event_index.h"

namespace cacheroute::dataplane {
namespace {

using std::chrono::milliseconds;

std::vector<KvEvent> Stored(std::vector<uint64_t> hashes) {
  std::vector<KvEvent> out;
  for (uint64_t h : hashes) out.push_back({KvEventKind::kStored, h});
  return out;
}
std::vector<KvEvent> Removed(std::vector<uint64_t> hashes) {
  std::vector<KvEvent> out;
  for (uint64_t h : hashes) out.push_back({KvEventKind::kRemoved, h});
  return out;
}

std::vector<uint32_t> OverlapOf(const KvEventIndex& index, const std::vector<uint64_t>& hashes,
                                Time now) {
  std::vector<uint32_t> out(index.destinations(), 99);
  index.Overlap(hashes, now, out);
  return out;
}

TEST_CASE("stored, removed and cleared events set each destination's leading run") {
  KvEventIndex index({.destinations = 3, .blocks_per_destination = 16});
  const Time t{};
  index.Apply(0, Stored({1, 2, 3}));
  index.Apply(1, Stored({1, 2}));
  index.Apply(2, Stored({2, 3}));  // no first block: no overlap
  CHECK(OverlapOf(index, {1, 2, 3, 4}, t) == std::vector<uint32_t>{3, 2, 0});
  CHECK(index.resident(0) == 3);

  index.Apply(0, Removed({2}));
  CHECK(OverlapOf(index, {1, 2, 3, 4}, t) == std::vector<uint32_t>{1, 2, 0});
  CHECK(index.resident(0) == 2);
  index.Apply(1, std::vector<KvEvent>{{KvEventKind::kCleared, 0}});
  CHECK(OverlapOf(index, {1, 2, 3, 4}, t) == std::vector<uint32_t>{1, 0, 0});
  CHECK(index.resident(1) == 0);
  CHECK(OverlapOf(index, {}, t) == std::vector<uint32_t>{0, 0, 0});
  index.Apply(7, Stored({1}));  // an unknown destination changes nothing
  CHECK(OverlapOf(index, {1}, t) == std::vector<uint32_t>{1, 0, 0});
}

TEST_CASE("speculative entries count until their TTL or their stored event") {
  KvEventIndex index({.destinations = 2,
                      .blocks_per_destination = 8,
                      .speculative_blocks = 8,
                      .speculative_ttl = milliseconds(2000)});
  const Time t0{};
  index.Record(std::vector<uint64_t>{1, 2, 3}, 1, t0);
  CHECK(index.speculative() == 3);
  CHECK(OverlapOf(index, {1, 2, 3}, t0 + milliseconds(2000)) == std::vector<uint32_t>{0, 3});
  CHECK(OverlapOf(index, {1, 2, 3}, t0 + milliseconds(2001)) == std::vector<uint32_t>{0, 0});

  // The engine's stored event for blocks 1 and 2 makes them resident: they outlive the TTL.
  index.Apply(1, Stored({1, 2}));
  CHECK(index.speculative() == 1);
  CHECK(index.resident(1) == 2);
  CHECK(OverlapOf(index, {1, 2, 3}, t0 + milliseconds(5000)) == std::vector<uint32_t>{0, 2});
  // A removed event takes a resident block away; a later Record reclaims the expired entries.
  index.Apply(1, Removed({2}));
  CHECK(OverlapOf(index, {1, 2, 3}, t0 + milliseconds(5000)) == std::vector<uint32_t>{0, 1});
  index.Record(std::vector<uint64_t>{1, 9}, 1, t0 + milliseconds(5000));
  CHECK(index.speculative() == 1);  // 9 only: 1 is resident, 3 expired
}

TEST_CASE("memory stays within the sizes given: the oldest entry goes first") {
  KvEventIndex index({.destinations = 2, .blocks_per_destination = 3, .speculative_blocks = 2});
  const Time t{};
  index.Apply(0, Stored({1, 2, 3, 4}));  // more than the destination holds: 1 goes
  CHECK(index.resident(0) == 3);
  CHECK(OverlapOf(index, {2, 3, 4}, t) == std::vector<uint32_t>{3, 0});
  CHECK(OverlapOf(index, {1}, t) == std::vector<uint32_t>{0, 0});
  index.Record(std::vector<uint64_t>{5, 6, 7}, 1, t);  // recorded last to first: 7, 6, then 5
  CHECK(index.speculative() == 2);
  CHECK(OverlapOf(index, {5, 6}, t) == std::vector<uint32_t>{0, 2});
}

TEST_CASE("a random event stream agrees with a brute-force model of the caches") {
  constexpr uint32_t kDestinations = 4, kBlocks = 64;
  KvEventIndex index({.destinations = kDestinations, .blocks_per_destination = kBlocks});
  std::vector<std::set<uint64_t>> model(kDestinations);
  std::mt19937_64 rng(17);
  const Time t{};
  for (int step = 0; step < 4000; ++step) {
    const uint32_t d = static_cast<uint32_t>(rng() % kDestinations);
    const uint64_t h = 1 + rng() % 40;
    const uint64_t r = rng() % 100;
    if (r < 60 && model[d].size() < kBlocks) {
      index.Apply(d, Stored({h}));
      model[d].insert(h);
    } else if (r < 99) {
      index.Apply(d, Removed({h}));
      model[d].erase(h);
    } else {
      index.Apply(d, std::vector<KvEvent>{{KvEventKind::kCleared, 0}});
      model[d].clear();
    }
    std::vector<uint64_t> prompt;
    for (int i = 0; i < 6; ++i) prompt.push_back(1 + rng() % 40);
    const std::vector<uint32_t> got = OverlapOf(index, prompt, t);
    for (uint32_t x = 0; x < kDestinations; ++x) {
      uint32_t run = 0;
      while (run < prompt.size() && model[x].contains(prompt[run])) ++run;
      REQUIRE(got[x] == run);
      REQUIRE(index.resident(x) == model[x].size());
    }
  }
}

}  // namespace
}  // namespace cacheroute::dataplane
