// Tests for planner/byte_aware: the work model's estimates worked by hand, the work cap, the
// ranking and budget admission against a comparison sort and a linear scan on seeded random
// instances, byte-aware placement against a straightforward implementation, and EstimateKey
// against the plans Build makes.
#include "planner/byte_aware.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/plan_builder.h"
#include "planner/radix_sort.h"
#include "tests/support/require_ok.h"

namespace cacheroute::planner {
namespace {

TEST_CASE("ValidateTokens names the entry, the key and the value") {
  const std::vector<KeyRate> rates = {{1, 1}, {2, 2}};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(ValidateTokens(rates, std::vector<KeyTokens>{{10, 20}, {}}).ok());
  const auto message = [&](const std::vector<KeyTokens>& tokens) {
    const absl::Status status = ValidateTokens(rates, tokens);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  };
  CHECK(message({{10, 20}}) == "tokens: 1 entries for 2 rates; give one per rate or none");
  CHECK(message({{10, 20}, {nan, 5}}) ==
        "tokens[1].reusable (key 2): must be a finite number >= 0 or kUnmeasured (-1), got nan");
  CHECK_THAT(message({{10, -2}, {1, 5}}), Catch::Contains("tokens[0].prompt (key 1)"));
  CHECK_THAT(message({{std::numeric_limits<double>::infinity(), 1}, {1, 5}}),
             Catch::Contains("got inf"));
}

TEST_CASE("WorkModel: sizes, means for unmeasured keys, and the survival discount") {
  const std::vector<KeyRate> rates = {{1, 1}, {2, 3}, {3, 2}, {4, 4}};
  // Key 1: measured, prompt 20 (10 unique); key 2: measured, prompt below reusable (raised);
  // key 3: unmeasured; key 4: a measured prefix without a prompt (all reusable).
  const std::vector<KeyTokens> tokens = {{10, 20}, {30, 25}, {}, {50, kUnmeasured}};
  const PlanConfig config{.destinations = 2,
                          .q_cap = 10,
                          .slots_per_destination = 1,
                          .kv_budget_tokens = 100,
                          .request_overhead_tokens = 7};
  const std::optional<WorkModel> model = WorkModel::Make(rates, tokens, config);
  REQUIRE(model.has_value());
  CHECK(model->measured() == 3);
  CHECK(model->turnover() == 0);  // no KV capacity given: every prefix survives
  CHECK(model->Reusable(0) == 10);
  CHECK(model->Prompt(0) == 20);
  CHECK(model->Prompt(1) == 30);
  CHECK(model->Prompt(3) == 50);
  // Rate-weighted means over the measured keys (rates 1, 3, 4): reusable (10 + 90 + 200) / 8,
  // unique (10 + 0 + 0) / 8.
  CHECK(model->Reusable(2) == Approx(300.0 / 8));
  CHECK(model->Prompt(2) == Approx(300.0 / 8 + 10.0 / 8));
  CHECK(model->Survival(5, 1) == 1);
  // Work: rate × (prompt − reusable × survival + overhead); saved: rate × reusable × survival.
  CHECK(model->Work(0, 1) == 1 * (20 - 10 + 7));
  CHECK(model->Saved(1, 2) == 3 * 30);
  CHECK(model->UnkeyedWork(2) == Approx(2 * (300.0 / 8 + 10.0 / 8 + 7)));

  // No key measured: no model.
  CHECK_FALSE(WorkModel::Make(rates, std::vector<KeyTokens>(4), config).has_value());
  // Measured keys all at rate 0: plain means.
  const std::vector<KeyRate> idle = {{1, 0}, {2, 0}, {3, 5}};
  const std::vector<KeyTokens> idle_tokens = {{10, 10}, {30, 50}, {}};
  const std::optional<WorkModel> plain = WorkModel::Make(idle, idle_tokens, config);
  REQUIRE(plain.has_value());
  CHECK(plain->Reusable(2) == 20);
  CHECK(plain->Prompt(2) == 30);
}

TEST_CASE("WorkModel: the turnover time from the KV capacity and the tokens flowing in") {
  // One destination of 1,000 tokens. Key 1: 2 requests/s, 100 reusable and 50 unique tokens.
  // Unique inflow 100 tokens/s gives T0 = 10 s; the misses add 2 × 100 × (1 − h(T0)) with
  // h(T0) = 20 / 21, so T = 1000 / (100 + 200 / 21).
  const std::vector<KeyRate> rates = {{1, 2}};
  const std::vector<KeyTokens> tokens = {{100, 150}};
  PlanConfig config{.destinations = 1,
                    .q_cap = 10,
                    .slots_per_destination = 1,
                    .kv_budget_tokens = 500,
                    .kv_capacity_tokens = 1000};
  const std::optional<WorkModel> model = WorkModel::Make(rates, tokens, config);
  REQUIRE(model.has_value());
  const double t = 1000 / (100 + 200.0 / 21);
  CHECK(model->turnover() == Approx(t));
  CHECK(model->Survival(2, 1) == Approx(2 * t / (1 + 2 * t)));
  CHECK(model->Survival(2, 2) == Approx(t / (1 + t)));
  // No traffic at all: nothing turns the cache over.
  const std::vector<KeyRate> silent = {{1, 0}};
  CHECK(WorkModel::Make(silent, tokens, config)->turnover() == 0);
}

TEST_CASE("ComputeWorkCap: q_cap requests of mean work, at most balance_share of a destination's") {
  const std::vector<KeyRate> rates = {{1, 1}, {2, 3}};
  const std::vector<KeyTokens> tokens = {{0, 100}, {0, 300}};
  PlanConfig config{
      .destinations = 4, .q_cap = 2, .slots_per_destination = 1, .kv_budget_tokens = 10};
  const std::optional<WorkModel> model = WorkModel::Make(rates, tokens, config);
  REQUIRE(model.has_value());
  std::vector<double> work1(2), survival1(2);
  // Work 100 + 900 = 1000 tokens/s over 4 requests/s: 250 per request, cap 2 × 250.
  WorkCap cap = ComputeWorkCap(rates, *model, config, work1.data(), survival1.data());
  CHECK(cap.total_work == 1000);
  CHECK(cap.cap == 500);
  CHECK(work1 == std::vector<double>{100, 900});
  CHECK(survival1 == std::vector<double>{1, 1});
  // balance_share 0.5 of a destination's mean work (250) is below it.
  config.balance_share = 0.5;
  cap = ComputeWorkCap(rates, *model, config, work1.data());
  CHECK(cap.cap == 125);
  CHECK(WorkAssignments(900, config, cap.cap) == 4);  // ⌈900 / 125⌉ = 8, capped at R
  bool capped = false;
  CHECK(WorkAssignments(100, config, cap.cap, &capped) == 1);
  CHECK_FALSE(capped);
  CHECK(WorkAssignments(900, config, 0) == 1);  // no cap (no traffic)
  config.replicate = false;
  CHECK(WorkAssignments(900, config, cap.cap) == 1);
  // No traffic: no cap.
  const std::vector<KeyRate> idle = {{1, 0}, {2, 0}};
  CHECK(ComputeWorkCap(idle, *WorkModel::Make(idle, tokens, config), config, work1.data()).cap ==
        0);
}

TEST_CASE("RankedKey packs the input index and the cost rounded up to a float") {
  for (double cost : {0.0, 1.0, 0.1, 123456.789, 3e9, 1e38}) {
    const RankedKey key = RankedKey::Make(77, cost, 5.0);
    CHECK(key.index() == 77);
    CHECK(key.saved == 5.0);
    CHECK(static_cast<double>(key.cost_above()) >= cost);
    CHECK(std::nextafter(key.cost_above(), 0.0f) < cost + (cost == 0 ? 1 : 0));
  }
  CHECK(RankedKey::Make(0xFFFFFFFFu, 1, 0).index() == 0xFFFFFFFFu);
}

// A seeded random byte-aware instance; saved work ties often (equal rates and sizes), so the
// admission scan meets runs it must sort exactly.
struct Instance {
  std::vector<KeyRate> rates;
  std::vector<KeyTokens> tokens;
  PlanConfig config;
};
Instance RandomInstance(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::lognormal_distribution<double> rate(0.0, 1.65), size(std::log(3000), 1.1);
  Instance in;
  const size_t n = rng() % 400;
  std::set<uint64_t> used;
  while (in.rates.size() < n) {
    const uint64_t key = rng() % 100000;
    if (!used.insert(key).second) continue;
    const double u = unit(rng);
    in.rates.push_back({key, u < 0.05 ? 0.0 : (u < 0.3 ? std::round(rate(rng)) : rate(rng))});
    KeyTokens t;
    if (unit(rng) > 0.1) {
      t.reusable = unit(rng) < 0.3 ? 1000 : std::round(size(rng));
      t.prompt = t.reusable + std::round(unit(rng) * 500);
    }
    in.tokens.push_back(t);
  }
  if (!in.tokens.empty()) in.tokens[0] = {100, 200};
  in.config = {.destinations = 1 + static_cast<uint32_t>(rng() % 16),
               .q_cap = 0.5 + unit(rng) * 4,
               .slots_per_destination = 1,
               .balance_share = unit(rng) < 0.5 ? 0 : 0.5,
               .kv_budget_tokens = 3000 * (0.2 + 4 * unit(rng)),
               .kv_capacity_tokens = unit(rng) < 0.5 ? 0 : 20000 * unit(rng),
               .request_overhead_tokens = unit(rng) < 0.5 ? 0.0 : 100.0};
  return in;
}

TEST_CASE("ranking and admission match a comparison sort and a linear scan") {
  int partial_runs = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    const Instance in = RandomInstance(rng);
    if (in.rates.empty()) continue;
    const size_t n = in.rates.size();
    const std::optional<WorkModel> model = WorkModel::Make(in.rates, in.tokens, in.config);
    REQUIRE(model.has_value());
    std::vector<double> work1(n), survival1(n);
    const WorkCap cap = ComputeWorkCap(in.rates, *model, in.config, work1.data(), survival1.data());
    std::vector<RankedKey> ranked(n), scratch(n);
    const SavedWorkRanking ranking =
        RankBySavedWork(in.rates, *model, in.config, cap.cap, work1.data(), survival1.data(),
                        ranked.data(), scratch.data());
    INFO("seed " << seed << " keys " << n);
    // The ranking is ordered on the sorted bits of the saved work.
    for (size_t r = 1; r < n && ranking.lowest_bit < 64; ++r) {
      CHECK((DescendingBits(ranked[r - 1].saved) >> ranking.lowest_bit) <=
            (DescendingBits(ranked[r].saved) >> ranking.lowest_bit));
    }
    // The straightforward admission: every key's saved work and cost, a full sort, a scan.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::vector<double> saved(n), cost(n);
    double least = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t k = WorkAssignments(work1[i], in.config, cap.cap);
      saved[i] = in.rates[i].rate > 0 ? model->Saved(i, k) : 0;
      cost[i] = model->Reusable(i) * k;
      if (saved[i] > 0) least = std::min(least, cost[i]);
    }
    CHECK(ranking.least_cost == least);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return saved[a] > saved[b] || (saved[a] == saved[b] && in.rates[a].key < in.rates[b].key);
    });
    const double budget = in.config.kv_budget_tokens * in.config.destinations;
    std::vector<uint32_t> expected;
    double used = 0, possible = 0, saved_sum = 0;
    for (size_t i : order) {
      possible += saved[i];
      if (!(saved[i] > 0) || used + cost[i] > budget) continue;
      used += cost[i];
      saved_sum += saved[i];
      expected.push_back(static_cast<uint32_t>(i));
    }
    const WorkAdmission admission = cacheroute::testing::RequireOk(
        AdmitBySavedWork(in.rates, *model, in.config, cap, work1.data(), ranked, ranking));
    // The same keys (a run taken whole keeps its ranking's order, so the order may differ).
    std::vector<uint32_t> admitted;
    for (const AdmittedKey& a : admission.keys) admitted.push_back(a.index);
    std::sort(admitted.begin(), admitted.end());
    std::sort(expected.begin(), expected.end());
    CHECK(admitted == expected);
    CHECK(admission.kv_used == Approx(used));
    CHECK(admission.kv_used <= budget);
    CHECK(admission.saved_work == Approx(saved_sum));
    CHECK(admission.possible_saved_work == Approx(possible));
    CHECK(admission.budget == budget);
    for (const AdmittedKey& a : admission.keys) {
      CHECK(a.k == WorkAssignments(work1[a.index], in.config, cap.cap));
      CHECK(a.job == model->Work(a.index, a.k) / a.k);
    }
    if (!expected.empty() && expected.size() < n) ++partial_runs;
  }
  CHECK(partial_runs > 50);  // the budget binds in most instances, so the scan is exercised
}

// Byte-aware placement written the obvious way (no hysteresis): keys in decreasing work per
// assignment, each job on the least loaded free destination with room for the prefix, else the
// least loaded free one.
std::vector<std::vector<uint32_t>> ReferencePlaceByWork(const Instance& in, const WorkModel& model,
                                                        const std::vector<AdmittedKey>& admitted,
                                                        std::vector<double>& work_loads) {
  const uint32_t r = in.config.destinations;
  std::vector<uint32_t> order(admitted.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const AdmittedKey &x = admitted[a], &y = admitted[b];
    return x.job > y.job || (x.job == y.job && in.rates[x.index].key < in.rates[y.index].key);
  });
  std::vector<double> kv(r, 0);
  std::vector<std::vector<uint32_t>> sets(admitted.size());
  for (uint32_t j : order) {
    const AdmittedKey& a = admitted[j];
    const double size = model.Reusable(a.index);
    std::vector<uint32_t>& chosen = sets[j];
    for (uint32_t c = 0; c < a.k; ++c) {
      int best = -1, best_fit = -1;
      for (uint32_t d = 0; d < r; ++d) {
        if (std::find(chosen.begin(), chosen.end(), d) != chosen.end()) continue;
        if (best < 0 || work_loads[d] < work_loads[best]) best = static_cast<int>(d);
        if (kv[d] + size <= in.config.kv_budget_tokens &&
            (best_fit < 0 || work_loads[d] < work_loads[best_fit])) {
          best_fit = static_cast<int>(d);
        }
      }
      chosen.push_back(static_cast<uint32_t>(best_fit >= 0 ? best_fit : best));
    }
    for (uint32_t d : chosen) {
      work_loads[d] += a.job;
      kv[d] += size;
    }
    std::sort(chosen.begin(), chosen.end());
  }
  return sets;
}

TEST_CASE("PlaceByWork matches the straightforward placement on seeded random instances") {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const Instance in = RandomInstance(rng);
    if (in.rates.empty()) continue;
    const size_t n = in.rates.size();
    const std::optional<WorkModel> model = WorkModel::Make(in.rates, in.tokens, in.config);
    std::vector<double> work1(n), survival1(n);
    const WorkCap cap = ComputeWorkCap(in.rates, *model, in.config, work1.data(), survival1.data());
    std::vector<RankedKey> ranked(n), scratch(n);
    const SavedWorkRanking ranking =
        RankBySavedWork(in.rates, *model, in.config, cap.cap, work1.data(), survival1.data(),
                        ranked.data(), scratch.data());
    const WorkAdmission admission = cacheroute::testing::RequireOk(
        AdmitBySavedWork(in.rates, *model, in.config, cap, work1.data(), ranked, ranking));
    const uint32_t r = in.config.destinations;
    std::vector<uint32_t> offset(admission.keys.size() + 1, 0);
    for (size_t j = 0; j < admission.keys.size(); ++j) {
      offset[j + 1] = offset[j] + admission.keys[j].k;
    }
    std::vector<uint32_t> sets(admission.slots);
    std::vector<double> loads(r, 0.0), work_loads(r, admission.tail_work / r);
    const uint64_t kept = PlaceByWork(in.config, in.rates, admission.keys, offset, *model, nullptr,
                                      admission.total_work / r, sets, loads, work_loads);
    std::vector<double> expected_work = std::vector<double>(r, admission.tail_work / r);
    const std::vector<std::vector<uint32_t>> expected =
        ReferencePlaceByWork(in, *model, admission.keys, expected_work);
    INFO("seed " << seed);
    CHECK(kept == 0);
    for (size_t j = 0; j < admission.keys.size(); ++j) {
      CHECK(std::vector<uint32_t>(sets.begin() + offset[j], sets.begin() + offset[j + 1]) ==
            expected[j]);
    }
    CHECK(work_loads == expected_work);
    double rate_sum = 0;
    for (const AdmittedKey& a : admission.keys) rate_sum += in.rates[a.index].rate;
    CHECK(std::accumulate(loads.begin(), loads.end(), 0.0) == Approx(rate_sum));
  }
}

TEST_CASE("EstimateKey gives the k, sizes and saved work Build planned each admitted key with") {
  int admitted = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const Instance in = RandomInstance(rng);
    if (in.rates.empty()) continue;
    const Plan plan = cacheroute::testing::RequireOk(
        BuildPlan(in.rates, in.config, nullptr, nullptr, {}, in.tokens));
    REQUIRE(plan.stats().byte_aware);
    for (size_t p = 0; p < plan.size(); ++p) {
      const auto it = std::find_if(in.rates.begin(), in.rates.end(),
                                   [&](const KeyRate& kr) { return kr.key == plan.key(p); });
      const size_t i = static_cast<size_t>(it - in.rates.begin());
      const std::optional<KeyEstimate> e = EstimateKey(in.rates, in.tokens, in.config, i);
      REQUIRE(e.has_value());
      CHECK(e->k == plan.destinations(p).size());
      CHECK(e->reusable == plan.reusable_tokens(p));
      CHECK(e->saved == plan.saved_work(p));
      CHECK(e->work == Approx(plan.work(p)));
      CHECK(e->cost == e->reusable * e->k);
      CHECK(e->measured == (in.tokens[i].reusable >= 0));
      ++admitted;
    }
  }
  CHECK(admitted > 100);
  // nullopt without a budget, without sizes, for an index out of range, or with none measured.
  const std::vector<KeyRate> rates = {{1, 1}};
  const std::vector<KeyTokens> tokens = {{10, 20}};
  const PlanConfig bytes{
      .destinations = 1, .q_cap = 1, .slots_per_destination = 1, .kv_budget_tokens = 100};
  CHECK(EstimateKey(rates, tokens, bytes, 0).has_value());
  CHECK_FALSE(EstimateKey(rates, tokens, {.destinations = 1, .q_cap = 1}, 0).has_value());
  CHECK_FALSE(EstimateKey(rates, {}, bytes, 0).has_value());
  CHECK_FALSE(EstimateKey(rates, tokens, bytes, 1).has_value());
  CHECK_FALSE(EstimateKey(rates, std::vector<KeyTokens>(1), bytes, 0).has_value());
}

}  // namespace
}  // namespace cacheroute::planner
