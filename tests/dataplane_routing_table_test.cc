// RoutingTable: validation errors, lookups against std::unordered_map over random tables, and the
// memory bound (bytes per admitted key).
#include <catch2/catch.hpp>
#include <cstdint>
#include <iostream>
#include <random>
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
  CHECK(t->overflow_bytes() == 6 * sizeof(uint32_t));
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

// Property: over random tables (random sizes, set sizes, destination counts, including fleets too
// large for inline uint16 destinations and keys crowded into few home slots), Find agrees with an
// unordered_map for every present key and for absent ones.
TEST_CASE("Find agrees with std::unordered_map on random tables", "[routing_table][property]") {
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 60; ++round) {
    const uint32_t destinations = round % 10 == 9 ? 70000 : 1 + static_cast<uint32_t>(rng() % 64);
    const size_t keys = rng() % 3000;
    // Some rounds draw keys from a tiny range so that many share a home slot.
    const bool crowded = round % 4 == 1;
    std::unordered_map<uint64_t, std::vector<uint32_t>> want;
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
      entries.push_back({key, set});
      std::sort(set.begin(), set.end());
      want[key] = set;
    }
    auto t = BuildWith(destinations, entries);
    REQUIRE(t.ok());
    for (const auto& [key, set] : want) {
      REQUIRE(t->Find(key).ToVector() == set);
    }
    for (int i = 0; i < 2000; ++i) {
      uint64_t key = crowded ? (rng() % (8 * keys + 1)) * 4096 + (i % 2) : rng();
      auto it = want.find(key);
      std::vector<uint32_t> expected = it == want.end() ? std::vector<uint32_t>{} : it->second;
      REQUIRE(t->Find(key).ToVector() == expected);
    }
  }
}

TEST_CASE("Memory: at most 24 bytes per admitted key with k_b = 1 (100k keys)",
          "[routing_table][memory]") {
  std::mt19937_64 rng(7);
  std::vector<TableEntry> entries;
  for (int i = 0; i < 100000; ++i) {
    entries.push_back({KeyId("key-" + std::to_string(i)), {static_cast<uint32_t>(rng() % 30)}});
  }
  auto t = BuildWith(30, entries);
  REQUIRE(t.ok());
  const double bytes_per_key =
      static_cast<double>(t->capacity() * RoutingTable::slot_size() + t->overflow_bytes()) /
      static_cast<double>(entries.size());
  std::cout << "routing table: " << entries.size() << " keys, capacity " << t->capacity() << " x "
            << RoutingTable::slot_size() << " B slots, load factor "
            << static_cast<double>(entries.size()) / t->capacity() << ", " << bytes_per_key
            << " bytes/key\n";
  CHECK(t->overflow_bytes() == 0);
  CHECK(bytes_per_key <= 24.0);
  for (const TableEntry& e : entries) REQUIRE(t->Find(e.key_id).size() == 1);
}

}  // namespace
}  // namespace cacheroute::dataplane
