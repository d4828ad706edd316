// Tests for planner/plan: the per-key rule k_b (AssignmentCount), the config check, and Plan's
// accessors and Remapped on built plans.
#include "planner/plan.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/plan_builder.h"
#include "tests/support/require_ok.h"

namespace cacheroute::planner {
namespace {

TEST_CASE("k_b = max(1, ceil(rate / q_cap)), capped at R") {
  bool capped = true;
  CHECK(AssignmentCount(0.5, 1.0, 8, &capped) == 1);
  CHECK_FALSE(capped);
  CHECK(AssignmentCount(1.0, 1.0, 8) == 1);
  CHECK(AssignmentCount(2.5, 1.0, 8) == 3);
  CHECK(AssignmentCount(3.0, 1.0, 8) == 3);
  CHECK(AssignmentCount(8.0, 1.0, 8, &capped) == 8);
  CHECK_FALSE(capped);
  CHECK(AssignmentCount(8.5, 1.0, 8, &capped) == 8);
  CHECK(capped);
  CHECK(AssignmentCount(std::numeric_limits<double>::max(), 1e-300, 8, &capped) == 8);
  CHECK(capped);
  // 0.3 / 0.1 is 2.9999999999999996 in doubles; the cap must still hold after rounding.
  const uint32_t k = AssignmentCount(0.3, 0.1, 8);
  CHECK(0.3 / k <= 0.1);
  CHECK(0.3 / (k - 1) > 0.1);
}

TEST_CASE("k_b is the least k with fl(rate / k) <= q_cap on seeded random inputs") {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> value(0.0, 3.0);
  std::uniform_int_distribution<uint32_t> dests(1, 64);
  for (int trial = 0; trial < 20000; ++trial) {
    const double rate = value(rng), q_cap = value(rng);
    const uint32_t r = dests(rng);
    bool capped = false;
    const uint32_t k = AssignmentCount(rate, q_cap, r, &capped);
    INFO("rate " << rate << " q_cap " << q_cap << " R " << r);
    REQUIRE(k >= 1);
    REQUIRE(k <= r);
    uint32_t least = 1;
    while (least < r && rate / least > q_cap) ++least;
    CHECK(k == least);
    // Capped exactly when even R assignments exceed the cap (then k = R).
    if (capped) CHECK(k == r);
    if (rate / k > q_cap) CHECK(capped);
  }
}

void CheckRejects(const PlanConfig& config, const std::vector<std::string>& fragments) {
  const absl::Status status = ValidatePlanConfig(config);
  INFO(status.ToString());
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  for (const std::string& f : fragments) {
    CHECK_THAT(std::string(status.message()), Catch::Contains(f));
  }
}

TEST_CASE("ValidatePlanConfig names the field and the value") {
  const PlanConfig good{.destinations = 2, .q_cap = 1, .slots_per_destination = 1};
  CHECK(ValidatePlanConfig(good).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  PlanConfig c = good;
  c.destinations = 0;
  CheckRejects(c, {"destinations must be between 1 and 1048576, got 0"});
  c.destinations = (1u << 20) + 1;
  CheckRejects(c, {"destinations", "got 1048577"});
  c = good;
  c.q_cap = nan;
  CheckRejects(c, {"q_cap must be a finite number > 0, got nan"});
  c.q_cap = -inf;
  CheckRejects(c, {"q_cap", "got -inf"});
  c = good;
  c.slots_per_destination = 0;
  CheckRejects(c, {"slots_per_destination must be >= 1, got 0"});
  for (double PlanConfig::*field :
       {&PlanConfig::unkeyed_rate, &PlanConfig::balance_share, &PlanConfig::stickiness,
        &PlanConfig::kv_budget_tokens, &PlanConfig::kv_capacity_tokens,
        &PlanConfig::request_overhead_tokens}) {
    for (double bad : {-0.5, nan, inf}) {
      c = good;
      c.*field = bad;
      const absl::Status status = ValidatePlanConfig(c);
      INFO(status.ToString());
      CHECK(status.code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(status.message()), Catch::Contains("must be a finite number >= 0"));
    }
  }
  c = good;
  c.balance_share = -1;
  CheckRejects(c, {"balance_share must be a finite number >= 0, got -1"});
  c = good;
  c.kv_budget_tokens = 10;
  CHECK(ValidatePlanConfig(c).ok());
  c.placement = Placement::kHashed;
  CheckRejects(c, {"placement must be LPT when kv_budget_tokens > 0"});
}

Plan MustBuild(const std::vector<KeyRate>& rates, const PlanConfig& config,
               const std::vector<KeyTokens>& tokens = {}) {
  return cacheroute::testing::RequireOk(BuildPlan(rates, config, nullptr, nullptr, {}, tokens));
}

TEST_CASE("a default Plan is empty, and slot-model plans have no work or spills") {
  const Plan empty;
  CHECK(empty.size() == 0);
  CHECK(empty.loads().empty());
  CHECK(empty.work_loads().empty());
  const Plan plan =
      MustBuild({{1, 3}, {2, 1}}, {.destinations = 2, .q_cap = 10, .slots_per_destination = 1});
  REQUIRE(plan.size() == 2);
  CHECK(plan.spill(0) == kNoSpill);
  CHECK(plan.reusable_tokens(0) == 0);
  CHECK(plan.saved_work(0) == 0);
  CHECK(plan.work(0) == 0);
  CHECK(plan.work_loads().empty());
  CHECK(plan.config().destinations == 2);
}

TEST_CASE("Remapped moves destinations, loads and spills to their new indices") {
  // Keys 1..4 on 4 destinations, k_b = 2 for the hottest, spills on.
  const Plan plan =
      MustBuild({{1, 8}, {2, 3}, {3, 2}, {4, 1}},
                {.destinations = 4, .q_cap = 4, .slots_per_destination = 4, .spill = true});
  // Reverse the indices and add a fifth destination.
  const std::vector<uint32_t> reverse = {3, 2, 1, 0};
  const Plan moved = plan.Remapped(reverse, 5);
  REQUIRE(moved.size() == plan.size());
  CHECK(moved.config().destinations == 5);
  REQUIRE(moved.loads().size() == 5);
  CHECK(moved.loads()[4] == 0);
  for (uint32_t d = 0; d < 4; ++d) CHECK(moved.loads()[3 - d] == plan.loads()[d]);
  for (size_t i = 0; i < plan.size(); ++i) {
    std::vector<uint32_t> expected;
    for (uint32_t d : plan.destinations(i)) expected.push_back(3 - d);
    std::sort(expected.begin(), expected.end());
    CHECK(std::vector<uint32_t>(moved.destinations(i).begin(), moved.destinations(i).end()) ==
          expected);
    CHECK(moved.spill(i) == 3 - plan.spill(i));
    CHECK(moved.key(i) == plan.key(i));
    CHECK(moved.rate(i) == plan.rate(i));
  }
  // Dropping destination 0: keys lose it, and a key that had only it is left with none.
  const std::vector<uint32_t> drop_first = {kNoSpill, 0, 1, 2};
  const Plan dropped = plan.Remapped(drop_first, 3);
  for (size_t i = 0; i < plan.size(); ++i) {
    size_t kept = 0;
    for (uint32_t d : plan.destinations(i)) kept += d == 0 ? 0 : 1;
    CHECK(dropped.destinations(i).size() == kept);
    REQUIRE(plan.spill(i) != kNoSpill);
    CHECK(dropped.spill(i) == (plan.spill(i) == 0 ? kNoSpill : plan.spill(i) - 1));
  }
  CHECK(dropped.stats().admitted_keys == plan.stats().admitted_keys);
}

}  // namespace
}  // namespace cacheroute::planner
