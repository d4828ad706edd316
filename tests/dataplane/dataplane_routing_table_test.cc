// RoutingTable: validation errors, lookups against std::unordered_map over random tables, and the
// memory bound (bytes per admitted key).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/routing_table.h"

namespace cacheroute::dataplane {
namespace {

Result<RoutingTable> BuildWith(uint32_t destinations, const std::vector<TableEntry>& entries) {
  return RoutingTable::Build({1, 1}, destinations, std::vector<double>(destinations, 0.0), entries);
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_CASE("Build rejects invalid tables with a reason", "[routing_table]") {
  SECTION("unknown destination") {
    auto t = BuildWith(4, {{7, {1, 4}}});
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "unknown destination 4"));
    CHECK(Contains(t.status().message, "key 7"));
  }
  SECTION("empty set") {
    auto t = BuildWith(4, {{7, {}}});
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "empty destination set"));
  }
  SECTION("duplicate key") {
    auto t = BuildWith(4, {{7, {1}}, {8, {2}}, {7, {3}}});
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "key 7 is listed twice"));
  }
  SECTION("duplicate key among many colliding keys") {
    // Keys sharing a home slot exercise the Robin Hood displacement path.
    std::vector<TableEntry> entries;
    for (uint64_t i = 0; i < 6; ++i) entries.push_back({i << 20, {0}});
    entries.push_back({3 << 20, {1}});
    auto t = BuildWith(4, entries);
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "listed twice"));
  }
  SECTION("duplicate destination in a set") {
    auto t = BuildWith(4, {{7, {2, 1, 2}}});
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "destination 2 appears twice"));
  }
  SECTION("expected loads of the wrong size") {
    auto t = RoutingTable::Build({1, 1}, 4, {1.0, 2.0}, {});
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "expected_loads has 2 entries"));
  }
  SECTION("negative expected load") {
    auto t = RoutingTable::Build({1, 1}, 2, {1.0, -2.0}, {});
    REQUIRE_FALSE(t.ok());
    CHECK(Contains(t.status().message, "expected_loads[1]"));
  }
}

TEST_CASE("Find returns sorted sets, inline and overflow", "[routing_table]") {
  std::vector<TableEntry> entries = {{KeyId("one"), {5}},
                                     {KeyId("three"), {9, 2, 4}},
                                     {KeyId("five"), {8, 1, 0, 7, 3}},
                                     {0, {6}}};  // key id 0 is a valid key
  auto t = RoutingTable::Build({3, 9}, 10, std::vector<double>(10, 1.5), entries);
  REQUIRE(t.ok());
  CHECK(t->version() == TableVersion{3, 9});
  CHECK(t->destination_count() == 10);
  CHECK(t->key_count() == 4);
  CHECK(t->expected_loads().size() == 10);
  CHECK(t->Find(KeyId("one")).ToVector() == std::vector<uint32_t>{5});
  CHECK(t->Find(KeyId("three")).ToVector() == std::vector<uint32_t>{2, 4, 9});
  CHECK(t->Find(KeyId("five")).ToVector() == std::vector<uint32_t>{0, 1, 3, 7, 8});
  CHECK(t->Find(0).ToVector() == std::vector<uint32_t>{6});
  CHECK(t->Find(KeyId("absent")).empty());
  // One destination sits in its slot; larger sets in the overflow array as [size, d0, d1, ...].
  CHECK(t->overflow_bytes() == (1 + 3 + 1 + 5) * sizeof(uint32_t));
}

TEST_CASE("Spill destinations: inline pairs, overflow sets, validation", "[routing_table]") {
  std::vector<TableEntry> entries = {{KeyId("one"), {5}, 3},
                                     {KeyId("plain"), {4}},
                                     {KeyId("three"), {9, 2, 4}, 0},
                                     {KeyId("wide"), {1}, 40000}};
  auto t = RoutingTable::Build({1, 1}, 40001, std::vector<double>(40001, 0.0), entries);
  REQUIRE(t.ok());
  const DestinationSet one = t->Find(KeyId("one"));
  CHECK(one.ToVector() == std::vector<uint32_t>{5});
  CHECK(one.spill() == 3);
  CHECK_FALSE(t->Find(KeyId("plain")).has_spill());
  CHECK(t->Find(KeyId("plain")).ToVector() == std::vector<uint32_t>{4});
  const DestinationSet three = t->Find(KeyId("three"));
  CHECK(three.ToVector() == std::vector<uint32_t>{2, 4, 9});
  CHECK(three.spill() == 0);
  // A spill at or above 2^15 does not fit a pair value: the set goes to the overflow array.
  const DestinationSet wide = t->Find(KeyId("wide"));
  CHECK(wide.ToVector() == std::vector<uint32_t>{1});
  CHECK(wide.spill() == 40000);
  CHECK(t->overflow_bytes() == (1 + 3 + 1 + 1 + 1 + 1) * sizeof(uint32_t));
  CHECK(t->Find(KeyId("absent")).empty());
  CHECK_FALSE(t->Find(KeyId("absent")).has_spill());

  auto inside = BuildWith(8, {{7, {1, 4}, 4}});
  REQUIRE_FALSE(inside.ok());
  CHECK(Contains(inside.status().message, "spill destination 4"));
  CHECK(Contains(inside.status().message, "also in its destination set"));
  auto unknown = BuildWith(8, {{7, {1}, 8}});
  REQUIRE_FALSE(unknown.ok());
  CHECK(Contains(unknown.status().message, "unknown spill destination 8"));
}

// Slots compare high halves of key ids first and low halves only among equal high halves; the
// largest high half is also the one of empty slots, and the largest id of all is a valid key.
TEST_CASE("Keys sharing their high half, up to the largest id, are told apart", "[routing_table]") {
  constexpr uint64_t kTop = uint64_t{0xFFFFFFFF} << 32;
  const std::vector<TableEntry> entries = {
      {kTop | 5, {1}}, {kTop | 9, {2, 3}},           {~uint64_t{0}, {4}},
      {kTop - 1, {0}}, {uint64_t{7} << 32 | 1, {5}}, {uint64_t{7} << 32 | 3, {6}}};
  auto t = BuildWith(8, entries);
  REQUIRE(t.ok());
  for (const TableEntry& e : entries) CHECK(t->Find(e.key_id).ToVector() == e.destinations);
  for (uint64_t absent : {kTop, kTop | 4, kTop | 6, kTop | 10, ~uint64_t{0} - 1, kTop - 2,
                          uint64_t{7} << 32, uint64_t{7} << 32 | 2, uint64_t{7} << 32 | 4}) {
    INFO(absent);
    CHECK(t->Find(absent).empty());
  }
  // Without the largest id, looking it up stops at the empty slots that end the array.
  auto without = BuildWith(8, {entries[0], entries[1]});
  REQUIRE(without.ok());
  CHECK(without->Find(~uint64_t{0}).empty());
  CHECK(without->Find(kTop | 9).ToVector() == std::vector<uint32_t>{2, 3});
}

TEST_CASE("Empty table finds nothing", "[routing_table]") {
  auto t = BuildWith(3, {});
  REQUIRE(t.ok());
  CHECK(t->Find(0).empty());
  CHECK(t->Find(KeyId("x")).empty());
}

TEST_CASE("Versions order lexicographically by (epoch, number)", "[routing_table]") {
  CHECK(TableVersion{1, 9} < TableVersion{2, 0});
  CHECK(TableVersion{2, 1} < TableVersion{2, 2});
  CHECK_FALSE(TableVersion{2, 2} < TableVersion{2, 2});
}

// Property: over random tables (random sizes, set sizes, destination counts, including fleets of
// 70,000 destinations and keys crowded into few home slots, all with high half 0), Find agrees with
// an unordered_map for every present key and for absent ones.
TEST_CASE("Find agrees with std::unordered_map on random tables", "[routing_table][property]") {
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 60; ++round) {
    const uint32_t destinations = round % 10 == 9 ? 70000 : 1 + static_cast<uint32_t>(rng() % 64);
    const size_t keys = rng() % 3000;
    // Some rounds draw keys from a tiny range so that many share a home slot.
    const bool crowded = round % 4 == 1;
    std::unordered_map<uint64_t, std::vector<uint32_t>> want;
    std::unordered_map<uint64_t, uint32_t> spills;
    std::vector<TableEntry> entries;
    while (entries.size() < keys) {
      uint64_t key = crowded ? (rng() % (4 * keys + 1)) * 4096 : rng();
      if (want.count(key)) continue;
      const uint32_t k = 1 + static_cast<uint32_t>(rng() % std::min<uint32_t>(destinations, 6));
      std::vector<uint32_t> set;
      while (set.size() < k) {
        uint32_t d = static_cast<uint32_t>(rng() % destinations);
        if (std::find(set.begin(), set.end(), d) == set.end()) set.push_back(d);
      }
      // Half the keys also get a spill outside their set (when one is left).
      uint32_t spill = kNoSpill;
      if (rng() % 2 == 0 && set.size() < destinations) {
        do {
          spill = static_cast<uint32_t>(rng() % destinations);
        } while (std::find(set.begin(), set.end(), spill) != set.end());
      }
      entries.push_back({key, set, spill});
      std::sort(set.begin(), set.end());
      want[key] = set;
      spills[key] = spill;
    }
    auto t = BuildWith(destinations, entries);
    REQUIRE(t.ok());
    for (const auto& [key, set] : want) {
      REQUIRE(t->Find(key).ToVector() == set);
      REQUIRE(t->Find(key).spill() == spills[key]);
    }
    for (int i = 0; i < 2000; ++i) {
      uint64_t key = crowded ? (rng() % (8 * keys + 1)) * 4096 + (i % 2) : rng();
      auto it = want.find(key);
      std::vector<uint32_t> expected = it == want.end() ? std::vector<uint32_t>{} : it->second;
      REQUIRE(t->Find(key).ToVector() == expected);
    }
  }
}

std::vector<TableEntry> SingleDestinationEntries(size_t keys, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TableEntry> entries;
  entries.reserve(keys);
  for (size_t i = 0; i < keys; ++i) {
    entries.push_back({KeyId("key-" + std::to_string(seed) + "-" + std::to_string(i)),
                       {static_cast<uint32_t>(rng() % 30)}});
  }
  return entries;
}

double BytesPerKey(const RoutingTable& table) {
  return static_cast<double>(table.memory_bytes()) / static_cast<double>(table.key_count());
}

TEST_CASE("Memory: at most 24 bytes per admitted key with k_b = 1 (100k keys)",
          "[routing_table][memory]") {
  const std::vector<TableEntry> entries = SingleDestinationEntries(100000, 7);
  auto t = BuildWith(30, entries);
  REQUIRE(t.ok());
  CHECK(RoutingTable::slot_size() == 12);  // a 4-byte tag, a 4-byte low half, a 4-byte value
  std::cout << "routing table: " << entries.size() << " keys, " << t->capacity() << " x "
            << RoutingTable::slot_size() << " B slots (" << t->home_slots()
            << " home), load factor " << static_cast<double>(entries.size()) / t->capacity() << ", "
            << BytesPerKey(*t) << " bytes/key\n";
  CHECK(t->overflow_bytes() == 0);
  CHECK(t->memory_bytes() == t->capacity() * RoutingTable::slot_size());
  CHECK(BytesPerKey(*t) <= 24.0);
  for (const TableEntry& e : entries) REQUIRE(t->Find(e.key_id).size() == 1);
}

// The bound holds at every size, not only where a power-of-two capacity happens to be well
// filled: sizes from 100 to 300,000 keys, with extra sizes just before and after each power of two
// (where a doubling capacity would sit at its worst, ~40 bytes/key).
TEST_CASE("Memory: at most 24 bytes per admitted key at every size", "[routing_table][memory]") {
  std::vector<size_t> sizes;
  for (size_t n = 100; n < 1000; n += 37) sizes.push_back(n);
  for (size_t n = 1000; n <= 300000; n = n * 5 / 4) sizes.push_back(n);
  for (size_t p = 128; p <= 262144; p *= 2) {
    for (size_t n : {p * 4 / 5 - 1, p * 4 / 5, p * 4 / 5 + 1, p - 1, p, p + 1, p + p / 10}) {
      sizes.push_back(n);
    }
  }
  double worst = 0;
  size_t worst_size = 0;
  for (size_t n : sizes) {
    const std::vector<TableEntry> entries = SingleDestinationEntries(n, n);
    auto t = BuildWith(30, entries);
    REQUIRE(t.ok());
    INFO(n << " keys: " << t->capacity() << " slots (" << t->home_slots() << " home), "
           << BytesPerKey(*t) << " bytes/key");
    CHECK(BytesPerKey(*t) <= 24.0);
    // Spot-check lookups: the first and last keys and a few between.
    for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 16)) {
      REQUIRE(t->Find(entries[i].key_id).ToVector() == entries[i].destinations);
    }
    if (BytesPerKey(*t) > worst) {
      worst = BytesPerKey(*t);
      worst_size = n;
    }
  }
  std::cout << "routing table: " << sizes.size() << " sizes from 100 to 300,000 keys, worst "
            << worst << " bytes/key at " << worst_size << " keys\n";
}

// Tiny tables have a fixed floor of a few slots and still look up correctly.
TEST_CASE("Tiny tables: every key found, absent keys not", "[routing_table]") {
  for (size_t n = 0; n < 40; ++n) {
    const std::vector<TableEntry> entries = SingleDestinationEntries(n, 1000 + n);
    auto t = BuildWith(30, entries);
    REQUIRE(t.ok());
    CHECK(t->memory_bytes() <= RoutingTable::slot_size() * (n + n / 4 + 10));
    for (const TableEntry& e : entries) REQUIRE(t->Find(e.key_id).ToVector() == e.destinations);
    CHECK(t->Find(KeyId("absent")).empty());
  }
}

// Ids at both ends of the 64-bit range: the largest id is also the empty-slot marker, and the
// smallest ids all share home slot 0.
TEST_CASE("Extreme key ids", "[routing_table]") {
  const uint64_t max = ~uint64_t{0};
  std::vector<TableEntry> entries = {{max, {1}}, {max - 1, {2}}, {0, {3}}, {1, {4}}, {2, {5}}};
  auto t = BuildWith(8, entries);
  REQUIRE(t.ok());
  for (const TableEntry& e : entries) CHECK(t->Find(e.key_id).ToVector() == e.destinations);
  CHECK(t->Find(3).empty());
  CHECK(t->Find(max - 2).empty());
  auto without_max = BuildWith(8, {{max - 1, {2}}, {0, {3}}});
  REQUIRE(without_max.ok());
  CHECK(without_max->Find(max).empty());
  auto twice = BuildWith(8, {{max, {1}}, {max, {2}}});
  REQUIRE_FALSE(twice.ok());
  CHECK(Contains(twice.status().message, "listed twice"));
}

}  // namespace
}  // namespace cacheroute::dataplane
