// The study layer (tools/sim/study/study.h, fleet_runner.h): the built-in studies, study files,
// flag lists, the drift walk and churn, the whale injection, and that a sweep's result does not
// depend on the number of threads, with a fake run function and with the real fleet.
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tools/sim/study/capacity.h"
#include "tools/sim/study/fleet_runner.h"
#include "tools/sim/study/study.h"

namespace cacheroute::sim::study {
namespace {

TEST_CASE("the built-in studies are valid and follow the paper", "[study]") {
  for (const std::string& name : StudyNames()) {
    INFO(name);
    absl::StatusOr<StudyConfig> c = FindStudy(name);
    REQUIRE(c.ok());
    CHECK(c->name == name);
    CHECK(ValidateStudy(*c).ok());
  }
  const StudyConfig primary = *FindStudy("primary");
  CHECK(primary.policies ==
        std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap", "preble", "cacheroute",
                                 "cacheroute-replan-10s", "cacheroute-sticky-lpt"});
  // One plan, held for the run (the paper's tables come from fixed tables; docs/simulator.md).
  CHECK(primary.fleet.max_plans == 1);
  CHECK(primary.fleet.control_interval_s < primary.fleet.warmup_s);
  CHECK(primary.profile == "llama-70b-fp8-tp2-h100");
  CHECK(primary.destinations == 30);
  CHECK(primary.workload.top_k == 128);
  CHECK(primary.loads == Ladder70B());
  const StudyConfig ablation = *FindStudy("ablation");
  CHECK(ablation.profile == "llama-8b-h100");
  CHECK(ablation.loads == Ladder8B());
  CHECK(ablation.policies == std::vector<std::string>{"flat", "affinity", "replication", "lpt"});
  CHECK(ablation.whales.count > 0);
  const StudyConfig drift = *FindStudy("drift");
  CHECK(drift.drift.enabled);
  CHECK(drift.drift.intervals == 6);
  CHECK(drift.drift.sigma == 0.3);
  CHECK_FALSE(FindStudy("nope").ok());
}

TEST_CASE("validation names the field and the value", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.loads = {60, 30};
  absl::Status s = ValidateStudy(c);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "loads must be strictly ascending, got 60,30");
  c = *FindStudy("primary");
  c.policies = {"flat-lb", "roundrobin"};
  CHECK(std::string(ValidateStudy(c).message()).find("\"roundrobin\"") != std::string::npos);
  c = *FindStudy("primary");
  c.seeds = {2, 2};
  CHECK(std::string(ValidateStudy(c).message()).find("seeds must be distinct") == 0);
}

TEST_CASE("a study file starts from a base and overrides fields", "[study]") {
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(R"(
base: primary
name: small
policies: [flat-lb, cacheroute]
loads: [30, 60]
seeds: [7]
duration_s: 20
workload: {top_k: 64, arrival: poisson}
fleet: {control_interval_s: 5, queue_cap: 100}
)",
                                                 "small.yaml");
  REQUIRE(c.ok());
  CHECK(c->name == "small");
  CHECK(c->profile == "llama-70b-fp8-tp2-h100");  // from the base
  CHECK(c->policies == std::vector<std::string>{"flat-lb", "cacheroute"});
  CHECK(c->loads == std::vector<double>{30, 60});
  CHECK(c->seeds == std::vector<uint64_t>{7});
  CHECK(c->duration_s == 20);
  CHECK(c->workload.top_k == 64);
  CHECK(c->workload.arrivals.process == workload::ArrivalProcess::kPoisson);
  CHECK(c->fleet.control_interval_s == 5);
  CHECK(c->fleet.queue_cap == 100);

  absl::StatusOr<StudyConfig> unknown =
      ParseStudyYaml("base: primary\nfleet: {qcap: 3}\n", "f.yaml");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() == "f.yaml: fleet.qcap: unknown field");
  absl::StatusOr<StudyConfig> bad = ParseStudyYaml("base: primary\nduration_s: soon\n", "f.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "f.yaml: duration_s: not a valid value: \"soon\"");
  absl::StatusOr<StudyConfig> base = ParseStudyYaml("base: tertiary\n", "f.yaml");
  REQUIRE_FALSE(base.ok());
  CHECK(std::string(base.status().message()).find("\"tertiary\"") != std::string::npos);
  CHECK_FALSE(ParseStudyYaml("[1, 2]", "f.yaml").ok());
}

TEST_CASE("flag lists name the flag and the bad item", "[study]") {
  CHECK(*ParseNumberList("30, 60,100", "--loads") == std::vector<double>{30, 60, 100});
  CHECK(*ParseSeedList("2,3,4", "--seeds") == std::vector<uint64_t>{2, 3, 4});
  absl::StatusOr<std::vector<uint64_t>> seeds = ParseSeedList("1,x", "--seeds");
  REQUIRE_FALSE(seeds.ok());
  CHECK(seeds.status().message() == "--seeds: bad seed \"x\" in \"1,x\"");
  CHECK_FALSE(ParseNumberList("30,,60", "--loads").ok());
  CHECK_FALSE(ParseNumberList("nan", "--loads").ok());
}

// A fake run: metrics are a pure function of the spec.
absl::StatusOr<RunRecord> FakeRun(const RunSpec& spec) {
  RunRecord r;
  const double policy = static_cast<double>(spec.policy.size());
  r.ttft_p99_s = spec.offered_qps / (10 * policy) + 0.01 * spec.seed;
  r.kv_hit = 0.5 + 0.01 * policy;
  r.requests = static_cast<uint64_t>(spec.offered_qps * 10);
  r.simulated_requests = r.requests;
  return r;
}

TEST_CASE("a sweep is ordered by (policy, load, seed) whatever the thread count", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.seeds = {4, 2, 3};  // as listed, not sorted
  const absl::StatusOr<StudyResult> one = RunStudy(c, FakeRun, {.jobs = 1});
  std::ostringstream progress;
  const absl::StatusOr<StudyResult> two = RunStudy(c, FakeRun, {.jobs = 2, .progress = &progress});
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(one->runs.size() == c.policies.size() * 10 * 3);
  REQUIRE(two->runs.size() == one->runs.size());
  for (size_t i = 0; i < one->runs.size(); ++i) {
    const RunRecord& a = one->runs[i];
    const RunRecord& b = two->runs[i];
    CHECK(a.policy == c.policies[i / 30]);
    CHECK(a.offered_qps == c.loads[(i / 3) % 10]);
    CHECK(a.seed == c.seeds[i % 3]);
    CHECK(a.study == "primary");
    CHECK((a.policy == b.policy && a.offered_qps == b.offered_qps && a.seed == b.seed));
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
  }
  const std::string n = std::to_string(one->runs.size());
  const std::string last = "[" + n + "/" + n + "]";
  CHECK(progress.str().find(last) != std::string::npos);
  CHECK(two->simulated_requests == one->simulated_requests);
}

TEST_CASE("a failing run fails the sweep, naming the run", "[study]") {
  StudyConfig c = *FindStudy("ablation");
  auto run = [](const RunSpec& spec) -> absl::StatusOr<RunRecord> {
    if (spec.policy == "replication" && spec.offered_qps == 240) {
      return absl::InternalError("boom");
    }
    return FakeRun(spec);
  };
  for (unsigned jobs : {1u, 2u}) {
    const absl::StatusOr<StudyResult> r = RunStudy(c, run, {.jobs = jobs});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "study ablation, policy replication, 240 QPS, seed 2: boom");
  }
}

TEST_CASE("the drift walk keeps the total rate and starts at 1", "[study]") {
  const std::vector<double> base = {5, 3, 1, 1, 0.5};
  const DriftOptions drift{.enabled = true, .intervals = 6, .sigma = 0.3};
  const auto m = DriftMultipliers(base, drift, 3);
  REQUIRE(m.size() == 6);
  for (double x : m[0]) CHECK(x == 1.0);
  for (const auto& row : m) {
    double total = 0;
    for (size_t k = 0; k < base.size(); ++k) total += base[k] * row[k];
    CHECK(total == Approx(10.5));
  }
  CHECK(m[1] != m[2]);
  CHECK(DriftMultipliers(base, drift, 3) == m);
  CHECK(DriftMultipliers(base, drift, 4) != m);
}

TEST_CASE("drift churn: none without drift, some with it", "[study]") {
  StudyConfig c = *FindStudy("drift");
  c.drift.sigma = 0;
  absl::StatusOr<DriftResult> still = ComputeDriftChurn(c, 160, 2);
  REQUIRE(still.ok());
  REQUIRE(still->transitions.size() == 5);
  CHECK(still->mean_cache_churn == 0);
  CHECK(still->transitions[0].jaccard_churn == 0);
  CHECK(still->transitions[0].stale_imbalance == Approx(still->transitions[0].fresh_imbalance));
  c.drift.sigma = 0.3;
  absl::StatusOr<DriftResult> moving = ComputeDriftChurn(c, 160, 2);
  REQUIRE(moving.ok());
  CHECK(moving->mean_cache_churn > 0.1);
  CHECK(moving->mean_cache_churn <= 1);
  for (const DriftTransition& t : moving->transitions) {
    CHECK(t.count_churn <= t.cache_churn);
    CHECK(t.stale_imbalance >= 1);
  }
}

TEST_CASE("whales carry their share of the load and share no block", "[study]") {
  StudyConfig c = *FindStudy("ablation");
  c.duration_s = 60;
  c.fleet.warmup_s = 0;
  absl::StatusOr<workload::Workload> w = BuildRunWorkload(c, 100, 2);
  REQUIRE(w.ok());
  size_t whales = 0;
  std::set<uint64_t> whale_blocks, other_blocks;
  for (size_t i = 0; i < w->requests.size(); ++i) {
    const workload::Request& r = w->requests[i];
    if (i > 0) CHECK(r.arrival_s >= w->requests[i - 1].arrival_s);
    const bool whale = r.key.starts_with("whale-");
    whales += whale;
    (whale ? whale_blocks : other_blocks).insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  const double share = static_cast<double>(whales) / w->requests.size();
  CHECK(share == Approx(c.whales.share).margin(0.08));
  size_t shared = 0;
  for (uint64_t id : whale_blocks) shared += other_blocks.contains(id);
  CHECK(shared == 0);
  absl::StatusOr<workload::Workload> again = BuildRunWorkload(c, 100, 2);
  REQUIRE(again->requests.size() == w->requests.size());
  CHECK(again->requests.back().hash_ids == w->requests.back().hash_ids);
}

TEST_CASE("the real fleet: the same seed gives the same result on 1 or 2 threads", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.policies = {"flat-lb", "cacheroute"};
  c.loads = {60};
  c.seeds = {2, 3};
  c.duration_s = 20;
  c.fleet.warmup_s = 10;
  c.workload.warmup_s = 0;
  const absl::StatusOr<StudyResult> one = RunStudy(c, MakeFleetRunner(), {.jobs = 1});
  const absl::StatusOr<StudyResult> two = RunStudy(c, MakeFleetRunner(), {.jobs = 2});
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(one->runs.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    const RunRecord& a = one->runs[i];
    const RunRecord& b = two->runs[i];
    CHECK(a.requests > 0);
    CHECK(a.requests == b.requests);
    CHECK(a.completed == b.completed);
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
    CHECK(a.e2e_p99_s == b.e2e_p99_s);
    CHECK(a.kv_hit == b.kv_hit);
    CHECK(a.imbalance == b.imbalance);
  }
  CHECK(one->runs[0].ttft_p99_s != one->runs[1].ttft_p99_s);  // seeds differ
}

TEST_CASE("policy labels map onto the fleet", "[study]") {
  const StudyConfig c = *FindStudy("ablation");
  CHECK(MakeFleetConfig(c, "flat", 60, 2)->policy == PolicyKind::kFlatLb);
  CHECK(MakeFleetConfig(c, "affinity", 60, 2)->ablation == PlanAblation::kAffinityOnly);
  CHECK(MakeFleetConfig(c, "replication", 60, 2)->ablation == PlanAblation::kReplication);
  CHECK(MakeFleetConfig(c, "lpt", 60, 2)->ablation == PlanAblation::kFull);
  CHECK(MakeFleetConfig(c, "preble", 60, 2)->policy == PolicyKind::kPreble);
  CHECK_FALSE(MakeFleetConfig(c, "stale", 60, 2).ok());  // not a drift study
  const StudyConfig d = *FindStudy("drift");
  CHECK(MakeFleetConfig(d, "stale", 160, 2)->control_interval_s == 50);
  CHECK(MakeFleetConfig(d, "fresh", 160, 2)->control_interval_s == d.fleet.control_interval_s);
  const absl::StatusOr<FleetConfig> held = MakeFleetConfig(d, "held", 160, 2);
  REQUIRE(held.ok());
  CHECK(held->max_plans == 1);
  CHECK(held->control_interval_s == d.fleet.warmup_s);
  CHECK_FALSE(MakeFleetConfig(c, "held", 60, 2).ok());  // not a drift study
  const StudyConfig p = *FindStudy("primary");
  CHECK(MakeFleetConfig(p, "cacheroute", 100, 2)->max_plans == 1);
  const absl::StatusOr<FleetConfig> replan = MakeFleetConfig(p, "cacheroute-replan-10s", 100, 2);
  CHECK(replan->control_interval_s == 10);
  CHECK(replan->max_plans == 0);
  CHECK(replan->stickiness == 0);
  const absl::StatusOr<FleetConfig> sticky = MakeFleetConfig(p, "cacheroute-sticky-lpt", 100, 2);
  CHECK(sticky->control_interval_s == 10);
  CHECK(sticky->stickiness > 0);
  CHECK(MakeFleetConfig(d, "fresh-sticky", 160, 2)->stickiness == sticky->stickiness);
}

}  // namespace
}  // namespace cacheroute::sim::study
