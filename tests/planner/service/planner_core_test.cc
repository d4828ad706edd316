// Tests for planner/service/planner_core: versioning, history, membership, Explain, and
// concurrent use (run under ThreadSanitizer in CI). No gRPC here; time is a ManualClock.
#include "planner/service/planner_core.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "planner/key_id.h"
#include "planner/service/control_schedule.h"

namespace cacheroute::service {
namespace {

PlannerConfig Config() {
  PlannerConfig config;
  config.gate_enabled = false;  // routing by the table from the first plan; the gate's own tests turn it on
  config.destinations = {"d0", "d1", "d2"};
  config.q_cap = 1000;
  config.slots_per_destination = 1;  // C = 3
  // Algorithm 1 exactly: these tests pin its tables (the default adds spills and splits keys).
  config.algorithm = "cacheroute-paper";
  config.rate_smoothing = absl::Seconds(1);
  config.history = 3;
  return config;
}

// Config() with the rollout gate on.
PlannerConfig GatedConfig() {
  PlannerConfig config = Config();
  config.gate_enabled = true;
  return config;
}

planner::RateReport Report(const std::string& gateway, uint64_t sequence,
                           const std::vector<std::pair<std::string, double>>& counts) {
  planner::RateReport report;
  report.gateway_id = gateway;
  report.sequence = sequence;
  report.window_start_unix_ms = 1;
  report.window_end_unix_ms = 2;
  for (const auto& [key, count] : counts) {
    report.counts.push_back(
        {.key_id = KeyId(key), .count = count, .prompt_tokens = std::nullopt, .key = key,
         .served_at = {}});
  }
  return report;
}

struct Harness {
  base::ManualClock clock{absl::FromUnixSeconds(1'800'000'000)};
  std::unique_ptr<PlannerCore> core;
  explicit Harness(PlannerConfig config = Config()) {
    auto created = PlannerCore::Create(config, &clock);
    REQUIRE(created.ok());
    core = *std::move(created);
  }
  PlanOutcome Replan() {
    clock.Advance(absl::Seconds(100));
    absl::StatusOr<PlanOutcome> outcome = core->Replan();
    REQUIRE(outcome.ok());
    return *outcome;
  }
  // The next report of gateway "gw", with `evidence` and `counts`.
  void ReportWith(std::optional<planner::EvidenceReport> evidence,
                  const std::vector<std::pair<std::string, double>>& counts = {
                      {"a", 500}, {"b", 400}, {"c", 300}}) {
    planner::RateReport r = Report("gw", ++sequence, counts);
    r.evidence = std::move(evidence);
    REQUIRE(core->ReportRates(r).ok());
  }
  uint64_t sequence = 0;
};

// Evidence of `n` requests per arm at the split `fraction`: TTFTs of `table_s` and `control_s`.
planner::EvidenceReport Evidence(double fraction, uint64_t n, double table_s, double control_s) {
  planner::EvidenceReport e;
  e.table_fraction = fraction;
  for (auto [arm, seconds] : {std::pair{&e.table, table_s}, {&e.control, control_s}}) {
    dataplane::TtftHistogram h;
    for (uint64_t i = 0; i < n; ++i) h.Observe(seconds * (0.5 + static_cast<double>(i % 100) / 100));
    arm->requests = n;
    arm->ttft_bucket_counts.assign(h.counts().begin(), h.counts().end());
  }
  return e;
}

TEST_CASE("with the gate on, tables carry its rollout and the gateways' evidence decides it") {
  PlannerConfig config = GatedConfig();
  config.gate.min_samples = 200;
  config.gate.promote_after = 2;
  Harness h(config);
  auto report = [&](std::optional<planner::EvidenceReport> evidence) { h.ReportWith(evidence); };
  report(std::nullopt);
  PlanOutcome first = h.Replan();  // shadow's one interval ends at once
  REQUIRE(first.gate.has_value());
  REQUIRE(h.core->Latest()->rollout().has_value());
  CHECK(h.core->Latest()->rollout()->state == "canary");
  CHECK(h.core->Latest()->table_fraction() == config.gate.canary_fraction);

  // Too few samples: nothing is decided, the table stays where it is.
  report(Evidence(0.2, 50, 0.1, 0.1));
  CHECK_FALSE(h.Replan().gate->changed);
  CHECK(h.core->Latest()->rollout()->state == "canary");
  // Evidence of another split (an older table) is not counted.
  report(Evidence(0.05, 5000, 0.1, 0.1));
  CHECK(h.Replan().gate->verdict.kind == planner::Verdict::kTooFewSamples);

  // An equal canary, twice: promoted, and the new split is published as a new version.
  const table::TableVersion canary_version = h.core->Latest()->version();
  report(Evidence(0.2, 2000, 0.1, 0.1));
  CHECK_FALSE(h.Replan().gate->changed);
  report(Evidence(0.2, 2000, 0.1, 0.1));
  const PlanOutcome promoted = h.Replan();
  CHECK(promoted.gate->changed);
  CHECK(promoted.changed);
  CHECK(promoted.version.number > canary_version.number);
  CHECK(h.core->Latest()->rollout()->state == "enabled");
  CHECK(h.core->Latest()->table_fraction() == 1 - config.gate.control_fraction);

  // The table arm turns slow: rolled back after rollback_after (2) worse decisions.
  const double enabled = h.core->Latest()->table_fraction();
  report(Evidence(enabled, 2000, 3.0, 0.1));
  CHECK_FALSE(h.Replan().gate->changed);
  report(Evidence(enabled, 2000, 3.0, 0.1));
  const PlanOutcome rolled_back = h.Replan();
  CHECK(rolled_back.gate->changed);
  CHECK(h.core->Latest()->rollout()->state == "rolled_back");
  CHECK(h.core->Latest()->table_fraction() == 0);
}

// GatedConfig() whose canary is promoted on its first equal decision.
PlannerConfig QuickGateConfig() {
  PlannerConfig config = GatedConfig();
  config.gate.min_samples = 200;
  config.gate.promote_after = 1;
  return config;
}

TEST_CASE("with a gate_interval the gate decides between planning steps, on the latest table") {
  Harness h(QuickGateConfig());
  auto report = [&](std::optional<planner::EvidenceReport> evidence) { h.ReportWith(evidence); };
  // Before the first table there is nothing to decide, and the evidence waits for the first step.
  report(std::nullopt);
  const absl::StatusOr<PlanOutcome> early = h.core->ObserveGate();
  REQUIRE(early.ok());
  CHECK_FALSE(early->gate.has_value());
  CHECK(h.core->Latest() == nullptr);
  const PlanOutcome first = h.Replan();
  CHECK(first.planned);
  REQUIRE(h.core->Latest()->rollout()->state == "canary");
  const uint64_t plans = h.core->counters().plans;

  // An equal canary between planning steps: promoted at once, the same plan under a new version.
  report(Evidence(0.2, 2000, 0.1, 0.1));
  const table::TableVersion canary = h.core->Latest()->version();
  const absl::StatusOr<PlanOutcome> promoted = h.core->ObserveGate();
  REQUIRE(promoted.ok());
  REQUIRE(promoted->gate.has_value());
  CHECK(promoted->gate->changed);
  CHECK(promoted->changed);
  CHECK_FALSE(promoted->planned);
  CHECK(promoted->version.number == canary.number + 1);
  CHECK(h.core->Latest()->rollout()->state == "enabled");
  CHECK(h.core->counters().plans == plans);  // no plan was built

  // Nothing new reported: the gate keeps its state and nothing is published.
  const absl::StatusOr<PlanOutcome> quiet = h.core->ObserveGate();
  REQUIRE(quiet.ok());
  CHECK_FALSE(quiet->changed);

  Harness ungated;
  CHECK(ungated.core->ObserveGate().status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("max_plans: Replan keeps the last plan, still closing intervals and deciding the gate") {
  PlannerConfig config = QuickGateConfig();
  config.max_plans = 1;
  Harness h(config);
  auto report = [&](const std::vector<std::pair<std::string, double>>& counts,
                    std::optional<planner::EvidenceReport> evidence) {
    h.ReportWith(evidence, counts);
  };
  report({{"a", 500}, {"b", 400}, {"c", 300}}, std::nullopt);
  CHECK(h.Replan().planned);
  const std::shared_ptr<const table::TableSnapshot> held = h.core->Latest();
  REQUIRE(held->Find(KeyId("a")) != nullptr);

  // New keys take over: without the hold they would be planned; with it the table stays.
  report({{"x", 5000}, {"y", 4000}, {"z", 3000}}, std::nullopt);
  const PlanOutcome kept = h.Replan();
  CHECK_FALSE(kept.planned);
  CHECK_FALSE(kept.changed);
  CHECK(h.core->counters().plans == 1);
  CHECK(h.core->Latest() == held);
  // The rate interval closed all the same (Explain sees the new key's rate).
  CHECK(h.core->Explain(KeyId("x")).rate() > 0);

  // The gate still decides: a promotion publishes the held plan with the new split.
  report({{"x", 5000}}, Evidence(0.2, 2000, 0.1, 0.1));
  const PlanOutcome promoted = h.Replan();
  CHECK_FALSE(promoted.planned);
  CHECK(promoted.changed);
  CHECK(h.core->Latest()->rollout()->state == "enabled");
  CHECK(h.core->Latest()->SameRouting(*held->WithRollout(h.core->Latest()->rollout())));
}

TEST_CASE("the ablations of Algorithm 1 are config: one destination per key, hashed placement") {
  PlannerConfig config = Config();
  config.q_cap = 2;  // "a" (5/s over the 100 s interval) needs k = 3 under replication
  config.slots_per_destination = 4;
  Harness replicated(config);
  REQUIRE(replicated.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 40}})).ok());
  replicated.Replan();
  CHECK(replicated.core->Latest()->Find(KeyId("a"))->destinations.size() == 3);

  config.replicate = false;
  config.placement = "hashed";
  config.placement_seed = 7;
  Harness affinity(config);
  REQUIRE(affinity.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 40}})).ok());
  affinity.Replan();
  CHECK(affinity.core->Latest()->Find(KeyId("a"))->destinations.size() == 1);
  CHECK(affinity.core->Latest()->Find(KeyId("b"))->destinations.size() == 1);

  config.placement = "random";
  CHECK(PlannerCore::Create(config, &affinity.clock).status().message().find("placement") !=
        std::string_view::npos);
}

TEST_CASE("the control schedule: plan steps every interval, gate steps between them") {
  ControlSchedule schedule(absl::Seconds(30), absl::Seconds(10));
  std::vector<std::pair<int64_t, ControlSchedule::Step>> steps;
  while (schedule.next() <= absl::Seconds(60)) {
    const int64_t at = absl::ToInt64Seconds(schedule.next());
    steps.push_back({at, schedule.Take()});
  }
  using enum ControlSchedule::Step;
  CHECK(steps == std::vector<std::pair<int64_t, ControlSchedule::Step>>{
                     {10, kGate}, {20, kGate}, {30, kPlan}, {40, kGate}, {50, kGate}, {60, kPlan}});
  ControlSchedule plain(absl::Seconds(10), absl::ZeroDuration());
  CHECK(plain.Take() == kPlan);
  CHECK(plain.next() == absl::Seconds(20));
  plain.Restart(absl::Seconds(95));
  CHECK(plain.next() == absl::Seconds(105));
}

TEST_CASE("without the gate, tables carry no rollout") {
  Harness h;
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 500}})).ok());
  const PlanOutcome outcome = h.Replan();
  CHECK_FALSE(outcome.gate.has_value());
  CHECK_FALSE(h.core->Latest()->rollout().has_value());
  CHECK(h.core->Latest()->table_fraction() == 1.0);
}

TEST_CASE("the epoch is the start time and numbers grow only when the routing changes") {
  Harness h;
  CHECK(h.core->Latest() == nullptr);
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 400}, {"c", 300}})).ok());
  const PlanOutcome first = h.Replan();
  CHECK(first.changed);
  CHECK(first.version.epoch == 1'800'000'000);
  CHECK(first.version.number == 1);
  REQUIRE(h.core->ReportRates(Report("gw", 2, {{"a", 500}, {"b", 400}, {"c", 300}})).ok());
  CHECK_FALSE(h.Replan().changed);
  CHECK(h.core->Latest()->version().number == 1);
  // Same ranking, same routing, but 3% more traffic: within the 5% load drift, no new version.
  REQUIRE(h.core->ReportRates(Report("gw", 3, {{"a", 515}, {"b", 412}, {"c", 309}})).ok());
  CHECK_FALSE(h.Replan().changed);
  // Twice the traffic: the expected loads moved, so the table is republished.
  REQUIRE(h.core->ReportRates(Report("gw", 4, {{"a", 1000}, {"b", 800}, {"c", 600}})).ok());
  const PlanOutcome doubled = h.Replan();
  CHECK(doubled.changed);
  CHECK(doubled.version.number == 2);
  CHECK(h.core->Latest()->SameRouting(**h.core->Get({first.version.epoch, 1})));
}

TEST_CASE("history keeps the last versions; older ones are NotFound, naming what is kept") {
  Harness h;
  for (uint64_t round = 0; round < 5; ++round) {
    // A new hottest key every round changes the routing.
    REQUIRE(h.core
                ->ReportRates(Report("gw", round + 1,
                                     {{"k" + std::to_string(round), 900}, {"a", 10}, {"b", 5}}))
                .ok());
    REQUIRE(h.Replan().changed);
  }
  CHECK(h.core->Get({1'800'000'000, 5}).ok());
  CHECK(h.core->Get({1'800'000'000, 3}).ok());
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> gone =
      h.core->Get({1'800'000'000, 2});
  CHECK(gone.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(gone.status().message()), Catch::Contains("1800000000.2"));
  CHECK((*h.core->Get({}))->version().number == 5);  // zero: the latest
}

TEST_CASE("Explain says where a key is, or why it is not admitted") {
  Harness h;
  REQUIRE(
      h.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 400}, {"c", 300}, {"d", 200}})).ok());
  h.Replan();
  const v1::ExplainResponse a = h.core->Explain(KeyId("a"));
  CHECK(a.admitted());
  CHECK(a.rank() == 1);
  CHECK(a.key() == "a");
  CHECK(a.k() == 1);
  CHECK(a.rate() == Approx(5.0).epsilon(1e-3));
  REQUIRE(a.destinations_size() == 1);
  CHECK(a.expected_loads_size() == 1);
  const v1::ExplainResponse d = h.core->Explain(KeyId("d"));
  CHECK_FALSE(d.admitted());
  CHECK(d.rank() == 4);
  CHECK_THAT(d.reason(), Catch::Contains("slots exhausted"));
  const v1::ExplainResponse unknown = h.core->Explain(KeyId("never-seen"));
  CHECK_FALSE(unknown.known());
  CHECK_THAT(unknown.reason(), Catch::Contains("unknown key"));
}

TEST_CASE("membership: drains keep indices, the last destination cannot be drained") {
  Harness h;
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 400}})).ok());
  h.Replan();
  REQUIRE(h.core->Drain("d0", false).ok());
  REQUIRE(h.core->Drain("d1", false).ok());
  for (const table::TableEntry& e : h.core->Latest()->entries()) {
    CHECK(e.destinations == std::vector<uint32_t>{2});
  }
  CHECK(h.core->Drain("d2", false).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(h.core->Drain("nope", false).status().code() == absl::StatusCode::kInvalidArgument);
  // A new membership keeps d1 drained; d3 is new and active.
  REQUIRE(h.core->SetDestinations({"d1", "d2", "d3"}).ok());
  const v1::GetStatusResponse status = h.core->Status();
  REQUIRE(status.destinations_size() == 3);
  CHECK(status.drained(0));
  CHECK_FALSE(status.drained(1));
  CHECK_FALSE(status.drained(2));
  CHECK(h.core->SetDestinations({"x", "x"}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(h.core->SetDestinations({}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("concurrent reports, replans, membership changes and readers") {
  Harness h;
  std::atomic<bool> stop{false};
  std::mutex seen_mu;
  std::vector<uint64_t> seen;
  const uint64_t listener = h.core->AddListener([&](std::shared_ptr<const table::TableSnapshot> s) {
    std::lock_guard<std::mutex> lock(seen_mu);
    seen.push_back(s->version().number);
  });
  // Catch2 assertions are not thread-safe: threads count failures, the test thread checks them.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int g = 0; g < 3; ++g) {
    threads.emplace_back([&, g] {
      for (uint64_t seq = 1; seq <= 300; ++seq) {
        const std::string hot = "hot-" + std::to_string((seq / 10 + g) % 7);
        auto result = h.core->ReportRates(
            Report("gw-" + std::to_string(g), seq, {{hot, 1000.0}, {"warm", 10.0 + g}}));
        if (!result.ok()) ++failures;
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop) {
      h.clock.Advance(absl::Seconds(10));
      if (!h.core->Replan().ok()) ++failures;
    }
  });
  threads.emplace_back([&] {
    while (!stop) {
      h.core->Status();
      h.core->Explain(KeyId("warm"));
      if (auto latest = h.core->Latest()) h.core->Get(latest->version()).IgnoreError();
      h.core->RecordAck("gw-0", {1, 1});
    }
  });
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) {
      if (!h.core->Drain("d1", i % 2 == 1).ok()) ++failures;
    }
  });
  for (int i = 0; i < 4; ++i) threads[i == 3 ? 5 : i].join();  // reporters and the drainer
  stop = true;
  threads[3].join();
  threads[4].join();
  h.core->RemoveListener(listener);
  CHECK(failures == 0);
  const PlannerCore::Counters counters = h.core->counters();
  CHECK(counters.reports_accepted == 900);
  std::lock_guard<std::mutex> lock(seen_mu);
  REQUIRE_FALSE(seen.empty());
  // Listeners saw every published version, in order.
  for (size_t i = 1; i < seen.size(); ++i) CHECK(seen[i] == seen[i - 1] + 1);
  CHECK(seen.back() == h.core->Latest()->version().number);
}

// 6 destinations of 10 slots each, for the 60 keys of SixtyKeys: every key admitted with k_b = 1.
PlannerConfig SixDestinations(double stickiness) {
  PlannerConfig config = Config();
  config.destinations = {"d0", "d1", "d2", "d3", "d4", "d5"};
  config.slots_per_destination = 10;
  config.placement_stickiness = stickiness;
  return config;
}

// key-0 … key-59, 100 + 7·k requests each.
std::vector<std::pair<std::string, double>> SixtyKeys() {
  std::vector<std::pair<std::string, double>> counts;
  for (int k = 0; k < 60; ++k) counts.emplace_back("key-" + std::to_string(k), 100.0 + 7 * k);
  return counts;
}

TEST_CASE("placement hysteresis keeps keys where they were when rates wobble") {
  // 60 keys on 6 destinations, every key admitted with k_b = 1. The second interval changes every
  // rate by up to ±20%, which reshuffles from-scratch LPT; with stickiness the keys stay put.
  auto run = [](double stickiness) {
    Harness h(SixDestinations(stickiness));
    std::vector<std::pair<std::string, double>> counts = SixtyKeys();
    REQUIRE(h.core->ReportRates(Report("gw", 1, counts)).ok());
    h.Replan();
    const auto first = h.core->Latest();
    for (size_t k = 0; k < counts.size(); ++k) counts[k].second *= k % 2 == 0 ? 1.2 : 0.8;
    REQUIRE(h.core->ReportRates(Report("gw", 2, counts)).ok());
    h.Replan();
    const auto second = h.core->Latest();
    size_t moved = 0;
    for (const auto& [key, count] : counts) {
      const table::TableEntry* a = first->Find(KeyId(key));
      const table::TableEntry* b = second->Find(KeyId(key));
      REQUIRE(a != nullptr);
      REQUIRE(b != nullptr);
      if (a->destinations != b->destinations) ++moved;
    }
    return std::pair<size_t, double>(moved, h.core->Status().imbalance());
  };
  const auto [moved_from_scratch, imbalance_from_scratch] = run(0.0);
  const auto [moved_sticky, imbalance_sticky] = run(0.1);
  INFO("moved from scratch " << moved_from_scratch << ", sticky " << moved_sticky);
  CHECK(moved_from_scratch > 20);
  CHECK(moved_sticky < moved_from_scratch / 2);
  CHECK(imbalance_sticky <= 1.1 + 0.05);
  CHECK(imbalance_from_scratch <= imbalance_sticky + 1e-9);
}

TEST_CASE("the plan follows the cache: admitted keys go where the gateways served them") {
  // Three keys on three destinations, two reported served where plain LPT would not put them
  // (LPT gives a, b, c the destinations d0, d1, d2 in that order). A cap of 3 × the mean load
  // (stickiness 2) lets every hint be kept.
  auto plan = [](bool follow) {
    PlannerConfig config = Config();
    config.follow_served = follow;
    config.placement_stickiness = 2;
    Harness h(config);
    planner::RateReport report = Report("gw", 1, {{"a", 300}, {"b", 200}, {"c", 100}});
    report.counts[0].served_at = "d2";
    report.counts[1].served_at = "d0";
    report.counts[2].served_at = "unknown";  // not a destination: no hint
    REQUIRE(h.core->ReportRates(report).ok());
    h.Replan();
    return h.core->Latest();
  };
  const auto followed = plan(true);
  CHECK(followed->Find(KeyId("a"))->destinations == std::vector<uint32_t>{2});
  CHECK(followed->Find(KeyId("b"))->destinations == std::vector<uint32_t>{0});
  CHECK(followed->Find(KeyId("c"))->destinations == std::vector<uint32_t>{1});
  const auto blind = plan(false);
  CHECK(blind->Find(KeyId("a"))->destinations != std::vector<uint32_t>{2});
}

TEST_CASE("membership changes move only the keys of a destination that left") {
  // 60 keys on 6 destinations with k_b = 1, as above, with stickiness.
  Harness h(SixDestinations(0.1));
  const std::vector<std::pair<std::string, double>> counts = SixtyKeys();
  REQUIRE(h.core->ReportRates(Report("gw", 1, counts)).ok());
  h.Replan();
  const auto first = h.core->Latest();
  const auto names_of = [](const table::TableSnapshot& t, const std::string& key) {
    std::vector<std::string> out;
    for (uint32_t d : t.Find(KeyId(key))->destinations) out.push_back(t.destinations()[d]);
    return out;
  };

  // The same members in another order: nothing changes, no new version.
  absl::StatusOr<PlanOutcome> same = h.core->SetDestinations({"d5", "d4", "d3", "d2", "d1", "d0"});
  REQUIRE(same.ok());
  CHECK_FALSE(same->changed);
  CHECK(h.core->Latest()->version() == first->version());

  // d3 leaves and d6 joins (listed first): survivors keep their order, d6 is appended, and every
  // key that was not on d3 stays where it was.
  h.clock.Advance(absl::Seconds(100));
  absl::StatusOr<PlanOutcome> changed =
      h.core->SetDestinations({"d6", "d0", "d1", "d2", "d4", "d5"});
  REQUIRE(changed.ok());
  CHECK(changed->changed);
  const auto second = h.core->Latest();
  CHECK(second->destinations() == std::vector<std::string>{"d0", "d1", "d2", "d4", "d5", "d6"});
  size_t moved = 0, on_d3 = 0;
  for (const auto& [key, count] : counts) {
    const std::vector<std::string> before = names_of(*first, key);
    const std::vector<std::string> after = names_of(*second, key);
    if (before == std::vector<std::string>{"d3"}) {
      ++on_d3;
      CHECK(after != before);
    } else if (after != before) {
      ++moved;
    }
  }
  INFO("keys that were on d3: " << on_d3 << ", other keys moved: " << moved);
  CHECK(on_d3 >= 5);
  CHECK(moved <= 6);  // stickiness keeps the rest (a few may move to fill d6)
  CHECK(h.core->Status().imbalance() <= 1.1 + 0.05);
}

}  // namespace
}  // namespace cacheroute::service

namespace cacheroute::service {

TEST_CASE("the default algorithm publishes spill destinations and splits a dominant key") {
  PlannerConfig config = Config();
  config.algorithm = "cacheroute";
  config.slots_per_destination = 4;  // C = 12
  Harness h(config);
  // Total 12 req/s over 3 destinations: mean 4; "a" (6) is above half of it and gets split.
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 600}, {"b", 300}, {"c", 200}, {"d", 100}}))
              .ok());
  h.Replan();
  const std::shared_ptr<const table::TableSnapshot> latest = h.core->Latest();
  REQUIRE(latest != nullptr);
  const table::TableEntry* a = latest->Find(KeyId("a"));
  REQUIRE(a != nullptr);
  CHECK(a->destinations.size() == 3);
  CHECK_FALSE(a->spill.has_value());  // on every destination: nowhere to spill
  const table::TableEntry* d = latest->Find(KeyId("d"));
  REQUIRE(d != nullptr);
  REQUIRE(d->spill.has_value());
  CHECK(*d->spill < 3);
  CHECK(std::find(d->destinations.begin(), d->destinations.end(), *d->spill) ==
        d->destinations.end());
  // The spill survives the wire.
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> back =
      table::TableSnapshot::FromProto(latest->ToProto());
  REQUIRE(back.ok());
  CHECK((*back)->Find(KeyId("d"))->spill == d->spill);
}

TEST_CASE("an unknown algorithm is refused by name") {
  PlannerConfig config = Config();
  config.algorithm = "greedy";
  const absl::Status status = ValidatePlannerConfig(config);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()), Catch::Contains("algorithm") && Catch::Contains("greedy"));
}

}  // namespace cacheroute::service

namespace cacheroute::service {
namespace {

// --- Replicas (HaReplica drives these; docs/ha.md).

TEST_CASE("a refused publish publishes nothing and undoes the membership or gate change") {
  Harness h(GatedConfig());
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 400}})).ok());
  h.Replan();
  const auto before = h.core->Latest();
  REQUIRE(before != nullptr);
  std::atomic<int> notified{0};
  h.core->AddListener([&](std::shared_ptr<const table::TableSnapshot>) { ++notified; });
  std::vector<table::TableVersion> hooked;
  bool refuse = true;
  h.core->SetPublishHook([&](const table::TableSnapshot& t, const v1::PlannerState& meta) {
    hooked.push_back(t.version());
    CHECK(meta.destinations_size() >= 3);
    CHECK_FALSE(meta.has_table());
    return refuse ? absl::FailedPreconditionError("not the leader") : absl::OkStatus();
  });
  const uint64_t published = h.core->counters().versions_published;

  h.clock.Advance(absl::Seconds(100));
  REQUIRE(h.core->ReportRates(Report("gw", 2, {{"c", 900}})).ok());
  CHECK(absl::IsFailedPrecondition(h.core->Replan().status()));
  CHECK(absl::IsFailedPrecondition(h.core->Drain("d0", false).status()));
  CHECK(absl::IsFailedPrecondition(h.core->SetDestinations({"d0", "d1", "d2", "d3"}).status()));
  CHECK(absl::IsFailedPrecondition(h.core->ForceGate("enabled", "test").status()));
  CHECK(hooked.size() == 4);
  for (const auto& v : hooked) CHECK(v.number == before->version().number + 1);
  CHECK(h.core->Latest() == before);
  CHECK(h.core->counters().versions_published == published);
  CHECK(notified == 0);
  const v1::GetStatusResponse status = h.core->Status();
  CHECK(status.destinations_size() == 3);
  CHECK_FALSE(status.drained(0));
  CHECK(status.gate().forced_state().empty());

  refuse = false;
  REQUIRE(h.core->ForceGate("enabled", "test").ok());
  CHECK(h.core->Latest()->version().number == before->version().number + 1);
  CHECK(notified == 1);
}

TEST_CASE("InstallPublished only moves forward and notifies listeners") {
  Harness h;
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 500}})).ok());
  const auto own = h.Replan();
  const auto latest = h.core->Latest();
  std::vector<uint64_t> seen;
  h.core->AddListener(
      [&](std::shared_ptr<const table::TableSnapshot> t) { seen.push_back(t->version().number); });
  CHECK(h.core->InstallPublished(latest->WithVersion({own.version.epoch, 7})));
  CHECK_FALSE(h.core->InstallPublished(latest->WithVersion({own.version.epoch, 7})));
  CHECK_FALSE(h.core->InstallPublished(latest->WithVersion({own.version.epoch, 5})));
  CHECK(h.core->Latest()->version().number == 7);
  CHECK(seen == std::vector<uint64_t>{7});
  CHECK(h.core->Status().plan_unix_ms() == latest->built_unix_ms());
  CHECK(h.core->Get({own.version.epoch, 7}).ok());
  // A planning step numbers onward from the installed version.
  h.clock.Advance(absl::Seconds(100));
  REQUIRE(h.core->ReportRates(Report("gw", 2, {{"b", 900}})).ok());
  CHECK(h.Replan().version.number == 8);
}

TEST_CASE("TakeOver adopts the published table and state and republishes the next version") {
  Harness leader(GatedConfig());
  REQUIRE(leader.core->ReportRates(Report("gw", 1, {{"a", 500}, {"b", 300}})).ok());
  leader.Replan();
  REQUIRE(leader.core->ForceGate("canary", "by hand").ok());
  v1::PlannerState meta;
  leader.core->SetPublishHook([&](const table::TableSnapshot&, const v1::PlannerState& m) {
    meta = m;
    return absl::OkStatus();
  });
  REQUIRE(leader.core->Drain("d2", false).ok());
  const auto published = leader.core->Latest();

  Harness follower(GatedConfig());
  SECTION("a follower that had the table") {
    REQUIRE(follower.core->InstallPublished(published));
  }
  SECTION("a follower that had nothing") {}
  absl::StatusOr<PlanOutcome> outcome = follower.core->TakeOver(published, meta);
  REQUIRE(outcome.ok());
  CHECK(outcome->changed);
  CHECK(outcome->version.epoch == published->version().epoch);
  CHECK(outcome->version.number == published->version().number + 1);
  const v1::GetStatusResponse status = follower.core->Status();
  CHECK(status.gate().forced_state() == "canary");
  REQUIRE(status.drained_size() == 3);
  CHECK(status.drained(2));
  CHECK(follower.core->Latest()->rollout().has_value());
}

TEST_CASE("TakeOver with nothing published plans; ValidateReport counts what it rejects") {
  Harness h;
  REQUIRE(h.core->ReportRates(Report("gw", 1, {{"a", 500}})).ok());
  absl::StatusOr<PlanOutcome> outcome = h.core->TakeOver(nullptr, std::nullopt);
  REQUIRE(outcome.ok());
  CHECK(outcome->changed);
  CHECK(h.core->Latest() != nullptr);

  planner::RateReport bad = Report("gw", 2, {{"a", -1}});
  const absl::Status status = h.core->ValidateReport(bad);
  CHECK(absl::IsInvalidArgument(status));
  CHECK(h.core->counters().reports_rejected.size() == 1);
  CHECK(h.core->ValidateReport(Report("gw", 2, {{"a", 1}})).ok());
  CHECK(h.core->counters().reports_accepted == 1);  // validation applies nothing
}

}  // namespace
}  // namespace cacheroute::service
