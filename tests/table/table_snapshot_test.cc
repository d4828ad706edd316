// Tests for proto/table/table_snapshot: building from a Plan (planner/plan_snapshot), the wire
// round trip and every validation error, SameRouting, deltas (a property test over seeded random
// pairs of tables, checked against a brute-force expectation) and their errors, and Diff on
// hand-made tables.
#include "proto/table/table_snapshot.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/plan_builder.h"
#include "planner/plan_snapshot.h"
#include "tests/support/require_ok.h"

namespace cacheroute::table {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using Snapshot = std::shared_ptr<const TableSnapshot>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Row {
  uint64_t key_id;
  std::vector<uint32_t> destinations;
  double rate;
  std::string key;
  std::optional<uint32_t> spill = std::nullopt;
};

v1::RoutingTable TableProto(TableVersion version, const std::vector<std::string>& names,
                            const std::vector<double>& loads, const std::vector<Row>& rows) {
  v1::RoutingTable t;
  *t.mutable_version() = version.ToProto();
  for (const std::string& n : names) t.add_destinations(n);
  for (double l : loads) t.add_expected_loads(l);
  for (const Row& r : rows) {
    v1::Assignment* a = t.add_assignments();
    a->set_key_id(r.key_id);
    for (uint32_t d : r.destinations) a->add_destinations(d);
    a->set_rate(r.rate);
    a->set_key(r.key);
    if (r.spill.has_value()) a->set_spill(*r.spill);
  }
  t.set_built_unix_ms(1000);
  t.set_ttl_seconds(30);
  return t;
}

Snapshot MustFromProto(const v1::RoutingTable& t) {
  return cacheroute::testing::RequireOk(TableSnapshot::FromProto(t));
}

Snapshot Table(TableVersion version, const std::vector<std::string>& names,
               const std::vector<Row>& rows) {
  return MustFromProto(TableProto(version, names, std::vector<double>(names.size(), 1.0), rows));
}

// A valid table with three destinations and three keys, for the validation tests.
v1::RoutingTable SmallTableProto() {
  return TableProto({1, 2}, {"a", "b", "c"}, {1.0, 2.0, 0.0},
                    {{10, {0, 1}, 2.0, "ten"}, {20, {2}, 1.0, ""}, {30, {1}, 0.5, "thirty"}});
}

std::vector<uint64_t> KeyIds(const TableSnapshot& t) {
  std::vector<uint64_t> ids;
  for (const TableEntry& e : t.entries()) ids.push_back(e.key_id);
  return ids;
}

TEST_CASE("TableVersion orders by epoch, then number, and prints as epoch.number") {
  CHECK(TableVersion{1, 9} < TableVersion{2, 1});
  CHECK(TableVersion{2, 1} < TableVersion{2, 2});
  CHECK(TableVersion{2, 2} == TableVersion{2, 2});
  CHECK(TableVersion{}.IsZero());
  CHECK_FALSE(TableVersion{0, 1}.IsZero());
  CHECK(TableVersion{3, 17}.ToString() == "3.17");
  CHECK(TableVersion::FromProto(TableVersion{3, 17}.ToProto()) == TableVersion{3, 17});
}

TEST_CASE("SnapshotFromPlan maps plan destinations to member indices and keeps drained ones") {
  // Four members, "b" drained: the plan is built over the three active ones.
  const std::vector<uint32_t> active = {0, 2, 3};
  absl::StatusOr<planner::Plan> plan = planner::BuildPlan(
      std::vector<planner::KeyRate>{{1, 9.0}, {2, 5.0}, {3, 3.0}, {4, 1.0}, {5, 0.0}},
      {.destinations = 3, .q_cap = 4.0, .slots_per_destination = 10});
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 4);  // the zero-rate key is not admitted

  std::map<uint64_t, std::string> names = {{1, "one"}, {3, "three"}};
  Snapshot t = planner::SnapshotFromPlan(
      {4, 7}, *plan, {"a", "b", "c", "d"}, active,
      [&](uint64_t id) -> std::string_view {
        auto it = names.find(id);
        return it == names.end() ? std::string_view() : std::string_view(it->second);
      },
      /*built_unix_ms=*/123456, /*ttl_seconds=*/60);

  CHECK(t->version() == TableVersion{4, 7});
  CHECK(t->destinations() == std::vector<std::string>{"a", "b", "c", "d"});
  CHECK(t->built_unix_ms() == 123456);
  CHECK(t->ttl_seconds() == 60);
  REQUIRE(t->expected_loads().size() == 4);
  CHECK(t->expected_loads()[1] == 0.0);
  for (size_t i = 0; i < active.size(); ++i) {
    CHECK(t->expected_loads()[active[i]] == plan->loads()[i]);
  }
  // Key 1 (rate 9, q_cap 4) needs all three active destinations: a, c and d.
  REQUIRE(t->Find(1) != nullptr);
  CHECK(t->Find(1)->destinations == std::vector<uint32_t>{0, 2, 3});
  CHECK(t->Find(1)->key == "one");
  CHECK(t->Find(2)->key.empty());
  CHECK(t->Find(5) == nullptr);
  REQUIRE(t->entries().size() == plan->size());
  for (size_t i = 0; i < plan->size(); ++i) {
    const TableEntry& e = t->entries()[i];
    CHECK(e.key_id == plan->key(i));
    CHECK(e.rate == plan->rate(i));
    std::vector<uint32_t> expected;
    for (uint32_t d : plan->destinations(i)) expected.push_back(active[d]);
    CHECK(e.destinations == expected);
    CHECK(t->Find(e.key_id) == &e);
  }
  // Whatever SnapshotFromPlan builds passes FromProto's validation.
  CHECK(TableSnapshot::FromProto(t->ToProto()).ok());
}

TEST_CASE("SnapshotFromPlan sorts destination sets when the active list is not ascending") {
  absl::StatusOr<planner::Plan> plan =
      planner::BuildPlan(std::vector<planner::KeyRate>{{1, 9.0}, {2, 1.0}},
                         {.destinations = 3, .q_cap = 4.0, .slots_per_destination = 10});
  REQUIRE(plan.ok());
  const std::vector<uint32_t> active = {3, 0, 2};
  Snapshot t =
      planner::SnapshotFromPlan({1, 1}, *plan, {"a", "b", "c", "d"}, active, nullptr, 0, 1);
  CHECK(t->Find(1)->destinations == std::vector<uint32_t>{0, 2, 3});
  CHECK(t->Find(1)->key.empty());
  CHECK(TableSnapshot::FromProto(t->ToProto()).ok());
}

TEST_CASE("FromEntries keeps the content it is given") {
  std::vector<TableEntry> entries = {
      {.key_id = 7, .rate = 3.0, .destinations = {0, 2}, .key = "seven", .spill = 1},
      {.key_id = 8, .rate = 3.0, .destinations = {1}, .key = "", .spill = std::nullopt},
      {.key_id = 9, .rate = 0.5, .destinations = {2}, .key = "", .spill = std::nullopt}};
  Snapshot t = TableSnapshot::FromEntries({1, 2}, {"a", "b", "c"}, {2.0, 3.5, 1.0}, entries,
                                          /*built_unix_ms=*/42, /*ttl_seconds=*/30);
  CHECK(t->version() == TableVersion{1, 2});
  CHECK(t->destinations() == std::vector<std::string>{"a", "b", "c"});
  CHECK(t->expected_loads() == std::vector<double>{2.0, 3.5, 1.0});
  CHECK(t->entries() == entries);
  CHECK(t->built_unix_ms() == 42);
  CHECK(t->ttl_seconds() == 30);
  REQUIRE(t->Find(8) != nullptr);
  CHECK(t->Find(8)->destinations == std::vector<uint32_t>{1});
  CHECK(t->Find(10) == nullptr);
  CHECK(TableSnapshot::FromProto(t->ToProto()).ok());
}

TEST_CASE("ToProto and FromProto round-trip a table exactly") {
  absl::StatusOr<planner::Plan> plan = planner::BuildPlan(
      std::vector<planner::KeyRate>{{11, 7.5}, {12, 2.25}, {13, 2.25}, {14, 0.125}},
      {.destinations = 2, .q_cap = 4.0, .slots_per_destination = 4});
  REQUIRE(plan.ok());
  const std::vector<uint32_t> active = {0, 1};
  Snapshot t = planner::SnapshotFromPlan(
      {2, 5}, *plan, {"x", "y"}, active, [](uint64_t) { return std::string_view("k"); }, 99, 15.5);
  v1::RoutingTable wire = t->ToProto();
  CHECK(wire.version().epoch() == 2);
  CHECK(wire.version().number() == 5);
  CHECK(wire.assignments_size() == 4);
  CHECK(wire.ttl_seconds() == 15.5);

  v1::RoutingTable parsed_wire;
  REQUIRE(parsed_wire.ParseFromString(wire.SerializeAsString()));
  Snapshot back = MustFromProto(parsed_wire);
  CHECK(back->version() == t->version());
  CHECK(back->destinations() == t->destinations());
  CHECK(back->expected_loads() == t->expected_loads());
  CHECK(back->entries() == t->entries());
  CHECK(back->built_unix_ms() == 99);
  CHECK(back->ttl_seconds() == 15.5);
  CHECK(MessageDifferencer::Equals(back->ToProto(), wire));
}

TEST_CASE("FromProto rejects invalid tables, naming the field and value") {
  struct Case {
    const char* what;
    std::function<void(v1::RoutingTable&)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"no destinations",
       [](v1::RoutingTable& t) {
         t.clear_destinations();
         t.clear_expected_loads();
         t.clear_assignments();
       },
       "destinations: empty"},
      {"empty name", [](v1::RoutingTable& t) { t.set_destinations(1, ""); },
       "destinations[1]: empty name"},
      {"repeated name", [](v1::RoutingTable& t) { t.set_destinations(2, "a"); },
       "destinations[2]: \"a\" repeats destinations[0]"},
      {"loads size", [](v1::RoutingTable& t) { t.mutable_expected_loads()->RemoveLast(); },
       "expected_loads: 2 entries for 3 destinations"},
      {"NaN load", [](v1::RoutingTable& t) { t.set_expected_loads(1, kNaN); },
       "expected_loads[1]: nan"},
      {"negative load", [](v1::RoutingTable& t) { t.set_expected_loads(0, -1); },
       "expected_loads[0]: -1"},
      {"infinite load", [](v1::RoutingTable& t) { t.set_expected_loads(2, kInf); },
       "expected_loads[2]: inf"},
      {"duplicate key", [](v1::RoutingTable& t) { t.mutable_assignments(1)->set_key_id(10); },
       "assignments[1].key_id: 10 repeats assignments[0]"},
      {"empty set", [](v1::RoutingTable& t) { t.mutable_assignments(1)->clear_destinations(); },
       "assignments[1].destinations: empty (key_id 20)"},
      {"unsorted set",
       [](v1::RoutingTable& t) {
         t.mutable_assignments(0)->set_destinations(0, 1);
         t.mutable_assignments(0)->set_destinations(1, 0);
       },
       "assignments[0].destinations[1]: 0 after 1"},
      {"duplicate in set",
       [](v1::RoutingTable& t) { t.mutable_assignments(0)->set_destinations(0, 1); },
       "assignments[0].destinations[1]: 1 after 1"},
      {"out of range",
       [](v1::RoutingTable& t) { t.mutable_assignments(0)->set_destinations(1, 3); },
       "assignments[0].destinations[1]: 3 is out of range for 3 destinations"},
      {"NaN rate", [](v1::RoutingTable& t) { t.mutable_assignments(2)->set_rate(kNaN); },
       "assignments[2].rate: nan"},
      {"negative rate", [](v1::RoutingTable& t) { t.mutable_assignments(2)->set_rate(-1); },
       "assignments[2].rate: -1"},
      {"infinite rate", [](v1::RoutingTable& t) { t.mutable_assignments(0)->set_rate(kInf); },
       "assignments[0].rate: inf"},
      {"not hottest first", [](v1::RoutingTable& t) { t.mutable_assignments(2)->set_rate(5); },
       "assignments[2].rate: 5 is above assignments[1].rate 1"},
      {"NaN ttl", [](v1::RoutingTable& t) { t.set_ttl_seconds(kNaN); }, "ttl_seconds: nan"},
      {"negative ttl", [](v1::RoutingTable& t) { t.set_ttl_seconds(-2); }, "ttl_seconds: -2"},
      {"negative built time", [](v1::RoutingTable& t) { t.set_built_unix_ms(-5); },
       "built_unix_ms: -5 is negative"},
  };
  REQUIRE(TableSnapshot::FromProto(SmallTableProto()).ok());
  for (const Case& c : cases) {
    SECTION(c.what) {
      v1::RoutingTable t = SmallTableProto();
      c.mutate(t);
      absl::StatusOr<Snapshot> s = TableSnapshot::FromProto(t);
      INFO(s.status().ToString());
      REQUIRE_FALSE(s.ok());
      CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(s.status().message()), Catch::Contains(c.message));
    }
  }
}

TEST_CASE("FromProto accepts equal rates in any key order and zero rates") {
  v1::RoutingTable t =
      TableProto({1, 1}, {"a"}, {0.0}, {{9, {0}, 1.0, ""}, {3, {0}, 1.0, ""}, {5, {0}, 0.0, ""}});
  Snapshot s = MustFromProto(t);
  CHECK(KeyIds(*s) == std::vector<uint64_t>{9, 3, 5});
}

TEST_CASE("SameRouting compares destination names and destination sets only") {
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<Row> rows = {{1, {0, 1}, 3.0, "one"}, {2, {2}, 1.0, ""}};
  Snapshot t = Table({1, 1}, names, rows);

  SECTION("identical content under another version, with other rates, loads and names") {
    v1::RoutingTable other =
        TableProto({1, 9}, names, {5, 5, 5}, {{2, {2}, 8.0, "two"}, {1, {0, 1}, 0.5, ""}});
    other.set_built_unix_ms(77);
    CHECK(t->SameRouting(*MustFromProto(other)));
    CHECK(MustFromProto(other)->SameRouting(*t));
  }
  SECTION("a destination set changed") {
    CHECK_FALSE(t->SameRouting(*Table({1, 2}, names, {{1, {0, 2}, 3.0, ""}, {2, {2}, 1.0, ""}})));
  }
  SECTION("a key added") {
    auto more = rows;
    more.push_back({3, {1}, 0.5, ""});
    CHECK_FALSE(t->SameRouting(*Table({1, 2}, names, more)));
    CHECK_FALSE(Table({1, 2}, names, more)->SameRouting(*t));
  }
  SECTION("a key replaced by another") {
    CHECK_FALSE(t->SameRouting(*Table({1, 2}, names, {{1, {0, 1}, 3.0, ""}, {4, {2}, 1.0, ""}})));
  }
  SECTION("a destination renamed or added") {
    CHECK_FALSE(t->SameRouting(*Table({1, 2}, {"a", "b", "z"}, rows)));
    CHECK_FALSE(t->SameRouting(*Table({1, 2}, {"a", "b", "c", "d"}, rows)));
  }
  SECTION("WithVersion shares the content") {
    Snapshot v = t->WithVersion({2, 1});
    CHECK(v->version() == TableVersion{2, 1});
    CHECK(t->version() == TableVersion{1, 1});
    CHECK(&v->entries() == &t->entries());
    CHECK(v->SameRouting(*t));
    CHECK(v->Find(1) == t->Find(1));
    CHECK(v->destinations() == t->destinations());
    CHECK(v->ttl_seconds() == t->ttl_seconds());
  }
}

TEST_CASE("ComputeDelta sends new and re-routed keys and removals, not rate-only changes") {
  const std::vector<std::string> names = {"a", "b", "c"};
  Snapshot base = Table(
      {1, 1}, names, {{1, {0}, 5.0, ""}, {2, {1}, 4.0, ""}, {3, {2}, 3.0, ""}, {4, {0}, 2.0, ""}});
  Snapshot target = Table({1, 2}, {"a", "b", "c", "d"},
                          {{1, {0}, 9.0, ""},      // rate only: not sent
                           {2, {1, 3}, 4.0, ""},   // re-routed
                           {5, {3}, 3.5, "five"},  // new
                           {4, {0}, 2.0, ""}});    // unchanged; key 3 removed
  v1::TableDelta delta = ComputeDelta(*base, *target);
  CHECK(TableVersion::FromProto(delta.base()) == TableVersion{1, 1});
  CHECK(TableVersion::FromProto(delta.version()) == TableVersion{1, 2});
  CHECK(delta.destinations_size() == 4);
  CHECK(delta.expected_loads_size() == 4);
  REQUIRE(delta.upserts_size() == 2);
  CHECK(delta.upserts(0).key_id() == 2);
  CHECK(delta.upserts(1).key_id() == 5);
  CHECK(delta.upserts(1).key() == "five");
  REQUIRE(delta.removed_key_ids_size() == 1);
  CHECK(delta.removed_key_ids(0) == 3);

  absl::StatusOr<Snapshot> applied = ApplyDelta(*base, delta);
  REQUIRE(applied.ok());
  CHECK((*applied)->SameRouting(*target));
  CHECK((*applied)->version() == TableVersion{1, 2});
  CHECK((*applied)->Find(1)->rate == 5.0);  // the base's rate: rate-only changes are not sent
  CHECK(KeyIds(**applied) == std::vector<uint64_t>{1, 2, 5, 4});
}

TEST_CASE("A changed spill destination is a routing change: published, and sent in the delta") {
  const std::vector<std::string> names = {"a", "b", "c"};
  Snapshot base = Table({1, 1}, names, {{1, {0}, 5.0, "", 1}, {2, {1}, 4.0, "", std::nullopt}});
  const std::optional<uint32_t> new_spill = GENERATE(std::optional<uint32_t>(2), std::nullopt);
  Snapshot target =
      Table({1, 2}, names, {{1, {0}, 5.0, "", new_spill}, {2, {1}, 4.0, "", std::nullopt}});
  CHECK_FALSE(base->SameRouting(*target));
  CHECK_FALSE(target->SameRouting(*base));

  v1::TableDelta delta = ComputeDelta(*base, *target);
  REQUIRE(delta.upserts_size() == 1);
  CHECK(delta.upserts(0).key_id() == 1);
  absl::StatusOr<Snapshot> applied = ApplyDelta(*base, delta);
  REQUIRE(applied.ok());
  CHECK((*applied)->Find(1)->spill == new_spill);
  CHECK((*applied)->SameRouting(*target));
}

// Random pairs of tables over a shared key pool: memberships grow, shrink or rename, keys come
// and go, keep or change their destination sets and rates, with many rate ties.
struct RandomPair {
  Snapshot base;
  Snapshot target;
};

RandomPair MakeRandomPair(uint64_t seed, bool stable_rates) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };

  const uint32_t r_base = static_cast<uint32_t>(uniform(1, 6));
  std::vector<std::string> base_names, target_names;
  for (uint32_t i = 0; i < r_base; ++i) base_names.push_back(absl::StrCat("d", i));
  target_names = base_names;
  switch (uniform(0, 3)) {
    case 0:
      break;
    case 1:
      for (uint64_t n = uniform(1, 2); n > 0; --n) {
        target_names.push_back(absl::StrCat("d", target_names.size()));
      }
      break;
    case 2:
      if (target_names.size() > 1) target_names.pop_back();
      break;
    case 3:
      target_names[uniform(0, r_base - 1)] = absl::StrCat("renamed", seed);
      break;
  }
  const uint32_t r_target = static_cast<uint32_t>(target_names.size());

  auto random_set = [&](uint32_t r) {
    std::vector<uint32_t> set;
    while (set.empty()) {
      for (uint32_t d = 0; d < r; ++d) {
        if (chance(0.35)) set.push_back(d);
      }
    }
    return set;
  };
  auto random_rate = [&] { return 0.5 * static_cast<double>(uniform(0, 8)); };
  auto name_of = [](uint64_t id) { return id % 3 == 0 ? absl::StrCat("key-", id) : std::string(); };

  std::vector<Row> base_rows, target_rows;
  std::set<uint64_t> ids;
  const uint64_t pool = uniform(0, 40);
  while (ids.size() < pool) ids.insert(uniform(0, 1000));
  for (uint64_t id : ids) {
    const bool in_base = chance(0.7);
    const bool in_target = chance(0.7);
    Row b{id, random_set(r_base), random_rate(), name_of(id)};
    if (in_base) base_rows.push_back(b);
    if (!in_target) continue;
    Row t = b;
    const bool keep_set = in_base && chance(0.6) && b.destinations.back() < r_target;
    if (!keep_set) t.destinations = random_set(r_target);
    if (!(stable_rates && in_base)) t.rate = random_rate();
    target_rows.push_back(t);
  }
  auto hottest_first = [](std::vector<Row>& rows) {
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.rate > b.rate || (a.rate == b.rate && a.key_id < b.key_id);
    });
  };
  hottest_first(base_rows);
  hottest_first(target_rows);
  auto loads = [&](uint32_t r) {
    std::vector<double> l;
    for (uint32_t i = 0; i < r; ++i) l.push_back(random_rate());
    return l;
  };
  const TableVersion base_version{1, uniform(1, 100)};
  const TableVersion target_version =
      chance(0.8) ? TableVersion{1, base_version.number + uniform(1, 3)} : TableVersion{2, 1};
  v1::RoutingTable target_proto =
      TableProto(target_version, target_names, loads(r_target), target_rows);
  target_proto.set_built_unix_ms(static_cast<int64_t>(uniform(1000, 2000)));
  target_proto.set_ttl_seconds(static_cast<double>(uniform(1, 90)));
  return {MustFromProto(TableProto(base_version, base_names, loads(r_base), base_rows)),
          MustFromProto(target_proto)};
}

TEST_CASE("ApplyDelta(base, ComputeDelta(base, target)) reproduces target (random pairs)") {
  const bool stable_rates = GENERATE(false, true);
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    INFO("seed " << seed << ", stable_rates " << stable_rates);
    RandomPair pair = MakeRandomPair(seed, stable_rates);
    const TableSnapshot& base = *pair.base;
    const TableSnapshot& target = *pair.target;

    v1::TableDelta delta = ComputeDelta(base, target);
    // Brute force: exactly the keys that are new or re-routed, and those gone.
    std::set<uint64_t> expected_upserts, expected_removed, upserts, removed;
    for (const TableEntry& e : target.entries()) {
      const TableEntry* b = base.Find(e.key_id);
      if (b == nullptr || b->destinations != e.destinations || b->spill != e.spill) expected_upserts.insert(e.key_id);
    }
    for (const TableEntry& e : base.entries()) {
      if (target.Find(e.key_id) == nullptr) expected_removed.insert(e.key_id);
    }
    for (const v1::Assignment& a : delta.upserts()) upserts.insert(a.key_id());
    for (uint64_t id : delta.removed_key_ids()) removed.insert(id);
    CHECK(upserts == expected_upserts);
    CHECK(static_cast<size_t>(delta.upserts_size()) == upserts.size());
    CHECK(removed == expected_removed);

    // Through the wire, as a gateway gets it.
    v1::TableDelta received;
    REQUIRE(received.ParseFromString(delta.SerializeAsString()));
    absl::StatusOr<Snapshot> applied = ApplyDelta(base, received);
    INFO(applied.status().ToString());
    REQUIRE(applied.ok());
    const TableSnapshot& result = **applied;

    CHECK(result.version() == target.version());
    CHECK(result.destinations() == target.destinations());
    CHECK(result.expected_loads() == target.expected_loads());
    CHECK(result.built_unix_ms() == target.built_unix_ms());
    CHECK(result.ttl_seconds() == target.ttl_seconds());
    CHECK(result.SameRouting(target));
    REQUIRE(result.entries().size() == target.entries().size());
    for (const TableEntry& e : result.entries()) {
      const TableEntry* t = target.Find(e.key_id);
      REQUIRE(t != nullptr);
      CHECK(e.destinations == t->destinations);
      // Keys not sent keep the base's rate and name; sent ones carry the target's.
      const TableEntry& source = upserts.count(e.key_id) ? *t : *base.Find(e.key_id);
      CHECK(e.rate == source.rate);
      CHECK(e.key == source.key);
      CHECK(result.Find(e.key_id) == &e);
    }
    CHECK(std::is_sorted(result.entries().begin(), result.entries().end(),
                         [](const TableEntry& a, const TableEntry& b) { return a.rate > b.rate; }));
    // The result is itself a valid table.
    CHECK(TableSnapshot::FromProto(result.ToProto()).ok());
    if (stable_rates) {
      // Nothing the delta leaves out differs, so the result is the target, byte for byte.
      CHECK(MessageDifferencer::Equals(result.ToProto(), target.ToProto()));
      CHECK(result.ToProto().SerializeAsString() == target.ToProto().SerializeAsString());
    }
  }
}

TEST_CASE("ApplyDelta fails on a wrong base and leaves the base as it was") {
  Snapshot v1t = Table({1, 1}, {"a", "b"}, {{1, {0}, 2.0, ""}});
  Snapshot v2t = Table({1, 2}, {"a", "b"}, {{1, {1}, 2.0, ""}});
  Snapshot v3t = Table({1, 3}, {"a", "b"}, {{1, {0, 1}, 2.0, ""}});
  v1::TableDelta delta = ComputeDelta(*v2t, *v3t);  // based on 1.2
  absl::StatusOr<Snapshot> applied = ApplyDelta(*v1t, delta);
  REQUIRE_FALSE(applied.ok());
  CHECK(applied.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(applied.status().message()),
             Catch::Contains("delta.base: 1.2 does not match the applied version 1.1"));
  CHECK(v1t->Find(1)->destinations == std::vector<uint32_t>{0});
  CHECK(ApplyDelta(*v2t, delta).ok());
}

TEST_CASE("ApplyDelta rejects invalid deltas, naming the field and value") {
  Snapshot base =
      Table({1, 1}, {"a", "b", "c"}, {{1, {0}, 3.0, ""}, {2, {1}, 2.0, ""}, {3, {2}, 1.0, ""}});
  Snapshot target =
      Table({1, 2}, {"a", "b", "c"}, {{1, {0}, 3.0, ""}, {2, {2}, 2.0, ""}, {4, {1}, 1.0, ""}});
  const v1::TableDelta good = ComputeDelta(*base, *target);
  REQUIRE(good.upserts_size() == 2);  // keys 2 and 4
  REQUIRE(good.removed_key_ids_size() == 1);
  REQUIRE(ApplyDelta(*base, good).ok());

  struct Case {
    const char* what;
    std::function<void(v1::TableDelta&)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"version not newer", [](v1::TableDelta& d) { *d.mutable_version() = d.base(); },
       "delta.version: 1.1 is not newer than delta.base 1.1"},
      {"repeated destination name", [](v1::TableDelta& d) { d.set_destinations(1, "a"); },
       "delta.destinations[1]: \"a\" repeats delta.destinations[0]"},
      {"loads size", [](v1::TableDelta& d) { d.add_expected_loads(1); },
       "delta.expected_loads: 4 entries for 3 destinations"},
      {"negative ttl", [](v1::TableDelta& d) { d.set_ttl_seconds(-1); }, "delta.ttl_seconds: -1"},
      {"upsert out of range",
       [](v1::TableDelta& d) { d.mutable_upserts(0)->set_destinations(0, 3); },
       "delta.upserts[0].destinations[0]: 3 is out of range for 3 destinations"},
      {"upsert empty set", [](v1::TableDelta& d) { d.mutable_upserts(1)->clear_destinations(); },
       "delta.upserts[1].destinations: empty (key_id 4)"},
      {"upsert NaN rate", [](v1::TableDelta& d) { d.mutable_upserts(1)->set_rate(kNaN); },
       "delta.upserts[1].rate: nan"},
      {"repeated upsert", [](v1::TableDelta& d) { *d.add_upserts() = d.upserts(0); },
       "delta.upserts[2].key_id: 2 repeats delta.upserts[0]"},
      {"removed key not in base", [](v1::TableDelta& d) { d.add_removed_key_ids(99); },
       "delta.removed_key_ids[1]: key_id 99 is not in the base table 1.1"},
      {"removed twice", [](v1::TableDelta& d) { d.add_removed_key_ids(3); },
       "delta.removed_key_ids[1]: key_id 3 is repeated"},
      {"removed and upserted", [](v1::TableDelta& d) { d.add_removed_key_ids(2); },
       "delta.removed_key_ids[1]: key_id 2 is also in delta.upserts[0]"},
      {"kept key out of range",
       [](v1::TableDelta& d) {
         d.mutable_destinations()->RemoveLast();
         d.mutable_expected_loads()->RemoveLast();
         d.mutable_upserts(0)->set_destinations(0, 1);  // key 2 now fits; key 1 stays on a
         d.clear_removed_key_ids();                     // key 3 stays on c, which is gone
       },
       "delta: key_id 3 keeps destination 2 from base 1.1, out of range for the 2 destinations"},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      v1::TableDelta d = good;
      c.mutate(d);
      absl::StatusOr<Snapshot> s = ApplyDelta(*base, d);
      INFO(s.status().ToString());
      REQUIRE_FALSE(s.ok());
      CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(s.status().message()), Catch::Contains(c.message));
    }
  }
}

TEST_CASE("Diff lists moved, added and removed keys and the churned share of the rate") {
  Snapshot from =
      Table({1, 1}, {"a", "b", "c"},
            {{1, {0}, 4.0, "one"}, {2, {1, 2}, 3.0, ""}, {3, {2}, 2.0, ""}, {4, {0}, 1.0, "four"}});
  Snapshot to = Table({1, 2}, {"a", "b", "c", "d"},
                      {{1, {0}, 5.0, ""},       // same destination, hotter: warm
                       {2, {1}, 3.0, ""},       // lost c, kept b: moved, but warm
                       {3, {3}, 2.0, "three"},  // c -> d: moved and cold
                       {5, {1}, 1.0, ""}});     // new: cold; key 4 removed
  TableDiff diff = Diff(*from, *to);
  CHECK(diff.from == TableVersion{1, 1});
  CHECK(diff.to == TableVersion{1, 2});
  CHECK(diff.moved == std::vector<KeyChange>{{2, "", {1, 2}, {1}}, {3, "three", {2}, {3}}});
  CHECK(diff.added == std::vector<KeyChange>{{5, "", {}, {1}}});
  CHECK(diff.removed == std::vector<KeyChange>{{4, "four", {0}, {}}});
  // Cold: key 3 (2.0) and key 5 (1.0) of 5 + 3 + 2 + 1 = 11.
  CHECK(diff.churn == Approx(3.0 / 11.0));

  v1::DiffResponse proto = diff.ToProto();
  CHECK(proto.from().number() == 1);
  CHECK(proto.to().number() == 2);
  REQUIRE(proto.moved_size() == 2);
  CHECK(proto.moved(1).key_id() == 3);
  CHECK(proto.moved(1).key() == "three");
  CHECK(proto.moved(1).from_destinations(0) == 2);
  CHECK(proto.moved(1).to_destinations(0) == 3);
  CHECK(proto.added_size() == 1);
  CHECK(proto.removed_size() == 1);
  CHECK(proto.churn() == diff.churn);

  TableDiff none = Diff(*from, *from);
  CHECK(none.moved.empty());
  CHECK(none.added.empty());
  CHECK(none.removed.empty());
  CHECK(none.churn == 0.0);
}

TEST_CASE("Diff compares destinations by name across a renumbering") {
  Snapshot from = Table({1, 1}, {"a", "b"}, {{2, {0}, 3.0, ""}, {1, {0}, 1.0, ""}});
  // Same servers, listed the other way round: key 1 stays on a, key 2 goes from a to b.
  Snapshot to = Table({1, 2}, {"b", "a"}, {{2, {0}, 3.0, ""}, {1, {1}, 1.0, ""}});
  TableDiff diff = Diff(*from, *to);
  REQUIRE(diff.moved.size() == 1);
  CHECK(diff.moved[0].key_id == 2);
  CHECK(diff.churn == Approx(0.75));
  // A table with no admitted rate has no churn.
  CHECK(Diff(*from, *Table({1, 3}, {"a"}, {{7, {0}, 0.0, ""}})).churn == 0.0);
}

TEST_CASE("A rollout travels with the table and its deltas, and changes the routing") {
  Snapshot plain = Table({1, 1}, {"a", "b"}, {{1, {0}, 2.0, ""}, {2, {1}, 1.0, ""}});
  CHECK_FALSE(plain->rollout().has_value());
  CHECK(plain->table_fraction() == 1.0);
  CHECK_FALSE(plain->ToProto().has_rollout());

  const Snapshot canary = plain->WithRollout(TableRollout{"canary", 0.2});
  CHECK(canary->table_fraction() == 0.2);
  CHECK(canary->entries().size() == plain->entries().size());
  CHECK(canary->WithVersion({1, 5})->rollout() == canary->rollout());
  // A new split is a new routing: the planner publishes it as a new version.
  CHECK_FALSE(canary->SameRouting(*plain));
  CHECK_FALSE(canary->SameRouting(*canary->WithRollout(TableRollout{"canary", 0.3})));
  CHECK(canary->SameRouting(*canary->WithVersion({1, 9})));

  const v1::RoutingTable wire = canary->ToProto();
  REQUIRE(wire.has_rollout());
  CHECK(wire.rollout().state() == "canary");
  CHECK(wire.rollout().table_fraction() == 0.2);
  CHECK(MustFromProto(wire)->rollout() == canary->rollout());

  // Deltas carry the target's rollout whole, and its absence.
  const Snapshot next = canary->WithVersion({1, 2})->WithRollout(TableRollout{"enabled", 0.95});
  absl::StatusOr<Snapshot> applied = ApplyDelta(*canary, ComputeDelta(*canary, *next));
  REQUIRE(applied.ok());
  CHECK((*applied)->rollout() == next->rollout());
  const Snapshot cleared = next->WithVersion({1, 3})->WithRollout(std::nullopt);
  applied = ApplyDelta(*next, ComputeDelta(*next, *cleared));
  REQUIRE(applied.ok());
  CHECK_FALSE((*applied)->rollout().has_value());
  CHECK((*applied)->table_fraction() == 1.0);

  for (double bad : {-0.1, 1.5, kNaN, kInf}) {
    v1::RoutingTable t = wire;
    t.mutable_rollout()->set_table_fraction(bad);
    absl::StatusOr<Snapshot> s = TableSnapshot::FromProto(t);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("rollout.table_fraction: "));
    v1::TableDelta d = ComputeDelta(*canary, *next);
    d.mutable_rollout()->set_table_fraction(bad);
    s = ApplyDelta(*canary, d);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()),
               Catch::Contains("delta.rollout.table_fraction: "));
  }
}

}  // namespace
}  // namespace cacheroute::table
